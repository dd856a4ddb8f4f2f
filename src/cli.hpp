// bwplan CLI internals: shared by the subcommands in src/cmd_*.cpp.
// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <bwplan/bwplan.hpp>
#include <bwplan/io/plan.hpp>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <functional>
#include <iosfwd>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace bwplan::cli {

/// Exit statuses: 0 success, 1 a result says no (nothing fits, check failed), 2 unusable input.
enum exit_code : int { success = 0, failure = 1, usage = 2 };

/// Streams and global options shared by every subcommand.
struct context {
  std::ostream& out;
  std::ostream& err;
  std::string config_dir;                   ///< --configs DIR (empty: BWPLAN_CONFIG_DIR or the built-in path)
  std::vector<std::string> hardware_files;  ///< --hardware FILE, merged over the bundled catalog

  /// The directory holding configs/ data.
  [[nodiscard]] std::filesystem::path configs() const;
  /// Bundled catalog plus the user's --hardware files. Throws config_error.
  [[nodiscard]] hardware_catalog catalog() const;
  /// A model from a config.json path or a preset name in configs/models. Throws config_error/invalid_request.
  [[nodiscard]] model_spec model(const std::string& arg) const;
};

/// A registered subcommand: what to run once parsing succeeded.
using runner = std::function<int()>;

runner register_estimate(CLI::App& app, context& ctx);
runner register_recommend(CLI::App& app, context& ctx);
runner register_hardware(CLI::App& app, context& ctx);
runner register_validate(CLI::App& app, context& ctx);
runner register_sagemaker(CLI::App& app, context& ctx);
runner register_report(CLI::App& app, context& ctx);
runner register_sweep(CLI::App& app, context& ctx);
runner register_check(CLI::App& app, context& ctx);
runner register_completion(CLI::App& app, context& ctx);

/// Options that describe where a job runs (shared by estimate and recommend).
struct target_options {
  std::string gpu;
  std::string instance;
  int nodes = 1;
};

/// The GPU and (optional) instance named by `t`; `default_instance` applies when neither is given.
struct resolved_target {
  gpu_spec gpu;
  std::optional<instance_spec> instance;
  /// Pointer to the instance, or null for a bare GPU.
  [[nodiscard]] const instance_spec* instance_ptr() const noexcept { return instance ? &*instance : nullptr; }
};

/// The flags that describe one training configuration (estimate, and every command that takes a plan).
struct plan_options {
  std::string model;
  target_options target;
  int gpus = 0;  ///< 0: all GPUs of the instances, or 1 for a bare GPU
  std::int64_t mbs = 1;
  std::int64_t seq = 4096;
  std::int64_t grad_accum = 1;
  std::string ac = "none";
  int ac_every = 1;
  master_weights master = master_weights::fp32;
  sharding shard = sharding::full;
  bool shard_given = false;
  optimizer_impl optimizer = optimizer_impl::fused;
  loss_impl loss = loss_impl::standard;
  std::string precision = "bf16";  ///< --precision
  std::string bf16_layers;         ///< --bf16-layers ("" = the format's default)
  bool fp8_all_gather = false;     ///< --fp8-all-gather
  // Parallel degrees (--tp, --cp, --ep; pp from a plan file only).
  std::int64_t tp = 1, cp = 1, ep = 1, pp = 1;
  int shard_group = 0;                ///< --shard-group (hybrid sharding; 0: one node)
  std::int64_t global_batch = 0;      ///< sequences per optimizer step, whole job (0: use grad_accum)
  bool grad_accum_given = false;      ///< grad_accum came from a flag or the plan file
  // --plan FILE: settings read from a plan file; flags given on the command line override them.
  std::string plan_file;
  std::optional<plan_spec> plan;      ///< the loaded plan (apply_plan_file)
  const CLI::App* app = nullptr;      ///< the subcommand whose flags override the plan (set by add_plan_options)
};

/// Throws invalid_request naming the format, the GPU and the GPUs of the catalog that support it,
/// when `gpu` cannot run `f`.
void require_support(const hardware_catalog& cat, const gpu_spec& gpu, compute_format f);

/// Registers MODEL and the configuration flags (--gpu, --instance, --nodes, --gpus, --mbs, --seq, --grad-accum,
/// --ac, --ac-every, --master, --sharding, --optimizer-impl, --loss, --precision, --bf16-layers, --fp8-all-gather) on `sub`, writing into `o`.
void add_plan_options(CLI::App* sub, const std::shared_ptr<plan_options>& o);

/// Fills `o` from `plan` for every setting whose flag was not given on o.app's command line (flags override
/// the file); a relative model path is taken relative to the plan file's folder. Throws config_error.
void apply_plan(plan_options& o, const plan_spec& plan);
/// When `o.plan_file` is set and not yet applied: loads it (io::load_plan) and calls apply_plan. Throws config_error.
void apply_plan_file(plan_options& o);
/// Throws invalid_request when a number of `o` is outside io/plan.hpp's plan_limits (the same ranges as a plan file).
void check_ranges(const plan_options& o);

/// A configuration resolved against the catalog and the model.
struct resolved_plan {
  model_spec model;
  resolved_target target;
  training_config config;
};
/// Resolves `o`: loads the model, finds the hardware, builds and validates the training_config.
/// Throws config_error / invalid_request.
[[nodiscard]] resolved_plan resolve_plan(const context& ctx, const hardware_catalog& cat, const plan_options& o);
/// The training_config of `o` on target `t` (world size, sharding default, checkpointing), without loading
/// the model or checking precision and parallel degrees. Throws invalid_request.
[[nodiscard]] training_config build_config(const plan_options& o, const resolved_target& t);
[[nodiscard]] resolved_target resolve_target(const hardware_catalog& cat, const target_options& t,
                                             const std::string& default_instance);

/// JSON of one configuration, estimate and throughput (the shape documented in docs/cli.md).
[[nodiscard]] nlohmann::ordered_json to_json(const model_spec& m, const training_config& c, const memory_estimate& me,
                                             const throughput_estimate& te);
/// Sharding as a short label: "none", "ddp", "fsdp", "hsdp/8", "zero2".
[[nodiscard]] std::string shard_label(const training_config& c);
/// Parses a token count with an optional K/M/B/T suffix (powers of 1000), e.g. "100B", "1T", "2.5e9".
/// Throws invalid_request naming `flag`.
[[nodiscard]] double parse_token_count(const std::string& text, const std::string& flag);
/// Parses a duration such as "3600s", "90m", "72h", "3d" or "1w" into seconds; a number without a unit counts
/// `unitless_s` seconds (hours for --deadline, seconds for --max-runtime). Throws invalid_request naming `flag`.
[[nodiscard]] double parse_duration(const std::string& text, const std::string& flag, double unitless_s = 3600);
/// Human-readable duration, e.g. "3.2 h", "4.1 d".
[[nodiscard]] std::string human_duration(double seconds);
/// Human-readable size, e.g. "33.71 GiB".
[[nodiscard]] std::string human(bytes b);
/// Short description of a configuration, e.g. "mbs 4 × 8192, AC every 2, FSDP full, chunked loss".
[[nodiscard]] std::string describe(const training_config& c);

/// Runs the CLI on `args` (without the program name), writing results to `out` and diagnostics to `err`.
int run(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);
/// main()'s entry point.
int run(int argc, char** argv, std::ostream& out, std::ostream& err);

}  // namespace bwplan::cli
