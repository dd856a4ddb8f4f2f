// bwplan: GPU memory and throughput planning for LLM training
// SPDX-License-Identifier: Apache-2.0
#pragma once

// The rules of `bwplan check`: each has a stable ID, a severity and a message that says how to fix it.

#include <bwplan/calibration.hpp>
#include <bwplan/hardware.hpp>
#include <bwplan/memory.hpp>
#include <bwplan/model.hpp>
#include <bwplan/plan.hpp>
#include <bwplan/planner.hpp>
#include <bwplan/throughput.hpp>
#include <bwplan/training.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace bwplan {

/// How serious a finding is. `--fail-on error` fails on errors only, `--fail-on warning` on both.
enum class severity { warning, error };
[[nodiscard]] constexpr const char* to_string(severity s) noexcept { return s == severity::error ? "error" : "warning"; }

/// One rule of `bwplan check`. IDs never change meaning; new rules get new IDs.
struct rule_info {
  std::string_view id;       ///< "BWP001"
  std::string_view name;     ///< "does-not-fit"
  severity level;
  std::string_view summary;  ///< one line, for SARIF rule metadata and docs/ci.md
};

/// All rules, in ID order (documented in docs/ci.md#rules).
[[nodiscard]] inline const std::vector<rule_info>& check_rules() {
  static const std::vector<rule_info> r{
      {"BWP001", "does-not-fit", severity::error, "peak device memory exceeds what CUDA can use on the GPU"},
      {"BWP002", "headroom-low", severity::warning, "the plan fits, but leaves less free memory than its headroom"},
      {"BWP003", "global-batch-indivisible", severity::error,
       "global batch is not micro-batch x data-parallel size x gradient accumulation"},
      {"BWP004", "seq-exceeds-context", severity::error, "sequence length is longer than the model's context"},
      {"BWP005", "parallel-degree-indivisible", severity::error,
       "a parallel degree does not divide the heads, layers, sequence or GPUs"},
      {"BWP006", "precision-unsupported-on-gpu", severity::error, "the GPU has no tensor-core support for the precision"},
      {"BWP007", "mfu-far-below-best", severity::warning, "MFU is far under the best plan the planner finds"},
      {"BWP008", "step-time-too-long", severity::warning, "gradient accumulation makes one optimizer step exceed the bound"},
      {"BWP009", "not-modelled", severity::error,
       "the plan asks for a parallelism this release cannot evaluate (pipeline parallelism with hybrid or grad-op sharding, "
       "adapters or FP8 all-gather)"},
      {"BWP010", "settings-conflict", severity::error,
       "settings that cannot go together (FP8 all-gather without fp8 and full sharding, a shard group without hybrid "
       "sharding, a checkpoint interval without full checkpointing)"},
      {"BWP011", "host-memory", severity::error,
       "CPU offload needs more host memory on a node than the instance has (offloaded states, gradients, checkpoints and pinned "
       "buffers of every rank of the node)"},
      {"BWP012", "tight", severity::warning,
       "the plan fits, but the top of its memory error band comes within 3 % of the capacity (docs/calibration.md#bands)"},
  };
  return r;
}

/// The rule with ID `id`, or nullptr.
[[nodiscard]] inline const rule_info* find_rule(std::string_view id) {
  for (const auto& r : check_rules())
    if (r.id == id) return &r;
  return nullptr;
}

/// One rule that fired on one plan.
struct finding {
  std::string rule;                   ///< rule_info::id
  std::string name;                   ///< rule_info::name
  severity level = severity::error;
  std::string message;                ///< what is wrong, with the numbers
  std::string fix;                    ///< how to fix it
  std::vector<std::string> pointers;  ///< plan members it is about, most specific first (for file:line)
};

/// A plan resolved against the catalog and the model, as `check_plan` evaluates it.
struct check_input {
  model_spec model;
  gpu_spec gpu;
  const instance_spec* instance = nullptr;  ///< null for a bare GPU
  plan p;                                   ///< world size resolved (resolve_world); grad_accum: the plan's, or 1
  bool grad_accum_given = false;            ///< the plan set grad_accum explicitly (else it follows from the global batch)
  calibration_constants constants;          ///< the constants for this GPU and stack (--calibration; the defaults without)
  std::optional<error_band> band;           ///< the estimate's error band (BWP012); none: no band known
  bool headroom_given = true;               ///< the plan set "headroom" (else the caller's default: recommend's, from the band)
};

