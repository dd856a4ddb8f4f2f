// bwplan: GPU memory and throughput planning for LLM training
// SPDX-License-Identifier: Apache-2.0
#pragma once

// Umbrella header: the analytic library without I/O (include <bwplan/io/json.hpp> for loaders).
#include <bwplan/error.hpp>
#include <bwplan/finetune.hpp>
#include <bwplan/hardware.hpp>
#include <bwplan/memory.hpp>
#include <bwplan/model.hpp>
#include <bwplan/moe.hpp>
#include <bwplan/pipeline.hpp>
#include <bwplan/planner.hpp>
#include <bwplan/throughput.hpp>
#include <bwplan/training.hpp>
#include <bwplan/units.hpp>
#include <bwplan/version.hpp>
