// bwplan: GPU memory and throughput planning for LLM training
// SPDX-License-Identifier: Apache-2.0
#pragma once

// The plan: one definition of a training run (model × target × training settings), its legality rules,
// its command-line form and its labels. Standard library only; the JSON forms live in bwplan/io/plan.hpp.

#include <bwplan/error.hpp>
#include <bwplan/model.hpp>
#include <bwplan/moe.hpp>
#include <bwplan/pipeline.hpp>
#include <bwplan/precision.hpp>
#include <bwplan/training.hpp>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <array>
#include <string>
#include <string_view>
#include <vector>

namespace bwplan {

/// Ranges of the numbers in a plan, wherever it comes from (plan file, flags, sweeps). Beyond them a value
/// is an error, not a plan: they are far above any real job and keep the integer arithmetic exact
/// (mbs · seq · accum · GPUs < 2^63).
struct plan_limits {
  static constexpr std::int64_t max_nodes = 4096;
  static constexpr std::int64_t max_gpus = 1 << 20;
  static constexpr std::int64_t max_micro_batch = 1 << 16;
  static constexpr std::int64_t max_seq_len = 1 << 24;
  static constexpr std::int64_t max_global_batch = std::int64_t{1} << 32;  ///< sequences
  static constexpr std::int64_t max_grad_accum = 1 << 20;
  static constexpr std::int64_t max_ac_every = 100'000;
  static constexpr std::int64_t max_degree = 1024;
};

/// Tokens per sequence of a plan that names none: docs/plan.schema.json's `seq_len` default, the CLI's `--seq` default
/// and the training contract's. The struct default of training_config (2,048) is the library's unit-test shape, not
/// a plan's; every reader of a plan (flags, plan file, SageMaker request) starts from this one.
inline constexpr std::int64_t default_seq_len = 4096;

/// Caps a default sequence length at the model's context: `seq_len` is set to `max_context` when the plan did not
/// choose its length (`chosen` false) and the default is longer (gpt2's 1,024 learned positions cannot run 4,096
/// tokens; TinyLlama was trained at 2,048). Returns whether it capped. `max_context` ≤ 0: unknown, no cap.
inline bool cap_default_seq_len(std::int64_t& seq_len, std::int64_t max_context, bool chosen) noexcept {
  if (chosen || max_context <= 0 || seq_len <= max_context) return false;
  seq_len = max_context;
  return true;
}

/// Thresholds of `bwplan check` a plan may set in its "check" object.
struct check_settings {
  double min_mfu_ratio = 0.5;        ///< BWP007 fires when MFU < ratio × the best searched plan's MFU
  double max_step_time_s = 300;      ///< BWP008 fires when one optimizer step takes longer (with accumulation), seconds
  std::vector<std::string> disable;  ///< rule IDs not to apply to this plan
  [[nodiscard]] bool operator==(const check_settings&) const = default;
};

/// Where a plan runs: SageMaker instances, or bare GPUs of the catalog.
struct plan_target {
  std::string instance;  ///< SageMaker instance type (catalog id); empty for a bare GPU
  std::string gpu;       ///< catalog GPU id: the bare GPU, or (with an instance) a cross-check of its GPU
  int nodes = 1;         ///< instances
  int gpus = 0;          ///< world size; 0 = every GPU of the instances (1 for a bare GPU)
  /// The GPUs' board power limit, W (`--power-limit`, nvidia-smi -pl; gpu_spec::compute_clock_fraction); 0 = the
  /// catalog's. Planning only: a SageMaker job cannot set it and does not carry it.
  double power_limit_w = 0;
  /// The attention kernel the stack runs, "fused" or "fa2" (`--attention-kernel`, gpu_spec::attention); "" = the
  /// catalog's. Planning only, as power_limit_w.
  std::string attention_kernel;
  [[nodiscard]] bool operator==(const plan_target&) const = default;
};

/// One plan: the model, the target and every training setting. The single definition that every reader
/// (flags, plan file, SageMaker request) fills and every writer (plan file, CLI arguments, tables, JSON,
/// SageMaker hyperparameters) prints.
///
/// `training.world_size` and `training.gpus_per_node` follow from the target (resolve_world);
/// `training.grad_accum` from `global_batch` when that is set (apply_global_batch).
struct plan {
  std::string name;                          ///< free text ("" = none)
  std::string model;                         ///< preset id, Hugging Face id or config.json path
  plan_target target;
  training_config training;                  ///< the training settings (see training_config)
  std::optional<std::int64_t> global_batch;  ///< sequences per optimizer step, whole job (nullopt: from grad_accum)
  double headroom = 0.05;                    ///< share of GPU memory kept free at the peak (BWP002, recommend)
  check_settings check;                      ///< bwplan check thresholds
  [[nodiscard]] bool operator==(const plan&) const = default;
};

/// Sharding a plan gets when it names none: FSDP full shard on more than one GPU, none on one; on the Megatron stack
/// none (DDP over its main-gradient buffer: Megatron-LM's `--use-distributed-optimizer` is off by default,
/// a store_true flag in megatron/training/arguments.py @d98e8a64), since its FSDP is not modelled and full would be refused.
[[nodiscard]] constexpr sharding default_sharding(int world_size, training_stack stack = training_stack::hf) noexcept {
  if (stack == training_stack::megatron) return sharding::none;
  return world_size > 1 ? sharding::full : sharding::none;
}

/// Largest degree this release evaluates for dimension `dim` ("tp", "cp", "ep", "pp"): every dimension up to
/// plan_limits::max_degree (expert parallelism for MoE models only, moe_violations; pipeline parallelism with
/// the combinations of violations()).
[[nodiscard]] constexpr std::int64_t modelled_degree(std::string_view) noexcept { return plan_limits::max_degree; }

/// Sets `p.training.world_size`, `gpus_per_node` and `nvlink_domain` from the target: `instance_gpus` is the
/// instance's GPUs per node (0 for a bare GPU), `domain_gpus` the GPUs of its NVLink domain (instance_spec::
/// nvlink_domain_gpus; 0 or the node: the node). World size: target.gpus, else instance_gpus × nodes, else 1.
/// Returns the violations (field "gpus" or "nodes") instead of throwing.
[[nodiscard]] inline std::vector<plan_violation> resolve_world(plan& p, int instance_gpus, int domain_gpus = 0) {
  std::vector<plan_violation> out;
  const auto& t = p.target;
  if (t.nodes < 1 || t.nodes > plan_limits::max_nodes)
    return {{"nodes", "/nodes", "must be between 1 and " + std::to_string(plan_limits::max_nodes) + ", got " + std::to_string(t.nodes)}};
  if (t.gpus < 0 || t.gpus > plan_limits::max_gpus)
    return {{"gpus", "/gpus", "must be between 1 and " + std::to_string(plan_limits::max_gpus) + ", got " + std::to_string(t.gpus)}};
  if (instance_gpus > 0 && t.gpus > instance_gpus * t.nodes)
    return {{"gpus", "/gpus", std::to_string(t.gpus) + " GPUs exceed the " + std::to_string(instance_gpus * t.nodes) + " GPUs of " +
                                  std::to_string(t.nodes) + " x " + t.instance}};
  // gpus that leave whole instances without a GPU contradict nodes (estimate ran them on one node, sagemaker refused
  // them: a helper's audit)
  if (instance_gpus > 0 && t.nodes > 1 && t.gpus > 0 && t.gpus <= instance_gpus * (t.nodes - 1))
    return {{"gpus", "/gpus", std::to_string(t.gpus) + " GPUs leave " + std::to_string(t.nodes - (t.gpus + instance_gpus - 1) / instance_gpus) +
                                  " of the " + std::to_string(t.nodes) + " x " + t.instance + " without a GPU: give gpus above " +
                                  std::to_string(instance_gpus * (t.nodes - 1)) + " or fewer nodes"}};
  if (instance_gpus == 0 && t.nodes > 1 && t.gpus == 0)
    return {{"nodes", "/nodes", "a bare GPU has no nodes: give the number of GPUs (gpus) or an instance"}};
  // with a bare GPU, nodes count GPUs (--gpu h200 --nodes 8): gpus that say otherwise contradict them (--gpus 4 --nodes 8
  // ran 4 GPUs, and check passed such a plan file: an audit)
  if (instance_gpus == 0 && t.nodes > 1 && t.gpus != t.nodes)
    return {{"nodes", "/nodes", "with a bare GPU nodes count GPUs: " + std::to_string(t.nodes) + " contradicts gpus " +
                                    std::to_string(t.gpus) + "; give one of them, or an instance"}};
  p.training.gpus_per_node = instance_gpus > 0 ? instance_gpus : (t.gpus > 0 ? t.gpus : 1);
  p.training.world_size = t.gpus > 0 ? t.gpus : (instance_gpus > 0 ? instance_gpus * t.nodes : 1);
  p.training.nvlink_domain = instance_gpus > 0 && domain_gpus > instance_gpus ? domain_gpus : 0;
  return out;
}

/// Derives `p.training.grad_accum` from `p.global_batch` (sequences): global / (micro-batch × data-parallel
/// degree). Returns a violation when that does not divide. No-op without a global batch.
[[nodiscard]] inline std::vector<plan_violation> apply_global_batch(plan& p) {
  if (!p.global_batch) return {};
  const auto& c = p.training;
  if (c.micro_batch < 1 || c.dp() < 1) return {};  // reported by violations()
  const std::int64_t per = c.micro_batch * c.dp();
  if (*p.global_batch % per != 0)
    return {{"global_batch_size", "/global_batch_size",
             "global batch " + std::to_string(*p.global_batch) + " is not divisible by micro-batch " + std::to_string(c.micro_batch) +
                 " x data-parallel size " + std::to_string(c.dp()) + " = " + std::to_string(per) + " sequences"}};
  p.training.grad_accum = *p.global_batch / per;
  return {};
}

/// Why torchao's NVFP4 kernels cannot run the plan `c` of `m`, or "" when they can (or `c` is not NVFP4 on the hf or
/// torchtitan stack, the two that convert with torchao's NVFP4TrainingConfig). `nvfp4_mm_triton.forward` raises unless
/// the GEMM's M (the micro-batch's tokens, mbs · seq / cp: sequence parallel gathers them for every linear), K and N are
/// multiples of 128 (torchao/prototype/moe_training/nvfp4_training/nvfp4_linear.py @v0.18.0); torchtitan's converter
/// refuses such a linear when it builds the model (components/quantization/nvfp4.py `_NVFP4_BLOCK`) and the reference
/// trainer refuses the plan (T-nvfp4-dims). Every linear of a quantized block counts, as one tensor-parallel rank holds
/// it (q, k, v, gate, up, the shared experts' split on their outputs, o and down on their inputs, rounded up as
/// bwtrain's `local_features`; MLA's q_a, q_b, kv_a, kv_b and o; a MoE block's router and routed experts whole).
[[nodiscard]] inline std::string nvfp4_shape_misfit(const model_spec& m, const training_config& c) {
  if (c.format != compute_format::nvfp4 || (c.stack != training_stack::hf && c.stack != training_stack::torchtitan)) return "";
  if (c.quantized_blocks(m.layers) <= 0) return "";
  constexpr std::int64_t k = 128;
  const std::int64_t tp = std::max(1, c.tp), cp = std::max(1, c.cp);
  const std::int64_t tokens = c.micro_batch * c.seq_len / cp;
  auto s = [](std::int64_t v) { return std::to_string(v); };
  if (tokens % k != 0)
    return "the micro-batch's " + s(tokens) + " tokens (micro-batch x sequence / cp) are not a multiple of 128, which torchao's "
           "NVFP4 GEMMs need (nvfp4_mm_triton)";
  const auto split = [&](std::int64_t v) { return (v + tp - 1) / tp; };
  const std::int64_t h = m.hidden;
  struct linear { const char* name; std::int64_t in, out; };
  std::array<linear, 12> lin{};
  std::size_t n = 0;
  auto add = [&](const char* name, std::int64_t in, std::int64_t out) { if (n < lin.size()) lin[n++] = {name, in, out}; };
  if (m.is_mla()) {
    const std::int64_t a = m.heads, dqk = m.head_dim, dv = m.v_head_dim, dnope = m.head_dim - m.qk_rope_dim;
    if (m.q_lora_rank > 0) {
      add("the query down-projection (q_a_proj)", h, m.q_lora_rank);
      add("the query up-projection (q_b_proj)", m.q_lora_rank, split(a * dqk));
    } else {
      add("the query projection", h, split(a * dqk));
    }
    add("the key/value down-projection (kv_a_proj_with_mqa)", h, m.kv_lora_rank + m.qk_rope_dim);
    add("the key/value up-projection (kv_b_proj)", m.kv_lora_rank, split(a * (dnope + dv)));
    add("the output projection", split(a * dv), h);
  } else {
    add("the query projection", h, split(m.q_dim()));
    add("the key and value projections", h, split(m.kv_dim()));
    add("the output projection", split(m.q_dim()), h);
  }
  if (!m.is_moe() || m.moe_layers < m.layers) {
    add(m.gated_mlp ? "the MLP's gate and up projections" : "the MLP's first linear", h, split(m.intermediate));
    add(m.gated_mlp ? "the MLP's down projection" : "the MLP's second linear", split(m.intermediate), h);
  }
  if (m.is_moe()) {
    add("the router", h, m.experts);
    add("the routed experts' gate and up projections", h, m.moe_intermediate);
    add("the routed experts' down projection", m.moe_intermediate, h);
    if (m.shared_intermediate > 0) {
      add("the shared experts' gate and up projections", h, split(m.shared_intermediate));
      add("the shared experts' down projection", split(m.shared_intermediate), h);
    }
  }
  for (std::size_t i = 0; i < n; ++i)
    if (lin[i].in % k != 0 || lin[i].out % k != 0)
      return std::string(lin[i].name) + " of " + m.name + " has " + s(lin[i].in) + " in and " + s(lin[i].out) + " out features" +
             (tp > 1 ? " on each of " + s(tp) + " tensor-parallel ranks" : std::string()) +
             ", not multiples of 128, which torchao's NVFP4 GEMMs need (nvfp4_mm_triton)";
  return "";
}

/// Whether the reference trainer can fuse `m`'s norms (modules fused): its block and final norms are the Llama RMSNorm
/// formula `F.rms_norm` computes. Gemma's `GemmaRMSNorm` multiplies by `1 + weight` (transformers
/// models/gemma*/modeling_gemma*.py), and a LayerNorm model's `nn.LayerNorm` has a bias and subtracts the mean; the
/// trainer refuses to fuse either (T-modules, apps/train/bwtrain/model.py `apply_module_kernels`: a norm class outside
/// `LLAMA_FORMULA_NORMS`): such a plan runs with modules transformers only.
[[nodiscard]] inline bool trainer_fuses_norms(const model_spec& m) noexcept {
  return m.family.rfind("gemma", 0) != 0 && !m.layer_norm;
}

/// What `m`'s norms are, for the T-modules refusal of trainer_fuses_norms ("norms multiply by 1 + weight").
[[nodiscard]] inline std::string trainer_unfused_norms(const model_spec& m) {
  return m.layer_norm ? "norms are LayerNorm (mean, weight and bias)" : "norms multiply by 1 + weight";
}

/// Why the reference trainer refuses model `m` itself (T-model), empty when its model path runs it: a
/// mixture-of-experts model (apps/train/bwtrain/model.py `model_refusals`: "the reference trainer runs dense models
/// only"), or a family whose Hugging Face causal-LM class keeps its blocks outside `model.layers` (`GPT2LMHeadModel`
/// and `FalconForCausalLM` hold `transformer.h`, `transformer.wte`, `transformer.ln_f`), which `check_structure` refuses
/// when the job starts ("has no model.layers").
[[nodiscard]] inline std::string trainer_model_refusal(const model_spec& m) {
  if (m.is_moe())
    return m.name + " is a mixture-of-experts model: the reference trainer runs dense decoder models only (T-model)";
  static constexpr std::string_view transformer_h[] = {"gpt2", "falcon", "RefinedWeb", "RefinedWebModel"};
  for (std::string_view f : transformer_h)
    if (m.family == f)
      return m.name + " (" + m.family + ") keeps its blocks under transformer.h, not model.layers: the reference trainer runs "
             "Llama-layout decoder models only (T-model, apps/train/bwtrain/model.py check_structure)";
  return {};
}

/// Every legality rule of a plan for `m`: violations(p.training), then the model's (moe_violations; tp divides
/// the attention and KV heads; every pipeline stage holds a decoder block, pipeline_violations; learned
/// positions cap the sequence), the batch arithmetic (global batch = micro-batch × data-parallel size ×
/// accumulation) and the ranges of plan_limits. What the release does not model (pipeline parallelism with
/// hybrid or grad-op sharding, adapters or FP8 all-gather) is in violations(). One list, in a fixed order;
/// empty when the plan is legal.

[[nodiscard]] inline std::vector<plan_violation> plan_violations(const model_spec& m, const plan& p) {
  const training_config& c = p.training;
  using L = plan_limits;
  std::vector<plan_violation> out;
  auto range = [&](const char* field, std::int64_t v, std::int64_t hi) {
    if (v > hi) out.push_back({field, std::string("/") + field, "out of range: must be at most " + std::to_string(hi) + ", got " + std::to_string(v)});
  };
  range("micro_batch_size", c.micro_batch, L::max_micro_batch);
  range("seq_len", c.seq_len, L::max_seq_len);
  range("grad_accum", c.grad_accum, L::max_grad_accum);
  range("activation_checkpointing", c.ac.every, L::max_ac_every);
  // the global batch in sequences, mbs · accum · data-parallel degree, within max_global_batch: with seq_len ≤
  // max_seq_len its tokens stay below 2^63 (a review: 1,048,576 GPUs × mbs 65,536 × accum 1,048,576 printed
  // "-9223372036854775808 tokens")
  if (const double seqs = static_cast<double>(c.micro_batch) * static_cast<double>(c.grad_accum) * static_cast<double>(std::max(1, c.dp()));
      seqs > static_cast<double>(L::max_global_batch))
    out.push_back({"grad_accum", "/grad_accum",
                   "the global batch of " + std::to_string(c.micro_batch) + " x " + std::to_string(c.grad_accum) + " x " +
                       std::to_string(c.dp()) + " (micro-batch x accumulation x data-parallel) sequences is above " +
                       std::to_string(L::max_global_batch) + ", the most a plan takes"});
  for (auto [f, v] : {std::pair{"tp", c.tp}, std::pair{"cp", c.cp}, std::pair{"ep", c.ep}, std::pair{"pp", c.pp}, std::pair{"vpp", c.vpp}})
    range(f, v, L::max_degree);
  if (!out.empty()) return out;
  out = violations(c);
  for (auto& v : detail::moe_violations(m, c)) out.push_back(std::move(v));
  auto s = [](auto v) { return std::to_string(v); };
  if (c.tp >= 1 && (m.heads % c.tp != 0 || m.kv_heads % c.tp != 0))
    out.push_back({"tp", "/tp", "tensor parallelism " + s(c.tp) + " does not divide the " + s(m.heads) + " attention heads and " +
                                    s(m.kv_heads) + " KV heads of " + m.name});
  for (auto& v : pipeline_violations(m, c)) out.push_back(std::move(v));
  // bf16_layers names blocks by position: more than the model has was clamped silently (last:100 on 32 blocks ran bf16)
  if (c.bf16_layers && c.bf16_layers->fraction < 0 && c.format != compute_format::bf16 &&
      c.bf16_layers->first + c.bf16_layers->last >= m.layers)
    out.push_back({"bf16_layers", "/bf16_layers",
                   "first:" + s(c.bf16_layers->first) + ",last:" + s(c.bf16_layers->last) + " keeps " +
                       s(c.bf16_layers->first + c.bf16_layers->last) + " blocks in bf16, and " + m.name + " has " + s(m.layers) +
                       ": no block is left in " + to_string(c.format) + " (use precision bf16 to run every block in bf16)"});
  if (m.is_moe() && c.tp > 1 && !c.sequence_parallel)  // Megatron-Core refuses to train it (moe/moe_layer.py MoELayer.forward)
    out.push_back({"sequence_parallel", "/sequence_parallel",
                   "Megatron-LM trains MoE models with tensor parallelism only with sequence parallel (MoELayer.forward "
                   "raises otherwise): " + m.name + " at tp " + s(c.tp) + " needs sequence_parallel true"});
  // torchao 0.18's MXFP8 linear (the hf stack's mxfp8): the weight wrapper's F.linear override returns
  // _to_mxfp8_then_scaled_mm(input, weight) and never adds the bias it was called with
  // (MXFP8TrainingWeightWrapperTensor.__torch_function__, prototype/moe_training/tensor.py @v0.18.0; the FP8 wrapper
  // beside it adds it), so a biased block linear would train without its bias
  if (c.format == compute_format::mxfp8 && c.stack == training_stack::hf && (m.qkv_bias || m.o_bias || m.mlp_bias))
    out.push_back({"precision", "/precision",
                   "precision mxfp8 on the hf stack cannot train " + m.name +
                       "'s biased block linears: torchao's MXFP8 linear override drops the bias "
                       "(_to_mxfp8_then_scaled_mm(input, weight), prototype/moe_training/tensor.py), so they would train "
                       "without it; use fp8 or bf16"});
  // torchao's NVFP4Linear under autocast (fp32 master weights, sharding none): a biased linear adds its fp32 bias to the
  // bf16 output, so its backward gets an fp32 gradient, which the NVFP4 kernels reject (triton_rht_amax "Expected
  // bfloat16", prototype/moe_training/nvfp4_training/hadamard_amax_triton.py @v0.18.0)
  if (c.format == compute_format::nvfp4 && c.stack == training_stack::hf && c.autocast_fp32_weights() &&
      (m.qkv_bias || m.o_bias || m.mlp_bias))
    out.push_back({"precision", "/precision",
                   "precision nvfp4 under torch.autocast (master_weights fp32, sharding none) cannot train " + m.name +
                       "'s biased block linears: the fp32 bias makes the output and its gradient fp32, which torchao's NVFP4 "
                       "backward rejects (triton_rht_amax expects bfloat16); use master_weights bf16 or sharding full"});
  if (const std::string why = nvfp4_shape_misfit(m, c); !why.empty())
    out.push_back({"precision", "/precision", "precision nvfp4 cannot run: " + why + "; use mxfp8, fp8 or bf16"});
  if (m.positions > 0 && c.seq_len > m.positions)
    out.push_back({"seq_len", "/seq_len", "sequence " + s(c.seq_len) + " exceeds the " + s(m.positions) +
                                              " learned position embeddings of " + m.name + " (n_positions)"});
  if (p.global_batch && c.micro_batch >= 1 && c.dp() >= 1 && c.micro_batch * c.dp() * c.grad_accum != *p.global_batch)
    out.push_back({"global_batch_size", "/global_batch_size",
                   "global batch " + s(*p.global_batch) + " != micro-batch " + s(c.micro_batch) + " x data-parallel size " +
                       s(c.dp()) + " x grad_accum " + s(c.grad_accum) + " = " + s(c.micro_batch * c.dp() * c.grad_accum) + " sequences"});
  return out;
}

/// Throws plan_error with the first of plan_violations(m, p).
inline void validate(const model_spec& m, const plan& p) {
  auto v = plan_violations(m, p);
  if (!v.empty()) throw plan_error(std::move(v.front()));
}

namespace detail {
/// `v` with the fewest significant digits that read back as the same double ("0.05", "0.15").
inline std::string shortest(double v) {
  std::string out;
  for (int prec = 1; prec <= 17; ++prec) {
    char buf[40];
    std::snprintf(buf, sizeof buf, "%.*g", prec, v);
    out = buf;
    if (std::stod(out) == v) break;
  }
  return out;
}
}  // namespace detail

/// The one command-line form of a plan: the arguments of `bwplan estimate` (after the subcommand) that
/// reproduce it exactly: MODEL, the target, and every training setting, defaults included, so the line does
/// not depend on the defaults of a later release. Used by the report's reproduce line. The plan's GPU settings
/// (`target.power_limit_w`, `target.attention_kernel`) are not among them: `--power-limit` and `--attention-kernel`
/// are global options that go before the subcommand, which the reproduce line writes there (src/report.cpp).
[[nodiscard]] inline std::vector<std::string> to_cli_args(const plan& p) {
  const training_config& c = p.training;
  std::vector<std::string> a{p.model};
  auto add = [&](const char* flag, std::string v) { a.emplace_back(flag); a.push_back(std::move(v)); };
  if (!p.target.instance.empty()) {
    add("--instance", p.target.instance);
    add("--nodes", std::to_string(p.target.nodes));
  } else {
    add("--gpu", p.target.gpu);
  }
  if (p.target.gpus > 0 || p.target.instance.empty()) add("--gpus", std::to_string(c.world_size));
  add("--mbs", std::to_string(c.micro_batch));
  add("--seq", std::to_string(c.seq_len));
  add("--grad-accum", std::to_string(c.grad_accum));  // as derived from the global batch (apply_global_batch)
  add("--precision", to_string(c.format));
  if (c.bf16_layers) add("--bf16-layers", to_string(*c.bf16_layers));
  if (c.fp8_all_gather) a.emplace_back("--fp8-all-gather");
  add("--master", to_string(c.master));
  add("--ac", to_string(c.ac));
  add("--sharding", to_string(c.shard));
  if (c.shard_group > 0) add("--shard-group", std::to_string(c.shard_group));
  add("--tp", std::to_string(c.tp));
  add("--cp", std::to_string(c.cp));
  add("--ep", std::to_string(c.ep));
  if (c.pp > 1) {  // written with pipeline parallelism only (the lines of earlier releases stay as they were)
    add("--pp", std::to_string(c.pp));
    add("--pp-schedule", to_string(c.schedule));
    add("--vpp", std::to_string(c.vpp));
  }
  add("--optimizer-impl", to_string(c.optimizer));
  add("--loss", to_string(c.loss));
  // Fine-tuning settings: written when they differ from a full AdamW fine-tune (the lines of earlier releases
  // stay as they were); with adapters every LoRA setting is written.
  if (c.optim != optimizer_kind::adamw) add("--optimizer", to_string(c.optim));
  if (c.adapters()) {
    add("--finetune", to_string(c.finetune));
    add("--lora-rank", std::to_string(c.lora.rank));
    add("--lora-alpha", detail::shortest(c.lora.alpha));
    add("--lora-targets", lora_targets_to_string(c.lora.targets));
    add("--lora-dropout", detail::shortest(c.lora.dropout));
  }
  // The training stack, torch.compile and the allocator setting: written when they differ from the defaults (hf,
  // eager, expandable_segments off), so the lines of earlier releases stay as they were.
  if (c.stack != training_stack::hf) add("--stack", to_string(c.stack));
  if (c.compile) a.emplace_back("--compile");
  if (c.modules != module_kernels::fused) add("--modules", to_string(c.modules));  // written when set
  if (c.expandable_segments) a.emplace_back("--expandable-segments");
  if (c.offload != 0) add("--offload", offload_to_string(c.offload));  // written when set (earlier lines stay as they were)
  if (c.optimizer_in_backward) a.emplace_back("--optimizer-in-backward");
  if (!c.sequence_parallel) a.emplace_back("--no-sequence-parallel");
  if (c.fsdp_embedding_units) a.emplace_back("--fsdp-embedding-units");
  if (c.tp_comm_overlap) a.emplace_back("--tp-comm-overlap");
  if (c.moe_a2a_overlap) a.emplace_back("--moe-a2a-overlap");
  return a;
}

/// Quotes `s` for a POSIX shell when it holds anything but [A-Za-z0-9_./:=,+-].
[[nodiscard]] inline std::string shell_quote(const std::string& s) {
  bool plain = !s.empty();
  for (char ch : s) {
    const bool ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
                    std::string_view("_./:=,+-").find(ch) != std::string_view::npos;
    plain = plain && ok;
  }
  if (plain) return s;
  std::string q = "'";
  for (char ch : s) q += ch == '\'' ? std::string("'\\''") : std::string(1, ch);
  return q + "'";
}

/// Sharding as a short label: "none", "ddp", "fsdp", "hsdp/8", "zero2", "zero1" ("zero1/2" with optimizer instances of 2 GPUs).
[[nodiscard]] inline std::string shard_label(const training_config& c) {
  switch (c.shard) {
    case sharding::full: return "fsdp";
    case sharding::hybrid: return "hsdp/" + std::to_string(c.shard_size());
    case sharding::grad_op: return "zero2";
    case sharding::optimizer: return c.shard_group > 0 ? "zero1/" + std::to_string(c.shard_group) : "zero1";
    default: return c.fsdp_mesh() > 1 ? "ddp" : "none";
  }
}

/// Global batch of a configuration in tokens: micro-batch × sequence × accumulation × data-parallel degree.
[[nodiscard]] constexpr std::int64_t global_batch_tokens(const training_config& c) noexcept {
  return c.micro_batch * c.seq_len * c.grad_accum * c.dp();
}

/// Short description of a configuration, e.g. "mbs 4 x 8192, accum 2, AC every-2, fp8, FSDP full shard, TP 2,
/// chunked loss". Names every setting that differs from its default.
[[nodiscard]] inline std::string describe(const training_config& c) {
  std::string s = "mbs " + std::to_string(c.micro_batch) + " x " + std::to_string(c.seq_len);
  if (c.grad_accum > 1) s += ", accum " + std::to_string(c.grad_accum);
  s += ", AC " + to_string(c.ac);
  if (c.format != compute_format::bf16) {
    s += std::string(", ") + to_string(c.format);
    const auto keep = c.bf16_kept();
    if (keep.first || keep.last_for(1 << 20))
      s += " (bf16 blocks: first " + std::to_string(keep.first) + ", last " +
           (keep.fraction >= 0 ? std::to_string(static_cast<int>(100 * keep.fraction + 0.5)) + "%" : std::to_string(keep.last)) + ")";
    if (c.fp8_all_gather) s += ", FP8 all-gather";
  }
  switch (c.shard) {
    case sharding::full: s += ", FSDP full shard"; break;
    case sharding::hybrid:
      s += ", HSDP (shard " + std::to_string(c.shard_size()) + " x replicate " +
           std::to_string(c.shard_size() > 0 ? c.fsdp_mesh() / c.shard_size() : 0) + ")";
      break;
    case sharding::grad_op: s += ", FSDP shard-grad-op (ZeRO-2)"; break;
    case sharding::optimizer: s += ", distributed optimizer (ZeRO-1)"; break;
    default: s += c.fsdp_mesh() > 1 ? ", DDP" : ", no sharding";
  }
  if (c.tp > 1) s += ", TP " + std::to_string(c.tp);
  if (c.cp > 1) s += ", CP " + std::to_string(c.cp);
  if (c.ep > 1) s += ", EP " + std::to_string(c.ep);
  if (c.pp > 1)
    s += ", PP " + std::to_string(c.pp) +
         (c.schedule == pp_schedule::interleaved ? " interleaved x" + std::to_string(c.vpp) : std::string(" 1F1B"));
  if (c.master == master_weights::bf16) s += ", bf16 master";
  if (c.optimizer == optimizer_impl::foreach && c.optim == optimizer_kind::adamw) s += ", foreach AdamW";
  if (c.optim != optimizer_kind::adamw) s += std::string(", ") + to_string(c.optim);
  if (c.adapters())
    s += std::string(", ") + (c.finetune == finetune_mode::qlora ? "QLoRA" : "LoRA") + " r" + std::to_string(c.lora.rank) + " " +
         lora_targets_to_string(c.lora.targets);
  if (c.loss == loss_impl::chunked) s += ", chunked loss";
  if (c.loss == loss_impl::liger) s += ", Liger's fused linear cross-entropy";
  if (c.stack != training_stack::hf) s += std::string(", ") + to_string(c.stack);
  if (c.compile) s += ", torch.compile";
  if (c.modules != module_kernels::fused) s += ", transformers' RMSNorm and RoPE";
  if (c.expandable_segments) s += ", expandable segments";
  if (c.offload != 0) s += ", CPU offload " + offload_to_string(c.offload);
  if (c.optimizer_in_backward) s += ", optimizer in backward";
  if (!c.sequence_parallel) s += ", no sequence parallel";
  if (c.fsdp_embedding_units) s += ", embedding and head as FSDP units";
  if (c.tp_comm_overlap) s += ", TP communication overlap";
  if (c.moe_a2a_overlap) s += ", MoE all-to-all overlap";
  return s;
}

/// One column of a plan table: a setting, its header and its value for one configuration.
struct setting_column {
  std::string_view key;     ///< stable key ("precision", "tp", "dp", "global_batch_tokens", ...)
  std::string_view header;  ///< table header ("precision", "TP", "DP", "GBS tok", ...)
  std::string value;        ///< the configuration's value as printed
};

/// The settings a table row shows, in the one order every table uses: micro-batch, sequence, accumulation,
/// data-parallel degree, global batch (tokens), checkpointing, sharding, TP, CP, EP, PP (with the schedule:
/// "4" for 1F1B, "4i2" interleaved with 2 virtual stages), precision, master weights, loss, optimizer
/// implementation, fine-tuning (full, or lora/qlora with rank and targets), optimizer, training stack, torch.compile,
/// expandable segments, CPU offload, optimizer in backward, sequence parallel, FSDP embedding units.
/// See differing_columns to keep only those in which rows differ.
[[nodiscard]] inline std::vector<setting_column> setting_columns(const training_config& c) {
  auto tokens = [](std::int64_t t) {
    if (t >= 1'000'000 && t % 1'048'576 == 0) return std::to_string(t / 1'048'576) + "Mi";
    if (t >= 1024 && t % 1024 == 0) return std::to_string(t / 1024) + "Ki";
    return std::to_string(t);
  };
  return {{"micro_batch_size", "mbs", std::to_string(c.micro_batch)},
          {"seq_len", "seq", std::to_string(c.seq_len)},
          {"grad_accum", "accum", std::to_string(c.grad_accum)},
          {"dp", "DP", std::to_string(c.dp())},
          {"global_batch_tokens", "GBS tok", tokens(global_batch_tokens(c))},
          {"activation_checkpointing", "AC", to_string(c.ac)},
          {"sharding", "shard", shard_label(c)},
          {"tp", "TP", std::to_string(c.tp)},
          {"cp", "CP", std::to_string(c.cp)},
          {"ep", "EP", std::to_string(c.ep)},
          {"pp", "PP", std::to_string(c.pp) + (c.schedule == pp_schedule::interleaved ? "i" + std::to_string(c.vpp) : std::string())},
          {"precision", "precision", to_string(c.format)},
          {"master_weights", "master", to_string(c.master)},
          {"loss", "loss", to_string(c.loss)},
          {"optimizer_impl", "optimizer", to_string(c.optimizer)},
          {"finetune", "finetune", c.adapters() ? std::string(to_string(c.finetune)) + " r" + std::to_string(c.lora.rank) + " " +
                                                      lora_targets_to_string(c.lora.targets)
                                                : std::string("full")},
          {"optim", "optim", to_string(c.optim)},
          {"stack", "stack", to_string(c.stack)},
          {"compile", "compile", c.compile ? "yes" : "no"},
          {"modules", "modules", to_string(c.modules)},
          {"expandable_segments", "exp. seg.", c.expandable_segments ? "yes" : "no"},
          {"offload", "offload", offload_to_string(c.offload)},
          {"optimizer_in_backward", "opt. in bwd", c.optimizer_in_backward ? "yes" : "no"},
          {"sequence_parallel", "seq. par.", c.sequence_parallel ? "yes" : "no"},
          {"fsdp_embedding_units", "emb. units", c.fsdp_embedding_units ? "yes" : "no"},
          {"tp_comm_overlap", "TP overlap", c.tp_comm_overlap ? "yes" : "no"},
          {"moe_a2a_overlap", "A2A overlap", c.moe_a2a_overlap ? "yes" : "no"}};
}

/// Which of setting_columns() to show for `rows`: the core columns (micro-batch, sequence, accumulation, DP,
/// global batch, checkpointing, sharding, precision) always, every other column in which two rows differ, and every
/// column in which a row is not at training_config's default. A table built from this names every setting in which
/// its rows differ or which a reader would otherwise take for the default (a single plan at TP 8 or PP 2 showed no TP
/// or PP column). `always`: keys shown regardless (e.g. "ep" for a MoE model).
[[nodiscard]] inline std::vector<bool> differing_columns(const std::vector<training_config>& rows,
                                                        const std::vector<std::string_view>& always = {}) {
  const std::vector<setting_column> proto = setting_columns(training_config{});
  std::vector<bool> show(proto.size(), false);
  for (std::size_t i = 0; i < proto.size(); ++i) {
    const std::string_view k = proto[i].key;
    show[i] = k == "micro_batch_size" || k == "seq_len" || k == "grad_accum" || k == "dp" || k == "global_batch_tokens" ||
              k == "activation_checkpointing" || k == "sharding" || k == "precision" ||
              std::find(always.begin(), always.end(), k) != always.end();
  }
  if (rows.empty()) return show;
  const auto first = setting_columns(rows.front());
  for (const auto& r : rows) {
    const auto cols = setting_columns(r);
    for (std::size_t i = 0; i < cols.size(); ++i)
      if (cols[i].value != first[i].value || cols[i].value != proto[i].value) show[i] = true;
  }
  return show;
}

}  // namespace bwplan
