// bwplan: GPU memory and throughput planning for LLM training
// SPDX-License-Identifier: Apache-2.0
#pragma once

// Calibration from measured runs (issue 16): the constants a set of runs identifies, fitted per GPU and stack; the
// error bands of the estimates (validation residuals per GPU, stack and mode); the three-state fit verdict.
// Standard library only. @sa docs/calibration.md

#include <bwplan/error.hpp>
#include <bwplan/hardware.hpp>
#include <bwplan/memory.hpp>
#include <bwplan/model.hpp>
#include <bwplan/throughput.hpp>
#include <bwplan/training.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace bwplan {

// ---------------------------------------------------------------------------------------------------------
// Constants a profile sets

/// The constants one profile entry sets for one GPU and stack: the throughput model's efficiencies and the runtime
/// overheads of the memory model. Defaults are the built-in values (throughput_calibration, runtime_overheads).
struct calibration_constants {
  throughput_calibration throughput;
  runtime_overheads overheads;
};

/// One constant the fit can move: its name (profile key and `--fit` value), whether it is a throughput or a memory
/// constant, its bounds (the fit never leaves them; a profile outside them is refused) and its unit.
struct calibration_parameter {
  std::string_view name;
  bool memory = false;   ///< a memory constant (fitted on peak reserved/allocated bytes), else throughput (tokens/s)
  double lo = 0, hi = 0; ///< bounds
  std::string_view unit; ///< "fraction", "s", "tokens", "elements", "bytes"
};

/// Every constant calibrate can fit, in profile order. Throughput (fitted on log tokens/s): `gemm_max` (asymptotic
/// GEMM efficiency), `gemm_half_k`, `gemm_half_mn` (GEMM half-widths), `attention` (fused attention's share of the
/// FlashAttention-3 rates), `memory` (achieved fraction of HBM bandwidth), `launch_s` (seconds per kernel), `nvlink`,
/// `efa` (achieved link fractions; signal only from runs on more than one GPU, resp. node). Memory (fitted on log peak
/// reserved): `cublas_workspace` (bytes inside the allocator), `fragmentation` (slack share of the cheap bound; signal
/// only from runs the allocator replay does not cover). Measured, not fitted: `cuda_context` and `nccl` (bytes outside
/// the allocator: the runs' env line, `context_used` and `context_used_after_dist − context_used`). Bounds are physical
/// ranges (a fraction ≤ 1) or an order of magnitude around the default.
[[nodiscard]] inline const std::vector<calibration_parameter>& calibration_parameters() {
  static const std::vector<calibration_parameter> p{
      {"gemm_max", false, 0.2, 1.0, "fraction"},
      {"gemm_half_k", false, 16, 4096, "elements"},
      {"gemm_half_mn", false, 1e4, 1e7, "elements"},
      {"attention", false, 0.2, 1.5, "fraction"},
      {"memory", false, 0.1, 1.0, "fraction"},
      {"launch_s", false, 5e-7, 1e-4, "s"},
      {"nvlink", false, 0.2, 1.0, "fraction"},
      {"efa", false, 0.1, 1.0, "fraction"},
      {"cublas_workspace", true, 0, 2.0 * 1073741824, "bytes"},
      {"fragmentation", true, 0, 0.5, "fraction"},
      {"cuda_context", true, 0, 8.0 * 1073741824, "bytes"},
      {"nccl", true, 0, 16.0 * 1073741824, "bytes"},
  };
  return p;
}

/// The parameter called `name`, or nullptr.
[[nodiscard]] inline const calibration_parameter* find_calibration_parameter(std::string_view name) {
  for (const auto& p : calibration_parameters())
    if (p.name == name) return &p;
  return nullptr;
}

/// Value of constant `name` in `k` (0 for an unknown name).
[[nodiscard]] inline double get_constant(const calibration_constants& k, std::string_view name) noexcept {
  const throughput_calibration& t = k.throughput;
  if (name == "gemm_max") return t.gemm_max;
  if (name == "gemm_half_k") return t.gemm_half_k;
  if (name == "gemm_half_mn") return t.gemm_half_mn;
  if (name == "attention") return t.attention;
  if (name == "memory") return t.memory;
  if (name == "launch_s") return t.launch_s;
  if (name == "nvlink") return t.nvlink;
  if (name == "efa") return t.efa;
  if (name == "cublas_workspace") return k.overheads.cublas_workspace.raw();
  if (name == "fragmentation") return k.overheads.fragmentation;
  if (name == "cuda_context") return k.overheads.cuda_context.raw();
  if (name == "nccl") return k.overheads.nccl.raw();
  return 0;
}

