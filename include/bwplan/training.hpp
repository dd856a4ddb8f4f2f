// bwplan: GPU memory and throughput planning for LLM training
// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <bwplan/error.hpp>
#include <bwplan/precision.hpp>

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>

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
};

/// Selective activation checkpointing policies (applied to every block; exclusive with full checkpointing).
enum class selective_ac {
  none,
  op,    ///< torchtitan per-op SAC: outputs of every other matmul and of attention are saved, the rest recomputed
  attn,  ///< Megatron-LM selective recompute: the core attention is recomputed, everything else saved
};

/// AdamW implementation in `torch.optim.AdamW`.
enum class optimizer_impl {
  fused,    ///< `fused=True`: one kernel, no full-size temporaries
  foreach,  ///< `foreach=True`: multi-tensor ops with full-size intermediate lists
};

/// Loss computation over the vocabulary.
enum class loss_impl {
  standard,  ///< `F.cross_entropy(logits.float(), labels)`: full fp32 logits and log-softmax
  chunked,   ///< fused linear + cross-entropy in token chunks (Liger-Kernel style): no full logits
};

/// One training configuration for one data-parallel replica group.
struct training_config {
  std::int64_t micro_batch = 1;     ///< sequences per GPU per forward/backward (micro-batch size)
  std::int64_t seq_len = 2048;      ///< tokens per sequence
  std::int64_t grad_accum = 1;      ///< micro-batches per optimizer step (gradient accumulation)
  int world_size = 1;               ///< GPUs in the job (data-parallel size)
  int gpus_per_node = 8;            ///< GPUs per node, for intra- vs inter-node communication
  bool ac_enabled = false;          ///< activation checkpointing of blocks
  int ac_every = 1;                 ///< with checkpointing: blocks 0, K, 2K, … are recomputed (1 = every block)
  master_weights master = master_weights::fp32;
  sharding shard = sharding::none;
  selective_ac selective = selective_ac::none;  ///< selective checkpointing (with ac_enabled false)
  compute_format format = compute_format::bf16;  ///< format of the linear-layer GEMMs
  std::optional<bf16_blocks> bf16_layers;        ///< blocks kept bf16 (default: none; NVFP4: last 15 %, as torchtitan)
  bool fp8_all_gather = false;                    ///< FSDP2 all-gathers FP8 weights (fp8 tensorwise only)
  optimizer_impl optimizer = optimizer_impl::fused;
  loss_impl loss = loss_impl::standard;
  int ep = 1;                       ///< expert parallelism: routed experts split over ep GPUs (MoE models; divides world_size)
  double moe_capacity_factor = 1.0; ///< MoE dispatch buffer size relative to top_k · tokens (1 = dropless)
  int shard_group = 0;  ///< hybrid sharding: GPUs per shard group (0 = gpus_per_node / tp, i.e. one node)
  int tp = 1;           ///< tensor-parallel degree (within a node, with sequence parallel)
  int cp = 1;           ///< context-parallel degree (ring attention over the sequence)

  /// Data-parallel replicas × context-parallel ranks: the FSDP mesh, world_size / tp.
  [[nodiscard]] constexpr int fsdp_mesh() const noexcept { return tp > 0 ? world_size / tp : world_size; }
  /// Data-parallel degree: world_size / (tp · cp) (sequences processed side by side).
  [[nodiscard]] constexpr int dp() const noexcept { return tp > 0 && cp > 0 ? world_size / (tp * cp) : world_size; }
  /// GPUs a parameter/gradient/optimizer-state shard is spread over (1 without sharding). torchtitan shards
  /// model states over the combined data-parallel × context-parallel mesh.
  [[nodiscard]] constexpr int shard_size() const noexcept {
    switch (shard) {
      case sharding::none: return 1;
      case sharding::hybrid: return shard_group > 0 ? shard_group : std::max(1, gpus_per_node / std::max(1, tp));
      default: return fsdp_mesh();
    }
  }
  /// Whether parameters are sharded (any FSDP mode).
  [[nodiscard]] constexpr bool sharded() const noexcept { return shard != sharding::none; }

  /// Tokens each GPU processes per micro-batch.
  [[nodiscard]] constexpr std::int64_t tokens_per_micro_batch() const noexcept { return micro_batch * seq_len; }
  /// Whether block `i` (0-based) is recomputed in backward.
  [[nodiscard]] constexpr bool checkpointed(std::int64_t i) const noexcept { return ac_enabled && i % ac_every == 0; }
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
    return ac_enabled ? (layers + ac_every - 1) / ac_every : 0;
  }
};

