// bwplan: GPU memory and throughput planning for LLM training
// SPDX-License-Identifier: Apache-2.0
#pragma once

// The memory model: named terms (bwplan::terms), each a function with its source, and the liveness walk
// (compose_memory) that adds them up at the moments each is alive. @sa docs/methodology.md#memory

#include <bwplan/allocator.hpp>
#include <bwplan/finetune.hpp>
#include <bwplan/hardware.hpp>
#include <bwplan/model.hpp>
#include <bwplan/moe.hpp>
#include <bwplan/pipeline.hpp>
#include <bwplan/precision.hpp>
#include <bwplan/training.hpp>
#include <bwplan/units.hpp>

#include <algorithm>
#include <array>
#include <cstdio>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <optional>

namespace bwplan {

/// Bytes outside the model's tensors that a training process holds on each GPU.
/// Defaults are the values measured on the H200 ground-truth machine (PyTorch 2.11, CUDA 13.0):
/// see `docs/methodology.md#runtime`.
struct runtime_overheads {
  bytes cuda_context = bytes::base(648'871'936);    ///< CUDA context + kernels, outside the caching allocator
  bytes nccl = bytes::base(585'105'408);            ///< NCCL communicator buffers (process group initialised)
  bytes cublas_workspace = bytes::base(69'206'016); ///< cuBLAS/cuBLASLt workspaces + small tensors, inside the allocator (66 MiB)
  double fragmentation = 0.03;                      ///< caching-allocator slack as a share of activation churn (when not replayed)
  /// When to replay the step's allocation sequence through the caching allocator (terms::allocator_replay):
  /// always (estimate), only when the cheap bound is within `replay_band` of capacity, or never. search_plans prices
  /// candidates with `never` and replays (`always`) the replayable ones that would be ranked (replay_ceiling).
  enum class replay_policy { always, near_fit_line, never } replay = replay_policy::always;
  double replay_band = 0.15;  ///< near_fit_line: replay when |device peak / capacity − 1| ≤ this share
  /// A replay may stop once the device peak (peak reserved + context and NCCL) passes this many bytes, or at an
  /// out-of-memory: only the verdict is wanted past it (search_plans sets its headroom limit; estimate replays the
  /// whole step). Peak reserved only grows, so the verdict is the whole replay's; the peaks are then partial.
  double replay_stop_device_peak = std::numeric_limits<double>::infinity();
  alloc::allocator_settings allocator;  ///< `PYTORCH_CUDA_ALLOC_CONF` of the run (budget is set per estimate)
};

/// Where the bytes held at one moment of a step go. Every field is per GPU, after sharding.
struct memory_breakdown {
  bytes parameters;        ///< parameters as the optimizer keeps them (fp32 master or bf16), sharded under FSDP
  bytes optimizer_states;  ///< AdamW exp_avg and exp_avg_sq
  bytes gradients;         ///< gradients held (sharded under FSDP)
  bytes compute_weights;   ///< weight copies: autocast's bf16 cache, FSDP2 all-gathered blocks and root module, low-precision copies (Megatron: te_weight_cache)
  bytes activations;       ///< tensors saved for backward: per-block activations, checkpoints, recompute
  bytes logits;            ///< logits and cross-entropy buffers (fp32 upcast, log-softmax, their gradients)
  bytes transient;         ///< working buffers at that moment: activation gradients, reduce-scatter input, optimizer temporaries
  bytes workspace;         ///< cuBLAS workspaces and small tensors
  bytes ddp_buckets;       ///< DDP gradient buckets (sharding none over more than one GPU)

  /// Sum of all fields.
  [[nodiscard]] constexpr bytes total() const noexcept {
    return parameters + optimizer_states + gradients + compute_weights + activations + logits + transient +
           workspace + ddp_buckets;
  }
};

/// Phase of a training step.
enum class step_phase { forward, backward, optimizer };
[[nodiscard]] constexpr const char* to_string(step_phase p) noexcept {
  return p == step_phase::forward ? "forward" : p == step_phase::backward ? "backward" : "optimizer";
}

/// What the caching allocator's `expandable_segments` setting does to the fit verdict (estimate_memory evaluates the
/// other setting when it could change the verdict).
enum class allocator_setting_verdict {
  unaffected,          ///< both settings give the same verdict
  needs_expandable,    ///< fits with `expandable_segments:True` (as planned) and would not fit without it
  fits_if_expandable,  ///< does not fit as planned and would fit with `expandable_segments:True`
  /// search_plans: keeps the search's headroom with `expandable_segments:True` (as planned) and passes it with the
  /// default segments (a replay stopped at that line: whether they would still fit the GPU is not known)
  needs_expandable_for_headroom,
};

/// Result of estimate_memory: per-GPU bytes, as `torch.cuda` would report them.
struct memory_estimate {
  memory_breakdown at_peak;       ///< breakdown at the peak moment
  memory_breakdown at_forward_peak;    ///< breakdown at the largest moment of the forward pass (total = forward_peak)
  memory_breakdown at_backward_peak;   ///< breakdown at the largest moment of the backward pass (total = backward_peak)
  memory_breakdown at_optimizer_peak;  ///< breakdown at the largest moment of the optimizer step (total = optimizer_peak)
  step_phase peak_phase = step_phase::forward;
  bytes peak_allocated;           ///< `torch.cuda.max_memory_allocated()`
  bytes peak_reserved;            ///< `torch.cuda.max_memory_reserved()` (allocator segments)
  bytes forward_peak;             ///< peak allocated within the forward pass
  bytes backward_peak;            ///< peak allocated within the backward pass
  bytes optimizer_peak;           ///< peak allocated within the optimizer step
  bytes before_forward;           ///< allocated at the start of a steady-state step
  bytes after_forward;            ///< allocated when the forward pass returns
  bytes after_backward;           ///< allocated when backward returns
  bytes non_pytorch;              ///< CUDA context and NCCL, outside the allocator
  bytes capacity;                 ///< bytes CUDA can use on the GPU (nvidia-smi total − driver reserve)
  int pipeline_rank = 0;          ///< pipeline parallelism: the rank whose memory this is (the most loaded; 0 for pp = 1)
  bool fits = false;              ///< peak_reserved + non_pytorch ≤ capacity
  bool replayed = false;          ///< peak_reserved and fits come from the caching-allocator replay (else the cheap bound)
  /// replayed through a stand-in (terms::replay_stand_in): what the replayed step leaves out ("torch.compile"), else
  /// nullptr; peak_reserved is then this plan's peak allocated + the stand-in step's allocator slack
  const char* replay_stand_in = nullptr;
  allocator_setting_verdict allocator_setting = allocator_setting_verdict::unaffected;  ///< see allocator_setting_verdict
  /// CPU offload: host (CPU) bytes one rank keeps, pinned (terms::host_offload::total; 0 without offload). Per node:
  /// host_memory_per_node.
  bytes host_per_gpu;
  /// Paged 8-bit optimizer (PagedAdamW8bit): its uint8 state pair in CUDA managed memory, outside PyTorch's caching
  /// allocator (not in peak_allocated, peak_reserved or the fit test; terms::model_states::paged_states)
  bytes paged_states;
  /// The part of paged_states that cannot stay on the GPU beside the device peak, paged out to the host:
  /// max(0, paged_states − (capacity − device_peak)) (0 when it all fits; CUDA migrates the pages on access)
  bytes paged_on_host;

  /// Device bytes in use at the peak: reserved + context + NCCL.
  [[nodiscard]] constexpr bytes device_peak() const noexcept { return peak_reserved + non_pytorch; }
  /// Share of capacity left free at the peak (negative when it does not fit).
  [[nodiscard]] constexpr double headroom() const noexcept { return 1.0 - device_peak() / capacity; }
  /// Breakdown at the largest moment of phase `p` (allocated bytes; see at_forward_peak and siblings).
  [[nodiscard]] constexpr const memory_breakdown& at_phase_peak(step_phase p) const noexcept {
    return p == step_phase::forward ? at_forward_peak : p == step_phase::backward ? at_backward_peak : at_optimizer_peak;
  }
};

/// The terms of the memory model, one function each. Every `bytes` is per GPU, after tensor, context,
/// expert and data-parallel sharding; per-token inventories are bytes per token of one block.
namespace terms {

// ---------------------------------------------------------------------------------------------------------
// Shape of one step

/// Which blocks recompute in backward and which run their linear layers in a low-precision format.
struct block_layout {
  std::int64_t layers = 0;   ///< L, blocks of the model
  std::int64_t q_first = 0;  ///< first block whose linears run in the compute format (L for bf16)
  std::int64_t q_end = 0;    ///< one past the last such block
  checkpointing ac;          ///< activation checkpointing of the plan

  /// Whether block `i` runs its GEMMs (and saves its linear inputs) in the low-precision format.
  [[nodiscard]] constexpr bool quantized(std::int64_t i) const noexcept { return i >= q_first && i < q_end; }
  /// Whether block `i` is recomputed whole in backward (full or every-K checkpointing).
  [[nodiscard]] constexpr bool checkpointed(std::int64_t i) const noexcept {
    return ac.recomputes_blocks() && i % ac.every == 0;
  }
  /// Blocks recomputed whole among the `layers`.
  [[nodiscard]] constexpr std::int64_t checkpointed_blocks() const noexcept {
    return ac.recomputes_blocks() ? (layers + ac.every - 1) / ac.every : 0;
  }

