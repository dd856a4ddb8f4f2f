// bwplan: GPU memory and throughput planning for LLM training
// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <bwplan/hardware.hpp>
#include <bwplan/model.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace bwplan {

/// Format of the linear-layer GEMMs (the rest of the model, attention, norms and the loss, stays bf16/fp32).
enum class compute_format {
  bf16,         ///< bf16 GEMMs
  fp8,          ///< FP8 E4M3/E5M2, one fp32 scale per tensor (delayed or current scaling), "tensorwise"
  fp8_rowwise,  ///< FP8 with one fp32 scale per row (torchao "rowwise")
  mxfp8,        ///< OCP MXFP8: E4M3 elements, one E8M0 scale per 32 consecutive elements
  nvfp4,        ///< NVFP4: E2M1 elements, one E4M3 scale per 16 elements + one fp32 scale per tensor
};

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

/// Parses a format name ("bf16", "fp8", "fp8-rowwise", "mxfp8", "nvfp4").
[[nodiscard]] inline std::optional<compute_format> parse_format(std::string_view s) noexcept {
  for (auto f : {compute_format::bf16, compute_format::fp8, compute_format::fp8_rowwise, compute_format::mxfp8, compute_format::nvfp4})
    if (s == to_string(f)) return f;
  return std::nullopt;
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
};

/// Traits of format `f` on `gpu` (FP8 transposes depend on the architecture). @sa docs/precision.md
[[nodiscard]] inline format_traits traits(compute_format f, const gpu_spec& gpu) noexcept {
  const bool hopper = gpu.architecture == "hopper";
  format_traits t;
  switch (f) {
    case compute_format::bf16: break;
    case compute_format::fp8:
      t = {1.0, hopper ? 2.0 : 1.0, 1.0, "fp8", 0.95, true};
      break;
    case compute_format::fp8_rowwise:
      t = {storage_bytes_per_element(f), 2 * storage_bytes_per_element(f), 1.0, "fp8", 0.90, true};
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

/// Whether `gpu` runs format `f` on tensor cores: FP8 needs Hopper or newer (an "fp8" rate in the catalog);
/// MXFP8 and NVFP4 need Blackwell (NVFP4 also an "fp4" rate). Sources: TE docs (MXFP8/NVFP4 on SM10.x).
[[nodiscard]] inline bool supports(const gpu_spec& gpu, compute_format f) noexcept {
  switch (f) {
    case compute_format::bf16: return gpu.peak("bf16").has_value();
    case compute_format::fp8:
    case compute_format::fp8_rowwise: return gpu.peak("fp8").has_value();
    case compute_format::mxfp8: return gpu.architecture == "blackwell" && gpu.peak("fp8").has_value();
    case compute_format::nvfp4: return gpu.architecture == "blackwell" && gpu.peak("fp4").has_value();
  }
  return false;
}

/// Which blocks stay bf16 when the format is not bf16 (embedding and LM head always do).
struct bf16_blocks {
  std::int64_t first = 0;  ///< leading blocks kept bf16
  std::int64_t last = 0;   ///< trailing blocks kept bf16
  double fraction = -1;    ///< if ≥ 0: keep ceil(fraction · L) trailing blocks instead of `last`

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

/// Parses `--bf16-layers`: "none", "last:N", "first:N", "first:N,last:M" or a fraction "0.15" (trailing).
/// Throws invalid_request on anything else.
[[nodiscard]] inline bf16_blocks parse_bf16_blocks(const std::string& s) {
  bf16_blocks b;
  if (s == "none" || s.empty()) return b;
  auto number = [&](const std::string& v) -> std::int64_t {
    std::size_t pos = 0;
    long long n = -1;
    try { n = std::stoll(v, &pos); } catch (...) { pos = 0; }
    if (pos != v.size() || n < 0) throw invalid_request("--bf16-layers: expected a count >= 0 in '" + s + "'");
    if (n > max_model_layers)
      throw invalid_request("--bf16-layers: a count must be at most " + std::to_string(max_model_layers) +
                            " (the most blocks a model may have), got '" + v + "'");
    return n;
  };
  if (s.find(':') == std::string::npos) {
    std::size_t pos = 0;
    double f = -1;
    try { f = std::stod(s, &pos); } catch (...) { pos = 0; }
    if (pos != s.size() || !(f >= 0 && f <= 1))  // NaN fails both comparisons
      throw invalid_request("--bf16-layers: expected last:N, first:N, first:N,last:M or a fraction in [0, 1], got '" + s + "'");
    b.fraction = f;
    return b;
  }
  std::size_t start = 0;
  while (start <= s.size()) {
    const std::size_t comma = s.find(',', start);
    const std::string part = s.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    const std::size_t colon = part.find(':');
    if (colon == std::string::npos) throw invalid_request("--bf16-layers: bad part '" + part + "' in '" + s + "'");
    const std::string key = part.substr(0, colon);
    if (key == "first") b.first = number(part.substr(colon + 1));
    else if (key == "last") b.last = number(part.substr(colon + 1));
    else throw invalid_request("--bf16-layers: expected first: or last:, got '" + part + "'");
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return b;
}

}  // namespace bwplan
