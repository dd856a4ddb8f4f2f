// bwplan: GPU memory and throughput planning for LLM training
// SPDX-License-Identifier: Apache-2.0
#pragma once

// Mixture-of-Experts and MLA terms of the memory and throughput models (issue 7), kept apart from the
// dense inventory so that dense models take none of these branches. @sa docs/models.md

#include <bwplan/error.hpp>
#include <bwplan/model.hpp>
#include <bwplan/training.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace bwplan::detail {

// ---- MoE / MLA helpers (issue 7). Dense models take none of these branches: their numbers are unchanged.

/// The expert-parallel rules of a plan: ep > 1 needs a MoE model whose routed experts ep divides. Empty when
/// ep is 1 or fits.
[[nodiscard]] inline std::vector<plan_violation> moe_violations(const model_spec& m, const training_config& c) {
  if (c.ep == 1) return {};
  if (!m.is_moe()) return {{"ep", "/ep", "expert parallelism needs a MoE model, " + m.name + " has no experts"}};
  if (c.ep < 1 || m.experts % c.ep != 0)
    return {{"ep", "/ep", "expert parallelism " + std::to_string(c.ep) + " does not divide the " + std::to_string(m.experts) +
                              " experts of " + m.name}};
  return {};
}

/// Throws plan_error with the first of moe_violations(m, c).
inline void validate_moe(const model_spec& m, const training_config& c) {
  auto v = moe_violations(m, c);
  if (!v.empty()) throw plan_error(std::move(v.front()));
}

/// Parameters one GPU holds before data-parallel sharding: the routed experts divided by `ep`.
[[nodiscard]] constexpr parameter_count ep_local(parameter_count pc, const model_spec& m, int ep) noexcept {
  if (ep <= 1 || !m.is_moe()) return pc;
  const std::int64_t per_block = pc.routed_experts / m.moe_layers;  // all experts of one MoE block
  const std::int64_t drop = per_block - per_block / ep;
  pc.block_linear -= drop;
  pc.layer_adjust += (pc.layers - m.moe_layers) * drop;  // dense blocks keep their dense MLP
  pc.routed_experts /= ep;
  pc.inactive = 0;
  return pc;
}

/// MLP width a token runs through, averaged over blocks: F for dense models; for MoE blocks
/// top_k · capacity_factor · F_expert + F_shared (each routed copy is a gated MLP of its own).
[[nodiscard]] constexpr double mlp_width_per_token(const model_spec& m, double capacity = 1.0) noexcept {
  if (!m.is_moe()) return static_cast<double>(m.intermediate);
  const double moe = static_cast<double>(m.top_k) * capacity * static_cast<double>(m.moe_intermediate) +
                     static_cast<double>(m.shared_intermediate);
  const double L = static_cast<double>(m.layers), Lm = static_cast<double>(m.moe_layers);
  return (Lm * moe + (L - Lm) * static_cast<double>(m.intermediate)) / L;
}

/// Bytes per token one block saves beyond the dense inventory, averaged over blocks. MoE blocks: router
/// logits and scores (fp32, 2·4·E), the top-k weights and indices (k·(4 + 8)), the permuted (dispatched)
/// tokens k·cf·h bf16 and the expert outputs before the weighted combine k·cf·h bf16. MLA: the compressed
/// latents before and after their norms, 2·2·(r_q + r_kv + d_rope). The decompressed per-head K and V are
/// counted by the dense inventory at a·(d_nope + d_rope): HF `modeling_deepseek` and torchtitan save them
/// so (FlashAttention inputs), not the compressed c_kv.
[[nodiscard]] constexpr double moe_mla_saved_per_token(const model_spec& m, double capacity = 1.0) noexcept {
  double per_block = 0;
  if (m.is_moe()) {
    const double E = static_cast<double>(m.experts), k = static_cast<double>(m.top_k), h = static_cast<double>(m.hidden);
    per_block += (2 * 4 * E + k * 12 + 2 * 2 * k * capacity * h) * static_cast<double>(m.moe_layers) / static_cast<double>(m.layers);
  }
  if (m.is_mla()) per_block += 2 * 2 * static_cast<double>(m.q_lora_rank + m.kv_lora_rank + m.qk_rope_dim);
  return per_block;
}


/// Expert-parallel degrees search_plans tries: {1} for dense models; for MoE models 1, 2, 4, … dividing both
/// the routed experts and the world size.
[[nodiscard]] inline std::vector<int> ep_candidates(const model_spec& m, int world) {
  std::vector<int> r{1};
  if (!m.is_moe()) return r;
  for (int ep = 2; ep <= world && ep <= m.experts; ep *= 2)
    if (world % ep == 0 && m.experts % ep == 0) r.push_back(ep);
  return r;
}

}  // namespace bwplan::detail