/// What check_plan found and the numbers it used.
struct check_result {
  std::vector<finding> findings;
  training_config config;                      ///< as evaluated (gradient accumulation derived)
  std::optional<memory_estimate> memory;       ///< absent when the plan could not be evaluated (BWP009, BWP005, BWP006)
  std::optional<throughput_estimate> throughput;
  std::optional<error_band> band;              ///< the band the verdict used (check_input::band)
  fit_verdict verdict = fit_verdict::does_not_fit;  ///< fits / tight / does not fit (with the band; two states without one)
  std::optional<plan_candidate> best;          ///< best plan of the full search (every precision) for the same model, hardware, sequence and batch
  std::optional<plan_candidate> best_same_precision;  ///< best plan of that search in the plan's own precision (BWP007's yardstick)
  std::vector<std::string> skipped;            ///< rule IDs not applied (plan not evaluable or disabled)
};

namespace detail {

inline std::string fmt_double(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}
inline std::string gib_str(bytes b) { return fmt_double("%.2f GiB", b.in(gib)); }
/// Integer with thousands separators: 1234567 → "1,234,567".
inline std::string grouped(double v) {
  const long long n = static_cast<long long>(v < 0 ? -v : v);
  const std::string digits = std::to_string(n);
  std::string s = v < 0 ? "-" : "";
  for (std::size_t i = 0; i < digits.size(); ++i) {  // (not string::insert: GCC 12 -Wrestrict false positive)
    if (i > 0 && (digits.size() - i) % 3 == 0) s += ',';
    s += digits[i];
  }
  return s;
}
/// The settings of a configuration as plan keys, e.g. `micro_batch_size 4, activation_checkpointing full, …`.
inline std::string plan_settings(const training_config& c) {
  std::string s = "micro_batch_size " + std::to_string(c.micro_batch) + ", grad_accum " + std::to_string(c.grad_accum) +
                  ", activation_checkpointing " + to_string(c.ac) + ", precision " + to_string(c.format) +
                  ", sharding " + to_string(c.shard);
  if (c.shard == sharding::hybrid || (c.shard == sharding::optimizer && c.shard_group > 0))
    s += ", shard_group " + std::to_string(c.shard_size());
  if (c.tp > 1) s += ", tp " + std::to_string(c.tp);
  if (c.cp > 1) s += ", cp " + std::to_string(c.cp);
  if (c.ep > 1) s += ", ep " + std::to_string(c.ep);
  if (c.pp > 1) {
    s += ", pp " + std::to_string(c.pp) + ", pp_schedule " + to_string(c.schedule);
    if (c.vpp > 1) s += ", vpp " + std::to_string(c.vpp);
  }
  s += std::string(", loss ") + to_string(c.loss);
  if (c.expandable_segments) s += ", expandable_segments true";
  if (c.offload != 0) s += ", offload " + offload_to_string(c.offload);
  return s;
}

/// The rule a broken legality rule (plan_violations) belongs to, by field.
inline std::string_view rule_for(const plan_violation& v) {
  const std::string& f = v.field;
  if (f == "global_batch_size") return "BWP003";
  if (f == "seq_len") return "BWP004";
  if (f == "pp" && v.message.find("not modelled") != std::string::npos) return "BWP009";
  if (f == "tp" || f == "cp" || f == "ep" || f == "pp" || f == "gpus" || f == "nodes" || f == "gpus_per_node") return "BWP005";
  // (CPU offload's rules, field "offload" or the setting it needs, are BWP010; with pp > 1 BWP009 above)
  return "BWP010";
}

/// BWP001's fix: the memory savers a plan that does not fit has left, named for what it already runs. A setting it
/// already has is not suggested again (micro-batch 1, every block checkpointed, FSDP full shard, the chunked loss,
/// optimizer offload); context parallelism is named for a long sequence; and when its model states alone (parameters,
/// optimizer states and gradients at the peak, with the CUDA context) pass what CUDA can use, only what shrinks them
/// is (more GPUs under full sharding, optimizer offload, bf16 masters with 8-bit AdamW states, LoRA). The list was
/// the same for every plan ("reduce micro_batch_size, enable activation_checkpointing, ...") even at micro-batch 1
/// with full checkpointing.
[[nodiscard]] inline std::string memory_savers_hint(const training_config& c, const memory_estimate& me) {
  const memory_breakdown& b = me.at_peak;
  const bytes states = b.parameters + b.optimizer_states + b.gradients;
  const bool states_alone = states + me.non_pytorch > me.capacity;
  const bool megatron = c.stack == training_stack::megatron;
  std::vector<std::string> fixes;
  if (!states_alone) {
    if (c.micro_batch > 1) fixes.emplace_back("reduce micro_batch_size");
    if (!(c.ac.mode == ac_mode::full && c.ac.every == 1)) fixes.emplace_back("checkpoint every block (\"activation_checkpointing\": \"full\")");
    if (c.loss == loss_impl::standard && !megatron) fixes.emplace_back("use loss chunked");
    if (c.cp == 1 && c.seq_len >= 32768 && c.world_size > 1) fixes.emplace_back("split the sequence with context parallelism (cp)");
  }
  if (c.world_size > 1 && c.shard != sharding::full && !megatron) fixes.emplace_back("use sharding full");
  if (c.offload == 0 && !c.adapters() && !megatron) fixes.emplace_back("offload the optimizer to the CPU (\"offload\": \"optimizer\")");
  if (states_alone && !c.adapters()) {
    if (c.master == master_weights::fp32 && !megatron)
      fixes.emplace_back("keep bf16 master weights with 8-bit AdamW states (\"master_weights\": \"bf16\", \"optimizer\": \"adamw-8bit\")");
    if (c.stack == training_stack::hf || c.stack == training_stack::torchtune) fixes.emplace_back("fine-tune with LoRA (\"finetune\": \"lora\")");
  }
  fixes.emplace_back(c.world_size == 1 ? "spread the model states over more GPUs with sharding full" : "add nodes");
  std::string out = states_alone ? "the model states alone (" + gib_str(states) + " per GPU) do not fit: " : std::string();
  for (std::size_t i = 0; i < fixes.size(); ++i)
    out += (i == 0 ? "" : i + 1 == fixes.size() ? ", or " : ", ") + fixes[i];
  return out;
}

}  // namespace detail

