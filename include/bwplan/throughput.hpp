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
#include <cstdint>

namespace bwplan {

/// Efficiency constants of the throughput model. Defaults were fitted once on the 27 H200 runs of
/// `h200-calibration.jsonl` with all five free at once (see docs/methodology.md#throughput); they are
/// fractions of datasheet peaks, not per-row corrections.
struct throughput_calibration {
  double gemm_max = 0.80;        ///< GEMM efficiency for large matrices (790/989 TFLOP/s measured on an 8192³ bf16 matmul)
  double gemm_half_width = 1200; ///< hidden size at which GEMM efficiency is half of gemm_max
  double attention = 0.45;       ///< FlashAttention efficiency (fraction of bf16 peak)
  double memory = 0.50;          ///< achieved fraction of HBM bandwidth in element-wise kernels
  double launch_s = 5e-6;        ///< seconds per kernel of fixed cost (launch and tail)
  double nvlink = 0.80;          ///< achieved fraction of per-direction NVLink bandwidth (NCCL bus bandwidth)
  double efa = 0.65;             ///< achieved fraction of EFA bandwidth (487/750 GB/s on 2×p5, nccl-tests)
  double collective_latency_s = 20e-6;  ///< fixed cost per collective call
  double nvlink_step_s = 3.4e-6;   ///< NCCL ring step over NVLink (Simple protocol hardware latency, NCCL tuning model)
  double efa_step_s = 14e-6;       ///< NCCL ring step over the network (Simple protocol)
  double nvls_latency_s = 25e-6;   ///< NVLS (NVLink SHARP) all-reduce latency on NVLink (NCCL tuning model)
  double nvls_efficiency_hopper = 0.85;     ///< NCCL's NVLS efficiency factor, SM90
  double nvls_efficiency_blackwell = 0.74;  ///< NCCL's NVLS efficiency factor, SM100
  double nvlink_half_message = 4.0 * 1048576;  ///< per-rank message bytes at which NVLink bus bandwidth is half its peak
  double efa_half_message = 64.0 * 1048576;    ///< same across nodes (fitted to 2×p5 all-reduce: 16 MiB → 105, 128 MiB → 289, 16 GiB → 487 GB/s)
};

/// Kinds of collective.
enum class collective_kind { all_gather, reduce_scatter, all_reduce, all_to_all };
[[nodiscard]] constexpr const char* to_string(collective_kind c) noexcept {
  return c == collective_kind::all_gather ? "all-gather" : c == collective_kind::reduce_scatter ? "reduce-scatter"
         : c == collective_kind::all_reduce ? "all-reduce" : "all-to-all";
}

/// Where a communicator's ranks sit: `ranks` GPUs, `per_node` of them on each node (ranks / per_node nodes),
/// `groups_per_node` such communicators running at once on every node (they share the node's EFA).
struct comm_group {
  int ranks = 1;
  int per_node = 1;
  int groups_per_node = 1;
  [[nodiscard]] constexpr int nodes() const noexcept { return per_node > 0 ? (ranks + per_node - 1) / per_node : 1; }
};

/// Time of one collective of `size` bytes (the full buffer: the gathered output of an all-gather, the input of
/// a reduce-scatter, the buffer of an all-reduce, all data a rank sends and receives in an all-to-all).
///
/// α-β model as NCCL's tuner uses it (NCCL-TUNE, nccl-tests PERFORMANCE.md; docs/scaling.md): the bandwidth
/// term is the bus-bandwidth factor ((n−1)/n, 2(n−1)/n for all-reduce) times `size` over the slower of
/// NVLink (per-direction, × `nvlink`) and, across nodes, the node's EFA (× `efa`) shared by the communicators of
/// that node, where a hierarchical ring moves (N−1)/N of the buffer through each node's NICs (N nodes). Each
/// link's bandwidth is scaled by the message-size efficiency m / (m + m½) of the per-rank message m. Ring
/// latency: `collective_latency_s` + steps × per-step latency (n−1 steps, 2(n−1) for all-reduce, of which
/// 2(N−1) cross the network). Within one node an all-reduce may use NVLS (in-switch reduction: bus bandwidth
/// doubled × 0.85 Hopper / 0.74 Blackwell, 25 µs; Hopper and Blackwell NVLink nodes only) or, across nodes, a
/// tree (latency 2·((ppn−1)·α_nvl + log2 N·α_net)); the fastest is taken, as NCCL's tuner does. On a PCIe GPU
/// (`gpu.interconnect == "pcie"`) the intra-node link is PCIe at `nvlink_per_direction`.
[[nodiscard]] inline seconds collective_time(collective_kind kind, bytes size, const comm_group& g, const gpu_spec& gpu,
                                             const instance_spec* inst, const throughput_calibration& k) noexcept {
  const int n = g.ranks;
  if (n <= 1 || size.raw() <= 0) return seconds{};
  const double S = size.raw();
  const int N = inst ? g.nodes() : 1;
  const bool ar = kind == collective_kind::all_reduce;
  const double factor = (ar ? 2.0 : 1.0) * (n - 1) / n;
  const double msg = S / n;
  const double nvl = gpu.nvlink_per_direction.raw() * k.nvlink * msg / (msg + k.nvlink_half_message);
  double t_bw = factor * S / nvl;
  if (N > 1 && inst != nullptr) {
    const double efa = inst->efa_per_node.raw() * k.efa / std::max(1, g.groups_per_node) * msg / (msg + k.efa_half_message);
    const double node_bytes = (ar ? 2.0 : 1.0) * (N - 1) / N * S;
    t_bw = std::max(t_bw, node_bytes / efa);
  }
  const double steps = (ar ? 2.0 : 1.0) * (n - 1);
  const double inter_steps = N > 1 ? (ar ? 2.0 : 1.0) * (N - 1) : 0.0;
  const double ring = k.collective_latency_s + (steps - inter_steps) * k.nvlink_step_s + inter_steps * k.efa_step_s + t_bw;
  double best = ring;
  // NVLS (NVLink SHARP, in-switch reduction) needs NVSwitch gen 3 or newer: Hopper and Blackwell NVLink nodes only
  const bool nvls = gpu.has_nvlink() && (gpu.architecture == "hopper" || gpu.architecture == "blackwell");
  if (ar && N <= 1 && n > 2 && nvls) {  // NVLS within a node
    const double eff = gpu.architecture == "blackwell" ? k.nvls_efficiency_blackwell : k.nvls_efficiency_hopper;
    best = std::min(best, k.nvls_latency_s + factor * S / (2 * nvl * eff));
  }
  if (ar && N > 1) {  // double binary tree: same bandwidth term, logarithmic latency across nodes
    const double tree = k.collective_latency_s + 2 * ((g.per_node - 1) * k.nvlink_step_s + std::log2(N) * k.efa_step_s) + t_bw;
    best = std::min(best, tree);
  }
  return seconds::base(best);
}

/// Communication of one step, per GPU, split by what it serves.
struct communication_breakdown {
  seconds data_parallel;     ///< FSDP all-gathers and reduce-scatters, HSDP/DDP all-reduces
  seconds tensor_parallel;   ///< sequence-parallel all-gathers and reduce-scatters of activations
  seconds context_parallel;  ///< ring-attention K/V exchange
  seconds expert_parallel;   ///< MoE dispatch and combine all-to-all
  /// Sum of the parts (= throughput_estimate::communication, resp. exposed_communication).
  [[nodiscard]] constexpr seconds total() const noexcept {
    return data_parallel + tensor_parallel + context_parallel + expert_parallel;
  }
};

/// FLOPs of one training step and their split.
struct flop_count {
  flops model;      ///< forward + backward without recompute (3 × forward), the MFU numerator
  flops recompute;  ///< extra forward of checkpointed blocks
};

/// Time and rate of one optimizer step.
struct throughput_estimate {
  flop_count step_flops;          ///< per GPU, whole step (all micro-batches)
  seconds compute;                ///< GEMM + attention + memory-bound kernels, all micro-batches
  seconds gemm;                   ///< GEMM part of compute
  seconds attention;              ///< attention part of compute
  seconds memory_bound;           ///< element-wise, loss, casts, optimizer
  seconds communication;          ///< total collective time (FSDP all-gather/reduce-scatter or DDP all-reduce)
  seconds exposed_communication;  ///< part of communication not hidden behind compute
  seconds step;                   ///< wall time of one optimizer step
  double tokens_per_s = 0;        ///< whole job, tokens per second
  double tokens_per_s_per_gpu = 0;
  double mfu = 0;                 ///< model FLOPs utilisation against the bf16 dense peak
  communication_breakdown comm;   ///< total collective time by parallelism (step)
  communication_breakdown exposed;  ///< exposed part by parallelism (step)
  double tokens_per_step = 0;     ///< tokens the whole job processes per optimizer step
};

/// Forward FLOPs per token of `m` at sequence length `s` (causal attention counted at half).
///
/// GEMMs `2 · (L · block_linear + V · h)` over the activated weights (MoE: router, shared and top-k
/// experts; parameter_count::active_gemm_weights); attention `2 · 2 · s · a · d / 2` per layer (QKᵀ and PV,
/// causal). Source: Narayanan et al. 2021 (arXiv:2104.04473) appendix, Megatron-LM
/// `num_floating_point_operations`, with the causal half as in torchtitan/FlashAttention accounting.
[[nodiscard]] constexpr double forward_flops_per_token(const model_spec& m, std::int64_t seq) noexcept {
  const parameter_count pc = count_parameters(m);
  const double gemm = 2.0 * static_cast<double>(pc.active_gemm_weights());  // MoE: the top-k experts only
  const double attn = 2.0 * static_cast<double>(seq) * static_cast<double>(m.q_dim()) * static_cast<double>(m.layers);
  return gemm + attn;
}

/// Time of a ring all-gather or reduce-scatter of `total` bytes (the full, unsharded size) over `n`
/// ranks: `(n−1)/n · total / bw + latency` (NCCL ring; nccl-tests PERFORMANCE.md bus-bandwidth formula).
[[nodiscard]] constexpr seconds ring_gather_time(bytes total, int n, byte_rate bw, double latency_s) noexcept {
  if (n <= 1) return seconds{};
  return seconds::base((static_cast<double>(n - 1) / n) * total.raw() / bw.raw() + latency_s);
}

/// Effective per-GPU bandwidth of a collective over `world` GPUs: NVLink within a node, EFA shared by
/// the node's GPUs across nodes (the slower link bounds a hierarchical ring).
[[nodiscard]] inline byte_rate collective_bandwidth(const gpu_spec& gpu, const instance_spec* inst, int world,
                                                    int gpus_per_node, const throughput_calibration& k) {
  const byte_rate intra = gpu.nvlink_per_direction * k.nvlink;
  if (world <= gpus_per_node || inst == nullptr) return intra;
  const byte_rate inter = inst->efa_per_node * (k.efa / gpus_per_node);
  return std::min(intra, inter);
}

/// Expert-parallel all-to-all time of one micro-batch (issue 7): per MoE block, dispatch and combine of
/// `T · k · cf · h` bf16 elements each in forward and again in backward (×4; checkpointed blocks repeat the
/// forward pair), of which (ep − 1)/ep leave the GPU; over NVLink while ep ≤ GPUs per node, else over the
/// node's EFA shared by its GPUs. 0 for ep = 1. Source: GShard/DeepSpeed-MoE all-to-all volume; torchtitan
/// expert parallelism (dispatch and combine all-to-all per MoE layer).
[[nodiscard]] inline double moe_all_to_all_s(const model_spec& m, const training_config& c, const gpu_spec& gpu,
                                             const instance_spec* inst, const throughput_calibration& k) {
  if (c.ep <= 1 || !m.is_moe()) return 0;
  const double T = static_cast<double>(c.tokens_per_micro_batch());
  const double per_dir = T * static_cast<double>(m.top_k) * c.moe_capacity_factor * static_cast<double>(m.hidden) * 2;
  const double ck = static_cast<double>(c.checkpointed_blocks(m.layers)) / static_cast<double>(m.layers);
  const double calls = (4 + 2 * ck) * static_cast<double>(m.moe_layers);
  const byte_rate bw = collective_bandwidth(gpu, inst, c.ep, c.gpus_per_node, k);
  const double frac = static_cast<double>(c.ep - 1) / c.ep;
  return calls * (frac * per_dir / bw.raw() + k.collective_latency_s);
}

/// Step time, tokens/s and MFU of configuration `c` on `gpu`.
///
/// Roofline per op class: GEMM FLOPs / (bf16 peak · gemm_max · h/(h + h½)); attention FLOPs (backward
/// 2.5× forward, FlashAttention-2 paper) / (peak · attention); element-wise bytes / (HBM · memory);
/// a fixed cost per kernel. FSDP adds all-gather of bf16 blocks in forward and backward and a
/// reduce-scatter of gradients, overlapped with compute (only the excess is exposed, plus the first
/// block's gather); DDP all-reduces gradients overlapped with backward. `inst` may be null (no EFA).
/// @sa docs/methodology.md#throughput
[[nodiscard]] inline throughput_estimate estimate_throughput(const model_spec& m, const training_config& c,
                                                             const gpu_spec& gpu, const instance_spec* inst = nullptr,
                                                             const throughput_calibration& k = {}) {
  validate(c);
  detail::validate_moe(m, c);
  const parameter_count pc_full = count_parameters(m);
  const parameter_count pc = detail::ep_local(pc_full, m, c.ep);  // routed experts / ep (MoE only)
  const bool fsdp = c.sharded();
  const bool amp = !fsdp && c.master == master_weights::fp32;
  // tokens of one micro-batch each GPU computes: context parallel splits the sequence, tensor parallel the work
  const double T = static_cast<double>(c.tokens_per_micro_batch()) / (static_cast<double>(c.tp) * c.cp);
  const double b = static_cast<double>(c.micro_batch), s = static_cast<double>(c.seq_len);
  const double h = static_cast<double>(m.hidden), V = static_cast<double>(m.vocab);
  const double f = detail::mlp_width_per_token(m, c.moe_capacity_factor);
  const double q = static_cast<double>(m.q_dim()), kv = static_cast<double>(m.kv_dim());
  const double L = static_cast<double>(m.layers);
  const double nck = static_cast<double>(c.checkpointed_blocks(m.layers));
  // GEMM weights a token runs through per block (MoE: activated experts, averaged over blocks)
  const double lin = m.is_moe() ? static_cast<double>(pc_full.active_gemm_weights() - pc_full.embedding) / static_cast<double>(m.layers)
                                : static_cast<double>(pc.block_linear);
  const double P = static_cast<double>(fsdp ? pc_full.total() : pc.total()) / c.tp;  // stored per GPU before ÷n
  const double Pc = static_cast<double>(pc.total()) / c.tp;  // gathered / all-reduced per GPU (experts / ep)
  const double n = c.shard_size();
  const double w = c.master == master_weights::fp32 ? 4 : 2;
  const double peak = gpu.peak("bf16").value_or(flop_rate{}).raw();
  const double hbm = gpu.hbm_bandwidth.raw() * k.memory;

  // per micro-batch
  const format_traits ft = traits(c.format, gpu);
  const double nq = static_cast<double>(c.quantized_blocks(m.layers));  // blocks whose GEMMs run in c.format
  const double block_gemm = 2 * T * lin;
  const double head_gemm = 2 * T * V * h;
  const double attn_fwd = 2 * b * s * s * q / (static_cast<double>(c.tp) * c.cp);  // causal: QK^T + PV at half; load-balanced CP
  const double gemm_eff = k.gemm_max * h / (h + k.gemm_half_width);
  const double peak_lp = gpu.peak(ft.rate_key).value_or(flop_rate::base(peak)).raw();
  // A faster tensor-core format needs larger matrices to reach the same efficiency, so the half-efficiency
  // width grows with the format's peak ratio to bf16 (as its square root: reconciles the size dependence with
  // the published end-to-end speed-ups, docs/precision.md#speed).
  const double ratio = peak > 0 ? peak_lp / peak : 1;
  const double lp_rate = peak_lp * (k.gemm_max * h / (h + k.gemm_half_width * std::sqrt(ratio))) * ft.relative_gemm_efficiency;
  const double hp_rate = peak * gemm_eff;
  // recomputed GEMM FLOPs per block (forward only): full checkpointing recomputes the block; per-op SAC the
  // matmuls it does not save (k, o, up for bf16; all of them when the format's GEMMs are not saved)
  const double kvp = static_cast<double>(m.kv_dim());
  const double sac_hp = 2 * T * (h * kvp + q * h + h * f);
  const double sac_lp = ft.sac_saves_gemm_outputs ? sac_hp : block_gemm;
  double recompute_hp = nck * block_gemm * (L - nq) / std::max(1.0, L);
  double recompute_lp = nck * block_gemm * nq / std::max(1.0, L);
  double recompute_attn = nck * attn_fwd;
  if (c.ac.mode == ac_mode::selective_op) { recompute_hp = (L - nq) * sac_hp; recompute_lp = nq * sac_lp; }
  if (c.ac.mode == ac_mode::selective_attn) recompute_attn = L * attn_fwd;
  const double t_gemm = (3 * (L - nq) * block_gemm + recompute_hp) / hp_rate + (3 * nq * block_gemm + recompute_lp) / lp_rate +
                        3 * head_gemm / (peak * k.gemm_max);
  const double t_attn = (L * attn_fwd * 3.5 + recompute_attn) / (peak * k.attention);
  const double rs = amp ? 4 : 2;
  const double block_bytes = T * (h * rs * 10 + f * 2 * 10 + (q + 2 * kv) * 2 * 6);
  const double n_recompute_blocks = (c.ac.mode == ac_mode::selective_op || c.ac.mode == ac_mode::selective_attn) ? 0.5 * L : nck;
  const double loss_bytes = c.loss == loss_impl::standard ? T * V * 20 : T * V * 8;
  const double cast_bytes = c.master == master_weights::fp32 ? (fsdp ? 2 : 1) * 6 * P / n : 0;
  // quantization casts (memory-bound). Activation casts are fused into the producing kernel (TE's fused
  // norm+cast, torch.compile epilogues), so they cost the quantized write: twice per micro-batch (forward
  // input, backward output gradient; both orientations). Weights are read in bf16 and quantized in forward
  // and backward (FSDP re-gathers them).
  const double act_elems = T * (2 * h + q + f);
  const double dual = ft.weight_copy_bytes > 0 ? ft.weight_copy_bytes / std::max(ft.quantized_bytes, 1e-9) : 1;
  const double quant_bytes = nq * (2 * act_elems * dual * ft.quantized_bytes + 2 * lin * (2 + dual * ft.quantized_bytes));
  const double t_mem_mb = ((L + n_recompute_blocks) * block_bytes + loss_bytes + cast_bytes + quant_bytes) / hbm;
  const double t_launch = (3 * L + n_recompute_blocks + (nq > 0 ? 2 * nq : 0)) * 15 * k.launch_s;
  const double t_mb = t_gemm + t_attn + t_mem_mb + t_launch;

  // optimizer (once per step): fused AdamW reads p, g, m, v and writes p, m, v
  const double t_opt = 7 * w * P / n / hbm;

  // communication (see collective_time and docs/scaling.md)
  const double ga = static_cast<double>(c.grad_accum);
  const int gpn = std::max(1, std::min(c.gpus_per_node, c.world_size));
  auto group = [&](int ranks, int stride) {  // `ranks` GPUs spaced `stride` apart in the node-major rank order
    comm_group g;
    g.ranks = ranks;
    g.per_node = std::max(1, std::min(ranks, gpn / std::max(1, stride)));
    g.groups_per_node = std::max(1, gpn / g.per_node);
    return g;
  };
  auto coll = [&](collective_kind kd, double size, const comm_group& g) {
    return collective_time(kd, bytes::base(size), g, gpu, inst, k).raw();
  };
  const int mesh = c.fsdp_mesh();
  const int shard_n = c.shard_size();
  const double Lb = std::max(1.0, L);
  double dp_comm = 0, dp_exposed = 0, tp_comm = 0, cp_comm = 0, cp_exposed = 0;
  if (fsdp && shard_n > 1) {
    const comm_group sg = group(shard_n, c.tp);
    const double ag_bytes = c.fp8_all_gather ? Pc + static_cast<double>(pc.embedding + pc.lm_head) / c.tp : 2 * Pc;
    const double gathers = c.shard == sharding::grad_op ? 1.0 : 2.0;  // grad-op keeps forward's gather for backward
    const double ag = gathers * (Lb + 1) * coll(collective_kind::all_gather, ag_bytes / (Lb + 1), sg);
    const double rs_b = (Lb + 1) * coll(collective_kind::reduce_scatter, w * Pc / (Lb + 1), sg);
    const double per_mb = ag + rs_b;
    const double first = coll(collective_kind::all_gather, ag_bytes / (Lb + 1), sg);
    dp_comm = ga * per_mb;
    dp_exposed = ga * (std::max(0.0, per_mb - t_mb) + first);
  }
  if (c.shard == sharding::hybrid && mesh / shard_n > 1) {  // all-reduce of gradient shards across replicas, once per step
    const comm_group rg = group(mesh / shard_n, c.tp * shard_n);
    const double ar = coll(collective_kind::all_reduce, w * Pc / shard_n, rg);
    const double slack = std::max(0.0, (2.0 / 3.0) * t_mb - dp_comm / ga);
    dp_comm += ar;
    dp_exposed += std::max(0.0, ar - slack) + ar / Lb;
  }
  if (!fsdp && mesh > 1) {  // DDP: one all-reduce of the gradients per step (no_sync on earlier micro-batches)
    const double ar = coll(collective_kind::all_reduce, w * Pc, group(mesh, c.tp));
    dp_comm = ar;
    dp_exposed = std::max(0.0, ar - (2.0 / 3.0) * t_mb) + ar / Lb;
  }
  if (c.tp > 1) {
    // sequence parallel: per block an all-gather before and a reduce-scatter after attention and MLP, in forward,
    // in backward and in the recompute of checkpointed blocks; bf16 activations of the replica's T·tp tokens.
    // Not overlapped (no async TP): all exposed.
    const double act = 2 * T * c.tp * h;
    const comm_group tg = group(c.tp, 1);
    const double per = coll(collective_kind::all_gather, act, tg) + coll(collective_kind::reduce_scatter, act, tg);
    tp_comm = ga * (2 * 2 * L + 2 * nck) * per;
  }
  if (c.cp > 1) {
    // ring attention: every rank receives the other ranks' K and V (forward, recompute), K/V again and the dK/dV
    // reduction (backward): an all-gather-sized exchange of K,V per pass, overlapped with attention.
    const double kvb = 2 * 2 * b * s * kv / c.tp;
    const comm_group cg = group(c.cp, c.tp);
    const double per = coll(collective_kind::all_gather, kvb, cg);
    const double passes = 3.0 * L + nck + (c.ac.mode == ac_mode::selective_attn ? L : 0);
    cp_comm = ga * passes * per;
    cp_exposed = std::max(0.0, cp_comm - ga * t_attn);
  }
  double t_comm = dp_comm + tp_comm + cp_comm;
  double t_exposed = dp_exposed + tp_comm + cp_exposed;
  // expert-parallel all-to-all: on the critical path of every MoE block (not overlapped)
  const double a2a = ga * moe_all_to_all_s(m, c, gpu, inst, k);
  t_comm += a2a;
  t_exposed += a2a;

  throughput_estimate e;
  const double fwd_flops = forward_flops_per_token(m, c.seq_len) * T;
  e.step_flops.model = flops::base(3 * fwd_flops * ga);
  e.step_flops.recompute = flops::base((recompute_hp + recompute_lp + recompute_attn) * ga);
  e.gemm = seconds::base(ga * t_gemm);
  e.attention = seconds::base(ga * t_attn);
  e.memory_bound = seconds::base(ga * (t_mem_mb + t_launch) + t_opt);
  e.compute = seconds::base(ga * t_mb + t_opt);
  e.communication = seconds::base(t_comm);
  e.exposed_communication = seconds::base(t_exposed);
  e.step = e.compute + e.exposed_communication;
  e.comm = {seconds::base(dp_comm), seconds::base(tp_comm), seconds::base(cp_comm), seconds::base(a2a)};
  e.exposed = {seconds::base(dp_exposed), seconds::base(tp_comm), seconds::base(cp_exposed), seconds::base(a2a)};
  const double tokens = T * ga * c.world_size;  // = micro-batch tokens × accumulation × data-parallel degree
  e.tokens_per_step = tokens;
  e.tokens_per_s = tokens / e.step.raw();
  e.tokens_per_s_per_gpu = e.tokens_per_s / c.world_size;
  e.mfu = peak > 0 ? (e.step_flops.model.raw() / e.step.raw()) / peak : 0;
  return e;
}

/// Wall time and money to train a token budget.
struct training_cost {
  double tokens = 0;          ///< token budget
  double seconds = 0;         ///< tokens / job tokens per second (steady state; no start-up, checkpoints or failures)
  double instance_hours = 0;  ///< nodes × hours
  double usd = 0;             ///< instance_hours × price per instance-hour
};

/// Time and cost of training `tokens` tokens at `te`'s rate on `nodes` instances priced `price_per_hour` USD each.
[[nodiscard]] inline training_cost cost_to_train(const throughput_estimate& te, double tokens, int nodes,
                                                 double price_per_hour) noexcept {
  training_cost r;
  r.tokens = tokens;
  r.seconds = te.tokens_per_s > 0 ? tokens / te.tokens_per_s : 0;
  r.instance_hours = r.seconds / 3600 * nodes;
  r.usd = r.instance_hours * price_per_hour;
  return r;
}

}  // namespace bwplan
