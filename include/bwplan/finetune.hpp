// bwplan: GPU memory and throughput planning for LLM training
// SPDX-License-Identifier: Apache-2.0
#pragma once

// Fine-tuning arithmetic shared by the memory and throughput terms: LoRA adapter shapes, the NF4 storage of a
// QLoRA base, and the optimizer state bytes per trained parameter. Standard library only.
// @sa docs/finetune.md

#include <bwplan/model.hpp>
#include <bwplan/moe.hpp>
#include <bwplan/training.hpp>

#include <algorithm>
#include <cstdint>

namespace bwplan {

/// Bytes per parameter of a bitsandbytes NF4 weight with block size 64 and double quantization
/// (`compress_statistics=True`, the QLoRA default): 4-bit codes `0.5` + one uint8 absmax code per 64-element
/// block `1/64` + one fp32 second-level scale per 256 absmax values `4/(64·256)` ≈ 0.5159 B (4.127 bits).
/// Sources: bitsandbytes `bitsandbytes/functional.py` `quantize_4bit` (blocksize 64, `quantize_blockwise(absmax -
/// offset, blocksize=256)` for double quantization), `bitsandbytes/_ops.py` (packed `(n+1)//2` bytes, fp32
/// absmax); Dettmers et al. 2023 (arXiv:2305.14314) §2 "Double Quantization" (0.127 bits per parameter of
/// constants). The per-tensor offset and the 256-entry code map are O(1) and left out.
inline constexpr double nf4_bytes_per_param = 0.5 + 1.0 / 64 + 4.0 / (64.0 * 256.0);

/// The NF4 bytes per parameter split by where they live: the 4-bit codes `0.5` (two per byte, packed into the
/// weight parameter's storage) and the quantization constants `1/64 + 4/(64·256)` (the uint8 absmax codes and
/// their fp32 second-level scales). Sources as nf4_bytes_per_param.
inline constexpr double nf4_code_bytes_per_param = 0.5;
inline constexpr double nf4_constant_bytes_per_param = nf4_bytes_per_param - nf4_code_bytes_per_param;

/// Whether FSDP shards, gathers and offloads a QLoRA base's NF4 constants together with its codes.
///
/// torchtune (`--stack torchtune`): yes. Its base is torchao's `NF4Tensor`, a tensor subclass whose FSDP2
/// extension shards the codes and both levels of scalers (torchao/dtypes/nf4tensor.py
/// `_INNER_TENSOR_NAMES_FOR_SHARDING = ["quantized_scalers", "quantization_factor", "quantized_data"]`).
///
/// bitsandbytes (the hf stack: transformers + PEFT): no. `Params4bit` keeps the codes in the parameter (in the
/// `bnb_4bit_quant_storage` dtype, which is what lets FSDP flatten and shard it) and the constants in a
/// `QuantState` object that `_quantize` also stores on the module (`self.module.quant_state = quant_state`,
/// bitsandbytes/nn/modules.py L381-395 @95f9af30); after FSDP replaces the parameter by a view of its flat or
/// DTensor shard, `fix_4bit_weight_quant_state_from_module` (L487-501: "the quant state got lost when the parameter
/// got converted. This happens for example for fsdp") reattaches the module's state. FSDP1 flattens and FSDP2
/// shards only registered parameters, so every rank holds the whole QuantState on its GPU: the constants are
/// neither divided by the shard count, nor all-gathered with the block, nor moved by CPU offload of the parameters.
[[nodiscard]] constexpr bool nf4_constants_sharded(training_stack s) noexcept { return s == training_stack::torchtune; }

/// Bytes of state per parameter of a bitsandbytes 8-bit optimizer state pair (AdamW8bit, PagedAdamW8bit):
/// two uint8 states `2` + one fp32 absmax per 256-element block for each `2·4/256` = 2.03125 B. Sources:
/// bitsandbytes `bitsandbytes/optim/optimizer.py` (`Optimizer2State.init_state`, block size 256) and
/// `bitsandbytes/optim/adamw.py`; Dettmers et al. 2022 (arXiv:2110.02861) block-wise quantization. Tensors under
/// `min_8bit_size` = 4096 elements keep 32-bit states (norm weights of small models; left out).
inline constexpr double bnb_8bit_pair_bytes = 2.0 + 2.0 * 4.0 / 256.0;

/// The LoRA adapters of one decoder block: their parameters and the widths the memory and time terms read.
struct adapter_shape {
  double params = 0;   ///< adapter parameters one block stores: Σ r·(d_in + d_out) over its adapted linears (MoE: every
                       ///< routed expert's, divided by expert parallelism), averaged over blocks
  double params_per_token = 0;  ///< adapter parameters a token runs through in one block (MoE: its top-k experts and
                                ///< the shared expert), averaged over blocks: the adapters' FLOPs are 2·this per token
  double modules = 0;  ///< adapted linears in one block (kinds: an MoE block's gate of every expert counts once)
  double modules_per_token = 0;  ///< adapted linears a token runs through in one block (MoE: k experts + the shared one
                                 ///< per MLP kind), averaged over blocks
  double in_sum = 0;   ///< Σ d_in over the adapted linears (elements per token entering the adapters)
  double out_sum = 0;  ///< Σ d_out over the adapted linears (elements per token the adapters add to)
  double factored = 0; ///< Adafactor factored-state elements of one block's adapters: Σ (r + d_in) + (d_out + r)
  bool qkv_input = false;  ///< q, k or v adapted (they share the attention norm's output)
  bool gate_up_input = false;  ///< gate or up adapted (they share the MLP norm's output)
  bool o = false, down = false;
  double o_in = 0, down_in = 0;  ///< d_in of o_proj (a·d) and of down_proj (MLP width per token)
  double widest_out = 0;  ///< max d_out over the adapted linears (elements per token)
  double widest_in = 0;   ///< max d_in over the adapted linears (elements per token)
};

/// The adapters `lora` puts on one block of `m`: per adapted linear `A` (r × d_in) and `B` (d_out × r), so
/// `r·(d_in + d_out)` parameters (PEFT `src/peft/tuners/lora/layer.py` `update_layer`: `nn.Linear(in_features, r)`
/// and `nn.Linear(r, out_features)`, bias off). q_proj h→a·d, k_proj and v_proj h→g·d, o_proj a·d→h, gate_proj and
/// up_proj h→F, down_proj F→h. Checked against PEFT's recorded Llama-3.2-3B r=32 q,v count (9,175,040,
/// tests/finetune_test.cpp).
///
/// MoE blocks: PEFT adapts every expert's gate/up/down_proj, each an `nn.Linear` of its own (transformers'
/// `Qwen3MoeSparseMoeBlock`, `MixtralSparseMoeBlock`, DeepSeek's `MoE`: an `nn.ModuleList` of gated MLPs of width
/// F_e), and the shared expert's (one MLP of width F_s): a block stores `E/ep` routed experts' adapters, `r·(h + F_e)`
/// per linear and expert, plus the shared expert's `r·(h + F_s)` (expert parallelism places `E/ep` experts, and their
/// adapters, on a rank). A token runs through its top-k experts' and the shared expert's: `r·(k·(h + F_e) + h + F_s)`
/// per linear kind (`params_per_token`, the FLOPs), the widths `in_sum` / `out_sum` likewise per token (k + 1 copies of
/// h in, k·F_e + F_s out for gate and up). The router (an `nn.Linear(h, E)` named `gate` in Qwen3-MoE and Mixtral) is
/// not one of the seven targets. Dense blocks of a MoE model (DeepSeek's first `first_k_dense_replace`) adapt their
/// dense MLP; the counts are averaged over blocks as `mlp_width_per_token` averages the widths.
[[nodiscard]] constexpr adapter_shape adapter_shape_of(const model_spec& m, const lora_settings& lora, int ep = 1) noexcept {
  const double h = static_cast<double>(m.hidden), q = static_cast<double>(m.q_dim()), kv = static_cast<double>(m.kv_dim());
  const double f = detail::mlp_width_per_token(m), r = lora.rank;
  adapter_shape a;
  // one adapted linear: `stored` parameters per block, `tok` per token, d_in / d_out per token summed over the copies
  // a token runs through, and the widths adapter_grad_temp_delta charges (MoE: h and the routed width per token, as
  // for a dense block of that width: the k copies of h are not one wider input)
  auto add_linear = [&](unsigned bit, double stored, double tok, double din, double dout, double fac, double wide_in,
                        double wide_out, double copies_tok = 1) {
    if ((lora.targets & bit) == 0) return;
    a.params += stored;
    a.params_per_token += tok;
    a.modules += 1;
    a.modules_per_token += copies_tok;
    a.in_sum += din;
    a.out_sum += dout;
    a.factored += fac;
    a.widest_out = std::max(a.widest_out, wide_out);
    a.widest_in = std::max(a.widest_in, wide_in);
  };
  auto add = [&](unsigned bit, double din, double dout) {
    add_linear(bit, r * (din + dout), r * (din + dout), din, dout, (r + din) + (dout + r), din, dout);
  };
  add(lora_target::q, h, q);
  add(lora_target::k, h, kv);
  add(lora_target::v, h, kv);
  add(lora_target::o, q, h);
  if (!m.is_moe()) {
    if (m.gated_mlp) add(lora_target::gate, h, f);
    add(lora_target::up, h, f);
    add(lora_target::down, f, h);
  } else {
    // averaged over blocks: Lm MoE blocks, L - Lm dense ones
    const double L = static_cast<double>(m.layers), wm = static_cast<double>(m.moe_layers) / L, wd = 1 - wm;
    const double Fd = static_cast<double>(m.intermediate), Fe = static_cast<double>(m.moe_intermediate);
    const double Fs = static_cast<double>(m.shared_intermediate), shared = Fs > 0 ? 1.0 : 0.0;
    const double E = static_cast<double>(m.experts) / static_cast<double>(ep < 1 ? 1 : ep), k = static_cast<double>(m.top_k);
    // one linear kind (h -> width, or width -> h: the same r·(h + width) per module)
    const double stored = wd * r * (h + Fd) + wm * r * (E * (h + Fe) + shared * (h + Fs));
    const double tok = wd * r * (h + Fd) + wm * r * (k * (h + Fe) + shared * (h + Fs));
    const double copies = wd + wm * (k + shared);  // copies of h a token feeds to (or takes from) one linear kind
    const double fac = wd * (2 * r + h + Fd) + wm * (E * (2 * r + h + Fe) + shared * (2 * r + h + Fs));
    if (m.gated_mlp) add_linear(lora_target::gate, stored, tok, copies * h, f, fac, h, f, copies);
    add_linear(lora_target::up, stored, tok, copies * h, f, fac, h, f, copies);
    add_linear(lora_target::down, stored, tok, f, copies * h, fac, f, h, copies);
  }
  a.qkv_input = (lora.targets & (lora_target::q | lora_target::k | lora_target::v)) != 0;
  a.gate_up_input = (lora.targets & ((m.gated_mlp ? lora_target::gate : 0u) | lora_target::up)) != 0;
  a.o = (lora.targets & lora_target::o) != 0;
  a.down = (lora.targets & lora_target::down) != 0;
  a.o_in = q;
  a.down_in = f;
  return a;
}

/// Elements of one block's largest linear weight (the dequantized transient of a QLoRA layer): max(h·a·d, h·F).
[[nodiscard]] constexpr double largest_block_linear(const model_spec& m) noexcept {
  const double h = static_cast<double>(m.hidden);
  return std::max({h * static_cast<double>(m.q_dim()), h * static_cast<double>(m.kv_dim()), h * detail::mlp_width_per_token(m)});
}

/// Adafactor factored-state elements of the whole model trained in full: each matrix keeps a row and a column
/// vector (rows + cols), each vector its full size. Per block: q (h + a·d), k and v (h + g·d), o (a·d + h), the
/// MLP matrices (h + F each; MoE: every expert and the router), the norms; plus embedding and untied head
/// (V + h each) and the final norm. Source: PyTorch `torch/optim/_adafactor.py` `_init_group` (`row_var`,
/// `col_var` for ≥ 2-D parameters, `variance` for 1-D); Shazeer & Stern 2018 (arXiv:1804.04235).
[[nodiscard]] constexpr double adafactor_full_elements(const model_spec& m) noexcept {
  const double h = static_cast<double>(m.hidden), q = static_cast<double>(m.q_dim()), kv = static_cast<double>(m.kv_dim());
  const double V = static_cast<double>(m.vocab), L = static_cast<double>(m.layers);
  const parameter_count pc = count_parameters(m);
  double block = (h + q) + 2 * (h + kv) + (q + h);
  const double dense = (m.gated_mlp ? 3 : 2) * (h + static_cast<double>(m.intermediate));
  double mlp_total = L * dense;
  if (m.is_moe()) {
    const double moe = static_cast<double>(m.experts) * 3 * (h + static_cast<double>(m.moe_intermediate)) +
                       (m.shared_intermediate > 0 ? 3 * (h + static_cast<double>(m.shared_intermediate)) : 0) +
                       (h + static_cast<double>(m.experts));
    mlp_total = static_cast<double>(m.layers - m.moe_layers) * dense + static_cast<double>(m.moe_layers) * moe;
  }
  block += static_cast<double>(pc.block_other);
  return L * block + mlp_total + (V + h) * (m.tied_embeddings ? 1 : 2) + static_cast<double>(pc.final_norm);
}

/// Bytes of optimizer state per trained parameter for optimizer `o` with parameters stored in `w` bytes (4 fp32
/// master, 2 bf16): AdamW `2·w` (exp_avg, exp_avg_sq: `torch.optim.AdamW`); AdamW8bit and PagedAdamW8bit
/// bnb_8bit_pair_bytes whatever `w`; SGD with momentum `w` (one `momentum_buffer`, `torch.optim.SGD`); Lion 4
/// whatever `w` (one `exp_avg`: Chen et al. 2023, arXiv:2302.06675; bitsandbytes `optim/lion.py` `Lion` defaults
/// `optim_bits=32`, and `Optimizer1State.init_state` makes a 32-bit `state1` in fp32 whatever the parameter's dtype,
/// bitsandbytes `optim/optimizer.py`: bf16 masters do not halve it, as a review found). Adafactor is factored and has
/// no per-parameter rate: see optimizer_state_bytes.
[[nodiscard]] constexpr double optimizer_state_bytes_per_param(optimizer_kind o, double w) noexcept {
  switch (o) {
    case optimizer_kind::adamw: return 2 * w;
    case optimizer_kind::adamw_8bit:
    case optimizer_kind::paged_adamw_8bit: return bnb_8bit_pair_bytes;
    case optimizer_kind::sgd: return w;
    case optimizer_kind::lion: return 4;
    case optimizer_kind::adafactor: return 0;
  }
  return 2 * w;
}

/// Optimizer state bytes of `trained` parameters whose Adafactor factored state holds `factored` elements:
/// Adafactor `w·factored` (row and column second-moment vectors in the parameter dtype, no first moment:
/// `torch.optim.Adafactor` defaults `beta1` absent), the others optimizer_state_bytes_per_param × trained.
[[nodiscard]] constexpr double optimizer_state_bytes(optimizer_kind o, double w, double trained, double factored) noexcept {
  return o == optimizer_kind::adafactor ? w * factored : optimizer_state_bytes_per_param(o, w) * trained;
}

}  // namespace bwplan
