// bwplan: GPU memory and throughput planning for LLM training
// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <bwplan/hardware.hpp>
#include <bwplan/model.hpp>
#include <bwplan/moe.hpp>
#include <bwplan/precision.hpp>
#include <bwplan/training.hpp>
#include <bwplan/units.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>

namespace bwplan {

/// Bytes outside the model's tensors that a training process holds on each GPU.
/// Defaults are the values measured on the H200 ground-truth machine (PyTorch 2.11, CUDA 13.0):
/// see `docs/methodology.md#runtime`.
struct runtime_overheads {
  bytes cuda_context = bytes::base(648'871'936);    ///< CUDA context + kernels, outside the caching allocator
  bytes nccl = bytes::base(585'105'408);            ///< NCCL communicator buffers (process group initialised)
  bytes cublas_workspace = bytes::base(69'206'016); ///< cuBLAS/cuBLASLt workspaces + small tensors, inside the allocator (66 MiB)
  double fragmentation = 0.03;                      ///< caching-allocator slack as a share of activation churn
};

/// Where the bytes held at one moment of a step go. Every field is per GPU, after sharding.
struct memory_breakdown {
  bytes parameters;        ///< parameters as the optimizer keeps them (fp32 master or bf16), sharded under FSDP
  bytes optimizer_states;  ///< AdamW exp_avg and exp_avg_sq
  bytes gradients;         ///< gradients held (sharded under FSDP)
  bytes compute_weights;   ///< bf16 weight copies: autocast cache, FSDP2 all-gathered blocks and root module
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
  bool fits = false;              ///< peak_reserved + non_pytorch ≤ capacity

