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
  seconds step;                   ///< wall time of one optimizer step: compute + bubble + exposed communication
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

/// Effective per-GPU bandwidth of a collective over `world` GPUs: NVLink within a node, EFA shared by
/// the node's GPUs across nodes (the slower link bounds a hierarchical ring).
/// `domain`: GPUs of one NVLink domain when it spans instances (NVL72), else 0 (the node).
[[nodiscard]] inline byte_rate collective_bandwidth(const gpu_spec& gpu, const instance_spec* inst, int world,
                                                    int gpus_per_node, const throughput_calibration& k, int domain = 0) {
  const byte_rate intra = gpu.nvlink_per_direction * k.nvlink;
  if (world <= std::max(gpus_per_node, domain) || inst == nullptr) return intra;
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
  const byte_rate bw = collective_bandwidth(gpu, inst, c.ep, c.gpus_per_node, k, c.nvlink_domain);
  const double frac = static_cast<double>(c.ep - 1) / c.ep;
  return calls * (frac * per_dir / bw.raw() + k.collective_latency_s);
}

/// The terms of the throughput model, one function each: compute per op class, communication per
/// parallelism, and the overlap model. Times are seconds on one GPU.
namespace terms {

// ---------------------------------------------------------------------------------------------------------
// Shape of one step

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
  double recompute_passes = 0;  ///< blocks whose element-wise kernels run again: nck, or L/2 under selective checkpointing
  bool fsdp = false; ///< any FSDP mode
  bool zero1 = false;  ///< distributed-optimizer layout (zero1_layout): one reduce-scatter + all-gather per step
  double Ps = 0;     ///< zero1: parameters whose master weights and states are sharded (experts undivided, ÷ tp)
  double moe_layers = 0;  ///< MoE blocks on this GPU (pipeline: the rank's own)
  bool amp = false;  ///< autocast over fp32 weights (fp32 residual stream)
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
};

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
  r.attention_speedup = gpu.attention_speedup;
  r.recompute_passes =
      (c.ac.mode == ac_mode::selective_op || c.ac.mode == ac_mode::selective_attn) ? 0.5 * r.L : r.nck;
  r.gpn = std::max(1, std::min(c.nvlink_domain_gpus(), c.world_size));
  r.moe_layers = static_cast<double>(m.moe_layers);
  r.adapters = c.adapters();
  r.qlora = c.finetune == finetune_mode::qlora;
  r.gather = c.fp8_all_gather ? r.Pc + r.root_gemm : 2 * r.Pc;
  if (r.adapters) {
    r.amp = false;  // the frozen base is bf16: no autocast casts of fp32 weights
    r.adapter = adapter_shape_of(m, c.lora);
    r.Pt = r.L * r.adapter.params;
    r.Ptc = r.Pt;
    const double lin_all = static_cast<double>(pc.block_linear * m.layers + pc.layer_adjust) / c.tp;
    if (r.qlora) r.gather = nf4_bytes_per_param * lin_all + 2 * (r.Pc - lin_all);
    r.state = optimizer_state_bytes(c.optim, r.w, r.Pt, r.L * r.adapter.factored);
  } else {
    r.Pt = r.P;
    r.Ptc = r.Pc;
    r.state = optimizer_state_bytes(c.optim, r.w, r.P, c.optim == optimizer_kind::adafactor ? adafactor_full_elements(m) / c.tp : 0);
  }
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
    r.Pt = r.P;
    r.Ptc = r.Pc;
    r.gather = c.fp8_all_gather ? r.Pc + r.root_gemm : 2 * r.Pc;
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
  flop_rate high_rate;      ///< achieved bf16 GEMM rate: peak · gemm_max · h / (h + h½)
  flop_rate low_rate;       ///< achieved rate of the compute format
  seconds high_precision;   ///< bf16 blocks: forward, backward (2×) and recompute
  seconds low_precision;    ///< low-precision blocks: forward, backward (2×) and recompute
  seconds lm_head;          ///< LM head, forward and backward, at peak · gemm_max
  flops adapter;            ///< LoRA adapter GEMM FLOPs of one micro-batch, forward + backward (0 for a full fine-tune)
  seconds adapters;         ///< LoRA adapters: skinny rank-r GEMMs, memory-bound (see gemm_time)
  /// Sum of the four, in this order.
  [[nodiscard]] constexpr seconds total() const noexcept { return high_precision + low_precision + lm_head + adapters; }
};