/// Sets constant `name` of `k` to `v` (nothing for an unknown name).
inline void set_constant(calibration_constants& k, std::string_view name, double v) noexcept {
  throughput_calibration& t = k.throughput;
  if (name == "gemm_max") t.gemm_max = v;
  else if (name == "gemm_half_k") t.gemm_half_k = v;
  else if (name == "gemm_half_mn") t.gemm_half_mn = v;
  else if (name == "attention") t.attention = v;
  else if (name == "memory") t.memory = v;
  else if (name == "launch_s") t.launch_s = v;
  else if (name == "nvlink") t.nvlink = v;
  else if (name == "efa") t.efa = v;
  else if (name == "cublas_workspace") k.overheads.cublas_workspace = bytes::base(std::round(v));
  else if (name == "fragmentation") k.overheads.fragmentation = v;
  else if (name == "cuda_context") k.overheads.cuda_context = bytes::base(std::round(v));
  else if (name == "nccl") k.overheads.nccl = bytes::base(std::round(v));
}

// ---------------------------------------------------------------------------------------------------------
// Measured runs

/// One measured run as the fit and the bands use it: the configuration, where it ran and what was measured (0 where
/// a quantity was not measured). `ok` false: the run failed (out of memory); such rows enter the fit verdicts only.
struct measured_run {
  std::string label;          ///< "llama3.2-1b amp mbs=4 seq=4096 ac=none" (messages)
  std::string source;         ///< "FILE:LINE"
  model_spec model;
  training_config config;
  std::string gpu;            ///< catalog GPU id ("h200")
  /// the instance a trainer record's plan ran on (its nodes and the network between them, estimate_throughput's
  /// `inst`); nullopt for a bare GPU and the ground-truth rows (one GPU)
  std::optional<instance_spec> instance;
  std::string variant;        ///< another implementation than the stack's own (the ground truth's `impl`), "" for none
  bool ok = true;
  double tokens_per_s = 0;    ///< whole job
  double peak_allocated = 0;  ///< bytes
  double peak_reserved = 0;   ///< bytes
  double non_pytorch = 0;     ///< measured bytes outside the caching allocator (CUDA context, NCCL); 0: not measured
  double cuda_context = 0;    ///< the env line's `context_used` (bytes; 0: not measured)
  double nccl = 0;            ///< the env line's `context_used_after_dist − context_used` (bytes; 0: not measured)
};

/// Band mode of configuration `c`: "single" (one GPU, no sharding), "fsdp" (any sharding), "multi" (more than one GPU,
/// unsharded: DDP, tensor or pipeline parallel). The third part of an error-band group.
[[nodiscard]] inline std::string band_mode(const training_config& c) {
  if (c.sharded()) return "fsdp";
  return c.world_size > 1 ? "multi" : "single";
}

// ---------------------------------------------------------------------------------------------------------
// Error bands

/// Nearest-rank quantile of `v` (the ⌈q·n⌉-th smallest; the largest value for small n): at least a share q of the
/// values are ≤ it. 0 for an empty set.
[[nodiscard]] inline double nearest_rank_quantile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const auto n = static_cast<double>(v.size());
  std::size_t k = static_cast<std::size_t>(std::ceil(q * n - 1e-9));
  k = std::clamp<std::size_t>(k, 1, v.size());
  return v[k - 1];
}

/// The error band of one group of runs: the `quantile` (0.9) of |measured / estimate − 1| over its rows, for peak
/// reserved memory and tokens/s. Relative to the estimate, so that estimate × (1 ± band) holds the measured value of
/// at least that share of the rows.
struct error_band {
  std::string gpu, stack, mode;  ///< the group ("*" = any); all three "*" for the fallback
  int rows = 0;                  ///< measured rows behind it
  double memory = 0;             ///< relative half-width of the peak-reserved band
  double tokens_per_s = 0;       ///< relative half-width of the tokens/s band
  /// Rows with a measured peak reserved / tokens/s behind `memory` / `tokens_per_s` (-1: all `rows`, as in a group of
  /// the harness, where every row measured both). A group of the public evidence may have one without the other
  /// (configs/public-error-bands.json); its band of the other quantity is then the pooled one.
  int memory_rows = -1;
  int tokens_per_s_rows = -1;
  /// What error_bands::lookup took each quantity from ("gpu/stack/mode"; "*/*/*" the fallback); "" in a stored group.
  std::string memory_from = {};
  std::string tokens_per_s_from = {};
  [[nodiscard]] bool has_memory() const noexcept { return memory_rows < 0 ? rows > 0 : memory_rows > 0; }
  [[nodiscard]] bool has_tokens_per_s() const noexcept { return tokens_per_s_rows < 0 ? rows > 0 : tokens_per_s_rows > 0; }
  [[nodiscard]] std::string label() const { return gpu + "/" + stack + "/" + mode; }
};

