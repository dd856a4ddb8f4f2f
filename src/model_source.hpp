// Where a MODEL argument comes from: a config.json path, a folder holding one, the local Hugging Face cache
// (by hub id) or a bundled preset.
// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <bwplan/model.hpp>

#include <filesystem>
#include <string>

namespace bwplan::cli {

/// The model named by `arg`, in this order: an existing file (a config.json) or a folder with a config.json;
/// for a hub id "ORG/NAME", its config.json in the local Hugging Face cache (io::hf_hub_cache_dir); a preset
/// of `configs`/models by name (case-insensitive, the ORG/ part dropped); a preset whose name is the only one
/// to extend the name ("Mixtral-8x7B" → mixtral-8x7b-v0.1). Throws config_error / invalid_request with one
/// line saying where it looked (and, for a hub id, how to download its config).
[[nodiscard]] model_spec find_model(const std::filesystem::path& configs, const std::string& arg);

}  // namespace bwplan::cli