  /// Blocks of one range per class (see count).
  struct class_counts {
    std::int64_t low_recomputed = 0, low = 0, high_recomputed = 0, high = 0;  ///< quantized / not, checkpointed / not
  };
  /// How many blocks of [a, b) (clamped to [0, layers)) fall in each class: run in the compute format or not
  /// (quantized), recomputed whole or not (checkpointed). Closed form with a few 32-bit divisions: the search sums over
  /// the blocks of every candidate several times, and a division per block (`i % every`) was half of a candidate's time
  /// on the project's AMD EPYC development machine.
  [[nodiscard]] constexpr class_counts count(std::int64_t a, std::int64_t b) const noexcept {
    class_counts r;
    a = std::max<std::int64_t>(a, 0);
    b = std::min(b, layers);
    if (b <= a) return r;
    const std::int64_t qa = std::clamp(q_first, a, b), qb = std::clamp(q_end, qa, b);
    const std::int64_t every = ac.recomputes_blocks() && ac.every > 0 ? ac.every : 0;
    auto below = [every](std::int64_t n) -> std::int64_t {  // blocks in [0, n) with i % every == 0
      if (every == 0 || n <= 0) return 0;
      const auto e = static_cast<std::uint32_t>(every);
      return static_cast<std::int64_t>((static_cast<std::uint32_t>(n) + e - 1) / e);
    };
    const std::int64_t rec = below(b) - below(a), rec_q = below(qb) - below(qa);
    r.low_recomputed = rec_q;
    r.low = (qb - qa) - rec_q;
    r.high_recomputed = rec - rec_q;
    r.high = (b - a) - (qb - qa) - (rec - rec_q);
    return r;
  }
};

/// The dimensions of one training step on one GPU that the memory terms read (the symbols of
/// docs/methodology.md). Tensor parallelism (Megatron-style with sequence parallel and a vocabulary-parallel
/// embedding/head, as torchtitan applies it) divides every weight by tp; context parallelism splits each
/// sequence over cp ranks and sequence parallel the remaining tokens over tp, so each GPU holds T / (tp · cp)
/// tokens of activations; without sequence parallel (Megatron-LM's default, training_config::sequence_parallel) the
/// norms, dropout masks and block inputs are whole-sequence on every tp rank (sp_replicas). Routed experts are divided by ep (MoE only) except in the FSDP-sharded state, where
/// experts are sharded over ep × (world / ep) = world ranks like the rest.
struct memory_shape {
  double P = 0;            ///< parameters stored per GPU before data-parallel sharding (÷ tp; experts ÷ ep without FSDP)
  double Pb = 0;           ///< parameters of one block (÷ tp, experts ÷ ep)
  double block_full = 0;   ///< parameters of one block ÷ tp, experts undivided (the FSDP gradient of one block before ÷ N)
  double lin = 0;          ///< linear-layer weights of one block (÷ tp)
  double head_w = 0;       ///< LM head matrix V·h (÷ tp)
  double root_params = 0;  ///< embedding + LM head + final norm (÷ tp): the FSDP2 root module
  double gemm_weights = 0; ///< every weight that runs as a GEMM, blocks and head (÷ tp): what autocast caches
  double T = 0;            ///< tokens of one micro-batch on this GPU: micro-batch × sequence ÷ (tp · cp)
  double V = 0;            ///< vocabulary
  double h = 0;            ///< hidden size
  double F = 0;            ///< MLP width a token runs through (MoE: top-k experts + shared, averaged over blocks)
  double n = 1;            ///< N, GPUs a model-state shard is spread over (1 without sharding)
  double w = 4;            ///< bytes per stored parameter, gradient and AdamW state: 4 (fp32 master) or 2 (bf16)
  bool fsdp = false;       ///< any FSDP mode (full, hybrid, grad-op)
  bool grad_op = false;    ///< SHARD_GRAD_OP: gathered blocks kept from forward to backward
  bool amp = false;        ///< torch.autocast over fp32 weights (no sharding, fp32 master)
  bool accum = false;      ///< gradient accumulation (more than one micro-batch per step)
  bool ddp = false;        ///< DDP over more than one GPU (sharding none, FSDP mesh > 1)
  bool multi_process = false;  ///< a process group exists (FSDP, or more than one GPU)
  bool fp8_all_gather = false; ///< FSDP2 gathers FP8 weights
  /// Distributed-optimizer (ZeRO-1) layout (zero1_layout): bf16 parameters and the gradient buffer replicated,
  /// fp32 master weights and optimizer states sharded over N = the data-parallel × context-parallel ranks
  bool zero1 = false;
  double Ps = 0;           ///< zero1: parameters whose master weights and states are sharded (experts undivided, ÷ tp)
  bool head = true;        ///< the LM head, its logits and the loss live on this GPU (pipeline: the last rank only)
  bool embedding = true;   ///< the token embedding (and its dropout) runs on this GPU (pipeline: the first rank only)
  /// tp ranks holding the same sequence-sharded activations (activation_inventory::sequence_sharded), the blocks'
  /// inputs and the head's input: tp for tensor parallelism without sequence parallel (Megatron-LM without
  /// `--sequence-parallel`, training_config::sequence_parallel), else 1
  double sp_replicas = 1;
  /// FSDP2 shards the token embedding and the untied LM head as units of their own (training_config::
  /// fsdp_embedding_units): the root keeps only the final norm; the head is gathered while the loss runs and its
  /// gradient reduce-scattered after the loss backward, the embedding gathered in its own backward at the end
  bool emb_units = false;
  double emb_w = 0;        ///< token-embedding matrix V·h (÷ tp): the embedding unit with emb_units
  double in_flight = 1;    ///< pipeline: micro-batches of this rank's activations alive at its peak (pipeline_rank::in_flight)
  master_weights master = master_weights::fp32;
  loss_impl loss = loss_impl::standard;
  optimizer_impl optimizer = optimizer_impl::fused;
  format_traits format;    ///< traits of the compute format on this GPU
  block_layout blocks;     ///< which blocks are checkpointed, which are quantized
  // --- fine-tuning (docs/finetune.md)
  finetune_mode finetune = finetune_mode::full;
  optimizer_kind optim = optimizer_kind::adamw;
  bool adapters = false;   ///< LoRA or QLoRA: the base is frozen
  double Pt = 0;           ///< trained parameters per GPU before data-parallel sharding (P, or the adapters)
  double Pt_block = 0;     ///< trained parameters of one block (Pb, or its adapters)
  double frozen = 0;       ///< bytes of the frozen base per GPU before sharding (bf16, NF4 block linears for QLoRA); 0 for full
  double factored = 0;     ///< Adafactor factored-state elements of the trained parameters per GPU
  double gathered_block = 0;  ///< bytes of one block as FSDP2 gathers it (bf16 2·Pb, fp8 Pb, QLoRA packed NF4 linears)
  double dequant = 0;      ///< QLoRA: bytes of the largest dequantized bf16 weight alive during one linear (0 otherwise)
  /// QLoRA on bitsandbytes under FSDP: the NF4 constants of every block linear, bytes per GPU, held whole on each
  /// rank (not sharded, gathered or offloaded: nf4_constants_sharded); 0 otherwise (they are then part of `frozen`)
  double nf4_replicated = 0;
  double adapter_bytes = 2;  ///< bytes per element of the adapters' weights and inputs: 4 for PEFT's fp32 adapters, 2 under FSDP2 bf16 compute or bf16 master
  double lora_rank = 0;    ///< r
  double lora_dropout = 0; ///< p
  adapter_shape adapter;   ///< the adapters of one block
  // --- training stack and torch.compile (docs/stacks.md)
  training_stack stack = training_stack::hf;
  bool compile = false;        ///< torch.compile as the stack applies it (the blocks; torchtitan and torchtune also the loss)
  bool compiled_loss = false;  ///< the loss runs under torch.compile (torchtitan, torchtune with compile)
  /// transformers' eager `LlamaRMSNorm` in the blocks and the final norm (training_config::modules transformers,
  /// stack hf); compiled blocks recompute the norm's pointwise outputs, as torchtune's (stack_saved_delta)
  bool modules_transformers = false;
  /// the allocator trace's eager norms: modules transformers with eager blocks (alloc::step_shape::eager_norm)
  bool eager_norm = false;
  /// the low-precision blocks' linears are torchao 0.18's eager `Float8Linear` (the hf stack's fp8 and fp8-rowwise
  /// without compile: the reference trainer, apps/train/bwtrain/precision.py): they save the bf16 input
  /// (format_traits::saves_hp_inputs), call no `F.linear` (no autocast weight copy) and cast to float8 in eager ops
  /// (float8_linear_casts; alloc::step_shape::float8)
  bool f8_linear = false;
  /// the low-precision linears are torchao's `Float8Linear`, eager or compiled (the hf stack's fp8 and fp8-rowwise):
  /// compiled or not its forward calls no `F.linear`, so autocast caches no bf16 copy of their weights (compile fuses
  /// the casts, f8_linear's eager cast peaks go, the absence of the copy stays)
  bool f8_module = false;
  /// the low-precision linears are torchao's NVFP4Linear (nvfp4 on the hf and torchtitan stacks; Megatron's
  /// Transformer Engine caches its copies): it calls no `F.linear` (no autocast weight copy) and its forward saves the
  /// transposed FP4 weight for backward (weight_copies::saved_quantized_block)
  bool nvfp4_linear = false;
  /// the low-precision linears are torchao 0.18's MXFP8 linear (the hf stack's mxfp8): its casts' transients per
  /// linear (mx_linear_casts)
  bool mx_linear = false;
  double q_width = 0;   ///< elements of q per token, heads·head_dim (float8_linear_casts)
  double kv_width = 0;  ///< elements of k (and of v) per token, kv_heads·head_dim
  bool megatron = false;       ///< Megatron-LM: bf16 model, fp32 main parameters and main-gradient buffer
  double tp = 1;               ///< tensor-parallel degree
  bool sp_gathered = false;    ///< sequence parallel through DTensor styles (tp > 1, not Megatron): the gathered inputs are saved
  bool loss_parallel = false;  ///< vocabulary-parallel cross-entropy over fp32 DTensor/local buffers (tp > 1, not Megatron)
  bool expandable = false;     ///< `expandable_segments:True`
  // --- CPU offload (training_config::offload, docs/finetune.md#cpu-offload)
  bool off_opt = false;        ///< optimizer states, master weights, gradients and the step on the host
  bool off_params = false;     ///< the FSDP-sharded parameters on the host (FSDP2 CPUOffloadPolicy)
  bool off_act = false;        ///< the activation checkpoints on the host
  // --- optimizer in backward (training_config::optimizer_in_backward, docs/stacks.md#optimizer-in-backward)
  bool in_bwd = false;         ///< each parameter is stepped and its gradient freed as soon as the gradient is complete
  bool tied = false;           ///< the LM head is the embedding matrix (its gradient completes with the embedding's, last)
  double largest_linear = 0;   ///< elements of one block's largest linear weight (÷ tp)
  double largest_param = 0;    ///< elements of the largest parameter: max(largest_linear, V·h ÷ tp)
};

/// Parameters of pipeline rank `st` of `m` from the counts `q`: its decoder blocks (a MoE model's leading dense
/// blocks with their dense MLP), the embedding on the first rank, the final norm and the LM head on the last
/// (a tied head is a copy of its own there, as Megatron-Core's `shared_embedding_or_output_weight`, whose
/// gradients `finalize_model_grads.py` all-reduces between the two stages).
[[nodiscard]] constexpr double pipeline_rank_params(const model_spec& m, const parameter_count& q, const pipeline_rank& st) noexcept {
  const std::int64_t dense_total = leading_dense_blocks(m);
  const double adjust = dense_total > 0 ? static_cast<double>(q.layer_adjust) / static_cast<double>(dense_total) * static_cast<double>(st.dense_blocks) : 0;
  const double head = static_cast<double>(q.lm_head > 0 ? q.lm_head : q.embedding) + static_cast<double>(q.final_norm);
  return static_cast<double>(st.blocks) * static_cast<double>(q.block()) + adjust +
         (st.embedding ? static_cast<double>(q.embedding + q.positions) : 0.0) + (st.head ? head : 0.0);
}

/// The shape of configuration `c` of `m` on `gpu` (see memory_shape). Does not validate `c`. With pipeline
/// parallelism, of pipeline rank `stage` (rank 0 when null): its blocks, its parameters (pipeline_rank_params),
/// the head, logits and loss on the last rank only, and its micro-batches in flight.
[[nodiscard]] inline memory_shape memory_shape_of(const model_spec& m, const training_config& c, const gpu_spec& gpu,
                                                  const pipeline_rank* stage = nullptr) {
  const parameter_count pc_full = count_parameters(m);
  const parameter_count pc = detail::ep_local(pc_full, m, c.ep);  // routed experts / ep (MoE only)
  memory_shape s;
  s.zero1 = zero1_layout(c);
  s.fsdp = c.sharded() && !s.zero1;
  s.grad_op = c.shard == sharding::grad_op;
  s.megatron = c.stack == training_stack::megatron;
  // a frozen bf16 base has no fp32 weights to autocast; Megatron trains a bf16 model (Float16Module), no autocast;
  // the distributed optimizer computes on its replicated bf16 parameters
  s.amp = !s.fsdp && !s.zero1 && c.master == master_weights::fp32 && !c.adapters() && !s.megatron;
  s.off_opt = c.offloads_optimizer();
  s.off_params = c.offloads_params();
  s.off_act = c.offloads_activations();
  if (s.off_opt) s.amp = false;  // the fp32 masters are on the host: the GPU computes on its bf16 working copy (no autocast)
  s.stack = c.stack;
  s.compile = c.compile && !s.megatron;
  s.modules_transformers = c.modules == module_kernels::transformers && c.stack == training_stack::hf;
  // (LayerNorm models: nn.LayerNorm runs ATen's fused native_layer_norm in either setting, no eager decomposition)
  s.eager_norm = s.modules_transformers && !s.compile && !m.layer_norm;
  s.compiled_loss = s.compile && (c.stack == training_stack::torchtitan || c.stack == training_stack::torchtune);
  s.tp = c.tp;
  s.sp_gathered = c.tp > 1 && !s.megatron;
  s.sp_replicas = c.tp > 1 && !c.sequence_parallel ? static_cast<double>(c.tp) : 1.0;
  s.emb_units = c.fsdp_embedding_units && c.sharded() && !zero1_layout(c) && !m.tied_embeddings;
  s.emb_w = static_cast<double>(pc.embedding) / c.tp;
  s.loss_parallel = c.tp > 1 && !s.megatron;
  s.expandable = c.expandable_segments;
  s.in_bwd = c.optimizer_in_backward;
  s.tied = m.tied_embeddings;
  s.accum = c.grad_accum > 1;
  s.ddp = !s.fsdp && !s.zero1 && c.fsdp_mesh() > 1;
  s.multi_process = s.fsdp || c.world_size > 1;
  s.fp8_all_gather = c.fp8_all_gather;
  s.n = c.shard_size();
  s.w = c.master == master_weights::fp32 ? 4 : 2;
  s.master = c.master;
  s.loss = c.loss;
  s.optimizer = c.optimizer;
  const double tpd = c.tp;
  s.P = static_cast<double>(s.fsdp ? pc_full.total() : pc.total()) / tpd;
  s.Pb = static_cast<double>(pc.block()) / tpd;
  s.block_full = static_cast<double>(pc_full.block()) / tpd;  // each tp rank reduce-scatters its own 1/tp slice
  s.lin = static_cast<double>(pc.block_linear) / tpd;
  s.head_w = static_cast<double>(m.vocab * m.hidden) / tpd;
  s.root_params = static_cast<double>(pc.embedding + pc.lm_head + pc.final_norm) / tpd;
  s.gemm_weights = static_cast<double>(pc.gemm_weights()) / tpd;
  s.T = static_cast<double>(c.tokens_per_micro_batch()) / (tpd * c.cp);
  s.V = static_cast<double>(m.vocab);
  s.h = static_cast<double>(m.hidden);
  s.F = detail::mlp_width_per_token(m);
  s.q_width = static_cast<double>(m.q_dim());
  s.kv_width = static_cast<double>(m.kv_dim());
  s.largest_linear = largest_block_linear(m) / tpd;
  s.largest_param = std::max(s.largest_linear, s.head_w);
  s.format = traits(c.format, gpu);
  s.f8_module = c.stack == training_stack::hf && (c.format == compute_format::fp8 || c.format == compute_format::fp8_rowwise);
  s.f8_linear = s.f8_module && !s.compile;
  // (torchtitan's NVFP4 converter applies torchao's NVFP4TrainingConfig too; torchtune has none)
  s.nvfp4_linear = c.format == compute_format::nvfp4 && (c.stack == training_stack::hf || c.stack == training_stack::torchtitan);
  s.mx_linear = c.format == compute_format::mxfp8 && c.stack == training_stack::hf && !s.compile;  // as f8_linear
  // torchao's MXFP8 linear (the weight wrapper's F.linear override → mx_mm, torchao/prototype/moe_training/tensor.py,
  // mxfp8_linear.py @v0.18.0) saves `input_hp` too: the bf16 tensor the block already holds (on autocast's fp32 weights
  // that path does not run, training_config::autocast_fp32_weights: violations refuses it; other stacks keep 2 B)
  s.format.saves_hp_inputs = s.f8_linear || (c.format == compute_format::mxfp8 && !s.megatron && !s.compile && !s.amp);
  const std::int64_t L = m.layers;
  const bf16_blocks keep = c.bf16_kept();
  s.blocks.layers = L;
  s.blocks.ac = c.ac;
  s.blocks.q_first = c.format == compute_format::bf16 ? L : keep.first;
  s.blocks.q_end = c.format == compute_format::bf16 ? L : std::max(s.blocks.q_first, L - keep.last_for(L));
  // fine-tuning
  s.finetune = c.finetune;
  s.optim = c.optim;
  s.adapters = c.adapters();
  s.gathered_block = (s.fp8_all_gather ? 1 : 2) * s.Pb;
  if (!s.adapters) {
    s.Pt = s.P;
    s.Pt_block = s.fsdp ? s.block_full : s.Pb;
    s.factored = c.optim == optimizer_kind::adafactor ? adafactor_full_elements(m) / tpd : 0;  // only Adafactor reads it
  } else {
    s.adapter = adapter_shape_of(m, c.lora, s.fsdp ? 1 : c.ep);  // (FSDP: the whole model's, divided by the shard count below)
    s.Pt = static_cast<double>(L) * s.adapter.params;
    s.Pt_block = s.adapter.params;
    s.factored = static_cast<double>(L) * s.adapter.factored;
    s.lora_rank = c.lora.rank;
    s.lora_dropout = c.lora.dropout;
    // PEFT's fp32 adapters (autocast_adapter_dtype) read fp32 copies of their inputs (_cast_input_dtype); under
    // FSDP2's bf16 compute, and under optimizer offload, whose GPU holds the bf16 working copy of the whole model
    // (DeepSpeed's bf16 engine casts the module; model_state_bytes_in_allocator), they compute in bf16 on the shared
    // inputs (a review found the offload case counted 13.5 GiB of fp32 input copies on Llama-3.1-8B without
    // checkpointing)
    s.adapter_bytes = (c.master == master_weights::fp32 && !s.fsdp && !s.off_opt) ? 4 : 2;
    // every block linear this GPU stores before sharding: the model's under FSDP (s.P counts them all), this expert-parallel
    // rank's experts without it (s.P is pc's); the full count there made `P − block_lin_all` negative (QLoRA on a MoE
    // model with ep > 1 and no sharding: Mixtral-8x7B at ep 8 had a negative device peak)
    const parameter_count& pl = s.fsdp ? pc_full : pc;
    const double block_lin_all = static_cast<double>(pl.block_linear * L + pl.layer_adjust) / tpd;
    if (c.finetune == finetune_mode::qlora) {
      // under FSDP bitsandbytes' constants stay whole on every rank; torchao's are sharded with the codes
      // (nf4_constants_sharded, finetune.hpp). Without sharding both layouts hold the same bytes.
      const bool replicated = s.fsdp && !nf4_constants_sharded(c.stack);
      const double sharded_nf4 = replicated ? nf4_code_bytes_per_param : nf4_bytes_per_param;
      s.frozen = sharded_nf4 * block_lin_all + 2 * (s.P - block_lin_all);
      s.nf4_replicated = replicated ? nf4_constant_bytes_per_param * block_lin_all : 0;
      s.gathered_block = sharded_nf4 * s.lin + 2 * (s.Pb - s.lin);
      s.dequant = 2 * largest_block_linear(m);
    } else {
      s.frozen = 2 * s.P;
    }
  }
  if (s.zero1) s.Ps = static_cast<double>(pc_full.total()) / tpd;
  if (c.pp > 1) {  // one pipeline rank (full fine-tunes only: violations)
    const pipeline_rank st = stage ? *stage : pipeline_rank_of(c, L, leading_dense_blocks(m), 0);
    const double whole = static_cast<double>(pc.total());
    s.P = pipeline_rank_params(m, s.fsdp ? pc_full : pc, st) / tpd;
    if (s.zero1) s.Ps = pipeline_rank_params(m, pc_full, st) / tpd;
    s.head = st.head;
    s.embedding = st.embedding;
    s.head_w = st.head ? s.head_w : 0;
    s.V = st.head ? s.V : 0;
    s.root_params = ((st.embedding ? static_cast<double>(pc.embedding + pc.positions) : 0.0) +
                     (st.head ? static_cast<double>((pc.lm_head > 0 ? pc.lm_head : pc.embedding) + pc.final_norm) : 0.0)) / tpd;
    const std::int64_t dense_total = leading_dense_blocks(m);
    const double lin_adjust = dense_total > 0 ? static_cast<double>(pc.layer_adjust) / static_cast<double>(dense_total) * static_cast<double>(st.dense_blocks) : 0;
    s.gemm_weights = (static_cast<double>(st.blocks * pc.block_linear) + lin_adjust + (st.head ? static_cast<double>(m.vocab * m.hidden) : 0.0)) / tpd;
    s.in_flight = st.in_flight;
    // blocks of this rank; the quantized ones where its blocks meet the model's quantized range (one range for
    // 1F1B; for several chunks, the rank's share of them, at its end)
    const std::int64_t qf = s.blocks.q_first, qe = s.blocks.q_end, n = st.blocks;
    s.blocks.layers = n;
    if (c.virtual_stages() <= 1) {
      s.blocks.q_first = std::clamp<std::int64_t>(qf - st.first_block, 0, n);
      s.blocks.q_end = std::clamp<std::int64_t>(qe - st.first_block, s.blocks.q_first, n);
    } else {
      const std::int64_t nq = L > 0 ? (std::max<std::int64_t>(0, qe - qf) * n + L / 2) / L : 0;
      s.blocks.q_first = n - nq;
      s.blocks.q_end = n;
    }
    s.Pt = s.zero1 ? s.Ps : s.P;
    s.factored = whole > 0 ? s.factored * (s.P * tpd / whole) : 0;
  } else if (s.zero1) {
    s.Pt = s.Ps;
  }
  return s;
}

// ---------------------------------------------------------------------------------------------------------
// Model states

/// Parameters, AdamW states and gradients: the state a step keeps, and the gradients backward produces.
struct model_states {
  bytes parameters;             ///< w·P/N: the optimizer's copy of the parameters
  bytes optimizer_states;       ///< 2·w·P/N: AdamW `exp_avg` and `exp_avg_sq`
  bytes gradients;              ///< w·P/N: every gradient, as backward leaves them (sharded under FSDP)
  bytes accumulated_gradients;  ///< w·P/N kept across micro-batches when accumulating, else 0
  bytes block_gradient;         ///< what one block's backward adds to the held gradients (0 when accumulating)
  bytes head_gradient;          ///< LM head gradient once the standard loss's backward ran
  /// PagedAdamW8bit: the uint8 state pair `2·Pt/N` in CUDA managed memory (outside the caching allocator; the fp32
  /// absmax blocks stay in `optimizer_states`)
  bytes paged_states;
};

/// Model states of one step (AdamW, step ≥ 2, gradients set to None after the optimizer step).
///
/// `w·P/N` parameters, `2·w·P/N` AdamW states, `w·P/N` gradients (w = 4 with fp32 master weights, 2 for pure
/// bf16; N = shard size). Gradients are kept between micro-batches when accumulating. During backward each
/// block adds its gradient: under FSDP2 the reduce-scattered shard `w·P_block/(tp·N)` (experts undivided),
/// without sharding `w·P_block`; the LM head's gradient appears first (FSDP2: the bf16 unsharded gradient of the
/// root, reduce-scattered at the end of backward). Sources: PyTorch `torch.optim.AdamW` (two states per
/// parameter, `set_to_none`), FSDP2 `fully_shard` docs (sharded parameters, gradients and states;
/// `MixedPrecisionPolicy` with fp32 reduce), ZeRO (Rajbhandari et al. 2020, arXiv:1910.02054).
///
/// Fine-tuning (LoRA/QLoRA, docs/finetune.md): the frozen base keeps no gradient and no optimizer state (PEFT
/// `_mark_only_adapters_as_trainable` sets `requires_grad=False`, `src/peft/tuners/tuners_utils.py`); parameters are
/// the frozen base (bf16, or NF4 block linears for QLoRA) plus the adapters in the master dtype, `(frozen +
/// w·Pt)/N`; gradients and optimizer states cover the adapters `Pt` only; the LM head is frozen (no head
/// gradient). Other optimizers than AdamW keep optimizer_state_bytes (8-bit, Adafactor, SGD, Lion). QLoRA on
/// bitsandbytes under FSDP: only the 4-bit codes `0.5·P_lin` are sharded (and offloaded); the constants
/// `(1/64 + 4/(64·256))·P_lin` are held whole on every GPU (memory_shape::nf4_replicated, bytes per GPU:
/// bitsandbytes/nn/modules.py L381-395, L487-501 @95f9af30; see nf4_constants_sharded); torchtune's torchao NF4
/// shards both.
///
/// Megatron-LM (stack megatron, `--bf16`, sharding none): the optimizer's fp32 main parameters `4·P`
/// (`Float16OptimizerWithFloat16Params`, megatron/core/optimizer/optimizer.py) and AdamW states `8·P`; the gradients
/// live in one fp32 main-gradient buffer allocated when the model is wrapped and zeroed, never freed, between steps
/// (`grad_data = torch.zeros(numel, dtype=grad_dtype)`, megatron/core/distributed/param_and_grad_buffer.py L1190-1195;
/// `grad_dtype` fp32 with `accumulate_allreduce_grads_in_fp32`, L924 and megatron/training/arguments.py L1204-1217
/// @d98e8a6): `4·P` at every moment of the step, nothing added per block (the bf16 model weights are
/// weight_copies::bf16_model). Megatron with its distributed optimizer (sharding optimizer) is the zero1 layout below.
///
/// Distributed optimizer (memory_shape::zero1): `4·P/N` fp32 master shard (bf16 masters: the replicated bf16
/// parameters `2·P`), `2·w·P/N` AdamW states, and the gradient buffer `w·P` replicated and alive all step
/// (Megatron-Core `_ParamAndGradBuffer`; the replicated bf16 parameters are weight_copies::zero1_params). Source:
/// Megatron-Core `megatron/core/optimizer/distrib_optimizer.py` (`shard_fp32_from_float16_groups`), its
/// docs/user-guide/features/dist_optimizer.md (6 + 12/d bytes per parameter for bf16 parameters, fp32 gradients).
///
/// CPU offload of the optimizer (memory_shape::off_opt; docs/finetune.md#cpu-offload): the master weights, the
/// optimizer states and the master-dtype gradients leave HBM (host_offload counts them on the host); the GPU keeps
/// a bf16 working copy of the parameters, `2·P/N` (LoRA: `(frozen + 2·Pt)/N`), sharded under FSDP. DeepSpeed
/// ZeRO-Offload keeps the 16-bit partitions on the GPU and clones the fp32 master partition to pinned host memory
/// (deepspeed/runtime/zero/stage_1_and_2.py L489-507 @edaa722), copies each gradient to the host as soon as it is
/// reduced (`async_inplace_copy_grad_to_fp32_buffer_from_gpu`, L1590-1605, which then clears the GPU gradient) and
/// copies the updated 16-bit partition back after the CPU step (L2318-2341); its own estimator puts `2·Ψ` on the
/// GPU (`estimate_zero2_model_states_mem_needs`, L3081-3098). So no gradient is held on the GPU across blocks or
/// micro-batches (the LM head's bf16 gradient until it is copied stays); a block's gradient is transient_buffers'.
/// With parameter offload as well (memory_shape::off_params, FSDP2 `CPUOffloadPolicy`,
/// torch/distributed/fsdp/_fully_shard/_fsdp_api.py class CPUOffloadPolicy @01d5c2cc: "Sharded parameters are
/// copied host-to-device before all-gather ... Sharded gradients are copied device-to-host in backward, and the
/// optimizer step runs on CPU") the sharded parameters leave HBM too: only the gathered units (weight_copies) and
/// the staging of the unit in flight (transient_buffers::offload_staging) remain.
///
/// Optimizer in backward (memory_shape::in_bwd; torchtune `optimizer_in_bwd`): torchtune builds one optimizer per
/// parameter and steps it from the parameter's `register_post_accumulate_grad_hook`, then `zero_grad()` sets the
/// gradient to None (torchtune/modules/optim.py L15-60 `OptimizerInBackward` @bd2a0fc7;
/// recipes/full_finetune_single_device.py L151-160, L436-442: no gradient accumulation, no clipping). No gradient is
/// held across blocks or after backward: `gradients` and `block_gradient` are 0 and a parameter's gradient lives only
/// while it is stepped (transient_buffers). The autograd engine sums the gradients a parameter gets from several uses
/// before its AccumulateGrad node runs once, so a tied LM head's gradient `g·V·h` is held from the loss backward to
/// the embedding's backward at the end (`head_gradient`); an untied head is stepped right after the loss backward.
[[nodiscard]] inline model_states model_state_bytes_in_allocator(const memory_shape& s) noexcept {
  const double w = s.w, g = s.w, P = s.P, n = s.n;
  model_states r;
  if (s.off_opt && !s.megatron && !s.zero1) {  // (violations: no offload with Megatron or the distributed optimizer)
    const double working = s.adapters ? s.frozen + 2 * s.Pt : 2 * P;
    r.parameters = bytes::base((s.off_params ? 0.0 : working / n) + s.nf4_replicated);  // (bitsandbytes' constants stay)
    // bf16 until it is reduced and copied to the host (the root's, at the end of backward; a head unit's, right after
    // the loss backward: transient_buffers::head_reduce_scatter)
    r.head_gradient = bytes::base(s.adapters || s.emb_units ? 0.0 : 2 * s.head_w);
    return r;
  }
  if (s.megatron && !s.zero1) {
    r.parameters = bytes::base(4 * P / n);
    r.optimizer_states = bytes::base(optimizer_state_bytes(s.optim, 4, P, s.factored) / n);
    r.gradients = bytes::base(4 * P / n);
    r.accumulated_gradients = r.gradients;  // the main-gradient buffer: permanent
    return r;
  }
  if (s.adapters) {
    r.parameters = bytes::base((s.frozen + w * s.Pt) / n + s.nf4_replicated);
    r.optimizer_states = bytes::base(optimizer_state_bytes(s.optim, w, s.Pt, s.factored) / n);
    r.gradients = bytes::base(g * s.Pt / n);
    if (s.accum) r.accumulated_gradients = r.gradients;
    r.block_gradient = bytes::base(s.accum ? 0 : g * s.Pt_block / (s.fsdp ? n : 1));
    return r;
  }
  if (s.zero1) {
    // distributed optimizer: fp32 master shard (or the replicated bf16 parameters with bf16 masters), sharded
    // states, the replicated gradient buffer in the master dtype (Megatron-Core's contiguous main-grad buffer,
    // fp32 for bf16 training: megatron/training/arguments.py "bfloat16 requires gradient accumulation and
    // all-reduce to be done in fp32"), alive all step; 6 + 12/N bytes per parameter with AdamW and fp32 masters
    // (docs/user-guide/features/dist_optimizer.md)
    r.parameters = bytes::base(s.master == master_weights::fp32 ? 4 * s.Ps / n : 2 * P);
    r.optimizer_states = bytes::base(optimizer_state_bytes(s.optim, w, s.Ps, s.factored) / n);
    r.gradients = bytes::base(g * P);
    r.accumulated_gradients = r.gradients;
    return r;
  }
  r.parameters = bytes::base(w * P / n);
  r.optimizer_states = bytes::base(optimizer_state_bytes(s.optim, w, P, s.factored) / n);
  if (s.in_bwd) {  // each gradient is stepped and freed when complete; a tied head's waits for the embedding's
    r.head_gradient = bytes::base(s.tied ? g * s.head_w : 0.0);
    return r;
  }
  r.gradients = bytes::base(g * P / n);
  if (s.accum) r.accumulated_gradients = bytes::base(g * P / n);
  r.block_gradient = bytes::base(s.accum ? 0 : (s.fsdp ? g * s.block_full / n : g * s.Pb));
  // FSDP: the root's unsharded bf16 head gradient waits for the root's reduce-scatter at the end of backward; a head
  // unit of its own reduce-scatters it right after the loss backward (transient_buffers::head_reduce_scatter)
  r.head_gradient = bytes::base(s.fsdp ? (s.emb_units ? 0.0 : 2 * s.head_w) : (s.accum ? 0 : g * s.head_w));
  return r;
}

/// Model states of one step (model_state_bytes_in_allocator), with a paged optimizer's states moved out of the
/// caching allocator: PagedAdamW8bit allocates each state of a parameter of at least 10^5 elements with
/// `F.get_paged` (bitsandbytes/optim/optimizer.py L374-390 `get_state_buffer` @95f9af30), a `cudaMallocManaged(...,
/// cudaMemAttachHost)` buffer (bitsandbytes/functional.py L91-99, csrc/pythonInterface.cpp L557-563) wrapped with
/// `torch.frombuffer`: PyTorch's allocator and its statistics never see it, and the CUDA driver migrates its pages
/// between host and GPU on access, evicting them when device allocations need the memory. So the uint8 pair `2·Pt/N`
/// is `paged_states` and only the fp32 absmax blocks (`2·4/256` B per parameter) stay in `optimizer_states`; the states
/// of smaller tensors (norm weights) are left in the paged figure (under 0.01 % of a Llama model).
[[nodiscard]] inline model_states model_state_bytes(const memory_shape& s) noexcept {
  model_states r = model_state_bytes_in_allocator(s);
  if (s.optim == optimizer_kind::paged_adamw_8bit && r.optimizer_states.raw() > 0) {
    const double paged = r.optimizer_states.raw() * (2.0 / bnb_8bit_pair_bytes);
    r.paged_states = bytes::base(paged);
    r.optimizer_states = bytes::base(r.optimizer_states.raw() - paged);
  }
  return r;
}

/// Host (CPU) bytes one rank keeps under CPU offload (memory_shape::off_opt, off_params, off_act), pinned.
struct host_offload {
  bytes master_weights;    ///< the optimizer's copy of the trained parameters, w·Pt/N (fp32 masters; bf16 with bf16 masters)
  bytes frozen;            ///< LoRA/QLoRA with parameter offload: the frozen base's shard, frozen/N
  bytes optimizer_states;  ///< the optimizer's states of the trained parameters, /N
  bytes gradients;         ///< the master-dtype gradients, w·Pt/N
  bytes staging;           ///< ZeRO-Offload's pinned 16-bit copy of the partition for the host-to-device copy, 2·Pt/N
  bytes activations;       ///< offloaded checkpoints: each recomputed block's input (× micro-batches in flight)
  /// Sum of the parts.
  [[nodiscard]] constexpr bytes total() const noexcept {
    return master_weights + frozen + optimizer_states + gradients + staging + activations;
  }
};

/// Host bytes of CPU offload for one rank, `checkpoints` the bytes of the checkpoints it keeps on the GPU without
/// activation offload (saved_activations: recomputed blocks × checkpoint).
///
/// Optimizer offload: the master weights `w·Pt/N`, the optimizer states (optimizer_state_bytes) and the gradients
/// in the master dtype `w·Pt/N`, all pinned: DeepSpeed clones the fp32 master partition to pinned memory and gives it
/// a pinned fp32 gradient (deepspeed/runtime/zero/stage_1_and_2.py L489-507 @edaa722), DeepSpeedCPUAdam keeps its
/// fp32 `exp_avg`/`exp_avg_sq` beside them (deepspeed/ops/adam/cpu_adam.py), and ZeRO-Offload adds a pinned 16-bit
/// copy of the partition for the copy back, `2·Pt/N` (`param_buffer_of_bit16_for_cpu_offload_groups`, L497-505);
/// FSDP2 `CPUOffloadPolicy(pin_memory=True)` pins the sharded parameters and gradients themselves (no extra
/// buffer). Parameter offload of LoRA/QLoRA adds the frozen base's shard. DeepSpeed's estimator multiplies its
/// host figure by `additional_buffer_factor=1.5` (L3081-3098) for allocator and loading slack, which is not added.
/// Activation offload: the checkpoints (torch.autograd.graph.save_on_cpu packs each saved tensor into pinned host
/// memory; torchtune OffloadActivations, torchtune/training/_activation_offloading.py).
[[nodiscard]] constexpr host_offload host_offload_bytes(const memory_shape& s, double checkpoints) noexcept {
  host_offload r;
  const double n = s.n;
  if (s.off_opt) {
    r.master_weights = bytes::base(s.w * s.Pt / n);
    r.frozen = bytes::base(s.adapters && s.off_params ? s.frozen / n : 0.0);
    r.optimizer_states = bytes::base(optimizer_state_bytes(s.optim, s.w, s.Pt, s.factored) / n);
    r.gradients = bytes::base(s.w * s.Pt / n);
    r.staging = bytes::base(s.off_params ? 0.0 : 2 * s.Pt / n);
  }
  if (s.off_act) r.activations = bytes::base(checkpoints * s.in_flight);
  return r;
}

// ---------------------------------------------------------------------------------------------------------
// Saved activations

/// Per-token byte counts of one block for one configuration (see activation_bytes_per_token).
struct activation_inventory {
  double block_saved;   ///< bytes autograd saves for one block without checkpointing
  double selective_op;  ///< bytes kept under torchtitan per-op selective checkpointing
  double checkpoint;    ///< bytes saved for one fully checkpointed block (its input)
  double final_saved;   ///< final norm input + LM head input
  double grad_temp;     ///< activation gradients alive while one block runs backward
  double lse;           ///< attention log-sum-exp (what Megatron's selective recompute drops with FlashAttention)
  /// Of block_saved, what runs sequence-sharded under sequence parallel (Megatron's `--sequence-parallel`): the
  /// norms' inputs, outputs and statistics and the residual dropout masks, Korthikanti et al. 2022's `10·s·b·h` of
  /// `34·s·b·h` (arXiv:2205.05198 §4.2.2, Eq. 2 against Eq. 4). Without sequence parallel every tp rank holds these
  /// for the whole sequence, tp times the T-token share of them this inventory counts.
  double sequence_sharded;
};

/// Bytes saved per block, per token. `amp` means fp32 weights under torch.autocast: the residual stream
/// is fp32 and each linear saves its own bf16 cast of its input (3 for Q/K/V, 2 for gate/up). With a
/// low-precision format `t` (`quantized`), linear layers save their inputs in `t.saved_input_bytes` per
/// element instead of bf16 (Q/K/V input, attention output into O, gate/up input, SwiGLU product into down), unless
/// `t.saves_hp_inputs` (torchao's eager Float8Linear saves the bf16 input, under autocast its own bf16 cast: the
/// bf16 block's inventory). A q/k norm (Qwen3) saves its input's fp32 copy and its bf16 normalized tensor, 6 B per element of q and k
/// (Hugging Face `Qwen3RMSNorm.forward`, `Qwen3Attention.forward`; /work/shared/reference/stacks.md §1).
/// A residual branch whose output goes through dropout (model_spec::residual_dropouts: GPT-2, Starcoder2, Falcon with
/// p > 0; Megatron-LM's `hidden_dropout`) saves its bool mask, 1 B per element of h: `F.dropout` in training runs
/// `native_dropout`, whose backward reads the mask it returned (PyTorch aten/src/ATen/native/Dropout.cpp
/// `dropout` → `native_dropout` for 0 < p < 1, derivatives.yaml `native_dropout_backward(grad, result1, scale)`;
/// Megatron's `bias_dropout_add_fused_train`, megatron/core/fusions/fused_bias_dropout.py @d98e8a6, calls
/// `F.dropout` under `torch.compile`, which saves the same mask). Attention-probability dropout runs inside the
/// FlashAttention / cuDNN kernel from its RNG state and saves no mask.
///
/// Sources: PyTorch autograd saved-tensor semantics (what each op's backward keeps), Korthikanti et al. 2022
/// (arXiv:2205.05198) for the per-block inventory, adapted to RMSNorm, SwiGLU, GQA, FlashAttention/SDPA (no s²
/// term) and no dropout; torchtitan `_op_sac_save_list` for per-op SAC; Transformer Engine / torchao for the
/// saved low-precision inputs; calibrated against `h200-calibration.jsonl`.
[[nodiscard]] constexpr activation_inventory activation_bytes_per_token(const model_spec& m, bool amp,
                                                                        const format_traits& t = {},
                                                                        bool quantized = false) noexcept {
  const double h = static_cast<double>(m.hidden), q = static_cast<double>(m.q_dim());
  const double kv = static_cast<double>(m.kv_dim()), f = detail::mlp_width_per_token(m);
  const double a = static_cast<double>(m.heads);
  const double rs = amp ? 4 : 2;  // residual stream element size
  activation_inventory r{};
  // two norms: input (residual dtype) and, for bf16, the normalized output shared by the next linears
  double norms = amp ? 2 * (4 * h) + (3 + 2) * 2 * h  // fp32 inputs + per-linear bf16 casts
                     : 2 * (2 * h + 2 * h);
  double attn = 2 * q + 2 * 2 * kv + 2 * q + 4 * a;  // q, k, v after RoPE, output, fp32 log-sum-exp
  // q/k RMSNorm (Qwen3): the fp32 copy of its input (pow and mul share it), the bf16 normalized tensor the
  // weight multiplies and the fp32 rstd of each head's vector; under autocast its fp32 weight promotes the return to
  // fp32, so RoPE runs in fp32 and saves only cos/sin, and SDPA saves its own bf16 casts of q and k (counted above).
  // Same bytes in pure bf16. (The step trace follows these ops one by one: alloc::step_shape::qk_norm.)
  if (m.qk_norm) attn += (4 + 2) * (q + kv) + 4 * (a + static_cast<double>(m.kv_heads));
  double mlp = m.gated_mlp ? 4 * 2 * f : 2 * 2 * f;  // gate, act(gate), up, product (bf16)
  if (quantized && !t.saves_hp_inputs) {  // (inputs saved in bf16: the bf16 block's inventory)
    const double s = t.saved_input_bytes;
    if (amp) norms += -(3 + 2) * 2 * h + s * 5 * h;  // each linear saves its quantized input
    else norms += -2 * 2 * h + s * 2 * h;            // shared norm outputs → one quantized copy each
    attn += s * q;                                   // O-projection input (SDPA keeps its bf16 output too)
    mlp += -2 * f + s * f;                           // down-projection input
  }
  const double masks = static_cast<double>(m.residual_dropouts) * h;  // bool dropout masks of the residual branches
  r.block_saved = norms + attn + mlp + 8 + masks + detail::moe_mla_saved_per_token(m);  // + fp32 rstd of both norms
  r.sequence_sharded = norms + 8 + masks;
  r.checkpoint = rs * h;
  r.lse = 4 * a;
  // per-op SAC: block input, attention output + LSE, and every other matmul output (q, v, gate, down)
  r.selective_op = rs * h + 2 * q + 4 * a + 8;
  if (!quantized || t.sac_saves_gemm_outputs) r.selective_op += 2 * q + 2 * kv + 2 * f + 2 * h;
  r.final_saved = rs * h + 2 * h;
  r.grad_temp = 4 * h + 4 * f;
  return r;
}

/// Change of the bytes one block saves per token when its base is frozen and LoRA adapts `s.adapter`
/// (added to activation_bytes_per_token's `block_saved`; bf16 residual stream).
///
/// A frozen linear computes no weight gradient, so autograd does not save its input (a saved input of `mm` is
/// guarded by `should_compute_output` of the weight: PyTorch `tools/autograd/gen_variable_type.py`,
/// `derivatives.yaml`): the two norms' outputs `2·2h` and the down-projection input `2F` are dropped; the rest
/// (norm inputs, q/k/v, attention output and LSE, gate, act(gate), up) is still needed for the input gradient.
/// The adapters save, per adapted linear (PEFT `src/peft/tuners/lora/layer.py` `Linear.forward`:
/// `lora_B(lora_A(dropout(x))) * scaling`): `lora_A`'s input — shared bf16 storage when the adapters compute in
/// bf16 without dropout (one `2h` for q/k/v, one for gate/up, the attention output already saved for o, `2F`
/// for down), else its own copy of `ab·d_in` (PEFT casts x to the fp32 adapter dtype, `_cast_input_dtype`) —
/// plus with dropout p > 0 the bool mask `d_in` (`native_dropout`); and `lora_B`'s input, the LoRA intermediate
/// x·A, `ab·r` per adapted linear.
[[nodiscard]] constexpr double adapter_saved_delta(const model_spec& m, const memory_shape& s) noexcept {
  if (!s.adapters) return 0;
  const adapter_shape& a = s.adapter;
  const double h = s.h, f = detail::mlp_width_per_token(m), ab = s.adapter_bytes;
  double d = -(2 * 2 * h + 2 * f);
  if (ab > 2 || s.lora_dropout > 0) {
    d += (ab + (s.lora_dropout > 0 ? 1 : 0)) * a.in_sum;
  } else {
    d += (a.qkv_input ? 2 * h : 0) + (a.gate_up_input ? 2 * h : 0) + (a.down ? 2 * f : 0);
  }
  d += a.modules_per_token * ab * s.lora_rank;  // (MoE: each of a token's k experts keeps its own x·A)
  return d;
}

/// Activation-gradient bytes per token that PEFT's fp32 adapters (memory_shape::adapter_bytes 4) add to the block
/// running backward (activation_inventory::grad_temp), estimated, not traced. `Linear.forward` adds the fp32
/// `lora_B(lora_A(dropout(x))) * scaling` to the bf16 base output (type promotion: an fp32 sum) and casts the sum
/// back (`result.to(torch_result_dtype)`; PEFT `src/peft/tuners/lora/layer.py`), so an adapted linear's backward runs
/// in fp32: the cast's backward makes the fp32 output gradient and the scaling's backward a second one (`4·d_out`
/// each, both alive into `lora_B`'s backward), then `lora_A`'s fp32 input gradient and its cast back to the input's
/// dtype (`4·d_in + 2·d_in`). The widest adapted linear sets it, `max(8·d_out, 6·d_in)` over the adapted linears
/// (adapter_shape::widest_out, widest_in): gate/up `8·F`, q `8·a·d`, k/v only `8·g·d` against their `6·h` input
/// side (a review: the q width was charged when only k and v were adapted), down `6·F`. 0 for bf16 adapters (their
/// gradients are as wide as the base's, already in grad_temp) and for a full fine-tune.
[[nodiscard]] constexpr double adapter_grad_temp_delta(const model_spec&, const memory_shape& s) noexcept {
  if (!s.adapters || s.adapter_bytes <= 2) return 0;
  return std::max(8 * s.adapter.widest_out, 6 * s.adapter.widest_in);
}

/// Per-token change of what one block, the final norm and LM head input, and the backward's activation gradients
/// hold under the plan's training stack, tensor parallelism and torch.compile, relative to the hf inventory of
/// activation_bytes_per_token (docs/stacks.md).
struct stack_activation_delta {
  double block = 0;        ///< added to block_saved (what a non-checkpointed block keeps; a recompute rebuilds it)
  double final_saved = 0;  ///< added to final_saved (final norm input + LM head input)
  double grad_temp = 0;    ///< added to grad_temp (activation gradients of the block running backward)
};

/// The stack's terms of the saved activations, per token (T per GPU), for a block whose linears run in bf16 or,
/// `quantized`, in the compute format. Each term cites the file it comes from.
///
/// - **torchtune module code** (pytorch/torchtune @bd2a0fc7): `RMSNorm.forward` upcasts its input, `x_fp32 =
///   x.float()`, which `pow` and `mul` save, and `x_normed * self.scale` saves the bf16 `x_normed` when the scale
///   trains (torchtune/modules/rms_norm.py L28-41): each norm keeps a 4-byte copy where the hf inventory keeps the
///   2-byte input (`+2h`) and, in a full fine-tune, the normalized tensor (`+2h`; the final norm too) — the op chain
///   of transformers' `LlamaRMSNorm` below; `MultiHeadAttention`
///   expands K and V to the query heads before SDPA, `k.unsqueeze(2).expand(...).flatten(1, 2)`, a copy SDPA saves
///   (torchtune/modules/attention.py L289-290), `+2·2·(q − kv)`, and hands the o-projection a contiguous copy of the
///   attention output, `output.transpose(1, 2).contiguous()` (L302), `+2q`.
/// - **Megatron-LM fused SwiGLU** (NVIDIA/Megatron-LM @d98e8a6): with `--bias-swiglu-fusion` (the default,
///   megatron/training/arguments.py L2895-2898, argument_utils.py L317) `SwiGLUFunction` saves only its input, the
///   fc1 output, and recomputes the activation in backward (megatron/core/fusions/fused_bias_swiglu.py L216-235):
///   act(gate) is not kept, `−2F`.
/// - **Sequence parallel through DTensor styles** (tp > 1; the reference trainer apps/train/bwtrain/parallel.py
///   `apply_tp`, torchtitan torchtitan/parallelisms/parallelize_llama.py L174-191 @9dec370 and
///   models/common/decoder_sharding.py @b5bcd76, torchtune torchtune/models/llama3/_parallelism.py): the norms run
///   sequence-sharded (`SequenceParallel`), and `PrepareModuleInput(input_layouts=Shard(1),
///   desired_input_layouts=Replicate())` all-gathers the inputs of attention and of the MLP to the full sequence
///   (`DTensor.redistribute` in `_prepare_input_arg`, torch/distributed/tensor/parallel/style.py): the column-parallel
///   linears save the gathered tensor, tp times the sharded normalized output the inventory counts, `+n·b·h·(tp − 1)`
///   (n = 2 shared inputs, or 5 autocast casts; b = 2, or the format's saved-input bytes); the LM head
///   (`ColwiseParallel(input_layouts=Shard(1))`) saves its gathered input, `+2h·(tp − 1)`; and the gradient of a
///   gathered input is full length until its reduce-scatter, `+2h·(tp − 1)` in backward. Megatron's sequence parallel
///   saves the sharded input and gathers it again in backward (Korthikanti et al. 2022, arXiv:2205.05198 §4.2.2), so
///   Megatron adds nothing.
/// - **torch.compile of the blocks** (hf, torchtitan, torchtune with compile): Inductor's min-cut partitioner
///   (torch/_functorch/partitioners.py `min_cut_rematerialization_partition`) recomputes in backward the pointwise
///   outputs that only fusible backward ops read and saves those a matmul or attention backward reads
///   (`is_materialized_backwards`, `should_ban_recomputation`); with `torch._functorch.config.cse` identical casts
///   become one. So: an eager norm's fp32 upcast and normalized copy are recomputed (torchtune, transformers' modules: no norm delta); act(gate) is
///   recomputed from the saved gate (`−2F`); the three autocast casts of the Q/K/V input and the two of the
///   gate/up input become one each (`−3·2h`, bf16 blocks). The normalized inputs, q, k, v and the attention
///   output feed matmuls or SDPA's backward and stay. Under per-op SAC the policy decides what is saved
///   (`selective_op` unchanged); whole-block checkpoints keep their input.
/// - **transformers' modules** (`--modules transformers`, eager blocks; huggingface/transformers
///   src/transformers/models/llama/modeling_llama.py `LlamaRMSNorm.forward`, the same formula in Qwen2, Qwen3 and
///   Mistral): `x.to(float32)`, `pow(2)`, `mean`, `x * rsqrt(variance + eps)`, `.to(input_dtype)`, `weight * …`. Where
///   `F.rms_norm` saves its input and the fp32 rstd, autograd here saves the fp32 input (`pow` and `mul`; the
///   residual itself under autocast, a 4-byte copy of a bf16 residual, which is then not saved by the norm), the rstd
///   and, when the weight trains, the normalized tensor the weight's `mul` reads (4 B under autocast, 2 B in bf16):
///   `+4h` per norm either way (`+2h` with frozen norms: LoRA, QLoRA; `+6h` in bf16 for Gemma's `GemmaRMSNorm`, which
///   multiplies by `1 + weight` in fp32), the final norm too, sequence-sharded under tensor parallelism (÷ tp). Measured: the ground truth's `impl=hf`
///   rows (`LlamaForCausalLM`, llama3.2-1b, 4 × 4096 without checkpointing: 71.51 GiB peak allocated against the
///   harness decoder's 67.40; 16 × 4096 with full checkpointing 117.56 against 117.06), which this term gives to
///   within 0.01 GiB.
[[nodiscard]] constexpr stack_activation_delta stack_saved_delta(const model_spec& m, const memory_shape& s,
                                                                 bool quantized) noexcept {
  stack_activation_delta d;
  const double h = s.h, f = detail::mlp_width_per_token(m);
  const double q = static_cast<double>(m.q_dim()), kv = static_cast<double>(m.kv_dim());
  const double norms = static_cast<double>(m.norms_per_block);
  if (s.stack == training_stack::torchtune) d.block += 2 * 2 * (q - kv) + 2 * q;
  if (s.megatron && m.gated_mlp) d.block -= 2 * f;
  // (only RMSNorm is written op by op: a LayerNorm model's nn.LayerNorm is ATen's fused native_layer_norm, which saves
  // its input, mean and rstd, in transformers and the other stacks alike; a helper's sweep found gpt2-xl's estimate
  // moving 2.37 GiB and 22 % with --modules)
  if (!m.layer_norm && (s.stack == training_stack::torchtune || (s.stack == training_stack::hf && s.modules_transformers))) {
    // the eager fp32 RMSNorm: a bf16 input's fp32 copy replaces it (+2h), and a trained weight's mul saves the
    // normalized tensor (+2h bf16; under autocast the fp32 one, +4h, the input being fp32 already); the norms run
    // sequence-sharded under tensor parallelism. Compile covers the blocks only: the final norm stays eager
    // Gemma's norm multiplies in fp32 (`output * (1.0 + self.weight.float())`, transformers models/gemma*/modeling_gemma*.py
    // `GemmaRMSNorm`): the saved normalized tensor is fp32 there
    const bool fp32_normed = s.amp || m.family.rfind("gemma", 0) == 0;
    const double per_norm = (s.amp ? 0 : 2 * h) + (s.adapters ? 0 : (fp32_normed ? 4 : 2) * h);
    const double sharded = s.sp_replicas / std::max(1.0, s.tp);
    if (!s.compile) d.block += norms * per_norm * sharded;
    d.final_saved += per_norm * sharded;
  }
  if (s.sp_gathered) {
    const double n_in = s.amp ? 5 : 2;
    const double b = quantized ? s.format.saved_input_bytes : 2;
    d.block += n_in * b * h * (s.tp - 1);
    d.final_saved += 2 * h * (s.tp - 1);
    d.grad_temp += 2 * h * (s.tp - 1);
  }
  if (s.compile) {  // (the eager norm's copies are recomputed: no delta above)
    if (m.gated_mlp) d.block -= 2 * f;
    if (s.amp && !quantized) d.block -= 3 * 2 * h;
  }
  return d;
}

/// Activations saved from the forward to the backward pass, per block and in all.
struct saved_activations {
  activation_inventory high_precision;  ///< per token, blocks whose linears run in bf16
  activation_inventory low_precision;   ///< per token, blocks whose linears run in the compute format
  block_layout blocks;                  ///< which blocks are checkpointed / quantized
  double T = 0;                         ///< tokens per GPU of one micro-batch
  bytes checkpoint;                     ///< what a fully checkpointed block keeps: its input, T·(2 or 4)·h
  bytes final_saved;                    ///< final norm input + LM head input, T·(2 or 4)·h + 2·T·h
  bytes embedding_mask;                 ///< the embedding output's dropout mask, T·h bool (model_spec::embedding_dropout)
  bytes all_blocks;                     ///< Σ block(i) over every block, summed from block 0 up, + embedding_mask
  /// pipeline: the other micro-batches in flight on this rank at its peak, (in_flight − 1) · (all_blocks +
  /// final_saved), alive all through the micro-batch that runs (0 without pipeline parallelism)
  bytes in_flight;
  bool offloaded = false;   ///< activation offload: the checkpoints are on the host (memory_shape::off_act)
  /// activation offload: the checkpoints on the GPU at any moment, 2 · checkpoint (the one being copied to or from the
  /// host and the block input its recompute reads; torchtune's OffloadActivations prefetches the next one)
  bytes offload_in_flight;
  bytes offloaded_checkpoints;  ///< activation offload: the checkpoints kept on the host (Σ over recomputed blocks)

