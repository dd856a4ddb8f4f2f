// bwplan: GPU memory and throughput planning for LLM training
// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cstdint>
#include <string>

namespace bwplan {

/// Most transformer blocks a model config may declare (io::model_from_json), far above any published model;
/// counts of blocks given elsewhere (--bf16-layers) share the bound.
inline constexpr std::int64_t max_model_layers = 100'000;

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
  // --- families beyond the Llama layout (all defaults keep the dense Llama count unchanged)
  bool layer_norm = false;         ///< LayerNorm with weight and bias (2 per norm) instead of RMSNorm (1 per norm)
  int norms_per_block = 2;         ///< norms in one block (gemma2/3: 4; falcon parallel attention: 1)
  bool o_bias = false;             ///< the attention output projection has a bias (gpt2; falcon `bias`)
  bool mlp_bias = false;           ///< the MLP linears have biases (gpt2; falcon `bias`)
  std::int64_t positions = 0;      ///< learned position embeddings (gpt2 `n_positions`), 0 for RoPE/ALiBi
  bool alibi = false;              ///< ALiBi attention biases instead of RoPE (falcon `alibi`: falcon-rw)
  /// Residual branches of one block whose output goes through dropout with p > 0 in training, each saving a bool
  /// mask of h elements per token (gpt2 `resid_pdrop`: 2; starcoder2 `residual_dropout`: 2; falcon `attention_dropout`
  /// and `hidden_dropout` on the attention and MLP branches, one `hidden_dropout` with parallel attention). 0 for
  /// Llama-layout families, whose only dropout is on the attention probabilities inside SDPA.
  int residual_dropouts = 0;
  bool embedding_dropout = false;  ///< dropout with p > 0 on the embedding output (gpt2 `embd_pdrop`, starcoder2 `embedding_dropout`)
  // MLA (DeepSeek-V2/V3): q = W_qb·norm(W_qa·x), [c_kv, k_rope] = W_kva·x, [k_nope, v] = W_kvb·norm(c_kv)
  std::int64_t q_lora_rank = 0;    ///< `q_lora_rank` (0: plain q_proj)
  std::int64_t kv_lora_rank = 0;   ///< `kv_lora_rank` (> 0 means MLA)
  std::int64_t qk_rope_dim = 0;    ///< `qk_rope_head_dim` (decoupled RoPE part of q/k, shared k_rope)
  std::int64_t v_head_dim = 0;     ///< `v_head_dim`; head_dim is then qk_nope_head_dim + qk_rope_head_dim
  // MoE
  std::int64_t experts = 0;          ///< routed experts E (0: dense)
  std::int64_t top_k = 0;            ///< experts per token k
  std::int64_t moe_intermediate = 0; ///< width of one routed expert's gated MLP
  std::int64_t shared_intermediate = 0;  ///< total width of the shared expert(s) (DeepSeek: n_shared · moe width)
  bool shared_expert_gate = false;   ///< qwen2_moe: sigmoid gate Linear(h, 1) on the shared expert
  bool router_bias = false;          ///< DeepSeek-V3 `e_score_correction_bias` (E per MoE layer)
  std::int64_t moe_layers = 0;       ///< blocks whose MLP is the MoE (the others use `intermediate`)
  std::int64_t mtp_layers = 0;       ///< `num_nextn_predict_layers` (DeepSeek-V3 multi-token prediction), not in total

  /// Whether the model routes tokens to experts.
  [[nodiscard]] constexpr bool is_moe() const noexcept { return experts > 0 && moe_layers > 0; }
  /// Whether attention is multi-head latent attention.
  [[nodiscard]] constexpr bool is_mla() const noexcept { return kv_lora_rank > 0; }

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
  std::int64_t positions = 0;     ///< learned position embeddings, n_positions·h (gpt2)
  /// Sum over blocks of (block − block_linear − block_other): the dense leading blocks of a MoE model hold a
  /// dense MLP instead of the MoE (negative or zero; 0 for dense models).
  std::int64_t layer_adjust = 0;
  std::int64_t routed_experts = 0;  ///< parameters of all routed experts of all MoE blocks (sharded by ep)
  std::int64_t inactive = 0;        ///< routed-expert parameters a token does not use, L_moe·(E − k)·expert
  std::int64_t mtp = 0;             ///< multi-token-prediction modules (excluded from total; shared embedding/head not repeated)

