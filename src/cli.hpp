// bwplan CLI internals: shared by the subcommands in src/cmd_*.cpp.
// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <bwplan/bwplan.hpp>
#include <bwplan/calibration.hpp>
#include <bwplan/io/estimate.hpp>
#include <bwplan/io/plan.hpp>
#include <bwplan/plan.hpp>
#include <bwplan/quantity.hpp>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <functional>
#include <iosfwd>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
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
  double power_limit_w = 0;                 ///< --power-limit W: every GPU's power limit (0: the catalog's)
  std::string attention_kernel{};           ///< --attention-kernel fused|fa2: every GPU's attention kernel ("": the catalog's)
  std::string calibration_file{};           ///< --calibration FILE: a profile from `bwplan calibrate` ("": the built-in constants)
  mutable std::shared_ptr<const calibration_profile> profile_cache{};  ///< the --calibration profile, once read
  mutable std::shared_ptr<const error_bands> bands_cache{};            ///< <configs>/error-bands.json, once read
  mutable bool bands_read = false;
  /// GPUs of the catalog with no board power (neither power_limit_w nor rated_power_w) that --power-limit capped:
  /// the limit cannot act on them (compute_clock_fraction is 1), apply_gpu_settings refuses them.
  mutable std::vector<std::string> unpowered_gpus{};

  /// The directory holding configs/ data.
  [[nodiscard]] std::filesystem::path configs() const;
  /// Bundled catalog plus the user's --hardware files, every GPU capped at --power-limit when given. Throws config_error.
  [[nodiscard]] hardware_catalog catalog() const;
  /// A model from a config.json path or a preset name in configs/models. Throws config_error/invalid_request.
  [[nodiscard]] model_spec model(const std::string& arg) const;
  /// The training contract, <configs>/training-contract.json (docs/training-contract.md). Throws config_error.
  [[nodiscard]] io::training_contract contract() const;
  /// The reference trainer's source dir (train.py, bwtrain/, contract.py, requirements.txt): <configs>/train
  /// when installed (share/bwplan/train), else apps/train next to the source tree's configs/. Throws
  /// config_error when neither holds train.py.
  [[nodiscard]] std::filesystem::path trainer_dir() const;
  /// The --calibration profile, or nullptr without one. Throws config_error naming the file, the member and the problem.
  [[nodiscard]] const calibration_profile* profile() const;
  /// The constants for `gpu` and `stack`: the profile's entry for them, else the built-in defaults (the memory
  /// constants' replay policy as given in `base`).
  [[nodiscard]] calibration_constants constants(const std::string& gpu, training_stack stack) const;
  /// The error bands: <configs>/error-bands.json (the H200 harness) merged with <configs>/public-error-bands.json (the
  /// public evidence; merge_error_bands), nullptr when both are absent. Throws config_error for a malformed file.
  [[nodiscard]] const error_bands* bands() const;
  /// The error band of configuration `c` on `gpu` (docs/calibration.md#bands): the profile's own band for the GPU and
  /// stack when it has one, else the bundled file's group (exact, any mode, or the fallback); nullopt without bands.
  [[nodiscard]] std::optional<error_band> band(const std::string& gpu, const training_config& c) const;
  /// The headroom a search keeps when --headroom is not given (recommend, report): what the widest memory error band of
  /// `gpu` and `stack` needs for a plain "fits" (band_headroom, docs/calibration.md#bands), else `fallback`; `source`
  /// says which, in words for the output.
  [[nodiscard]] double default_headroom(const std::string& gpu, training_stack stack, double fallback, std::string& source) const;
  /// The global options that change an estimate but are no field of `what`, as given ("--power-limit 500"),
  /// comma-separated; "" when none was given. A plan file records --power-limit and --attention-kernel
  /// (plan_target::power_limit_w, attention_kernel) and not --calibration (a local profile); a SageMaker job records none.
  [[nodiscard]] std::string unrecorded_options(bool plan_file = false) const;
  /// Warns (stderr) that `what` does not record unrecorded_options(plan_file): a reader of it (check, estimate --plan,
  /// sagemaker --plan) estimates without them unless they are given again. No-op without them.
  /// With `plan`, also the plan's own power limit and attention kernel where no flag set them (a SageMaker job from a
  /// plan file that records them).
  void warn_unrecorded(std::string_view what, bool plan_file = false, const plan_target* plan = nullptr) const;
  /// Records the global --power-limit and --attention-kernel in `t` when given (the flags win over a plan's own).
  void record_gpu_settings(plan_target& t) const;
  /// Applies the plan's power limit and attention kernel to `gpu` where the global flags did not set them (the
  /// catalog() already carries the flags'); writes the flags' values back into `t` (record_gpu_settings). Throws
  /// invalid_request, as --power-limit does, for a limit above the GPU's rated board power.
  void apply_gpu_settings(plan_target& t, gpu_spec& gpu) const;
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
runner register_calibrate(CLI::App& app, context& ctx);

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