  /// Inventory (per token) of block `i`.
  [[nodiscard]] constexpr const activation_inventory& inventory(std::int64_t i) const noexcept {
    return blocks.quantized(i) ? low_precision : high_precision;
  }
  /// Every tensor autograd saves for block `i` without checkpointing (what a recompute rebuilds).
  [[nodiscard]] constexpr double full_block(std::int64_t i) const noexcept { return inventory(i).block_saved * T; }
  /// Bytes a block with inventory `a` keeps from its forward to its backward, `checkpointed` or not: its input
  /// when checkpointed; the per-op SAC subset; everything but the attention core's LSE (Megatron selective); all.
  [[nodiscard]] constexpr double kept(const activation_inventory& a, bool checkpointed) const noexcept {
    if (checkpointed) return offloaded ? 0.0 : checkpoint.raw();
    if (blocks.ac.mode == ac_mode::selective_op) return a.selective_op * T;
    if (blocks.ac.mode == ac_mode::selective_attn) return (a.block_saved - a.lse) * T;
    return a.block_saved * T;
  }
  /// Bytes block `i` keeps from its forward to its backward (see kept).
  [[nodiscard]] constexpr double block(std::int64_t i) const noexcept { return kept(inventory(i), blocks.checkpointed(i)); }
};

/// Saved activations of one micro-batch of `m` (see activation_bytes_per_token for the per-token inventory).
/// Full checkpointing keeps each recomputed block's input only; per-op SAC keeps torchtitan's save list;
/// Megatron's selective recompute drops the attention core (with FlashAttention only its log-sum-exp).
/// A pipeline rank holds its own blocks' activations for each micro-batch in flight (in_flight_micro_batches:
/// `pp` on the first rank under 1F1B), the final norm and head input on the last rank only. Embedding dropout saves its
/// mask until the embedding's backward, the last (counted in all_blocks). Without sequence parallel (memory_shape::
/// sp_replicas = tp) each tp rank keeps the sequence-sharded part of every block (the norms, their statistics and
/// the dropout masks), the block inputs a checkpoint keeps, the final norm and head inputs, the embedding mask and
/// the h-wide activation gradients for the whole sequence: tp times their T-token share. The attention and MLP
/// tensors stay split by heads and columns (Korthikanti et al. 2022, arXiv:2205.05198 Eq. 2; Megatron-Core
/// TransformerLayer: LayerNorm and bias-dropout-add run on the whole sequence unless `config.sequence_parallel`).
/// Sources: as activation_bytes_per_token; torchtitan `_apply_ac_to_transformer_block` for every-K blocks;
/// Megatron-Core `schedules.py` for the micro-batches in flight (Narayanan et al. 2021, arXiv:2104.04473 §2.2).
[[nodiscard]] constexpr saved_activations saved_activation_bytes(const model_spec& m, const memory_shape& s) noexcept {
  saved_activations r;
  r.high_precision = activation_bytes_per_token(m, s.amp, s.format, false);
  r.low_precision = activation_bytes_per_token(m, s.amp, s.format, true);
  const double lora = adapter_saved_delta(m, s);  // 0 for a full fine-tune
  r.high_precision.block_saved += lora;
  r.low_precision.block_saved += lora;
  const double lora_grads = adapter_grad_temp_delta(m, s);  // 0 for a full fine-tune and bf16 adapters
  r.high_precision.grad_temp += lora_grads;
  r.low_precision.grad_temp += lora_grads;
  const stack_activation_delta dh = stack_saved_delta(m, s, false), dl = stack_saved_delta(m, s, true);  // 0 for hf, tp 1, eager
  r.high_precision.block_saved += dh.block;
  r.low_precision.block_saved += dl.block;
  r.high_precision.final_saved += dh.final_saved;
  r.high_precision.grad_temp += dh.grad_temp;
  r.low_precision.grad_temp += dl.grad_temp;
  if (s.sp_replicas > 1) {  // tensor parallelism without sequence parallel: the replicated tensors are whole-sequence
    for (activation_inventory* inv : {&r.high_precision, &r.low_precision}) {
      inv->block_saved += (s.sp_replicas - 1) * inv->sequence_sharded;
      inv->selective_op += (s.sp_replicas - 1) * (inv->checkpoint + 8);  // per-op SAC: its block input and norm statistics
      inv->checkpoint *= s.sp_replicas;
      inv->final_saved *= s.sp_replicas;
      inv->grad_temp += (s.sp_replicas - 1) * 4 * s.h;
    }
  }
  r.blocks = s.blocks;
  r.T = s.T;
  r.checkpoint = bytes::base(r.high_precision.checkpoint * s.T);
  r.final_saved = bytes::base(s.head ? r.high_precision.final_saved * s.T : 0.0);
  r.embedding_mask = bytes::base(m.embedding_dropout && s.embedding ? s.sp_replicas * s.h * s.T : 0.0);
  r.offloaded = s.off_act;
  if (s.off_act) {
    r.offload_in_flight = bytes::base(2 * r.checkpoint.raw());
    r.offloaded_checkpoints = bytes::base(static_cast<double>(s.blocks.checkpointed_blocks()) * r.checkpoint.raw());
  }
  // every block's kept bytes, summed per class (block_layout::count)
  const auto n = s.blocks.count(0, s.blocks.layers);
  const double all = r.embedding_mask.raw() + static_cast<double>(n.low_recomputed) * r.kept(r.low_precision, true) +
                     static_cast<double>(n.low) * r.kept(r.low_precision, false) +
                     static_cast<double>(n.high_recomputed) * r.kept(r.high_precision, true) +
                     static_cast<double>(n.high) * r.kept(r.high_precision, false);
  r.all_blocks = bytes::base(all);
  if (s.in_flight > 1) r.in_flight = bytes::base((s.in_flight - 1) * (all + r.final_saved.raw()));
  return r;
}

// ---------------------------------------------------------------------------------------------------------
// Loss buffers

/// Bytes of the loss over the vocabulary at the moments they are alive.
struct loss_buffers {
  bytes saved;               ///< kept from the loss's forward to its backward
  bytes forward_transient;   ///< alive with `saved` when the loss's forward runs
  bytes backward_transient;  ///< alive with `saved` when the loss's backward starts
  bytes head_gradient;       ///< chunked: the LM head's weight gradient, accumulated during the forward (0 when accumulating)
};

/// Chunks of the chunked losses over materialised logits: torchtitan `chunked_cross_entropy_loss(...,
/// num_output_chunks=8)` (torchtitan/components/loss.py L21-35 @e23bb707) and torchtune `CEWithChunkedOutputLoss`
/// (`num_output_chunks=8`, torchtune/modules/loss/ce_chunked_output_loss.py L35-37 @bd2a0fc7).
inline constexpr double stack_loss_chunks = 8;

/// Loss buffers of one micro-batch, by stack (docs/stacks.md). T = tokens per GPU, V the vocabulary (with tp > 1
/// the logits are T·tp tokens × V/tp: the same bytes).
///
/// Standard, eager (hf: `F.cross_entropy(logits.float(), labels)`; torchtitan `cross_entropy_loss`): the bf16 logits
/// `2·T·V` and their fp32 upcast `4·T·V` are alive with the fp32 log-softmax `4·T·V`, which autograd saves; backward
/// starts with the gradients of the log-softmax output and of the fp32 logits `(4 + 4)·T·V`. torchtune's model returns
/// fp32 logits, `self.output(h).float()` (torchtune/modules/transformer.py L687 @bd2a0fc7): the bf16 logits are
/// gone before the log-softmax runs (forward `4·T·V` with the saved `4·T·V`). Vocabulary-parallel (tp > 1, DTensor
/// `loss_parallel` in torch/distributed/tensor/parallel/loss.py `_log_softmax`, `_nll_loss_and_log_softmax_backward`;
/// torchtitan `_LossParallelCrossEntropy`, components/loss.py L110-210 @b5bcd76): the shifted fp32 logits `x − max`
/// are a tensor of their own in forward and backward builds `zeros_like`, `exp` and their sum before the product,
/// `+4·T·V` in each.
///
/// Megatron (`VocabParallelCrossEntropy`, megatron/core/tensor_parallel/cross_entropy.py L20-116 @d98e8a6): one fp32
/// copy of the logits, shifted, exponentiated and normalised in place and saved as the softmax (`4·T·V`; forward
/// with the bf16 logits `2·T·V`); backward turns the saved softmax into the gradient in place and the engine casts
/// it to the bf16 logits' dtype (`2·T·V`).
///
/// Chunked, hf: the reference trainer's loss (apps/train/bwtrain/loss.py `chunked_loss`): the final norm's output is
/// split into 8 chunks of `Tc = ceil(T/8)` tokens (`torch.chunk`), each chunk's LM head + `F.cross_entropy(logits.float(),
/// reduction="sum")` under a non-reentrant `torch.utils.checkpoint`, so no chunk's tensors are saved: forward holds one
/// chunk's fp32 upcast and log-softmax at a time (`(4 + 4)·Tc·V`, the bf16 logits `2·Tc·V` freed at the upcast), and the
/// chunks keep the head input alive as their checkpoint input (fp32 under autocast: `2·T·h` more than the bf16 input the
/// head's `mm` would save). Backward takes the chunks last to first (autograd's order by sequence number); each recomputes
/// its forward (under autocast a fresh autocast context: the head weight's bf16 cast `2·V·h` and the chunk's `2·Tc·h`
/// again, saved by the `mm`) up to its saved log-softmax, then holds that with its gradient and the fp32 logits' gradient
/// (`12·Tc·V`); its head `mm` returns the bf16 weight gradient `2·V·h`, which one node's input buffer sums over the chunks
/// (`2·V·h` held from the second chunk on: under autocast the ToCopyBackward0 of the forward's one cached cast, which then
/// casts the sum to fp32 once, `w·V·h`; else the weight's AccumulateGrad), and the chunks' input gradients wait in
/// `chunk`'s SplitBackward until the last chunk is done (`(T − Tc)·h` in the residual dtype before the last chunk runs).
/// torch/utils/checkpoint.py `_checkpoint_without_reentrant_generator` (recompute on the first unpack, in the recorded
/// autocast state, stopping at the last saved tensor), torch/csrc/autograd/engine.cpp (ready queue by sequence number,
/// a node runs when its dependencies reach 0), aten/src/ATen/autocast_mode.cpp `cached_cast`.
///
/// Liger, hf (`--loss liger`: Liger-Kernel fused linear cross-entropy, `LigerFusedLinearCrossEntropyFunction`): chunks of
/// `next_pow2(ceil(T / ceil(V / h)))` tokens, each holding bf16 logits and their fp32 gradient `(2 + 4)·chunk·V`; the
/// gradient w.r.t. the head input `2·T·h` is computed in forward and saved, and the head weight gradient is
/// accumulated in forward (`w·V·h`, bf16 under FSDP). Chunked, torchtitan and torchtune (above): the model still
/// builds the bf16 logits `2·T·V`; each of the 8 chunks is upcast (`4·T·V/8`) and its fp32 log-softmax saved (`4·T·V`
/// in all); backward starts with one chunk's two fp32 gradients `8·T·V/8`.
///
/// Compiled (torchtitan, torchtune with compile; `torch.compile` of the loss, torchtitan components/loss.py
/// L245-252 and config/configs.py L301 @b5bcd76, torchtune training/_compile.py L56-76): Inductor fuses the upcast,
/// log-softmax and NLL into reductions over the logits and saves its input and one fp32 log-sum-exp per row:
/// torchtitan's compiled function takes the bf16 logits (`2·T·V` saved; backward writes the bf16 gradient `2·T·V`
/// in one kernel); torchtune's takes the model's fp32 logits (`4·T·V` saved, forward `2·T·V` more at the eager
/// upcast, backward the fp32 gradient `4·T·V`); torchtune's chunked loss compiles `compute_cross_entropy` per chunk
/// (the bf16 chunks `2·T·V` saved, one bf16 chunk gradient at a time); torchtitan's chunks are views of one tensor,
/// whose gradient is gathered whole (`2·T·V`).
///
/// torchtune's chunked loss runs over the model's `chunked_output`, which applies the LM head to each of the 8 chunks
/// (`[self.output(chunk) for chunk in last_hidden_state.chunk(self.num_output_chunks, dim=1)]`,
/// torchtune/modules/transformer.py L485-504 @1814feb17, L493-512 @bd2a0fc7): the head weight is used 8 times, and
/// autograd sums the 8 weight gradients in the input buffer of its AccumulateGrad node before that node runs
/// (torch/csrc/autograd/input_buffer.cpp `accumulate`, in place into the running sum): the loss backward holds the
/// running sum and the next chunk's gradient, `2·w·V·h` (bf16 `2·2·V·h` under FSDP2; none for a frozen head).
/// torchtitan's chunks are views of one logits tensor from one head GEMM (one weight gradient).
[[nodiscard]] inline loss_buffers loss_buffer_bytes(const memory_shape& s) noexcept {
  const double T = s.T, V = s.V, h = s.h, g = s.w, TV = T * V, C = stack_loss_chunks;
  const bool tune = s.stack == training_stack::torchtune;
  const double lp = s.loss_parallel ? 4 * TV : 0;  // the shifted copy (forward), exp and the sum (backward)
  loss_buffers r;
  if (!s.head) return r;  // pipeline: the loss runs on the last rank only
  if (s.megatron) {
    r.saved = bytes::base(4 * TV);               // fp32 softmax, in place over the fp32 copy
    r.forward_transient = bytes::base(2 * TV);   // the bf16 logits while the copy is made
    r.backward_transient = bytes::base(2 * TV);  // the gradient cast to bf16
  } else if (s.loss == loss_impl::standard) {
    if (s.compiled_loss && tune) {
      r.saved = bytes::base(4 * TV + 4 * T);
      r.forward_transient = bytes::base(2 * TV);
      r.backward_transient = bytes::base(4 * TV);
    } else if (s.compiled_loss) {
      r.saved = bytes::base(2 * TV + 4 * T);
      r.backward_transient = bytes::base(2 * TV);
    } else {
      r.saved = bytes::base(4 * TV);                                   // fp32 log-softmax output
      r.forward_transient = bytes::base((tune ? 4 : 2 + 4) * TV + lp); // (bf16 logits +) fp32 upcast alive with it
      r.backward_transient = bytes::base((4 + 4) * TV + lp);           // grads of log-softmax output and of the fp32 logits
    }
  } else if (s.loss == loss_impl::chunked && s.stack == training_stack::hf) {  // the reference trainer's checkpointed chunks
    const double Tc = std::ceil(T / C), rs = s.amp ? 4 : 2;  // a chunk's tokens; bytes of the head input (final norm output)
    const double cast_w = s.amp ? 2 * s.head_w : 0, cast_x = s.amp ? 2 * Tc * h : 0;  // autocast's casts in a recompute
    const double held = s.adapters ? 0 : 2 * s.head_w;  // the bf16 sum of the earlier chunks' head gradients (frozen head: none)
    const double dw = held;                            // a chunk's bf16 head gradient, added into it
    const double earlier = rs * (T - Tc) * h;          // input gradients of the chunks done
    // under autocast, after the last chunk: the sum and its fp32 cast (the chunks' input gradients, rs·T·h, stand where
    // the final norm's output was, which the walk counts as saved)
    const double cast_sum = s.amp && !s.adapters ? 2 * s.head_w + g * s.head_w : 0;
    r.saved = bytes::base((rs - 2) * T * h);
    r.forward_transient = bytes::base(8 * Tc * V);
    r.backward_transient = bytes::base(std::max({held + earlier + 12 * Tc * V + cast_w + cast_x, held + earlier + cast_x + 2 * Tc * h + dw, cast_sum}));
  } else if (s.stack == training_stack::hf) {  // Liger's fused linear cross-entropy
    const double inc = std::ceil(V / h);
    double chunk = 1;
    while (chunk < std::ceil(T / inc)) chunk *= 2;
    chunk = std::min(chunk, T);
    r.saved = bytes::base(2 * T * h);                                          // gradient w.r.t. the head input
    r.head_gradient = bytes::base((s.accum || s.adapters ? 0 : (s.fsdp ? 2 : g)) * s.head_w);  // head weight gradient (frozen head: none)
    r.forward_transient = bytes::base((2 + 4) * chunk * V);                    // chunk logits bf16 + fp32 gradient
  } else {
    // torchtune applies the head to each chunk (`chunked_output`): the head weight's gradient is summed over the
    // chunks in autograd's input buffer, the sum and the next chunk's product alive together (frozen head: none)
    const double head_sum = tune && !s.adapters ? 2 * (s.fsdp ? 2 : g) * s.head_w : 0;
    if (s.compiled_loss) {  // torchtitan / torchtune chunks of bf16 logits, each chunk's loss compiled
      r.saved = bytes::base(2 * TV + 4 * T);
      r.backward_transient = bytes::base((tune ? 2 * TV / C : 2 * TV) + head_sum);
    } else {  // torchtitan / torchtune chunks of bf16 logits, eager
      r.saved = bytes::base(4 * TV);
      r.forward_transient = bytes::base(2 * TV + (4 * TV + lp) / C);
      r.backward_transient = bytes::base((8 * TV + lp) / C + head_sum);
    }
  }
  return r;
}

// ---------------------------------------------------------------------------------------------------------
// Weight copies and communication buffers

/// The largest moments of torchao's eager Float8Linear casts (memory_shape::f8_linear), bytes beyond what a bf16
/// linear holds at the same point, the largest over one block's seven linears.
struct float8_cast_peaks {
  double forward = 0;   ///< while a linear runs its forward, beyond its bf16 output
  double backward = 0;  ///< while a linear runs its backward, beyond its bf16 input and weight gradients
};

/// float8_cast_peaks of one block (see alloc::replay_step_trace's f8cast, f8_fwd, f8_bwd, which follow torchao 0.18
/// op by op). One eager cast of n elements holds at its end the fp32 scaled tensor, its clamp and the float8 result,
/// 9·n bytes (a bf16 source's fp32 copy goes after the product: `x.to(float32) * scale`, then `clamp`, then
/// `.to(float8)`; _ToFloat8ConstrFunc, to_fp8_saturated). For a linear of rows·in input elements `ri`, rows·out
/// output elements `ro` and W weight elements: forward casts the input (9·ri), then the weight (ri + 9·W), then
/// writes the output (ri + W + 2·ro; a bf16 linear holds 2·ro); backward casts the gradient (9·ro), the weight
/// (ro + 9·W), writes grad_input beside a column-major copy of the weight (ro + 2·W + 2·ri), casts the gradient
/// again (10·ro + W + 2·ri) and the saved input (2·ro + W + 11·ri), then writes the weight gradient beside
/// row- and column-major copies (3·ro + 3·W + 4·ri; a bf16 linear holds 2·ri + 2·W). The rowwise recipe
/// (format_traits::backward_rescale) runs both backward GEMMs with unit scales and holds each one's fp32 rescale tensor
/// beside its output (`post_inverse_scale` in `addmm_float8_unwrapped`): 4·ri more at grad_input, 4·W more at the
/// weight gradient (the casts' per-row scales, a few bytes per row, are left out). Under tensor parallelism the
/// column-parallel inputs are the gathered sequence (rows·tp) and the split dimension is ÷ tp. Source:
/// torchao/float8/float8_linear.py, float8_scaling_utils.py, float8_utils.py, float8_training_tensor.py,
/// float8_ops.py (`preprocess_addmm`) @v0.18.0.
/// Calls `f(rows, in, out)` for each distinct linear shape of one block on this GPU: column-parallel q, k (v alike),
/// gate (up alike) over the gathered sequence (rows·tp, out ÷ tp), row-parallel o and down (in ÷ tp).
template <class Fn>
constexpr void for_each_block_linear(const memory_shape& s, Fn&& f) {
  const double tp = s.tp > 1 ? s.tp : 1.0;
  f(s.T * tp, s.h, s.q_width / tp);
  f(s.T * tp, s.h, s.kv_width / tp);
  f(s.T * tp, s.h, s.F / tp);
  f(s.T * tp, s.q_width / tp, s.h);
  f(s.T * tp, s.F / tp, s.h);
}

[[nodiscard]] constexpr float8_cast_peaks float8_linear_casts(const memory_shape& s) noexcept {
  float8_cast_peaks p;
  const double rs = s.format.backward_rescale ? 4 : 0;  // fp32 rescale bytes per element of a backward GEMM's output
  for_each_block_linear(s, [&](double rows, double in, double out) {
    const double ri = rows * in, ro = rows * out, W = in * out;
    p.forward = std::max(p.forward, std::max({9 * ri, ri + 9 * W, ri + W + 2 * ro}) - 2 * ro);
    p.backward = std::max(p.backward, std::max({9 * ro, ro + 9 * W, ro + 2 * W + (2 + rs) * ri, 10 * ro + W + 2 * ri,
                                                2 * ro + W + 11 * ri, 3 * ro + (3 + rs) * W + 4 * ri}) - (2 * ri + 2 * W));
  });
  p.forward = std::max(0.0, p.forward);
  p.backward = std::max(0.0, p.backward);
  return p;
}

/// float8_cast_peaks of one block under torchao 0.18's MXFP8 linear (the hf stack's mxfp8: MXFP8TrainingOpConfig's
/// weight wrapper → `mx_mm`, torchao/prototype/moe_training/mxfp8_linear.py @v0.18.0). Each cast is one kernel that
/// writes the e4m3 elements and one E8M0 scale per 32, c = 1 + 1/32 B per element (Triton dim0
/// `triton_to_mxfp8_dim0`, CUDA dim1 `mxfp8_quantize_cuda`), and `_addmm_mx_dispatch` copies both operands' scales into
/// the blocked layout `_scaled_mm` takes (`to_blocked`, 1/32 B per element, gone with the GEMM; its transient second
/// copy of the scales, up to 1/32 B more while it is made, and the 128 × 4 padding are left out here, in the trace not;
/// prototype/mx_formats/mx_tensor.py, utils.py). No cast is freed before the autograd function returns (they are locals).
/// Forward: input and weight cast along dim0, then the GEMM: c·(ri + W) + (ri + W)/32 beside the bf16 output.
/// Backward: the gradient along dim0, the weight along dim1, the grad_input GEMM, then the gradient and the saved
/// input along dim1 and the weight-gradient GEMM: at its end c·(2·ro + ri + W) + (ro + ri)/32 beside grad_input and
/// the weight gradient (what a bf16 linear holds). Shapes as float8_linear_casts.
[[nodiscard]] constexpr float8_cast_peaks mx_linear_casts(const memory_shape& s) noexcept {
  float8_cast_peaks p;
  constexpr double c = 1 + 1.0 / 32, blocked = 1.0 / 32;
  for_each_block_linear(s, [&](double rows, double in, double out) {
    const double ri = rows * in, ro = rows * out, W = in * out;
    p.forward = std::max(p.forward, (c + blocked) * (ri + W));
    p.backward = std::max(p.backward, c * (2 * ro + ri + W) + blocked * (ro + ri));
  });
  return p;
}

/// float8_cast_peaks of one block under torchao 0.18's NVFP4Linear (memory_shape::nvfp4_linear: `nvfp4_mm_triton`,
/// torchao/prototype/moe_training/nvfp4_training/nvfp4_linear.py @v0.18.0), beyond the FP4 weights every quantized
/// block saves (weight_copies::saved_quantized_block). Forward: an fp32 weight (autocast's master) is first copied to
/// bf16 (`weight_hp.to(torch.bfloat16)`, 2·W), as is an fp32 input (under autocast the norm outputs feeding q, k, v,
/// gate and up: 2·ri); the input is quantized row- and column-wise (`triton_rht_quantize_row_col`, q = 0.5 + 1/16 B per
/// element each: the column-wise one is the saved input, the row-wise one q·ri lives through the GEMM); then the weight
/// (`_triton_weight_quantize_2d`: `x.float().abs().max()` holds the fp32 copy and its absolute value, 8·W, before the
/// kernel writes the row- and column-wise codes), then the GEMM writes the bf16 output beside the row-wise weight codes
/// (q·W). Backward: the gradient quantized row- and column-wise (2·q·ro, with stochastic rounding), then grad_input and
/// the weight gradient (what a bf16 linear holds). Shapes as float8_linear_casts; the block's other linears' saved
/// codes are held throughout (weight_copy_bytes adds q·lin to the forward moment).
[[nodiscard]] constexpr float8_cast_peaks nvfp4_linear_casts(const memory_shape& s) noexcept {
  float8_cast_peaks p;
  constexpr double q = 0.5 + 1.0 / 16;
  const double tp = s.tp > 1 ? s.tp : 1.0;
  auto one = [&](double rows, double in, double out, bool norm_input) {
    const double ri = rows * in, ro = rows * out, W = in * out;
    const double conv = s.amp ? 2 * W + (norm_input ? 2 * ri : 0) : 0;
    p.forward = std::max(p.forward, conv + q * ri + std::max(8 * W - 2 * ro, q * W));
    p.backward = std::max(p.backward, 2 * q * ro);
  };
  one(s.T * tp, s.h, s.q_width / tp, true);   // q
  one(s.T * tp, s.h, s.kv_width / tp, true);  // k, v
  one(s.T * tp, s.h, s.F / tp, true);         // gate, up
  one(s.T * tp, s.q_width / tp, s.h, false);  // o
  one(s.T * tp, s.F / tp, s.h, false);        // down
  return p;
}

/// Copies of the weights in the compute dtype, and the buffers of data-parallel communication.
struct weight_copies {
  bytes autocast_block;          ///< autocast's bf16 copy of one block's linear weights, 2·lin
  bytes autocast_head;           ///< autocast's bf16 copy of the LM head, 2·V·h
  bytes autocast_blocks;         ///< every block's copies while the last block runs, 2·lin·L
  bytes autocast_all;            ///< every GEMM weight's copy (blocks and head) when the loss runs
  bytes autocast_after_forward;  ///< copies kept after the forward: non-checkpointed blocks (Σ) — without the head; with NVFP4Linear's saved FP4 weights (saved_quantized_block)
  bytes fsdp_root;               ///< FSDP2 root module (embedding, head, final norm; with emb_units the final norm), gathered bf16 all step
  bytes fsdp_head_unit;          ///< emb_units: the LM head's own unit, gathered bf16 `2·V·h` while the loss runs forward and backward
  bytes fsdp_embedding_unit;     ///< emb_units: the embedding's own unit, gathered bf16 `2·V·h` in its backward, the last
  bytes fsdp_gathered;           ///< FSDP2 current + prefetched block, gathered (bf16, or fp8 with FP8 all-gather); one rank: the current only
  /// FSDP2 with reshard after forward, hf stack: block L − 1's all-gather output, which the root's pre-backward hook
  /// prefetches before the loss backward (the hf stack computes the loss inside the root module, so the hook sits on
  /// the loss: torch/distributed/fsdp/_fully_shard/_fsdp_state.py `_post_forward` → `_register_pre_backward_hook`,
  /// `_pre_backward` → `_backward_prefetch`); alive through the loss and head backward. 0 for grad-op (the block is
  /// still gathered) and for stacks whose loss runs outside the root (the hook fires on the logits' gradient)
  bytes fsdp_loss_prefetch;
  bytes grad_op_block;           ///< SHARD_GRAD_OP: one block kept gathered (bf16) from its forward to its backward
  bytes grad_op_all;             ///< SHARD_GRAD_OP: every block kept gathered, L · grad_op_block
  bytes autocast_block_low;      ///< autocast's copy of one low-precision block's weights: autocast_block, 0 for Float8Linear (f8_linear) and NVFP4Linear (nvfp4_linear)
  /// torchao's NVFP4Linear (memory_shape::nvfp4_linear, hf and torchtitan): the transposed FP4 weight, its E4M3 block scales and amax that
  /// a low-precision block's forward saves for its backward, 0.5625·lin (`ctx.save_for_backward(..., Wt_fp4_x2, Wt_sf,
  /// W_amax, ...)` in `nvfp4_mm_triton.forward`, torchao/prototype/moe_training/nvfp4_training/nvfp4_linear.py
  /// @v0.18.0); kept from the block's forward to its backward like autocast's copy (a recomputed block makes it again
  /// in its recompute), 0 under per-op SAC, whose recompute rebuilds it (its quantize kernels are not in the save list)
  bytes saved_quantized_block;
  bytes quantized_block;         ///< low-precision copies of one block's weights (and transposes) while it runs (0 under te_weight_cache); Float8Linear, torchao's MXFP8 linear: its casts' largest backward moment (float8_linear_casts, mx_linear_casts)
  bytes quantized_block_forward; ///< the same while the block runs its forward
  /// Megatron + Transformer Engine: the low-precision copies of every low-precision block's weights, cached from the
  /// step's first micro-batch and alive all step (`is_first_microbatch`, see throughput_shape::cached_weight_casts)
  bytes te_weight_cache;
  bytes ddp_buckets;             ///< DDP gradient buckets, w·P
  bytes bf16_model;              ///< Megatron: the bf16 model weights, 2·P, at every moment (the fp32 main parameters are model_states)
  bytes zero1_params;            ///< distributed optimizer with fp32 masters: the replicated bf16 parameters, 2·P, alive all step
};

/// Weight copies and communication buffers of one step.
///
/// FSDP2 embedding units (memory_shape::emb_units): `fully_shard` of `tok_embeddings` and `output` before the root
/// (torchtune/training/_distributed.py `shard_model` L696-714 @bd2a0fc7, with `custom_sharded_layers`; torchtitan
/// torchtitan/distributed/fsdp.py `apply_fsdp` @b5bcd76, since 83e69410) leaves the root the final norm: the head
/// unit is gathered for its forward and backward (torchtune reshards it after forward, torchtitan keeps it to its
/// backward: the same bytes at the loss's moments) and the embedding unit in its forward and its backward.
///
/// torch.autocast caches the bf16 cast of every weight used under grad mode until autocast exits (blocks
/// recomputed under checkpointing drop theirs after the forward and cast again in the recompute: PyTorch
/// `autocast` weight cache). FSDP2 keeps the root module gathered, and all-gathers the current block with the
/// next one prefetched (`fully_shard` docs, `reshard_after_forward`; FP8 all-gather halves them, torchao
/// `enable_fsdp_float8_all_gather`); with `reshard_after_forward=False` (SHARD_GRAD_OP) every block stays
/// gathered from its forward to its backward. A low-precision block holds its weights' quantized copies
/// (`format_traits::weight_copy_bytes` per element: Transformer Engine / torchao). DDP holds one bucket copy of
/// every gradient (`torch.nn.parallel.DistributedDataParallel`, `gradient_as_bucket_view=False`). Megatron keeps its
/// model in bf16 (`Float16Module`, megatron/core/transformer/module.py L479 @d98e8a6) beside the fp32 main parameters,
/// `2·P` at every moment, with Transformer Engine's cached low-precision copies of its low-precision blocks
/// (te_weight_cache, TransformerEngine transformer_engine/pytorch/module/linear.py `is_first_microbatch`), and has no bucket copy: its DDP all-reduces the main-gradient buffer in place, bucket by
/// bucket (megatron/core/distributed/distributed_data_parallel.py).
[[nodiscard]] constexpr weight_copies weight_copy_bytes(const memory_shape& s) noexcept {
  const double L = static_cast<double>(s.blocks.layers);
  weight_copies r;
  const double amp_block = s.amp ? 2 * s.lin : 0;
  // Float8Linear casts its fp32 weight to float8 itself; NVFP4Linear calls nvfp4_linear, no F.linear, and converts an
  // fp32 weight to bf16 inside its forward for the quantize kernel (`weight_hp.to(torch.bfloat16)`, a copy gone when
  // forward returns; nvfp4_linear.py @v0.18.0)
  // (compiled too, f8_module: a helper's sweep found --compile adding the bf16 copies back, +5.75 GiB for Llama-3.1-8B
  // fp8 on one H100)
  const double amp_low = s.f8_module || s.nvfp4_linear ? 0 : amp_block;
  const double saved_q = s.nvfp4_linear && s.blocks.ac.mode != ac_mode::selective_op
                             ? storage_bytes_per_element(compute_format::nvfp4) * s.lin : 0;
  r.saved_quantized_block = bytes::base(saved_q);
  const double nq = static_cast<double>(std::max<std::int64_t>(0, s.blocks.q_end - s.blocks.q_first));
  r.autocast_block = bytes::base(amp_block);
  r.autocast_block_low = bytes::base(amp_low);
  r.autocast_head = bytes::base(s.amp ? 2 * s.head_w : 0);
  r.autocast_blocks = bytes::base(amp_block * (L - nq) + amp_low * nq);
  r.autocast_all = bytes::base(2 * s.gemm_weights * (s.amp ? 1 : 0) - (amp_block - amp_low) * nq);
  double after = 0;  // a sum of zeros without autocast or NVFP4Linear
  if (amp_block != 0 || saved_q != 0) {  // the blocks not recomputed keep their copies
    const auto n = s.blocks.count(0, s.blocks.layers);
    after = (amp_low + saved_q) * static_cast<double>(n.low) + amp_block * static_cast<double>(n.high);
  }
  r.autocast_after_forward = bytes::base(after);
  r.fsdp_root = bytes::base(s.fsdp ? 2 * (s.emb_units ? s.root_params - s.emb_w - s.head_w : s.root_params) : 0);
  r.fsdp_head_unit = bytes::base(s.emb_units ? 2 * s.head_w : 0);
  r.fsdp_embedding_unit = bytes::base(s.emb_units ? 2 * s.emb_w : 0);
  // (one rank: FSDP2 gathers nothing, so no prefetched all-gather output beside the running block's parameters;
  // FSDPParamGroup.unshard and wait_for_unshard, `world_size == 1`)
  r.fsdp_gathered = bytes::base(s.fsdp && !s.grad_op ? (s.n > 1 ? 2 : 1) * s.gathered_block : 0);  // QLoRA: the packed NF4 storage
  r.fsdp_loss_prefetch = bytes::base(s.fsdp && !s.grad_op && s.n > 1 && s.stack == training_stack::hf ? s.gathered_block : 0);
  const double kept_block = s.grad_op ? s.gathered_block : 0;
  r.grad_op_block = bytes::base(kept_block);
  r.grad_op_all = bytes::base(kept_block * L);
  r.quantized_block = bytes::base(s.format.weight_copy_bytes * s.lin);
  r.quantized_block_forward = r.quantized_block;
  if (s.f8_linear || s.mx_linear) {
    const float8_cast_peaks p = s.f8_linear ? float8_linear_casts(s) : mx_linear_casts(s);
    r.quantized_block = bytes::base(p.backward);
    r.quantized_block_forward = bytes::base(p.forward);
  } else if (s.nvfp4_linear && !s.compile) {  // (compiled, Inductor fuses the amax reduction: the generic copies)
    const float8_cast_peaks p = nvfp4_linear_casts(s);
    r.quantized_block = bytes::base(p.backward);  // (the saved FP4 weights are saved_quantized_block)
    r.quantized_block_forward = bytes::base(storage_bytes_per_element(compute_format::nvfp4) * s.lin + p.forward);
  }
  if (s.megatron) {  // Transformer Engine keeps the quantized copies of every low-precision block between micro-batches
    r.te_weight_cache = bytes::base(s.format.weight_copy_bytes * s.lin * nq);
    r.quantized_block = r.quantized_block_forward = bytes{};
  }
  if (s.ddp && !s.megatron) r.ddp_buckets = bytes::base((s.off_opt ? 2 : s.w) * s.Pt);  // offload: bf16 gradients
  if (s.megatron && !s.zero1) r.bf16_model = bytes::base(2 * s.P / s.n);
  if (s.zero1 && s.master == master_weights::fp32) r.zero1_params = bytes::base(2 * s.P);
  return r;
}

// ---------------------------------------------------------------------------------------------------------
// Transient working sets

/// Working buffers alive only while one operation runs.
struct transient_buffers {
  bytes activation_gradients;    ///< gradients of a block's activations while it runs backward, T·(4h + 4F)
  bytes block_gradient_buffers;  ///< a block's weight gradients before they are reduced or accumulated
  bytes checkpointed_forward;    ///< intermediates of a checkpointed block's forward (nothing saved), T·6F
  bytes root_reduce_scatter;     ///< FSDP2 root gradients at the end of backward (bf16 + fp32 copy; with emb_units the embedding's)
  /// the root's bf16 gradients and the last block's fp32 reduce-scatter input `4·Pb` (fp32 master), alive with the gathered
  /// root until the root's post_backward reshards it and drops that input
  bytes root_before_reshard;
  /// emb_units: the head unit's unsharded bf16 gradient and its copy in the reduce dtype (fp32 with fp32 master
  /// weights) for the reduce-scatter right after the loss backward
  bytes head_reduce_scatter;
  bytes optimizer;               ///< foreach AdamW: one full-size temporary list, w·P/N (fused: 0; optimizer in backward: one parameter's, w·largest_param); Adafactor: one parameter's variance estimate, w·largest_param/N
  bytes dequantized_weight;      ///< QLoRA: the bf16 weight one 4-bit linear dequantizes while it runs (forward and backward)
  /// CPU offload of the parameters: the unit in flight's shard copied to the GPU before its all-gather (in the
  /// master dtype, then cast to bf16) and its reduce-scattered gradient shard before the copy to the host
  bytes offload_staging;
};

/// Transient working sets of one step.
///
/// Activation gradients of the block running backward (fp32 residual + MLP-width buffers); its weight gradients
/// as autograd produces them: under FSDP2 the unsharded bf16 gradient `2·P_block`, its fp32 copy for the
/// reduce-scatter (`MixedPrecisionPolicy(reduce_dtype=float32)`) and the gathered blocks still held (`wc`); without
/// sharding the gradient `w·P_block`, or bf16 `2·lin` when accumulating into fp32 gradients (autocast). A
/// checkpointed block's forward runs without saving, holding its MLP intermediates `6·T·F`. At the end of
/// backward FSDP2 reduce-scatters the root's gradients. `foreach` AdamW (`torch.optim.AdamW(foreach=True)`,
/// `_multi_tensor_adamw`) allocates a full-size intermediate list; `fused` none (the other optimizers: none;
/// bitsandbytes' 8-bit kernels dequantize in registers, `docs/source/explanations/optimizers.mdx`). QLoRA: each
/// 4-bit linear dequantizes its weight to a bf16 `[N, K]` buffer for the op (bitsandbytes
/// `backends/cuda/ops.py` `_dequant_linear_fallback` for more than 1536 tokens; `MatMul4Bit.backward` dequantizes
/// again), the largest one alive at a time. CPU offload of the optimizer without sharding: the bf16 gradient of the
/// block and its cast to the master dtype for the copy to the host, `(2 + 4)·P_block` (DeepSpeed casts on the GPU
/// before `copy_(..., non_blocking=True)`, deepspeed/runtime/zero/stage_1_and_2.py L1590-1605 @edaa722), and no
/// optimizer temporaries (the step runs on the host); with parameter offload the staging of the unit in flight
/// (offload_staging: FSDP2 copies the shard host-to-device before the all-gather and the gradient shard
/// device-to-host after the reduce-scatter, CPUOffloadPolicy). Optimizer in backward (memory_shape::in_bwd): a block's
/// weight gradients are stepped one by one, so at most one weight's gradient `w·largest_linear` (and with foreach AdamW
/// its temporary, as much again) is alive, and the optimizer's temporary is that of one parameter. Sources: PyTorch autograd,
/// FSDP2 `torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py` (reduce-scatter input), torch.optim.
[[nodiscard]] constexpr transient_buffers transient_bytes(const memory_shape& s, const saved_activations& a,
                                                         const weight_copies& wc) noexcept {
  const bool fp32_master = s.master == master_weights::fp32;
  transient_buffers r;
  r.activation_gradients = bytes::base(a.high_precision.grad_temp * s.T);
  if (s.adapters)  // only the adapters' gradients (docs/finetune.md)
    r.block_gradient_buffers = bytes::base(s.fsdp ? 2 * s.Pt_block + (fp32_master ? 4 * s.Pt_block : 0) + wc.fsdp_gathered.raw()
                                                  : (s.off_opt ? 6 * s.Pt_block : s.w * s.Pt_block));
  else if (s.megatron)  // gradient-accumulation fusion: the weight-gradient GEMMs accumulate into the fp32 main_grad
    r.block_gradient_buffers = bytes{};  // (megatron/core/tensor_parallel/layers.py L600-602, `wgrad_gemm_accum_fp32`)
  else if (s.zero1)  // a block's bf16 weight gradients before they are added into the main-grad buffer
    r.block_gradient_buffers = bytes::base(2 * s.Pb);
  else  // FSDP2: the bf16 gradients, the previous block's fp32 reduce-scatter input (held in reduce_scatter_state until
        // this block's post_backward) and the gathered blocks
    r.block_gradient_buffers = bytes::base(s.fsdp ? 2 * s.Pb + (fp32_master ? 4 * s.Pb : 0) + wc.fsdp_gathered.raw()
                                                  : (s.off_opt ? 6 * s.Pb : (s.accum ? 2 * s.lin : s.w * s.Pb)));
  // optimizer in backward: one weight's gradient while it is stepped, with the step's foreach temporary (the
  // AccumulateGrad node and its post-accumulate hook run as soon as the weight-gradient GEMM has produced it)
  const bool foreach_adamw = s.optimizer == optimizer_impl::foreach && s.optim == optimizer_kind::adamw;
  if (s.in_bwd) r.block_gradient_buffers = bytes::base((s.w + (foreach_adamw ? s.w : 0)) * s.largest_linear);
  r.checkpointed_forward = bytes::base(s.T * (6 * s.F));
  const double root_grads = s.emb_units ? s.root_params - s.head_w : s.root_params;  // the embedding (and norm) unit
  r.root_reduce_scatter = bytes::base(s.fsdp && !s.adapters ? 2 * root_grads + (fp32_master ? 4 * root_grads : 0) : 0);
  r.root_before_reshard = bytes::base(s.fsdp && !s.adapters ? 2 * root_grads + (fp32_master ? 4 * s.Pb : 0) : 0);
  if (s.emb_units && !s.adapters) r.head_reduce_scatter = bytes::base(2 * s.head_w + (fp32_master ? 4 * s.head_w : 0));
  if (foreach_adamw && !s.megatron && !s.off_opt)  // (offload: the step and its temporaries are on the host)
    r.optimizer = bytes::base(s.w * (s.in_bwd ? s.largest_param : s.Pt / s.n));  // in backward: one parameter's step at a time
  // Adafactor (torch.optim.Adafactor, torch/optim/_adafactor.py): its default is the single-tensor loop ("Adafactor will
  // default to the slower single tensor for-loop implementation unless this flag is explicitly True"), which builds one
  // parameter's variance estimate `row_var @ col_var` at full size and turns it into the update in place: the largest
  // trained parameter's w·numel. The loop's `update` still holds the previous parameter's estimate while the next
  // one's is made (a Python local, rebound after), so consecutive parameters are alive together: in transformers'
  // parameter order (embedding, then per block q, k, v, o, gate, up, down and the two norms) the embedding with q_proj,
  // V·h + h·q, and gate with up, 2·h·F (alloc::step_shape::optimizer follows the harness decoder's order, which puts a
  // norm between the embedding and q). Under FSDP2 the factors are DTensors of a new shape, which DTensor replicates
  // (`new_factory_strategy`), so the estimate is whole on every rank, not a shard (a review found the shard). Optimizer
  // in backward steps one parameter at a time. (The adapters of LoRA: r·max(h, F) at most.)
  if (s.optim == optimizer_kind::adafactor && !s.megatron && !s.off_opt)
    r.optimizer = bytes::base(s.w * (s.adapters ? s.lora_rank * std::max(s.h, s.F)
                                     : s.in_bwd ? s.largest_param
                                                : std::max({s.largest_param, s.head_w + s.h * s.q_width / std::max(1.0, s.tp),
                                                            2 * s.largest_linear})) /
                              (s.in_bwd || s.fsdp ? 1 : s.n));
  r.dequantized_weight = bytes::base(s.dequant);
  if (s.off_params) {  // the shard in the master dtype (frozen LoRA base: bf16) + its bf16 cast + the fp32 gradient shard
    const double shard = s.gathered_block / s.n;
    r.offload_staging = bytes::base((s.adapters ? shard : 2 * shard) + shard + 4 * s.Pt_block / s.n);
  }
  return r;
}

/// Bytes the recompute of a block rebuilds in its backward: its full inventory `full` less what it kept `kept`
/// (0 when nothing is recomputed). Source: torch.utils.checkpoint (non-reentrant) and torchtitan SAC.
[[nodiscard]] constexpr double recompute(double kept, double full) noexcept { return kept < full ? full - kept : 0; }

/// Bytes the recompute of block `i` rebuilds in its backward (see recompute(kept, full)).
[[nodiscard]] constexpr double recompute(const saved_activations& a, std::int64_t i) noexcept {
  return recompute(a.block(i), a.full_block(i));
}

/// Working set of block `i` while its forward runs: a checkpointed block's intermediates, else everything it
/// is saving.
[[nodiscard]] constexpr double forward_working_set(const saved_activations& a, const transient_buffers& t,
                                                   std::int64_t i) noexcept {
  return a.blocks.checkpointed(i) ? t.checkpointed_forward.raw() : a.full_block(i);
}

// ---------------------------------------------------------------------------------------------------------
// Allocator

/// What the PyTorch caching allocator and the process hold beyond the allocated tensors.
struct allocator_overheads {
  bytes workspace;         ///< cuBLAS/cuBLASLt workspaces and small tensors (allocated, every moment)
  bytes logits_segment;    ///< standard loss: the freed bf16-logits segment, 2·T·V, that the fp32 requests cannot reuse
  double fragmentation = 0;  ///< share of the activation churn (activations + transient + logits at the peak) left as slack
  bool stream_pool = false;  ///< FSDP2 over more than one shard without accumulation: the reduce-scatter stream's pool
  bytes non_pytorch;       ///< CUDA context and NCCL, outside the allocator
  bytes capacity;          ///< bytes CUDA can use on the GPU
};

/// The freed bf16-logits segment the fp32 requests of an eager standard loss cannot reuse, `2·T·V` (0 when the loss
/// is Megatron's, whose bf16 gradient cast fits in it, compiled, chunked or Liger's, or with `expandable_segments:True`,
/// which maps the freed pages again for the next request).
[[nodiscard]] constexpr bytes freed_logits_segment(const memory_shape& s) noexcept {
  const bool freed = s.loss == loss_impl::standard && !s.megatron && !s.compiled_loss && !s.expandable;
  return bytes::base(freed ? 2 * s.T * s.V : 0);
}

/// Allocator and process overheads of one configuration.
///
/// The CUDA context and NCCL communicator buffers are measured (runtime_overheads, H200, PyTorch 2.11); NCCL
/// only once a process group exists. The caching allocator (PyTorch `CUDACachingAllocator`, docs "CUDA
/// semantics: memory management") rounds and splits segments: the freed bf16-logits segment cannot serve the
/// larger fp32 requests of the loss backward (eager standard loss; with `expandable_segments:True` the freed pages are
/// mapped again for the next request, so none is left), and a share of the activation churn stays reserved.
[[nodiscard]] inline allocator_overheads allocator_bytes(const memory_shape& s, const gpu_spec& gpu,
                                                         const runtime_overheads& rt) {
  allocator_overheads r;
  r.workspace = rt.cublas_workspace;
  r.logits_segment = freed_logits_segment(s);
  r.fragmentation = rt.fragmentation;
  r.stream_pool = s.fsdp && s.n > 1 && !s.accum;
  r.non_pytorch = rt.cuda_context + (s.multi_process ? rt.nccl : bytes{});
  r.capacity = gpu.cuda_capacity();
  return r;
}

/// Allocator slack at the peak moment `at_peak`: the logits segment plus the fragmentation share of the
/// activation churn (calibrated on the reserved bytes of `h200-calibration.jsonl`).
[[nodiscard]] constexpr double fragmentation_slack(const allocator_overheads& a, const memory_breakdown& at_peak) noexcept {
  return a.logits_segment.raw() + a.fragmentation * (at_peak.activations + at_peak.transient + at_peak.logits).raw();
}

/// FSDP2 reduce-scatter pool at the peak: FSDP2 allocates reduce-scatter outputs (the sharded gradients) on its
/// reduce-scatter stream; the caching allocator keeps per-stream pools, so those segments cannot reuse the
/// activation memory freed on the compute stream and the reserved peak carries every gradient shard (w·P/N) on
/// top of the compute-stream peak, less the gradients already counted there. Only with more than one shard and
/// outside the optimizer step. Source: PyTorch caching allocator per-stream pools; FSDP2
/// `_fsdp_collectives.py`; calibrated on torchtitan's FSDP 8 vs 128 GPU figures (docs/scaling.md#6).
[[nodiscard]] constexpr double reduce_scatter_pool(const allocator_overheads& a, const model_states& ms,
                                                   const memory_breakdown& at_peak, step_phase phase) noexcept {
  const double pool = (a.stream_pool && phase != step_phase::optimizer) ? ms.gradients.raw() - at_peak.gradients.raw() : 0;
  return std::max(0.0, pool);
}

/// The caching-allocator replay of one configuration: the step trace's shape (alloc::step_shape) when the
/// configuration is one the trace describes, the allocator settings and the policy.
struct allocator_replay {
  bool replayable = false;  ///< one GPU (unsharded), or FSDP2 full, hybrid or grad-op sharding with fp32 master, tp = cp = pp = 1,
                            ///< any gradient accumulation, bf16 GEMMs or fp8 tensorwise or rowwise (torchao Float8Linear), the standard or the trainer's chunked loss, no or
                            ///< whole-block checkpointing, a
                            ///< dense Llama-layout model, with or without q/k norms (see replayable())
  runtime_overheads::replay_policy policy = runtime_overheads::replay_policy::always;
  double band = 0.15;
  double stop_device_peak = std::numeric_limits<double>::infinity();  ///< runtime_overheads::replay_stop_device_peak
  alloc::allocator_settings settings;
  alloc::step_shape shape;
  /// the trace replayed is a stand-in's (replay_stand_in), not this configuration's: what it leaves out, else nullptr
  const char* stand_in = nullptr;
  double stand_in_allocated = 0;  ///< the stand-in's peak allocated (bytes; estimate_memory without a replay)
};

/// The most decoder blocks the caching-allocator replay takes (see replay_blocker): about 0.5 s of replay on this
/// project's 2-core host at Llama-3.2-1B's shapes, where published models have at most a few hundred blocks.
inline constexpr std::int64_t max_replayed_layers = 1024;

/// What keeps the step trace from describing configuration `c` of `m` (see replayable()), the first found, in words
/// for the output ("the chunked loss"); nullptr when it describes it.
[[nodiscard]] inline const char* replay_blocker(const model_spec& m, const training_config& c) noexcept {
  const bool fsdp2 = ((c.shard == sharding::full || c.shard == sharding::grad_op) && c.shard_size() == c.world_size) ||
                     c.shard == sharding::hybrid;
  if (m.is_moe()) return "a mixture of experts";
  if (m.is_mla()) return "multi-head latent attention";
  // the replay keeps each pool's free blocks in sorted vectors (alloc::caching_allocator), whose inserts shift the
  // blocks of the same size range: with thousands of blocks that grows with the square of the count (a CLI fuzz timed
  // 10,000 blocks at over 20 s); published models have at most a few hundred
  if (m.layers > max_replayed_layers) return "more than 1,024 decoder blocks";
  if (!m.gated_mlp || m.layer_norm || m.norms_per_block != 2 || m.o_bias || m.mlp_bias || m.positions != 0)
    return "a block off the Llama layout";
  if (c.stack != training_stack::hf) return "another stack than hf";
  if (c.compile) return "torch.compile";
  if (c.tp > 1 || c.cp > 1 || c.pp > 1) return "tensor, context or pipeline parallelism";
  if (c.shard == sharding::optimizer) return "the distributed optimizer";
  if (c.world_size > 1 && !fsdp2 && c.shard != sharding::none) return "this sharding";  // (DDP is traced: step_shape::ddp)
  if (c.sharded() && !fsdp2) return "this sharding";
  if (c.sharded() && c.master != master_weights::fp32) return "FSDP2 with bf16 master weights";
  if (c.loss == loss_impl::liger) return "Liger's fused linear cross-entropy";  // (the hf stack's chunked loss is traced)
  // (fp8 tensorwise and rowwise are traced: torchao's Float8Linear, alloc::step_shape::float8, float8_rowwise; mxfp8
  // on bf16 weights: torchao's MXFP8 linear, step_shape::mxfp8; under autocast violations() refuses it)
  if (c.format != compute_format::bf16 && c.format != compute_format::fp8 && c.format != compute_format::fp8_rowwise &&
      (c.format != compute_format::mxfp8 || c.autocast_fp32_weights()))
    return "low-precision GEMMs";
  if (c.ac.mode != ac_mode::none && c.ac.mode != ac_mode::full) return "per-op checkpointing";
  if (c.fp8_all_gather) return "the FP8 all-gather";
  if (c.adapters()) return "LoRA adapters";  // the trace is a full fine-tune with its optimizer on the GPU
  // (SGD with momentum and Adafactor, the reference trainer's others, are traced: alloc::step_shape::optimizer; Adafactor
  // on one GPU or DDP only: under FSDP2 its factors are replicated DTensors, a review found)
  if (c.optim != optimizer_kind::adamw && c.optim != optimizer_kind::sgd && c.optim != optimizer_kind::adafactor)
    return "8-bit AdamW or Lion";
  if (c.optim == optimizer_kind::adafactor && c.sharded()) return "Adafactor under FSDP2 (replicated DTensor factors)";
  if (c.offload != 0) return "CPU offload";
  if (c.optimizer_in_backward) return "the optimizer step in backward";
  if (c.fsdp_embedding_units) return "FSDP units of their own for the embedding and head";  // (the trace: in the root)
  return nullptr;
}

/// Whether the step trace (alloc::replay_step_trace) describes configuration `c` of `m`: the eager decoder of
/// `measure.py` / the reference trainer (full fine-tune, AdamW, SGD or Adafactor) on one GPU, or on each rank of FSDP2 full sharding
/// over the whole data-parallel mesh (with or without reshard after forward: sharding full or grad-op,
/// alloc::step_shape::reshard_after_forward), or of hybrid sharding (HSDP) over its shard group (no tensor, context or pipeline
/// parallelism), with or without gradient accumulation. HSDP allocates what FSDP2 over the shard group allocates: the
/// all-reduce across replicas runs in place on the reduce-scatter output (`foreach_reduce`,
/// torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py: `dist.all_reduce(reduce_output, group=all_reduce_group)`).
/// Other configurations keep the cheap bound (fragmentation_slack, reduce_scatter_pool).
[[nodiscard]] inline bool replayable(const model_spec& m, const training_config& c) noexcept { return replay_blocker(m, c) == nullptr; }

/// What a stand-in's step leaves out of the plan it prices (replay_stand_in), one bit each.
enum stand_in_part : unsigned {
  stand_in_compile = 1,    ///< torch.compile on the hf stack: the eager step
  stand_in_liger = 2,      ///< Liger's fused linear cross-entropy: the hf stack's chunked loss in its place
  stand_in_optimizer = 4,  ///< 8-bit AdamW (paged or not) or Lion: SGD's one momentum buffer per parameter in its place
  stand_in_emb_units = 8,  ///< FSDP units of their own for the embedding and head: both in the root
};

/// The words for the parts `mask` of a stand-in (stand_in_part) leaves out, for the outputs ("torch.compile"); a
/// static string, "" for none.
[[nodiscard]] inline const char* stand_in_text(unsigned mask) {
  static const std::array<std::string, 16> texts = [] {
    const char* parts[4] = {"torch.compile", "Liger's fused linear cross-entropy (the chunked loss replayed in its place)",
                            "the 8-bit AdamW or Lion states (SGD's momentum buffers replayed in their place)",
                            "FSDP units of their own for the embedding and head"};
    std::array<std::string, 16> r;
    for (unsigned k = 0; k < 16; ++k)
      for (unsigned b = 0; b < 4; ++b)
        if ((k >> b) & 1U) r[k] += (r[k].empty() ? "" : ", ") + std::string(parts[b]);
    return r;
  }();
  return texts[mask & 15U].c_str();
}

/// A configuration whose replay stands in for another's (replay_stand_in).
struct replay_stand_in_config {
  training_config config;  ///< the stand-in: the plan with the parts the trace does not describe replaced
  unsigned left_out = 0;   ///< what it replaces (stand_in_part bits)
};

/// The configuration whose replay stands in for `c` when the trace does not describe `c` itself, or nullopt: the plan
/// with each part the trace does not describe but whose allocations follow a traced one replaced by that one, when
/// the result is replayable:
/// - torch.compile on the hf stack → eager. The hf stack compiles the decoder blocks only (the reference trainer's
///   `apply_compile`, apps/train/bwtrain/parallel.py; bwplan's memory_shape::compile and compiled_loss: the loss stays
///   eager on hf), so the requests the allocator's slack follows are the eager step's: the loss's logits buffers, the
///   checkpoints, the parameters, gradients and optimizer states; compiling only removes tensors a non-checkpointed
///   block saves (stack_saved_delta) and fuses its element-wise intermediates.
/// - Liger's fused linear cross-entropy (hf) → the trainer's chunked loss: both run the head and loss over token
///   chunks whose logits live one chunk at a time, beside the whole head input (loss_buffer_bytes). Liger computes the
///   head's weight gradient and the input gradient in the forward (loss_buffers::head_gradient, which the walk counts),
///   so the slack it borrows is of a step without that `w·V·h` at the end of the forward.
/// - 8-bit AdamW, paged 8-bit AdamW, Lion → SGD with momentum: states made once per parameter in the first step, in
///   parameter order, and a fused update with no full-size temporaries (bitsandbytes `Optimizer1State` /
///   `Optimizer2State` `init_state`, torch/optim/sgd.py); the states' sizes differ and are priced by the shift below
///   (the paged states live outside the allocator: memory_estimate::paged_states).
/// - FSDP units of their own for the embedding and head → both in the root (the same tensors, gathered for longer).
/// apply_allocator_replay adds the stand-in's slack (peak reserved − peak allocated of its replay) to this plan's peak
/// allocated, against a budget shifted by the difference of their peak allocated. Not validated against a measured run
/// of these settings (none in the ground truth); it keeps the verdict from jumping between the replay and the cheap
/// bound (which reads GiBs off the replay at the same allocated) when one of them is added.
[[nodiscard]] inline std::optional<replay_stand_in_config> replay_stand_in(const model_spec& m, const training_config& c) noexcept {
  replay_stand_in_config r{c, 0};
  training_config& e = r.config;
  if (c.stack == training_stack::hf && c.compile) { e.compile = false; r.left_out |= stand_in_compile; }
  if (c.stack == training_stack::hf && c.loss == loss_impl::liger) { e.loss = loss_impl::chunked; r.left_out |= stand_in_liger; }
  if (c.optim == optimizer_kind::adamw_8bit || c.optim == optimizer_kind::paged_adamw_8bit || c.optim == optimizer_kind::lion) {
    e.optim = optimizer_kind::sgd;
    r.left_out |= stand_in_optimizer;
  }
  if (c.fsdp_embedding_units) { e.fsdp_embedding_units = false; r.left_out |= stand_in_emb_units; }
  if (r.left_out == 0 || !replayable(m, e)) return std::nullopt;
  return r;
}

/// Whether a caching-allocator replay prices configuration `c`: the trace describes it (replayable) or a stand-in's
/// does (replay_stand_in).
[[nodiscard]] inline bool replay_applies(const model_spec& m, const training_config& c) noexcept {
  return replayable(m, c) || replay_stand_in(m, c).has_value();
}

/// The replay term of configuration `c` of `m` (see allocator_replay).
[[nodiscard]] inline allocator_replay allocator_replay_of(const model_spec& m, const training_config& c,
                                                          const memory_shape& s, const runtime_overheads& rt) {
  allocator_replay r;
  r.replayable = replayable(m, c);
  r.policy = rt.replay;
  r.band = rt.replay_band;
  r.stop_device_peak = rt.replay_stop_device_peak;
  r.settings = rt.allocator;
  r.settings.expandable_segments = c.expandable_segments;
  if (!r.replayable || r.policy == runtime_overheads::replay_policy::never) return r;  // (no trace to build)
  alloc::step_shape& t = r.shape;
  t.hidden = m.hidden; t.layers = m.layers; t.heads = m.heads; t.kv_heads = m.kv_heads; t.head_dim = m.head_dim;
  t.intermediate = m.intermediate; t.vocab = m.vocab; t.micro_batch = c.micro_batch; t.seq = c.seq_len;
  t.tied = m.tied_embeddings; t.qkv_bias = m.qkv_bias;
  t.amp = s.amp;
  t.fsdp2 = s.fsdp;
  t.shards = s.fsdp ? c.shard_size() : 1;
  t.reshard_after_forward = !s.grad_op;
  t.meta_init = (s.fsdp || s.ddp) && c.world_size > 1;  // the reference trainer builds on the meta device (measure.py: one GPU, on the device)
  t.ddp = s.ddp && !s.fsdp;
  t.foreach_adamw = c.optimizer == optimizer_impl::foreach && c.optim == optimizer_kind::adamw;
  t.optimizer = c.optim == optimizer_kind::sgd         ? alloc::step_shape::optimizer_kind::sgd
                : c.optim == optimizer_kind::adafactor ? alloc::step_shape::optimizer_kind::adafactor
                                                       : alloc::step_shape::optimizer_kind::adamw;
  t.eager_norm = s.eager_norm;
  t.qk_norm = m.qk_norm;
  t.chunked_loss = c.loss == loss_impl::chunked;  // (the hf stack's: other stacks are not replayed)
  // micro-batches after the second repeat its allocation sequence exactly (the gradients, FSDP2's sharded ones, already
  // exist from the first), so the replay runs at most two per step: the same peaks as all of them (test "allocator:
  // gradient accumulation ..."), except where block splitting lands differently: a review found one of 1,728
  // configurations (no out-of-memory) 0.2 % higher with two than with three or more, none lower
  t.grad_accum = std::min<std::int64_t>(c.grad_accum, 2);
  t.checkpointed.resize(static_cast<std::size_t>(m.layers));
  for (std::int64_t i = 0; i < m.layers; ++i) t.checkpointed[static_cast<std::size_t>(i)] = s.blocks.checkpointed(i);
  if (c.format == compute_format::fp8 || c.format == compute_format::fp8_rowwise || c.format == compute_format::mxfp8) {
    t.float8_rowwise = c.format == compute_format::fp8_rowwise;
    t.mxfp8 = c.format == compute_format::mxfp8;
    t.float8.resize(static_cast<std::size_t>(m.layers));
    for (std::int64_t i = 0; i < m.layers; ++i) t.float8[static_cast<std::size_t>(i)] = s.blocks.quantized(i);
  }
  t.workspace = static_cast<std::uint64_t>(rt.cublas_workspace.raw());
  return r;
}

/// Replays the step through the caching allocator when the policy asks for it, and takes peak reserved and the
/// fit verdict from the replay: out of memory when a request fails after the cache is released, with the budget
/// the capacity less the CUDA context and NCCL. Source: alloc::caching_allocator, alloc::replay_step_trace.
inline void apply_allocator_replay(const allocator_replay& r, memory_estimate& e) {
  if (!r.replayable || r.policy == runtime_overheads::replay_policy::never) return;
  if (r.policy == runtime_overheads::replay_policy::near_fit_line &&
      std::abs(e.device_peak().raw() / e.capacity.raw() - 1) > r.band)
    return;
  alloc::allocator_settings st = r.settings;
  const double budget = std::max(0.0, (e.capacity - e.non_pytorch).raw());
  // a stand-in allocating `more` bytes than this plan (fewer where negative: SGD's bf16 momentum in place of 8-bit
  // states and their fp32 absmax, 2.03 B per parameter)
  // runs against a budget larger by as much: at the same distance from its line as this plan is from the GPU's (its
  // cache released at the same point, its out of memory this plan's)
  const double more = r.stand_in != nullptr ? r.stand_in_allocated - e.peak_allocated.raw() : 0.0;
  st.budget = static_cast<std::uint64_t>(std::max(0.0, budget + more));
  alloc::caching_allocator a(st);
  alloc::step_shape shape = r.shape;
  // (a stand-in's step passing a threshold says nothing of this plan's, which allocates less: it runs whole)
  if (std::isfinite(r.stop_device_peak) && r.stand_in == nullptr)
    shape.stop_reserved_above = static_cast<std::uint64_t>(std::max(0.0, r.stop_device_peak - e.non_pytorch.raw()));
  const alloc::replay_result res = alloc::replay_step_trace(shape, a);
  if (r.stand_in != nullptr) {
    // the stand-in's slack (peak reserved − peak allocated of its replay) on this plan's allocated (replay_stand_in);
    // out of memory against its shifted budget: this plan is, with what it reserved less the shift
    // (never above what the stand-in reserves where this plan allocates less, nor above it plus the difference where
    // this plan allocates more; nor past the budget, where the allocator releases its cache before it fails)
    const double reserved = static_cast<double>(res.peak_reserved), slack = std::max(0.0, reserved - static_cast<double>(res.peak_allocated));
    const double own = e.peak_allocated.raw();
    e.peak_reserved = bytes::base(res.oom ? std::max(own, reserved - more)
                                          : std::max(own, std::min({own + slack, reserved - std::min(0.0, more), budget})));
    e.fits = !res.oom && e.device_peak() <= e.capacity;
    e.replayed = true;
    e.replay_stand_in = r.stand_in;
    return;
  }
  e.peak_reserved = bytes::base(static_cast<double>(res.peak_reserved));
  // Out of memory: past the budget the replay releases the cache at every failing request, as PyTorch does before it
  // raises, so its reserved is what the step holds with the cache released, a lower bound of its need, and its trace
  // can end under the estimate's peak allocated (Mistral-7B at micro-batch 2 on one H100 read 109.43 GiB reserved under
  // 110.05 allocated): reserved never reads below allocated. (Replaying without a budget gives the other bound, what
  // the step reserves where nothing is released: 200 GiB of slack for Llama-3.1-70B on one GPU, far above what a GPU
  // just large enough would hold after its retries.)
  if (res.oom && e.peak_reserved < e.peak_allocated) e.peak_reserved = e.peak_allocated;
  e.fits = !res.oom && e.device_peak() <= e.capacity;
  e.replayed = true;
}

}  // namespace terms

/// The terms of the memory model for one configuration (see bwplan::terms): what compose_memory adds up.
/// Change one term here (pipeline stages, LoRA adapters, CPU offload) and compose_memory carries it through
/// every moment of the step.
struct memory_terms {
  terms::memory_shape shape;
  terms::model_states states;
  terms::saved_activations activations;
  terms::loss_buffers loss;
  terms::weight_copies weights;
  terms::transient_buffers transient;
  terms::allocator_overheads allocator;
  terms::allocator_replay replay;
  terms::host_offload host;  ///< CPU offload: what one rank keeps in host memory (zero without offload)
};

/// Every memory term of configuration `c` of `m` on `gpu` (with pipeline parallelism: of pipeline rank `stage`,
/// rank 0 when null). Throws invalid_request if `c` is invalid (see validate), its expert parallelism does not
/// fit `m` or its pipeline stages do not (validate_pipeline).
[[nodiscard]] inline memory_terms compute_memory_terms(const model_spec& m, const training_config& c, const gpu_spec& gpu,
                                                       const runtime_overheads& rt = {}, const pipeline_rank* stage = nullptr);

/// Adds up the terms of `t` at every moment of the step (defined below; see there).
[[nodiscard]] inline memory_estimate compose_memory(const memory_terms& t);

namespace detail {
/// compute_memory_terms without its validation (the callers that evaluate several pipeline ranks validate once).
[[nodiscard]] inline memory_terms memory_terms_of(const model_spec& m, const training_config& c, const gpu_spec& gpu,
                                                  const runtime_overheads& rt, const pipeline_rank* stage) {
  memory_terms t;
  t.shape = terms::memory_shape_of(m, c, gpu, stage);
  t.states = terms::model_state_bytes(t.shape);
  t.activations = terms::saved_activation_bytes(m, t.shape);
  t.loss = terms::loss_buffer_bytes(t.shape);
  t.weights = terms::weight_copy_bytes(t.shape);
  t.transient = terms::transient_bytes(t.shape, t.activations, t.weights);
  t.allocator = terms::allocator_bytes(t.shape, gpu, rt);
  t.replay = terms::allocator_replay_of(m, c, t.shape, rt);
  if (!t.replay.replayable && rt.replay != runtime_overheads::replay_policy::never) {
    if (const auto e = terms::replay_stand_in(m, c)) {  // e.g. torch.compile on hf: the eager step's replay stands in
      runtime_overheads cheap = rt;
      cheap.replay = runtime_overheads::replay_policy::never;
      const double stand_in_allocated = compose_memory(memory_terms_of(m, e->config, gpu, cheap, stage)).peak_allocated.raw();
      t.replay = terms::allocator_replay_of(m, e->config, terms::memory_shape_of(m, e->config, gpu, stage), rt);
      t.replay.stand_in = terms::stand_in_text(e->left_out);
      t.replay.stand_in_allocated = stand_in_allocated;
    }
  }
  t.host = terms::host_offload_bytes(t.shape, t.activations.offloaded_checkpoints.raw());
  return t;
}
}  // namespace detail

inline memory_terms compute_memory_terms(const model_spec& m, const training_config& c, const gpu_spec& gpu, const runtime_overheads& rt,
                                         const pipeline_rank* stage) {
  validate(c);
  detail::validate_moe(m, c);
  validate_pipeline(m, c);
  return detail::memory_terms_of(m, c, gpu, rt, stage);
}

namespace terms {

/// The largest moment of the block-by-block backward walk (compose_memory): which block and what is alive.
struct block_backward_moment {
  std::int64_t block = -1;   ///< the block running its backward at the largest moment; -1 for a model without blocks
  double total = -1;         ///< `static_part` + the four below, bytes
  double activations = 0;    ///< saved activations of the blocks ≤ block (its own rebuilt by the recompute), bytes
  double compute_weights = 0;  ///< autocast copies, the quantized copy of the block, grad-op kept blocks, bytes
  double gradients = 0;      ///< the gradients of the head and of the blocks above, bytes
  double transient = 0;      ///< activation gradients, block gradient buffers, dequantized weight, offload staging, bytes
};

/// The largest moment of the walk over blocks L−1 … 0 of `t` in backward, over `static_part` (model states, workspace,
/// buckets, the FSDP root: what every moment holds, bytes) and `head_grad` (the head's gradient alive from the loss
/// backward on, bytes). The first largest moment in the walk's order wins.
///
/// The moment block i runs its backward holds the activations of blocks ≤ i (its own rebuilt by the recompute;
/// torch.utils.checkpoint non-reentrant), the autocast copies of the blocks ≤ i not recomputed, the gradients of the
/// blocks above and the working set. From one block of a class (quantized or not, recomputed or not) to the next of
/// that class, in one quantization range, the moment changes by the same amount, so along the blocks of one range with
/// one residue i mod every it is linear in i and largest at either end. Those ends (at most 2 · 3 · every blocks) are
/// all it evaluates, highest block first; the sums above a block are counted per class (block_layout::count). A
/// checkpointing period above 8 walks every block. Same values as the walk over every block (tests/memory_test.cpp).
[[nodiscard]] inline block_backward_moment block_backward_peak(const memory_terms& t, double static_part, double head_grad) noexcept {
  const memory_shape& s = t.shape;
  const saved_activations& act = t.activations;
  const weight_copies& wc = t.weights;
  const std::int64_t L = s.blocks.layers;
  const double saved_all = act.all_blocks.raw();
  const double gres = t.states.block_gradient.raw();
  const double tr = t.transient.activation_gradients.raw() + t.transient.block_gradient_buffers.raw() +
                    t.transient.dequantized_weight.raw() + t.transient.offload_staging.raw();
  const double amp_block = wc.autocast_block.raw();
  // what a low-precision block holds from its forward (or recompute) to its backward: autocast's copy, NVFP4's saved weight
  const double amp_low = wc.autocast_block_low.raw() + wc.saved_quantized_block.raw();
  const double kept_block = wc.grad_op_block.raw();
  const double wcopy = wc.quantized_block.raw();
  const double cw0 = wc.autocast_after_forward.raw();
  const std::int64_t every = s.blocks.ac.recomputes_blocks() && s.blocks.ac.every > 0 ? s.blocks.ac.every : 0;
  const std::int64_t qf = std::clamp<std::int64_t>(s.blocks.q_first, 0, L), qe = std::clamp<std::int64_t>(s.blocks.q_end, qf, L);
  const double kept_lo_ck = act.kept(act.low_precision, true), kept_lo = act.kept(act.low_precision, false);
  const double kept_hi_ck = act.kept(act.high_precision, true), kept_hi = act.kept(act.high_precision, false);
  block_backward_moment best;  // block -1, total -1: no moment yet
  auto visit = [&](std::int64_t i) {  // the moment of block i's backward
    const bool ck = every > 0 && static_cast<std::uint32_t>(i) % static_cast<std::uint32_t>(every) == 0, qz = s.blocks.quantized(i);
    const activation_inventory& inv = qz ? act.low_precision : act.high_precision;
    const double saved_i = act.kept(inv, ck);
    const double rebuilt = recompute(saved_i, inv.block_saved * act.T);
    const double extra_cw = (ck ? (qz ? amp_low : amp_block) : 0) + (qz ? wcopy : 0) + kept_block * static_cast<double>(i + 1);
    // blocks above i: done with their backward (activations freed, gradients kept)
    const auto n = s.blocks.count(i + 1, L);
    const std::int64_t above = L - 1 - i;
    const double freed = static_cast<double>(n.low_recomputed) * kept_lo_ck + static_cast<double>(n.low) * kept_lo +
                         static_cast<double>(n.high_recomputed) * kept_hi_ck + static_cast<double>(n.high) * kept_hi;
    // activation offload: base counts two checkpoints in flight (saved_activations::offload_in_flight): block i's own,
    // back for its recompute, and block i − 1's, prefetched. Block i's own is the input of its recompute, already in
    // `rebuilt` (the full inventory, as without offload, where the kept checkpoint and the rebuilt rest add up to it),
    // and block 0 has none below it to prefetch: one checkpoint beyond the recompute, none at block 0
    const double in_rebuilt = act.offloaded ? (i == 0 ? 1.0 : 0.5) * act.offload_in_flight.raw() : 0.0;
    const double acts = saved_all - freed - in_rebuilt;
    const double cw = cw0 - amp_low * static_cast<double>(n.low) - amp_block * static_cast<double>(n.high);
    const double grads = head_grad + gres * static_cast<double>(above);
    const double v = static_part + acts + rebuilt + cw + extra_cw + grads + tr;
    if (v > best.total) best = {i, v, acts + rebuilt, cw + extra_cw, grads, tr};
  };
  {
    // the ends of each (range, residue) progression, highest block first; a long period walks every block
    const std::int64_t period = every > 0 ? every : 1;
    constexpr std::int64_t max_ends = 48;
    std::int64_t ends[max_ends];
    std::int64_t n_ends = 0;
    if (6 * period <= max_ends) {
      const std::int64_t cuts[4] = {0, qf, qe, L};
      for (int k = 2; k >= 0; --k) {
        const std::int64_t a = cuts[k], b = cuts[k + 1];
        if (b <= a) continue;
        std::int64_t hi[max_ends / 6], lo[max_ends / 6];
        std::int64_t nr = 0;
        for (std::int64_t j = b - 1; j >= a && j > b - 1 - period; --j) {  // one block of each residue, the highest
          hi[nr] = j;
          lo[nr] = a + ((j - a) % period);  // the lowest block with j's residue
          ++nr;
        }
        // highest blocks first (they are above every lowest one of another residue except within the last period)
        std::int64_t merged[max_ends / 3];
        std::int64_t nm = 0;
        for (std::int64_t r = 0; r < nr; ++r) merged[nm++] = hi[r];
        for (std::int64_t r = 0; r < nr; ++r)
          if (lo[r] != hi[r]) merged[nm++] = lo[r];
        std::sort(merged, merged + nm, [](std::int64_t x, std::int64_t y) { return x > y; });
        for (std::int64_t r = 0; r < nm; ++r) ends[n_ends++] = merged[r];
      }
      for (std::int64_t r = 0; r < n_ends; ++r) visit(ends[r]);
    } else {
      for (std::int64_t i = L - 1; i >= 0; --i) visit(i);
    }
  }
  return best;
}

}  // namespace terms

/// The liveness walk over one steady-state step: adds the terms at the moments each is alive and keeps the
/// largest moment of each phase.
///
/// Before forward: model states + workspace (+ DDP buckets; + gradients when accumulating). Forward: each
/// finished block's saved activations, the weight copies alive (autocast cache or FSDP2 root and gathered
/// blocks, quantized copies of the block running), the last block's working set, the loss buffers. Backward:
/// the loss backward, then block by block from the last: the activations of blocks below, the recompute of the
/// block, the gradients of blocks above, the activation gradients and block gradient buffers; at its end the
/// FSDP2 root reduce-scatter. With the embedding and head as FSDP units of their own (memory_shape::emb_units) the
/// head is gathered only while the loss runs forward and backward, its gradient reduce-scattered after the loss
/// backward (a moment of its own: the head's backward), and the embedding gathered in its backward at the end; the
/// root holds the final norm. Optimizer: the gradients and the optimizer's temporaries (optimizer in backward: one
/// parameter's gradient and step at a time, the untied head's right after the loss backward). Reserved adds the
/// allocator's slack at the peak moment.
[[nodiscard]] inline memory_estimate compose_memory(const memory_terms& t) {
  const terms::memory_shape& s = t.shape;
  const terms::saved_activations& act = t.activations;
  const terms::weight_copies& wc = t.weights;
  const std::int64_t L = s.blocks.layers;

  memory_breakdown base;
  base.parameters = t.states.parameters;
  base.optimizer_states = t.states.optimizer_states;
  base.workspace = t.allocator.workspace;
  base.ddp_buckets = wc.ddp_buckets;
  base.gradients = t.states.accumulated_gradients;  // kept across micro-batches (Megatron: the main-gradient buffer)
  base.activations = act.in_flight + act.offload_in_flight;  // pipeline: the other micro-batches in flight; offloaded checkpoints in flight
  // Megatron's bf16 model / the distributed optimizer's replicated bf16 parameters, every moment (0 otherwise)
  base.compute_weights = wc.bf16_model + wc.zero1_params + wc.te_weight_cache;

  const double root = wc.fsdp_root.raw();
  const double kept_all = wc.grad_op_all.raw();
  const double saved_all = act.all_blocks.raw();
  const double final_saved = act.final_saved.raw();

  memory_breakdown best = base;
  step_phase best_phase = step_phase::forward;
  double best_total = -1;
  memory_breakdown phase_best[3] = {base, base, base};
  double phase_total[3] = {-1, -1, -1};
  auto consider = [&](const memory_breakdown& b, step_phase p) {
    const double v = b.total().raw();
    if (v > best_total) { best_total = v; best = b; best_phase = p; }
    const auto i = static_cast<std::size_t>(p);
    if (v > phase_total[i]) { phase_total[i] = v; phase_best[i] = b; }
    return v;
  };

  memory_estimate e;
  // ---- forward: the loss running
  memory_breakdown f = base;
  // NVFP4Linear's saved FP4 weights of the blocks not recomputed (autocast's copies of every block are in autocast_all)
  const double saved_q = wc.saved_quantized_block.raw();
  const double saved_q_all = saved_q > 0 ? saved_q * static_cast<double>(s.blocks.count(0, L).low) : 0;
  f.compute_weights = base.compute_weights + bytes::base(root + wc.fsdp_head_unit.raw() + kept_all + wc.autocast_all.raw() + saved_q_all);
  f.activations = base.activations + bytes::base(saved_all + final_saved);
  f.logits = t.loss.saved + t.loss.forward_transient;
  f.gradients += t.loss.head_gradient;
  double fwd_peak = consider(f, step_phase::forward);
  {  // last block running: its working set, the gathered blocks and its quantized weights
    memory_breakdown lb = base;
    const std::int64_t i = L - 1;
    // (the running block's own FP4 copies are in quantized_block_forward)
    lb.compute_weights = base.compute_weights + bytes::base(root + wc.fsdp_gathered.raw() + kept_all + wc.autocast_blocks.raw() +
                                                            (saved_q > 0 ? saved_q * static_cast<double>(s.blocks.count(0, i).low) : 0) +
                                                            (s.blocks.quantized(i) ? wc.quantized_block_forward.raw() : 0));
    lb.activations = base.activations + bytes::base(saved_all - act.block(i));
    lb.transient = bytes::base(terms::forward_working_set(act, t.transient, i) + t.transient.dequantized_weight.raw() +
                               t.transient.offload_staging.raw());
    fwd_peak = std::max(fwd_peak, consider(lb, step_phase::forward));
  }
  memory_breakdown after_fwd = base;
  // the head's autocast copy is saved by its mm for backward; the hf stack's checkpointed chunks save nothing (each
  // chunk's recompute casts the head again: loss_buffer_bytes), so autocast's copy goes when autocast exits
  const bool chunk_ckpt = s.loss == loss_impl::chunked && s.stack == training_stack::hf;
  after_fwd.compute_weights = base.compute_weights + bytes::base(root + kept_all + (chunk_ckpt ? 0 : wc.autocast_head.raw()) +
                                                                 wc.autocast_after_forward.raw());
  after_fwd.activations = base.activations + bytes::base(saved_all + final_saved);
  after_fwd.logits = t.loss.saved;
  after_fwd.gradients += t.loss.head_gradient;

  // ---- backward
  double bwd_peak = 0;
  {  // the loss backward
    memory_breakdown lp = after_fwd;
    lp.compute_weights += wc.fsdp_head_unit;  // a head unit of its own is gathered again for its backward
    if (!s.emb_units) lp.compute_weights += wc.fsdp_loss_prefetch;  // (a head unit of its own: the head is prefetched)
    lp.transient = t.loss.backward_transient;
    bwd_peak = consider(lp, step_phase::backward);
    if (s.emb_units && !s.adapters) {  // the head unit's backward (the loss's saved tensors are gone): its GEMMs read the
      // logits' bf16 gradient (one chunk's for torchtune's per-chunk head) and the gathered weight and write the bf16
      // weight gradient; then FSDP2's post_backward reshards the unit and copies the gradient into the reduce-scatter's
      // input in the reduce dtype (torch/distributed/fsdp/_fully_shard/_fsdp_param_group.py `post_backward`,
      // `_fsdp_collectives.py` `foreach_reduce`)
      const double TV = s.T * s.V, Vh = s.head_w;
      memory_breakdown hb = after_fwd;
      // (torchtune applies the head per chunk; torchtitan's chunks are views of one logits tensor)
      const bool per_chunk = s.loss == loss_impl::chunked && s.stack == training_stack::torchtune;
      hb.logits = bytes::base(per_chunk ? 2 * TV / terms::stack_loss_chunks : 2 * TV);
      hb.compute_weights += wc.fsdp_head_unit + wc.fsdp_loss_prefetch;  // the head unit's pre-backward prefetched block L - 1
      hb.transient = bytes::base(2 * Vh);
      bwd_peak = std::max(bwd_peak, consider(hb, step_phase::backward));
      memory_breakdown hr = after_fwd;
      hr.logits = bytes{};
      hr.transient = t.transient.head_reduce_scatter;
      hr.compute_weights += wc.fsdp_loss_prefetch;
      bwd_peak = std::max(bwd_peak, consider(hr, step_phase::backward));
    }
    if (s.in_bwd && !s.tied) {  // optimizer in backward: the untied head is stepped as soon as its gradient is complete
      memory_breakdown hs = after_fwd;
      hs.gradients += bytes::base(s.w * s.head_w);
      hs.transient = t.transient.optimizer;
      bwd_peak = std::max(bwd_peak, consider(hs, step_phase::backward));
    }
  }
  const double head_grad = s.loss == loss_impl::liger ? t.loss.head_gradient.raw()
                                                                                          : t.states.head_gradient.raw();
  const double static_part = base.total().raw() + root;
  const terms::block_backward_moment bm = terms::block_backward_peak(t, static_part, head_grad);
  const std::int64_t best_i = bm.block;
  const double best_acts = bm.activations, best_cw = bm.compute_weights, best_grads = bm.gradients, best_tr = bm.transient;
  if (best_i >= 0) {
    memory_breakdown b = base;  // (its activations and compute weights: base's plus the walk's, below)
    b.activations = base.activations + bytes::base(best_acts);
    b.compute_weights = base.compute_weights + bytes::base(root + best_cw);
    b.gradients += bytes::base(best_grads);
    b.transient = bytes::base(best_tr);
    bwd_peak = std::max(bwd_peak, consider(b, step_phase::backward));
  }
  memory_breakdown after_bwd = base;
  after_bwd.gradients = t.states.gradients;
  after_bwd.activations = bytes{};  // every micro-batch's backward has run
  {  // end of backward: FSDP root reduce-scatter. FSDPParamGroup.post_backward takes the unsharded gradients, reshards
     // (frees the gathered root), drops the last block's reduce-scatter input and only then foreach_reduce allocates the
     // root's: the gathered root is alive with the bf16 gradients and that input, the fp32 copy with the bf16 gradients
     // after both are gone (torch/distributed/fsdp/_fully_shard/_fsdp_param_group.py `post_backward`,
     // /work/shared/reference/allocator.md §6)
    memory_breakdown eb = after_bwd;
    // the root's sharded gradient is the reduce-scatter's output, allocated after its input: not there yet in the first
    // micro-batch's backward (with accumulation it is, from the first). Under optimizer offload the sharded gradients
    // go to the host (model_state_bytes_in_allocator's `gradients` is 0; only the head's bf16 gradient, held apart, is
    // on the GPU): nothing to take out (a sweep found the breakdown's gradients at -0.49 GiB, the peak understated)
    const double root_grads = s.emb_units ? s.root_params - s.head_w : s.root_params;
    if (s.fsdp && !s.accum && !s.adapters && !s.in_bwd && !s.off_opt) eb.gradients -= bytes::base(s.w * root_grads / s.n);
    eb.compute_weights = base.compute_weights + wc.fsdp_root + wc.fsdp_embedding_unit;  // (an embedding unit: gathered for its backward)
    eb.transient = t.transient.root_before_reshard;
    bwd_peak = std::max(bwd_peak, consider(eb, step_phase::backward));
    eb.compute_weights = base.compute_weights;
    eb.transient = t.transient.root_reduce_scatter;
    bwd_peak = std::max(bwd_peak, consider(eb, step_phase::backward));
    // then the bf16 gradients go and the output (the root's sharded gradient) is allocated beside the input, which
    // reduce_scatter_state holds to the end of backward (the root's final callback clears reduce_scatter_states): on one
    // rank the output is as large as the input
    const double rs_input = t.transient.root_reduce_scatter.raw() - 2 * root_grads;
    if (s.fsdp && !s.adapters && rs_input > 0) {
      eb.gradients = after_bwd.gradients;
      eb.transient = bytes::base(rs_input);
      bwd_peak = std::max(bwd_peak, consider(eb, step_phase::backward));
    }
  }
  // the embedding's backward, the last node: `embedding_dense_backward` returns the whole gradient (w·V·h, the weight's
  // dtype) while block 0's input gradient (the residual dtype) is alive, and when the weight already has a gradient — a
  // tied head's, waiting in the AccumulateGrad node's input buffer since the loss backward, or an earlier micro-batch's
  // `.grad` — it is added into that one and dropped (torch/csrc/autograd/input_buffer.cpp `accumulate`, AccumulateGrad
  // `accumulateGrad`): one more w·V·h beside every gradient (the replay's `dE`, alloc::replay_step_trace; the walk missed
  // it: Llama-3.2-1B, tied, 1 × 2048 under autocast with full checkpointing peaks there, 0.59 GiB above the walk's
  // moments). Not under FSDP (the root's moments above), Megatron (its main-gradient buffer), a frozen embedding or the
  // gradients on the host. Stepped in backward (no `.grad` kept across micro-batches), the tied head's gradient still
  // waits in the input buffer until the embedding's backward is done and its hook steps it: both beside the moment's
  // other gradients, none (a review found the moment skipped there)
  if (s.embedding && ((s.tied && s.head) || (s.accum && !s.in_bwd)) && !s.fsdp && !s.megatron && !s.adapters && !s.off_opt) {
    memory_breakdown ee = after_bwd;
    ee.activations = t.activations.in_flight;  // pipeline: an earlier micro-batch's backward, the others in flight
    ee.transient = bytes::base((s.in_bwd ? 2 : 1) * s.w * s.emb_w + (s.amp ? 4 : 2) * s.T * s.h);
    bwd_peak = std::max(bwd_peak, consider(ee, step_phase::backward));
  }
  // ---- optimizer
  memory_breakdown o = after_bwd;
  o.transient = t.transient.optimizer;
  // optimizer in backward: the last and largest steps run at the end of backward (a tied embedding's, with its
  // gradient); the largest parameter's gradient and its step's temporary stand for them
  if (s.in_bwd) o.gradients += bytes::base(s.w * s.largest_param);
  const double opt_peak = consider(o, step_phase::optimizer);

  e.at_peak = best;
  e.at_forward_peak = phase_best[0];
  e.at_backward_peak = phase_best[1];
  e.at_optimizer_peak = phase_best[2];
  e.peak_phase = best_phase;
  e.peak_allocated = best.total();
  e.forward_peak = bytes::base(fwd_peak);
  e.backward_peak = bytes::base(bwd_peak);
  e.optimizer_peak = bytes::base(opt_peak);
  e.before_forward = base.total();
  e.after_forward = after_fwd.total();
  e.after_backward = after_bwd.total();
  const double frag = terms::fragmentation_slack(t.allocator, best);
  e.peak_reserved = e.peak_allocated + bytes::base(frag + terms::reduce_scatter_pool(t.allocator, t.states, best, best_phase));
  e.non_pytorch = t.allocator.non_pytorch;
  e.capacity = t.allocator.capacity;
  e.fits = e.device_peak() <= e.capacity;
  e.host_per_gpu = t.host.total();
  terms::apply_allocator_replay(t.replay, e);
  // a paged optimizer's managed memory: on the GPU where the peak leaves room, the rest paged out to the host
  e.paged_states = t.states.paged_states;
  e.paged_on_host = bytes::base(std::max(0.0, e.paged_states.raw() - std::max(0.0, (e.capacity - e.device_peak()).raw())));
  return e;
}

namespace terms {

/// Sets `e.allocator_setting` (see allocator_setting_verdict): evaluates the step of `t` again with the other
/// `expandable_segments` setting when that could change the verdict of `e` — a plan that does not fit without
/// expandable segments, or one that fits with them. Expandable segments map 20 MiB pages into one segment per stream
/// and pool and free blocks merge within it (`expandable_segments:True`, c10/cuda/CUDACachingAllocator.cpp
/// A:2178-2328; /work/shared/reference/allocator.md §3): the replay takes them as the allocator does (simplified);
/// the cheap bound drops the freed bf16-logits segment. Where neither a replay nor that segment can move the verdict,
/// nothing is evaluated (the search's hot loop), nor where the replay stops at a threshold
/// (runtime_overheads::replay_stop_device_peak: a caller that asks only for the verdict against its own line, as
/// search_plans does, which replays the other setting itself and sets the verdict from its line).
inline void allocator_setting_check(const memory_terms& t, memory_estimate& e) {
  if (e.replayed && std::isfinite(t.replay.stop_device_peak)) return;
  const bool expandable = t.shape.expandable;
  if (e.fits != expandable) return;  // does not fit without expandable segments, or fits with them
  if (!expandable && !e.replayed && e.device_peak() - t.allocator.logits_segment > e.capacity) return;  // cannot fit either way
  memory_terms o = t;
  o.shape.expandable = !expandable;
  o.replay.settings.expandable_segments = !expandable;
  o.allocator.logits_segment = freed_logits_segment(o.shape);
  const memory_estimate f = compose_memory(o);
  if (f.fits != e.fits)
    e.allocator_setting = expandable ? allocator_setting_verdict::needs_expandable : allocator_setting_verdict::fits_if_expandable;
}

}  // namespace terms

/// Peak per-GPU memory of one steady-state training step (AdamW, step ≥ 2, gradients set to None):
/// compose_memory(compute_memory_terms(m, c, gpu, rt)).
///
/// The terms (bwplan::terms): model states (parameters w·P/N, AdamW states 2·w·P/N, w = 4 for fp32 master, 2
/// for bf16; N = FSDP shard size; gradients), saved activations (per block: all of them, the per-op SAC subset,
/// or only the input when checkpointed; final norm and head input), loss buffers (standard: bf16 logits 2·T·V +
/// fp32 logits 4·T·V + log-softmax 4·T·V, the log-softmax saved; chunked: one chunk), weight copies and
/// communication buffers (autocast cache, FSDP2 gathered blocks and root, grad-op kept blocks, quantized copies,
/// DDP buckets), transient working sets (activation gradients, block gradient buffers, recompute, foreach
/// optimizer temporaries) and the allocator (fragmentation, FSDP2 reduce-scatter pool, context and NCCL).
/// T = micro-batch × sequence tokens. Attention is FlashAttention/SDPA (no s² term). Sources on each term;
/// calibrated against `h200-calibration.jsonl`. @sa docs/methodology.md#memory
///
/// Pipeline parallelism: the memory of the most loaded rank, the largest device peak of ranks 0, 1 and pp − 1
/// (peak_memory_ranks; pipeline_rank_of for each rank's blocks, parameters and micro-batches in flight), with
/// `pipeline_rank` saying which. docs/scaling.md#pipeline-parallelism
///
/// Throws invalid_request if `c` is invalid (see validate).
[[nodiscard]] inline memory_estimate estimate_memory(const model_spec& m, const training_config& c, const gpu_spec& gpu,
                                                     const runtime_overheads& rt = {}) {
  if (c.pp <= 1) {
    const memory_terms t = compute_memory_terms(m, c, gpu, rt);
    memory_estimate e = compose_memory(t);
    terms::allocator_setting_check(t, e);
    return e;
  }
  validate(c);  // once for every rank
  detail::validate_moe(m, c);
  validate_pipeline(m, c);
  int ranks[3];
  const int n = peak_memory_ranks(c, ranks);
  memory_estimate best;
  for (int i = 0; i < n; ++i) {
    const pipeline_rank st = pipeline_rank_of(c, m.layers, leading_dense_blocks(m), ranks[i]);
    memory_estimate e = compose_memory(detail::memory_terms_of(m, c, gpu, rt, &st));
    e.pipeline_rank = ranks[i];
    if (i == 0 || e.device_peak() > best.device_peak()) best = e;
  }
  // what the allocator setting does to the most loaded rank
  const pipeline_rank st = pipeline_rank_of(c, m.layers, leading_dense_blocks(m), best.pipeline_rank);
  terms::allocator_setting_check(detail::memory_terms_of(m, c, gpu, rt, &st), best);
  return best;
}

/// One sentence on what the allocator setting does to the verdict of `e` (allocator_setting_verdict), or "" when
/// nothing: the line every output (terminal, Markdown, JSON, check) prints.
[[nodiscard]] inline std::string allocator_setting_note(const memory_estimate& e) {
  switch (e.allocator_setting) {
    case allocator_setting_verdict::fits_if_expandable:
      return "does not fit with the caching allocator's default segments, but fits with PYTORCH_CUDA_ALLOC_CONF="
             "expandable_segments:True (--expandable-segments: the plan file and the SageMaker job then carry it)";
    case allocator_setting_verdict::needs_expandable_for_headroom:
      return "keeps the headroom only with PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True, as planned: with the default "
             "segments the step's peak passes the share of the GPU the search keeps free";
    case allocator_setting_verdict::needs_expandable:
      return "fits only with PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True, as planned: with the default segments the step "
             "runs out of memory";
    default: return "";
  }
}

/// One sentence on where peak reserved of `e` (configuration `c` of `m`) comes from: the caching-allocator replay, or
/// the cheap bound with what keeps the step trace from describing the plan (terms::replay_blocker) and, on FSDP2
/// across ranks, the segments the replay of such plans keeps and this bound does not: the root's fp32 reduce-scatter
/// input, `4·P_root/tp` bytes (reduce dtype fp32, bf16 without fp32 masters), often twice because the first step's
/// optimizer states split the first, and its bf16 all-gather buffer `2·P_root/tp` on the all-gather stream (P_root:
/// embedding, untied head, final norm; docs/methodology.md#allocator). GiB in the sentence.
[[nodiscard]] inline std::string reserved_source_note(const model_spec& m, const training_config& c, const memory_estimate& e) {
  if (e.replayed && e.replay_stand_in != nullptr) {
    char buf[640];
    std::snprintf(buf, sizeof buf,
                  "allocated + the allocator slack of the same step without %s replayed through PyTorch's caching allocator "
                  "(%.2f GiB%s; docs/methodology.md#allocator)",
                  e.replay_stand_in, (e.peak_reserved - e.peak_allocated).raw() / 1073741824.0,
                  c.compile && c.stack == training_stack::hf ? "; the hf stack compiles the blocks, the loss and optimizer step stay eager" : "");
    return buf;
  }
  if (e.replayed) return "the step replayed through PyTorch's caching allocator (docs/methodology.md#allocator)";
  const char* why = terms::replay_blocker(m, c);
  std::string r = std::string("allocated + allocator slack (the cheap bound): the caching-allocator replay does not describe ") +
                  (why ? why : "this run (replay policy)");
  if (c.sharded() && c.shard_size() > 1 && c.shard != sharding::optimizer && c.offload == 0) {
    const parameter_count pc = count_parameters(m);
    const double root = static_cast<double>(pc.embedding + pc.lm_head + pc.final_norm) / std::max(1, c.tp);
    const double reduce = c.master == master_weights::fp32 ? 4 : 2, gib_ = 1073741824.0;
    char buf[320];
    std::snprintf(buf, sizeof buf,
                  "; on FSDP2 across ranks the replay of the plans it describes keeps the root's reduce-scatter input "
                  "(%.2f GiB here, often twice) and all-gather buffer (%.2f GiB) as segments of their own, which this bound "
                  "does not hold",
                  reduce * root / gib_, 2 * root / gib_);
    r += buf;
  }
  return r;
}

/// One sentence on a paged optimizer's states of `e` (memory_estimate::paged_states), or "" without one: how much
/// CUDA managed memory they take beside the device peak and how much of it is paged out to the host.
[[nodiscard]] inline std::string paged_states_note(const memory_estimate& e) {
  if (e.paged_states.raw() <= 0) return "";
  auto gib2 = [](bytes b) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.2f GiB", b.in(gib));
    return std::string(buf);
  };
  std::string s = gib2(e.paged_states) + " of 8-bit states in CUDA managed memory, outside PyTorch's allocator and the device peak";
  if (e.paged_on_host.raw() > 0)
    s += "; " + gib2(e.paged_on_host) + " of them do not fit beside the peak and are paged to the host (each optimizer step "
         "moves them over PCIe, not priced in the step time)";
  else
    s += "; they fit on the GPU beside the peak";
  return s;
}