/// Throws invalid_request when a field is out of range (micro-batch, sequence length, world size,
/// gradient accumulation or checkpoint interval below 1).
inline void validate(const training_config& c) {
  // Messages are built only when a check fails: validate runs twice per candidate in the planner's hot loop.
#define BWPLAN_NEED(ok, msg) \
  do {                       \
    if (!(ok)) throw invalid_request(msg); \
  } while (0)
  BWPLAN_NEED(c.micro_batch >= 1, "--mbs: micro-batch size must be >= 1, got " + std::to_string(c.micro_batch));
  BWPLAN_NEED(c.seq_len >= 1, "--seq: sequence length must be >= 1, got " + std::to_string(c.seq_len));
  BWPLAN_NEED(c.grad_accum >= 1, "gradient accumulation must be >= 1, got " + std::to_string(c.grad_accum));
  BWPLAN_NEED(c.world_size >= 1, "--gpus: world size must be >= 1, got " + std::to_string(c.world_size));
  BWPLAN_NEED(c.gpus_per_node >= 1, "GPUs per node must be >= 1, got " + std::to_string(c.gpus_per_node));
  BWPLAN_NEED(c.ac_every >= 1, "--ac-every: must be >= 1, got " + std::to_string(c.ac_every));
  BWPLAN_NEED(!(c.ac_enabled && c.selective != selective_ac::none), "--ac: full and selective checkpointing are exclusive");
  BWPLAN_NEED(!c.fp8_all_gather || (c.format == compute_format::fp8 && c.shard == sharding::full),
              "--fp8-all-gather needs --precision fp8 and --sharding full");
  BWPLAN_NEED(c.tp >= 1 && c.cp >= 1 && c.ep >= 1, "--tp/--cp/--ep: parallel degrees must be >= 1");
  BWPLAN_NEED(c.world_size % c.ep == 0,
              "--ep: expert parallelism must divide the world size " + std::to_string(c.world_size) + ", got " + std::to_string(c.ep));
  BWPLAN_NEED(c.moe_capacity_factor >= 1, "MoE capacity factor must be >= 1");
  BWPLAN_NEED(c.tp < 1 || (c.world_size / c.tp) % c.ep == 0,
              "--ep " + std::to_string(c.ep) + " must divide the GPUs left after tensor parallelism (" +
                  std::to_string(c.world_size) + " / tp " + std::to_string(c.tp) + "): experts are split over ep x tp GPUs");
  BWPLAN_NEED(c.tp <= c.gpus_per_node || c.world_size < c.gpus_per_node,
              "--tp " + std::to_string(c.tp) + ": tensor parallelism stays within a node of " + std::to_string(c.gpus_per_node) + " GPUs");
  BWPLAN_NEED(c.world_size % (c.tp * c.cp) == 0, "--tp x --cp = " + std::to_string(c.tp * c.cp) +
                                                     " does not divide the world size " + std::to_string(c.world_size));
  BWPLAN_NEED(c.seq_len % c.cp == 0, "--cp " + std::to_string(c.cp) + " does not divide the sequence length " + std::to_string(c.seq_len));
  BWPLAN_NEED(c.shard_group >= 0, "--shard-group: must be >= 1");
  if (c.shard == sharding::hybrid) {
    BWPLAN_NEED(c.fsdp_mesh() % c.shard_size() == 0, "--shard-group " + std::to_string(c.shard_size()) +
                                                         " does not divide the FSDP mesh of " + std::to_string(c.fsdp_mesh()) +
                                                         " GPUs (world size / tp)");
  }
  BWPLAN_NEED(c.shard_group == 0 || c.shard == sharding::hybrid, "--shard-group needs --sharding hybrid");
#undef BWPLAN_NEED
}

/// Name of an enum value as used on the command line and in JSON.
[[nodiscard]] constexpr const char* to_string(master_weights m) noexcept { return m == master_weights::fp32 ? "fp32" : "bf16"; }
[[nodiscard]] constexpr const char* to_string(sharding s) noexcept {
  return s == sharding::none ? "none" : s == sharding::full ? "full" : s == sharding::hybrid ? "hybrid" : "grad-op";
}
[[nodiscard]] constexpr const char* to_string(selective_ac s) noexcept {
  return s == selective_ac::none ? "none" : s == selective_ac::op ? "selective-op" : "selective-attn";
}
/// Activation checkpointing as one name: "none", "full", "every-K", "selective-op", "selective-attn".
[[nodiscard]] inline std::string ac_name(const training_config& c) {
  if (c.ac_enabled) return c.ac_every == 1 ? "full" : "every-" + std::to_string(c.ac_every);
  return to_string(c.selective);
}
[[nodiscard]] constexpr const char* to_string(optimizer_impl o) noexcept { return o == optimizer_impl::fused ? "fused" : "foreach"; }
[[nodiscard]] constexpr const char* to_string(loss_impl l) noexcept { return l == loss_impl::standard ? "standard" : "chunked"; }

}  // namespace bwplan