/// Gradient accumulation that makes `global_batch` sequences from micro-batches of `mbs` on `dp` replicas:
/// `global / (mbs · dp)`, rounded up when it does not divide (rule BWP003 reports that).
[[nodiscard]] constexpr std::int64_t grad_accum_for(std::int64_t global_batch, std::int64_t mbs, std::int64_t dp) noexcept {
  const std::int64_t per_step = std::max<std::int64_t>(1, mbs * dp);
  return std::max<std::int64_t>(1, (global_batch + per_step - 1) / per_step);
}

/// The search `check` and `report` run around a plan `p`: full_search over every layout of the plan's GPUs (sharding,
/// tensor and pipeline parallelism, checkpointing, loss, micro-batch; the precisions `formats`, empty: every one `gpu`
/// supports) with every other setting the plan chose kept: sequence length, master weights, the optimizer and its
/// implementation, fine-tuning mode and LoRA settings, stack, compile, module kernels, allocator setting, optimizer
/// placement, sequence parallel, FSDP units, the TP and MoE overlaps and CPU offload. Megatron plans search Megatron's
/// data parallelism and loss only; adapters tp 1 and bf16 (violations of training_config). Tokens per step and headroom
/// are the caller's. A bare GPU (`inst` null) searches the plan's world size as one node.
[[nodiscard]] inline plan_request search_around(const plan& p, const gpu_spec& gpu, const instance_spec* inst,
                                                std::vector<compute_format> formats) {
  const training_config& c = p.training;
  plan_request req = full_search(gpu, inst ? p.target.nodes : c.world_size, std::move(formats), inst ? inst->nvlink_domain_gpus : 0);
  req.seq_lens = {c.seq_len};
  req.master = c.master;
  req.optimizer = c.optimizer;
  req.finetune = c.finetune;  // the same fine-tuning and optimizer as the plan
  req.lora = c.lora;
  req.optimizers = {c.optim};
  req.stack = c.stack;  // the same stack and compile setting as the plan
  req.compile = c.compile;
  req.modules = c.modules;
  req.expandable_segments = c.expandable_segments;
  req.optimizer_in_backward = c.optimizer_in_backward;  // the same optimizer placement
  req.sequence_parallel = c.sequence_parallel;          // the same tensor-parallel layout
  req.fsdp_embedding_units = c.fsdp_embedding_units;    // the same FSDP units
  req.tp_comm_overlap = c.tp_comm_overlap;              // the same tensor-parallel overlap
  req.moe_a2a_overlap = c.moe_a2a_overlap;              // the same expert-parallel overlap
  req.offloads = {c.offload};  // the same CPU offload
  if (c.stack == training_stack::megatron) { req.shardings = {sharding::none, sharding::optimizer}; req.losses = {loss_impl::standard}; }
  if (c.adapters()) { req.tps = {1}; req.formats = {compute_format::bf16}; }
  return req;
}

