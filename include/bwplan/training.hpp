// bwplan: GPU memory and throughput planning for LLM training
// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <bwplan/error.hpp>
#include <bwplan/precision.hpp>

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace bwplan {

/// How the parameters kept across steps are stored (the optimizer's copy).
enum class master_weights {
  fp32,  ///< fp32 parameters, fp32 gradients and fp32 AdamW states; bf16 compute (autocast or FSDP2 MixedPrecisionPolicy)
  bf16,  ///< parameters, gradients and AdamW states all bf16 ("pure bf16")
};

/// Data-parallel sharding of parameters, gradients and optimizer states.
enum class sharding {
  none,  ///< every GPU holds everything (one GPU, or DDP with torch.autocast)
  full,     ///< FSDP2 `fully_shard` per block + root over the data-parallel × context-parallel mesh (ZeRO-3)
  hybrid,   ///< HSDP: shard within groups of `shard_group` GPUs, replicate across groups (all-reduce of gradient shards)
  grad_op,  ///< SHARD_GRAD_OP / ZeRO-2: states and gradients sharded, gathered bf16 weights kept from forward to backward
  /// ZeRO-1 / Megatron-Core distributed optimizer: optimizer states (and fp32 master weights) sharded over the
  /// data-parallel × context-parallel ranks; bf16 parameters and the gradient buffer replicated; per step a
  /// reduce-scatter of the gradients and an all-gather of the updated parameters (Megatron-Core
  /// `megatron/core/optimizer/distrib_optimizer.py`, docs/user-guide/features/dist_optimizer.md; DeepSpeed ZeRO
  /// stage 1; Rajbhandari et al. 2020, arXiv:1910.02054). docs/scaling.md#distributed-optimizer
  optimizer,
};

/// Pipeline-parallel schedule (docs/scaling.md#pipeline-parallelism).
enum class pp_schedule {
  one_f_one_b,  ///< 1F1B (PipeDream-Flush): one stage per rank; Megatron-Core `forward_backward_pipelining_without_interleaving`, PyTorch `Schedule1F1B`
  interleaved,  ///< interleaved 1F1B: `vpp` virtual stages per rank (Narayanan et al. 2021, arXiv:2104.04473 §2.2.2); PyTorch `ScheduleInterleaved1F1B`
};

/// What activation checkpointing recomputes: one value, so full and selective cannot contradict each other.
enum class ac_mode {
  none,            ///< every block saves what autograd needs
  full,            ///< whole blocks recomputed in backward: every block, or every K-th (checkpointing::every)
  selective_op,    ///< torchtitan per-op SAC: outputs of every other matmul and of attention saved, the rest recomputed
  selective_attn,  ///< Megatron-LM selective recompute: the core attention is recomputed, everything else saved
};

/// Activation checkpointing of a plan: `none`, `full`, `every-K`, `selective-op` or `selective-attn`.
///
/// `full` with `every` = K recomputes blocks 0, K, 2K, … (torchtitan `ac_freq`; K = 1 is every block).
/// Sources: torchtitan `torchtitan/models/llama3/infra/parallelize.py` (`_apply_ac_to_transformer_block`,
/// `_op_sac_save_list`), Korthikanti et al. 2022 (arXiv:2205.05198) for Megatron's selective recompute.
struct checkpointing {
  ac_mode mode = ac_mode::none;
  int every = 1;  ///< with ac_mode::full: recompute every K-th block (1 = all); 1 for the other modes

  [[nodiscard]] static constexpr checkpointing none() noexcept { return {}; }
  [[nodiscard]] static constexpr checkpointing full(int k = 1) noexcept { return {ac_mode::full, k}; }
  [[nodiscard]] static constexpr checkpointing selective_op() noexcept { return {ac_mode::selective_op, 1}; }
  [[nodiscard]] static constexpr checkpointing selective_attn() noexcept { return {ac_mode::selective_attn, 1}; }
  /// Whether whole blocks are recomputed (full or every-K).
  [[nodiscard]] constexpr bool recomputes_blocks() const noexcept { return mode == ac_mode::full; }
  [[nodiscard]] constexpr bool operator==(const checkpointing&) const noexcept = default;
};

/// The one printer: "none", "full", "every-K", "selective-op", "selective-attn".
[[nodiscard]] inline std::string to_string(const checkpointing& a) {
  switch (a.mode) {
    case ac_mode::none: return "none";
    case ac_mode::full: return a.every == 1 ? "full" : "every-" + std::to_string(a.every);
    case ac_mode::selective_op: return "selective-op";
    case ac_mode::selective_attn: return "selective-attn";
  }
  return "none";
}

/// The names parse_checkpointing accepts (every-K stands for every-2, every-3, …).
[[nodiscard]] inline const std::vector<std::string>& checkpointing_names() {
  static const std::vector<std::string> n{"none", "full", "every-K", "selective-op", "selective-attn"};
  return n;
}

/// The one parser: the names of to_string(checkpointing), plus "every-1" (= "full"). nullopt for anything
/// else, including K < 1 or K above 2^30.
[[nodiscard]] inline std::optional<checkpointing> parse_checkpointing(std::string_view s) noexcept {
  if (s == "none") return checkpointing::none();
  if (s == "full") return checkpointing::full();
  if (s == "selective-op") return checkpointing::selective_op();
  if (s == "selective-attn") return checkpointing::selective_attn();
  constexpr std::string_view prefix = "every-";
  if (s.size() > prefix.size() && s.substr(0, prefix.size()) == prefix && s.size() - prefix.size() <= 10) {
    std::int64_t k = 0;
    for (char ch : s.substr(prefix.size())) {
      if (ch < '0' || ch > '9') return std::nullopt;
      k = k * 10 + (ch - '0');
    }
    if (k >= 1 && k <= (std::int64_t{1} << 30)) return checkpointing::full(static_cast<int>(k));
  }
  return std::nullopt;
}

/// AdamW implementation in `torch.optim.AdamW`.
enum class optimizer_impl {
  fused,    ///< `fused=True`: one kernel, no full-size temporaries
  foreach,  ///< `foreach=True`: multi-tensor ops with full-size intermediate lists
};

/// What a run trains: every parameter, or low-rank adapters on a frozen base.
enum class finetune_mode {
  full,   ///< every parameter trained (gradients and optimizer states for all of them)
  lora,   ///< LoRA (Hu et al. 2021, arXiv:2106.09685; PEFT `src/peft/tuners/lora/layer.py`): frozen base, trained A·B
  qlora,  ///< QLoRA (Dettmers et al. 2023, arXiv:2305.14314): LoRA over a base stored NF4 (bitsandbytes, block 64, double quantization)
};

/// The optimizer and the bytes of state it keeps per trained parameter (see optimizer_state_bytes_per_param).
enum class optimizer_kind {
  adamw,             ///< `torch.optim.AdamW`: exp_avg + exp_avg_sq in the parameter dtype
  adamw_8bit,        ///< bitsandbytes `AdamW8bit`: two uint8 states + one fp32 absmax per 256-element block each
  paged_adamw_8bit,  ///< bitsandbytes `PagedAdamW8bit`: the same bytes in CUDA managed memory (paged out only under pressure)
  adafactor,         ///< `torch.optim.Adafactor`: factored second moment (row + column vectors per matrix), no first moment
  sgd,               ///< `torch.optim.SGD(momentum>0)`: one momentum buffer
  lion,              ///< Lion (Chen et al. 2023, arXiv:2302.06675; bitsandbytes `Lion`): one state (exp_avg)
};

/// Linear layers of a decoder block that LoRA adapts, as a bit set (PEFT's `target_modules` by module name).
namespace lora_target {
inline constexpr unsigned q = 1, k = 2, v = 4, o = 8, gate = 16, up = 32, down = 64;
inline constexpr unsigned attention = q | k | v | o;   ///< q_proj, k_proj, v_proj, o_proj
inline constexpr unsigned mlp = gate | up | down;      ///< gate_proj, up_proj, down_proj
inline constexpr unsigned all_linear = attention | mlp;  ///< PEFT "all-linear" (every block linear; never the LM head)
}  // namespace lora_target

/// LoRA settings (used with finetune_mode lora and qlora). PEFT `LoraConfig`: `r`, `lora_alpha`,
/// `target_modules`, `lora_dropout` (PEFT `src/peft/tuners/lora/config.py`).
struct lora_settings {
  int rank = 16;                                 ///< r: inner dimension of A (r × d_in) and B (d_out × r)
  double alpha = 32;                             ///< lora_alpha: the update is scaled by alpha / r
  unsigned targets = lora_target::all_linear;    ///< adapted block linears (lora_target bits)
  double dropout = 0;                            ///< lora_dropout: p > 0 keeps a dropout mask and output per adapted input
  [[nodiscard]] bool operator==(const lora_settings&) const = default;
};

/// The Hugging Face module names of the lora_target bits, in block order.
[[nodiscard]] inline const std::vector<std::pair<unsigned, std::string>>& lora_module_names() {
  static const std::vector<std::pair<unsigned, std::string>> n{
      {lora_target::q, "q_proj"},       {lora_target::k, "k_proj"},   {lora_target::v, "v_proj"}, {lora_target::o, "o_proj"},
      {lora_target::gate, "gate_proj"}, {lora_target::up, "up_proj"}, {lora_target::down, "down_proj"}};
  return n;
}

/// The one printer of a target set: "attention", "mlp", "all-linear", or the module names joined by ','
/// ("q_proj,v_proj").
[[nodiscard]] inline std::string lora_targets_to_string(unsigned t) {
  if (t == lora_target::all_linear) return "all-linear";
  if (t == lora_target::attention) return "attention";
  if (t == lora_target::mlp) return "mlp";
  std::string s;
  for (const auto& [bit, name] : lora_module_names())
    if (t & bit) s += (s.empty() ? "" : ",") + name;
  return s;
}

/// The one parser: "attention", "mlp", "all-linear", or a ','-separated list of module names (q_proj, k_proj,
/// v_proj, o_proj, gate_proj, up_proj, down_proj; the short forms q, k, v, o, gate, up, down too). nullopt for
/// anything else or an empty set.
[[nodiscard]] inline std::optional<unsigned> parse_lora_targets(std::string_view s) {
  if (s == "all-linear") return lora_target::all_linear;
  if (s == "attention") return lora_target::attention;
  if (s == "mlp") return lora_target::mlp;
  unsigned t = 0;
  while (!s.empty()) {
    const auto comma = s.find(',');
    const std::string_view item = s.substr(0, comma);
    bool found = false;
    for (const auto& [bit, name] : lora_module_names()) {
      const std::string_view n = name;
      if (item == n || item == n.substr(0, n.find('_'))) { t |= bit; found = true; }
    }
    if (!found) return std::nullopt;
    if (comma == std::string_view::npos) break;
    s = s.substr(comma + 1);
    if (s.empty()) return std::nullopt;
  }
  if (t == 0) return std::nullopt;
  return t;
}

/// Loss computation over the vocabulary.
enum class loss_impl {
  standard,  ///< `F.cross_entropy(logits.float(), labels)`: full fp32 logits and log-softmax
  /// the logits in token chunks, as the stack runs them: hf, the reference trainer's 8 checkpointed chunks of LM head +
  /// fp32 cross-entropy (apps/train/bwtrain/loss.py `chunked_loss`); torchtitan and torchtune, their chunked losses over
  /// materialised bf16 logits (docs/stacks.md)
  chunked,
  /// Liger-Kernel's fused linear cross-entropy (`LigerFusedLinearCrossEntropyFunction`, stack hf only): chunks of about
  /// T·h logits, the gradients computed in forward; the reference trainer does not run it (T-liger)
  liger,
};

/// Whose RMSNorm and rotary-embedding kernels the hf stack's blocks run (plan key `modules`, `--modules`;
/// docs/stacks.md#modules).
enum class module_kernels {
  /// `F.rms_norm` (ATen's fused kernel: autograd saves the input and the fp32 rstd) and RoPE in the activations'
  /// dtype: the ground truth's decoder (../shared/groundtruth/measure.py `Block._fwd`), which the calibrated
  /// inventory follows; the reference trainer installs these kernels in the transformers model
  /// (apps/train/bwtrain/model.py `apply_module_kernels`)
  fused,
  /// transformers' modules as published: `LlamaRMSNorm.forward` in five eager ops over an fp32 copy, whose
  /// normalized fp32 tensor the weight's `mul` saves (4 B per element of h more per norm), and
  /// `LlamaRotaryEmbedding` tables in the residual stream's dtype, so RoPE runs in fp32 under autocast
  /// (transformers/models/llama/modeling_llama.py; the ground truth's `impl=hf` rows)
  transformers,
};

/// What a plan keeps in host (CPU) memory instead of HBM, as a bit set (`--offload`, plan key `offload`).
///
/// - `optimizer`: the optimizer states, the master weights and the master-dtype gradients live in host memory and
///   the optimizer step runs on the CPU; the GPU keeps a bf16 working copy of the parameters (DeepSpeed ZeRO-Offload
///   `offload_optimizer: cpu`, deepspeed/runtime/zero/stage_1_and_2.py; with FSDP sharding ZeRO-3 +
///   `offload_optimizer`).
/// - `params`: the FSDP-sharded parameters themselves live in host memory and are copied to the GPU for each
///   unit's all-gather (FSDP2 `CPUOffloadPolicy`, torch/distributed/fsdp/_fully_shard/_fsdp_api.py; ZeRO-3
///   `offload_param`); needs `optimizer` (the step runs where the shards live) and sharding full.
/// - `activations`: the checkpoints of activation checkpointing (each recomputed block's input) go to pinned host
///   memory in forward and come back for the block's recompute in backward (torch.autograd.graph.save_on_cpu;
///   torchtune `OffloadActivations`, torchtune/training/_activation_offloading.py); needs full checkpointing.
/// docs/finetune.md#cpu-offload
namespace offload_target {
inline constexpr unsigned optimizer = 1, params = 2, activations = 4;
inline constexpr unsigned all = optimizer | params | activations;
}  // namespace offload_target

/// The one printer of an offload set: "none", or the members joined by ',' in the order optimizer, params,
/// activations ("optimizer,params").
[[nodiscard]] inline std::string offload_to_string(unsigned o) {
  if (o == 0) return "none";
  std::string s;
  for (auto [bit, name] : {std::pair{offload_target::optimizer, "optimizer"}, std::pair{offload_target::params, "params"},
                           std::pair{offload_target::activations, "activations"}})
    if (o & bit) s += (s.empty() ? "" : ",") + std::string(name);
  return s;
}

/// The one parser: "none", or a ','-separated list of optimizer, params, activations (any order, each once).
/// nullopt for anything else (an empty item, an unknown name, a repeated one, "none" in a list).
[[nodiscard]] inline std::optional<unsigned> parse_offload(std::string_view s) {
  if (s == "none") return 0u;
  unsigned o = 0;
  if (s.empty()) return std::nullopt;
  while (true) {
    const auto comma = s.find(',');
    const std::string_view item = s.substr(0, comma);
    unsigned bit = item == "optimizer" ? offload_target::optimizer : item == "params" ? offload_target::params
                                                                    : item == "activations" ? offload_target::activations : 0u;
    if (bit == 0 || (o & bit)) return std::nullopt;
    o |= bit;
    if (comma == std::string_view::npos) break;
    s = s.substr(comma + 1);
  }
  return o;
}

/// Why offload set `c_offload` cannot run with the other settings, or nullptr: the offload rules of violations()
/// (the planner's hot loop calls this instead). Fields: the rule's plan field in `*field`.
struct training_config;
[[nodiscard]] inline const char* offload_violation(const training_config& c, const char** field) noexcept;

/// The training stack a plan runs on: whose module code, loss, gradient layout and torch.compile behaviour the
/// memory terms follow (docs/stacks.md). Each stack's terms cite its files at a pinned commit.
enum class training_stack {
  hf,          ///< the reference trainer (apps/train): Hugging Face transformers modules, FSDP2 / DDP / autocast (bwplan's calibrated inventory)
  torchtitan,  ///< pytorch/torchtitan: its Llama 3 decoder, FSDP2, chunked loss over materialised bf16 logits, compiles blocks and loss
  torchtune,   ///< pytorch/torchtune recipes: pure bf16, fp32 copies in RMSNorm, GQA-expanded K/V, fp32 logits from the model
  megatron,    ///< NVIDIA Megatron-LM (Megatron-Core): bf16 model, fp32 main parameters and a permanent fp32 main-gradient buffer, no DDP bucket copy
};

/// Every training_stack, in declaration order (parsers, sweeps).
inline constexpr training_stack all_stacks[] = {training_stack::hf, training_stack::torchtitan, training_stack::torchtune,
                                                training_stack::megatron};

/// The one printer: "hf", "torchtitan", "torchtune", "megatron".
[[nodiscard]] constexpr const char* to_string(training_stack s) noexcept {
  switch (s) {
    case training_stack::hf: return "hf";
    case training_stack::torchtitan: return "torchtitan";
    case training_stack::torchtune: return "torchtune";
    case training_stack::megatron: return "megatron";
  }
  return "hf";
}

/// The one parser of a stack name (the names of to_string(training_stack)); nullopt for anything else.
[[nodiscard]] inline std::optional<training_stack> parse_stack(std::string_view s) noexcept {
  for (auto x : all_stacks)
    if (s == to_string(x)) return x;
  return std::nullopt;
}

/// One training configuration for one data-parallel replica group.
struct training_config {
  std::int64_t micro_batch = 1;     ///< sequences per GPU per forward/backward (micro-batch size)
  std::int64_t seq_len = 2048;      ///< tokens per sequence
  std::int64_t grad_accum = 1;      ///< micro-batches per optimizer step (gradient accumulation)
  int world_size = 1;               ///< GPUs in the job (data-parallel size)
  int gpus_per_node = 8;            ///< GPUs per node, for intra- vs inter-node communication
  checkpointing ac;                 ///< activation checkpointing (none, full, every-K, selective-op, selective-attn)
  master_weights master = master_weights::fp32;
  sharding shard = sharding::none;
  compute_format format = compute_format::bf16;  ///< format of the linear-layer GEMMs
  std::optional<bf16_blocks> bf16_layers;        ///< blocks kept bf16 (default: none; NVFP4: last 15 %, as torchtitan)
  bool fp8_all_gather = false;                    ///< FSDP2 all-gathers FP8 weights (fp8 tensorwise only)
  optimizer_impl optimizer = optimizer_impl::fused;
  loss_impl loss = loss_impl::standard;
  int ep = 1;                       ///< expert parallelism: routed experts split over ep GPUs (MoE models; divides world_size)
  double moe_capacity_factor = 1.0; ///< MoE dispatch buffer size relative to top_k · tokens (1 = dropless)
  /// hybrid sharding: GPUs per shard group (0 = gpus_per_node / tp, i.e. one node); the distributed optimizer: GPUs
  /// one optimizer instance shards the states over (0 = every data-parallel rank; Megatron-LM's
  /// `--num-distributed-optimizer-instances` is the data-parallel size ÷ this)
  int shard_group = 0;
  int tp = 1;           ///< tensor-parallel degree (within a node; with sequence parallel unless sequence_parallel is false)
  int cp = 1;           ///< context-parallel degree (ring attention over the sequence)
  int pp = 1;           ///< pipeline-parallel degree: stages (ranks) the layers are split over (docs/scaling.md#pipeline-parallelism)
  pp_schedule schedule = pp_schedule::one_f_one_b;  ///< pipeline schedule (with pp > 1)
  int vpp = 1;          ///< virtual stages per pipeline rank (interleaved schedule: >= 2; 1F1B: 1)
  /// GPUs in one NVLink domain (0: the node): 72 on a GB200/GB300 NVL72 UltraServer, whose NVLink spans 18
  /// instances of 4 GPUs. Follows from the target (resolve_world), like gpus_per_node; not a plan-file key.
  int nvlink_domain = 0;
  finetune_mode finetune = finetune_mode::full;   ///< full fine-tune, LoRA or QLoRA
  lora_settings lora;                             ///< LoRA settings (finetune lora / qlora; kept but unused with full)
  optimizer_kind optim = optimizer_kind::adamw;   ///< the optimizer (optimizer_impl applies to AdamW only)
  training_stack stack = training_stack::hf;     ///< the training stack (module code, loss, gradient layout; docs/stacks.md)
  bool compile = false;               ///< torch.compile as the stack applies it (hf: each block; torchtitan, torchtune: blocks and loss)
  bool expandable_segments = false;   ///< `PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True` (the caching allocator's setting)
  unsigned offload = 0;               ///< CPU offload (offload_target bits: optimizer, params, activations; 0 = none)
  /// The optimizer steps each parameter inside backward, as soon as its gradient is complete, and frees that
  /// gradient (torchtune's `optimizer_in_bwd`: one optimizer per parameter stepped from
  /// `register_post_accumulate_grad_hook`, torchtune/training/memory.py; docs/stacks.md#optimizer-in-backward)
  bool optimizer_in_backward = false;
  /// Tensor parallelism shards the sequence of what runs between the tensor-parallel regions (norms, dropout,
  /// residual adds) over the tp ranks: Megatron-LM's `--sequence-parallel`, which DTensor-based stacks (hf, torchtitan,
  /// torchtune) always apply with tp > 1. False: Megatron-LM's default without the flag, where every tp rank runs
  /// them on the whole sequence and all-reduces after each row-parallel linear (megatron/training/arguments.py
  /// `--sequence-parallel`; Korthikanti et al. 2022, arXiv:2205.05198). Only stack megatron; no effect at tp 1.
  bool sequence_parallel = true;
  /// FSDP2 shards the token embedding and the LM head as units of their own, each gathered only while it runs and
  /// resharded after (torchtune's `custom_sharded_layers: ['tok_embeddings', 'output']`, torchtune/training/
  /// _distributed.py `shard_model` @bd2a0fc7; torchtitan's `apply_fsdp` since 83e69410, 2025-07-28,
  /// torchtitan/distributed/fsdp.py @b5bcd76), instead of in the root unit, which FSDP2 keeps gathered from the forward
  /// to the end of backward. Needs sharding full or hybrid and pp 1; no effect with tied embeddings (the one matrix
  /// is used at both ends of the step). docs/stacks.md#fsdp-embedding-units
  bool fsdp_embedding_units = false;
  /// Megatron-LM's `--tp-comm-overlap`: Transformer Engine's userbuffers overlap the tensor-parallel all-gathers and
  /// reduce-scatters with the GEMMs of the same linears (megatron/core/model_parallel_config.py `tp_comm_overlap`;
  /// TransformerEngine `initialize_ub`), as Megatron-Bridge's performance presets set it. Needs stack megatron
  /// and sequence parallel; no effect at tp 1. docs/scaling.md#tp-comm-overlap
  bool tp_comm_overlap = false;
  /// The expert-parallel all-to-all (MoE dispatch and combine) of one micro-batch overlapped with the compute of
  /// another: Megatron-Core's `overlap_moe_expert_parallel_comm` ("1F1B A2A overlap", megatron/core/model_parallel_config.py),
  /// as Megatron-Bridge's performance presets set it per model and GPU (`moe_a2a_overlap`, default False in
  /// scripts/performance/utils/utils.py `WorkloadBaseConfig`; True in the H100 MoE presets, False in the Blackwell
  /// DeepSeek-V3 ones, deepseek_workload_base_configs.py @644f59721). Off: every all-to-all is waited for where it is
  /// issued (Megatron's alltoall dispatcher without the overlap, torchtitan's expert parallel, the hf stack). Needs two or
  /// more micro-batches to hide anything; no effect at ep 1. docs/scaling.md#moe-a2a-overlap
  bool moe_a2a_overlap = false;
  /// The RMSNorm and RoPE kernels of the hf stack's blocks (module_kernels): `fused` (default, the calibrated
  /// inventory) or `transformers` (the modules as published). Only stack hf: the other stacks' module code is
  /// their own (docs/stacks.md#modules)
  module_kernels modules = module_kernels::fused;

  [[nodiscard]] bool operator==(const training_config&) const = default;

  /// Data-parallel replicas × context-parallel ranks of one pipeline stage: the FSDP (or distributed-optimizer)
  /// mesh, world_size / (tp · pp).
  [[nodiscard]] constexpr int fsdp_mesh() const noexcept {
    return tp > 0 && pp > 0 ? world_size / (tp * pp) : world_size;
  }
  /// Data-parallel degree: world_size / (tp · cp · pp) (sequences processed side by side).
  [[nodiscard]] constexpr int dp() const noexcept {
    return tp > 0 && cp > 0 && pp > 0 ? world_size / (tp * cp * pp) : world_size;
  }
  /// GPUs of one NVLink domain: `nvlink_domain`, or the node when unset.
  [[nodiscard]] constexpr int nvlink_domain_gpus() const noexcept { return nvlink_domain > 0 ? nvlink_domain : gpus_per_node; }
  /// Virtual pipeline stages per rank: vpp with the interleaved schedule, else 1.
  [[nodiscard]] constexpr int virtual_stages() const noexcept { return schedule == pp_schedule::interleaved ? vpp : 1; }
  /// GPUs a parameter/gradient/optimizer-state shard is spread over (1 without sharding). torchtitan shards
  /// model states over the combined data-parallel × context-parallel mesh.
  [[nodiscard]] constexpr int shard_size() const noexcept {
    switch (shard) {
      case sharding::none: return 1;
      case sharding::hybrid: return shard_group > 0 ? shard_group : std::max(1, gpus_per_node / std::max(1, tp));
      case sharding::optimizer: return shard_group > 0 ? shard_group : fsdp_mesh();
      default: return fsdp_mesh();
    }
  }
  /// Whether parameters are sharded (any FSDP mode: full, hybrid, grad-op; not the distributed optimizer, which
  /// shards optimizer states only).
  [[nodiscard]] constexpr bool sharded() const noexcept { return shard != sharding::none && shard != sharding::optimizer; }

  /// Tokens each GPU processes per micro-batch.
  [[nodiscard]] constexpr std::int64_t tokens_per_micro_batch() const noexcept { return micro_batch * seq_len; }
  /// Whether block `i` (0-based) is recomputed in backward.
  [[nodiscard]] constexpr bool checkpointed(std::int64_t i) const noexcept {
    return ac.recomputes_blocks() && i % ac.every == 0;
  }
  /// Blocks kept bf16, after the per-format default.
  [[nodiscard]] bf16_blocks bf16_kept() const noexcept {
    if (bf16_layers) return *bf16_layers;
    bf16_blocks b;
    if (format == compute_format::nvfp4) b.fraction = 0.15;
    return b;
  }
  /// Number of blocks whose linear layers run in `format` (0 for bf16).
  [[nodiscard]] std::int64_t quantized_blocks(std::int64_t layers) const noexcept {
    return format == compute_format::bf16 ? 0 : bf16_kept().quantized(layers);
  }
  /// Number of recomputed blocks among `layers`.
  [[nodiscard]] constexpr std::int64_t checkpointed_blocks(std::int64_t layers) const noexcept {
    return ac.recomputes_blocks() ? (layers + ac.every - 1) / ac.every : 0;
  }
  /// CPU offload of the optimizer (states, master weights, gradients and the step), of the sharded parameters, of
  /// the activation checkpoints (offload_target).
  [[nodiscard]] constexpr bool offloads_optimizer() const noexcept { return (offload & offload_target::optimizer) != 0; }
  [[nodiscard]] constexpr bool offloads_params() const noexcept { return (offload & offload_target::params) != 0; }
  [[nodiscard]] constexpr bool offloads_activations() const noexcept { return (offload & offload_target::activations) != 0; }
  /// Whether the base weights are frozen (LoRA or QLoRA).
  [[nodiscard]] constexpr bool adapters() const noexcept { return finetune != finetune_mode::full; }
  /// Whether the GEMMs run under torch.autocast on fp32 weights: fp32 master weights computed on directly, without
  /// FSDP2's bf16 gathers (sharding none; the distributed optimizer computes on bf16 parameters), a frozen bf16 base
  /// (LoRA, QLoRA) or a bf16 working copy beside host-side masters (offload optimizer); Megatron trains a bf16
  /// model. The reference trainer's recipe (apps/train/bwtrain/engine.py: `torch.autocast` when there is no FSDP and
  /// master_weights is fp32) and memory_shape::amp.
  [[nodiscard]] constexpr bool autocast_fp32_weights() const noexcept {
    return shard == sharding::none && master == master_weights::fp32 && !adapters() && !offloads_optimizer() &&
           stack != training_stack::megatron;
  }
};

/// Every legality rule of a training configuration on its own (no model, no hardware), in one list.
///
/// Returns the broken rules in a fixed order, each with its plan field, JSON pointer and message (which
/// names no command-line flag). Rules: micro-batch, sequence, accumulation, world size, GPUs per node,
/// checkpoint interval and parallel degrees ≥ 1; FP8 all-gather only with fp8 tensorwise and full
/// sharding; ep divides the GPUs left after tp (and after tp · pp: one pipeline stage); tp stays within a node
/// (an NVLink domain where it spans instances); tp·cp·pp divides the world size; vpp > 1 only with the
/// interleaved schedule, which needs pp ≥ 2, vpp ≥ 2 and grad_accum a multiple of pp;
/// 2·cp divides the sequence (torchtitan's load-balanced ring attention, `context_parallel` in
/// torch/distributed/tensor/experimental/_attention.py); a hybrid shard group divides the FSDP mesh and is set only with hybrid sharding;
/// MoE capacity factor ≥ 1; LoRA rank 1..65536, alpha > 0, dropout in [0, 1), at least one target; LoRA and QLoRA
/// with precision bf16 and tp 1 (what this release models); the stack's own settings (megatron: sharding none or optimizer, fp32 master
/// weights, standard loss, no compile; torchtune: bf16 master weights; LoRA with hf and torchtune; tensor parallelism without
/// sequence parallel with megatron only); the optimizer step in
/// backward with stack torchtune, one GPU, sharding none, grad_accum 1, a full fine-tune and no offload. `first_only` stops at the first (the planner's hot loop only needs a yes/no).
/// Model-dependent rules (heads, experts, positions) are bwplan::plan_violations in plan.hpp.
[[nodiscard]] inline std::vector<plan_violation> violations(const training_config& c, bool first_only = false) {
  std::vector<plan_violation> out;
  // Messages are built only when a rule is broken: the planner calls this for every candidate.
  auto need = [&](bool ok, const char* field, auto&& message) {
    if (ok || (first_only && !out.empty())) return;
    out.push_back({field, std::string("/") + field, message()});
  };
  auto s = [](auto v) { return std::to_string(v); };
  need(c.micro_batch >= 1, "micro_batch_size", [&] { return "micro-batch size must be >= 1, got " + s(c.micro_batch); });
  need(c.seq_len >= 1, "seq_len", [&] { return "sequence length must be >= 1, got " + s(c.seq_len); });
  need(c.grad_accum >= 1, "grad_accum", [&] { return "gradient accumulation must be >= 1, got " + s(c.grad_accum); });
  need(c.world_size >= 1, "gpus", [&] { return "world size must be >= 1, got " + s(c.world_size); });
  need(c.gpus_per_node >= 1, "gpus_per_node", [&] { return "GPUs per node must be >= 1, got " + s(c.gpus_per_node); });
  need(c.ac.every >= 1 && (c.ac.every == 1 || c.ac.mode == ac_mode::full), "activation_checkpointing",
       [&] { return "a checkpoint interval needs full checkpointing and must be >= 1, got " + to_string(c.ac); });
  need(!c.fp8_all_gather || (c.format == compute_format::fp8 && c.shard == sharding::full), "fp8_all_gather",
       [&] { return std::string("FP8 all-gather needs precision fp8 and sharding full"); });
  // bf16_layers picks the blocks a low-precision format leaves in bf16: with precision bf16 every block is bf16 already
  need(!c.bf16_layers || c.format != compute_format::bf16 ||
           (c.bf16_layers->first == 0 && c.bf16_layers->last == 0 && c.bf16_layers->fraction <= 0),
       "bf16_layers", [&] {
         return std::string("bf16_layers keeps blocks in bf16 under a low-precision format; with precision bf16 every block is "
                            "bf16 already (set precision fp8, fp8-rowwise, mxfp8 or nvfp4, or leave bf16_layers out)");
       });
  need(c.tp >= 1, "tp", [&] { return "tensor-parallel degree must be >= 1, got " + s(c.tp); });
  need(c.cp >= 1, "cp", [&] { return "context-parallel degree must be >= 1, got " + s(c.cp); });
  need(c.ep >= 1, "ep", [&] { return "expert-parallel degree must be >= 1, got " + s(c.ep); });
  need(c.pp >= 1, "pp", [&] { return "pipeline-parallel degree must be >= 1, got " + s(c.pp); });
  need(c.vpp >= 1, "vpp", [&] { return "virtual pipeline stages must be >= 1, got " + s(c.vpp); });
  need(c.schedule == pp_schedule::interleaved || c.vpp == 1, "vpp",
       [&] { return "virtual pipeline stages " + s(c.vpp) + " need the interleaved schedule (pp_schedule interleaved)"; });
  need(c.schedule != pp_schedule::interleaved || (c.pp >= 2 && c.vpp >= 2), "pp_schedule", [&] {
    return "the interleaved schedule needs pp >= 2 and vpp >= 2 (virtual stages per rank), got pp " + s(c.pp) + ", vpp " + s(c.vpp);
  });
  need(c.lora.rank >= 1 && c.lora.rank <= 65536, "lora_rank", [&] { return "LoRA rank must be between 1 and 65536, got " + s(c.lora.rank); });
  need(c.lora.alpha > 0 && c.lora.alpha <= 1e6, "lora_alpha", [&] { return std::string("LoRA alpha must be > 0 and <= 1000000"); });
  need(c.lora.dropout >= 0 && c.lora.dropout < 1, "lora_dropout", [&] { return std::string("LoRA dropout must be in [0, 1)"); });
  need(c.lora.targets != 0 && (c.lora.targets & ~lora_target::all_linear) == 0, "lora_targets",
       [&] { return std::string("LoRA targets must name at least one block linear"); });
  // named by the first setting off its default, so a plan file's error points at the member it holds
  const lora_settings d0{};
  need(c.adapters() || c.lora == d0,
       c.lora.rank != d0.rank ? "lora_rank" : c.lora.alpha != d0.alpha ? "lora_alpha" : c.lora.targets != d0.targets ? "lora_targets" : "lora_dropout",
       [&] { return std::string("LoRA settings need finetune lora or qlora"); });
  need(!c.adapters() || c.format == compute_format::bf16, "precision", [&] {
    return std::string(c.finetune == finetune_mode::qlora ? "QLoRA computes in bf16 over an NF4 base (bitsandbytes Linear4bit)"
                                                          : "LoRA over a low-precision base is not modelled by this release") +
           ": precision must be bf16";
  });
  need(!c.adapters() || c.tp == 1, "tp", [&] {
    return "tensor parallelism " + s(c.tp) + " is not modelled with LoRA/QLoRA adapters (PEFT wraps nn.Linear; tp must be 1)";
  });
  // the training stack: what each stack runs (docs/stacks.md)
  const bool mg = c.stack == training_stack::megatron;
  need(!(mg && c.compile), "compile", [&] { return std::string("Megatron-LM does not torch.compile its model (stack megatron): compile must be false"); });
  need(!mg || c.shard == sharding::none || c.shard == sharding::optimizer, "sharding", [&] {
    return std::string("stack megatron models Megatron-Core's data parallelism (sharding none: DDP over a permanent fp32 main-gradient "
                       "buffer; sharding optimizer: its distributed optimizer); Megatron-FSDP is not modelled");
  });
  need(!mg || c.master == master_weights::fp32, "master_weights", [&] {
    return std::string("Megatron-LM trains a bf16 model with fp32 main parameters (--bf16): master weights must be fp32");
  });
  need(!mg || c.loss == loss_impl::standard, "loss", [&] {
    return std::string("Megatron-LM has no chunked loss (its vocabulary-parallel cross-entropy runs in place over fp32 logits): loss must be standard");
  });
  need(!(c.stack == training_stack::torchtune) || c.master == master_weights::bf16, "master_weights", [&] {
    return std::string("torchtune trains in the model dtype without autocast (dtype bf16: parameters, gradients and optimizer states bf16): "
                       "master weights must be bf16 with stack torchtune");
  });
  need(!c.adapters() || c.stack == training_stack::hf || c.stack == training_stack::torchtune, "finetune", [&] {
    return std::string("LoRA / QLoRA are modelled with the hf and torchtune stacks only, got stack ") + to_string(c.stack);
  });
  need(c.pp <= 1 || (c.shard != sharding::hybrid && c.shard != sharding::grad_op), "pp", [&] {
    return std::string("pipeline parallelism with sharding ") + (c.shard == sharding::hybrid ? "hybrid" : "grad-op") +
           " is not modelled by this release (use none, full or optimizer with pp > 1)";
  });
  need(c.pp <= 1 || !c.adapters(), "pp",
       [&] { return std::string("pipeline parallelism with LoRA/QLoRA adapters is not modelled by this release (pp must be 1)"); });
  need(c.pp <= 1 || !c.fp8_all_gather, "pp",
       [&] { return std::string("pipeline parallelism with FP8 all-gather is not modelled by this release (pp must be 1)"); });
  need(!c.adapters() || c.shard != sharding::optimizer, "sharding",
       [&] { return std::string("the distributed optimizer (sharding optimizer) with LoRA/QLoRA adapters is not modelled by this release"); });
  // optimizer in backward (torchtune's optimizer_in_bwd, recipes/full_finetune_single_device.py; docs/stacks.md)
  // tensor parallelism without sequence parallel: Megatron-LM's layout (the DTensor stacks always shard the sequence)
  need(c.sequence_parallel || c.stack == training_stack::megatron, "sequence_parallel", [&] {
    return std::string("tensor parallelism without sequence parallel is modelled as Megatron-LM's (stack megatron); stack ") +
           to_string(c.stack) + " applies SequenceParallel with every tp > 1";
  });
  need(!c.fsdp_embedding_units || c.shard == sharding::full || c.shard == sharding::hybrid, "fsdp_embedding_units", [&] {
    return std::string("the embedding and LM head as FSDP units of their own need FSDP (sharding full or hybrid), got sharding ") +
           (c.shard == sharding::none ? "none" : c.shard == sharding::grad_op ? "grad-op" : "optimizer");
  });
  need(!c.fsdp_embedding_units || c.stack != training_stack::hf || c.loss == loss_impl::standard, "fsdp_embedding_units", [&] {
    return std::string(c.loss == loss_impl::liger
                           ? "Liger's fused linear cross-entropy (loss liger) reads the head's weight outside the head module, so "
                             "FSDP2 never gathers a head unit of its own: use loss standard, or the FSDP2 root"
                           : "the hf stack's chunked loss calls the head once per chunk in forward and again in each chunk's "
                             "recompute; a head unit of its own is not modelled with it: use loss standard, or the FSDP2 root");
  });
  // torchao 0.18's MXFP8 training (the hf stack's mxfp8, MXFP8TrainingOpConfig) quantizes the weight and input it is
  // handed: its weight wrapper overrides F.linear in __torch_function__, before autocast's dispatch, so under autocast
  // it gets the fp32 master weight (and the fp32 norm output), and its dim0 cast asserts bfloat16
  // (torchao/prototype/moe_training/tensor.py MXFP8TrainingWeightWrapperTensor, mxfp8_linear.py mx_mm.forward,
  // prototype/mx_formats/kernels.py triton_to_mxfp8_dim0 @v0.18.0)
  need(!(c.stack == training_stack::hf && c.format == compute_format::mxfp8 && c.autocast_fp32_weights()), "precision", [&] {
    return std::string("precision mxfp8 on the hf stack needs bf16 weights in its GEMMs: with fp32 master weights and sharding none "
                       "the step runs under torch.autocast, and torchao 0.18's MXFP8 linear quantizes the fp32 weight itself (its "
                       "F.linear override runs before autocast) with a Triton cast that accepts bfloat16 only "
                       "(triton_to_mxfp8_dim0); use sharding full or grad-op (FSDP2 computes on bf16 parameters, one GPU too) or "
                       "master_weights bf16 (sharding optimizer computes on bf16 too, but the reference trainer does not run it)");
  });
  need(c.loss != loss_impl::liger || c.stack == training_stack::hf, "loss", [&] {
    return std::string("loss liger (Liger-Kernel's fused linear cross-entropy) is modelled on the hf stack only, got stack ") + to_string(c.stack);
  });
  need(!c.fsdp_embedding_units || c.pp == 1, "fsdp_embedding_units",
       [&] { return "the embedding and LM head as FSDP units of their own are modelled without pipeline parallelism, got pp " + s(c.pp); });
  need(!c.tp_comm_overlap || (c.stack == training_stack::megatron && c.sequence_parallel), "tp_comm_overlap", [&] {
    return std::string("the tensor-parallel communication overlap is Megatron-LM's with Transformer Engine userbuffers (stack "
                       "megatron, sequence parallel), got stack ") + to_string(c.stack) + (c.sequence_parallel ? "" : " without sequence parallel");
  });
  // Megatron-Core's own rules for overlap_moe_expert_parallel_comm (megatron/core/transformer/transformer_config.py
  // __post_init__ @d98e8a64: "only supported with expert model parallelism", "disable full recomputation", and with
  // pipeline parallelism "virtual_pipeline_model_parallel_size must be specified")
  need(!c.moe_a2a_overlap || c.ep > 1, "moe_a2a_overlap", [&] {
    return std::string("the MoE all-to-all overlap hides the expert-parallel dispatch and combine, which need expert parallelism "
                       "(ep > 1; Megatron-Core asserts it), got ep 1");
  });
  need(!c.moe_a2a_overlap || c.ac.mode != ac_mode::full, "moe_a2a_overlap", [&] {
    return std::string("the MoE all-to-all overlap runs without full recomputation (Megatron-Core asserts recompute_granularity "
                       "!= 'full'), got activation_checkpointing ") + (c.ac.every > 1 ? "every-" + s(c.ac.every) : std::string("full"));
  });
  need(!c.moe_a2a_overlap || c.pp == 1 || c.schedule == pp_schedule::interleaved, "moe_a2a_overlap", [&] {
    return "the MoE all-to-all overlap with pipeline parallelism needs the interleaved schedule (Megatron-Core asserts "
           "virtual_pipeline_model_parallel_size is set when pp > 1), got pp " + s(c.pp) + " with 1F1B";
  });
  need(c.modules == module_kernels::fused || c.stack == training_stack::hf, "modules", [&] {
    return std::string("modules transformers describes the transformers modules the hf stack runs; stack ") + to_string(c.stack) +
           " has its own module code (modules must be fused)";
  });
  need(!c.optimizer_in_backward || c.stack == training_stack::torchtune, "optimizer_in_backward", [&] {
    return std::string("the optimizer step in backward is modelled as torchtune's optimizer_in_bwd (stack torchtune), got stack ") +
           to_string(c.stack);
  });
  need(!c.optimizer_in_backward || c.grad_accum == 1, "optimizer_in_backward", [&] {
    return "the optimizer steps each parameter as its gradient is complete, so nothing accumulates: grad_accum must be 1, got " +
           s(c.grad_accum);
  });
  need(!c.optimizer_in_backward || (c.world_size == 1 && c.shard == sharding::none), "optimizer_in_backward", [&] {
    return "the optimizer step in backward is modelled on one GPU without sharding (torchtune's single-device recipe; "
           "its FSDP2 path is not modelled), got " + s(c.world_size) + " GPU(s)" + (c.shard == sharding::none ? "" : ", sharded");
  });
  need(!c.optimizer_in_backward || !c.adapters(), "optimizer_in_backward",
       [&] { return std::string("the optimizer step in backward is modelled for a full fine-tune (finetune full)"); });
  need(!c.optimizer_in_backward || c.offload == 0, "optimizer_in_backward",
       [&] { return std::string("the optimizer step in backward runs on the GPU: offload must be none"); });
  {  // CPU offload (docs/finetune.md#cpu-offload)
    const char* field = nullptr;
    if (const char* why = offload_violation(c, &field)) need(false, field, [&] { return std::string(why); });
  }
  if (!out.empty()) return out;  // the rules below divide by these
  need(c.moe_capacity_factor >= 1, "moe_capacity_factor", [&] { return std::string("MoE capacity factor must be >= 1"); });
  need(c.world_size % c.ep == 0, "ep", [&] {
    return "expert parallelism " + s(c.ep) + " does not divide the world size " + s(c.world_size);
  });
  need((c.world_size / c.tp) % c.ep == 0, "ep", [&] {
    return "expert parallelism " + s(c.ep) + " must divide the GPUs left after tensor parallelism (" + s(c.world_size) +
           " / tp " + s(c.tp) + "): experts are split over ep x tp GPUs";
  });
  need(c.pp == 1 || c.world_size % (c.tp * c.pp) != 0 || (c.world_size / (c.tp * c.pp)) % c.ep == 0, "ep", [&] {
    return "expert parallelism " + s(c.ep) + " must divide the GPUs of one pipeline stage after tensor parallelism (" +
           s(c.world_size) + " / (tp " + s(c.tp) + " x pp " + s(c.pp) + "))";
  });
  need(c.tp <= c.nvlink_domain_gpus() || c.world_size < c.nvlink_domain_gpus(), "tp", [&] {
    return c.nvlink_domain_gpus() > c.gpus_per_node
               ? "tensor parallelism " + s(c.tp) + " must stay within an NVLink domain of " + s(c.nvlink_domain_gpus()) + " GPUs"
               : "tensor parallelism " + s(c.tp) + " must stay within a node of " + s(c.gpus_per_node) + " GPUs";
  });
  need(c.schedule != pp_schedule::interleaved || c.pp < 2 || c.grad_accum % c.pp == 0, "grad_accum", [&] {
    return "the interleaved schedule needs the micro-batches per step (grad_accum " + s(c.grad_accum) +
           ") to be a multiple of pp " + s(c.pp) +
           " (Megatron-Core schedules.py: micro-batch groups of pp per virtual stage)";
  });
  need(c.world_size % (c.tp * c.cp * c.pp) == 0, "gpus", [&] {
    return "tp x cp x pp = " + s(c.tp * c.cp * c.pp) + " does not divide the world size " + s(c.world_size);
  });
  // Megatron's sequence parallel splits the sequence dimension across the tp ranks evenly
  // (megatron/core/tensor_parallel/mappings.py `_split_along_first_dim`: "First dimension of the tensor should be
  // divisible by tensor parallel size"; a review found --seq 4095 at tp 2 accepted)
  // (with context parallelism each tp group splits its seq_len / cp tokens: a review)
  need(c.stack != training_stack::megatron || c.tp <= 1 || !c.sequence_parallel || c.seq_len % (static_cast<std::int64_t>(c.tp) * c.cp) == 0,
       "seq_len", [&] {
         return "sequence length " + s(c.seq_len) + " is not a multiple of " + (c.cp > 1 ? "cp x tp = " + s(c.cp * c.tp) : "tp = " + s(c.tp)) +
                " (Megatron's sequence parallel splits each context-parallel rank's tokens evenly across the tensor-parallel ranks)";
       });
  need(c.cp == 1 || c.seq_len % (2 * c.cp) == 0, "cp", [&] {
    return "sequence length " + s(c.seq_len) + " is not a multiple of 2 x cp = " + s(2 * c.cp) +
           " (load-balanced ring attention splits each sequence into 2 x cp chunks)";
  });
  need(c.shard_group >= 0, "shard_group", [&] { return "shard group must be >= 1, got " + s(c.shard_group); });
  need(c.shard_group == 0 || c.shard == sharding::hybrid || c.shard == sharding::optimizer, "shard_group",
       [&] { return std::string("a shard group needs sharding hybrid or optimizer"); });
  need((c.shard != sharding::hybrid && c.shard != sharding::optimizer) || c.shard_size() < 1 || c.fsdp_mesh() % c.shard_size() == 0,
       "shard_group", [&] {
    return "shard group " + s(c.shard_size()) + " does not divide the FSDP mesh of " + s(c.fsdp_mesh()) +
           " GPUs (world size / tp)";
  });
  return out;
}

inline const char* offload_violation(const training_config& c, const char** field) noexcept {
  if (c.offload == 0) return nullptr;
  *field = "offload";
  if ((c.offload & ~offload_target::all) != 0) return "offload must name optimizer, params or activations";
  if (c.stack == training_stack::megatron)
    return "CPU offload is not modelled with stack megatron (Megatron-Core's --optimizer-cpu-offload runs a hybrid-device optimizer "
           "of its own over the distributed optimizer): offload must be none";
  if (c.stack == training_stack::torchtitan && c.offload != (offload_target::optimizer | offload_target::params))
    return "torchtitan offloads only through FSDP2 CPUOffloadPolicy (training.enable_cpu_offload: sharded parameters, gradients and "
           "the optimizer step together): offload must be none or optimizer,params";
  if (c.offloads_params() && !c.offloads_optimizer())
    return "offload params needs offload optimizer: FSDP2 CPUOffloadPolicy (and ZeRO-3 offload_param) runs the optimizer step where "
           "the sharded parameters live, on the CPU (offload optimizer,params)";
  if (c.offloads_params() && c.shard != sharding::full) {
    *field = "sharding";
    return "offload params moves the FSDP-sharded parameters to the host (FSDP2 CPUOffloadPolicy, ZeRO-3 offload_param): sharding "
           "must be full";
  }
  if (c.offloads_optimizer() && c.shard == sharding::optimizer) {
    *field = "sharding";
    return "offload optimizer with the distributed optimizer (sharding optimizer) is not modelled by this release";
  }
  if (c.offloads_optimizer() && (c.optim == optimizer_kind::adamw_8bit || c.optim == optimizer_kind::paged_adamw_8bit)) {
    *field = "optimizer";
    return "the bitsandbytes 8-bit optimizers step on the GPU (CUDA kernels only): offload optimizer needs adamw, adafactor, sgd or lion";
  }
  if (c.offloads_activations() && c.ac.mode != ac_mode::full) {
    *field = "activation_checkpointing";
    return "offload activations moves the checkpoints of activation checkpointing to the host: activation_checkpointing must be full "
           "or every-K";
  }
  if (c.pp > 1) {
    *field = "pp";
    return "pipeline parallelism with CPU offload is not modelled by this release (pp must be 1)";
  }
  return nullptr;
}

/// Throws plan_error with the first broken rule of violations(c).
inline void validate(const training_config& c) {
  auto v = violations(c, true);
  if (!v.empty()) throw plan_error(std::move(v.front()));
}

/// Name of an enum value as used on the command line and in JSON.
[[nodiscard]] constexpr const char* to_string(master_weights m) noexcept { return m == master_weights::fp32 ? "fp32" : "bf16"; }
[[nodiscard]] constexpr const char* to_string(sharding s) noexcept {
  switch (s) {
    case sharding::none: return "none";
    case sharding::full: return "full";
    case sharding::hybrid: return "hybrid";
    case sharding::grad_op: return "grad-op";
    case sharding::optimizer: return "optimizer";
  }
  return "none";
}
/// Every sharding mode, in declaration order (parsers, sweeps, the search).
inline constexpr sharding all_shardings[] = {sharding::none, sharding::full, sharding::hybrid, sharding::grad_op, sharding::optimizer};
/// The one parser of a sharding name ("none", "full", "hybrid", "grad-op", "optimizer").
[[nodiscard]] inline std::optional<sharding> parse_sharding(std::string_view s) noexcept {
  for (auto x : all_shardings)
    if (s == to_string(x)) return x;
  return std::nullopt;
}
[[nodiscard]] constexpr const char* to_string(pp_schedule p) noexcept { return p == pp_schedule::interleaved ? "interleaved" : "1f1b"; }
/// The one parser of a pipeline schedule name ("1f1b", "interleaved").
[[nodiscard]] inline std::optional<pp_schedule> parse_pp_schedule(std::string_view s) noexcept {
  if (s == "1f1b") return pp_schedule::one_f_one_b;
  if (s == "interleaved") return pp_schedule::interleaved;
  return std::nullopt;
}
[[nodiscard]] constexpr const char* to_string(optimizer_impl o) noexcept { return o == optimizer_impl::fused ? "fused" : "foreach"; }
[[nodiscard]] constexpr const char* to_string(loss_impl l) noexcept {
  return l == loss_impl::standard ? "standard" : l == loss_impl::chunked ? "chunked" : "liger";
}
/// The one printer of module_kernels: "fused", "transformers".
[[nodiscard]] constexpr const char* to_string(module_kernels k) noexcept { return k == module_kernels::fused ? "fused" : "transformers"; }
/// The one parser of a module_kernels name; nullopt for anything else.
[[nodiscard]] inline std::optional<module_kernels> parse_module_kernels(std::string_view s) noexcept {
  if (s == "fused") return module_kernels::fused;
  if (s == "transformers") return module_kernels::transformers;
  return std::nullopt;
}
[[nodiscard]] constexpr const char* to_string(finetune_mode f) noexcept {
  return f == finetune_mode::full ? "full" : f == finetune_mode::lora ? "lora" : "qlora";
}
[[nodiscard]] constexpr const char* to_string(optimizer_kind o) noexcept {
  switch (o) {
    case optimizer_kind::adamw: return "adamw";
    case optimizer_kind::adamw_8bit: return "adamw-8bit";
    case optimizer_kind::paged_adamw_8bit: return "paged-adamw-8bit";
    case optimizer_kind::adafactor: return "adafactor";
    case optimizer_kind::sgd: return "sgd";
    case optimizer_kind::lion: return "lion";
  }
  return "adamw";
}
/// Every finetune_mode and optimizer_kind, in declaration order (parsers, sweeps, the search).
inline constexpr finetune_mode all_finetune_modes[] = {finetune_mode::full, finetune_mode::lora, finetune_mode::qlora};
inline constexpr optimizer_kind all_optimizers[] = {optimizer_kind::adamw, optimizer_kind::adamw_8bit, optimizer_kind::paged_adamw_8bit,
                                                    optimizer_kind::adafactor, optimizer_kind::sgd, optimizer_kind::lion};
/// The one parser of a finetune mode name ("full", "lora", "qlora").
[[nodiscard]] inline std::optional<finetune_mode> parse_finetune(std::string_view s) noexcept {
  for (auto f : all_finetune_modes)
    if (s == to_string(f)) return f;
  return std::nullopt;
}
/// The one parser of an optimizer name ("adamw", "adamw-8bit", "paged-adamw-8bit", "adafactor", "sgd", "lion").
[[nodiscard]] inline std::optional<optimizer_kind> parse_optimizer(std::string_view s) noexcept {
  for (auto o : all_optimizers)
    if (s == to_string(o)) return o;
  return std::nullopt;
}

}  // namespace bwplan