/// The flags that describe one plan (estimate, and every command that takes a plan). Values are the flags'
/// defaults until parsed; resolve_plan applies the ones given over a --plan file, the file over the defaults.
struct plan_options {
  std::string model;
  target_options target;
  int gpus = 0;  ///< --gpus (0: not given: all GPUs of the instances, or 1 for a bare GPU)
  std::int64_t mbs = 1;
  std::int64_t seq = default_seq_len;
  std::int64_t grad_accum = 1;
  std::string ac = "none";  ///< --ac: none | full | every-K | selective-op | selective-attn
  int ac_every = 1;         ///< --ac-every K (with --ac full: the same as --ac every-K)
  master_weights master = master_weights::fp32;
  sharding shard = sharding::full;
  optimizer_impl optimizer = optimizer_impl::fused;
  loss_impl loss = loss_impl::standard;
  std::string precision = "bf16";  ///< --precision
  std::string bf16_layers;         ///< --bf16-layers ("" = the format's default)
  bool fp8_all_gather = false;     ///< --fp8-all-gather
  std::int64_t tp = 1, cp = 1, ep = 1, pp = 1;  ///< --tp, --cp, --ep, --pp
  std::string pp_schedule = "1f1b"; ///< --pp-schedule 1f1b | interleaved
  std::int64_t vpp = 1;             ///< --vpp (virtual stages per pipeline rank, interleaved)
  int shard_group = 0;             ///< --shard-group (hybrid sharding; 0: one node)
  std::string finetune = "full";   ///< --finetune full | lora | qlora
  std::string optimizer_name = "adamw";  ///< --optimizer (recommend also accepts auto)
  int lora_rank = 16;              ///< --lora-rank
  double lora_alpha = 32;          ///< --lora-alpha
  std::string lora_targets = "all-linear";  ///< --lora-targets
  double lora_dropout = 0;         ///< --lora-dropout
  std::string stack = "hf";        ///< --stack hf | torchtitan | torchtune | megatron
  bool compile = false;            ///< --compile
  std::string modules = "fused";   ///< --modules fused | transformers
  bool expandable_segments = false;  ///< --expandable-segments
  std::string offload = "none";    ///< --offload none | a list of optimizer, params, activations
  bool optimizer_in_backward = false;  ///< --optimizer-in-backward
  bool no_sequence_parallel = false;   ///< --no-sequence-parallel
  bool fsdp_embedding_units = false;   ///< --fsdp-embedding-units
  bool tp_comm_overlap = false;        ///< --tp-comm-overlap
  bool moe_a2a_overlap = false;        ///< --moe-a2a-overlap
  std::string plan_file;           ///< --plan FILE: settings read from a plan file; flags given as well override them
  const CLI::App* app = nullptr;   ///< the subcommand whose flags were parsed (set by add_plan_options)
};

/// Throws invalid_request naming the format, the GPU and the GPUs of the catalog that support it,
/// when `gpu` cannot run `f`.
void require_support(const hardware_catalog& cat, const gpu_spec& gpu, compute_format f);