/// Applies every rule of check_rules() to `in`.
///
/// Structural rules first: BWP003 batch arithmetic, then the plan's legality rules (plan_violations: BWP005
/// parallel degrees against heads, KV heads, experts, layers, sequence and GPUs; BWP009 what is not modelled
/// (pipeline parallelism with hybrid or grad-op sharding, adapters or FP8 all-gather);
/// BWP010 conflicting settings; BWP004 learned positions), BWP004 the model's context, BWP006 precision on the
/// GPU. When the plan is evaluable, the memory and throughput estimates (estimate_memory, estimate_throughput)
/// and the search `recommend` runs (full_search: every sharding, tp, checkpointing, loss and every precision
/// the GPU supports) with the same model, hardware, sequence length, tokens per step, master weights, optimizer
/// and headroom for BWP001, BWP002, BWP007 and BWP008; BWP011 compares CPU offload's host memory per node
/// (host_memory_per_node) with the instance's RAM. Disabled rules (check.disable) are skipped. Never throws
/// for a plan that does not work: that is what the findings are for.
[[nodiscard]] inline check_result check_plan(const check_input& in) {
  using detail::fmt_double;
  using detail::gib_str;
  check_result res;
  plan p = in.p;
  training_config& c = p.training;
  const model_spec& m = in.model;
  const check_settings& settings = in.p.check;
  auto disabled = [&](std::string_view id) {
    return std::find(settings.disable.begin(), settings.disable.end(), id) != settings.disable.end();
  };
  auto fire = [&](std::string_view id, std::string msg, std::string fix, std::vector<std::string> ptrs) {
    if (disabled(id)) return;
    const rule_info* r = find_rule(id);
    res.findings.push_back({std::string(r->id), std::string(r->name), r->level, std::move(msg), std::move(fix), std::move(ptrs)});
  };
  bool evaluable = true;
  for (const auto& r : check_rules())
    if (disabled(r.id)) res.skipped.emplace_back(r.id);

  // ---- BWP003: batch arithmetic (the accumulation follows from the global batch unless the plan sets both)
  const std::int64_t model_par = std::int64_t{c.tp} * c.cp * c.pp;
  const std::int64_t dp = model_par > 0 && c.world_size % model_par == 0 ? c.world_size / model_par : 0;
  if (dp > 0 && p.global_batch) {
    const std::int64_t g = *p.global_batch;
    const std::int64_t per = c.micro_batch * dp;
    if (in.grad_accum_given) {
      if (per * c.grad_accum != g)
        fire("BWP003",
             "global_batch_size " + std::to_string(g) + " != micro_batch_size " + std::to_string(c.micro_batch) +
                 " x data-parallel size " + std::to_string(dp) + " x grad_accum " + std::to_string(c.grad_accum) + " = " +
                 std::to_string(per * c.grad_accum) + " sequences",
             g % per == 0 ? "set grad_accum to " + std::to_string(g / per) + " (or remove it: it follows from the global batch)"
                          : "make global_batch_size a multiple of " + std::to_string(per) + " and grad_accum = global / " +
                                std::to_string(per),
             {"/global_batch_size", "/grad_accum", "/micro_batch_size"});
    } else {
      if (g % per != 0) {
        const std::int64_t lo = g / per * per, hi = lo + per;
        fire("BWP003",
             "global_batch_size " + std::to_string(g) + " is not divisible by micro_batch_size " + std::to_string(c.micro_batch) +
                 " x data-parallel size " + std::to_string(dp) + " = " + std::to_string(per) + " sequences",
             "use global_batch_size " + (lo > 0 ? std::to_string(lo) + " or " : std::string{}) + std::to_string(hi) +
                 ", or a micro-batch that divides " + std::to_string(g) + " / " + std::to_string(dp),
             {"/global_batch_size", "/micro_batch_size"});
      }
      c.grad_accum = grad_accum_for(g, c.micro_batch, dp);
    }
  }
  p.global_batch.reset();  // reported above

  // ---- the plan's legality rules (plan.hpp), each under its rule ID
  std::vector<std::string> layout, layout_ptrs;
  for (const plan_violation& v : plan_violations(m, p)) {
    const std::string_view id = detail::rule_for(v);
    if (id == "BWP005") {
      layout.push_back(v.field + ": " + v.message);
      layout_ptrs.push_back(v.pointer);
      if (v.field == "gpus" || v.field == "ep") layout_ptrs.insert(layout_ptrs.end(), {"/gpus", "/nodes"});
      continue;
    }
    if (id == "BWP004") {
      fire(id, v.message, "use a shorter seq_len", {v.pointer});
    } else if (id == "BWP009") {
      fire(id, v.field + ": " + v.message + ", so the plan cannot be checked",
           "use a combination this release models (docs/scaling.md#pipeline-parallelism)", {v.pointer});
    } else if (id == "BWP010") {
      fire(id, v.field + ": " + v.message, "change one of the settings (docs/ci.md#bwp010)", {v.pointer});
    } else {
      fire(id, v.field + ": " + v.message, "fix " + v.field, {v.pointer});
    }
    if (id != "BWP004") evaluable = false;
  }
  if (!layout.empty()) {
    std::string msg;
    for (std::size_t i = 0; i < layout.size(); ++i) msg += (i ? "; " : "") + layout[i];
    fire("BWP005", msg,
         "choose degrees that divide the model's heads and layers and the GPU count (e.g. tp in {1, 2, 4, 8} dividing " +
             std::to_string(m.kv_heads) + " KV heads)",
         layout_ptrs);
    evaluable = false;
  }

  // ---- BWP006: precision on the GPU
  if (!supports(in.gpu, c.format)) {
    std::string have;
    for (const auto& x : precisions())
      if (supports(in.gpu, x.format)) have += (have.empty() ? "" : ", ") + std::string(x.name);
    fire("BWP006",
         std::string("precision '") + to_string(c.format) + "' has no tensor-core support on " + in.gpu.id + " (" +
             in.gpu.architecture + (info(c.format).blackwell_only ? "; block-scaled formats need Blackwell" : "") + ")",
         "use one of " + have + " on " + in.gpu.id + ", or a GPU that supports " + to_string(c.format) +
             " (e.g. an ml.p6-b200.48xlarge instance)",
         {"/precision", "/gpu", "/instance"});
    evaluable = false;
  }

  // ---- BWP004: context
  if (c.seq_len > m.max_context)
    fire("BWP004",
         "seq_len " + std::to_string(c.seq_len) + " is longer than " + m.name + "'s context of " + std::to_string(m.max_context) +
             " tokens (max_position_embeddings)",
         "use seq_len <= " + std::to_string(m.max_context) +
             " (for deliberate context extension, add \"check\": {\"disable\": [\"BWP004\"]})",
         {"/seq_len"});

  res.config = c;
  if (!evaluable || (m.positions > 0 && c.seq_len > m.positions)) {
    for (const char* id : {"BWP001", "BWP002", "BWP007", "BWP008", "BWP011", "BWP012"})
      if (!disabled(id)) res.skipped.emplace_back(id);
    return res;
  }

  // ---- evaluation
  const memory_estimate me = estimate_memory(m, c, in.gpu, in.constants.overheads);
  const throughput_estimate te = estimate_throughput(m, c, in.gpu, in.instance, in.constants.throughput);
  res.memory = me;
  res.throughput = te;
  res.band = in.band;
  res.verdict = verdict_of(me, in.band ? in.band->memory : 0.0);
  plan_request req = search_around(p, in.gpu, in.instance, {});
  // in floating point: the product of the plan's largest values exceeds int64 (clamped far above any real job)
  req.global_batch_tokens = static_cast<std::int64_t>(std::min(
      0x1p60, static_cast<double>(c.micro_batch) * static_cast<double>(c.seq_len) * static_cast<double>(c.grad_accum) *
                  static_cast<double>(c.dp())));
  req.headroom = p.headroom;
  const plan_result best = search_plans(m, in.gpu, in.instance, req, 1, false, in.constants.overheads, in.constants.throughput);
  if (!best.ranked.empty()) res.best = best.ranked.front();
  for (const auto& b : best.best_per_format)
    if (b.config.format == c.format) res.best_same_precision = b;
  const std::string best_hint =
      res.best ? "; the best plan found for this model, hardware and batch: " + detail::plan_settings(res.best->config) +
                     " (peak " + gib_str(res.best->memory.device_peak()) + ", MFU " +
                     fmt_double("%.1f%%", 100 * res.best->throughput.mfu) + ")"
               : "";

  // ---- BWP001 / BWP002: memory
  const bytes cap = me.capacity;
  if (!me.fits) {
    const bytes missing = me.device_peak() - cap;
    fire("BWP001",
         "does not fit on " + in.gpu.id + ": peak " + gib_str(me.device_peak()) + " per GPU (" + to_string(me.peak_phase) +
             " phase) but CUDA can use " + gib_str(cap) + "; " + detail::grouped(std::ceil(missing.raw())) + " bytes (" +
             gib_str(missing) + ") missing",
         std::string(me.allocator_setting == allocator_setting_verdict::fits_if_expandable
                         ? "it fits with the caching allocator's expandable_segments:True: set \"expandable_segments\": true "
                           "(--expandable-segments; the SageMaker job then sets PYTORCH_CUDA_ALLOC_CONF), or "
                         : "") +
             detail::memory_savers_hint(c, me) + best_hint,
         {"/micro_batch_size", "/activation_checkpointing", "/model"});
  } else if (me.headroom() < p.headroom &&
             // a defaulted headroom is the band's own margin (context::default_headroom): BWP012 says "tight" for it
             !(!in.headroom_given && in.band && res.verdict == fit_verdict::tight)) {
    const bytes want = (1.0 - p.headroom) * cap;
    const bytes over = me.device_peak() - want;
    fire("BWP002",
         "fits, but peak " + gib_str(me.device_peak()) + " leaves " + fmt_double("%.1f%%", 100 * me.headroom()) + " of " +
             gib_str(cap) + " free, under the " + fmt_double("%.1f%%", 100 * p.headroom) + " headroom; " +
             detail::grouped(std::ceil(over.raw())) + " bytes over",
         "free " + gib_str(over) + " (smaller micro_batch_size, activation checkpointing, chunked loss) or lower \"headroom\"" +
             best_hint,
         {"/headroom", "/micro_batch_size"});
  }

  // ---- BWP011: host memory of CPU offload against the instance's RAM (a bare GPU has no stated host)
  if (me.host_per_gpu.raw() > 0) {
    const bytes need = host_memory_per_node(me, c);
    const int ranks = std::max(1, std::min(c.gpus_per_node, c.world_size));
    if (in.instance && in.instance->host_memory.raw() > 0 && need > in.instance->host_memory) {
      fire("BWP011",
           "offload " + offload_to_string(c.offload) + " needs " + gib_str(need) + " of host memory per node (" + gib_str(me.host_per_gpu) +
               " per rank x " + std::to_string(ranks) + " ranks) but " + in.instance->id + " has " + gib_str(in.instance->host_memory),
           "offload less (offload optimizer without params, or no activations), shard over more nodes (each rank's host share is "
           "divided by the shard size), or use a smaller optimizer state (--optimizer)",
           {"/offload", "/instance", "/nodes"});
    } else if (!in.instance && !disabled("BWP011")) {
      res.skipped.emplace_back("BWP011");  // no host memory to compare with
    }
  }
  // ---- BWP012: tight (the band crosses the capacity less the margin)
  if (in.band && res.verdict == fit_verdict::tight) {
    const bytes top = band_top(me, in.band->memory);
    // the group the memory band was measured on: the plan's own, or the one error_bands::lookup took it from (it named
    // the plan's group, "h100/hf/fsdp from 47 measured runs", for a band of H200 runs)
    const std::string from = in.band->memory_from.empty() || in.band->memory_from == in.band->label()
                                 ? in.band->label() + " from " + std::to_string(in.band->rows) + " measured runs"
                                 : "measured on " + in.band->memory_from + "; no run of " + in.band->label();
    fire("BWP012",
         "fits, but with its error band (peak reserved +" + fmt_double("%.1f%%", 100 * in.band->memory) + ", " + from + ") the device peak may reach " +
             gib_str(top) + ", within " + fmt_double("%.0f%%", 100 * tight_margin) + " of the " + gib_str(cap) + " CUDA can use",
         "free " + gib_str(top - (1 - tight_margin) * cap) +
             " (smaller micro_batch_size, activation checkpointing, chunked loss), or measure it first: bwplan sagemaker --probe" + best_hint,
         {"/micro_batch_size", "/activation_checkpointing"});
  }

  // ---- BWP007: MFU against the best plan in the plan's own precision (a precision is a numerics choice: a
  // bf16 plan is not "far below" an nvfp4 one; the best plan of any precision is named beside it)
  if (me.fits && res.best_same_precision && te.mfu < settings.min_mfu_ratio * res.best_same_precision->throughput.mfu) {
    const plan_candidate& b = *res.best_same_precision;
    std::string other;
    if (res.best && res.best->config.format != c.format)
      other = "; the best plan of any precision runs " + std::string(to_string(res.best->config.format)) + " at " +
              fmt_double("%.0f", res.best->throughput.tokens_per_s) + " tokens/s";
    fire("BWP007",
         "MFU " + fmt_double("%.1f%%", 100 * te.mfu) + " is under " + fmt_double("%.0f%%", 100 * settings.min_mfu_ratio) +
             " of the best " + to_string(c.format) + " plan's " + fmt_double("%.1f%%", 100 * b.throughput.mfu) + " (" +
             fmt_double("%.0f", te.tokens_per_s) + " vs " + fmt_double("%.0f", b.throughput.tokens_per_s) + " tokens/s)" + other,
         "use the best plan's settings: " + detail::plan_settings(b.config) + " (peak " + gib_str(b.memory.device_peak()) + ")",
         {"/micro_batch_size", "/activation_checkpointing", "/sharding", "/precision"});
  }

  // ---- BWP008: step time
  if (c.grad_accum > 1 && te.step.raw() > settings.max_step_time_s) {
    const auto fit_ga = static_cast<std::int64_t>(std::floor(settings.max_step_time_s / te.step.raw() * static_cast<double>(c.grad_accum)));
    fire("BWP008",
         "one optimizer step takes " + fmt_double("%.1f s", te.step.raw()) + " with grad_accum " + std::to_string(c.grad_accum) +
             ", over the " + fmt_double("%.1f s", settings.max_step_time_s) + " bound",
         "lower global_batch_size (grad_accum <= " + std::to_string(std::max<std::int64_t>(1, fit_ga)) +
             " keeps the step under the bound), add nodes, or raise \"check\": {\"max_step_time_s\"}",
         {"/grad_accum", "/global_batch_size"});
  }
  return res;
}

