// bwplan: GPU memory and throughput planning for LLM training
// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cstdint>
#include <string>

namespace bwplan {

/// Architecture of a dense decoder-only transformer (Llama, Mistral, Qwen2/3, Gemma, Phi-3),
/// read from a Hugging Face `config.json` by `io::load_model`.
///
/// Each block: pre-norm (RMSNorm), Q/K/V/O projections with grouped-query attention
/// (`kv_heads` ≤ `heads`, `head_dim` per head, optional Q/K/V bias and per-head Q/K norms),
/// pre-norm, gated MLP (SwiGLU/GeGLU: gate, up, down). Final norm and LM head (tied to the
/// token embedding or not).
struct model_spec {
  std::string name;              ///< display name (file stem or preset id)
  std::string family;            ///< Hugging Face `model_type`
  std::int64_t hidden = 0;       ///< `hidden_size`, h
  std::int64_t layers = 0;       ///< `num_hidden_layers`, L
  std::int64_t heads = 0;        ///< `num_attention_heads`, a
  std::int64_t kv_heads = 0;     ///< `num_key_value_heads`, g (GQA groups)
  std::int64_t head_dim = 0;     ///< per-head dimension, `head_dim` or h / a
  std::int64_t intermediate = 0; ///< `intermediate_size`, F (gated MLP width)
  std::int64_t vocab = 0;        ///< `vocab_size`, V
  std::int64_t max_context = 0;  ///< `max_position_embeddings`, tokens
  bool tied_embeddings = false;  ///< LM head shares the embedding matrix
  bool qkv_bias = false;         ///< Q/K/V projections carry a bias (Qwen2)
  bool qk_norm = false;          ///< per-head RMSNorm on Q and K (Qwen3)
  bool gated_mlp = true;         ///< three MLP matrices (SwiGLU/GeGLU)

  /// Width of the query projection output, a · head_dim.
  [[nodiscard]] constexpr std::int64_t q_dim() const noexcept { return heads * head_dim; }
  /// Width of each of the K and V projection outputs, g · head_dim.
  [[nodiscard]] constexpr std::int64_t kv_dim() const noexcept { return kv_heads * head_dim; }
};

/// Parameter counts of a model_spec, as `sum(p.numel() for p in model.parameters())` in PyTorch
/// (tied weights counted once).
struct parameter_count {
  std::int64_t block_linear = 0;  ///< weights and biases of the block's linear layers (one block)
  std::int64_t block_other = 0;   ///< norms of one block (2h, + 2·head_dim with Q/K norms)
  std::int64_t embedding = 0;     ///< token embedding, V·h
  std::int64_t lm_head = 0;       ///< LM head, V·h, or 0 when tied
  std::int64_t final_norm = 0;    ///< final norm, h
  std::int64_t layers = 0;        ///< number of blocks

  /// Parameters of one block.
  [[nodiscard]] constexpr std::int64_t block() const noexcept { return block_linear + block_other; }
  /// All parameters.
  [[nodiscard]] constexpr std::int64_t total() const noexcept {
    return layers * block() + embedding + lm_head + final_norm;
  }
  /// Parameters without the embedding and LM head matrices.
  [[nodiscard]] constexpr std::int64_t non_embedding() const noexcept { return total() - embedding - lm_head; }
  /// Elements of every weight that runs as a GEMM (block linears and the LM head matrix,
  /// which is the embedding when tied).
  [[nodiscard]] constexpr std::int64_t gemm_weights() const noexcept {
    return layers * block_linear + embedding;  // the head matrix has V·h elements either way
  }
};

/// Counts the parameters of `m`.
///
/// Per block: Q and O `2·h·a·d`, K and V `2·h·g·d`, bias `a·d + 2·g·d` if present, gated MLP `3·h·F`
/// (`2·h·F` otherwise), two RMSNorm weights `2·h`, Q/K norms `2·d`. Plus embedding `V·h`, untied head `V·h`,
/// final norm `h`. Source: the Hugging Face modeling files of each family; Megatron-LM
/// `theoretical_memory_usage.py` for the same per-layer formula.
[[nodiscard]] constexpr parameter_count count_parameters(const model_spec& m) noexcept {
  parameter_count c;
  const std::int64_t h = m.hidden;
  c.block_linear = 2 * h * m.q_dim() + 2 * h * m.kv_dim() + (m.gated_mlp ? 3 : 2) * h * m.intermediate;
  if (m.qkv_bias) c.block_linear += m.q_dim() + 2 * m.kv_dim();
  c.block_other = 2 * h + (m.qk_norm ? 2 * m.head_dim : 0);
  c.embedding = m.vocab * h;
  c.lm_head = m.tied_embeddings ? 0 : m.vocab * h;
  c.final_norm = h;
  c.layers = m.layers;
  return c;
}

}  // namespace bwplan