/// Registers MODEL, --plan and the plan flags (--gpu, --instance, --nodes, --gpus, --mbs, --seq, --grad-accum,
/// --ac, --ac-every, --master, --sharding, --shard-group, --tp, --cp, --ep, --pp, --pp-schedule, --vpp, --optimizer-impl, --loss,
/// --precision, --bf16-layers, --fp8-all-gather, fine-tuning, --stack, --compile, --expandable-segments, --offload, --optimizer-in-backward, --no-sequence-parallel, --fsdp-embedding-units, --tp-comm-overlap, --moe-a2a-overlap) on `sub`, writing
/// into `o`.
void add_plan_options(CLI::App* sub, const std::shared_ptr<plan_options>& o);

/// The command-line flag of plan field `field` (plan-file key, e.g. "micro_batch_size" → "--mbs"), or the
/// field itself when it has no flag.
[[nodiscard]] std::string plan_flag(std::string_view field);
/// The one-line error of a broken plan rule given on the command line: "--mbs: micro-batch size must be …".
[[nodiscard]] invalid_request flag_error(const plan_violation& v);

/// Throws invalid_request when `g` runs at a power limit above its rated board power (`--power-limit`: the rates
/// are rated there and gpu_spec::compute_clock_fraction does not raise them above 1). resolve_target calls it.
void require_power_within_rating(const gpu_spec& g);
/// Applies a plan's recorded power limit and attention kernel (plan_target::power_limit_w, attention_kernel; the global
/// flags' values once recorded) to `g`: idempotent over a catalog the flags already capped. Throws invalid_request for a
/// limit above the GPU's rated board power or a GPU whose catalog entry has no board power (the limit could not act).
void apply_plan_gpu_settings(const plan_target& t, gpu_spec& g);
/// The hardware line's note on the GPU's power limit and attention kernel where they are not the defaults ("at 500 W
/// of its rated 700 W, FlashAttention-2"); "" otherwise.
[[nodiscard]] std::string gpu_settings_note(const gpu_spec& g);
/// Sets `g`'s board power limit to `watts` as --power-limit does (the rated power kept in rated_power_w; the rates
/// scale by gpu_spec::compute_clock_fraction, docs/hardware.md#power). Does not check the rating.
void apply_power_limit(gpu_spec& g, double watts);

/// A plan resolved against the catalog and the model.
struct resolved_plan {
  plan p;                 ///< the plan as evaluated (world size, sharding default and accumulation resolved)
  model_spec model;
  resolved_target target;
  training_config config; ///< = p.training
};
/// Resolves `o`: reads the --plan file if any, applies the flags given over it, loads the model, finds the
/// hardware, resolves the world size, the sharding default and the accumulation of a global batch, and checks
/// every rule (plan_violations). A broken rule is reported against the flag that set it or, when it came from
/// the plan file, against the file and the member. Throws config_error / invalid_request.
[[nodiscard]] resolved_plan resolve_plan(const context& ctx, const hardware_catalog& cat, const plan_options& o);
/// Throws the error of rule `v` broken by the plan `o` describes, as resolve_plan reports its own: the --plan file's
/// member (with its line) when the value came from the file, else the flag (flag_error). For rules checked after
/// resolve_plan (what the reference trainer refuses: sagemaker).
[[noreturn]] void throw_plan_violation(const context& ctx, const plan_options& o, const plan_violation& v);
[[nodiscard]] resolved_target resolve_target(const hardware_catalog& cat, const target_options& t,
                                             const std::string& default_instance);

using bwplan::human_duration;     // bwplan/quantity.hpp
using bwplan::parse_duration;     // bwplan/quantity.hpp
using bwplan::parse_token_count;  // bwplan/quantity.hpp

/// Human-readable size, e.g. "33.71 GiB".
[[nodiscard]] std::string human(bytes b);
/// A token count with the K/M/B/T suffixes (powers of 1000) parse_token_count reads, 4 significant digits:
/// 1e11 -> "100B", 2.5e12 -> "2.5T", 512 -> "512" (instead of printf's "1e+11").
[[nodiscard]] std::string human_tokens(double tokens);

/// Runs the CLI on `args` (without the program name), writing results to `out` and diagnostics to `err`.
int run(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);
/// main()'s entry point.
int run(int argc, char** argv, std::ostream& out, std::ostream& err);

}  // namespace bwplan::cli
