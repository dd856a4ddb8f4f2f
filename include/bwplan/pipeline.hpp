// bwplan: GPU memory and throughput planning for LLM training
// SPDX-License-Identifier: Apache-2.0
#pragma once

// Pipeline parallelism: how the layers are split over the stages, how many micro-batches each rank holds in
// flight under each schedule, and the bubble. Standard library only; the memory and throughput terms of one
// stage use it (memory.hpp, throughput.hpp). @sa docs/scaling.md#pipeline-parallelism

#include <bwplan/error.hpp>
#include <bwplan/model.hpp>
#include <bwplan/training.hpp>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

namespace bwplan {

/// Decoder blocks of virtual stage `s` of `S` when `layers` blocks are split the way torchtitan does it
/// (`torchtitan/distributed/pipeline_parallel.py` `_generate_llm_fqn_per_model_part` with its defaults
/// `pipeline_parallel_first_stage_less_layers = 1` and `..._last_stage_less_layers = 1`,
/// `torchtitan/config/configs.py`): the embedding and the final norm + LM head each count as one layer, the
/// `layers + 2` units are split as evenly as possible with the first `(layers + 2) % S` stages one unit more,
/// and the first and last stage give one unit to the embedding and the head. So `layers % pp ≠ 0` is allowed
/// (uneven split), and the first and last stage hold one block fewer than the others when the split is even.
///
/// `megatron`: Megatron-Core's split (`--stack megatron`). By default it divides the decoder blocks evenly over
/// the stages, `layers / S` each, the embedding and the head on top of the first and last
/// (megatron/core/transformer/transformer_layer.py `get_transformer_layer_offset`, transformer_block.py
/// `get_num_layers_to_build`); where `layers + 2` divides and `layers` does not, the recipes count the embedding and
/// the loss as a layer each (`account_for_embedding_in_pipeline_split`, `account_for_loss_in_pipeline_split`, as
/// Megatron-Bridge's Llama 3.1 405B and Qwen3 235B recipes set them: torchtitan's split above); otherwise an explicit
/// layout (`pipeline_model_parallel_layout`, Megatron-Bridge's DeepSeek-V3 recipes) places the blocks, taken here as
/// the even split of the decoder blocks with the first `layers % S` stages one block more.
/// S = 1: every block. Returns 0 for an `s` outside [0, S).
[[nodiscard]] constexpr std::int64_t stage_blocks(std::int64_t layers, std::int64_t S, std::int64_t s, bool megatron = false) noexcept {
  if (S <= 1) return s == 0 ? layers : 0;
  if (s < 0 || s >= S) return 0;
  if (megatron && (layers % S == 0 || (layers + 2) % S != 0)) return layers / S + (s < layers % S ? 1 : 0);
  const std::int64_t units = layers + 2, per = units / S, extra = units % S;
  return per + (s < extra ? 1 : 0) - (s == 0 ? 1 : 0) - (s == S - 1 ? 1 : 0);
}

/// Index of the first decoder block of virtual stage `s` of `S` (see stage_blocks).
[[nodiscard]] constexpr std::int64_t stage_first_block(std::int64_t layers, std::int64_t S, std::int64_t s, bool megatron = false) noexcept {
  if (S <= 1 || s <= 0) return 0;
  if (megatron && (layers % S == 0 || (layers + 2) % S != 0)) return s * (layers / S) + std::min(s, layers % S);
  const std::int64_t units = layers + 2, per = units / S, extra = units % S;
  return s * per + std::min(s, extra) - 1;  // units before s, less the embedding unit
}

/// Whether `layers` blocks can be split over `S` virtual stages with at least one decoder block on every stage
/// (the first and last included): ⌊(layers + 2) / S⌋ ≥ 2. torchtitan accepts a first stage holding only the
/// embedding (its check is ⌊(layers + 2) / S⌋ ≥ 1); bwplan does not model such a stage. Megatron's split
/// (`megatron`, see stage_blocks): `layers ≥ S`.
[[nodiscard]] constexpr bool pipeline_split_ok(std::int64_t layers, std::int64_t S, bool megatron = false) noexcept {
  return S <= 1 || (megatron ? layers >= S : (layers + 2) / S >= 2);
}

/// One pipeline rank as the memory and throughput terms see it: the decoder blocks it holds (all its virtual
/// stages), whether it holds the embedding (virtual stage 0) and the final norm, LM head and loss (the last
/// virtual stage), and the micro-batches whose activations it holds at its peak.
struct pipeline_rank {
  int rank = 0;                   ///< pipeline rank, 0 … pp − 1
  std::int64_t blocks = 0;        ///< decoder blocks on this rank
  std::int64_t first_block = 0;   ///< first block of its first virtual stage (the dense/MoE split of a MoE model)
  std::int64_t dense_blocks = 0;  ///< blocks among them that are dense (the leading non-MoE blocks of a MoE model)
  bool embedding = true;          ///< holds the token embedding
  bool head = true;               ///< holds the final norm, the LM head and the loss
  /// Micro-batches of this rank's activations alive at its peak, in whole-rank units (a chunk of the
  /// interleaved schedule is 1/vpp of the rank's blocks): in_flight_micro_batches.
  double in_flight = 1;
};

/// Micro-batches whose saved activations pipeline rank `r` holds at its peak, in whole-rank units.
///
/// 1F1B: the warm-up runs `pp − r − 1` forwards, then each steady-state step one more forward before the first
/// backward: `min(pp − r, m)` (Megatron-Core `megatron/core/pipeline_parallel/schedules.py:957` and the cap at
/// 976-978; PyTorch `Schedule1F1B`). Interleaved with v virtual stages: the warm-up runs
/// `2·(pp − r − 1) + (v − 1)·pp` chunk forwards (schedules.py:964-965, micro-batch groups of pp, the default
/// `microbatch_group_size_per_vp_stage`; PyTorch `_get_warmup_ops` with `microbatches_per_round = pp`), one
/// more in steady state, capped at the m·v chunks of the step; each chunk holds 1/v of the rank's blocks, so
/// `min(2·(pp − r − 1) + (v − 1)·pp + 1, m·v) / v`. Rank 0: pp + (pp − 1)/v. pp = 1: 1.
[[nodiscard]] constexpr double in_flight_micro_batches(int pp, int v, std::int64_t m, int r) noexcept {
  if (pp <= 1) return 1;
  m = std::max<std::int64_t>(1, m);
  if (v <= 1) return static_cast<double>(std::min<std::int64_t>(pp - r, m));
  const std::int64_t chunks = std::min<std::int64_t>(2 * (pp - r - 1) + static_cast<std::int64_t>(v - 1) * pp + 1, m * v);
  return static_cast<double>(chunks) / v;
}

/// Pipeline bubble of one step as a multiple of one micro-batch's forward + backward on the slowest rank:
/// `(pp − 1) / v` (Narayanan et al. 2021, arXiv:2104.04473 §2.2: bubble time `(p − 1)·(t_f + t_b)`, divided by
/// v for the interleaved schedule; as a share of the ideal step `(p − 1) / (v·m)`). 0 for pp = 1.
[[nodiscard]] constexpr double bubble_micro_batches(int pp, int v) noexcept {
  return pp <= 1 ? 0.0 : static_cast<double>(pp - 1) / std::max(1, v);
}

/// Pipeline rank `r` of configuration `c` for a model of `layers` blocks whose first `dense_leading` blocks are
/// dense (MoE models; 0 otherwise). Rank r holds virtual stages r, r + pp, …, r + (v − 1)·pp (the loop
/// placement of Megatron-Core's interleaved schedule and of PyTorch's `ScheduleInterleaved1F1B`).
[[nodiscard]] constexpr pipeline_rank pipeline_rank_of(const training_config& c, std::int64_t layers, std::int64_t dense_leading,
                                                       int r) noexcept {
  pipeline_rank p;
  p.rank = r;
  if (c.pp <= 1) {
    p.blocks = layers;
    p.dense_blocks = dense_leading;
    return p;
  }
  const int v = c.virtual_stages();
  const std::int64_t S = static_cast<std::int64_t>(c.pp) * v;
  p.blocks = 0;
  p.dense_blocks = 0;
  const bool mg = c.stack == training_stack::megatron;
  p.first_block = stage_first_block(layers, S, r, mg);
  for (int j = 0; j < v; ++j) {
    const std::int64_t s = r + static_cast<std::int64_t>(j) * c.pp;
    const std::int64_t n = stage_blocks(layers, S, s, mg), first = stage_first_block(layers, S, s, mg);
    p.blocks += n;
    p.dense_blocks += std::max<std::int64_t>(0, std::min(first + n, dense_leading) - first);
  }
  p.embedding = r == 0;
  p.head = r == c.pp - 1;
  p.in_flight = in_flight_micro_batches(c.pp, v, c.grad_accum, r);
  return p;
}

/// The pipeline ranks whose memory can be the largest: rank 0 (the most micro-batches in flight, the
/// embedding), rank 1 (the most blocks: the extra units of an uneven split go to the first stages, and rank 0
/// gives one to the embedding) and the last rank (LM head, logits and loss). Returns how many of `out` are set
/// (1 for pp = 1: the whole model).
[[nodiscard]] constexpr int peak_memory_ranks(const training_config& c, int (&out)[3]) noexcept {
  if (c.pp <= 1) { out[0] = 0; return 1; }
  out[0] = 0;
  int n = 1;
  if (c.pp > 2) out[n++] = 1;
  out[n++] = c.pp - 1;
  return n;
}

/// What an estimate found on the pipeline ranks of a configuration that hold no LM head, for another configuration
/// that differs from it only in the loss (loss_impl) to reuse: a rank without the head (pipeline_rank::head false;
/// the head is on rank pp − 1) holds no logits, loss buffers or head weights and runs no head or loss (memory_shape_of
/// and throughput_shape_of set the vocabulary and head width to 0 there), so neither its memory nor its time depends
/// on the loss (test "pipeline: the ranks without the LM head do not depend on the loss …"). `Estimate` is
/// memory_estimate (estimate_memory_within) or throughput_estimate (estimate_throughput); search_plans keeps one of
/// each per group of loss variants.
template <class Estimate>
struct headless_ranks {
  bool known = false;  ///< the headless ranks were evaluated (the other fields mean something only then)
  bool over = false;   ///< memory: one of them is over the limit (the configuration does not fit)
  bool any = false;    ///< `best` holds one (with pp ≥ 2 rank 0 has no head)
  Estimate best;       ///< the one the estimate keeps of them (the largest device peak, the longest step)
};

/// The pipeline ranks whose compute per micro-batch can be the longest: the rank with the most blocks among
/// those without the head and the last rank (the LM head and the loss). Which rank holds the most blocks depends on
/// the split: rank 1 under torchtitan's (rank 0 gives a unit to the embedding), rank 0 under Megatron's even or
/// laid-out split (the extra blocks go to the first stages) and rank 1 again where Megatron counts the embedding and
/// the loss (stage_blocks); a MoE model's leading dense blocks sit on rank 0. So ranks 0, 1 (pp > 2) and pp − 1.
/// Returns how many of `out` are set (1 for pp = 1).
[[nodiscard]] constexpr int bottleneck_ranks(const training_config& c, int (&out)[3]) noexcept {
  if (c.pp <= 1) { out[0] = 0; return 1; }
  int n = 0;
  out[n++] = 0;
  if (c.pp > 2) out[n++] = 1;
  out[n++] = c.pp - 1;
  return n;
}

/// Whether configuration `c` keeps its model states in the distributed-optimizer (ZeRO-1) layout: bf16
/// parameters and the gradient buffer replicated on every data-parallel rank, the fp32 master weights and the
/// optimizer states sharded over the data-parallel × context-parallel ranks, one reduce-scatter of the
/// gradients and one all-gather of the parameters per step. That is `sharding optimizer`, and also FSDP2 full
/// sharding under pipeline parallelism as torchtitan runs it: with pp > 1 torchtitan does not reshard after
/// forward (`torchtitan/distributed/fsdp.py` `get_fsdp_reshard_after_forward_policy`: "For PP, by default do
/// not reshard after forward to avoid per-microbatch all-gathers") and the pipelining stage turns off the
/// reshard after backward and the gradient reduce-scatter until the last micro-batch's backward (PyTorch
/// `torch/distributed/pipelining/stage.py` `backward_maybe_with_nosync`: `set_reshard_after_backward(False)`,
/// `set_requires_gradient_sync(False)`, then `post_backward` on the last backward), so the stage's bf16
/// parameters stay gathered and its unsharded gradients accumulate all step: the same bytes and traffic.
[[nodiscard]] constexpr bool zero1_layout(const training_config& c) noexcept {
  return c.shard == sharding::optimizer || (c.pp > 1 && c.shard == sharding::full);
}

/// Dense blocks before the first MoE block (MoE models: `first_k_dense_replace`; 0 for dense models, whose
/// blocks are all alike).
[[nodiscard]] constexpr std::int64_t leading_dense_blocks(const model_spec& m) noexcept {
  return m.is_moe() ? std::max<std::int64_t>(0, m.layers - m.moe_layers) : 0;
}

/// The model-dependent pipeline rule: every virtual stage holds at least one decoder block
/// (pipeline_split_ok, with Megatron's split under `--stack megatron`). Empty when it holds.
[[nodiscard]] inline std::vector<plan_violation> pipeline_violations(const model_spec& m, const training_config& c) {
  if (c.pp <= 1) return {};
  const std::int64_t S = static_cast<std::int64_t>(c.pp) * c.virtual_stages();
  const bool mg = c.stack == training_stack::megatron;
  if (pipeline_split_ok(m.layers, S, mg)) return {};
  return {{"pp", "/pp", "pipeline parallelism " + std::to_string(c.pp) + (c.virtual_stages() > 1 ? " x vpp " + std::to_string(c.vpp) : "") +
                            " = " + std::to_string(S) + " stages leaves a stage without a decoder block: the " + std::to_string(m.layers) +
                            " layers of " + m.name + (mg ? " split over at most " + std::to_string(m.layers) + " stages (Megatron's split)"
                                                         : " + embedding + head split over at most " + std::to_string((m.layers + 2) / 2) + " stages")}};
}

/// Throws plan_error with the first of pipeline_violations(m, c).
inline void validate_pipeline(const model_spec& m, const training_config& c) {
  auto v = pipeline_violations(m, c);
  if (!v.empty()) throw plan_error(std::move(v.front()));
}

}  // namespace bwplan