/// What the hf stack's module kernels (training_config::modules) mean for a plan, in one sentence for estimate's
/// outputs: with `fused` (the default, which the reference trainer installs), how much more a script running
/// transformers' own RMSNorm and rotary tables (`--modules transformers`) holds at the peak (GiB, peak allocated of
/// the cheap bound) and how much slower it runs (tokens/s of `constants`); with `transformers`, the reverse. Empty for
/// the other stacks, whose module code is their own. Both estimates are of `gpu` and `inst` (nullable).
/// docs/stacks.md#modules.
[[nodiscard]] inline std::string module_kernels_note(const model_spec& m, const training_config& c, const gpu_spec& gpu,
                                                     const instance_spec* inst, const throughput_calibration& constants = {}) {
  if (c.stack != training_stack::hf) return {};
  // a LayerNorm model's norms are ATen's fused kernel in either setting (nn.LayerNorm); with learned positions there is
  // no RoPE either, so the setting changes nothing (a helper's sweep found gpt2-xl's estimate moving 2.37 GiB with it)
  if (m.layer_norm && (m.positions != 0 || m.alibi))
    return m.alibi ? "no effect on this model: its LayerNorm runs ATen's fused kernel in either setting and it has ALiBi, no RoPE"
                   : "no effect on this model: its LayerNorm runs ATen's fused kernel in either setting and its positions are learned (no RoPE)";
  training_config alt = c;
  alt.modules = c.modules == module_kernels::fused ? module_kernels::transformers : module_kernels::fused;
  runtime_overheads cheap;
  cheap.replay = runtime_overheads::replay_policy::never;
  const training_config& f = c.modules == module_kernels::fused ? c : alt;
  const training_config& t = c.modules == module_kernels::fused ? alt : c;
  const double extra = (estimate_memory(m, t, gpu, cheap).peak_allocated - estimate_memory(m, f, gpu, cheap).peak_allocated).raw() / 1073741824.0;
  const double tf = estimate_throughput(m, f, gpu, inst, constants).tokens_per_s, tt = estimate_throughput(m, t, gpu, inst, constants).tokens_per_s;
  const double slower = tf > 0 ? 100 * (1 - tt / tf) : 0;
  // the speed difference in words: "runs 3.1% slower" / "runs 0.2% faster" / "runs about as fast" (|d| < 0.05 %,
  // which "%.1f" would print as 0.0 or -0.0)
  char speed[64];
  const bool fused = c.modules == module_kernels::fused;
  if (std::abs(slower) < 0.05)
    std::snprintf(speed, sizeof speed, "%s", fused ? "runs about as fast" : "the step about as fast");
  else if (fused)
    std::snprintf(speed, sizeof speed, "runs %.1f%% %s", std::abs(slower), slower > 0 ? "slower" : "faster");
  else
    std::snprintf(speed, sizeof speed, "the step %.1f%% %s", std::abs(slower), slower > 0 ? "faster" : "slower");
  char buf[400];
  if (m.layer_norm)  // RoPE only (the LayerNorm is fused either way; the trainer refuses modules fused: trainer_fuses_norms)
    std::snprintf(buf, sizeof buf,
                  fused ? "LayerNorm (ATen's fused kernel in either setting), RoPE in the compute dtype (the reference trainer "
                          "refuses modules fused for LayerNorm norms, T-modules); with transformers' rotary "
                          "tables (--modules transformers) the peak holds %.2f GiB more and %s"
                        : "LayerNorm (ATen's fused kernel in either setting), transformers' rotary tables; with RoPE in the compute "
                          "dtype (--modules fused) the peak is %.2f GiB lower and %s",
                  extra, speed);
  else if (fused && !trainer_fuses_norms(m))  // (Gemma: a helper's sweep found plans estimated with kernels the trainer refuses)
    std::snprintf(buf, sizeof buf,
                  "fused (F.rms_norm over %s's 1 + weight norms, which the reference trainer refuses to install: T-modules); "
                  "it runs --modules transformers, which holds %.2f GiB more at the peak and %s",
                  m.name.c_str(), extra, speed);
  else if (fused)
    std::snprintf(buf, sizeof buf,
                  "fused (F.rms_norm, RoPE in the compute dtype; the reference trainer installs them); a script running "
                  "transformers' own RMSNorm and rotary tables (--modules transformers) holds %.2f GiB more at the peak and "
                  "%s",
                  extra, speed);
  else
    std::snprintf(buf, sizeof buf,
                  "transformers' own RMSNorm and rotary tables; with the fused kernels (--modules fused, as the reference "
                  "trainer installs them) the peak is %.2f GiB lower and %s",
                  extra, speed);
  return buf;
}

}  // namespace bwplan