  /// Device bytes in use at the peak: reserved + context + NCCL.
  [[nodiscard]] constexpr bytes device_peak() const noexcept { return peak_reserved + non_pytorch; }
  /// Share of capacity left free at the peak (negative when it does not fit).
  [[nodiscard]] constexpr double headroom() const noexcept { return 1.0 - device_peak() / capacity; }
  /// Breakdown at the largest moment of phase `p` (allocated bytes; see at_forward_peak and siblings).
  [[nodiscard]] constexpr const memory_breakdown& at_phase_peak(step_phase p) const noexcept {
    return p == step_phase::forward ? at_forward_peak : p == step_phase::backward ? at_backward_peak : at_optimizer_peak;
  }
};

namespace detail {

/// Per-token byte counts of one block for one configuration (see estimate_memory).
struct activation_terms {
  double block_saved;   ///< bytes autograd saves for one block without checkpointing
  double selective_op;  ///< bytes kept under torchtitan per-op selective checkpointing
  double checkpoint;    ///< bytes saved for one fully checkpointed block (its input)
  double final_saved;   ///< final norm input + LM head input
  double grad_temp;     ///< activation gradients alive while one block runs backward
  double lse;           ///< attention log-sum-exp (what Megatron's selective recompute drops with FlashAttention)
};

/// Bytes saved per block, per token. `amp` means fp32 weights under torch.autocast: the residual stream
/// is fp32 and each linear saves its own bf16 cast of its input (3 for Q/K/V, 2 for gate/up). With a
/// low-precision format `t` (`quantized`), linear layers save their inputs in `t.saved_input_bytes` per
/// element instead of bf16 (Q/K/V input, attention output into O, gate/up input, SwiGLU product into down).
[[nodiscard]] constexpr activation_terms activation_bytes_per_token(const model_spec& m, bool amp,
                                                                    const format_traits& t = {},
                                                                    bool quantized = false) noexcept {
  const double h = static_cast<double>(m.hidden), q = static_cast<double>(m.q_dim());
  const double kv = static_cast<double>(m.kv_dim()), f = mlp_width_per_token(m);
  const double a = static_cast<double>(m.heads);
  const double rs = amp ? 4 : 2;  // residual stream element size
  activation_terms r{};
  // two norms: input (residual dtype) and, for bf16, the normalized output shared by the next linears
  double norms = amp ? 2 * (4 * h) + (3 + 2) * 2 * h  // fp32 inputs + per-linear bf16 casts
                     : 2 * (2 * h + 2 * h);
  double attn = 2 * q + 2 * 2 * kv + 2 * q + 4 * a;  // q, k, v after RoPE, output, fp32 log-sum-exp
  if (m.qk_norm) attn += 2 * q + 2 * kv;             // pre-norm q and k
  double mlp = m.gated_mlp ? 4 * 2 * f : 2 * 2 * f;  // gate, act(gate), up, product (bf16)
  if (quantized) {
    const double s = t.saved_input_bytes;
    if (amp) norms += -(3 + 2) * 2 * h + s * 5 * h;  // each linear saves its quantized input
    else norms += -2 * 2 * h + s * 2 * h;            // shared norm outputs → one quantized copy each
    attn += s * q;                                   // O-projection input (SDPA keeps its bf16 output too)
    mlp += -2 * f + s * f;                           // down-projection input
  }
  r.block_saved = norms + attn + mlp + 8 + moe_mla_saved_per_token(m);  // + fp32 rstd of both norms
  r.checkpoint = rs * h;
  r.lse = 4 * a;
  // per-op SAC: block input, attention output + LSE, and every other matmul output (q, v, gate, down)
  r.selective_op = rs * h + 2 * q + 4 * a + 8;
  if (!quantized || t.sac_saves_gemm_outputs) r.selective_op += 2 * q + 2 * kv + 2 * f + 2 * h;
  r.final_saved = rs * h + 2 * h;
  r.grad_temp = 4 * h + 4 * f;
  return r;
}

}  // namespace detail

/// Peak per-GPU memory of one steady-state training step (AdamW, step ≥ 2, gradients set to None).
///
/// A liveness walk over the step: static state (parameters w·P/N, AdamW states 2·w·P/N, w = 4 for fp32
/// master, 2 for bf16; N = FSDP shard size), then the forward pass adds each block's saved activations
/// (all of them, the per-op SAC subset, or only its input when checkpointed), bf16 weight copies (autocast
/// cache or FSDP2 all-gathered blocks and root), quantized weight copies of low-precision blocks, the loss
/// buffers (standard: bf16 logits 2·T·V + fp32 logits 4·T·V + log-softmax 4·T·V; the log-softmax is saved);
/// backward frees them block by block while gradients accumulate, recomputing checkpointed parts; the
/// optimizer step adds foreach temporaries (w·P/N). T = micro-batch × sequence tokens. Attention is
/// FlashAttention/SDPA (no s² term; saved q, k, v, out, log-sum-exp at GQA size). Sources: PyTorch autograd
/// saved-tensor semantics, FSDP2 `fully_shard` docs, Korthikanti et al. 2022 (arXiv:2205.05198) for the
/// per-block inventory, torchtitan `_op_sac_save_list`, Transformer Engine / torchao low-precision docs;
/// calibrated against `h200-calibration.jsonl`. @sa docs/methodology.md#memory
///
/// Throws invalid_request if `c` is invalid (see validate).
[[nodiscard]] inline memory_estimate estimate_memory(const model_spec& m, const training_config& c, const gpu_spec& gpu,
                                                     const runtime_overheads& rt = {}) {
  validate(c);
  detail::validate_moe(m, c);
  const parameter_count pc_full = count_parameters(m);
  const parameter_count pc = detail::ep_local(pc_full, m, c.ep);  // routed experts / ep (MoE only)
  const bool fsdp = c.sharded();
  const bool grad_op = c.shard == sharding::grad_op;
  const bool amp = !fsdp && c.master == master_weights::fp32;
  const bool accum = c.grad_accum > 1;
  const double n = c.shard_size();
  const double w = c.master == master_weights::fp32 ? 4 : 2;  // bytes per stored parameter, gradient, state
  const double g = w;
  // Tensor parallelism (Megatron-style, with sequence parallel and a vocabulary-parallel embedding/head as
  // torchtitan applies it) divides every weight by tp; context parallelism splits each sequence over cp ranks
  // and sequence parallel the remaining tokens over tp, so each GPU holds T / (tp · cp) tokens of activations.
  const double tpd = c.tp;
  // Stored state per GPU: under FSDP experts are sharded over ep × (world/ep) = world ranks, like the rest
  const double P = static_cast<double>(fsdp ? pc_full.total() : pc.total()) / tpd;
  const double Pb = static_cast<double>(pc.block()) / tpd;
  const double lin = static_cast<double>(pc.block_linear) / tpd;
  const double head_w = static_cast<double>(m.vocab * m.hidden) / tpd;
  const double root_params = static_cast<double>(pc.embedding + pc.lm_head + pc.final_norm) / tpd;
  const double T = static_cast<double>(c.tokens_per_micro_batch()) / (tpd * c.cp);
  const double V = static_cast<double>(m.vocab);
  const double h = static_cast<double>(m.hidden);
  const std::int64_t L = m.layers;
  const format_traits ft = traits(c.format, gpu);
  const auto act_hp = detail::activation_bytes_per_token(m, amp, ft, false);
  const auto act_lp = detail::activation_bytes_per_token(m, amp, ft, true);
  const bf16_blocks keep = c.bf16_kept();
  const std::int64_t q_first = c.format == compute_format::bf16 ? L : keep.first;
  const std::int64_t q_end = c.format == compute_format::bf16 ? L : std::max(q_first, L - keep.last_for(L));
  auto quantized = [&](std::int64_t i) { return i >= q_first && i < q_end; };

  memory_breakdown base;
  base.parameters = bytes::base(w * P / n);
  base.optimizer_states = bytes::base(2 * w * P / n);
  base.workspace = rt.cublas_workspace;
  if (!fsdp && c.fsdp_mesh() > 1) base.ddp_buckets = bytes::base(g * P);
  if (accum) base.gradients = bytes::base(g * P / n);  // kept across micro-batches

  const double ck = act_hp.checkpoint * T;
  const double amp_block = amp ? 2 * lin : 0;  // autocast bf16 copies of one block's weights
  const double amp_head = amp ? 2 * head_w : 0;
  const double root = fsdp ? 2 * root_params : 0;  // FSDP2 root (embedding, head, final norm) stays gathered
  // current + prefetched block as gathered: bf16, or fp8 with FP8 all-gather
  const double gathered = fsdp && !grad_op ? 2 * (c.fp8_all_gather ? 1 : 2) * Pb : 0;
  // SHARD_GRAD_OP (reshard_after_forward=False): every block stays gathered (bf16) from its forward to its backward
  const double kept_block = grad_op ? 2 * Pb : 0;
  const double kept_all = kept_block * static_cast<double>(L);
  const double wcopy = ft.weight_copy_bytes * lin;  // quantized copies of one low-precision block
  // per-block quantities
  auto full_saved = [&](std::int64_t i) { return (quantized(i) ? act_lp : act_hp).block_saved * T; };
  auto saved = [&](std::int64_t i) {
    if (c.checkpointed(i)) return ck;
    const auto& a = quantized(i) ? act_lp : act_hp;
    if (c.ac.mode == ac_mode::selective_op) return a.selective_op * T;
    if (c.ac.mode == ac_mode::selective_attn) return (a.block_saved - a.lse) * T;
    return a.block_saved * T;
  };
  auto keeps_amp = [&](std::int64_t i) { return !c.checkpointed(i) ? amp_block : 0.0; };
  double saved_all = 0, amp_after = 0;
  for (std::int64_t i = 0; i < L; ++i) { saved_all += saved(i); amp_after += keeps_amp(i); }
  const double final_saved = act_hp.final_saved * T;

  // Loss buffers.
  double loss_saved = 0, loss_fwd_transient = 0, loss_bwd_transient = 0, loss_grad = 0;
  if (c.loss == loss_impl::standard) {
    loss_saved = 4 * T * V;                // fp32 log-softmax output
    loss_fwd_transient = (2 + 4) * T * V;  // bf16 logits + fp32 upcast alive with it
    loss_bwd_transient = (4 + 4) * T * V;  // grads of log-softmax output and of the fp32 logits
  } else {
    // Liger-Kernel fused linear cross-entropy: chunk = next_pow2(ceil(T / ceil(V / h))) tokens
    const double inc = std::ceil(V / h);
    double chunk = 1;
    while (chunk < std::ceil(T / inc)) chunk *= 2;
    chunk = std::min(chunk, T);
    loss_saved = 2 * T * h;                              // gradient w.r.t. the head input, computed in forward
    loss_grad = (accum ? 0 : (fsdp ? 2 : g)) * head_w;   // head weight gradient, accumulated in forward
    loss_fwd_transient = (2 + 4) * chunk * V;            // chunk logits bf16 + fp32 gradient
  }

  memory_breakdown best = base;
  step_phase best_phase = step_phase::forward;
  double best_total = -1;
  memory_breakdown phase_best[3] = {base, base, base};
  double phase_total[3] = {-1, -1, -1};
  auto consider = [&](const memory_breakdown& b, step_phase p) {
    const double t = b.total().raw();
    if (t > best_total) { best_total = t; best = b; best_phase = p; }
    const auto i = static_cast<std::size_t>(p);
    if (t > phase_total[i]) { phase_total[i] = t; phase_best[i] = b; }
    return t;
  };

  memory_estimate e;
  // ---- forward
  memory_breakdown f = base;
  f.compute_weights = bytes::base(root + kept_all + 2 * static_cast<double>(pc.gemm_weights()) / tpd * (amp ? 1 : 0));
  f.activations = bytes::base(saved_all + final_saved);
  f.logits = bytes::base(loss_saved + loss_fwd_transient);
  f.gradients += bytes::base(loss_grad);
  double fwd_peak = consider(f, step_phase::forward);
  {  // last block running: its working set, the gathered blocks and its quantized weights
    memory_breakdown lb = base;
    const std::int64_t i = L - 1;
    lb.compute_weights = bytes::base(root + gathered + kept_all + (amp ? 2 * lin * static_cast<double>(L) : 0) + (quantized(i) ? wcopy : 0));
    lb.activations = bytes::base(saved_all - saved(i));
    lb.transient = bytes::base(c.checkpointed(i) ? T * (6 * detail::mlp_width_per_token(m)) : full_saved(i));
    fwd_peak = std::max(fwd_peak, consider(lb, step_phase::forward));
  }
  memory_breakdown after_fwd = base;
  after_fwd.compute_weights = bytes::base(root + kept_all + amp_head + amp_after);
  after_fwd.activations = bytes::base(saved_all + final_saved);
  after_fwd.logits = bytes::base(loss_saved);
  after_fwd.gradients += bytes::base(loss_grad);

  // ---- backward
  double bwd_peak = 0;
  {
    memory_breakdown lp = after_fwd;
    lp.transient = bytes::base(loss_bwd_transient);
    bwd_peak = consider(lp, step_phase::backward);
  }
  const double head_grad = c.loss == loss_impl::chunked ? loss_grad : (fsdp ? 2 * head_w : (accum ? 0 : g * head_w));
  const double gres = accum ? 0 : (fsdp ? g * static_cast<double>(pc_full.block()) / n : g * Pb);
  const double block_grad_tmp = fsdp ? 2 * Pb + (c.master == master_weights::fp32 ? 4 * Pb : 0) + gathered
                                     : (accum ? 2 * lin : g * Pb);
  const double gtmp = act_hp.grad_temp * T;
  // Walk blocks L-1 … 0; the best candidate is rebuilt as a breakdown afterwards.
  double acts = saved_all, cw = amp_after, grads = head_grad, best_block = -1;
  std::int64_t best_i = -1;
  double best_acts = 0, best_cw = 0, best_grads = 0, best_tr = 0;
  const double static_part = base.total().raw() + root;
  for (std::int64_t i = L - 1; i >= 0; --i) {
    const double recompute = saved(i) < full_saved(i) ? full_saved(i) - saved(i) : 0;
    const double extra_cw = (c.checkpointed(i) ? amp_block : 0) + (quantized(i) ? wcopy : 0) +
                            kept_block * static_cast<double>(i + 1);
    const double tr = gtmp + block_grad_tmp;
    const double t = static_part + acts + recompute + cw + extra_cw + grads + tr;
    if (t > best_block) {
      best_block = t; best_i = i;
      best_acts = acts + recompute; best_cw = cw + extra_cw; best_grads = grads; best_tr = tr;
    }
    acts -= saved(i);
    cw -= keeps_amp(i);
    grads += gres;
  }
  if (best_i >= 0) {
    memory_breakdown b = base;
    b.activations = bytes::base(best_acts);
    b.compute_weights = bytes::base(root + best_cw);
    b.gradients += bytes::base(best_grads);
    b.transient = bytes::base(best_tr);
    bwd_peak = std::max(bwd_peak, consider(b, step_phase::backward));
  }
  memory_breakdown after_bwd = base;
  if (!accum) after_bwd.gradients = bytes::base(g * P / n);
  {  // end of backward: FSDP root reduce-scatter
    memory_breakdown eb = after_bwd;
    eb.compute_weights = bytes::base(root);
    eb.transient = bytes::base(fsdp ? 2 * root_params + (c.master == master_weights::fp32 ? 4 * root_params : 0) : 0);
    bwd_peak = std::max(bwd_peak, consider(eb, step_phase::backward));
  }
  // ---- optimizer
  memory_breakdown o = after_bwd;
  if (c.optimizer == optimizer_impl::foreach) o.transient = bytes::base(w * P / n);
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
  // Allocator slack: the freed bf16-logits segment cannot serve the larger fp32 requests of the loss
  // backward; plus a share of the activation churn.
  const double frag = (c.loss == loss_impl::standard ? 2 * T * V : 0) +
                      rt.fragmentation * (best.activations + best.transient + best.logits).raw();
  // FSDP2 allocates reduce-scatter outputs (the sharded gradients) on its reduce-scatter stream; the caching
  // allocator keeps per-stream pools, so those segments cannot reuse the activation memory freed on the compute
  // stream and the reserved peak carries all gradient shards (g·P/N) on top of the compute-stream peak.
  // Calibrated on torchtitan's FSDP 8 vs 128 GPU figures (docs/scaling.md#6); only with more than one shard,
  // so single-GPU numbers (h200-calibration.jsonl) are unchanged.
  const double rs_pool = (fsdp && n > 1 && !accum && best_phase != step_phase::optimizer) ? g * P / n - best.gradients.raw() : 0;
  e.peak_reserved = e.peak_allocated + bytes::base(frag + std::max(0.0, rs_pool));
  e.non_pytorch = rt.cuda_context + ((fsdp || c.world_size > 1) ? rt.nccl : bytes{});
  e.capacity = gpu.cuda_capacity();
  e.fits = e.device_peak() <= e.capacity;
  return e;
}

}  // namespace bwplan