  /// Parameters of one block.
  [[nodiscard]] constexpr std::int64_t block() const noexcept { return block_linear + block_other; }
  /// All parameters.
  [[nodiscard]] constexpr std::int64_t total() const noexcept {
    return layers * block() + layer_adjust + embedding + positions + lm_head + final_norm;
  }
  /// Parameters one token runs through: total minus the routed experts it is not sent to.
  [[nodiscard]] constexpr std::int64_t active() const noexcept { return total() - inactive; }
  /// Parameters without the embedding and LM head matrices.
  [[nodiscard]] constexpr std::int64_t non_embedding() const noexcept { return total() - embedding - positions - lm_head; }
  /// Elements of every weight that runs as a GEMM (block linears and the LM head matrix,
  /// which is the embedding when tied).
  [[nodiscard]] constexpr std::int64_t gemm_weights() const noexcept {
    return layers * block_linear + layer_adjust + embedding;  // the head matrix has V·h elements either way
  }
  /// GEMM weights one token runs through (gemm_weights minus the experts it is not routed to).
  [[nodiscard]] constexpr std::int64_t active_gemm_weights() const noexcept { return gemm_weights() - inactive; }
};

/// Counts the parameters of `m`.
///
/// Per block: Q and O `2·h·a·d`, K and V `2·h·g·d`, bias `a·d + 2·g·d` if present, gated MLP `3·h·F`
/// (`2·h·F` otherwise), two RMSNorm weights `2·h`, Q/K norms `2·d`. Plus embedding `V·h`, untied head `V·h`,
/// final norm `h`. LayerNorm doubles each norm (weight + bias); gpt2 adds O and MLP biases and learned
/// positions `n_positions·h`. MLA and MoE blocks as in the comments below; MoE adds the router `h·E`.
/// Source: the Hugging Face modeling files of each family; Megatron-LM `theoretical_memory_usage.py` for
/// the same per-layer formula. @sa docs/models.md
[[nodiscard]] constexpr parameter_count count_parameters(const model_spec& m) noexcept {
  parameter_count c;
  const std::int64_t h = m.hidden;
  std::int64_t attn = 0, attn_norms = 0;
  if (m.is_mla()) {
    // q_a_proj h·r_q + q_a_layernorm r_q + q_b_proj r_q·a·d_qk (or q_proj h·a·d_qk); kv_a_proj_with_mqa
    // h·(r_kv + d_rope) + kv_a_layernorm r_kv; kv_b_proj r_kv·a·(d_nope + d_v); o_proj a·d_v·h
    const std::int64_t a = m.heads, dqk = m.head_dim, dnope = m.head_dim - m.qk_rope_dim;
    attn = m.q_lora_rank > 0 ? h * m.q_lora_rank + m.q_lora_rank * a * dqk : h * a * dqk;
    attn += h * (m.kv_lora_rank + m.qk_rope_dim) + m.kv_lora_rank * a * (dnope + m.v_head_dim) + a * m.v_head_dim * h;
    attn_norms = m.q_lora_rank + m.kv_lora_rank;
  } else {
    attn = 2 * h * m.q_dim() + 2 * h * m.kv_dim();
    if (m.qkv_bias) attn += m.q_dim() + 2 * m.kv_dim();
    if (m.o_bias) attn += h;
  }
  const std::int64_t dense_mlp = (m.gated_mlp ? 3 : 2) * h * m.intermediate + (m.mlp_bias ? m.intermediate + h : 0);
  std::int64_t mlp = dense_mlp;
  if (m.is_moe()) {
    const std::int64_t expert = 3 * h * m.moe_intermediate;
    const std::int64_t moe = m.experts * expert + 3 * h * m.shared_intermediate + h * m.experts +
                             (m.shared_expert_gate ? h : 0) + (m.router_bias ? m.experts : 0);
    mlp = moe;
    c.layer_adjust = (m.layers - m.moe_layers) * (dense_mlp - moe);
    c.routed_experts = m.moe_layers * m.experts * expert;
    c.inactive = m.moe_layers * (m.experts - m.top_k) * expert;
  }
  c.block_linear = attn + mlp;
  c.block_other = m.norms_per_block * (m.layer_norm ? 2 : 1) * h + (m.qk_norm ? 2 * m.head_dim : 0) + attn_norms;
  c.embedding = m.vocab * h;
  c.positions = m.positions * h;
  c.lm_head = m.tied_embeddings ? 0 : m.vocab * h;
  c.final_norm = (m.layer_norm ? 2 : 1) * h;
  c.layers = m.layers;
  if (m.mtp_layers > 0) {
    // DeepSeek-V3 MTP module: enorm + hnorm (2h), eh_proj (2h·h), one MoE block, shared_head.norm (h);
    // its embedding and head are the main model's (shared), so not counted again
    c.mtp = m.mtp_layers * (2 * h + 2 * h * h + c.block() + h);
  }
  return c;
}

}  // namespace bwplan