/// The bands of a set of runs: one per (GPU, stack, mode) group and one fallback pooled over all rows.
struct error_bands {
  double quantile = 0.9;
  std::vector<error_band> groups;
  error_band fallback{"*", "*", "*", 0, 0, 0, -1, -1, {}, {}};
  /// The band of (gpu, stack, mode), each quantity from the nearest group that measured it:
  /// - peak reserved: the exact group; else the (gpu, stack) groups of any mode (the widest); else the (stack, mode)
  ///   groups of any GPU, else the stack's groups of any GPU and mode (the widest: what a stack allocates is the
  ///   same bytes on every GPU, so the hf stack's H200 rows speak for a B200 hf plan's memory); else the fallback;
  /// - tokens/s: the exact group; else the (gpu, stack) groups of any mode (the widest); else the fallback (speed
  ///   does depend on the GPU).
  /// The result names the request's group; `memory_from` / `tokens_per_s_from` say where each quantity came from and
  /// `rows` counts the rows behind both. `exact` is true when both came from the exact group.
  [[nodiscard]] error_band lookup(std::string_view gpu, std::string_view stack, std::string_view mode, bool* exact = nullptr) const {
    struct pick { double v = 0; int rows = 0; std::string from; };
    const auto widest = [&](auto&& match, bool memory) {
      pick p;
      for (const auto& g : groups) {
        if (!match(g) || !(memory ? g.has_memory() : g.has_tokens_per_s())) continue;
        const double v = memory ? g.memory : g.tokens_per_s;
        const int n = memory ? (g.memory_rows < 0 ? g.rows : g.memory_rows) : (g.tokens_per_s_rows < 0 ? g.rows : g.tokens_per_s_rows);
        if (p.from.empty() || v > p.v) { p.v = v; p.from = g.label(); }
        p.rows += n;
      }
      return p;
    };
    const auto is_exact = [&](const error_band& g) { return g.gpu == gpu && g.stack == stack && g.mode == mode; };
    const auto same_gpu_stack = [&](const error_band& g) { return g.gpu == gpu && g.stack == stack; };
    const auto same_stack_mode = [&](const error_band& g) { return g.stack == stack && g.mode == mode; };
    const auto same_stack = [&](const error_band& g) { return g.stack == stack; };
    const pick fb_mem{fallback.memory, fallback.memory_rows < 0 ? fallback.rows : fallback.memory_rows, fallback.label()};
    const pick fb_tps{fallback.tokens_per_s, fallback.tokens_per_s_rows < 0 ? fallback.rows : fallback.tokens_per_s_rows, fallback.label()};
    pick mem = widest(is_exact, true);
    const bool mem_exact = !mem.from.empty();
    if (mem.from.empty()) mem = widest(same_gpu_stack, true);
    if (mem.from.empty()) mem = widest(same_stack_mode, true);
    if (mem.from.empty()) mem = widest(same_stack, true);
    if (mem.from.empty()) mem = fb_mem;
    pick tps = widest(is_exact, false);
    const bool tps_exact = !tps.from.empty();
    if (tps.from.empty()) tps = widest(same_gpu_stack, false);
    if (tps.from.empty()) tps = fb_tps;
    if (exact) *exact = mem_exact && tps_exact;
    error_band b{std::string(gpu), std::string(stack), std::string(mode), 0, mem.v, tps.v, mem.rows, tps.rows, mem.from, tps.from};
    // rows behind the band: both counts when they come from different groups, else the group's own
    b.rows = mem.from == tps.from ? std::max(mem.rows, tps.rows) : mem.rows + tps.rows;
    if (mem.from == fallback.label() && tps.from == fallback.label()) b.gpu = b.stack = b.mode = "*";
    return b;
  }
  /// The largest memory band any plan on (gpu, stack) can get (recommend's headroom over a search of every mode): the
  /// widest lookup over the modes single, fsdp and multi.
  [[nodiscard]] double widest_memory(std::string_view gpu, std::string_view stack) const {
    double w = 0;
    for (const char* m : {"single", "fsdp", "multi"}) w = std::max(w, lookup(gpu, stack, m).memory);
    return w;
  }
};

/// The bands of two sources as one (context::bands: the harness's configs/error-bands.json, then the public
/// evidence's configs/public-error-bands.json): the groups of `a`, then those of `b` whose group `a` lacks; the
/// fallback the wider of the two per quantity, over the rows of both. The quantile is `a`'s (both files use 0.9).
[[nodiscard]] inline error_bands merge_error_bands(const error_bands& a, const error_bands& b) {
  error_bands m = a;
  for (const auto& g : b.groups) {
    const bool have = std::any_of(a.groups.begin(), a.groups.end(), [&](const error_band& x) { return x.label() == g.label(); });
    if (!have) m.groups.push_back(g);
  }
  const auto n_mem = [](const error_band& f) { return f.memory_rows < 0 ? f.rows : f.memory_rows; };
  const auto n_tps = [](const error_band& f) { return f.tokens_per_s_rows < 0 ? f.rows : f.tokens_per_s_rows; };
  m.fallback.rows = a.fallback.rows + b.fallback.rows;
  m.fallback.memory = std::max(a.fallback.memory, b.fallback.memory);
  m.fallback.tokens_per_s = std::max(a.fallback.tokens_per_s, b.fallback.tokens_per_s);
  m.fallback.memory_rows = n_mem(a.fallback) + n_mem(b.fallback);
  m.fallback.tokens_per_s_rows = n_tps(a.fallback) + n_tps(b.fallback);
  return m;
}

