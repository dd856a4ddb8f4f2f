// bwplan: GPU memory and throughput planning for LLM training
// SPDX-License-Identifier: Apache-2.0
#pragma once

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
#include <cmath>
#include <cstdint>

namespace bwplan {

/// Efficiency constants of the throughput model. `memory`, `launch_s` and `attention` were fitted once, together, on
/// the 27 H200 runs of `h200-calibration.jsonl` (least squares of log tokens/s, the two `impl=hf` runs left out: another
/// stack); the GEMM half-widths are set from the GEMM's tile arithmetic, not fitted (the fit is flat in them below
/// k½ ≈ 600: docs/methodology.md#throughput), and the GEMM asymptote is pinned by the one GEMM measured on that machine.
/// They are fractions of datasheet peaks, not per-row corrections.
struct throughput_calibration {
  /// Reduction depth K at which a GEMM's main loop reaches half its asymptotic rate: two 128-deep K stages of a
  /// 128×256 bf16 tile (the prologue that fills the pipeline and the epilogue that stores the tile cost about as much
  /// as 256 of K).
  double gemm_half_k = 256;
  /// Output elements M·N at which the wave term is one half: 16 output tiles of 128×128 (a GEMM that small leaves most
  /// of the 132 SMs idle; real training GEMMs are far above it).
  double gemm_half_mn = 2.5e5;
  /// Asymptotic GEMM efficiency, pinned by the one GEMM measured on the calibration machine: gemm_efficiency of an
  /// 8192³ bf16 matmul is 790/989 (../shared/groundtruth/README.md).
  double gemm_max = 0.80 / ((8192.0 / (8192.0 + gemm_half_k)) * (8192.0 * 8192 / (8192.0 * 8192 + gemm_half_mn)));
  /// The calibration GPU's measured matmul fraction (gpu_spec::mamf_fraction): the H200's, which the MAMF table gives
  /// as the H100 SXM's 794.5 of 989 TFLOP/s ("H200 is the same"; stas00/ml-engineering, docs/hardware.md#sustained-matmul),
  /// as the 8192³ matmul measured on the calibration machine (790) agrees. A GPU with a measured fraction runs its
  /// tensor-core work at gpu.mamf_fraction() / matmul_reference of the rates calibrated here (throughput_shape::matmul).
  double matmul_reference = 794.5 / 989.0;
  /// A calibration profile's entry: the GPU's matmul factor (matmul_factor) its constants were fitted under, so that
  /// they give the rates they were fitted to whatever the catalog's measurement says now (profiles written before
  /// bwplan recorded it were fitted under 1). 0 for the built-in constants: the GPU's own factor applies.
  double fitted_matmul = 0;
  /// Achieved fraction of the FlashAttention-3 paper's rates (fused_attention_rates) by the fused kernels on the
  /// calibration machine (PyTorch 2.11 eager on the H200); fitted with `memory` and `launch_s`, pinned by the runs that
  /// differ only in sequence length (same tokens, more attention).
  double attention = 0.83;
  double memory = 0.60;          ///< achieved fraction of HBM bandwidth in element-wise kernels (their byte counts: block_elementwise)
  double launch_s = 4.7e-6;      ///< seconds per kernel of fixed cost (launch and tail)
  double nvlink = 0.80;          ///< achieved fraction of per-direction NVLink bandwidth (NCCL bus bandwidth)
  double efa = 0.72;             ///< achieved fraction of EFA bandwidth for large buffers (p5 all-reduce, 4–32 nodes, fitted with efa_half_message)
  double collective_latency_s = 20e-6;  ///< fixed cost per collective call
  double nvlink_step_s = 3.4e-6;   ///< NCCL ring step over NVLink (Simple protocol hardware latency, NCCL tuning model)
  double efa_step_s = 14e-6;       ///< NCCL ring step over the network (Simple protocol)
  double nvls_latency_s = 25e-6;   ///< NVLS (NVLink SHARP) all-reduce latency on NVLink (NCCL tuning model)
  double nvls_efficiency_hopper = 0.85;     ///< NCCL's NVLS efficiency factor, SM90
  double nvls_efficiency_blackwell = 0.74;  ///< NCCL's NVLS efficiency factor, SM100
  /// Whole-buffer bytes (the nccl-tests "size": the gathered output of an all-gather, the input of a
  /// reduce-scatter, the buffer of an all-reduce) at which NVLink bus bandwidth is half its peak (32 MiB:
  /// the former 4 MiB per rank at 8 ranks, so one 8-GPU node is unchanged).
  double nvlink_half_message = 32.0 * 1048576;
  /// Same across nodes: fitted with `efa` and the step latencies to the p5 all-reduce bus bandwidths of 2 to
  /// 32 nodes at 32 MiB … 8 GiB (crazyguitar/aws-gpu-communication-benchmark data/nccl_all_reduce.csv,
  /// ../shared/reference/scaleout.md §2.1; rms log error 0.16 over the 24 points of 4–32 nodes; the old per-rank model was 10–70× low there).
  double efa_half_message = 96.0 * 1048576;
  /// Achieved fraction of the GPU's host link (gpu_spec::host_link_per_direction) by pinned host-device copies of
  /// CPU offload. Assumed, not measured: PCIe 5.0 x16 carries 64 GB/s per direction before TLP and flow-control
  /// overhead; bitsandbytes measured pageable (paged) transfers at "about half or worse" of the link
  /// (docs/source/explanations/optimizers.mdx), and pinned copies run above that. docs/hardware.md#host-link
  double host_link = 0.80;
  /// Host (CPU) memory bandwidth one rank's CPU optimizer step streams at, byte/s. Derived, not measured: the
  /// catalog's 8-GPU instances are two-socket Xeon hosts with 8 DDR5-4800 channels per socket (Sapphire Rapids on
  /// p5/p5en), 2 × 8 × 4.8 GT/s × 8 B = 614 GB/s per node, shared by 8 ranks (76.8 GB/s each), at half of it for a
  /// step that streams seven arrays (STREAM-class kernels reach 50–80 % of the channels' rate). DeepSpeedCPUAdam's
  /// AVX step (csrc/includes/cpu_adam.h `Step_AVX` @edaa722) and PyTorch's fused CPU AdamW are bound by these bytes,
  /// not by their FLOPs (a few per element). docs/hardware.md#host-memory-bandwidth
  double host_memory_per_gpu = 38.4e9;
};

/// Achieved fraction of the dense tensor-core peak of one GEMM C[m×n] = A[m×k]·B[k×n]:
/// `gemm_max · k/(k + k½) · mn/(mn + mn½)`. The first factor is the main loop's depth against the fixed cost of each
/// output tile (loading the first stages, the epilogue's store): a GEMM with a short reduction spends more of its time
/// outside the MMA loop. The second is the number of output tiles against the SMs that run them (the last partial
/// wave, the launch tail): a small output leaves SMs idle. Each GEMM of a step has its own m, n, k: the forward
/// `Y = X·Wᵀ` (m = tokens, n = out, k = in), the input gradient `dX = dY·W` (m = tokens, n = in, k = out) and the
/// weight gradient `dW = dYᵀ·X` (m = out, n = in, k = tokens). A grouped GEMM (MoE experts) counts the output of all
/// its groups in the wave term. Form after the roofline-with-overheads GEMM models of cuBLAS (NVIDIA "Matrix
/// Multiplication Background" user guide: tile and wave quantization); constants in throughput_calibration.
[[nodiscard]] constexpr double gemm_efficiency(double k, double mn_total, const throughput_calibration& c, double half_scale = 1.0) noexcept {
  if (k <= 0 || mn_total <= 0) return c.gemm_max;
  const double hk = c.gemm_half_k * half_scale, hmn = c.gemm_half_mn * half_scale;
  return c.gemm_max * (k / (k + hk)) * (mn_total / (mn_total + hmn));
}

/// Seconds of a GEMM of `flops_at_peak` seconds at 100 % of the peak: flops_at_peak / gemm_efficiency(k, mn_total),
/// with one division (the planner evaluates it for every GEMM of every candidate).
[[nodiscard]] constexpr double gemm_seconds(double flops_at_peak, double k, double mn_total, const throughput_calibration& c,
                                            double half_scale = 1.0) noexcept {
  if (k <= 0 || mn_total <= 0) return flops_at_peak / c.gemm_max;
  const double hk = c.gemm_half_k * half_scale, hmn = c.gemm_half_mn * half_scale;
  return flops_at_peak * (k + hk) * (mn_total + hmn) / (c.gemm_max * k * mn_total);
}

/// Attention kernel rates as fractions of the bf16 dense peak, non-causal, long sequences, by head_dim (64, 128, 256;
/// interpolated linearly between, clamped outside), forward and backward (backward FLOPs counted as 2.5 × forward,
/// the FlashAttention convention). Source: the FlashAttention-3 paper (Shah et al. 2024, arXiv:2407.08608, figures
/// 5–7: H100 SXM5, 16K tokens per batch): FlashAttention-2 forward 324 / 370 / 298 TFLOP/s at head_dim 64 / 128 / 256,
/// backward 291 / 322 at 64 / 128; FlashAttention-3 forward 497 / 648 / 642, backward 474 / 561 (of 989). The
/// head_dim-256 backward rates (not published there) take the forward's 256 : 128 ratio. A causal mask costs 0.905 of
/// the rate (FlashAttention-2 335 vs 370, cuDNN 539 vs 595 TFLOP/s, head_dim 128, same figures).
struct attention_rates {
  double fwd64, fwd128, fwd256, bwd64, bwd128, bwd256;
  /// Forward (`backward` false) or backward rate fraction at head dimension `d`.
  [[nodiscard]] constexpr double at(double d, bool backward) const noexcept {
    const double a = backward ? bwd64 : fwd64, b = backward ? bwd128 : fwd128, c = backward ? bwd256 : fwd256;
    if (d <= 64) return a;
    if (d <= 128) return a + (b - a) * (d - 64) / 64;
    if (d <= 256) return b + (c - b) * (d - 128) / 128;
    return c;
  }
};
/// FlashAttention-2 (attention_kernel::flash2), as published.
inline constexpr attention_rates flash2_rates{324.0 / 989, 370.0 / 989, 298.0 / 989, 291.0 / 989, 322.0 / 989, 322.0 / 989 * 298 / 370};
/// FlashAttention-2 on Ampere and Ada (A100, A10G, L40S), where neither FlashAttention-3 nor cuDNN's Hopper/Blackwell
/// fused attention runs and PyTorch's SDPA takes its flash backend (FlashAttention-2) whatever the plan's kernel: the
/// FlashAttention-2 paper (Dao 2023, arXiv:2307.08691, abstract and §4.1) reaches "50–73 % of the theoretical maximum
/// FLOPs/s on A100", 73 % at its best shape (forward, head_dim 128, long sequences); the other shapes keep the H100
/// FlashAttention-2 figures' ratios to that point (flash2_rates: backward 322/370 of forward, head_dim 64 324/370, 256
/// 298/370), so every entry is flash2_rates × 0.73 / (370/989). The A10G (sm86) and L40S (sm89) have no published
/// FlashAttention-2 fraction: the A100's is used (docs/hardware.md#attention-kernel).
inline constexpr attention_rates flash2_ampere_rates{
    324.0 / 370 * 0.73, 0.73, 298.0 / 370 * 0.73, 291.0 / 370 * 0.73, 322.0 / 370 * 0.73, 322.0 / 370 * 298 / 370 * 0.73};
/// FlashAttention-3 (attention_kernel::fused, × throughput_calibration::attention).
inline constexpr attention_rates fused_attention_rates{497.0 / 989, 648.0 / 989, 642.0 / 989, 474.0 / 989, 561.0 / 989, 561.0 / 989 * 642 / 648};
inline constexpr double attention_causal_factor = 0.905;
/// Key length (tokens) at which a kernel reaches half its long-sequence rate: non-causal forward 100, backward 250,
/// causal forward 300, causal backward 400 (the same figures' 512 … 16K sweeps: FlashAttention-2 head_dim 128 forward
/// 309/370 at 512, backward 214/322 at 512 and 291/322 at 2K; causal forward 191/335 at 512, 298/335 at 2K).
[[nodiscard]] constexpr double attention_length_efficiency(double keys, bool backward, bool causal) noexcept {
  const double half = causal ? (backward ? 400.0 : 300.0) : (backward ? 250.0 : 100.0);
  return keys > 0 ? keys / (keys + half) : 1.0;
}

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
/// link's bandwidth is scaled by the size efficiency S / (S + S½) of the **whole buffer** S, as nccl-tests
/// plots bus bandwidth against its total "size" (NT doc/PERFORMANCE.md) and NCCL's tuner costs a collective
/// as `lat·steps + nBytes/bw` with nBytes the total buffer (NCCL src/graph/tuning.cc, src/enqueue.cc;
/// ../shared/reference/scaleout.md §1.1, §1.7). The per-rank message S/n does not set the efficiency: NCCL
/// pipelines each ring step in chunks, and what the rank count adds is latency, counted by steps below. Ring
/// latency: `collective_latency_s` + steps × per-step latency (n−1 steps, 2(n−1) for all-reduce, of which
/// 2(N−1) cross the network). Within one node an all-reduce may use NVLS (in-switch reduction: bus bandwidth
/// doubled × 0.85 Hopper / 0.74 Blackwell, 25 µs; Hopper and Blackwell NVLink nodes only) or, across nodes, a
/// tree (latency 2·((ppn−1)·α_nvl + log2 N·α_net)); the fastest is taken, as NCCL's tuner does. On a PCIe GPU
/// (`gpu.interconnect == "pcie"`) the intra-node link is PCIe at `nvlink_per_direction`.
///
/// A "node" of `g` is one NVLink domain: an instance, or on a GB200/GB300 NVL72 UltraServer the instances that
/// share one NVLink fabric (training_config::nvlink_domain; 18 instances of 4 GPUs): ranks within it talk over
/// NVLink, and its EFA is that of all its instances (`per_node · groups_per_node / gpus_per_node` of them). NCCL
/// runs one communicator of up to 72 local ranks over multi-node NVLink (`NCCL_MAX_LOCAL_RANKS` = 72,
/// src/include/device.h; ../shared/reference/scaleout.md §5).
[[nodiscard]] inline seconds collective_time(collective_kind kind, bytes size, const comm_group& g, const gpu_spec& gpu,
                                             const instance_spec* inst, const throughput_calibration& k) noexcept {
  const int n = g.ranks;
  if (n <= 1 || size.raw() <= 0) return seconds{};
  const double S = size.raw();
  const int N = inst ? g.nodes() : 1;
  const bool ar = kind == collective_kind::all_reduce;
  const double factor = (ar ? 2.0 : 1.0) * (n - 1) / n;
  const double nvl = gpu.nvlink_per_direction.raw() * k.nvlink * S / (S + k.nvlink_half_message);
  double t_bw = factor * S / nvl;
  if (N > 1 && inst != nullptr) {
    const double domain_instances = std::max(1.0, static_cast<double>(g.per_node * g.groups_per_node) / std::max(1, inst->gpus_per_node));
    const double efa = inst->efa_per_node.raw() * domain_instances * k.efa / std::max(1, g.groups_per_node) * S / (S + k.efa_half_message);
    const double node_bytes = (ar ? 2.0 : 1.0) * (N - 1) / N * S;
    t_bw = std::max(t_bw, node_bytes / efa);
  }
  const double steps = (ar ? 2.0 : 1.0) * (n - 1);
  const double inter_steps = N > 1 ? (ar ? 2.0 : 1.0) * (N - 1) : 0.0;
  const double ring = k.collective_latency_s + (steps - inter_steps) * k.nvlink_step_s + inter_steps * k.efa_step_s + t_bw;
  double best = ring;
  // NVLS (NVLink SHARP, in-switch reduction) needs NVSwitch gen 3 or newer: Hopper and Blackwell NVLink nodes only
  const bool nvls = gpu.has_nvlink() && (gpu.architecture_is("hopper") || gpu.architecture_is("blackwell"));
  if (ar && N <= 1 && n > 2 && nvls) {  // NVLS within a node
    const double eff = gpu.architecture_is("blackwell") ? k.nvls_efficiency_blackwell : k.nvls_efficiency_hopper;
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
  seconds tensor_parallel;   ///< sequence-parallel all-gathers and reduce-scatters of activations (all-reduces without sequence parallel)
  seconds context_parallel;  ///< ring-attention K/V exchange
  seconds expert_parallel;   ///< MoE dispatch and combine all-to-all
  seconds pipeline_parallel; ///< P2P sends of activations (forward) and their gradients (backward) between pipeline stages
  /// Sum of the parts (= throughput_estimate::communication, resp. exposed_communication).
  [[nodiscard]] constexpr seconds total() const noexcept {
    return data_parallel + tensor_parallel + context_parallel + expert_parallel + pipeline_parallel;
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
  seconds bubble;                 ///< pipeline bubble: idle time of the warm-up and cool-down (0 for pp = 1)
  int pipeline_rank = 0;          ///< pipeline parallelism: the rank that sets the step time (the slowest; 0 for pp = 1)
  seconds step;                   ///< wall time of one optimizer step: compute + bubble + exposed communication + offload
  /// CPU offload (offload_times): the host's optimizer step and the host-device copies the step waits for (0 without)
  seconds offload;
  seconds offload_cpu_step;       ///< of which the optimizer step on the host
  seconds offload_pcie;           ///< host-device copies per step, before overlap
  double tokens_per_s = 0;        ///< whole job, tokens per second
  double tokens_per_s_per_gpu = 0;
  double mfu = 0;                 ///< model FLOPs utilisation against the bf16 dense peak (bf16-equivalent MFU)
  double mfu_format = 0;          ///< model FLOPs utilisation against the dense peak of the plan's GEMM format (= mfu for bf16);
                                  ///< the figure that stays below 100 % for fp8/nvfp4 plans (issue 17)
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

/// Time of one all-to-all over `g` in which every rank sends `per_rank` bytes spread evenly over the ranks (MoE
/// dispatch or combine). Of what a rank sends, (p − 1)/n stays on its node's NVLink (p = ranks per node) and
/// (n − p)/n crosses the network, where the p ranks of a node share its EFA (hierarchically: what leaves a node is
/// p·(n − p)/n · per_rank, shared by the communicators running on it). Each link runs at its calibrated fraction times
/// the size efficiency of the buffer it carries (NVLink: per_rank; EFA: the node's p·per_rank, as the NICs see it),
/// the slower of the two bounds the call, plus the fixed latency and one step per peer on the node and per node.
/// A "node" is one NVLink domain as in collective_time (on an NVL72 UltraServer, the EFA of all its instances).
/// Checked against nccl-tests all-to-all bus bandwidth on 2–32 p5 nodes (crazyguitar/aws-gpu-communication-benchmark
/// data/nccl_alltoall.csv, ../shared/reference/scaleout.md §2.1; tests/scaling_test.cpp). The former model sent
/// (n − 1)/n of the bytes over one GPU's share of the EFA, twice the network time across two nodes.
[[nodiscard]] inline seconds all_to_all_time(bytes per_rank, const comm_group& g, const gpu_spec& gpu, const instance_spec* inst,
                                             const throughput_calibration& k) noexcept {
  const int n = g.ranks;
  if (n <= 1 || per_rank.raw() <= 0) return seconds{};
  const double S = per_rank.raw();
  const int p = std::max(1, std::min(g.per_node, n));
  const int N = inst ? g.nodes() : 1;
  const double nvl = gpu.nvlink_per_direction.raw() * k.nvlink * S / (S + k.nvlink_half_message);
  double t = (N > 1 ? static_cast<double>(p - 1) : static_cast<double>(n - 1)) / n * S / nvl;
  if (N > 1 && inst != nullptr) {
    const double node = p * S;
    const double domain_instances = std::max(1.0, static_cast<double>(g.per_node * g.groups_per_node) / std::max(1, inst->gpus_per_node));
    const double efa = inst->efa_per_node.raw() * domain_instances * k.efa / std::max(1, g.groups_per_node) * node /
                       (node + k.efa_half_message);
    t = std::max(t, static_cast<double>(n - p) / n * node / efa);
  }
  return seconds::base(t + k.collective_latency_s + (p - 1) * k.nvlink_step_s + (N - 1) * k.efa_step_s);
}

/// Expert-parallel all-to-all time of one micro-batch (issue 7, issue 13): per MoE block, dispatch and combine of
/// `T · k · cf · h` bf16 elements each (T = the tokens this GPU routes, micro-batch × sequence ÷ (tp · cp)) in
/// forward and again in backward (×4; checkpointed blocks repeat the forward pair), each an all_to_all_time over the
/// ep ranks (NVLink within a node, the node's EFA shared by its ranks across nodes). 0 for ep = 1. Sources:
/// GShard/DeepSpeed-MoE all-to-all volume; torchtitan expert parallelism (`all_to_all_single_autograd` for dispatch
/// and combine per MoE layer, on the critical path: exposed, see exposed_communication).
[[nodiscard]] inline double moe_all_to_all_s(const model_spec& m, const training_config& c, const gpu_spec& gpu,
                                             const instance_spec* inst, const throughput_calibration& k) {
  if (c.ep <= 1 || !m.is_moe()) return 0;
  const double T = static_cast<double>(c.tokens_per_micro_batch()) / (static_cast<double>(c.tp) * c.cp);
  const double per_dir = T * static_cast<double>(m.top_k) * c.moe_capacity_factor * static_cast<double>(m.hidden) * 2;
  const double ck = static_cast<double>(c.checkpointed_blocks(m.layers)) / static_cast<double>(m.layers);
  const double calls = (4 + 2 * ck) * static_cast<double>(m.moe_layers);
  const int gpn = std::max(1, std::min(c.nvlink_domain_gpus(), c.world_size));
  comm_group g;
  g.ranks = c.ep;
  g.per_node = std::max(1, std::min(c.ep, gpn / std::max(1, c.tp)));
  g.groups_per_node = std::max(1, gpn / g.per_node);
  return calls * all_to_all_time(bytes::base(per_dir), g, gpu, inst, k).raw();
}

/// The terms of the throughput model, one function each: compute per op class, communication per
/// parallelism, and the overlap model. Times are seconds on one GPU.
namespace terms {

// ---------------------------------------------------------------------------------------------------------
// Shape of one step

/// One linear layer of a block as its GEMMs see it on one GPU, after tensor and expert parallelism.
struct linear_gemm {
  double in = 0;      ///< input features: K of the forward GEMM
  double out = 0;     ///< output features: N of the forward GEMM
  double rows = 0;    ///< rows of the forward GEMM (tokens; a routed expert's tokens)
  double groups = 1;  ///< GEMMs of this shape launched as one grouped GEMM (the routed experts on this GPU)
  double blocks = 0;  ///< blocks that hold it
  bool sac_recomputed = false;  ///< torchtitan's per-op SAC recomputes its forward (k, o, up: every other mm is saved)
  /// Forward FLOPs: 2 · rows · groups · in · out.
  [[nodiscard]] constexpr double flops() const noexcept { return 2 * rows * groups * in * out; }
};

/// The linears of one block of `m` under `c` (tp shards columns of q/k/v/gate/up and rows of o/down; routed experts
/// ÷ ep, each receiving ep·T·k·cf/E tokens; `tokens` = the micro-batch's tokens a tensor-parallel group computes, T·tp).
/// MLA: q_a, q_b (or q), kv_a, kv_b, o. Each linear's `blocks` counts the blocks of the whole model, or with
/// `stage` those of one pipeline rank (its dense and MoE blocks), the blocks throughput_shape::L then holds.
/// Returns the number written into `out` (at most 16). Sources: the Hugging Face modeling files of each family (the
/// same layout count_parameters counts), Megatron-Core MoE grouped GEMM.
[[nodiscard]] inline int block_linears(const model_spec& m, const training_config& c, double tokens, std::array<linear_gemm, 16>& out,
                                       const pipeline_rank* stage = nullptr) {
  int n = 0;
  const double h = static_cast<double>(m.hidden), tp = c.tp;
  const double L = static_cast<double>(stage ? stage->blocks : m.layers);
  auto add = [&](double in, double o, double rows, double groups, double blocks, bool sac = false) {
    if (n < 16 && in > 0 && o > 0 && blocks > 0) out[static_cast<std::size_t>(n++)] = linear_gemm{in, o, rows, groups, blocks, sac};
  };
  if (m.is_mla()) {
    const double a = static_cast<double>(m.heads), dqk = static_cast<double>(m.head_dim);
    const double dnope = static_cast<double>(m.head_dim - m.qk_rope_dim), dv = static_cast<double>(m.v_head_dim);
    const double rq = static_cast<double>(m.q_lora_rank), rkv = static_cast<double>(m.kv_lora_rank), drope = static_cast<double>(m.qk_rope_dim);
    if (rq > 0) { add(h, rq, tokens, 1, L); add(rq, a * dqk / tp, tokens, 1, L); }
    else add(h, a * dqk / tp, tokens, 1, L);
    add(h, rkv + drope, tokens, 1, L, true);
    add(rkv, a * (dnope + dv) / tp, tokens, 1, L);
    add(a * dv / tp, h, tokens, 1, L, true);
  } else {
    const double q = static_cast<double>(m.q_dim()), kv = static_cast<double>(m.kv_dim());
    add(h, q / tp, tokens, 1, L);
    add(h, kv / tp, tokens, 1, L, true);
    add(h, kv / tp, tokens, 1, L);
    add(q / tp, h, tokens, 1, L, true);
  }
  const double F = static_cast<double>(m.intermediate);
  const double moe_blocks = !m.is_moe() ? 0.0 : stage ? static_cast<double>(stage->blocks - stage->dense_blocks)
                                                                    : static_cast<double>(m.moe_layers);
  const double dense_blocks = L - moe_blocks;
  if (m.gated_mlp) { add(h, F / tp, tokens, 1, dense_blocks); add(h, F / tp, tokens, 1, dense_blocks, true); }
  else add(h, F / tp, tokens, 1, dense_blocks, true);
  add(F / tp, h, tokens, 1, dense_blocks);
  if (m.is_moe()) {
    const double Lm = moe_blocks, E = static_cast<double>(m.experts), ep = c.ep;
    const double Fe = static_cast<double>(m.moe_intermediate), Fs = static_cast<double>(m.shared_intermediate);
    const double per_expert = ep * tokens * static_cast<double>(m.top_k) * c.moe_capacity_factor / E;
    add(h, E, tokens, 1, Lm);  // router
    add(h, Fe, per_expert, E / ep, Lm);
    add(h, Fe, per_expert, E / ep, Lm, true);
    add(Fe, h, per_expert, E / ep, Lm);
    if (Fs > 0) { add(h, Fs / tp, tokens, 1, Lm); add(h, Fs / tp, tokens, 1, Lm, true); add(Fs / tp, h, tokens, 1, Lm); }
  }
  return n;
}

/// GEMM weights one GPU holds per block of `L` blocks, averaged over them: Σ blocks/L · in · out · groups of the
/// linears (block_linears: ÷ tp; routed experts ÷ ep, all of this GPU's experts). Elements, not bytes.
[[nodiscard]] constexpr double local_block_weights(const std::array<linear_gemm, 16>& linears, int n, double L) noexcept {
  double w = 0;
  for (int i = 0; i < n; ++i) {
    const linear_gemm& g = linears[static_cast<std::size_t>(i)];
    w += g.blocks * g.in * g.out * g.groups;
  }
  return L > 0 ? w / L : 0.0;
}

/// The dimensions of one training step on one GPU that the throughput terms read (docs/methodology.md symbols).
struct throughput_shape {
  double T = 0;      ///< tokens of one micro-batch each GPU computes: micro-batch × sequence ÷ (tp · cp)
  double b = 0;      ///< micro-batch (sequences)
  double s = 0;      ///< sequence length
  double h = 0;      ///< hidden size
  double V = 0;      ///< vocabulary
  double f = 0;      ///< MLP width a token runs through, with the MoE capacity factor
  double q = 0;      ///< query width a·d
  double kv = 0;     ///< key/value width g·d
  double L = 0;      ///< blocks
  double Lb = 1;     ///< max(1, L): blocks as FSDP2 units (+1 for the root)
  double nck = 0;    ///< blocks recomputed whole (full / every-K checkpointing)
  double nq = 0;     ///< blocks whose GEMMs run in the low-precision format
  double lin = 0;    ///< GEMM weights a token runs through per block (MoE: activated experts, averaged over blocks)
  double P = 0;      ///< parameters stored per GPU before data-parallel sharding (÷ tp)
  double Pc = 0;     ///< parameters gathered / all-reduced per GPU (÷ tp; experts ÷ ep)
  double root_gemm = 0;  ///< embedding + LM head parameters ÷ tp (gathered in bf16 under FP8 all-gather)
  double n = 1;      ///< FSDP shard size
  double w = 4;      ///< bytes per stored parameter, gradient and state
  double ga = 1;     ///< micro-batches per optimizer step
  double peak = 0;   ///< bf16 dense peak (FLOP/s)
  double peak_lp = 0;  ///< dense peak of the compute format (FLOP/s; the bf16 peak when the catalog has none)
  double hbm = 0;    ///< achieved HBM bandwidth (byte/s): datasheet × calibration `memory`
  double clock = 1;  ///< tensor-core rate sustained at the power limit over the rated one (gpu_spec::compute_clock_fraction)
  double attention_speedup = 1;  ///< gpu_spec::attention_speedup (Blackwell Ultra's doubled softmax exponentials)
  /// The GPU's measured matmul fraction over the calibration GPU's (gpu_spec::mamf_fraction /
  /// throughput_calibration::matmul_reference; 1 when the catalog has no measurement): GB200 0.907, B200 0.966,
  /// B300 0.979, A100 1.082; matmul_factor). Scales the GEMM rates and, where the attention rates were measured on an
  /// H100 (every kernel but the FlashAttention-2 of Ampere and Ada GPUs, whose rates are the A100's), the attention rates.
  double matmul = 1;
  double d = 0;      ///< head dimension (q·k per head)
  double tp = 1;     ///< tensor-parallel degree
  double cp = 1;     ///< context-parallel degree
  bool qk_norm = false;  ///< per-head q/k RMSNorm (Qwen3)
  double norms = 2;  ///< norms per block
  /// Tensor parallelism without sequence parallel (training_config::sequence_parallel false, Megatron-LM without
  /// `--sequence-parallel`): tp, else 1. The norms and residual adds then run on the whole sequence on every
  /// tensor-parallel rank (Korthikanti et al. 2022, arXiv:2205.05198, section 4.2.2: sequence parallelism splits
  /// exactly these along the sequence), so their bytes per token of this rank's T are tp times those with it.
  double sp_replicas = 1;
  bool gated = true; ///< gated MLP (SwiGLU/GeGLU)
  double moe_copies = 0;  ///< routed copies of a token per block, k·cf averaged over blocks (0: dense)
  bool foreach_optimizer = false;  ///< torch.optim.AdamW(foreach=True) instead of fused
  attention_kernel sdpa = attention_kernel::fused;  ///< the attention kernel (gpu_spec::attention)
  /// An Ampere or Ada GPU (gpu_spec::architecture): attention runs FlashAttention-2 at flash2_ampere_rates whatever
  /// `sdpa` says (FlashAttention-3 and cuDNN's fused attention need Hopper or Blackwell).
  bool ampere_attention = false;
  /// Width of K and V as the attention kernel sees them: kv, or q where the stack repeats the KV heads before SDPA
  /// (the FlashAttention-2 stacks of 2024: torchtitan `repeat_kv` in models/llama/model.py @ 9dec370, SDPA before
  /// PyTorch 2.5 had no `enable_gqa`).
  double kv_attention = 0;
  std::array<linear_gemm, 16> linears{};  ///< the block's linears (block_linears)
  int n_linears = 0;
  double recompute_passes = 0;  ///< blocks whose element-wise kernels run again: nck, or L/2 under selective checkpointing
  bool fsdp = false; ///< any FSDP mode
  bool zero1 = false;  ///< distributed-optimizer layout (zero1_layout): one reduce-scatter + all-gather per step
  double Ps = 0;     ///< zero1: parameters whose master weights and states are sharded (experts undivided, ÷ tp)
  double moe_layers = 0;  ///< MoE blocks on this GPU (pipeline: the rank's own)
  bool amp = false;  ///< autocast over fp32 weights (fp32 residual stream)
  bool compiled = false;       ///< torch.compile of the blocks: Inductor fuses their element-wise ops (block_elementwise)
  /// the low-precision linears are torchao 0.18's eager Float8Linear (the hf stack's fp8 and fp8-rowwise without
  /// compile: the reference trainer): each cast is five eager kernels (memory_bound_time), not a fused one
  bool f8_linear = false;
  bool compiled_loss = false;  ///< the loss runs under torch.compile (torchtitan, torchtune with compile)
  /// the hf stack's chunked loss, the reference trainer's 8 checkpointed chunks (apps/train/bwtrain/loss.py
  /// `chunked_loss`): each chunk's LM head and cross-entropy run again in backward
  bool checkpointed_loss = false;
  /// the eager fp32 RMSNorm op chain (transformers' `LlamaRMSNorm` with modules transformers, torchtune's `RMSNorm`),
  /// eager blocks
  bool eager_norm = false;
  /// transformers' rotary tables in the residual dtype (modules transformers, eager blocks): fp32 RoPE under autocast
  bool fp32_rope = false;
  /// Transformer Engine caches a low-precision block's quantized weights from the step's first micro-batch and
  /// reuses them in the others (Megatron-Core `TELinear.forward` / `TEGroupedLinear.forward` pass
  /// `is_first_microbatch`, megatron/core/extensions/transformer_engine.py; TransformerEngine
  /// transformer_engine/pytorch/module/linear.py and grouped_linear.py, `Linear.forward` "allows caching of the FP8
  /// versions of the weights"): weights are cast once per step, not per micro-batch
  bool cached_weight_casts = false;
  /// GEMM weights this GPU holds per block, averaged over its blocks: Σ blocks/L · in·out·groups over `linears`
  /// (÷ tp; every routed expert of this GPU, E/ep, not the activated ones `lin` counts). What a low-precision block
  /// quantizes and QLoRA dequantizes (local_block_weights).
  double lin_local = 0;
  int gpn = 1;       ///< GPUs per node (per NVLink domain, where it spans instances) the job uses, min(domain, world)
  format_traits format;  ///< traits of the compute format on this GPU
  // --- fine-tuning (docs/finetune.md)
  bool adapters = false;  ///< LoRA/QLoRA: frozen base, no weight-gradient GEMMs for it
  bool qlora = false;     ///< the base's block linears are NF4 and dequantized per use
  double Pt = 0;          ///< trained parameters per GPU before sharding (P, or the adapters)
  double Ptc = 0;         ///< trained parameters reduced per GPU (Pc, or the adapters)
  double gather = 0;      ///< bytes FSDP2 all-gathers per micro-batch pass: bf16 2·Pc, FP8 Pc + root, QLoRA packed NF4 linears
  double state = 0;       ///< optimizer state bytes of the trained parameters per GPU before sharding
  adapter_shape adapter;  ///< the adapters of one block
  // --- CPU offload (training_config::offload, docs/finetune.md#cpu-offload)
  bool off_opt = false;      ///< the optimizer step on the host
  bool off_params = false;   ///< the sharded parameters on the host (FSDP2 CPUOffloadPolicy)
  bool off_act = false;      ///< the checkpoints on the host
  bool act_streams = false;  ///< activation offload on a side stream (torchtune OffloadActivations), else synchronous (save_on_cpu)
  double host_link = 0;      ///< achieved host-device bandwidth per direction, byte/s (gpu_spec::host_link_per_direction × calibration)
  double host_memory = 0;    ///< host memory bandwidth of one rank's CPU step, byte/s (throughput_calibration::host_memory_per_gpu)
  double checkpoint_bytes = 0;  ///< bytes of the checkpoints of one micro-batch (recomputed blocks × T·h·(2 or 4))
};

/// The factor by which `gpu` runs the tensor-core rates calibrated on the calibration GPU (throughput_shape::matmul):
/// `k.fitted_matmul` for a calibration profile's constants, else gpu.mamf_fraction() / k.matmul_reference, else 1
/// (no measurement). docs/hardware.md#sustained-matmul
[[nodiscard]] inline double matmul_factor(const gpu_spec& gpu, const throughput_calibration& k) noexcept {
  if (k.fitted_matmul > 0) return k.fitted_matmul;
  const double f = gpu.mamf_fraction();
  return f > 0 && k.matmul_reference > 0 ? f / k.matmul_reference : 1.0;
}

/// The shape of configuration `c` of `m` on `gpu` (see throughput_shape). Does not validate `c`. With pipeline
/// parallelism, of pipeline rank `stage` (rank 0 when null): its blocks and parameters, the LM head and the loss
/// on the last rank only.
[[nodiscard]] inline throughput_shape throughput_shape_of(const model_spec& m, const training_config& c, const gpu_spec& gpu,
                                                          const throughput_calibration& k, const pipeline_rank* stage = nullptr) {
  const parameter_count pc_full = count_parameters(m);
  const parameter_count pc = detail::ep_local(pc_full, m, c.ep);  // routed experts / ep (MoE only)
  throughput_shape r;
  r.zero1 = zero1_layout(c);
  r.fsdp = c.sharded() && !r.zero1;
  r.amp = !r.fsdp && !r.zero1 && c.master == master_weights::fp32;
  // what torch.compile compiles, as memory.hpp's stack_settings reads it (Megatron-LM does not compile its model)
  r.compiled = c.compile && c.stack != training_stack::megatron;
  r.f8_linear = c.stack == training_stack::hf && !r.compiled &&
                (c.format == compute_format::fp8 || c.format == compute_format::fp8_rowwise);
  r.compiled_loss = r.compiled && (c.stack == training_stack::torchtitan || c.stack == training_stack::torchtune);
  r.checkpointed_loss = c.loss == loss_impl::chunked && c.stack == training_stack::hf;
  // (RMSNorm only: a LayerNorm is ATen's fused kernel in every stack; RoPE only where the model has it, not learned
  // positions or ALiBi)
  r.eager_norm = ((c.modules == module_kernels::transformers && c.stack == training_stack::hf) || c.stack == training_stack::torchtune) &&
                 !r.compiled && !m.layer_norm;
  r.fp32_rope = c.modules == module_kernels::transformers && c.stack == training_stack::hf && !r.compiled && m.positions == 0 && !m.alibi;
  r.T = static_cast<double>(c.tokens_per_micro_batch()) / (static_cast<double>(c.tp) * c.cp);
  r.b = static_cast<double>(c.micro_batch);
  r.s = static_cast<double>(c.seq_len);
  r.h = static_cast<double>(m.hidden);
  r.V = static_cast<double>(m.vocab);
  r.f = detail::mlp_width_per_token(m, c.moe_capacity_factor);
  r.q = static_cast<double>(m.q_dim());
  r.kv = static_cast<double>(m.kv_dim());
  r.L = static_cast<double>(m.layers);
  r.Lb = std::max(1.0, r.L);
  r.nck = static_cast<double>(c.checkpointed_blocks(m.layers));
  r.nq = static_cast<double>(c.quantized_blocks(m.layers));
  r.lin = m.is_moe() ? static_cast<double>(pc_full.active_gemm_weights() - pc_full.embedding) / static_cast<double>(m.layers)
                     : static_cast<double>(pc.block_linear);
  r.P = static_cast<double>(r.fsdp ? pc_full.total() : pc.total()) / c.tp;
  r.Pc = static_cast<double>(pc.total()) / c.tp;
  r.root_gemm = static_cast<double>(pc.embedding + pc.lm_head) / c.tp;
  r.n = c.shard_size();
  r.w = c.master == master_weights::fp32 ? 4 : 2;
  r.ga = static_cast<double>(c.grad_accum);
  r.peak = gpu.peak("bf16").value_or(flop_rate{}).raw();
  r.format = traits(c.format, gpu);
  r.peak_lp = gpu.peak(r.format.rate_key).value_or(flop_rate::base(r.peak)).raw();
  r.hbm = gpu.hbm_bandwidth.raw() * k.memory;
  r.clock = gpu.compute_clock_fraction();
  r.matmul = matmul_factor(gpu, k);
  r.attention_speedup = gpu.attention_speedup;
  r.recompute_passes =
      (c.ac.mode == ac_mode::selective_op || c.ac.mode == ac_mode::selective_attn) ? 0.5 * r.L : r.nck;
  r.gpn = std::max(1, std::min(c.nvlink_domain_gpus(), c.world_size));
  r.moe_layers = static_cast<double>(m.moe_layers);
  r.d = static_cast<double>(m.head_dim);
  r.tp = c.tp;
  r.cp = c.cp;
  r.qk_norm = m.qk_norm;
  r.norms = m.norms_per_block;
  r.sp_replicas = c.tp > 1 && !c.sequence_parallel ? static_cast<double>(c.tp) : 1.0;
  r.gated = m.gated_mlp;
  r.moe_copies = m.is_moe() ? static_cast<double>(m.top_k) * c.moe_capacity_factor * static_cast<double>(m.moe_layers) / std::max(1.0, r.L) : 0;
  r.foreach_optimizer = c.optimizer == optimizer_impl::foreach && c.optim == optimizer_kind::adamw;
  r.sdpa = gpu.attention;
  r.ampere_attention = gpu.architecture_is("ampere") || gpu.architecture_is("ada");
  r.kv_attention = r.sdpa == attention_kernel::flash2 ? r.q : r.kv;
  r.n_linears = block_linears(m, c, r.T * c.tp, r.linears);
  r.lin_local = local_block_weights(r.linears, r.n_linears, r.L);
  r.cached_weight_casts = c.stack == training_stack::megatron;
  r.adapters = c.adapters();
  r.qlora = c.finetune == finetune_mode::qlora;
  r.gather = c.fp8_all_gather ? r.Pc + r.root_gemm : 2 * r.Pc;
  if (r.adapters) {
    r.amp = false;  // the frozen base is bf16: no autocast casts of fp32 weights
    r.adapter = adapter_shape_of(m, c.lora, r.fsdp ? 1 : c.ep);  // (FSDP counts the whole model: r.P)
    r.Pt = r.L * r.adapter.params;
    r.Ptc = r.Pt;
    const double lin_all = static_cast<double>(pc.block_linear * m.layers + pc.layer_adjust) / c.tp;
    // bitsandbytes under FSDP gathers the 4-bit codes only (its constants are on every rank already; torchao's
    // NF4Tensor gathers codes and scalers): nf4_constants_sharded, finetune.hpp
    if (r.qlora)
      r.gather = (nf4_constants_sharded(c.stack) || !c.sharded() ? nf4_bytes_per_param : nf4_code_bytes_per_param) * lin_all +
                 2 * (r.Pc - lin_all);
    r.state = optimizer_state_bytes(c.optim, r.w, r.Pt, r.L * r.adapter.factored);
  } else {
    r.Pt = r.P;
    r.Ptc = r.Pc;
    r.state = optimizer_state_bytes(c.optim, r.w, r.P, c.optim == optimizer_kind::adafactor ? adafactor_full_elements(m) / c.tp : 0);
  }
  r.off_opt = c.offloads_optimizer();
  r.off_params = c.offloads_params();
  r.off_act = c.offloads_activations();
  if (r.off_opt) r.amp = false;  // the GPU computes on its bf16 working copy (memory_shape_of)
  r.act_streams = c.stack == training_stack::torchtune;
  r.host_link = gpu.host_link().raw() * k.host_link;
  r.host_memory = k.host_memory_per_gpu;
  r.checkpoint_bytes = r.nck * r.T * r.h * (r.amp ? 4 : 2);
  double factored = c.optim == optimizer_kind::adafactor ? adafactor_full_elements(m) / c.tp : 0;
  if (c.pp > 1) {  // one pipeline rank (full fine-tunes only: violations)
    const pipeline_rank st = stage ? *stage : pipeline_rank_of(c, m.layers, leading_dense_blocks(m), 0);
    const double whole = static_cast<double>(pc.total());
    r.L = static_cast<double>(st.blocks);
    r.Lb = std::max(1.0, r.L);
    r.nck = static_cast<double>(c.checkpointed_blocks(st.blocks));
    const std::int64_t L = m.layers;
    const bf16_blocks keep = c.bf16_kept();
    const std::int64_t qf = c.format == compute_format::bf16 ? L : keep.first;
    const std::int64_t qe = c.format == compute_format::bf16 ? L : std::max(qf, L - keep.last_for(L));
    const std::int64_t n = st.blocks;
    r.nq = c.virtual_stages() <= 1
               ? static_cast<double>(std::max<std::int64_t>(0, std::min(qe, st.first_block + n) - std::max(qf, st.first_block)))
               : static_cast<double>(L > 0 ? (std::max<std::int64_t>(0, qe - qf) * n + L / 2) / L : 0);
    r.P = pipeline_rank_params(m, r.fsdp ? pc_full : pc, st) / c.tp;
    r.Pc = pipeline_rank_params(m, pc, st) / c.tp;
    r.root_gemm = ((st.embedding ? static_cast<double>(pc.embedding) : 0.0) +
                   (st.head ? static_cast<double>(pc.lm_head > 0 ? pc.lm_head : pc.embedding) : 0.0)) / c.tp;
    r.V = st.head ? r.V : 0;
    r.recompute_passes = (c.ac.mode == ac_mode::selective_op || c.ac.mode == ac_mode::selective_attn) ? 0.5 * r.L : r.nck;
    r.moe_layers = m.is_moe() ? static_cast<double>(st.blocks - st.dense_blocks) : 0;
    r.moe_copies = m.is_moe() ? static_cast<double>(m.top_k) * c.moe_capacity_factor * r.moe_layers / r.Lb : 0;
    r.Pt = r.P;
    r.Ptc = r.Pc;
    r.gather = c.fp8_all_gather ? r.Pc + r.root_gemm : 2 * r.Pc;
    // the rank's linears, counted over its own blocks (L above): block_gemms weighs each by blocks / L
    r.n_linears = block_linears(m, c, r.T * c.tp, r.linears, &st);
    r.lin_local = local_block_weights(r.linears, r.n_linears, r.L);
    factored = whole > 0 ? factored * (r.Pc * c.tp / whole) : 0;
    r.state = optimizer_state_bytes(c.optim, r.w, r.P, factored);
  }
  if (r.zero1) {  // the optimizer keeps and updates the shard of every parameter, experts included
    r.Ps = (c.pp > 1 ? pipeline_rank_params(m, pc_full, stage ? *stage : pipeline_rank_of(c, m.layers, leading_dense_blocks(m), 0))
                     : static_cast<double>(pc_full.total())) / c.tp;
    r.Pt = r.Ps;
    r.state = optimizer_state_bytes(c.optim, r.w, r.Ps, factored);
  }
  return r;
}

// ---------------------------------------------------------------------------------------------------------
// Compute per op class (one micro-batch)

/// GEMM time of one micro-batch, by precision.
struct gemm_terms {
  flops block;              ///< forward GEMM FLOPs of one block, 2·T·lin
  flops head;               ///< forward FLOPs of the LM head, 2·T·V·h
  flops recompute_high;     ///< recomputed GEMM FLOPs of bf16 blocks
  flops recompute_low;      ///< recomputed GEMM FLOPs of low-precision blocks
  flop_rate high_rate;      ///< achieved bf16 GEMM rate of a block: its FLOPs over the time of its GEMMs (gemm_efficiency each)
  flop_rate low_rate;       ///< achieved rate of a low-precision block, likewise
  seconds high_precision;   ///< bf16 blocks: forward, backward (2×) and recompute
  seconds low_precision;    ///< low-precision blocks: forward, backward (2×) and recompute
  seconds lm_head;          ///< LM head, forward and backward (gemm_efficiency of each of its GEMMs)
  flops adapter;            ///< LoRA adapter GEMM FLOPs of one micro-batch, forward + backward (0 for a full fine-tune)
  seconds adapters;         ///< LoRA adapters: skinny rank-r GEMMs, memory-bound (see gemm_time)
  /// Sum of the four, in this order.
  [[nodiscard]] constexpr seconds total() const noexcept { return high_precision + low_precision + lm_head + adapters; }
};

/// Seconds of one block's linears in one pass on average over the blocks (each linear weighted by the share of blocks
/// that hold it), at dense rate `peak` with half-widths × `scale` and format efficiency `eff`.
struct block_gemm_seconds {
  double forward = 0;       ///< Y = X·Wᵀ of every linear
  double input_grad = 0;    ///< dX = dY·W
  double weight_grad = 0;   ///< dW = dYᵀ·X
  double sac_forward = 0;   ///< forward of the linears per-op SAC recomputes
};

/// The per-GEMM times of a block's linears (gemm_efficiency of each GEMM's own m, n, k). @sa block_gemm_seconds
[[nodiscard]] inline block_gemm_seconds block_gemms(const throughput_shape& s, double peak, double scale, double eff,
                                                    const throughput_calibration& k) noexcept {
  block_gemm_seconds r;
  if (peak <= 0) return r;
  const double L = std::max(1.0, s.L);
  // gemm_seconds of each GEMM without a division: its FLOPs 2·rows·groups·in·out cancel the k·(m·n) of the efficiency's
  // denominator (k·mn = rows·groups·in·out for the forward, input-gradient and weight-gradient GEMM alike), leaving
  // 2 · (k + k½)·(mn + mn½) / (peak · eff · gemm_max), weighted by the share of blocks that hold the linear
  const double hk = k.gemm_half_k * scale, hmn = k.gemm_half_mn * scale;
  const double c = 2.0 / (peak * eff * L * k.gemm_max);
  for (int i = 0; i < s.n_linears; ++i) {
    const linear_gemm& g = s.linears[static_cast<std::size_t>(i)];
    const double w = c * g.blocks;
    const double fwd = w * (g.in + hk) * (g.rows * g.out * g.groups + hmn);
    r.forward += fwd;
    r.input_grad += w * (g.out + hk) * (g.rows * g.in * g.groups + hmn);
    r.weight_grad += w * (g.rows + hk) * (g.in * g.out * g.groups + hmn);
    if (g.sac_recomputed) r.sac_forward += fwd;
  }
  return r;
}

/// GEMMs of one micro-batch: every linear of every block forward, input gradient and weight gradient, plus the
/// recompute (full checkpointing: the forward of whole blocks; per-op SAC: the forward of the matmuls it does not save,
/// k, o and up in bf16, all of them when the format's GEMMs are outside the save list), and the LM head, each GEMM at
/// the dense peak × its own gemm_efficiency (m, n, k of that GEMM: block_gemms). A low-precision format runs at its
/// own peak, with the half-widths grown by √(peak ratio) (a faster tensor core needs a larger GEMM to amortize the
/// same fixed costs; docs/precision.md#speed) and its `relative_gemm_efficiency`. FLOP fields count `2·T·lin` per
/// block forward (Narayanan et al. 2021, arXiv:2104.04473), the rates are FLOPs over time. Every rate is scaled by
/// the power limit's clock fraction (`clock`, gpu_spec::compute_clock_fraction) and by the GPU's measured matmul
/// fraction over the calibration GPU's (`matmul`, docs/hardware.md#sustained-matmul).
///
/// A frozen base (LoRA, QLoRA) runs no weight-gradient GEMMs: its blocks and LM head cost forward + input gradient
/// (autograd skips `mm` outputs whose `should_compute_output` is false; PEFT freezes the base). The adapters
/// add `6·T·params_per_token` FLOPs per block (forward x·A and (x·A)·B, backward input and weight gradients of both;
/// MoE: the top-k experts' adapters a token runs through, adapter_shape), skinny rank-r GEMMs bound by HBM: per adapted linear each of the three passes reads the input `2·T·d_in`, and
/// reads and writes the output `2·2·T·d_out` (the base output the adapter adds into), at the achieved HBM rate,
/// or their FLOPs at the bf16 GEMM rate when that is slower.
[[nodiscard]] inline gemm_terms gemm_time(const throughput_shape& s, const training_config& c,
                                          const throughput_calibration& k) noexcept {
  const double T = s.T, h = s.h, L = s.L, nq = s.nq, peak = s.peak, peak_lp = s.peak_lp;
  const format_traits& ft = s.format;
  gemm_terms r;
  const double block_gemm = 2 * T * s.lin;
  const double head_gemm = 2 * T * s.V * h;
  const double ratio = peak > 0 ? peak_lp / peak : 1;
  const double clock = s.clock * s.matmul;
  const block_gemm_seconds hp = block_gemms(s, clock * peak, 1.0, 1.0, k);
  const block_gemm_seconds lp = nq > 0 ? block_gemms(s, clock * peak_lp, std::sqrt(ratio), ft.relative_gemm_efficiency, k) : block_gemm_seconds{};
  const bool frozen = s.adapters;  // a frozen base: forward + input gradient only
  const double hp_block = hp.forward + hp.input_grad + (frozen ? 0 : hp.weight_grad);
  const double lp_block = lp.forward + lp.input_grad + (frozen ? 0 : lp.weight_grad);
  // recomputed GEMM FLOPs per block (forward only): full checkpointing recomputes the block; per-op SAC the
  // matmuls it does not save (k, o, up for bf16; all of them when the format's GEMMs are not saved)
  const double sac_hp = 2 * T * (h * s.kv + s.q * h + h * s.f);
  const double sac_lp = ft.sac_saves_gemm_outputs ? sac_hp : block_gemm;
  double recompute_hp = s.nck * block_gemm * (L - nq) / std::max(1.0, L);
  double recompute_lp = s.nck * block_gemm * nq / std::max(1.0, L);
  double recompute_hp_s = s.nck * hp.forward * (L - nq) / std::max(1.0, L);
  double recompute_lp_s = s.nck * lp.forward * nq / std::max(1.0, L);
  if (c.ac.mode == ac_mode::selective_op) {
    recompute_hp = (L - nq) * sac_hp;
    recompute_lp = nq * sac_lp;
    recompute_hp_s = (L - nq) * hp.sac_forward;
    recompute_lp_s = nq * (ft.sac_saves_gemm_outputs ? lp.sac_forward : lp.forward);
  }
  r.block = flops::base(block_gemm);
  r.head = flops::base(head_gemm);
  r.recompute_high = flops::base(recompute_hp);
  r.recompute_low = flops::base(recompute_lp);
  const double passes = frozen ? 2 : 3;
  r.high_rate = flop_rate::base(hp_block > 0 ? passes * block_gemm / hp_block : 0);
  r.low_rate = flop_rate::base(lp_block > 0 ? passes * block_gemm / lp_block : 0);
  r.high_precision = seconds::base((L - nq) * hp_block + recompute_hp_s);
  r.low_precision = seconds::base(nq * lp_block + recompute_lp_s);
  // LM head (vocabulary-parallel under tp): m = the tensor-parallel group's tokens, n = V/tp, k = h
  const double rows = T * s.tp, Vl = s.V / s.tp, hp_peak = s.clock * s.matmul * peak;
  const double head_f = head_gemm / std::max(hp_peak, 1.0);
  // (the hf stack's chunked loss runs each chunk's head GEMM again in its recompute: Tc = ceil(T/8) rows each)
  const double head_s = gemm_seconds(head_f, h, rows * Vl, k) + gemm_seconds(head_f, Vl, rows * h, k) +
                        (frozen ? 0 : gemm_seconds(head_f, rows, Vl * h, k)) +
                        (s.checkpointed_loss ? gemm_seconds(head_f, h, std::ceil(rows / 8) * Vl, k) : 0);
  r.lm_head = seconds::base(hp_peak > 0 ? head_s : 0);
  if (s.adapters) {
    const double hp_rate = r.high_rate.raw() > 0 ? r.high_rate.raw() : hp_peak * k.gemm_max;
    const double runs = L + s.nck;  // every block, again for the recomputed ones (forward only, counted whole)
    const double fl = 6 * T * s.adapter.params_per_token * L + 2 * T * s.adapter.params_per_token * s.nck;
    const double by = 3 * T * (2 * s.adapter.in_sum + 4 * s.adapter.out_sum) * runs;
    r.adapter = flops::base(fl);
    r.adapters = seconds::base(std::max(fl / hp_rate, s.hbm > 0 ? by / s.hbm : 0.0));
  }
  return r;
}

/// Attention time of one micro-batch.
struct attention_terms {
  flops forward;    ///< forward FLOPs of one block's attention, 2·b·s²·q ÷ (tp · cp) (causal half)
  flops recompute;  ///< recomputed attention FLOPs (checkpointed blocks; every block under Megatron selective)
  flop_rate forward_rate;   ///< achieved forward rate (attention_rates × causal mask × key length × clock)
  flop_rate backward_rate;  ///< achieved backward rate (2.5 × the forward FLOPs)
  seconds layer_forward;    ///< one block's forward attention
  seconds layer_backward;   ///< one block's backward attention
  seconds time;     ///< forward + backward + recompute of every block
};

/// Attention (FlashAttention/SDPA, causal): `2·2·b·s²·q/2` forward per block (QKᵀ and PV at half), backward 2.5×
/// forward (the FlashAttention convention, Dao 2023), recompute for checkpointed blocks (Megatron selective
/// recompute: every block's core attention, Korthikanti et al. 2022), at the published rate of the kernel that runs
/// (attention_rates for `s.sdpa` at the model's head_dim, × attention_causal_factor for a causal call, ×
/// attention_length_efficiency of its key length), times the power limit's clock fraction, the GPU's measured matmul
/// fraction over the H100's the rates were published on (throughput_shape::matmul; not for the A100 rates Ampere and Ada run) and the GPU's
/// `attention_speedup` (Blackwell Ultra). Context parallel (load-balanced ring attention, torch
/// `_templated_ring_attention`): each rank does 1/cp of the causal work in one causal call on its own s/cp tokens
/// (step 0) and the rest in cp − 1 non-causal calls of s/cp queries × s/(2cp) keys or s/(2cp) queries × s/cp keys,
/// which run at the non-causal rate.
[[nodiscard]] inline attention_terms attention_time(const throughput_shape& s, const training_config& c,
                                                    const throughput_calibration& k) noexcept {
  const double attn_fwd = 2 * s.b * s.s * s.s * s.q / (static_cast<double>(c.tp) * c.cp);  // causal: QK^T + PV at half; load-balanced CP
  double recompute_attn = s.nck * attn_fwd;
  if (c.ac.mode == ac_mode::selective_attn) recompute_attn = s.L * attn_fwd;
  const bool fused = s.sdpa == attention_kernel::fused && !s.ampere_attention;
  const attention_rates& kr = s.ampere_attention ? flash2_ampere_rates : fused ? fused_attention_rates : flash2_rates;
  const double base = s.clock * (s.ampere_attention ? 1.0 : s.matmul) * s.attention_speedup * s.peak * (fused ? k.attention : 1.0);
  const double keys = s.s / s.cp;  // keys of the causal call (the whole sequence without cp)
  auto rate = [&](bool backward) {
    const double causal = base * kr.at(s.d, backward) * attention_causal_factor * attention_length_efficiency(keys, backward, true);
    if (s.cp <= 1) return causal;
    const double open = base * kr.at(s.d, backward) * attention_length_efficiency(0.5 * keys, backward, false);
    const double share = 1.0 / s.cp;  // the causal step's share of a rank's work
    return 1.0 / (share / causal + (1 - share) / open);
  };
  const double rf = rate(false), rb = rate(true);
  attention_terms r;
  r.forward = flops::base(attn_fwd);
  r.recompute = flops::base(recompute_attn);
  r.forward_rate = flop_rate::base(rf);
  r.backward_rate = flop_rate::base(rb);
  if (rf <= 0 || rb <= 0) return r;
  r.layer_forward = seconds::base(attn_fwd / rf);
  r.layer_backward = seconds::base(2.5 * attn_fwd / rb);
  r.time = seconds::base(s.L * (r.layer_forward + r.layer_backward).raw() + recompute_attn / rf);
  return r;
}

/// Memory-bound kernels of one micro-batch: bytes moved through HBM, by kind.
struct memory_bound_terms {
  bytes elementwise;   ///< norms, RoPE, SwiGLU, residuals, per block and per recomputed block
  bytes loss;          ///< the loss over T·V (standard: fp32 upcast, log-softmax and their gradients; chunked: less)
  bytes casts;         ///< fp32 master weights cast to bf16 (autocast per use; FSDP2 before the gather and after)
  bytes quantization;  ///< quantizing activations and weights of low-precision blocks
  bytes dequantization;  ///< QLoRA: NF4 block linears dequantized to bf16 in forward, backward and recompute
  bytes ring_attention;  ///< context parallel: ring attention's fp32 merges of partial outputs and gradients
  seconds time;        ///< (elementwise + ring_attention + loss + casts + quantization + dequantization) / achieved HBM bandwidth
};

/// Element-wise bytes one token moves through HBM in one block, forward and backward (see memory_bound_time).
struct block_elementwise_bytes {
  double forward = 0;
  double backward = 0;
};

/// The element-wise bytes per token of one block of the modelled eager step (the harness's `Block._fwd`,
/// ../shared/groundtruth/measure.py, and its autograd backward), op by op; rs = bytes of the residual stream (4 under
/// autocast over fp32 weights, else 2), no = bytes of a norm's output (its fp32 weight promotes it to fp32 under
/// autocast: `rms_norm` returns `normalized.type_as(input) * weight`, ATen `rms_norm_symint`):
/// - each norm (norms_per_block): forward reads rs and writes no per element of h, backward reads no and rs and writes rs;
/// - autocast's bf16 casts of the normalized activations for q, k, v, gate and up (amp only): 6 B each way, 5 × 2;
///   the gradients of those five uses summed into the norm output (3 adds of 3·no);
/// - the two residual adds: forward 2rs + 2 each, backward the residual gradient sum (3rs each) and, under autocast, the
///   branch gradient's cast to bf16 (6 B each);
/// - RoPE on q and k (`q·cos + rotate_half(q)·sin`: mul, neg, cat, mul, add): 20 B per element forward, 26 B backward;
/// - SwiGLU: silu and the product, 10 B per element of F forward, 18 B backward (a non-gated MLP: 4 and 6);
/// - grouped-query attention (kv < q): PyTorch's flash backward (`mha_bwd`) writes dK/dV at the query heads and sums
///   them to the KV heads: 4 B per element of q and of kv in backward; a stack that repeats the KV heads before SDPA
///   (throughput_shape::kv_attention) copies K and V to the query width in forward as well (4 B);
/// - q/k RMSNorm (Qwen3), per element of q and k: under autocast the norm makes q and k fp32, so RoPE runs in fp32 and
///   SDPA's autocast casts them back to bf16: forward 6 + 20 + 6 = 32 B more than without the norm, backward
///   10 + 26 + 6 = 42 B; without autocast the norm alone (4 and 6 B);
/// - MoE blocks: the dispatch permutation and the combine's unpermutation copies of the k·cf routed copies of each token
///   (8 B per element of h and copy each way);
/// - transformers' modules (`--modules transformers`, throughput_shape::eager_norm; `LlamaRMSNorm.forward`,
///   `LlamaRotaryEmbedding`, transformers/models/llama/modeling_llama.py), per element of h and norm: forward
///   `to(float32)` (6 B, bf16 input only), `pow` (8), `mean` (4), `x·rsqrt` (8), `to(input_dtype)` (6, bf16 only),
///   `weight·…` (8 under autocast, 4 in bf16): 28 B under autocast, 36 B in bf16, where the fused norm moves rs + no
///   (+20, +32); backward through autograd's nodes: the weight `mul` (its weight gradient `g·hs` written whole and
///   summed, `g·w`), the bf16 input's casts, the rstd `mul` (`g·r`, and `g·x` summed), `mean`'s expanded gradient (4),
///   `pow`'s `grad·(2·x.pow(1))` (28) and the input buffer's add of the two input gradients (12): 92 B either way,
///   where the fused norm moves no + 2rs (+80 under autocast, +86 in bf16; a frozen weight skips `g·hs` and its sum,
///   16 and 8 B). torchtune's `RMSNorm` is the same op chain (torchtune/modules/rms_norm.py). Under autocast the rotary tables are fp32
///   (`cos.to(x.dtype)` with the fp32 residual), so RoPE writes fp32 q and k (`q·cos`, `rotate_half(q)·sin`, their
///   sum) and SDPA's autocast casts them back: +16 B per element of q and kv forward, +26 B backward (the fp32
///   gradients and their casts to the bf16 inputs); with q/k norms RoPE is fp32 already (above).
///
/// Compiled (`torch.compile` of each block, throughput_shape::compiled): Inductor fuses every chain of element-wise
/// ops between two extern kernels (the GEMMs and SDPA) into one kernel that reads the chain's inputs once and writes
/// its outputs once (torch/_inductor/scheduler.py, fusion of pointwise and reduction nodes; the autocast casts of the
/// activations fuse into their producers). Per block, per element of h: the first norm reads the residual (rs) and
/// writes its bf16 output (2); the attention branch's residual add fuses with the second norm (read rs + 2, write
/// rs + 2); the MLP's residual add reads rs + 2 and writes rs — forward `rs + 2·norms + 2·(2rs + 2)`, 18 B for a
/// bf16 stream with two norms (eager: 20 B plus the autocast casts). RoPE reads and writes q and k once (4 B per
/// element, the q/k norm fused into it; eager 20 B and 32 B more under autocast); SwiGLU reads gate and up and
/// writes their product (6 B per element of F; eager 10). Backward: each norm's backward fuses the sum of the
/// input gradients of the linears that read its output (2 B each: q, k, v and gate, up — 5 in all), the residual
/// gradient (rs), the saved input (rs) and writes the input gradient (rs): `3rs·norms + 10`; RoPE's backward 4 B
/// per element of q and k (6 with the q/k norm, which reads its saved input); SwiGLU's backward reads the output
/// gradient, gate and up and writes two gradients (10 B per element of F; eager 18). What stays as in eager: the
/// GQA dK/dV sums inside the flash backward, the repeated K/V copies a stack makes before SDPA, the MoE
/// permutations (extern index kernels), and the loss and casts of memory_bound_time (whose ring-attention merges have
/// their own compiled count there).
[[nodiscard]] constexpr block_elementwise_bytes block_elementwise(const throughput_shape& s, double moe_copies) noexcept {
  // the per-element-of-h terms (norms, residual adds, their casts; the MoE permutations) run on every token of the
  // sequence on each tensor-parallel rank without sequence parallel (throughput_shape::sp_replicas)
  const double h = s.h * s.sp_replicas, f = s.f, q = s.q, kv = s.kv, norms = s.norms;
  const double rs = s.amp ? 4 : 2, no = s.amp ? 4 : 2;
  block_elementwise_bytes r;
  if (s.compiled) {
    r.forward = h * (rs + 2 * norms + 2 * (2 * rs + 2)) + 4 * (q + kv) + (s.gated ? 6 : 4) * f;
    r.backward = h * (3 * rs * norms + 10) + (s.qk_norm ? 6 : 4) * (q + kv) + (s.gated ? 10 : 4) * f +
                 (kv < q ? 4 * (q + kv) : 0);
    if (kv < q && s.kv_attention > kv) r.forward += 4 * (q + kv);  // repeat_kv's copies of K and V
    r.forward += 8 * moe_copies * h;
    r.backward += 8 * moe_copies * h;
    return r;
  }
  r.forward = h * (norms * (rs + no) + (s.amp ? 30 : 0) + 2 * (2 * rs + 2)) + 20 * (q + kv) + (s.gated ? 10 : 4) * f;
  r.backward = h * (norms * (no + 2 * rs) + (s.amp ? 30 : 0) + 3 * 3 * no + 2 * 3 * rs + (s.amp ? 12 : 0)) + 26 * (q + kv) +
               (s.gated ? 18 : 6) * f + (kv < q ? 4 * (q + kv) : 0);
  if (kv < q && s.kv_attention > kv) r.forward += 4 * (q + kv);  // repeat_kv's copies of K and V (its backward sums them: above)
  if (s.qk_norm) {
    r.forward += (s.amp ? 32 : 4) * (q + kv);
    r.backward += (s.amp ? 42 : 6) * (q + kv);
  }
  if (s.eager_norm) {  // a frozen norm weight (LoRA, QLoRA) skips its gradient's product and sum (16 B, 8 in bf16)
    r.forward += h * norms * (s.amp ? 20 : 32);
    r.backward += h * norms * ((s.amp ? 80 : 86) - (s.adapters ? (s.amp ? 16 : 8) : 0));
  }
  if (s.fp32_rope && s.amp && !s.qk_norm) {
    r.forward += 16 * (q + kv);
    r.backward += 26 * (q + kv);
  }
  r.forward += 8 * moe_copies * h;
  r.backward += 8 * moe_copies * h;
  return r;
}

/// Element-wise, loss and cast kernels of one micro-batch at the calibrated fraction `memory` of HBM bandwidth, each
/// counted as the bytes its kernels read and write:
/// - per block block_elementwise (forward and backward), and the forward again per recomputed block (a checkpointed
///   block reruns its forward kernels only; selective per-op checkpointing half the blocks' worth);
/// - the standard loss (`F.cross_entropy(logits.float())`): the upcast (6 B per logit), log-softmax's passes (16 B),
///   its backward (gradient 4 B, log-softmax backward 16 B, the cast back 6 B): `48·T·V`; the hf stack's chunked loss
///   (the reference trainer's checkpointed chunks) the same and its forward again in each chunk's recompute (the
///   upcast and log-softmax, 22 B): `70·T·V`; Liger's fused linear cross-entropy (`--loss liger`), the other stacks'
///   chunked losses and the compiled loss (torchtitan, torchtune with compile) `8·T·V`;
/// - fp32 master weights: under autocast every weight is cast to bf16 in forward (6 B, again in a recomputed block:
///   the recompute runs in a fresh autocast context) and its bf16 gradient cast back to fp32 (6 B), `12·P`; FSDP2
///   (MixedPrecisionPolicy bf16 / fp32 reduce) casts its shard to bf16 and copies it into and out of the all-gather
///   buffer for each of the two gathers (`10·P/N + 4·P` each) and copies the unsharded bf16 gradient into the fp32
///   reduce-scatter input (`6·P`); torch `_fsdp_collectives.py` `foreach_all_gather`, `foreach_reduce`;
/// - quantization casts of low-precision blocks, fused into the producing kernels (TE fused norm+cast, torch.compile
///   epilogues): the quantized write, twice per micro-batch for activations and for weights read in bf16 (FSDP
///   re-gathers them). The weights are the ones this GPU holds (lin_local: ÷ tp, all its routed experts); under
///   Transformer Engine's first-micro-batch cache (cached_weight_casts, `--stack megatron`) they are read and
///   written once per step, ÷ ga per micro-batch;
/// - ring attention (cp > 1, torch `_SDPAMerger` with `convert_to_f32`): per forward pass (and recompute) of a block
///   the first partial output is cast to fp32 (6 B per element of q) and each later step merges its fp32 partial
///   output (`out − sigmoid(lse_b − lse)·(out − out_b)`: 38 B, or 19 B on half the rows plus a 8 B `torch.cat` when
///   only the second chunk updates: 32 B on average) before the final cast (6 B); the backward accumulates fp32 dQ
///   (11 B per step and element of q), FlashAttention's own per-call dq accumulator and dot(dO, O) (14 B), and the
///   dK/dV it receives, updates, concatenates and sends on in fp32 (56 B per element of k and v).
///   Compiled blocks (throughput_shape::compiled; torchtitan compiles each block with `fullgraph=True`, so the ring
///   runs inside the block's graph: a graph break would be an error) fuse the merge's element-wise chain: per later
///   step one kernel reads the running fp32 output (4 B) and the step's bf16 partial output (2 B) and writes the fp32
///   result (4 B), 10 B per element of q (the half-row update and its `torch.cat` fuse into the same output; the first
///   step's fp32 cast and the final bf16 cast into their neighbours); in backward the dK/dV update fuses into the
///   `torch.cat` that builds the fp32 send buffer (reads 4 + 2 B, writes 4 B for each of K and V: 36 B per element of
///   k and v with the transfer's own read and write instead of 56), while the dQ accumulation (one add per step
///   between two flash calls) and FlashAttention's own per-call passes stay as in eager.
/// Sources: kernel byte counts of the PyTorch eager ops (ATen `rms_norm_symint`, `log_softmax`, the autocast casts;
/// FlashAttention `mha_bwd`; torch/distributed/tensor/experimental/_attention.py `_templated_ring_attention(_backward)`,
/// `_SDPAMerger`, `_partial_update`; pytorch/pytorch @ 0123248a), torchtitan 9dec370 `apply_compile`; docs/precision.md#speed for the quantization; the constant `memory` fitted on
/// `h200-calibration.jsonl`.
[[nodiscard]] inline memory_bound_terms memory_bound_time(const throughput_shape& s, const training_config& c) noexcept {
  const double T = s.T, h = s.h, q = s.q, V = s.V;
  const format_traits& ft = s.format;
  const block_elementwise_bytes blk = block_elementwise(s, s.moe_copies);
  // the compiled standard loss fuses the upcast, log-softmax and its backward into reductions over the bf16 logits:
  // two reading passes forward, one read and one write backward, as the chunked loss (memory.hpp, loss_transient)
  const double loss_bytes = s.checkpointed_loss ? T * V * 70 : c.loss == loss_impl::standard && !s.compiled_loss ? T * V * 48 : T * V * 8;
  double cast_bytes = 0;
  // trained parameters only; the distributed optimizer computes on its bf16 parameters (its cast is in the optimizer step)
  if (c.master == master_weights::fp32 && !s.zero1) {
    const double recast = s.nck / std::max(1.0, s.L);
    // under FSDP2 the ones this GPU gathers and reduces (routed experts ÷ ep)
    cast_bytes = s.fsdp ? 2 * (10 * s.Ptc / s.n + 4 * s.Ptc) + 6 * s.Ptc : (12 + 6 * recast) * s.Pt;
  }
  const double act_elems = T * (2 * h + q + s.f);
  const double dual = ft.weight_copy_bytes > 0 ? ft.weight_copy_bytes / std::max(ft.quantized_bytes, 1e-9) : 1;
  // the weights: read in bf16 and written in the format's copies, in forward and again in backward, or once per step
  // where Transformer Engine caches them (cached_weight_casts); this GPU's weights, lin_local
  const double weight_casts = s.cached_weight_casts ? 1 / std::max(1.0, s.ga) : 2.0;
  double quant_bytes = s.nq * (2 * act_elems * dual * ft.quantized_bytes + weight_casts * s.lin_local * (2 + dual * ft.quantized_bytes));
  double rescale = 0;
  if (ft.backward_rescale) {
    // fp32 outputs of the input- and weight-gradient GEMMs written (4 B), read by the scaling kernel (4 B) and written
    // in their dtype (2 B): the input gradients T·Σ in and the weight gradients of every low-precision linear
    double rows_in = 0;
    for (int i = 0; i < s.n_linears; ++i) {
      const linear_gemm& g = s.linears[static_cast<std::size_t>(i)];
      rows_in += g.blocks / std::max(1.0, s.L) * g.rows * g.groups * g.in;
    }
    rescale = s.nq * 10 * (rows_in + s.lin_local);
    quant_bytes += rescale;
  }
  if (s.f8_linear) {
    // torchao 0.18's eager Float8Linear (torchao docs/source/workflows/training.md @v0.18.0: "enable torch.compile for
    // competitive performance"): each cast of a bf16 (or fp32) tensor runs `abs` (read 2, write 2), `max` (read 2),
    // `to(float32)` (2 + 4), `* scale` (4 + 4), `clamp` (4 + 4) and `to(float8)` (4 + 1): 33 B per element
    // (tensor_to_amax, _ToFloat8ConstrFunc, to_fp8_saturated; an fp32 weight skips the copy and reads 4 B in abs and
    // max: 33 B too). A linear of rows·in input elements ri, rows·out output elements ro and W weight elements casts
    // ri + W in forward (again in a checkpointed block's recompute) and 2·ro + W + ri in backward (the gradient twice,
    // the weight and the saved input again: matmul_with_hp_or_float8_args.backward), and `preprocess_addmm` copies
    // W + ro + ri float8 elements into the layouts `_scaled_mm` takes (read 1, write 1). This replaces the fused
    // one-pass cast above; the autocast weight cast it replaces under autocast is taken out of `cast_bytes` below.
    const double rc = s.nck / std::max(1.0, s.L);
    double per_block = 0;
    for (int i = 0; i < s.n_linears; ++i) {
      const linear_gemm& g = s.linears[static_cast<std::size_t>(i)];
      const double ri = g.rows * g.groups * g.in, ro = g.rows * g.groups * g.out, W = g.groups * g.in * g.out;
      per_block += g.blocks / std::max(1.0, s.L) * (33 * (ri + W) * (1 + rc) + 33 * (2 * ro + W + ri) + 2 * (W + ro + ri));
    }
    quant_bytes = s.nq * per_block + rescale;
    // under autocast Float8Linear casts its fp32 weight itself: no autocast bf16 copy of a quantized block's weights
    // (read 4, write 2, again in a recompute)
    if (s.amp && c.master == master_weights::fp32 && !s.zero1 && !s.fsdp)
      cast_bytes = std::max(0.0, cast_bytes - s.nq * s.lin_local * 6 * (1 + rc));
  }
  const double elementwise = T * (s.L * (blk.forward + blk.backward) + s.recompute_passes * blk.forward);
  double ring = 0;
  if (s.cp > 1) {
    const double fwd_passes = s.L + s.nck + (c.ac.mode == ac_mode::selective_attn ? s.L : 0);
    const double kva = s.kv_attention;
    const double merge = s.compiled ? 10 * (s.cp - 1) : 32 * (s.cp - 1) + 12;  // B per element of q and forward pass
    const double dkv = s.compiled ? 36 : 56;                                    // B per element of k and v and step
    ring = fwd_passes * T * q * merge + s.L * T * ((s.cp - 1) * (25 * q + dkv * kva) + 11 * q + 20 * kva);
  }
  memory_bound_terms r;
  r.elementwise = bytes::base(elementwise);
  r.ring_attention = bytes::base(ring);
  r.loss = bytes::base(loss_bytes);
  r.casts = bytes::base(cast_bytes);
  r.quantization = bytes::base(quant_bytes);
  // QLoRA: every 4-bit linear reads its packed weight and writes a bf16 copy per use: forward, backward and the
  // recompute of checkpointed blocks (bitsandbytes `dequantize_4bit`, `MatMul4Bit.forward/backward`)
  const double dequant_bytes = s.qlora ? (s.L * 2 + s.nck) * s.lin_local * (nf4_bytes_per_param + 2) : 0;
  r.dequantization = bytes::base(dequant_bytes);
  r.time = seconds::base((elementwise + ring + loss_bytes + cast_bytes + quant_bytes + dequant_bytes) / s.hbm);
  return r;
}

/// Fixed kernel cost of one micro-batch: 15 kernels per block in forward, twice that in backward, again per
/// recomputed block and twice per low-precision block (its casts), at `launch_s` each (launch and tail, fitted
/// on `h200-calibration.jsonl`).
[[nodiscard]] constexpr seconds launch_time(const throughput_shape& s, const throughput_calibration& k) noexcept {
  return seconds::base((3 * s.L + s.recompute_passes + (s.nq > 0 ? 2 * s.nq : 0)) * 15 * k.launch_s);
}

/// Optimizer step (once per step): reads the parameters and gradients and writes the parameters, `3·w·Pt/N`,
/// and reads and writes its states, `2·state/N`, at the achieved HBM bandwidth: fused AdamW `7·w·P/N`
/// (`torch.optim.AdamW(fused=True)`, one memory-bound kernel); 8-bit states 2.03 B per parameter (bitsandbytes);
/// Adafactor's factored vectors; one state for SGD and Lion. Only the trained parameters (LoRA: the adapters).
/// The distributed optimizer steps its shard of the fp32 masters and writes the bf16 copy of it, `2·Ps/N` more
/// (Megatron-Core `distrib_optimizer.py` `_copy_main_params_to_model_params`).
///
/// With CPU offload of the optimizer the GPU runs no step (0): offload_time has the host's.
[[nodiscard]] constexpr seconds optimizer_time(const throughput_shape& s) noexcept {
  if (s.off_opt) return seconds{};
  // foreach AdamW runs one kernel per op over the parameter list (lerp_ of m, mul_ and addcmul_ of v, sqrt, div_,
  // add_ of eps, addcdiv_ of p: torch/optim/adamw.py `_multi_tensor_adamw`): about 18·w bytes per parameter;
  // the distributed optimizer also writes its bf16 parameters from the fp32 shard
  const double copy = s.zero1 && s.w == 4 ? 2 * s.Pt : 0.0;
  const double rw = (s.foreach_optimizer ? 18 * s.w * s.Pt : 3 * s.w * s.Pt + 2 * s.state) + copy;
  return seconds::base(rw / s.n / s.hbm);
}

/// The time CPU offload adds to one optimizer step (docs/finetune.md#cpu-offload).
struct offload_times {
  seconds cpu_step;           ///< the optimizer step on the host (exposed: the GPU waits for it)
  seconds pcie_overlapped;    ///< host-device copies of the step that run beside compute (before overlap)
  seconds pcie_serial;        ///< host-device copies on the compute stream or after the step (exposed whole)
  seconds exposed;            ///< what the step waits for: cpu_step + pcie_serial + the part of the overlapped copies compute does not hide
};

/// CPU offload's time per step, `t_mb` the compute of one micro-batch.
///
/// - **CPU optimizer step**: the bytes the GPU step would move, `(3·w·Pt + 2·state)/N` (optimizer_time), plus the
///   bf16 copy ZeRO-Offload writes for the copy back, `2·Pt/N`, at the host memory bandwidth of one rank
///   (throughput_calibration::host_memory_per_gpu). Not overlapped with compute: FSDP2's step is the user's
///   `optimizer.step()` on CPU tensors after backward ("the optimizer step runs on CPU with CPU optimizer states",
///   CPUOffloadPolicy, torch/distributed/fsdp/_fully_shard/_fsdp_api.py @01d5c2cc), and ZeRO-Offload runs
///   `_optimizer_step` on the host partition between backward and the next forward (deepspeed/runtime/zero/
///   stage_1_and_2.py L2318-2341 @edaa722; its one-step-delayed update is off by default).
/// - **Optimizer offload, parameters on the GPU (ZeRO-Offload)**: each gradient goes to the host in the master dtype,
///   `w·Pt/N` per micro-batch (L1590-1605), and under accumulation the earlier micro-batches' sums come back and go
///   again, `2·w·Pt/N` each (`async_accumulate_grad_in_cpu_via_gpu`, L1516-1553): copied as backward reduces them,
///   hidden behind the micro-batch's backward (2/3 of its compute). After the step the updated 16-bit partition comes
///   back, `2·Pt/N`, before the next forward can start (L2341): exposed.
/// - **Parameter offload (FSDP2 CPUOffloadPolicy)**: each unit's shard is copied host-to-device before each of its
///   all-gathers, twice per micro-batch (forward and the backward re-gather of `reshard_after_forward`), in the
///   master dtype (`w/2` × the bf16 gathered bytes; a frozen LoRA base: bf16), and each gradient shard
///   device-to-host, `w·Pt/N`; both non-blocking on FSDP's streams, hidden behind the micro-batch's compute.
/// - **Activation offload**: every checkpoint goes to the host in forward and back in backward, `2 ×
///   checkpoint_bytes` per micro-batch. torch.autograd.graph.save_on_cpu packs with a synchronous `copy_` on the
///   current stream (torch/autograd/graph.py class save_on_cpu): exposed whole; torchtune's OffloadActivations copies
///   on a side stream (torchtune/training/_activation_offloading.py): hidden behind compute.
[[nodiscard]] constexpr offload_times offload_time(const throughput_shape& s, double t_mb) noexcept {
  offload_times r;
  if (!s.off_opt && !s.off_act) return r;
  const double link = s.host_link > 0 ? s.host_link : 1;
  double overlapped = 0, serial = 0, exposed = 0;
  if (s.off_opt) {
    const double copy = s.off_params ? 0.0 : 2 * s.Pt;
    r.cpu_step = seconds::base((3 * s.w * s.Pt + 2 * s.state + copy) / s.n / (s.host_memory > 0 ? s.host_memory : 1));
    if (s.off_params) {
      const double shard_h2d = 2 * (s.adapters ? s.gather : s.gather * s.w / 2) / s.n;  // two gathers per micro-batch
      const double per_mb = (shard_h2d + s.w * s.Pt / s.n) / link;
      overlapped += s.ga * per_mb;
      exposed += s.ga * std::max(0.0, per_mb - t_mb);
    } else {
      const double last = s.w * s.Pt / s.n / link, earlier = 2 * s.w * s.Pt / s.n / link;
      overlapped += last + (s.ga - 1) * earlier;
      exposed += std::max(0.0, last - (2.0 / 3.0) * t_mb) + (s.ga - 1) * std::max(0.0, earlier - (2.0 / 3.0) * t_mb);
      serial += 2 * s.Pt / s.n / link;
    }
  }
  if (s.off_act) {
    const double per_mb = 2 * s.checkpoint_bytes / link;
    if (s.act_streams) {
      overlapped += s.ga * per_mb;
      exposed += s.ga * std::max(0.0, per_mb - t_mb);
    } else {
      serial += s.ga * per_mb;
    }
  }
  r.pcie_overlapped = seconds::base(overlapped);
  r.pcie_serial = seconds::base(serial);
  r.exposed = seconds::base(r.cpu_step.raw() + serial + exposed);
  return r;
}

/// Compute of one micro-batch, by op class.
struct compute_terms {
  gemm_terms gemm;
  attention_terms attention;
  memory_bound_terms memory_bound;
  seconds launch;
  /// GEMM + attention + memory-bound + launch of one micro-batch, in this order.
  [[nodiscard]] constexpr seconds micro_batch() const noexcept {
    return gemm.total() + attention.time + memory_bound.time + launch;
  }
};

// ---------------------------------------------------------------------------------------------------------
// Communication per parallelism

/// Communicator of `ranks` GPUs spaced `stride` apart in the node-major rank order, on nodes of `gpn` GPUs:
/// how many of its ranks share a node and how many such communicators run at once on a node.
[[nodiscard]] constexpr comm_group comm_group_of(int ranks, int stride, int gpn) noexcept {
  comm_group g;
  g.ranks = ranks;
  g.per_node = std::max(1, std::min(ranks, gpn / std::max(1, stride)));
  g.groups_per_node = std::max(1, gpn / g.per_node);
  return g;
}

/// FSDP2 collectives of one micro-batch.
struct fsdp_collectives {
  bool active = false;    ///< FSDP over more than one shard
  seconds per_micro_batch;  ///< all-gathers (forward, and backward unless grad-op) and gradient reduce-scatters
  seconds first_gather;     ///< the first unit's all-gather, which nothing hides
};

/// FSDP2 (full, hybrid within the shard group, grad-op): per micro-batch each of the L + 1 units (blocks and
/// root) is all-gathered in forward and again in backward (grad-op keeps the forward's), in bf16 or, with FP8
/// all-gather, fp8 blocks and a bf16 root; gradients are reduce-scattered in the master dtype. Sources: FSDP2
/// `fully_shard` docs and `_fsdp_collectives.py`; torchao FP8 all-gather; collective_time for each call.
[[nodiscard]] inline fsdp_collectives fsdp_communication(const throughput_shape& s, const training_config& c, const gpu_spec& gpu,
                                                         const instance_spec* inst, const throughput_calibration& k) noexcept {
  fsdp_collectives r;
  const int shard_n = c.shard_size();
  if (!(s.fsdp && shard_n > 1)) return r;
  const comm_group sg = comm_group_of(shard_n, c.tp, s.gpn);
  const double Lb = s.Lb;
  const double ag_bytes = s.gather;  // bf16 2·Pc; FP8 all-gather Pc + bf16 root; QLoRA packed NF4 linears
  const double gathers = c.shard == sharding::grad_op ? 1.0 : 2.0;  // grad-op keeps forward's gather for backward
  const double ag = gathers * (Lb + 1) * collective_time(collective_kind::all_gather, bytes::base(ag_bytes / (Lb + 1)), sg, gpu, inst, k).raw();
  // gradients of the trained parameters only (LoRA: the adapters; the frozen root has none)
  const double rs_b = (Lb + 1) * collective_time(collective_kind::reduce_scatter, bytes::base(s.w * s.Ptc / (Lb + 1)), sg, gpu, inst, k).raw();
  r.active = true;
  r.per_micro_batch = seconds::base(ag + rs_b);
  r.first_gather = collective_time(collective_kind::all_gather, bytes::base(ag_bytes / (Lb + 1)), sg, gpu, inst, k);
  return r;
}

/// Distributed-optimizer (ZeRO-1) collectives of one step.
struct zero1_collectives {
  bool active = false;     ///< zero1_layout over more than one data-parallel rank
  double buckets = 1;      ///< gradient buckets (one reduce-scatter and one all-gather each)
  seconds reduce_scatter;  ///< the gradients `w·Pc`, bucket by bucket, per step
  seconds all_gather;      ///< the updated bf16 parameters `2·Pc`, bucket by bucket, per step
};

/// The distributed optimizer (and FSDP2 under pipeline parallelism, zero1_layout), per step: after the last
/// micro-batch's backward a reduce-scatter of the gradient buffer `w·Pc` (fp32 with fp32 masters) over the N
/// data-parallel × context-parallel ranks of the stage, after the optimizer step an all-gather of the bf16
/// parameters `2·Pc`, in buckets of `max(40M, 1M·N)` parameters (Megatron-Core
/// `megatron/core/distributed/distributed_data_parallel.py` bucket size; `param_and_grad_buffer.py` reduce-scatter
/// and all-gather per bucket). Source: Megatron-Core `megatron/core/optimizer/distrib_optimizer.py`, its
/// docs/user-guide/features/dist_optimizer.md "Data Flow"; collective_time for each call.
[[nodiscard]] inline zero1_collectives zero1_communication(const throughput_shape& s, const training_config& c, const gpu_spec& gpu,
                                                           const instance_spec* inst, const throughput_calibration& k) noexcept {
  zero1_collectives r;
  const int shard_n = c.shard_size();
  if (!(s.zero1 && shard_n > 1)) return r;
  const comm_group g = comm_group_of(shard_n, c.tp, s.gpn);
  const double bucket = std::max(40e6, 1e6 * shard_n);
  r.active = true;
  r.buckets = std::max(1.0, std::ceil(s.Pc / bucket));
  r.reduce_scatter =
      seconds::base(r.buckets * collective_time(collective_kind::reduce_scatter, bytes::base(s.w * s.Pc / r.buckets), g, gpu, inst, k).raw());
  // more than one optimizer instance (shard_group): each instance's gradient shard is all-reduced across the instances
  // (Megatron-Core param_and_grad_buffer.py: the reduce-scatter within the intra-instance group, then an all-reduce
  // over the inter-instance group)
  const int instances = c.fsdp_mesh() / shard_n;
  if (instances > 1) {
    const comm_group across = comm_group_of(instances, shard_n * c.tp, s.gpn);
    r.reduce_scatter += seconds::base(
        r.buckets * collective_time(collective_kind::all_reduce, bytes::base(s.w * s.Pc / shard_n / r.buckets), across, gpu, inst, k).raw());
  }
  r.all_gather =
      seconds::base(r.buckets * collective_time(collective_kind::all_gather, bytes::base(2 * s.Pc / r.buckets), g, gpu, inst, k).raw());
  return r;
}

/// Pipeline point-to-point traffic of one step.
struct pipeline_p2p {
  bool active = false;      ///< pp > 1
  bool efa = false;         ///< the stages' neighbours sit in other NVLink domains: the sends cross EFA
  double bytes_per_send = 0;  ///< one micro-batch's activations (or their gradient) at one stage boundary
  seconds per_send;         ///< one send: latency + bytes over the link
  double sends = 0;         ///< sends per step on one rank: 2 · m · v (activations forward, gradients backward)
  double pp = 1, vpp = 1, micro_batches = 1;
};

/// Pipeline parallelism, per step: at each of its v stage boundaries a rank sends one micro-batch's output
/// activations forward and receives their gradient backward, `2·b·(s/cp)·h/tp` bytes of bf16 each (Megatron-Core
/// `schedules.py` `tensor_shape = [seq_length // cp, micro_batch_size, hidden_size]`, ÷ tp with sequence
/// parallel, whole without it; `p2p_communication.py`). The ranks of one stage are world/pp apart (pp is the outermost mesh
/// dimension in Megatron-Core and torchtitan), so the sends stay on NVLink when the whole job fits one NVLink
/// domain and cross EFA otherwise, each GPU with its share of its instance's EFA (`efa_per_node · efa /
/// gpus_per_node`); latency `collective_latency_s` + one NVLink or network step; the link's size efficiency
/// S / (S + S½) as for the collectives.
[[nodiscard]] inline pipeline_p2p pipeline_communication(const throughput_shape& s, const training_config& c, const gpu_spec& gpu,
                                                         const instance_spec* inst, const throughput_calibration& k) noexcept {
  pipeline_p2p r;
  if (c.pp <= 1) return r;
  r.active = true;
  r.pp = c.pp;
  r.vpp = c.virtual_stages();
  r.micro_batches = s.ga;
  r.bytes_per_send = 2 * s.T * s.h * (c.sequence_parallel ? 1 : c.tp);  // without sequence parallel the whole sequence
  r.efa = inst != nullptr && c.world_size > c.nvlink_domain_gpus();
  const double S = r.bytes_per_send;
  double t = 0;
  if (r.efa) {
    const double bw = inst->efa_per_node.raw() * k.efa / std::max(1, inst->gpus_per_node) * S / (S + k.efa_half_message);
    t = k.collective_latency_s + k.efa_step_s + S / bw;
  } else {
    const double bw = gpu.nvlink_per_direction.raw() * k.nvlink * S / (S + k.nvlink_half_message);
    t = k.collective_latency_s + k.nvlink_step_s + S / bw;
  }
  r.per_send = seconds::base(t);
  r.sends = 2 * s.ga * r.vpp;
  return r;
}

/// HSDP: one all-reduce per step of the gradient shards `w·Pc/N` across the mesh / N replicas (0 unless
/// hybrid sharding with more than one replica). Source: FSDP2 HSDP (`fully_shard` with a 2-D mesh).
[[nodiscard]] inline seconds hsdp_all_reduce(const throughput_shape& s, const training_config& c, const gpu_spec& gpu,
                                             const instance_spec* inst, const throughput_calibration& k) noexcept {
  const int mesh = c.fsdp_mesh(), shard_n = c.shard_size();
  if (!(c.shard == sharding::hybrid && mesh / shard_n > 1)) return seconds{};
  const comm_group rg = comm_group_of(mesh / shard_n, c.tp * shard_n, s.gpn);
  return collective_time(collective_kind::all_reduce, bytes::base(s.w * s.Ptc / shard_n), rg, gpu, inst, k);
}

/// DDP: one all-reduce of every gradient `w·Pc` per step (no_sync on the earlier micro-batches); 0 unless
/// sharding none over more than one GPU. Source: `torch.nn.parallel.DistributedDataParallel` (bucketed
/// all-reduce overlapped with backward).
[[nodiscard]] inline seconds ddp_all_reduce(const throughput_shape& s, const training_config& c, const gpu_spec& gpu,
                                            const instance_spec* inst, const throughput_calibration& k) noexcept {
  const int mesh = c.fsdp_mesh();
  if (!(!s.fsdp && mesh > 1)) return seconds{};
  return collective_time(collective_kind::all_reduce, bytes::base(s.w * s.Ptc), comm_group_of(mesh, c.tp, s.gpn), gpu, inst, k);
}

/// Tensor parallelism with sequence parallel, per step: per block an all-gather before and a reduce-scatter
/// after attention and MLP, in forward, in backward and in the recompute of checkpointed blocks; bf16
/// activations of the replica's T·tp tokens. Without sequence parallel (training_config::sequence_parallel false,
/// Megatron-LM's default) one all-reduce of the same activations in place of each pair: after each row-parallel
/// linear in forward, before each column-parallel one in backward (Megatron-Core tensor_parallel/mappings.py
/// `_ReduceFromModelParallelRegion`, `_CopyToModelParallelRegion`). Per-op selective checkpointing (`selective-op`,
/// torchtitan's policy) saves the reduce-scatters' outputs but not the all-gathers' (`_save_list` has
/// `_c10d_functional.reduce_scatter_tensor`, not `all_gather_into_tensor`: torchtitan/parallelisms/parallelize_llama.py
/// @9dec370, the same list at 820504e), so the backward's recompute of each block gathers the attention and MLP inputs
/// again: two more all-gathers per block. Sources: Korthikanti et al. 2022 (arXiv:2205.05198) sequence parallelism;
/// torchtitan `parallelize` (SequenceParallel).
[[nodiscard]] inline seconds tensor_parallel_communication(const throughput_shape& s, const training_config& c, const gpu_spec& gpu,
                                                           const instance_spec* inst, const throughput_calibration& k) noexcept {
  if (c.tp <= 1) return seconds{};
  const double act = 2 * s.T * c.tp * s.h;
  const comm_group tg = comm_group_of(c.tp, 1, s.gpn);
  if (!c.sequence_parallel) {
    const double ar = collective_time(collective_kind::all_reduce, bytes::base(act), tg, gpu, inst, k).raw();
    return seconds::base(s.ga * (2 * 2 * s.L + 2 * s.nck) * ar);
  }
  const double ag = collective_time(collective_kind::all_gather, bytes::base(act), tg, gpu, inst, k).raw();
  const double rs = collective_time(collective_kind::reduce_scatter, bytes::base(act), tg, gpu, inst, k).raw();
  const double sac_gathers = c.ac.mode == ac_mode::selective_op ? 2 * s.L : 0.0;  // recomputed, not saved
  return seconds::base(s.ga * ((2 * 2 * s.L + 2 * s.nck) * (ag + rs) + sac_gathers * ag));
}

/// Context-parallel communication of one step and the part of it not hidden behind ring attention's own kernels.
struct cp_collectives {
  seconds total;    ///< every K/V all-gather and dK/dV exchange of the step
  seconds exposed;  ///< what the step waits for
};

/// Context parallelism (torch's load-balanced ring attention with the all-gather rotation, torchtitan's default
/// `context_parallel_rotate_method = "allgather"`), per step: in every forward pass of a block (and its recompute) one
/// all-gather of every rank's K and V (`2·2·b·(s/cp)·kv/tp` bytes from each rank), issued before the first (causal)
/// step and waited for before the second, so it hides behind that step's kernel (1/cp of the block's forward
/// attention); in backward the same all-gather (hidden behind the first backward step) and one fp32 dK/dV transfer to
/// the next rank after every step (`permute_tensor`, twice the bf16 bytes), each waited for after the next step's
/// kernel and the last one after the loop (exposed whole). Sources: torch/distributed/tensor/experimental/_attention.py
/// (`_templated_ring_attention`, `_templated_ring_attention_backward`, `_AllGatherRotater`, `_AllToAllRotater`);
/// torchtitan `create_context_parallel_ctx` @ 9dec370.
///
/// Megatron (`--stack megatron`) runs Transformer Engine's ring instead (Megatron-Core `cp_comm_type = "p2p"`, the
/// default in megatron/core/transformer/transformer_config.py; TransformerEngine `AttnFuncWithCPAndKVP2P`,
/// transformer_engine/pytorch/attention.py): at every one of the cp − 1 later steps each rank sends the K/V chunk it
/// holds, `2·2·b·(s/cp)·kv/tp` bytes at the model's own KV width, to the next rank on a side stream while the
/// current step's attention kernel runs; the backward sends K/V and dK/dV together and returns the last dK/dV after
/// the loop (exposed). Each transfer waits only for what its step's kernel does not cover.
///
/// Compiled blocks (throughput_shape::compiled) expose all of it: torchtitan compiles each block with
/// `torch.compile(block, fullgraph=True)` (torchtitan 9dec370, torchtitan/parallelisms/parallelize_llama.py
/// `apply_compile`), so the ring and its collectives are traced into the block's graph; a functional collective traced
/// by the compiler is waited for where it is issued (pytorch/pytorch torch/distributed/_functional_collectives.py
/// `_maybe_wrap_tensor`: "wait_tensor() op is immediately called", the deferred wait being the eager
/// AsyncCollectiveTensor's), and Inductor moves a wait away from its collective only with
/// `reorder_for_compute_comm_overlap`, off by default (torch/_inductor/config.py @ a112bb81). Every all-gather and every
/// dK/dV transfer of the ring then sits on the compute stream's critical path.
[[nodiscard]] inline cp_collectives context_parallel_communication(const throughput_shape& s, const training_config& c, const gpu_spec& gpu,
                                                                   const instance_spec* inst, const throughput_calibration& k) noexcept {
  cp_collectives r;
  if (c.cp <= 1) return r;
  const double cp = c.cp;
  const double local = 2 * 2 * s.b * (s.s / cp) * s.kv_attention / c.tp;  // one rank's K and V, bf16, as SDPA sees them
  const comm_group cg = comm_group_of(c.cp, c.tp, s.gpn);
  const double ag = collective_time(collective_kind::all_gather, bytes::base(cp * local), cg, gpu, inst, k).raw();
  // a permute to the neighbour: as a 2-rank all-gather of twice the message, (1/2)·2·msg over the link
  comm_group pair = cg;
  pair.ranks = 2;
  pair.per_node = cg.nodes() > 1 ? 1 : 2;
  const double p2p = collective_time(collective_kind::all_gather, bytes::base(2 * 2 * local), pair, gpu, inst, k).raw();
  const attention_terms at = attention_time(s, c, k);
  const double step_f = at.layer_forward.raw() / cp, step_b = at.layer_backward.raw() / cp;
  const double fwd_passes = s.L + s.nck + (c.ac.mode == ac_mode::selective_attn ? s.L : 0);
  if (c.stack == training_stack::megatron) {
    // Transformer Engine's P2P ring (Megatron-Core `cp_comm_type` "p2p"): each step sends the K/V chunk it holds,
    // at the model's KV width, to the next rank while that step's attention runs; backward sends K/V and dK/dV,
    // and returns the last dK/dV after the loop
    const double kv = 2 * 2 * s.b * (s.s / cp) * s.kv / c.tp;
    const double pf = collective_time(collective_kind::all_gather, bytes::base(2 * kv), pair, gpu, inst, k).raw();
    const double pb = collective_time(collective_kind::all_gather, bytes::base(2 * 2 * kv), pair, gpu, inst, k).raw();
    const double te_total = fwd_passes * (cp - 1) * pf + s.L * ((cp - 1) * pb + pf);
    const double te_exposed = fwd_passes * (cp - 1) * std::max(0.0, pf - step_f) +
                              s.L * ((cp - 1) * std::max(0.0, pb - step_b) + pf);
    r.total = seconds::base(s.ga * te_total);
    r.exposed = seconds::base(s.ga * te_exposed);
    return r;
  }
  const double total = fwd_passes * ag + s.L * (ag + cp * p2p);
  const double exposed = s.compiled ? total
                                    : fwd_passes * std::max(0.0, ag - step_f) +
                                          s.L * (std::max(0.0, ag - step_b) + (cp - 1) * std::max(0.0, p2p - step_b) + p2p);
  r.total = seconds::base(s.ga * total);
  r.exposed = seconds::base(s.ga * exposed);
  return r;
}

/// Expert parallelism, per step: moe_all_to_all_s per micro-batch.
[[nodiscard]] inline seconds expert_parallel_communication(const model_spec& m, const throughput_shape& s, const training_config& c,
                                                           const gpu_spec& gpu, const instance_spec* inst,
                                                           const throughput_calibration& k) {
  const double per = moe_all_to_all_s(m, c, gpu, inst, k);
  // a pipeline rank runs its own MoE blocks only
  return seconds::base(s.ga * (c.pp > 1 && m.moe_layers > 0 ? per * s.moe_layers / static_cast<double>(m.moe_layers) : per));
}

/// Collective time of one step by parallelism (before overlap).
struct communication_terms {
  fsdp_collectives fsdp;     ///< per micro-batch
  seconds hsdp_all_reduce;   ///< per step
  bool hsdp = false;         ///< hybrid sharding with more than one replica
  seconds ddp_all_reduce;    ///< per step
  bool ddp = false;          ///< DDP over more than one GPU
  seconds tensor_parallel;   ///< per step
  /// training_config::tp_comm_overlap: the block GEMMs of one micro-batch that the tensor-parallel collectives run
  /// under (gemm_terms high + low precision); 0 without the overlap
  seconds tp_overlap_gemm;
  bool tp_overlap = false;   ///< training_config::tp_comm_overlap with tp > 1
  /// Share of the tensor-parallel collectives' time that is forward reduce-scatters (the pipelined ones):
  /// ½ · (L + nck) / (2L + nck), forward and recompute passes over all passes, half of each pass's pairs
  double tp_forward_rs_share = 0;
  seconds context_parallel;  ///< per step
  seconds context_parallel_exposed;  ///< per step: what ring attention waits for (context_parallel_communication)
  seconds expert_parallel;   ///< per step
  bool moe_a2a_overlap = false;  ///< training_config::moe_a2a_overlap with ep > 1
  zero1_collectives zero1;   ///< per step (distributed optimizer; FSDP under pipeline parallelism)
  pipeline_p2p pipeline;     ///< per step (pipeline parallelism)
  double micro_batches = 1;  ///< ga
  double blocks = 1;         ///< max(1, L)
};

/// Every communication term of one step.
[[nodiscard]] inline communication_terms communication(const model_spec& m, const throughput_shape& s, const training_config& c,
                                                       const gpu_spec& gpu, const instance_spec* inst,
                                                       const throughput_calibration& k) {
  communication_terms r;
  r.fsdp = fsdp_communication(s, c, gpu, inst, k);
  r.hsdp = c.shard == sharding::hybrid && c.fsdp_mesh() / c.shard_size() > 1;
  r.hsdp_all_reduce = hsdp_all_reduce(s, c, gpu, inst, k);
  r.ddp = !s.fsdp && c.fsdp_mesh() > 1;
  r.ddp_all_reduce = ddp_all_reduce(s, c, gpu, inst, k);
  r.tensor_parallel = tensor_parallel_communication(s, c, gpu, inst, k);
  const cp_collectives cpc = context_parallel_communication(s, c, gpu, inst, k);
  r.context_parallel = cpc.total;
  r.context_parallel_exposed = cpc.exposed;
  r.expert_parallel = expert_parallel_communication(m, s, c, gpu, inst, k);
  r.moe_a2a_overlap = c.moe_a2a_overlap && c.ep > 1;
  r.zero1 = zero1_communication(s, c, gpu, inst, k);
  r.pipeline = pipeline_communication(s, c, gpu, inst, k);
  r.micro_batches = s.ga;
  r.blocks = s.Lb;
  return r;
}

// ---------------------------------------------------------------------------------------------------------
// Overlap

/// Collective time of one step by parallelism: data parallel = ga × FSDP per micro-batch + HSDP all-reduce, or
/// the DDP all-reduce; pipeline: the rank's own 2·m·v sends plus the 2·(pp − 1) sends of the other stages that its
/// warm-up and cool-down wait for (the chain exposed_communication puts on the critical path), so that the exposed
/// P2P time never exceeds this total.
[[nodiscard]] constexpr communication_breakdown communication_total(const communication_terms& t) noexcept {
  double dp = 0;
  if (t.fsdp.active) dp = t.micro_batches * t.fsdp.per_micro_batch.raw();
  if (t.hsdp) dp += t.hsdp_all_reduce.raw();
  if (t.ddp) dp = t.ddp_all_reduce.raw();
  if (t.zero1.active) dp = t.zero1.reduce_scatter.raw() + t.zero1.all_gather.raw();
  const double p2p = t.pipeline.active ? (t.pipeline.sends + 2 * (t.pipeline.pp - 1)) * t.pipeline.per_send.raw() : 0.0;
  return {seconds::base(dp), t.tensor_parallel, t.context_parallel, t.expert_parallel, seconds::base(p2p)};
}

/// Chunks a pipelined userbuffers reduce-scatter is split into (Megatron-Bridge `PipelineOverlapCfg(num_splits=4)`,
/// the fprop reduce-scatters of its `userbuffers_*` presets, megatron/bridge/training/comm_overlap.py).
inline constexpr double tp_overlap_splits = 4;

/// What of each parallelism's communication is not hidden behind compute (`micro_batch` = compute of one
/// micro-batch, `attention` = its attention part).
///
/// FSDP2 prefetches the next unit's all-gather and reduce-scatters on their own streams: only the excess of a
/// micro-batch's collectives over its compute is exposed, plus the first unit's gather (FSDP2 docs, implicit
/// prefetching). The HSDP and DDP all-reduces overlap with the backward (2/3 of the compute, less what FSDP
/// already uses) and expose at least the last bucket (1/L of it) (DDP bucketing, PyTorch DDP design notes).
/// Sequence-parallel collectives are not overlapped (no async TP), except under training_config::tp_comm_overlap
/// (Megatron + Transformer Engine userbuffers): each all-gather is a ring exchange whose chunks the column-parallel
/// GEMM consumes as they arrive, each reduce-scatter follows its row-parallel GEMM split into `tp_overlap_splits`
/// chunks, and the backward's collectives run under the weight-gradient GEMMs (bulk overlap); a micro-batch exposes
/// what its collectives exceed of its block GEMMs, plus the last chunk of every forward reduce-scatter, at most all of
/// them (TransformerEngine
/// transformer_engine/pytorch/module/base.py `initialize_ub`; Megatron-Bridge megatron/bridge/training/comm_overlap.py
/// `TransformerLayerTPOverlapCfg`, `PipelineOverlapCfg(num_splits=4)` for the fprop reduce-scatters,
/// `RingExchangeOverlapCfg` for the all-gathers, `BulkOverlapCfg` for the dgrad/wgrad ones). The SMs the
/// pipelined reduce-scatters take from the GEMMs (`num_sm`) are not priced. The MoE all-to-all of one micro-batch overlaps the
/// compute of another when the step has two or more (below); with one it is all exposed. Ring attention exposes what
/// context_parallel_communication computed step by step (`attention` is kept for callers; the per-step overlap is in
/// the communication terms).
///
/// The distributed optimizer's reduce-scatter overlaps the last micro-batch's backward (2/3 of its compute) and
/// its all-gather the next step's first forward (1/3), bucket by bucket, each exposing what does not fit plus
/// one bucket (Megatron-Core `overlap_grad_reduce`, `overlap_param_gather`: distributed_data_parallel_config.py,
/// both set in Megatron-LM's examples/llama/train_llama3_8b_h100_fp8.sh:126-128). Pipeline sends: under 1F1B every send of the schedule waits
/// (Megatron-Core batches its send/recv pairs, `batch_p2p_comm = not overlap_p2p_comm`, and overlaps them only
/// with the interleaved schedule), `2·(m + pp − 1)` sends on the critical path; interleaved: the 2·(pp − 1)
/// sends of warm-up and cool-down, plus what the steady state's 2·m·v sends exceed of its m micro-batches'
/// compute.
[[nodiscard]] constexpr communication_breakdown exposed_communication(const communication_terms& t, seconds micro_batch,
                                                                      seconds attention) noexcept {
  const double ga = t.micro_batches, Lb = t.blocks, t_mb = micro_batch.raw();
  double dp_comm = 0, dp_exposed = 0;
  if (t.fsdp.active) {
    const double per_mb = t.fsdp.per_micro_batch.raw();
    dp_comm = ga * per_mb;
    dp_exposed = ga * (std::max(0.0, per_mb - t_mb) + t.fsdp.first_gather.raw());
  }
  if (t.hsdp) {
    const double ar = t.hsdp_all_reduce.raw();
    const double slack = std::max(0.0, (2.0 / 3.0) * t_mb - dp_comm / ga);
    dp_exposed += std::max(0.0, ar - slack) + ar / Lb;
  }
  if (t.ddp) {
    const double ar = t.ddp_all_reduce.raw();
    dp_exposed = std::max(0.0, ar - (2.0 / 3.0) * t_mb) + ar / Lb;
  }
  if (t.zero1.active) {
    const double rs = t.zero1.reduce_scatter.raw(), ag = t.zero1.all_gather.raw(), nb = t.zero1.buckets;
    dp_exposed = std::max(0.0, rs - (2.0 / 3.0) * t_mb) + rs / nb + std::max(0.0, ag - (1.0 / 3.0) * t_mb) + ag / nb;
  }
  double pp_exposed = 0;
  if (t.pipeline.active) {
    const pipeline_p2p& p = t.pipeline;
    const double send = p.per_send.raw();
    pp_exposed = p.vpp <= 1 ? 2 * (ga + p.pp - 1) * send
                            : 2 * (p.pp - 1) * send + std::max(0.0, p.sends * send - ga * t_mb);
  }
  (void)attention;
  // MoE dispatch/combine: waited for where it is issued, unless the plan overlaps it (training_config::moe_a2a_overlap,
  // Megatron-Core `overlap_moe_expert_parallel_comm`, the "1F1B A2A overlap"; DeepEP's two-micro-batch overlap): then,
  // with two or more micro-batches, the all-to-all of one hides behind the compute of the other: each later micro-batch
  // exposes only what its all-to-all exceeds of a micro-batch's compute, and one micro-batch's worth (the first
  // forward, the last backward) stays exposed.
  const double ep_mb = t.expert_parallel.raw() / std::max(1.0, ga);
  const double ep_exposed = !t.moe_a2a_overlap || ga < 2 ? t.expert_parallel.raw() : (ga - 1) * std::max(0.0, ep_mb - t_mb) + ep_mb;
  // Transformer Engine's userbuffers (tp_comm_overlap): each collective runs in chunks under its own GEMM's chunks;
  // what one micro-batch's collectives exceed of its block GEMMs is exposed, and so is the last of the
  // tp_overlap_splits chunks of every pipelined (forward) reduce-scatter; never more than without the overlap
  double tp_exposed = t.tensor_parallel.raw();
  if (t.tp_overlap) {
    const double tp_mb = tp_exposed / std::max(1.0, ga);
    const double tail = t.tp_forward_rs_share * tp_mb / tp_overlap_splits;
    tp_exposed = ga * std::min(tp_mb, std::max(0.0, tp_mb - t.tp_overlap_gemm.raw()) + tail);
  }
  return {seconds::base(dp_exposed), seconds::base(tp_exposed), t.context_parallel_exposed, seconds::base(ep_exposed), seconds::base(pp_exposed)};
}

}  // namespace terms

/// The terms of the throughput model for one configuration (see bwplan::terms): what compose_throughput adds up.
struct throughput_terms {
  terms::throughput_shape shape;
  terms::compute_terms compute;      ///< one micro-batch
  seconds optimizer;                 ///< once per step
  terms::communication_terms comm;   ///< before overlap
  flops forward_per_micro_batch;     ///< forward FLOPs of one micro-batch on one GPU (MFU numerator ÷ 3 ÷ ga; ÷ pp)
  double tokens_per_step = 0;        ///< T × ga × world size (÷ pp)
  int world_size = 1;                ///< GPUs in the job
  double bubble_micro_batches = 0;   ///< pipeline bubble in micro-batch times of this rank, (pp − 1)/v (bubble_micro_batches)
  int pipeline_rank = 0;             ///< the pipeline rank these terms describe
  terms::offload_times offload;      ///< CPU offload, once per step (offload_time)
};

/// Every throughput term of configuration `c` of `m` on `gpu` (`inst` may be null: no EFA; with pipeline
/// parallelism, of pipeline rank `stage`, rank 0 when null). Throws invalid_request if `c` is invalid, its
/// expert parallelism does not fit `m` or its pipeline stages do not (validate_pipeline).
[[nodiscard]] inline throughput_terms compute_throughput_terms(const model_spec& m, const training_config& c, const gpu_spec& gpu,
                                                               const instance_spec* inst = nullptr,
                                                               const throughput_calibration& k = {},
                                                               const pipeline_rank* stage = nullptr);

namespace detail {
/// compute_throughput_terms without its validation (the callers that evaluate several pipeline ranks validate once).
[[nodiscard]] inline throughput_terms throughput_terms_of(const model_spec& m, const training_config& c, const gpu_spec& gpu,
                                                          const instance_spec* inst, const throughput_calibration& k,
                                                          const pipeline_rank* stage) {
  throughput_terms t;
  t.shape = terms::throughput_shape_of(m, c, gpu, k, stage);
  t.compute.gemm = terms::gemm_time(t.shape, c, k);
  t.compute.attention = terms::attention_time(t.shape, c, k);
  t.compute.memory_bound = terms::memory_bound_time(t.shape, c);
  t.compute.launch = terms::launch_time(t.shape, k);
  t.optimizer = terms::optimizer_time(t.shape);
  t.comm = terms::communication(m, t.shape, c, gpu, inst, k);
  if (c.tp_comm_overlap && c.tp > 1) {
    t.comm.tp_overlap = true;
    t.comm.tp_overlap_gemm = t.compute.gemm.high_precision + t.compute.gemm.low_precision;
    const double L = t.shape.L, nck = t.shape.nck;
    t.comm.tp_forward_rs_share = L > 0 ? 0.5 * (L + nck) / (2 * L + nck) : 0.0;
  }
  t.offload = terms::offload_time(t.shape, t.compute.micro_batch().raw());
  t.forward_per_micro_batch = flops::base(forward_flops_per_token(m, c.seq_len) * t.shape.T);
  t.tokens_per_step = t.shape.T * t.shape.ga * c.world_size;  // = micro-batch tokens × accumulation × data-parallel degree
  t.world_size = c.world_size;
  if (c.pp > 1) {  // each GPU runs 1/pp of the model's FLOPs; pp ranks share each token
    t.forward_per_micro_batch = flops::base(t.forward_per_micro_batch.raw() / c.pp);
    t.tokens_per_step /= c.pp;
    t.bubble_micro_batches = bubble_micro_batches(c.pp, c.virtual_stages());
    t.pipeline_rank = stage ? stage->rank : 0;
  }
  return t;
}
}  // namespace detail

inline throughput_terms compute_throughput_terms(const model_spec& m, const training_config& c, const gpu_spec& gpu,
                                                 const instance_spec* inst, const throughput_calibration& k, const pipeline_rank* stage) {
  validate(c);
  detail::validate_moe(m, c);
  validate_pipeline(m, c);
  return detail::throughput_terms_of(m, c, gpu, inst, k, stage);
}

/// Step time, tokens/s and MFU from the terms: micro-batches × compute + optimizer + pipeline bubble + exposed
/// communication. The bubble is (pp − 1)/v micro-batch times of the rank (bubble_micro_batches).
[[nodiscard]] inline throughput_estimate compose_throughput(const throughput_terms& t) {
  const double ga = t.shape.ga, peak = t.shape.peak;
  const double t_mb = t.compute.micro_batch().raw();
  const double t_opt = t.optimizer.raw();
  const terms::compute_terms& cp = t.compute;
  throughput_estimate e;
  // A frozen base does forward + input gradient (2 × forward) and the adapters their own 6·T·Pt: the FLOPs the
  // step needs (docs/finetune.md#throughput)
  e.step_flops.model = t.shape.adapters ? flops::base((2 * t.forward_per_micro_batch.raw() + cp.gemm.adapter.raw()) * ga)
                                        : flops::base(3 * t.forward_per_micro_batch.raw() * ga);
  e.step_flops.recompute =
      flops::base((cp.gemm.recompute_high.raw() + cp.gemm.recompute_low.raw() + cp.attention.recompute.raw()) * ga);
  e.gemm = seconds::base(ga * cp.gemm.total().raw());
  e.attention = seconds::base(ga * cp.attention.time.raw());
  e.memory_bound = seconds::base(ga * (cp.memory_bound.time.raw() + cp.launch.raw()) + t_opt);
  e.compute = seconds::base(ga * t_mb + t_opt);
  e.comm = terms::communication_total(t.comm);
  e.exposed = terms::exposed_communication(t.comm, cp.micro_batch(), cp.attention.time);
  e.communication = e.comm.total();
  e.exposed_communication = e.exposed.total();
  e.bubble = seconds::base(t.bubble_micro_batches * t_mb);
  e.pipeline_rank = t.pipeline_rank;
  e.offload = t.offload.exposed;
  e.offload_cpu_step = t.offload.cpu_step;
  e.offload_pcie = t.offload.pcie_overlapped + t.offload.pcie_serial;
  e.step = e.compute + e.bubble + e.exposed_communication + e.offload;
  const double tokens = t.tokens_per_step;
  e.tokens_per_step = tokens;
  e.tokens_per_s = tokens / e.step.raw();
  e.tokens_per_s_per_gpu = e.tokens_per_s / t.world_size;
  e.mfu = peak > 0 ? (e.step_flops.model.raw() / e.step.raw()) / peak : 0;
  e.mfu_format = t.shape.peak_lp > 0 ? (e.step_flops.model.raw() / e.step.raw()) / t.shape.peak_lp : e.mfu;
  return e;
}

/// Step time, tokens/s and MFU of configuration `c` on `gpu`:
/// compose_throughput(compute_throughput_terms(m, c, gpu, inst, k)).
///
/// Roofline per op class (bwplan::terms): each GEMM of each linear at the dense peak × gemm_efficiency of its own
/// m, n, k, low-precision blocks at the format's rate (gemm_time); attention FLOPs (backward 2.5× forward) at the
/// published rates of the GPU's attention kernel by head_dim (attention_time); element-wise, loss and cast bytes counted
/// op by op / (HBM · memory) (memory_bound_time); a fixed cost per kernel (launch_time); the optimizer
/// (optimizer_time). Communication per parallelism: FSDP2 all-gathers and reduce-scatters, HSDP and DDP all-reduces,
/// sequence-parallel collectives, ring-attention K/V exchange, expert all-to-all (collective_time or all_to_all_time for
/// each call); the overlap model (exposed_communication) decides what is exposed. `inst` may be null (no EFA). @sa docs/methodology.md#throughput
///
/// Pipeline parallelism: the step of the slowest rank (bottleneck_ranks: those that can hold the most blocks and the
/// last, which runs the LM head and the loss), with its bubble and its sends; `pipeline_rank` says which.
/// With `memo` (pp > 1) the ranks without the LM head are taken from it when known (filled by a configuration that
/// differs only in the loss: headless_ranks), else evaluated and stored; the result is the same either way.
/// docs/scaling.md#pipeline-parallelism
[[nodiscard]] inline throughput_estimate estimate_throughput(const model_spec& m, const training_config& c,
                                                             const gpu_spec& gpu, const instance_spec* inst = nullptr,
                                                             const throughput_calibration& k = {},
                                                             headless_ranks<throughput_estimate>* memo = nullptr) {
  if (c.pp <= 1) return compose_throughput(compute_throughput_terms(m, c, gpu, inst, k));
  validate(c);  // once for every rank
  detail::validate_moe(m, c);
  validate_pipeline(m, c);
  const bool reuse = memo && memo->known;
  int ranks[3];
  const int n = bottleneck_ranks(c, ranks);
  throughput_estimate best;
  bool have = false;
  if (reuse && memo->any) { best = memo->best; have = true; }
  for (int i = 0; i < n; ++i) {
    const pipeline_rank st = pipeline_rank_of(c, m.layers, leading_dense_blocks(m), ranks[i]);
    if (!st.head && reuse) continue;
    if (st.head && memo && !memo->known) {  // the ranks before the head's are the headless ones (the head is on pp − 1)
      memo->known = true;
      memo->any = have;
      if (have) memo->best = best;
    }
    const throughput_estimate e = compose_throughput(detail::throughput_terms_of(m, c, gpu, inst, k, &st));
    if (!have || e.step.raw() > best.step.raw()) best = e;
    have = true;
  }
  return best;
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
