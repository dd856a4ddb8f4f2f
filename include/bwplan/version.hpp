// bwplan: GPU memory and throughput planning for LLM training
// SPDX-License-Identifier: Apache-2.0
#pragma once

#define BWPLAN_VERSION_MAJOR 0
#define BWPLAN_VERSION_MINOR 1
#define BWPLAN_VERSION_PATCH 0

namespace bwplan {
/// The library version as "MAJOR.MINOR.PATCH".
inline constexpr const char* version_string = "0.1.0";
}  // namespace bwplan