/// Residuals (estimate / measured − 1) of one run under constants `k`; 0 where not measured. Throws
/// invalid_request for a configuration the estimators refuse.
struct run_residual {
  double tokens_per_s = 0;
  double peak_reserved = 0;
  double peak_allocated = 0;
  memory_estimate memory;
  throughput_estimate throughput;
};
[[nodiscard]] inline run_residual residual_of(const measured_run& r, const gpu_spec& gpu, const calibration_constants& k,
                                              bool with_memory = true) {
  run_residual x;
  x.throughput = estimate_throughput(r.model, r.config, gpu, r.instance ? &*r.instance : nullptr, k.throughput);
  if (r.tokens_per_s > 0) x.tokens_per_s = x.throughput.tokens_per_s / r.tokens_per_s - 1;
  if (with_memory) {
    x.memory = estimate_memory(r.model, r.config, gpu, k.overheads);
    if (r.peak_reserved > 0) x.peak_reserved = x.memory.peak_reserved.raw() / r.peak_reserved - 1;
    if (r.peak_allocated > 0) x.peak_allocated = x.memory.peak_allocated.raw() / r.peak_allocated - 1;
  }
  return x;
}

/// Group key "gpu/stack/mode" of a run (a variant implementation is its own stack: "hf+impl=hf").
[[nodiscard]] inline std::array<std::string, 3> band_group_of(const measured_run& r) {
  std::string stack = to_string(r.config.stack);
  if (!r.variant.empty()) stack += "+impl=" + r.variant;
  return {r.gpu, stack, band_mode(r.config)};
}

/// The error bands of `runs` (successful rows with measured peak reserved and tokens/s) under constants `k`, each
/// GPU's spec from `gpu_of` (a callable: gpu id → const gpu_spec&). Groups in the order their first row appears.
template <class GpuOf>
[[nodiscard]] error_bands compute_error_bands(const std::vector<measured_run>& runs, GpuOf&& gpu_of, const calibration_constants& k,
                                              double quantile = 0.9) {
  error_bands b;
  b.quantile = quantile;
  struct acc { std::array<std::string, 3> key; std::vector<double> mem, tps; };
  std::vector<acc> groups;
  std::vector<double> all_mem, all_tps;
  for (const auto& r : runs) {
    if (!r.ok || r.peak_reserved <= 0 || r.tokens_per_s <= 0) continue;
    const run_residual x = residual_of(r, gpu_of(r.gpu), k);
    const auto key = band_group_of(r);
    auto it = std::find_if(groups.begin(), groups.end(), [&](const acc& a) { return a.key == key; });
    if (it == groups.end()) { groups.push_back({key, {}, {}}); it = groups.end() - 1; }
    // measured / estimate − 1 from estimate / measured − 1
    const double mem = std::abs(1 / (1 + x.peak_reserved) - 1), tps = std::abs(1 / (1 + x.tokens_per_s) - 1);
    it->mem.push_back(mem);
    it->tps.push_back(tps);
    all_mem.push_back(mem);
    all_tps.push_back(tps);
  }
  for (const auto& g : groups)
    b.groups.push_back({g.key[0], g.key[1], g.key[2], static_cast<int>(g.mem.size()), nearest_rank_quantile(g.mem, quantile),
                        nearest_rank_quantile(g.tps, quantile), -1, -1, {}, {}});
  b.fallback.rows = static_cast<int>(all_mem.size());
  b.fallback.memory = nearest_rank_quantile(all_mem, quantile);
  b.fallback.tokens_per_s = nearest_rank_quantile(all_tps, quantile);
  return b;
}

// ---------------------------------------------------------------------------------------------------------
// The three-state fit verdict

/// fits / tight / does not fit. "tight": the estimate fits, but the top of its memory band comes within
/// tight_margin of the capacity (peak reserved × (1 + band) + context and NCCL > (1 − tight_margin) × capacity).
enum class fit_verdict { fits, tight, does_not_fit };
[[nodiscard]] constexpr const char* to_string(fit_verdict v) noexcept {
  return v == fit_verdict::fits ? "fits" : v == fit_verdict::tight ? "tight" : "does not fit";
}
/// Share of capacity the top of the band must stay below for a plain "fits": 3 %, the headroom under which a
/// run is at the mercy of what the model leaves out (the H200 rows' device_used exceeds context + reserved by up to
/// 0.74 GB, 0.5 % of capacity; allocator retries and NCCL buffers grow with the job).
inline constexpr double tight_margin = 0.03;