/// GEMMs of one micro-batch: `2·T·lin` per block forward, twice that backward, plus the recompute (full
/// checkpointing: whole blocks; per-op SAC: the matmuls it does not save, k, o and up in bf16, all of them when
/// the format's GEMMs are outside the save list), at `peak · gemm_max · h/(h + h½)`. A low-precision format runs
/// at its own peak, with the half-efficiency width grown by √(peak ratio) (docs/precision.md#speed) and its
/// `relative_gemm_efficiency`. Sources: Narayanan et al. 2021 (arXiv:2104.04473) for the FLOP count; the
/// efficiency curve fitted on `h200-calibration.jsonl` (790/989 TFLOP/s on an 8192³ bf16 matmul). Every rate is
/// scaled by the power limit's clock fraction (`clock`, gpu_spec::compute_clock_fraction).
///
/// A frozen base (LoRA, QLoRA) runs no weight-gradient GEMMs: its blocks and LM head cost `2·` forward instead of
/// `3·` (autograd skips `mm` outputs whose `should_compute_output` is false; PEFT freezes the base). The adapters
/// add `6·T·Pt_block` FLOPs per block (forward x·A and (x·A)·B, backward input and weight gradients of both),
/// skinny rank-r GEMMs bound by HBM: per adapted linear each of the three passes reads the input `2·T·d_in`, and
/// reads and writes the output `2·2·T·d_out` (the base output the adapter adds into), at the achieved HBM rate,
/// or their FLOPs at the bf16 GEMM rate when that is slower.
[[nodiscard]] inline gemm_terms gemm_time(const throughput_shape& s, const training_config& c,
                                          const throughput_calibration& k) noexcept {
  const double T = s.T, h = s.h, L = s.L, nq = s.nq, peak = s.peak, peak_lp = s.peak_lp;
  const format_traits& ft = s.format;
  gemm_terms r;
  const double block_gemm = 2 * T * s.lin;
  const double head_gemm = 2 * T * s.V * h;
  const double gemm_eff = k.gemm_max * h / (h + k.gemm_half_width);
  // A faster tensor-core format needs larger matrices to reach the same efficiency, so the half-efficiency
  // width grows with the format's peak ratio to bf16 (as its square root: reconciles the size dependence with
  // the published end-to-end speed-ups, docs/precision.md#speed).
  const double ratio = peak > 0 ? peak_lp / peak : 1;
  const double lp_rate = s.clock * peak_lp * (k.gemm_max * h / (h + k.gemm_half_width * std::sqrt(ratio))) * ft.relative_gemm_efficiency;
  const double hp_rate = s.clock * peak * gemm_eff;
  // recomputed GEMM FLOPs per block (forward only): full checkpointing recomputes the block; per-op SAC the
  // matmuls it does not save (k, o, up for bf16; all of them when the format's GEMMs are not saved)
  const double sac_hp = 2 * T * (h * s.kv + s.q * h + h * s.f);
  const double sac_lp = ft.sac_saves_gemm_outputs ? sac_hp : block_gemm;
  double recompute_hp = s.nck * block_gemm * (L - nq) / std::max(1.0, L);
  double recompute_lp = s.nck * block_gemm * nq / std::max(1.0, L);
  if (c.ac.mode == ac_mode::selective_op) { recompute_hp = (L - nq) * sac_hp; recompute_lp = nq * sac_lp; }
  r.block = flops::base(block_gemm);
  r.head = flops::base(head_gemm);
  r.recompute_high = flops::base(recompute_hp);
  r.recompute_low = flops::base(recompute_lp);
  r.high_rate = flop_rate::base(hp_rate);
  r.low_rate = flop_rate::base(lp_rate);
  const double passes = s.adapters ? 2 : 3;  // a frozen base: forward + input gradient only
  r.high_precision = seconds::base((passes * (L - nq) * block_gemm + recompute_hp) / hp_rate);
  r.low_precision = seconds::base((passes * nq * block_gemm + recompute_lp) / lp_rate);
  r.lm_head = seconds::base(passes * head_gemm / (s.clock * peak * k.gemm_max));
  if (s.adapters) {
    const double runs = L + s.nck;  // every block, again for the recomputed ones (forward only, counted whole)
    const double fl = 6 * T * s.adapter.params * L + 2 * T * s.adapter.params * s.nck;
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
  seconds time;     ///< forward + backward (2.5× forward) + recompute, at peak · attention
};

/// Attention (FlashAttention/SDPA, causal): `2·2·b·s²·q/2` forward per block (QKᵀ and PV at half; context
/// parallel load-balanced), backward 2.5× forward (FlashAttention-2 paper, Dao 2023), recompute for checkpointed
/// blocks (Megatron selective recompute: every block's core attention, Korthikanti et al. 2022), at the
/// calibrated fraction `attention` of the bf16 peak, times the power limit's clock fraction and the GPU's
/// `attention_speedup` (Blackwell Ultra).
[[nodiscard]] inline attention_terms attention_time(const throughput_shape& s, const training_config& c,
                                                    const throughput_calibration& k) noexcept {
  const double attn_fwd = 2 * s.b * s.s * s.s * s.q / (static_cast<double>(c.tp) * c.cp);  // causal: QK^T + PV at half; load-balanced CP
  double recompute_attn = s.nck * attn_fwd;
  if (c.ac.mode == ac_mode::selective_attn) recompute_attn = s.L * attn_fwd;
  attention_terms r;
  r.forward = flops::base(attn_fwd);
  r.recompute = flops::base(recompute_attn);
  r.time = seconds::base((s.L * attn_fwd * 3.5 + recompute_attn) / (s.clock * s.attention_speedup * s.peak * k.attention));
  return r;
}

/// Memory-bound kernels of one micro-batch: bytes moved through HBM, by kind.
struct memory_bound_terms {
  bytes elementwise;   ///< norms, RoPE, SwiGLU, residuals, per block and per recomputed block
  bytes loss;          ///< the loss over T·V (standard: fp32 upcast, log-softmax and their gradients; chunked: less)
  bytes casts;         ///< fp32 master weights cast to bf16 (autocast per use; FSDP2 before the gather and after)
  bytes quantization;  ///< quantizing activations and weights of low-precision blocks
  bytes dequantization;  ///< QLoRA: NF4 block linears dequantized to bf16 in forward, backward and recompute
  seconds time;        ///< (elementwise + loss + casts + quantization + dequantization) / achieved HBM bandwidth
};

/// Element-wise, loss and cast kernels of one micro-batch at the calibrated fraction `memory` of HBM bandwidth.
/// Per block `T·(10·rs·h + 20·F + 12·(q + 2kv))` bytes (rs = 4 under autocast, else 2); the loss `20·T·V`
/// (standard) or `8·T·V` (chunked); casts of fp32 master weights `6·P/N` (×2 under FSDP2); quantization casts
/// fused into the producing kernels (TE fused norm+cast, torch.compile epilogues) cost the quantized write,
/// twice per micro-batch for activations and for weights read in bf16 (FSDP re-gathers them). Sources: kernel
/// byte counts of the PyTorch eager ops; docs/precision.md#speed for the casts; calibrated on
/// `h200-calibration.jsonl`.
[[nodiscard]] inline memory_bound_terms memory_bound_time(const throughput_shape& s, const training_config& c) noexcept {
  const double T = s.T, h = s.h, f = s.f, q = s.q, kv = s.kv, V = s.V;
  const format_traits& ft = s.format;
  const double rs = s.amp ? 4 : 2;
  const double block_bytes = T * (h * rs * 10 + f * 2 * 10 + (q + 2 * kv) * 2 * 6);
  const double loss_bytes = c.loss == loss_impl::standard ? T * V * 20 : T * V * 8;
  // trained params only; the distributed optimizer computes on its bf16 parameters (its cast is in the optimizer step)
  const double cast_bytes = c.master == master_weights::fp32 && !s.zero1 ? (s.fsdp ? 2 : 1) * 6 * s.Pt / s.n : 0;
  const double act_elems = T * (2 * h + q + f);
  const double dual = ft.weight_copy_bytes > 0 ? ft.weight_copy_bytes / std::max(ft.quantized_bytes, 1e-9) : 1;
  const double quant_bytes = s.nq * (2 * act_elems * dual * ft.quantized_bytes + 2 * s.lin * (2 + dual * ft.quantized_bytes));
  const double elementwise = (s.L + s.recompute_passes) * block_bytes;
  memory_bound_terms r;
  r.elementwise = bytes::base(elementwise);
  r.loss = bytes::base(loss_bytes);
  r.casts = bytes::base(cast_bytes);
  r.quantization = bytes::base(quant_bytes);
  // QLoRA: every 4-bit linear reads its packed weight and writes a bf16 copy per use: forward, backward and the
  // recompute of checkpointed blocks (bitsandbytes `dequantize_4bit`, `MatMul4Bit.forward/backward`)
  const double dequant_bytes = s.qlora ? (s.L * 2 + s.nck) * s.lin * (nf4_bytes_per_param + 2) : 0;
  r.dequantization = bytes::base(dequant_bytes);
  r.time = seconds::base((elementwise + loss_bytes + cast_bytes + quant_bytes + dequant_bytes) / s.hbm);
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
[[nodiscard]] constexpr seconds optimizer_time(const throughput_shape& s) noexcept {
  const double copy = s.zero1 && s.w == 4 ? 2 * s.Pt : 0.0;
  return seconds::base((3 * s.w * s.Pt + 2 * s.state + copy) / s.n / s.hbm);
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
/// parallel; `p2p_communication.py`). The ranks of one stage are world/pp apart (pp is the outermost mesh
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
  r.bytes_per_send = 2 * s.T * s.h;
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
/// activations of the replica's T·tp tokens. Sources: Korthikanti et al. 2022 (arXiv:2205.05198) sequence
/// parallelism; torchtitan `parallelize` (SequenceParallel).
[[nodiscard]] inline seconds tensor_parallel_communication(const throughput_shape& s, const training_config& c, const gpu_spec& gpu,
                                                           const instance_spec* inst, const throughput_calibration& k) noexcept {
  if (c.tp <= 1) return seconds{};
  const double act = 2 * s.T * c.tp * s.h;
  const comm_group tg = comm_group_of(c.tp, 1, s.gpn);
  const double per = collective_time(collective_kind::all_gather, bytes::base(act), tg, gpu, inst, k).raw() +
                     collective_time(collective_kind::reduce_scatter, bytes::base(act), tg, gpu, inst, k).raw();
  return seconds::base(s.ga * (2 * 2 * s.L + 2 * s.nck) * per);
}

/// Context parallelism (ring attention), per step: every rank receives the other ranks' K and V (forward,
/// recompute), K/V again and the dK/dV reduction (backward): an all-gather-sized exchange of K, V per pass.
/// Sources: torch `context_parallel` (torch/distributed/tensor/experimental/_attention.py); torchtitan CP.
[[nodiscard]] inline seconds context_parallel_communication(const throughput_shape& s, const training_config& c, const gpu_spec& gpu,
                                                            const instance_spec* inst, const throughput_calibration& k) noexcept {
  if (c.cp <= 1) return seconds{};
  const double kvb = 2 * 2 * s.b * s.s * s.kv / c.tp;
  const comm_group cg = comm_group_of(c.cp, c.tp, s.gpn);  // (with pp: within one stage's block of world/pp ranks)
  const double per = collective_time(collective_kind::all_gather, bytes::base(kvb), cg, gpu, inst, k).raw();
  const double passes = 3.0 * s.L + s.nck + (c.ac.mode == ac_mode::selective_attn ? s.L : 0);
  return seconds::base(s.ga * passes * per);
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
  seconds context_parallel;  ///< per step
  seconds expert_parallel;   ///< per step
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
  r.context_parallel = context_parallel_communication(s, c, gpu, inst, k);
  r.expert_parallel = expert_parallel_communication(m, s, c, gpu, inst, k);
  r.zero1 = zero1_communication(s, c, gpu, inst, k);
  r.pipeline = pipeline_communication(s, c, gpu, inst, k);
  r.micro_batches = s.ga;
  r.blocks = s.Lb;
  return r;
}

// ---------------------------------------------------------------------------------------------------------
// Overlap

/// Collective time of one step by parallelism: data parallel = ga × FSDP per micro-batch + HSDP all-reduce, or
/// the DDP all-reduce.
[[nodiscard]] constexpr communication_breakdown communication_total(const communication_terms& t) noexcept {
  double dp = 0;
  if (t.fsdp.active) dp = t.micro_batches * t.fsdp.per_micro_batch.raw();
  if (t.hsdp) dp += t.hsdp_all_reduce.raw();
  if (t.ddp) dp = t.ddp_all_reduce.raw();
  if (t.zero1.active) dp = t.zero1.reduce_scatter.raw() + t.zero1.all_gather.raw();
  const double p2p = t.pipeline.active ? t.pipeline.sends * t.pipeline.per_send.raw() : 0.0;
  return {seconds::base(dp), t.tensor_parallel, t.context_parallel, t.expert_parallel, seconds::base(p2p)};
}

/// What of each parallelism's communication is not hidden behind compute (`micro_batch` = compute of one
/// micro-batch, `attention` = its attention part).
///
/// FSDP2 prefetches the next unit's all-gather and reduce-scatters on their own streams: only the excess of a
/// micro-batch's collectives over its compute is exposed, plus the first unit's gather (FSDP2 docs, implicit
/// prefetching). The HSDP and DDP all-reduces overlap with the backward (2/3 of the compute, less what FSDP
/// already uses) and expose at least the last bucket (1/L of it) (DDP bucketing, PyTorch DDP design notes).
/// Sequence-parallel collectives are not overlapped (no async TP) and the MoE all-to-all sits on the critical
/// path of every MoE block: all exposed. Ring attention overlaps its K/V exchange with the attention kernels.
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
  const double cp_exposed = std::max(0.0, t.context_parallel.raw() - ga * attention.raw());
  return {seconds::base(dp_exposed), t.tensor_parallel, seconds::base(cp_exposed), t.expert_parallel, seconds::base(pp_exposed)};
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
  e.step = e.compute + e.bubble + e.exposed_communication;
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
/// Roofline per op class (bwplan::terms): GEMM FLOPs / (bf16 peak · gemm_max · h/(h + h½)) and the compute
/// format's rate (gemm_time); attention FLOPs (backward 2.5× forward, FlashAttention-2 paper) / (peak ·
/// attention) (attention_time); element-wise, loss and cast bytes / (HBM · memory) (memory_bound_time); a fixed
/// cost per kernel (launch_time); the optimizer (optimizer_time). Communication per parallelism: FSDP2
/// all-gathers and reduce-scatters, HSDP and DDP all-reduces, sequence-parallel collectives, ring-attention
/// K/V exchange, expert all-to-all (collective_time for each call); the overlap model (exposed_communication)
/// decides what is exposed. `inst` may be null (no EFA). @sa docs/methodology.md#throughput
///
/// Pipeline parallelism: the step of the slowest rank (bottleneck_ranks: the one with the most blocks and the
/// last, which runs the LM head and the loss), with its bubble and its sends; `pipeline_rank` says which.
/// docs/scaling.md#pipeline-parallelism
[[nodiscard]] inline throughput_estimate estimate_throughput(const model_spec& m, const training_config& c,
                                                             const gpu_spec& gpu, const instance_spec* inst = nullptr,
                                                             const throughput_calibration& k = {}) {
  if (c.pp <= 1) return compose_throughput(compute_throughput_terms(m, c, gpu, inst, k));
  validate(c);  // once for every rank
  detail::validate_moe(m, c);
  validate_pipeline(m, c);
  int ranks[2];
  const int n = bottleneck_ranks(c, ranks);
  throughput_estimate best;
  for (int i = 0; i < n; ++i) {
    const pipeline_rank st = pipeline_rank_of(c, m.layers, leading_dense_blocks(m), ranks[i]);
    const throughput_estimate e = compose_throughput(detail::throughput_terms_of(m, c, gpu, inst, k, &st));
    if (i == 0 || e.step.raw() > best.step.raw()) best = e;
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
