// bwplan: GPU memory and throughput planning for LLM training
// SPDX-License-Identifier: Apache-2.0
#pragma once

// The plan file: one training configuration kept in a repository (docs/plan.schema.json, docs/ci.md).

#include <bwplan/error.hpp>
#include <bwplan/hardware.hpp>
#include <bwplan/io/json.hpp>
#include <bwplan/io/locate.hpp>
#include <bwplan/training.hpp>

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace bwplan {

/// A numeric compute format a plan may ask for, and what the release can do with it. The one table that
/// says which formats exist, which catalog rate each uses, which GPUs have it and whether the memory and
/// throughput models cover it; the precision work (FP8, MXFP8, NVFP4) flips `modelled` here.
struct precision_info {
  std::string_view name;         ///< plan and CLI spelling, e.g. "mxfp8"
  std::string_view catalog_key;  ///< key of gpu_spec::dense_flops giving its tensor-core rate ("fp8", "fp4")
  bool blackwell_only;           ///< block-scaled formats (MX, NV) need Blackwell's tensor cores
  bool modelled;                 ///< estimate_memory / estimate_throughput model it in this release
};

/// All formats a plan may name (see precision_info).
[[nodiscard]] inline const std::vector<precision_info>& precisions() {
  static const std::vector<precision_info> p{
      {"bf16", "bf16", false, true},
      {"fp8", "fp8", false, true},          // per-tensor scaled FP8 (Transformer Engine delayed/current scaling)
      {"fp8-rowwise", "fp8", false, true},  // FP8 with one scale per row (torchao rowwise)
      {"mxfp8", "fp8", true, true},         // OCP MX FP8, 32-element blocks with E8M0 scales
      {"nvfp4", "fp4", true, true},         // NVFP4, 16-element blocks with E4M3 scales
  };
  return p;
}

/// The entry of precisions() called `name`, or nullptr.
[[nodiscard]] inline const precision_info* find_precision(std::string_view name) {
  for (const auto& p : precisions())
    if (p.name == name) return &p;
  return nullptr;
}

/// Whether `gpu` has tensor-core support for `p`: the catalog lists a rate for its format and, for the
/// block-scaled formats, the GPU is a Blackwell.
[[nodiscard]] inline bool supported_on(const precision_info& p, const gpu_spec& gpu) {
  if (!gpu.peak(p.catalog_key)) return false;
  return !p.blackwell_only || gpu.architecture == "blackwell";
}

/// Largest parallel degree the release models for each dimension (tensor, context, expert, pipeline).
/// Degrees up to `plan_limits::max_degree` are accepted in a plan; those above the modelled one are
/// reported (rule BWP010) instead of evaluated.
inline constexpr int modelled_parallel_degree = 1;
/// Largest degree evaluated for dimension `dim` ("tp", "cp", "ep", "pp"): tensor and context parallelism are
/// modelled (docs/scaling.md); expert and pipeline parallelism are not yet (modelled_parallel_degree).
[[nodiscard]] constexpr std::int64_t modelled_degree(std::string_view dim) noexcept {
  return dim == "tp" || dim == "cp" ? std::int64_t{1} << 20 : modelled_parallel_degree;
}

/// Ranges of the numbers in a plan (and of the same flags on the command line). Beyond them a value is
/// an error, not a plan: they are far above any real job and keep the integer arithmetic exact.
struct plan_limits {
  static constexpr std::int64_t max_nodes = 4096;
  static constexpr std::int64_t max_gpus = 1 << 20;
  static constexpr std::int64_t max_micro_batch = 1 << 16;
  static constexpr std::int64_t max_seq_len = 1 << 24;
  static constexpr std::int64_t max_global_batch = std::int64_t{1} << 32;  // sequences
  static constexpr std::int64_t max_grad_accum = 1 << 20;
  static constexpr std::int64_t max_ac_every = 100'000;
  static constexpr std::int64_t max_degree = 1024;
};

/// Thresholds of `bwplan check` a plan may set in its "check" object.
struct check_settings {
  double min_mfu_ratio = 0.5;     ///< BWP007 fires when MFU < ratio × the best searched plan's MFU
  double max_step_time_s = 300;   ///< BWP008 fires when one optimizer step takes longer (with accumulation)
  std::vector<std::string> disable;  ///< rule IDs not to apply to this plan
};

/// One plan file. Every setting is optional: what is absent takes the CLI default (or a flag's value).
struct plan_spec {
  std::string file;  ///< where it was read from ("" for a plan built in memory)
  std::string text;  ///< the file's text, to locate members for messages and annotations
  std::optional<std::string> name;
  std::optional<std::string> model;     ///< preset id or config.json path (relative to the plan file's folder)
  std::optional<std::string> instance;  ///< SageMaker instance type
  std::optional<std::string> gpu;       ///< catalog GPU id (a bare GPU, or a check against the instance's)
  std::optional<std::int64_t> nodes;
  std::optional<std::int64_t> gpus;     ///< world size
  std::optional<std::string> precision; ///< precision_info::name
  std::optional<master_weights> master;
  std::optional<std::int64_t> micro_batch;
  std::optional<std::int64_t> seq_len;
  std::optional<std::int64_t> global_batch;  ///< sequences per optimizer step, whole job
  std::optional<std::int64_t> grad_accum;
  std::optional<std::string> ac;  ///< none | full | selective-op | selective-attn
  std::optional<std::int64_t> ac_every;
  std::optional<sharding> shard;
  std::optional<std::int64_t> tp, cp, ep, pp;
  std::optional<std::int64_t> shard_group;  ///< hybrid sharding group size
  std::optional<optimizer_impl> optimizer;
  std::optional<loss_impl> loss;
  std::optional<double> headroom;       ///< share of capacity to keep free (BWP002 threshold)
  check_settings check;

  /// Line, column and byte of the member at `pointer` (e.g. "/micro_batch_size"), if it is in the text.
  [[nodiscard]] std::optional<io::text_location> where(std::string_view pointer) const {
    if (text.empty()) return std::nullopt;
    return io::locate(text, pointer);
  }
};

namespace io {

/// The top-level keys of a plan, in the order of docs/plan.schema.json.
[[nodiscard]] inline const std::vector<std::string>& plan_keys() {
  static const std::vector<std::string> k{
      "$schema", "schema_version", "name", "model", "instance", "gpu", "nodes", "gpus", "precision",
      "master_weights", "micro_batch_size", "seq_len", "global_batch_size", "grad_accum",
      "activation_checkpointing", "ac_every", "sharding", "shard_group", "tp", "cp", "ep", "pp", "optimizer",
      "optimizer_impl", "loss", "headroom", "check"};
  return k;
}

/// The keys of a plan's "check" object.
[[nodiscard]] inline const std::vector<std::string>& plan_check_keys() {
  static const std::vector<std::string> k{"min_mfu_ratio", "max_step_time_s", "disable"};
  return k;
}

namespace detail {

inline std::string unknown_key(const std::string& key, const std::vector<std::string>& known) {
  std::string msg = "unknown key '" + key + "'";
  std::optional<std::string> m = closest_match(key, known);
  if (!m && key.size() >= 3)  // a truncated or extended key: "micro_batch" for "micro_batch_size"
    for (const auto& k : known)
      if ((k.rfind(key, 0) == 0 || key.rfind(k, 0) == 0) && k.size() >= 3 && (!m || k.size() < m->size())) m = k;
  if (m) msg += " (did you mean '" + *m + "'?)";
  msg += "; allowed: ";
  for (std::size_t i = 0; i < known.size(); ++i) msg += (i ? ", " : "") + known[i];
  return msg;
}

inline std::int64_t plan_int(const nlohmann::json& v, const std::string& file, const std::string& ptr, std::int64_t lo,
                             std::int64_t hi) {
  if (!v.is_number()) throw config_error(file, ptr, std::string("expected an integer, got ") + v.type_name());
  const double d = v.get<double>();
  if (!std::isfinite(d) || d != std::floor(d)) throw config_error(file, ptr, "expected an integer, got " + v.dump());
  if (d < static_cast<double>(lo) || d > static_cast<double>(hi))
    throw config_error(file, ptr, "out of range: must be between " + std::to_string(lo) + " and " + std::to_string(hi) +
                                      ", got " + v.dump());
  return static_cast<std::int64_t>(d);
}

inline double plan_number(const nlohmann::json& v, const std::string& file, const std::string& ptr, double lo, double hi,
                          bool hi_open, const std::string& range) {
  if (!v.is_number()) throw config_error(file, ptr, std::string("expected a number, got ") + v.type_name());
  const double d = v.get<double>();
  if (!std::isfinite(d) || d < lo || d > hi || (hi_open && d >= hi))
    throw config_error(file, ptr, "out of range: must be " + range + ", got " + v.dump());
  return d;
}

inline std::string plan_string(const nlohmann::json& v, const std::string& file, const std::string& ptr) {
  if (!v.is_string()) throw config_error(file, ptr, std::string("expected a string, got ") + v.type_name());
  std::string s = v.get<std::string>();
  if (s.empty()) throw config_error(file, ptr, "must not be empty");
  return s;
}

/// One of `names` (exact spelling), mapped to the same index of `values`.
template <class T>
T plan_enum(const nlohmann::json& v, const std::string& file, const std::string& ptr,
            const std::vector<std::string>& names, const std::vector<T>& values) {
  if (!v.is_string()) throw config_error(file, ptr, std::string("expected a string, got ") + v.type_name());
  const std::string s = v.get<std::string>();
  for (std::size_t i = 0; i < names.size(); ++i)
    if (names[i] == s) return values[i];
  std::string msg = "unknown value '" + s + "'";
  if (auto m = closest_match(s, names)) msg += " (did you mean '" + *m + "'?)";
  msg += "; allowed: ";
  for (std::size_t i = 0; i < names.size(); ++i) msg += (i ? ", " : "") + names[i];
  throw config_error(file, ptr, msg);
}

}  // namespace detail

/// Builds a plan_spec from a parsed plan document (`file` names it in errors).
///
/// Throws config_error with the JSON pointer of the member for: a non-object document, an unknown key
/// (with the closest known one), a wrong type, an unknown enum value, a number out of the plan_limits range,
/// an unknown "precision", "schema_version" other than 1, or a plan without "model".
[[nodiscard]] inline plan_spec plan_from_json(const nlohmann::json& j, const std::string& file) {
  using namespace detail;
  if (!j.is_object()) throw config_error(file, "", std::string("a plan must be a JSON object, got ") + j.type_name());
  plan_spec p;
  p.file = file;
  using L = plan_limits;
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string& k = it.key();
    const nlohmann::json& v = it.value();
    const std::string ptr = "/" + pointer_escape(k);
    if (k == "$schema") { (void)plan_string(v, file, ptr); }
    else if (k == "schema_version") {
      if (plan_int(v, file, ptr, 1, 1000) != 1)
        throw config_error(file, ptr, "unsupported schema_version " + v.dump() + " (this bwplan reads version 1)");
    }
    else if (k == "name") p.name = plan_string(v, file, ptr);
    else if (k == "model") p.model = plan_string(v, file, ptr);
    else if (k == "instance") p.instance = plan_string(v, file, ptr);
    else if (k == "gpu") p.gpu = plan_string(v, file, ptr);
    else if (k == "nodes") p.nodes = plan_int(v, file, ptr, 1, L::max_nodes);
    else if (k == "gpus") p.gpus = plan_int(v, file, ptr, 1, L::max_gpus);
    else if (k == "precision") {
      std::vector<std::string> names;
      for (const auto& x : precisions()) names.emplace_back(x.name);
      p.precision = plan_enum<std::string>(v, file, ptr, names, names);
    }
    else if (k == "master_weights")
      p.master = plan_enum<master_weights>(v, file, ptr, {"fp32", "bf16"}, {master_weights::fp32, master_weights::bf16});
    else if (k == "micro_batch_size") p.micro_batch = plan_int(v, file, ptr, 1, L::max_micro_batch);
    else if (k == "seq_len") p.seq_len = plan_int(v, file, ptr, 1, L::max_seq_len);
    else if (k == "global_batch_size") p.global_batch = plan_int(v, file, ptr, 1, L::max_global_batch);
    else if (k == "grad_accum") p.grad_accum = plan_int(v, file, ptr, 1, L::max_grad_accum);
    else if (k == "activation_checkpointing")
      p.ac = plan_enum<std::string>(v, file, ptr, {"none", "full", "selective-op", "selective-attn"},
                                    {"none", "full", "selective-op", "selective-attn"});
    else if (k == "ac_every") p.ac_every = plan_int(v, file, ptr, 1, L::max_ac_every);
    else if (k == "sharding") p.shard = plan_enum<sharding>(v, file, ptr, {"none", "full", "hybrid", "grad-op"},
                                                               {sharding::none, sharding::full, sharding::hybrid, sharding::grad_op});
    else if (k == "tp") p.tp = plan_int(v, file, ptr, 1, L::max_degree);
    else if (k == "shard_group") p.shard_group = plan_int(v, file, ptr, 1, L::max_gpus);
    else if (k == "cp") p.cp = plan_int(v, file, ptr, 1, L::max_degree);
    else if (k == "ep") p.ep = plan_int(v, file, ptr, 1, L::max_degree);
    else if (k == "pp") p.pp = plan_int(v, file, ptr, 1, L::max_degree);
    else if (k == "optimizer") (void)plan_enum<int>(v, file, ptr, {"adamw"}, {0});
    else if (k == "optimizer_impl")
      p.optimizer = plan_enum<optimizer_impl>(v, file, ptr, {"fused", "foreach"}, {optimizer_impl::fused, optimizer_impl::foreach});
    else if (k == "loss") p.loss = plan_enum<loss_impl>(v, file, ptr, {"standard", "chunked"}, {loss_impl::standard, loss_impl::chunked});
    else if (k == "headroom") p.headroom = plan_number(v, file, ptr, 0, 1, true, "in [0, 1)");
    else if (k == "check") {
      if (!v.is_object()) throw config_error(file, ptr, std::string("expected an object, got ") + v.type_name());
      for (auto c = v.begin(); c != v.end(); ++c) {
        const std::string cp = ptr + "/" + pointer_escape(c.key());
        if (c.key() == "min_mfu_ratio") p.check.min_mfu_ratio = plan_number(c.value(), file, cp, 0, 1, false, "in [0, 1]");
        else if (c.key() == "max_step_time_s")
          p.check.max_step_time_s = plan_number(c.value(), file, cp, 1e-3, 1e7, false, "between 0.001 and 10000000 seconds");
        else if (c.key() == "disable") {
          if (!c.value().is_array()) throw config_error(file, cp, std::string("expected an array of rule IDs, got ") + c.value().type_name());
          for (std::size_t i = 0; i < c.value().size(); ++i)
            p.check.disable.push_back(plan_string(c.value()[i], file, cp + "/" + std::to_string(i)));
        }
        else throw config_error(file, cp, unknown_key(c.key(), plan_check_keys()));
      }
    }
    else throw config_error(file, ptr, unknown_key(k, plan_keys()));
  }
  if (!p.model) throw config_error(file, "/model", "missing required field (a preset such as \"Llama-3.1-8B\" or a config.json path)");
  return p;
}

/// Parses plan text `text` read from `file`. Errors carry the member's line, column and byte offset.
[[nodiscard]] inline plan_spec parse_plan(const std::string& text, const std::string& file) {
  const nlohmann::json j = parse_json(text, file);
  try {
    plan_spec p = plan_from_json(j, file);
    p.text = text;
    return p;
  } catch (const config_error& e) {
    throw with_location(e, text);
  }
}

/// Loads the plan file at `path`. Throws config_error.
[[nodiscard]] inline plan_spec load_plan(const std::filesystem::path& path) {
  return parse_plan(read_text_file(path), path.string());
}

}  // namespace io
}  // namespace bwplan