/// Device bytes at the top of the memory band of `e`: peak reserved × (1 + band) + the bytes outside the allocator.
[[nodiscard]] inline bytes band_top(const memory_estimate& e, double band) noexcept {
  return bytes::base(e.peak_reserved.raw() * (1 + std::max(0.0, band))) + e.non_pytorch;
}

/// The verdict of `e` with memory band `band` (relative): does not fit when the estimate does not, tight when
/// band_top exceeds (1 − tight_margin) × capacity, else fits.
[[nodiscard]] inline fit_verdict verdict_of(const memory_estimate& e, double band) noexcept {
  if (!e.fits) return fit_verdict::does_not_fit;
  return band_top(e, band).raw() > (1 - tight_margin) * e.capacity.raw() ? fit_verdict::tight : fit_verdict::fits;
}

/// The headroom (share of capacity) a search must keep so that what it returns reads "fits" under memory band
/// `band`: 1 − (1 − tight_margin) / (1 + band), counting the context with the band (conservative).
[[nodiscard]] constexpr double band_headroom(double band) noexcept {
  return 1 - (1 - tight_margin) / (1 + (band > 0 ? band : 0));
}

// ---------------------------------------------------------------------------------------------------------
// The fit

/// Result of fit_constants for one GPU and stack.
struct calibration_fit {
  calibration_constants constants;      ///< fitted (the start where not fitted)
  std::vector<std::string> fitted;      ///< the constants the fit moved, in calibration_parameters() order
  std::vector<std::pair<std::string, std::string>> left_out;  ///< default constants not fitted, and why
  int throughput_rows = 0, memory_rows = 0;
  double tps_before = 0, tps_after = 0;            ///< median |tokens/s error| on the rows used
  double reserved_before = 0, reserved_after = 0;  ///< median |peak reserved error| on the rows used
  int iterations = 0;
};

