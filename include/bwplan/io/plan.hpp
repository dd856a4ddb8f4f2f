// bwplan: GPU memory and throughput planning for LLM training
// SPDX-License-Identifier: Apache-2.0
#pragma once

// The plan file: one plan (bwplan/plan.hpp) kept in a repository (docs/plan.schema.json, docs/ci.md). The one
// reader (plan_from_json) and the one writer (plan_to_json) of the format. load_plan also reads the plan out of
// a SageMaker job bwplan wrote (a CreateTrainingJob request, the SDK v2 estimator or v3 ModelTrainer JSON)
// through the training contract (bwplan/io/contract.hpp).

#include <bwplan/error.hpp>
#include <bwplan/hardware.hpp>
#include <bwplan/io/contract.hpp>
#include <bwplan/io/json.hpp>
#include <bwplan/io/locate.hpp>
#include <bwplan/plan.hpp>
#include <bwplan/training.hpp>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <iterator>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace bwplan {

/// What a document read as a plan is: a plan file, or a SageMaker job that carries a plan through the
/// training contract.
enum class document_kind {
  plan,          ///< a plan file (docs/plan.schema.json)
  request,       ///< a CreateTrainingJob request (`bwplan sagemaker --format request`)
  estimator,     ///< the SDK v2 PyTorch estimator JSON (`--format estimator`)
  modeltrainer,  ///< the SDK v3 ModelTrainer JSON (`--format modeltrainer`)
};
[[nodiscard]] constexpr const char* to_string(document_kind k) noexcept {
  switch (k) {
    case document_kind::request: return "CreateTrainingJob request";
    case document_kind::estimator: return "SageMaker SDK v2 estimator";
    case document_kind::modeltrainer: return "SageMaker SDK v3 ModelTrainer";
    default: return "plan file";
  }
}

/// A plan as read from a file: the plan, which plan keys the file set (the others hold the defaults of
/// bwplan::plan), and the file's text to locate members for messages and annotations. For a SageMaker job the
/// plan's members live elsewhere (`/micro_batch_size` is `/HyperParameters/micro_batch_size` of a request):
/// pointer() and where() translate.
struct plan_document {
  plan value;
  std::string file;               ///< where it was read from ("" for a document built in memory)
  std::string text;               ///< the file's text
  std::vector<std::string> keys;  ///< plan keys present, in file order
  document_kind kind = document_kind::plan;
  std::vector<std::pair<std::string, std::string>> pointers;  ///< plan pointer → the document's pointer (SageMaker jobs)

  /// Whether the file set plan key `key` (e.g. "sharding").
  [[nodiscard]] bool has(std::string_view key) const {
    return std::find(keys.begin(), keys.end(), key) != keys.end();
  }
  /// The document's pointer of plan pointer `pointer` ("/micro_batch_size" → "/HyperParameters/micro_batch_size"
  /// in a request; the same pointer in a plan file).
  [[nodiscard]] std::string pointer(std::string_view pointer) const {
    for (const auto& [from, to] : pointers)
      if (pointer == from || (pointer.substr(0, from.size()) == from && pointer.size() > from.size() && pointer[from.size()] == '/'))
        return to + std::string(pointer.substr(from.size()));
    return std::string(pointer);
  }
  /// Line, column and byte of the member at plan pointer `pointer` (e.g. "/micro_batch_size"), if it is in the text.
  [[nodiscard]] std::optional<io::text_location> where(std::string_view pointer) const {
    if (text.empty()) return std::nullopt;
    return io::locate(text, this->pointer(pointer));
  }
};