/// estimate_memory, stopping at the first pipeline rank whose device peak exceeds `limit` (nullopt then): the
/// search's fit test, which with pp > 1 need not evaluate every rank of a plan that does not fit. The same
/// estimate as estimate_memory when every rank is within the limit. With `memo` (pp > 1), the ranks without the LM
/// head are taken from it when it is known (filled by a configuration that differs only in the loss), else evaluated
/// and stored in it; the result is the same either way.
[[nodiscard]] inline std::optional<memory_estimate> estimate_memory_within(const model_spec& m, const training_config& c, const gpu_spec& gpu,
                                                                           bytes limit, const runtime_overheads& rt = {},
                                                                           headless_ranks<memory_estimate>* memo = nullptr) {
  if (c.pp <= 1) {
    memory_estimate e = compose_memory(compute_memory_terms(m, c, gpu, rt));
    if (e.device_peak() > limit) return std::nullopt;
    return e;
  }
  validate(c);
  detail::validate_moe(m, c);
  validate_pipeline(m, c);
  if (memo && memo->known && memo->over) return std::nullopt;
  const bool reuse = memo && memo->known;
  int ranks[3];
  const int n = peak_memory_ranks(c, ranks);
  memory_estimate best;
  bool have = false;
  if (reuse && memo->any) { best = memo->best; have = true; }
  for (int i = 0; i < n; ++i) {
    const pipeline_rank st = pipeline_rank_of(c, m.layers, leading_dense_blocks(m), ranks[i]);
    if (!st.head && reuse) continue;
    if (st.head && memo && !memo->known) {  // the ranks before the head's are all the headless ones (the head is on pp − 1)
      memo->known = true;
      memo->over = false;
      memo->any = have;
      if (have) memo->best = best;
    }
    memory_estimate e = compose_memory(detail::memory_terms_of(m, c, gpu, rt, &st));
    if (e.device_peak() > limit) {
      if (!st.head && memo && !memo->known) { memo->known = true; memo->over = true; }
      return std::nullopt;
    }
    e.pipeline_rank = ranks[i];
    if (!have || e.device_peak() > best.device_peak()) best = e;
    have = true;
  }
  return best;
}