/// Median of |v|.
[[nodiscard]] inline double median_abs(std::vector<double> v) {
  if (v.empty()) return 0;
  for (auto& x : v) x = std::abs(x);
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

namespace detail {

/// log(estimate / measured) of the throughput rows under `k`.
inline std::vector<double> log_tps_residuals(const std::vector<const measured_run*>& rows, const gpu_spec& gpu,
                                             const calibration_constants& k) {
  std::vector<double> r;
  r.reserve(rows.size());
  for (const measured_run* x : rows)
    r.push_back(std::log(estimate_throughput(x->model, x->config, gpu, x->instance ? &*x->instance : nullptr, k.throughput).tokens_per_s /
                         x->tokens_per_s));
  return r;
}

/// log(estimate / measured) of peak reserved of the memory rows under `k`.
inline std::vector<double> log_memory_residuals(const std::vector<const measured_run*>& rows, const gpu_spec& gpu,
                                                const calibration_constants& k) {
  std::vector<double> r;
  r.reserve(rows.size());
  for (const measured_run* x : rows) {
    const memory_estimate e = estimate_memory(x->model, x->config, gpu, k.overheads);
    r.push_back(std::log(std::max(1.0, e.peak_reserved.raw()) / x->peak_reserved));
  }
  return r;
}

inline double sum_squares(const std::vector<double>& r) {
  double s = 0;
  for (double x : r) s += x * x;
  return s;
}

/// Solves the n×n system A·x = b in place (Gaussian elimination with partial pivoting); false when singular.
inline bool solve(std::vector<double>& A, std::vector<double>& b, std::size_t n) {
  for (std::size_t c = 0; c < n; ++c) {
    std::size_t p = c;
    for (std::size_t r = c + 1; r < n; ++r)
      if (std::abs(A[r * n + c]) > std::abs(A[p * n + c])) p = r;
    if (std::abs(A[p * n + c]) < 1e-300) return false;
    if (p != c) {
      for (std::size_t k = 0; k < n; ++k) std::swap(A[c * n + k], A[p * n + k]);
      std::swap(b[c], b[p]);
    }
    for (std::size_t r = c + 1; r < n; ++r) {
      const double f = A[r * n + c] / A[c * n + c];
      for (std::size_t k = c; k < n; ++k) A[r * n + k] -= f * A[c * n + k];
      b[r] -= f * b[c];
    }
  }
  for (std::size_t c = n; c-- > 0;) {
    for (std::size_t k = c + 1; k < n; ++k) b[c] -= A[c * n + k] * b[k];
    b[c] /= A[c * n + c];
  }
  return true;
}

}  // namespace detail

/// Elasticity of the estimate of each row to constant `name`: the largest |Δ log estimate / Δ log constant| over the
/// rows for a ±10 % change (memory constants: the step to twice and half the value, or 64 MiB / 0.05 from 0). A
/// constant whose elasticity is below 0.01 on every row has no signal in the data: no row's time (or bytes) depends
/// on it, and the fit refuses it.
[[nodiscard]] inline double constant_signal(const std::vector<const measured_run*>& rows, const gpu_spec& gpu,
                                            const calibration_constants& k, const calibration_parameter& p) {
  if (rows.empty()) return 0;
  const double v = get_constant(k, p.name);
  calibration_constants up = k, down = k;
  double lv_up = 0, lv_down = 0;
  if (p.memory) {
    const double base = v > 0 ? v : (p.name == "fragmentation" ? 0.05 : 64.0 * 1048576);
    set_constant(up, p.name, std::min(p.hi, 2 * base));
    set_constant(down, p.name, v > 0 ? v / 2 : 0);
    lv_up = std::log(std::min(p.hi, 2 * base));
    lv_down = v > 0 ? std::log(v / 2) : std::log(base) - 1;  // from 0: count the step as one e-fold
    const auto a = detail::log_memory_residuals(rows, gpu, up), b = detail::log_memory_residuals(rows, gpu, down);
    double s = 0;
    for (std::size_t i = 0; i < a.size(); ++i) s = std::max(s, std::abs(a[i] - b[i]) / (lv_up - lv_down));
    return s;
  }
  set_constant(up, p.name, v * 1.1);
  set_constant(down, p.name, v / 1.1);
  const auto a = detail::log_tps_residuals(rows, gpu, up), b = detail::log_tps_residuals(rows, gpu, down);
  double s = 0;
  for (std::size_t i = 0; i < a.size(); ++i) s = std::max(s, std::abs(a[i] - b[i]) / (2 * std::log(1.1)));
  return s;
}

/// The throughput constants fitted by default where the data has signal for them, and the memory one. cublas_workspace
/// is fitted only when asked for (--fit): under the allocator replay the reserved bytes are a step function of it, and
/// on the H200 rows its "signal" is a segment boundary crossed here and there, not a trend.
inline constexpr std::array<std::string_view, 6> default_throughput_fit{"gemm_max", "attention", "memory", "launch_s", "nvlink", "efa"};
inline constexpr std::array<std::string_view, 1> default_memory_fit{"fragmentation"};
/// Signal threshold of constant_signal.
inline constexpr double min_signal = 0.01;
/// Default weight of the prior that holds each fitted constant near its start (per constant, on log(value / start)²):
/// small against one row's squared log error, it mostly decides directions the rows leave flat (correlated constants).
inline constexpr double default_prior_weight = 1e-3;

/// Fits `names` (constants of calibration_parameters(); empty: the defaults that have signal) to `runs` on `gpu`,
/// starting from `start`.
///
/// Throughput constants: Levenberg–Marquardt on the log tokens/s residuals plus the prior (`prior_weight` per constant
/// on log(value / start)²), in log(constant), each step clamped to the bounds (projected LM), Jacobian by central
/// differences, at most 40 iterations. Memory constants: a bounded 1-D search per constant (33-point grid, then two
/// finer grids around the best) on the log peak reserved residuals, since the allocator replay makes them a step
/// function of the bytes.
///
/// Throws invalid_request when the data cannot support the fit: fewer than `min_rows` (3) rows with the quantity a
/// constant is fitted on, or fewer rows than constants, or a constant asked for by name with no signal (constant_signal
/// < min_signal: "no row's time depends on it"). Defaults without signal are left out silently (listed by the caller
/// as not fitted).
[[nodiscard]] inline calibration_fit fit_constants(const std::vector<measured_run>& runs, const gpu_spec& gpu,
                                                   const calibration_constants& start, const std::vector<std::string>& names,
                                                   int min_rows = 3, double prior_weight = default_prior_weight) {
  calibration_fit f;
  f.constants = start;
  std::vector<const measured_run*> trows, mrows;
  for (const auto& r : runs) {
    if (!r.ok) continue;
    if (r.tokens_per_s > 0) trows.push_back(&r);
    if (r.peak_reserved > 0 && r.peak_allocated > 0) mrows.push_back(&r);
  }
  f.throughput_rows = static_cast<int>(trows.size());
  f.memory_rows = static_cast<int>(mrows.size());
  const bool explicit_names = !names.empty();
  std::vector<const calibration_parameter*> tp, mp;
  auto consider = [&](std::string_view n) {
    const calibration_parameter* p = find_calibration_parameter(n);
    if (!p || p->name == "cuda_context" || p->name == "nccl")
      throw invalid_request("--fit: unknown constant '" + std::string(n) + "' (fitted: gemm_max, gemm_half_k, gemm_half_mn, attention, "
                            "memory, launch_s, nvlink, efa, cublas_workspace, fragmentation; cuda_context and nccl are measured)");
    const auto& rows = p->memory ? mrows : trows;
    if (static_cast<int>(rows.size()) < min_rows) {
      if (!explicit_names) {
        f.left_out.emplace_back(n, std::to_string(rows.size()) + " row(s) with measured " + (p->memory ? "peak memory" : "tokens/s"));
        return;
      }
      throw invalid_request("cannot fit " + std::string(n) + ": " + std::to_string(rows.size()) + " row(s) with measured " +
                            (p->memory ? "peak memory" : "tokens/s") + " on " + gpu.id + ", at least " + std::to_string(min_rows) +
                            " needed");
    }
    const double s = constant_signal(rows, gpu, start, *p);
    if (s < min_signal) {
      if (!explicit_names) {
        f.left_out.emplace_back(n, std::string("no signal: no row's ") + (p->memory ? "peak memory" : "time") + " depends on it");
        return;
      }
      throw invalid_request("cannot fit " + std::string(n) + ": no signal in the rows (no row's " +
                            (p->memory ? "peak memory" : "time") + " depends on it; largest elasticity " +
                            std::to_string(s).substr(0, 6) + " < " + std::to_string(min_signal).substr(0, 4) + ")");
    }
    (p->memory ? mp : tp).push_back(p);
  };
  if (explicit_names) {
    for (const auto& n : names) consider(n);
  } else {
    for (auto n : default_throughput_fit) consider(n);
    for (auto n : default_memory_fit) consider(n);
  }
  if (tp.empty() && mp.empty())
    throw invalid_request("nothing to fit on " + gpu.id + ": " + std::to_string(trows.size()) + " row(s) with tokens/s and " +
                          std::to_string(mrows.size()) + " with peak memory; at least " + std::to_string(min_rows) +
                          " rows with signal for a constant are needed");
  if (!tp.empty() && trows.size() < tp.size() + 1)
    throw invalid_request("cannot fit " + std::to_string(tp.size()) + " throughput constants from " + std::to_string(trows.size()) +
                          " rows: give more rows than constants, or fewer constants with --fit");

  auto tps_errors = [&](const calibration_constants& k) {
    std::vector<double> e;
    for (double r : detail::log_tps_residuals(trows, gpu, k)) e.push_back(std::exp(r) - 1);
    return e;
  };
  auto reserved_errors = [&](const calibration_constants& k) {
    std::vector<double> e;
    const auto r = detail::log_memory_residuals(mrows, gpu, k);
    for (std::size_t i = 0; i < r.size(); i += 2) e.push_back(std::exp(r[i]) - 1);
    return e;
  };
  f.tps_before = median_abs(tps_errors(start));
  if (!mrows.empty()) f.reserved_before = median_abs(reserved_errors(start));

  // ---- throughput: projected Levenberg–Marquardt in log space
  if (!tp.empty()) {
    const std::size_t n = tp.size();
    std::vector<double> x0(n), x(n), lo(n), hi(n);
    for (std::size_t j = 0; j < n; ++j) {
      x0[j] = x[j] = std::log(get_constant(start, tp[j]->name));
      lo[j] = std::log(tp[j]->lo);
      hi[j] = std::log(tp[j]->hi);
    }
    auto at = [&](const std::vector<double>& xx) {
      calibration_constants k = f.constants;
      // exp(log(hi)) may round past hi (1e-4 became 1.0000000000000009e-4, which the profile reader refuses)
      for (std::size_t j = 0; j < n; ++j) set_constant(k, tp[j]->name, std::clamp(std::exp(xx[j]), tp[j]->lo, tp[j]->hi));
      return k;
    };
    const double pw = std::sqrt(prior_weight);
    auto residuals = [&](const std::vector<double>& xx) {
      std::vector<double> r = detail::log_tps_residuals(trows, gpu, at(xx));
      for (std::size_t j = 0; j < n; ++j) r.push_back(pw * (xx[j] - x0[j]));
      return r;
    };
    std::vector<double> r = residuals(x);
    double cost = detail::sum_squares(r), lambda = 1e-3;
    for (int it = 0; it < 40; ++it) {
      f.iterations = it + 1;
      const std::size_t m = r.size();
      std::vector<double> J(m * n);
      for (std::size_t j = 0; j < n; ++j) {
        const double h = 1e-4;
        std::vector<double> a = x, b = x;
        a[j] += h;
        b[j] -= h;
        const auto ra = residuals(a), rb = residuals(b);
        for (std::size_t i = 0; i < m; ++i) J[i * n + j] = (ra[i] - rb[i]) / (2 * h);
      }
      std::vector<double> JtJ(n * n, 0), g(n, 0);
      for (std::size_t i = 0; i < m; ++i)
        for (std::size_t a = 0; a < n; ++a) {
          g[a] += J[i * n + a] * r[i];
          for (std::size_t b = 0; b < n; ++b) JtJ[a * n + b] += J[i * n + a] * J[i * n + b];
        }
      bool improved = false;
      for (int tries = 0; tries < 12 && !improved; ++tries) {
        std::vector<double> A = JtJ, d(n);
        for (std::size_t a = 0; a < n; ++a) { A[a * n + a] *= 1 + lambda; A[a * n + a] += 1e-12; d[a] = -g[a]; }
        if (!detail::solve(A, d, n)) { lambda *= 10; continue; }
        std::vector<double> xn(n);
        for (std::size_t a = 0; a < n; ++a) xn[a] = std::clamp(x[a] + d[a], lo[a], hi[a]);
        const auto rn = residuals(xn);
        const double cn = detail::sum_squares(rn);
        if (cn < cost) {
          const double gain = cost - cn;
          x = xn; r = rn; cost = cn;
          lambda = std::max(1e-9, lambda / 10);
          improved = true;
          if (gain < 1e-12 * (1 + cost)) it = 1000;  // converged
        } else {
          lambda *= 10;
        }
      }
      if (!improved) break;
    }
    f.constants = at(x);
    for (const auto* p : tp) f.fitted.emplace_back(p->name);
  }

  // ---- memory: bounded 1-D searches, one constant after the other
  for (const auto* p : mp) {
    auto cost_at = [&](double v) {
      calibration_constants k = f.constants;
      set_constant(k, p->name, v);
      return detail::sum_squares(detail::log_memory_residuals(mrows, gpu, k));
    };
    double best_v = get_constant(f.constants, p->name), best = cost_at(best_v);
    double lo = p->lo, hi = p->hi;
    for (int level = 0; level < 3; ++level) {
      const int N = level == 0 ? 32 : 16;
      double step = (hi - lo) / N;
      for (int i = 0; i <= N; ++i) {
        const double v = lo + i * step;
        const double c = cost_at(v);
        if (c < best - 1e-15) { best = c; best_v = v; }
      }
      lo = std::max(p->lo, best_v - step);
      hi = std::min(p->hi, best_v + step);
    }
    set_constant(f.constants, p->name, best_v);
    f.fitted.emplace_back(p->name);
  }
  // keep calibration_parameters() order
  std::vector<std::string> ordered;
  for (const auto& p : calibration_parameters())
    if (std::find(f.fitted.begin(), f.fitted.end(), p.name) != f.fitted.end()) ordered.emplace_back(p.name);
  f.fitted = ordered;
  f.tps_after = median_abs(tps_errors(f.constants));
  if (!mrows.empty()) f.reserved_after = median_abs(reserved_errors(f.constants));
  return f;
}

// ---------------------------------------------------------------------------------------------------------
// Profiles

/// One input file of a profile (provenance): its name as given, its SHA-256 and the rows read from it.
struct profile_input {
  std::string file;
  std::string sha256;
  int rows = 0;
};

/// The constants of one GPU and stack in a profile, what was fitted and how well.
struct profile_entry {
  std::string gpu;    ///< catalog GPU id
  std::string stack;  ///< training_stack name ("hf", "torchtitan", …)
  calibration_constants constants;  ///< every constant (the defaults where not fitted)
  std::vector<std::string> fitted;  ///< names of the fitted constants
  std::vector<std::string> measured;  ///< names of the constants read from the runs' env lines (cuda_context, nccl)
  int rows = 0;                     ///< rows used
  std::string software;             ///< the runs' software as their records state it ("torch 2.11.0+cu130"), may be ""
  double tps_before = 0, tps_after = 0, reserved_before = 0, reserved_after = 0;  ///< median |error| before / after
  std::optional<error_band> band;   ///< the residual band after the fit (rows ≥ 5), overriding the bundled one
};

/// A calibration profile (`bwplan calibrate -o`; docs/calibration.md#profile): versioned, with its provenance.
struct calibration_profile {
  int version = 1;                     ///< format version ("bwplan_profile"); readers refuse any other
  std::string bwplan_version;          ///< the bwplan that wrote it
  std::string created;                 ///< UTC, ISO 8601
  std::vector<profile_input> inputs;
  std::vector<profile_entry> entries;
  /// The entry for (gpu, stack), or nullptr (the built-in constants apply).
  [[nodiscard]] const profile_entry* find(std::string_view gpu, std::string_view stack) const {
    for (const auto& e : entries)
      if (e.gpu == gpu && e.stack == stack) return &e;
    return nullptr;
  }
};

/// The constants for (gpu, stack): the profile's entry when it has one, else the built-in defaults.
[[nodiscard]] inline calibration_constants constants_for(const calibration_profile* p, std::string_view gpu, std::string_view stack) {
  if (p)
    if (const profile_entry* e = p->find(gpu, stack)) return e->constants;
  return {};
}

}  // namespace bwplan