namespace io {

/// The top-level keys of a plan, in the order of docs/plan.schema.json.
[[nodiscard]] inline const std::vector<std::string>& plan_keys() {
  static const std::vector<std::string> k{
      "$schema", "schema_version", "name", "model", "instance", "gpu", "nodes", "gpus", "power_limit_w", "attention_kernel", "precision",
      "bf16_layers", "fp8_all_gather", "master_weights", "micro_batch_size", "seq_len", "global_batch_size",
      "grad_accum", "activation_checkpointing", "ac_every", "sharding", "shard_group", "tp", "cp", "ep", "pp",
      "pp_schedule", "vpp", "optimizer", "optimizer_impl", "loss", "finetune", "lora_rank", "lora_alpha", "lora_targets", "lora_dropout",
      "stack", "compile", "modules", "expandable_segments", "offload", "optimizer_in_backward", "sequence_parallel", "fsdp_embedding_units",
      "tp_comm_overlap", "moe_a2a_overlap", "headroom", "check"};
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

/// Builds a plan_document from a parsed plan (`file` names it in errors). Absent keys keep bwplan::plan's
/// defaults; `sharding` absent stays unresolved (the reader of the document applies default_sharding).
///
/// Throws config_error with the JSON pointer of the member for: a non-object document, an unknown key
/// (with the closest known one), a wrong type, an unknown enum value, a number out of the plan_limits range,
/// "schema_version" other than 1, `ac_every` with a checkpointing other than full, or a plan without "model".
[[nodiscard]] inline plan_document plan_from_json(const nlohmann::json& j, const std::string& file) {
  using namespace detail;
  if (!j.is_object()) throw config_error(file, "", std::string("a plan must be a JSON object, got ") + j.type_name());
  plan_document d;
  d.file = file;
  plan& p = d.value;
  training_config& c = p.training;
  c.seq_len = default_seq_len;  // the schema's default when the file names none
  using L = plan_limits;
  std::optional<std::int64_t> ac_every;
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string& k = it.key();
    const nlohmann::json& v = it.value();
    const std::string ptr = "/" + pointer_escape(k);
    d.keys.push_back(k);
    if (k == "$schema") { (void)plan_string(v, file, ptr); }
    else if (k == "schema_version") {
      if (plan_int(v, file, ptr, 1, 1000) != 1)
        throw config_error(file, ptr, "unsupported schema_version " + v.dump() + " (this bwplan reads version 1)");
    }
    else if (k == "name") p.name = plan_string(v, file, ptr);
    else if (k == "model") p.model = plan_string(v, file, ptr);
    else if (k == "instance") p.target.instance = plan_string(v, file, ptr);
    else if (k == "gpu") p.target.gpu = plan_string(v, file, ptr);
    else if (k == "nodes") p.target.nodes = static_cast<int>(plan_int(v, file, ptr, 1, L::max_nodes));
    else if (k == "gpus") p.target.gpus = static_cast<int>(plan_int(v, file, ptr, 1, L::max_gpus));
    else if (k == "power_limit_w") p.target.power_limit_w = plan_number(v, file, ptr, 50, 5000, false, "between 50 and 5000 W");
    else if (k == "attention_kernel") p.target.attention_kernel = to_string(plan_enum<bwplan::attention_kernel>(v, file, ptr, {"fused", "fa2"}, {bwplan::attention_kernel::fused, bwplan::attention_kernel::flash2}));
    else if (k == "precision") {
      std::vector<std::string> names;
      std::vector<compute_format> values;
      for (const auto& x : precisions()) { names.emplace_back(x.name); values.push_back(x.format); }
      c.format = plan_enum<compute_format>(v, file, ptr, names, values);
    }
    else if (k == "bf16_layers") {
      try { c.bf16_layers = parse_bf16_blocks(plan_string(v, file, ptr)); }
      catch (const plan_error& e) { throw config_error(file, ptr, e.violation().message); }
    }
    else if (k == "fp8_all_gather") {
      if (!v.is_boolean()) throw config_error(file, ptr, std::string("expected true or false, got ") + v.type_name());
      c.fp8_all_gather = v.get<bool>();
    }
    else if (k == "master_weights")
      c.master = plan_enum<master_weights>(v, file, ptr, {"fp32", "bf16"}, {master_weights::fp32, master_weights::bf16});
    else if (k == "micro_batch_size") c.micro_batch = plan_int(v, file, ptr, 1, L::max_micro_batch);
    else if (k == "seq_len") c.seq_len = plan_int(v, file, ptr, 1, L::max_seq_len);
    else if (k == "global_batch_size") p.global_batch = plan_int(v, file, ptr, 1, L::max_global_batch);
    else if (k == "grad_accum") c.grad_accum = plan_int(v, file, ptr, 1, L::max_grad_accum);
    else if (k == "activation_checkpointing") {
      if (!v.is_string()) throw config_error(file, ptr, std::string("expected a string, got ") + v.type_name());
      const auto a = parse_checkpointing(v.get<std::string>());
      if (!a || a->every > L::max_ac_every) {
        std::string msg = "unknown value '" + v.get<std::string>() + "'";
        if (auto m = closest_match(v.get<std::string>(), checkpointing_names())) msg += " (did you mean '" + *m + "'?)";
        throw config_error(file, ptr, msg + "; allowed: none, full, every-K (K = 2.." + std::to_string(L::max_ac_every) +
                                          "), selective-op, selective-attn");
      }
      c.ac = *a;
    }
    else if (k == "ac_every") ac_every = plan_int(v, file, ptr, 1, L::max_ac_every);
    else if (k == "sharding") {
      std::vector<std::string> names;
      for (auto x : all_shardings) names.emplace_back(to_string(x));
      c.shard = plan_enum<sharding>(v, file, ptr, names, std::vector<sharding>(std::begin(all_shardings), std::end(all_shardings)));
    }
    else if (k == "tp") c.tp = static_cast<int>(plan_int(v, file, ptr, 1, L::max_degree));
    else if (k == "shard_group") c.shard_group = static_cast<int>(plan_int(v, file, ptr, 1, L::max_gpus));
    else if (k == "cp") c.cp = static_cast<int>(plan_int(v, file, ptr, 1, L::max_degree));
    else if (k == "ep") c.ep = static_cast<int>(plan_int(v, file, ptr, 1, L::max_degree));
    else if (k == "pp") c.pp = static_cast<int>(plan_int(v, file, ptr, 1, L::max_degree));
    else if (k == "pp_schedule")
      c.schedule = plan_enum<pp_schedule>(v, file, ptr, {"1f1b", "interleaved"}, {pp_schedule::one_f_one_b, pp_schedule::interleaved});
    else if (k == "vpp") c.vpp = static_cast<int>(plan_int(v, file, ptr, 1, L::max_degree));
    else if (k == "optimizer") {
      std::vector<std::string> names;
      for (auto o : all_optimizers) names.emplace_back(to_string(o));
      c.optim = plan_enum<optimizer_kind>(v, file, ptr, names, std::vector<optimizer_kind>(std::begin(all_optimizers), std::end(all_optimizers)));
    }
    else if (k == "finetune")
      c.finetune = plan_enum<finetune_mode>(v, file, ptr, {"full", "lora", "qlora"}, {finetune_mode::full, finetune_mode::lora, finetune_mode::qlora});
    else if (k == "lora_rank") c.lora.rank = static_cast<int>(plan_int(v, file, ptr, 1, 65536));
    else if (k == "lora_alpha") c.lora.alpha = plan_number(v, file, ptr, 1e-9, 1e6, false, "in (0, 1000000]");
    else if (k == "lora_dropout") c.lora.dropout = plan_number(v, file, ptr, 0, 1, true, "in [0, 1)");
    else if (k == "lora_targets") {
      const std::string t = plan_string(v, file, ptr);
      const auto bits = parse_lora_targets(t);
      if (!bits) throw config_error(file, ptr, "unknown LoRA targets '" + t + "'; allowed: attention, mlp, all-linear, or a list of "
                                               "q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj");
      c.lora.targets = *bits;
    }
    else if (k == "optimizer_impl")
      c.optimizer = plan_enum<optimizer_impl>(v, file, ptr, {"fused", "foreach"}, {optimizer_impl::fused, optimizer_impl::foreach});
    else if (k == "loss") c.loss = plan_enum<loss_impl>(v, file, ptr, {"standard", "chunked", "liger"}, {loss_impl::standard, loss_impl::chunked, loss_impl::liger});
    else if (k == "stack") {
      std::vector<std::string> names;
      for (auto x : all_stacks) names.emplace_back(to_string(x));
      c.stack = plan_enum<training_stack>(v, file, ptr, names, std::vector<training_stack>(std::begin(all_stacks), std::end(all_stacks)));
    }
    else if (k == "modules")
      c.modules = plan_enum<module_kernels>(v, file, ptr, {"fused", "transformers"}, {module_kernels::fused, module_kernels::transformers});
    else if (k == "compile" || k == "expandable_segments" || k == "optimizer_in_backward" || k == "sequence_parallel" ||
             k == "fsdp_embedding_units" || k == "tp_comm_overlap" || k == "moe_a2a_overlap") {
      if (!v.is_boolean()) throw config_error(file, ptr, std::string("expected true or false, got ") + v.type_name());
      (k == "compile"               ? c.compile
       : k == "expandable_segments" ? c.expandable_segments
       : k == "optimizer_in_backward" ? c.optimizer_in_backward
       : k == "sequence_parallel"     ? c.sequence_parallel
       : k == "fsdp_embedding_units"  ? c.fsdp_embedding_units
       : k == "tp_comm_overlap"       ? c.tp_comm_overlap
                                      : c.moe_a2a_overlap) = v.get<bool>();
    }
    else if (k == "offload") {
      const std::string t = plan_string(v, file, ptr);
      const auto bits = parse_offload(t);
      if (!bits) throw config_error(file, ptr, "unknown offload '" + t + "'; allowed: none, or a list of optimizer, params, activations "
                                               "(e.g. \"optimizer,params\")");
      c.offload = *bits;
    }
    else if (k == "headroom") p.headroom = plan_number(v, file, ptr, 0, 1, true, "in [0, 1)");
    else if (k == "check") {
      if (!v.is_object()) throw config_error(file, ptr, std::string("expected an object, got ") + v.type_name());
      for (auto ck = v.begin(); ck != v.end(); ++ck) {
        const std::string cp = ptr + "/" + pointer_escape(ck.key());
        if (ck.key() == "min_mfu_ratio") p.check.min_mfu_ratio = plan_number(ck.value(), file, cp, 0, 1, false, "in [0, 1]");
        else if (ck.key() == "max_step_time_s")
          p.check.max_step_time_s = plan_number(ck.value(), file, cp, 1e-3, 1e7, false, "between 0.001 and 10000000 seconds");
        else if (ck.key() == "disable") {
          if (!ck.value().is_array()) throw config_error(file, cp, std::string("expected an array of rule IDs, got ") + ck.value().type_name());
          for (std::size_t i = 0; i < ck.value().size(); ++i)
            p.check.disable.push_back(plan_string(ck.value()[i], file, cp + "/" + std::to_string(i)));
        }
        else throw config_error(file, cp, unknown_key(ck.key(), plan_check_keys()));
      }
    }
    else throw config_error(file, ptr, unknown_key(k, plan_keys()));
  }
  if (ac_every) {  // schema 1's two-key form: "activation_checkpointing": "full", "ac_every": K
    if (c.ac.mode != ac_mode::full || (c.ac.every != 1 && c.ac.every != *ac_every))
      throw config_error(file, "/ac_every", "needs \"activation_checkpointing\": \"full\" (or write \"every-" +
                                                std::to_string(*ac_every) + "\" there and drop ac_every)");
    c.ac = checkpointing::full(static_cast<int>(*ac_every));
  }
  if (p.model.empty()) throw config_error(file, "/model", "missing required field (a preset such as \"Llama-3.1-8B\" or a config.json path)");
  return d;
}

/// The one writer of the plan-file format: every field of `p` (defaults included, so a later release's
/// defaults cannot change what the file means), in the order of docs/plan.schema.json. `instance` and
/// `nodes` for instances, `gpu` and `gpus` for a bare GPU. Reads back with plan_from_json to an equal plan.
[[nodiscard]] inline nlohmann::ordered_json plan_to_json(const plan& p) {
  const training_config& c = p.training;
  nlohmann::ordered_json j;
  j["schema_version"] = 1;
  if (!p.name.empty()) j["name"] = p.name;
  j["model"] = p.model;
  if (!p.target.instance.empty()) {
    j["instance"] = p.target.instance;
    if (!p.target.gpu.empty()) j["gpu"] = p.target.gpu;
    j["nodes"] = p.target.nodes;
    if (p.target.gpus > 0) j["gpus"] = p.target.gpus;
  } else {
    j["gpu"] = p.target.gpu;
    if (p.target.nodes != 1) j["nodes"] = p.target.nodes;
    j["gpus"] = p.target.gpus > 0 ? p.target.gpus : c.world_size;
  }
  if (p.target.power_limit_w > 0) j["power_limit_w"] = p.target.power_limit_w;  // (planning only: set when given)
  if (!p.target.attention_kernel.empty()) j["attention_kernel"] = p.target.attention_kernel;
  j["precision"] = to_string(c.format);
  if (c.bf16_layers) j["bf16_layers"] = to_string(*c.bf16_layers);
  j["fp8_all_gather"] = c.fp8_all_gather;
  j["master_weights"] = to_string(c.master);
  j["micro_batch_size"] = c.micro_batch;
  j["seq_len"] = c.seq_len;
  if (p.global_batch) j["global_batch_size"] = *p.global_batch;
  j["grad_accum"] = c.grad_accum;
  j["activation_checkpointing"] = to_string(c.ac);
  j["sharding"] = to_string(c.shard);
  if (c.shard_group > 0) j["shard_group"] = c.shard_group;
  j["tp"] = c.tp;
  j["cp"] = c.cp;
  j["ep"] = c.ep;
  j["pp"] = c.pp;
  j["pp_schedule"] = to_string(c.schedule);
  j["vpp"] = c.vpp;
  j["optimizer"] = to_string(c.optim);
  j["optimizer_impl"] = to_string(c.optimizer);
  j["loss"] = to_string(c.loss);
  j["finetune"] = to_string(c.finetune);
  if (c.adapters() || !(c.lora == lora_settings{})) {
    j["lora_rank"] = c.lora.rank;
    j["lora_alpha"] = c.lora.alpha;
    j["lora_targets"] = lora_targets_to_string(c.lora.targets);
    j["lora_dropout"] = c.lora.dropout;
  }
  j["stack"] = to_string(c.stack);
  j["compile"] = c.compile;
  j["expandable_segments"] = c.expandable_segments;
  if (c.offload != 0) j["offload"] = offload_to_string(c.offload);  // written when set (files of earlier releases stay as they were)
  if (c.optimizer_in_backward) j["optimizer_in_backward"] = true;   // written when set, likewise
  if (!c.sequence_parallel) j["sequence_parallel"] = false;         // written when off, likewise
  if (c.fsdp_embedding_units) j["fsdp_embedding_units"] = true;     // written when set, likewise
  if (c.tp_comm_overlap) j["tp_comm_overlap"] = true;               // written when set, likewise
  if (c.moe_a2a_overlap) j["moe_a2a_overlap"] = true;               // written when set, likewise
  if (c.modules != module_kernels::fused) j["modules"] = to_string(c.modules);  // written when set, likewise
  j["headroom"] = p.headroom;
  const check_settings defaults;
  if (!(p.check == defaults)) {
    nlohmann::ordered_json ck;
    ck["min_mfu_ratio"] = p.check.min_mfu_ratio;
    ck["max_step_time_s"] = p.check.max_step_time_s;
    if (!p.check.disable.empty()) ck["disable"] = p.check.disable;
    j["check"] = ck;
  }
  return j;
}

/// The kind of document `j` is: a CreateTrainingJob request (top-level `AlgorithmSpecification`,
/// `HyperParameters` or `ResourceConfig`), bwplan's SDK v2 estimator JSON (an `estimator` object) or v3
/// ModelTrainer JSON (a `model_trainer` object), else a plan file.
[[nodiscard]] inline document_kind detect_document_kind(const nlohmann::json& j) {
  if (!j.is_object()) return document_kind::plan;
  if (j.contains("AlgorithmSpecification") || j.contains("HyperParameters") || j.contains("ResourceConfig")) return document_kind::request;
  if (auto e = j.find("estimator"); e != j.end() && e->is_object()) return document_kind::estimator;
  if (auto m = j.find("model_trainer"); m != j.end() && m->is_object()) return document_kind::modeltrainer;
  return document_kind::plan;
}

/// What is wrong with a job's allocator setting `conf` (the value of `PYTORCH_ALLOC_CONF`, or of the older
/// `PYTORCH_CUDA_ALLOC_CONF` when the first is unset: alloc_conf_variable) for a plan estimated with
/// `expandable_segments`, or "" when nothing is. PyTorch's parser (c10/core/AllocatorConfig.cpp,
/// c10/cuda/CUDAAllocatorConfig.cpp) takes comma-separated `key:value` options with case-sensitive keys and
/// `True` / `False` for booleans. An option that changes what the caching allocator reserves, which the plan's peak
/// reserved does not follow (`backend:cudaMallocAsync`, `max_split_size_mb`, `roundup_power2_divisions`, ...), is
/// refused; the host-side `pinned_*` options and `garbage_collection_threshold` (it acts only under a per-process
/// memory fraction the reference trainer does not set: allocator.hpp) pass; an `expandable_segments` that differs
/// from the plan's is refused, as the trainer refuses it at start (`runtime.allocator_conf`,
/// apps/train/bwtrain/runtime.py).
[[nodiscard]] inline std::string alloc_conf_problem(const std::string& conf, bool expandable_segments) {
  std::optional<bool> expandable;
  std::size_t at = 0;
  while (at <= conf.size()) {
    const std::size_t comma = conf.find(',', at);
    std::string opt = conf.substr(at, comma == std::string::npos ? std::string::npos : comma - at);
    opt.erase(std::remove_if(opt.begin(), opt.end(), [](unsigned char ch) { return std::isspace(ch) != 0; }), opt.end());
    const std::size_t colon = opt.find(':');
    const std::string key = opt.substr(0, colon), value = colon == std::string::npos ? "" : opt.substr(colon + 1);
    if (key == "expandable_segments") {
      if (value != "True" && value != "False")
        return "expandable_segments:" + value + " is not a value PyTorch reads (True or False)";
      expandable = value == "True";
    } else if (!key.empty() && key != "garbage_collection_threshold" && key.rfind("pinned_", 0) != 0) {
      return key + " is not a setting bwplan estimates (the plan's peak reserved follows PyTorch's native caching allocator "
                   "with expandable_segments on or off)";
    }
    if (comma == std::string::npos) break;
    at = comma + 1;
  }
  // (without the option the trainer appends the plan's: runtime.allocator_conf)
  if (expandable && *expandable != expandable_segments)
    return std::string("the plan was estimated with expandable_segments ") + (expandable_segments ? "on" : "off") +
           " (the trainer refuses an allocator setting that sets it the other way)";
  return {};
}

/// The environment variable of `env` (a name → value map) PyTorch reads its allocator settings from:
/// `PYTORCH_ALLOC_CONF` when set (torch 2.9 and later read it first and ignore the older name), else
/// `PYTORCH_CUDA_ALLOC_CONF` when set, else nullptr.
[[nodiscard]] inline const char* alloc_conf_variable(const nlohmann::json& env) {
  if (env.is_object() && env.contains("PYTORCH_ALLOC_CONF")) return "PYTORCH_ALLOC_CONF";
  if (env.is_object() && env.contains("PYTORCH_CUDA_ALLOC_CONF")) return "PYTORCH_CUDA_ALLOC_CONF";
  return nullptr;
}

/// Reads the plan out of a SageMaker job that follows the training contract `k`: the plan fields from its
/// hyperparameters (strings as SageMaker stores them, JSON-quoted by SDK v2 or plain, booleans true/True;
/// typed values in the estimator and ModelTrainer forms), `instance` and `nodes` from
/// `ResourceConfig.InstanceType` / `InstanceCount` (`instance_type` / `instance_count` in the SDK forms).
/// Keys starting with `sagemaker_` are the SDK's and skipped; contract-only keys (max_steps, ...) are checked
/// and not part of the plan; any other key is an error, as it is for the trainer. The plan must be one the
/// trainer runs (trainer_refusals). The document's pointers translate plan pointers into the job.
///
/// Throws config_error with the pointer of the member in the job (e.g. `/HyperParameters/seq_len`).
[[nodiscard]] inline plan_document plan_from_job(const nlohmann::json& j, const std::string& file, document_kind kind,
                                                 const training_contract& k) {
  std::string hp_ptr, type_ptr, count_ptr;
  bool typed = true;
  switch (kind) {
    case document_kind::request:
      hp_ptr = "/HyperParameters", type_ptr = "/ResourceConfig/InstanceType", count_ptr = "/ResourceConfig/InstanceCount";
      typed = false;
      break;
    case document_kind::estimator:
      hp_ptr = "/estimator/hyperparameters", type_ptr = "/estimator/instance_type", count_ptr = "/estimator/instance_count";
      break;
    case document_kind::modeltrainer:
      hp_ptr = "/model_trainer/hyperparameters", type_ptr = "/model_trainer/compute/instance_type",
      count_ptr = "/model_trainer/compute/instance_count";
      break;
    default: throw config_error(file, "", "not a SageMaker job");
  }
  const std::string what = to_string(kind);
  auto at = [&](const std::string& ptr) -> const nlohmann::json* {
    const nlohmann::json::json_pointer jp(ptr);
    return j.contains(jp) ? &j.at(jp) : nullptr;
  };
  const nlohmann::json* hps = at(hp_ptr);
  if (hps == nullptr || !hps->is_object())
    throw config_error(file, hp_ptr, "a " + what + " for the reference trainer carries the plan in its hyperparameters (training contract "
                                         "version " + std::to_string(k.version) + "); none found");
  nlohmann::json pj = nlohmann::json::object();
  std::vector<std::pair<std::string, std::string>> map;
  std::vector<std::string> keys;
  for (auto it = hps->begin(); it != hps->end(); ++it) {
    const std::string& name = it.key();
    const std::string ptr = hp_ptr + "/" + pointer_escape(name);
    bool ignored = false;
    for (const auto& prefix : k.ignored_prefixes) ignored = ignored || name.rfind(prefix, 0) == 0;
    // `probe` switches the trainer to its probe mode (`train.py --probe probe.json`, bwplan sagemaker --probe): the
    // request's other hyperparameters are still the plan the probe was made from (its first entry runs it with one
    // micro-batch per step) and its settings, read here;
    // a review found `check probe.job.json` refusing it as unknown
    if (ignored || name == "probe") continue;
    const contract_field* f = k.by_hyperparameter(name);
    if (f == nullptr) {
      if (const contract_field* known = k.field(name); known != nullptr)
        throw config_error(file, ptr, "hyperparameter '" + name + "': not accepted, " +
                                          (known->source == "resource-config" ? std::string("it comes from the SageMaker ResourceConfig")
                                                                              : std::string("it is planning-only and not sent to the trainer")));
      std::string msg = "hyperparameter '" + name + "': unknown (not in training contract version " + std::to_string(k.version) + ")";
      if (auto m = closest_match(name, k.hyperparameter_names())) msg += " (did you mean '" + *m + "'?)";
      throw config_error(file, ptr, msg);
    }
    std::string raw;
    if (it->is_string()) raw = it->get<std::string>();
    else if (!typed) throw config_error(file, ptr, "hyperparameter '" + name + "': SageMaker hyperparameter values are strings, got " + it->type_name());
    else if (it->is_null()) raw = "null";
    else raw = hyperparameter_text(*it);
    if (is_null_hyperparameter(k, raw)) {
      // "not given": the default applies, but a required member has none (apps/train/contract.py refuses it:
      // "hyperparameter 'gpus': required"; `check job.json` passed "gpus": "" and the trainer refused it at start)
      if (f->required)
        throw config_error(file, ptr, "hyperparameter '" + name + "' is required (" + detail::expected(*f) + "), got '" + raw + "'");
      continue;
    }
    nlohmann::json v;
    try {
      v = decode_hyperparameter(*f, raw);
    } catch (const plan_error& e) {
      throw config_error(file, ptr, e.violation().message);
    }
    if (f->kind != "plan") continue;
    pj[f->key] = v;
    map.emplace_back("/" + f->key, ptr);
    keys.push_back(f->key);
  }
  for (const auto& f : k.fields)
    if (f.required && f.hyperparameter && !hps->contains(*f.hyperparameter))
      throw config_error(file, hp_ptr, "hyperparameter '" + *f.hyperparameter + "' is required (" + detail::expected(f) + ")");
  // instance and nodes: the resource config
  const nlohmann::json* type = at(type_ptr);
  if (type == nullptr) throw config_error(file, type_ptr, "missing: the instance type of the job");
  if (!type->is_string()) throw config_error(file, type_ptr, std::string("expected a string, got ") + type->type_name());
  if (const contract_field* f = k.field("instance")) {
    try { (void)decode_hyperparameter(*f, type->get<std::string>()); }
    catch (const plan_error& e) { throw config_error(file, type_ptr, e.violation().message); }
  }
  pj["instance"] = *type;
  map.emplace_back("/instance", type_ptr);
  keys.push_back("instance");
  const nlohmann::json* count = at(count_ptr);
  if (count == nullptr) throw config_error(file, count_ptr, "missing: the instance count of the job");
  pj["nodes"] = *count;
  map.emplace_back("/nodes", count_ptr);
  keys.push_back("nodes");
  auto mapped = [&](const std::string& p) {
    for (const auto& [from, to] : map)
      if (p == from || p.rfind(from + "/", 0) == 0) return to + p.substr(from.size());
    return hp_ptr;
  };
  plan_document d;
  try {
    d = plan_from_json(pj, file);
  } catch (const config_error& e) {
    throw config_error(file, mapped(e.pointer()), e.reason());
  }
  d.keys = keys;
  d.kind = kind;
  d.pointers = map;
  // the job's allocator setting against the plan's (a review: `check` passed a job whose Environment set
  // expandable_segments against its hyperparameter, which the trainer refuses at start, and cudaMallocAsync)
  const std::string env_ptr = kind == document_kind::request ? "/Environment"
                              : kind == document_kind::estimator ? "/estimator/environment" : "/model_trainer/environment";
  if (const nlohmann::json* env = at(env_ptr); env != nullptr) {
    if (const char* var = alloc_conf_variable(*env)) {
      const nlohmann::json& conf = (*env)[var];
      const std::string ptr = env_ptr + "/" + var;
      if (!conf.is_string()) throw config_error(file, ptr, std::string("expected a string, got ") + conf.type_name());
      if (const std::string why = alloc_conf_problem(conf.get<std::string>(), d.value.training.expandable_segments); !why.empty())
        throw config_error(file, ptr, why);
    }
  }
  // what the trainer refuses (its world size is `gpus`)
  plan p = d.value;
  p.training.world_size = p.target.gpus;
  if (p.training.world_size > 0 && p.training.tp >= 1 && p.training.cp >= 1 && p.training.pp >= 1) {
    p.training.gpus_per_node = std::max(1, p.training.world_size / std::max(1, p.target.nodes));
    for (const auto& v : trainer_refusals(k, p)) throw config_error(file, mapped(v.pointer), v.message);
  }
  return d;
}

/// Rules a SageMaker job adds once the plan is resolved (`p.training.world_size` and `gpus_per_node` set by
/// resolve_world): torchrun starts one process per GPU of every instance, so `gpus` is every GPU of the
/// instances (the trainer refuses another world size, T-world). None for a plan file.
[[nodiscard]] inline std::vector<plan_violation> job_violations(const plan_document& d, const plan& p) {
  if (d.kind == document_kind::plan) return {};
  const training_config& c = p.training;
  const int all = p.target.nodes * c.gpus_per_node;
  if (c.world_size == all) return {};
  return {{"gpus", "/gpus", "the job runs " + std::to_string(all) + " processes (" + std::to_string(p.target.nodes) + " x " +
                                std::to_string(c.gpus_per_node) + " GPUs of " + p.target.instance + "), but the plan's world size is " +
                                std::to_string(c.world_size) + " (the trainer refuses it: T-world)"}};
}

/// Supplies the training contract when a document turns out to be a SageMaker job (the CLI reads
/// <configs>/training-contract.json). Empty: such a document is an error.
using contract_source = std::function<training_contract()>;

/// Parses plan text `text` read from `file`: a plan file, or a SageMaker job (detect_document_kind) read through
/// the contract `contract` supplies. Errors carry the member's line, column and byte offset.
[[nodiscard]] inline plan_document parse_plan(const std::string& text, const std::string& file, const contract_source& contract = {}) {
  const nlohmann::json j = parse_json(text, file);
  try {
    const document_kind kind = detect_document_kind(j);
    plan_document p;
    if (kind == document_kind::plan) {
      p = plan_from_json(j, file);
    } else {
      if (!contract) throw config_error(file, "", std::string("a ") + to_string(kind) + " is read through the training contract, which was not given");
      p = plan_from_job(j, file, kind, contract());
    }
    p.text = text;
    return p;
  } catch (const config_error& e) {
    throw with_location(e, text);
  }
}

/// Loads the plan file (or SageMaker job, see parse_plan) at `path`. Throws config_error.
[[nodiscard]] inline plan_document load_plan(const std::filesystem::path& path, const contract_source& contract = {}) {
  return parse_plan(read_text_file(path), path.string(), contract);
}

}  // namespace io
}  // namespace bwplan
