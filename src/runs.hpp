// bwplan CLI internals: the reader of measured runs (the ground-truth JSON-lines of shared/groundtruth/measure.py and
// the reference trainer's measurement records, docs/calibration.md#records), shared by validate and calibrate.
// SPDX-License-Identifier: Apache-2.0
#pragma once

#include "cli.hpp"

#include <bwplan/calibration.hpp>

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace bwplan::cli {

/// Typed members of one run line (`where` is "FILE:LINE"): a missing or mistyped field is a config_error
/// naming the file, line and field, not a JSON library exception.
struct run_line {
  const nlohmann::json& r;
  const std::string& where;

  const nlohmann::json& field(const char* k) const;
  std::int64_t integer(const char* k) const;
  double number(const char* k) const;
  std::string text(const char* k) const;
  std::string text_or(const char* k, const std::string& fallback) const;
  bool boolean_or(const char* k, bool fallback) const;
  static std::string dump(const nlohmann::json& v);
};

/// What an env line (`"kind": "env"`) says, read by calibrate and validate alike: the catalog GPU its device name
/// contains (`gpu`, unchanged when it names none), and the bytes outside the caching allocator before and after the
/// process group (`context_used`, `context_used_after_dist`: 0 – 8 GiB; unchanged when absent). Throws config_error
/// naming the line and member (an unknown device, a context that is not bytes).
void read_env_line(const hardware_catalog& cat, const run_line& rl, std::string& gpu, double& context_used, double& context_dist);

/// The catalog GPU of a ground-truth row: its own `gpu` (a device name or catalog id) when it has one, else
/// `fallback` (the env line's). Throws config_error naming the line and member for a device the catalog lacks.
[[nodiscard]] std::string ground_truth_gpu(const hardware_catalog& cat, const run_line& rl, const std::string& fallback);

/// Throws config_error naming `where` and `/peak_reserved` for measured peaks no run produces: reserved below
/// allocated (the caching allocator reserves every byte it allocates), or reserved above the GPU's HBM.
void check_measured_peaks(const std::string& where, double peak_allocated, double peak_reserved, const gpu_spec& gpu);

/// Throws config_error naming `where` and `/tokens_per_s` when a measured rate `tokens_per_s` (whole job) would run
/// the model's FLOPs above the dense peak of the plan's GEMM format: `te` (the estimate of the same configuration)
/// gives the FLOPs per token, `te.mfu_format × tokens_per_s / te.tokens_per_s` the measured MFU.
void check_measured_rate(const std::string& where, double tokens_per_s, const throughput_estimate& te);

/// The configuration of a ground-truth row (recipe amp | fsdp2 | bf16, ac none | full | half, optim): one GPU.
/// Throws config_error naming the line and field.
[[nodiscard]] training_config ground_truth_config(const run_line& rl);

/// The configuration, model, GPU and label of a trainer record (a line with `plan`, docs/training-contract.md#8) into
/// `m`: the plan's keys, `gpus`, the record's `grad_accum` and `gpu` (a device name), the model from `models_dir`
/// (`<model>.json`) or a preset. Throws config_error naming the line and member.
void fill_from_record(const context& ctx, const hardware_catalog& cat, const run_line& rl, const std::string& models_dir,
                      measured_run& m);

/// Throws config_error naming `where` (file:line) and the member (`prefix` + the rule's pointer, e.g. "/plan/tp") when
/// configuration `c` of `m` breaks a rule of bwplan::plan_violations.
void check_run_config(const model_spec& m, const training_config& c, const std::string& where, const std::string& prefix);

/// One file of measured runs, read.
struct run_file {
  std::string path;    ///< as given
  std::string shown;   ///< display form
  std::string sha256;  ///< of the bytes read
  std::string software;  ///< "torch X" from the env line, "" when none
  std::vector<measured_run> runs;
  int env_lines = 0;
};

/// Reads `path`: JSON lines, each an env line (`"kind": "env"`: GPU name, context bytes, software), a ground-truth
/// row (model, recipe, mbs, seq, ac) or a trainer record (with `plan`: the plan the trainer ran). Models of
/// ground-truth rows come from `models_dir/<model>.json` (default: the file's folder/models), those of trainer records
/// from their plan's `model` (a preset or a config path) or `models_dir`. A row's GPU is the catalog GPU its env line
/// (or record `gpu`) names. Throws config_error naming FILE:LINE and the field.
[[nodiscard]] run_file read_runs(const context& ctx, const hardware_catalog& cat, const std::string& path, const std::string& models_dir);

/// The catalog GPU id whose name a device name contains ("NVIDIA H200" → "h200"; the longest id that matches), or "".
[[nodiscard]] std::string gpu_id_from_device(const hardware_catalog& cat, const std::string& device);

}  // namespace bwplan::cli
