// bwplan: GPU memory and throughput planning for LLM training
// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <bwplan/error.hpp>
#include <bwplan/hardware.hpp>
#include <bwplan/model.hpp>

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace bwplan {

/// Format of the linear-layer GEMMs (the rest of the model, attention, norms and the loss, stays bf16/fp32).
enum class compute_format {
  bf16,         ///< bf16 GEMMs
  fp8,          ///< FP8 E4M3/E5M2, one fp32 scale per tensor (delayed or current scaling), "tensorwise"
  fp8_rowwise,  ///< FP8 with one fp32 scale per row (torchao "rowwise")
  mxfp8,        ///< OCP MXFP8: E4M3 elements, one E8M0 scale per 32 consecutive elements
  nvfp4,        ///< NVFP4: E2M1 elements, one E4M3 scale per 16 elements + one fp32 scale per tensor
};

/// The lowest `--numerics` tier whose search includes a format (NVIDIA/AWS Blackwell guidance,
/// docs/precision.md#recommendation): conservative = bf16 and MXFP8, balanced adds FP8, aggressive adds NVFP4.
/// FP8 rowwise is tried only when asked for by name.
enum class numerics_tier { conservative, balanced, aggressive, by_name_only };

/// The one precision table: every format a plan may name, its spelling, the catalog rate it runs at, which
/// GPUs have it and which recommend tier tries it.
struct precision_info {
  compute_format format;
  std::string_view name;         ///< plan and CLI spelling, e.g. "mxfp8"
  std::string_view catalog_key;  ///< key of gpu_spec::dense_flops giving its tensor-core rate ("bf16", "fp8", "fp4")
  bool blackwell_only;           ///< block-scaled formats (MX, NV) need Blackwell's tensor cores (TE docs, SM10.x)
  numerics_tier tier;            ///< lowest recommend --numerics tier that tries it
};

/// All formats, in the order of compute_format.
[[nodiscard]] inline const std::array<precision_info, 5>& precisions() noexcept {
  static constexpr std::array<precision_info, 5> p{{
      {compute_format::bf16, "bf16", "bf16", false, numerics_tier::conservative},
      {compute_format::fp8, "fp8", "fp8", false, numerics_tier::balanced},  // per-tensor scaled (torchao tensorwise)
      {compute_format::fp8_rowwise, "fp8-rowwise", "fp8", false, numerics_tier::by_name_only},  // one scale per row
      {compute_format::mxfp8, "mxfp8", "fp8", true, numerics_tier::conservative},  // OCP MX, 32-element E8M0 blocks
      {compute_format::nvfp4, "nvfp4", "fp4", true, numerics_tier::aggressive},    // 16-element E4M3 blocks
  }};
  return p;
}

/// The table entry of `f`.
[[nodiscard]] inline const precision_info& info(compute_format f) noexcept {
  return precisions()[static_cast<std::size_t>(f)];
}

/// CLI/JSON name of a format.
[[nodiscard]] constexpr const char* to_string(compute_format f) noexcept {
  switch (f) {
    case compute_format::bf16: return "bf16";
    case compute_format::fp8: return "fp8";
    case compute_format::fp8_rowwise: return "fp8-rowwise";
    case compute_format::mxfp8: return "mxfp8";
    case compute_format::nvfp4: return "nvfp4";
  }
  return "bf16";
}

/// The entry called `name`, or nullptr.
[[nodiscard]] inline const precision_info* find_precision(std::string_view name) noexcept {
  for (const auto& p : precisions())
    if (p.name == name) return &p;
  return nullptr;
}

/// Parses a format name ("bf16", "fp8", "fp8-rowwise", "mxfp8", "nvfp4").
[[nodiscard]] inline std::optional<compute_format> parse_format(std::string_view s) noexcept {
  if (const precision_info* p = find_precision(s)) return p->format;
  return std::nullopt;
}

/// The format names, comma-separated ("bf16, fp8, fp8-rowwise, mxfp8, nvfp4").
[[nodiscard]] inline std::string precision_names(std::string_view sep = ", ") {
  std::string out;
  for (const auto& p : precisions()) out += (out.empty() ? "" : std::string(sep)) + std::string(p.name);
  return out;
}

/// Storage cost of one element of a tensor of `inner` elements per row in format `f`, in bytes, scales included.
///
/// FP8 tensorwise 1 B (+4 B per tensor, negligible); FP8 rowwise 1 + 4/inner; MXFP8 1 + 1/32 (one E8M0 byte per
/// 32 elements); NVFP4 0.5 + 1/16 (one E4M3 byte per 16 elements; +4 B per tensor). Sources: TE MXFP8 and NVFP4
/// docs; arXiv:2509.25149 §2; OCP MX spec v1.0. @sa docs/precision.md#storage
[[nodiscard]] constexpr double storage_bytes_per_element(compute_format f, double inner = 4096) noexcept {
  switch (f) {
    case compute_format::bf16: return 2.0;
    case compute_format::fp8: return 1.0;
    case compute_format::fp8_rowwise: return 1.0 + 4.0 / inner;
    case compute_format::mxfp8: return 1.0 + 1.0 / 32;
    case compute_format::nvfp4: return 0.5 + 1.0 / 16;
  }
  return 2.0;
}

/// How a training stack holds and runs one format (torchao/torchtitan with FSDP2 is the modelled stack).
struct format_traits {
  /// Bytes per element of a linear layer's input saved for backward. FP8 and NVFP4 save the quantized input;
  /// torchao's MXFP8 saves the bf16 input and re-quantizes it along the other axis in backward (row- and
  /// column-wise MX scales differ), so MXFP8 saves 2 B.
  double saved_input_bytes = 2;
  /// Bytes per weight element of the quantized copies alive while a block runs: FP8 on Hopper keeps the
  /// weight and its transpose (TN-only GEMMs), on Blackwell one copy; MXFP8/NVFP4/rowwise keep row- and
  /// column-wise copies. 0 for bf16 (the bf16 weight itself is used).
  double weight_copy_bytes = 0;
  /// Bytes per element written when quantizing (for the memory-bound cost of the casts).
  double quantized_bytes = 2;
  /// Catalog rate key of the GEMMs: "bf16", "fp8" or "fp4".
  const char* rate_key = "bf16";
  /// Achieved fraction of the format's dense peak relative to bf16's (GEMM efficiency of a format). Chosen
  /// so that end-to-end speed-ups match published ones, not the datasheet ratios (docs/precision.md#speed).
  double relative_gemm_efficiency = 1.0;
  /// Whether torchtitan's per-op selective checkpointing saves this format's GEMM outputs. Its save list
  /// holds `aten.mm` and compiled regions; the NVFP4 prototype's GEMMs are custom ops outside it, so their
  /// outputs are recomputed.
  bool sac_saves_gemm_outputs = true;
  /// Whether the backward GEMMs write fp32 outputs that a separate kernel then scales: torchao's axiswise (rowwise)
  /// recipe runs dgrad and wgrad without fast accumulation, which the rowwise CUTLASS kernel does too slowly, so it
  /// calls cuBLAS with unit scales and applies the row and column scales afterwards (pytorch/ao#1325,
  /// `addmm_float8_unwrapped`; the slow kernel: pytorch/pytorch#147971).
  bool backward_rescale = false;
  /// Whether the linears save their high-precision (bf16) inputs, the tensors a bf16 linear saves, and cast them
  /// again in backward: torchao's eager `Float8Linear` since torchao 0.9 (`matmul_with_hp_or_float8_args.forward`:
  /// `ctx.save_for_backward(input_hp, weight_hp_t)`, torchao/float8/float8_linear.py @v0.18.0; the fp8-saving
  /// `manual_float8_matmul_with_args_in_float8` went in pytorch/ao 2ec9bc15d, 2025-01-13). Set by the memory model
  /// for the hf stack's eager fp8 and fp8-rowwise (terms::memory_shape::f8_linear); the default traits describe the
  /// stacks of the validated runs (torchtitan 2024-12 with its torchao, compiled blocks, Transformer Engine).
  bool saves_hp_inputs = false;
};

/// Traits of format `f` on `gpu` (FP8 transposes depend on the architecture: Hopper and Ada FP8 GEMMs are
/// TN-only, so they keep a transposed copy; Blackwell does not). @sa docs/precision.md
[[nodiscard]] inline format_traits traits(compute_format f, const gpu_spec& gpu) noexcept {
  const bool hopper = gpu.architecture_is("hopper") || gpu.architecture_is("ada");
  format_traits t;
  switch (f) {
    case compute_format::bf16: break;
    case compute_format::fp8:
      t = {1.0, hopper ? 2.0 : 1.0, 1.0, "fp8", 0.95, true};
      break;
    case compute_format::fp8_rowwise:
      // rowwise-scaled GEMMs (CUTLASS `f8f8bf16_rowwise`) run at 90–100 % of cuBLAS tensorwise for most shapes
      // (pytorch/pytorch#147971): 0.90 of the tensorwise 0.95
      t = {storage_bytes_per_element(f), 2 * storage_bytes_per_element(f), 1.0, "fp8", 0.95 * 0.90, true, true};
      break;
    case compute_format::mxfp8:
      t = {2.0, 2 * storage_bytes_per_element(f), storage_bytes_per_element(f), "fp8", 0.90, true};
      break;
    case compute_format::nvfp4:
      t = {storage_bytes_per_element(f), 2 * storage_bytes_per_element(f), storage_bytes_per_element(f), "fp4", 1.0, false};
      break;
  }
  return t;
}

/// Whether `gpu` runs format `f` on tensor cores: FP8 needs FP8 tensor cores, i.e. an "fp8" rate in the
/// catalog (Ada SM 8.9, Hopper, Blackwell; Ampere has none: TE "Ada and later (SM 8.9+)", torchao float8
/// needs SM 8.9+); MXFP8 and NVFP4 need Blackwell (NVFP4 also an "fp4" rate). Sources: TE docs (MXFP8/NVFP4
/// on SM10.x). @sa precisions()
[[nodiscard]] inline bool supports(const gpu_spec& gpu, compute_format f) noexcept {
  const precision_info& p = info(f);
  if (!gpu.peak(p.catalog_key)) return false;
  return !p.blackwell_only || gpu.architecture_is("blackwell");
}

/// Formats a `--numerics` tier tries on `gpu`, in table order (docs/precision.md#recommendation).
[[nodiscard]] inline std::vector<compute_format> formats_for_tier(numerics_tier tier, const gpu_spec& gpu) {
  std::vector<compute_format> out;
  // bf16 first, then the formats in the order the tiers add them (the order recommend explains them in)
  for (compute_format f : {compute_format::bf16, compute_format::mxfp8, compute_format::fp8, compute_format::nvfp4}) {
    const precision_info& p = info(f);
    if (p.tier <= tier && supports(gpu, f)) out.push_back(f);
  }
  return out;
}

/// Which blocks stay bf16 when the format is not bf16 (embedding and LM head always do).
struct bf16_blocks {
  std::int64_t first = 0;  ///< leading blocks kept bf16
  std::int64_t last = 0;   ///< trailing blocks kept bf16
  double fraction = -1;    ///< if ≥ 0: keep ceil(fraction · L) trailing blocks instead of `last`

  [[nodiscard]] constexpr bool operator==(const bf16_blocks&) const noexcept = default;

  /// Trailing blocks kept bf16 for a model of `layers` blocks.
  [[nodiscard]] std::int64_t last_for(std::int64_t layers) const noexcept {
    if (fraction < 0) return last;
    const double x = fraction * static_cast<double>(layers);
    auto n = static_cast<std::int64_t>(x);
    if (static_cast<double>(n) < x - 1e-9) ++n;
    return n;
  }
  /// Number of blocks that run in the low-precision format, of `layers`.
  [[nodiscard]] std::int64_t quantized(std::int64_t layers) const noexcept {
    const std::int64_t keep = first + last_for(layers);
    return keep >= layers ? 0 : layers - keep;
  }
};

/// Parses the plan's `bf16_layers`: "none", "last:N", "first:N", "first:N,last:M" or a fraction "0.15" of
/// trailing blocks. Counts are limited to 2^20 blocks. Throws plan_error (field "bf16_layers") on anything else,
/// NaN included.
[[nodiscard]] inline bf16_blocks parse_bf16_blocks(const std::string& s) {
  auto bad = [&](const std::string& why) { return plan_error({"bf16_layers", "/bf16_layers", why}); };
  bf16_blocks b;
  if (s == "none" || s.empty()) return b;
  auto number = [&](const std::string& v) -> std::int64_t {
    std::size_t pos = 0;
    long long n = -1;
    try { n = std::stoll(v, &pos); } catch (...) { pos = 0; }
    if (pos != v.size() || v.empty() || n < 0 || n > max_model_layers)
      throw bad("expected a block count between 0 and " + std::to_string(max_model_layers) + " (the most blocks a model may have) in '" + s + "'");
    return n;
  };
  if (s.find(':') == std::string::npos) {
    std::size_t pos = 0;
    double f = -1;
    try { f = std::stod(s, &pos); } catch (...) { pos = 0; }
    if (pos != s.size() || !(f >= 0 && f <= 1))  // written so that NaN fails
      throw bad("expected last:N, first:N, first:N,last:M or a fraction in [0, 1], got '" + s + "'");
    b.fraction = f;
    return b;
  }
  std::size_t start = 0;
  while (start <= s.size()) {
    const std::size_t comma = s.find(',', start);
    const std::string part = s.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    const std::size_t colon = part.find(':');
    if (colon == std::string::npos) throw bad("bad part '" + part + "' in '" + s + "'");
    const std::string key = part.substr(0, colon);
    if (key == "first") b.first = number(part.substr(colon + 1));
    else if (key == "last") b.last = number(part.substr(colon + 1));
    else throw bad("expected first: or last:, got '" + part + "'");
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return b;
}

/// The one printer of bf16_blocks, the inverse of parse_bf16_blocks: "none", "first:N", "last:N",
/// "first:N,last:M" or the fraction (shortest form that reads back to the same double).
[[nodiscard]] inline std::string to_string(const bf16_blocks& b) {
  if (b.fraction >= 0) {
    std::string out;
    for (int prec = 1; prec <= 17; ++prec) {
      char buf[40];
      std::snprintf(buf, sizeof buf, "%.*g", prec, b.fraction);
      out = buf;
      if (std::stod(out) == b.fraction) break;
    }
    return b.first > 0 ? "first:" + std::to_string(b.first) + "," + out : out;
  }
  if (b.first == 0 && b.last == 0) return "none";
  std::string out;
  if (b.first > 0) out = "first:" + std::to_string(b.first);
  if (b.last > 0) out += (out.empty() ? "" : ",") + std::string("last:") + std::to_string(b.last);
  return out;
}

}  // namespace bwplan