/// A lower bound, bytes per GPU, of the cheap bound's device peak (estimate_memory with replay policy never) of
/// configuration `c` of `m` on `gpu`, which does not depend on `c`'s activation checkpointing or loss: for each
/// pipeline rank estimate_memory evaluates (peak_memory_ranks; the one rank without pp), what every moment of that
/// rank's step holds whatever its activations — compose_memory's `base`, less its in-flight activations and compute
/// weights: the parameters, the optimizer states in the caching allocator and the gradients kept across
/// micro-batches (model_state_bytes), the cuBLAS workspace — plus the memory outside PyTorch (CUDA context, NCCL:
/// allocator_bytes); the largest of the ranks. A rank's device peak is its reserved peak (its allocated peak plus
/// the non-negative fragmentation slack and reduce-scatter pool, runtime_overheads::fragmentation ≥ 0) plus that
/// outside memory, and its allocated peak is at least `base`; so a floor over a limit means estimate_memory_within
/// returns nullopt. search_plans prices it once for the checkpointing and loss variants of a layout. Does not
/// validate `c` (the estimates it bounds do).
[[nodiscard]] inline bytes model_state_floor(const model_spec& m, const training_config& c, const gpu_spec& gpu,
                                             const runtime_overheads& rt = {}) {
  int ranks[3];
  const int n = peak_memory_ranks(c, ranks);
  double floor = 0;
  for (int i = 0; i < n; ++i) {
    const pipeline_rank st = c.pp > 1 ? pipeline_rank_of(c, m.layers, leading_dense_blocks(m), ranks[i]) : pipeline_rank{};
    const terms::memory_shape s = terms::memory_shape_of(m, c, gpu, c.pp > 1 ? &st : nullptr);
    const terms::model_states ms = terms::model_state_bytes(s);
    const terms::allocator_overheads a = terms::allocator_bytes(s, gpu, rt);
    floor = std::max(floor, (ms.parameters + ms.optimizer_states + ms.accumulated_gradients + a.workspace + a.non_pytorch).raw());
  }
  return bytes::base(floor);
}

/// Host memory the CPU offload of `c` needs on one node: the host bytes of one rank (memory_estimate::host_per_gpu)
/// × the ranks of the node, min(gpus_per_node, world_size). Compared with instance_spec::host_memory by
/// `bwplan check` (BWP011) and the search. 0 without offload.
[[nodiscard]] constexpr bytes host_memory_per_node(const memory_estimate& e, const training_config& c) noexcept {
  return e.host_per_gpu * static_cast<double>(std::max(1, std::min(c.gpus_per_node, c.world_size)));
}

namespace detail {
/// Former names of the per-token activation inventory (kept for existing callers).
using activation_terms = terms::activation_inventory;
using terms::activation_bytes_per_token;
}  // namespace detail

}  // namespace bwplan
