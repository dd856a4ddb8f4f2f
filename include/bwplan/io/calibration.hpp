// bwplan: GPU memory and throughput planning for LLM training
// SPDX-License-Identifier: Apache-2.0
#pragma once

// Calibration profiles and error-band files as JSON (docs/calibration.md): readers that refuse a bad file with one
// config_error naming the file, the member and the problem; writers with a stable member order.

#include <bwplan/calibration.hpp>
#include <bwplan/error.hpp>
#include <bwplan/io/file.hpp>
#include <bwplan/io/json.hpp>

#include <nlohmann/json.hpp>

#include <array>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <string>
#include <string_view>

namespace bwplan::io {

/// SHA-256 of `data` as 64 lower-case hex digits (FIPS 180-4), for the provenance of a profile's inputs.
[[nodiscard]] inline std::string sha256_hex(std::string_view data) {
  static constexpr std::uint32_t K[64] = {
      0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5, 0xd807aa98, 0x12835b01,
      0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174, 0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc,
      0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da, 0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147,
      0x06ca6351, 0x14292967, 0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
      0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070, 0x19a4c116, 0x1e376c08,
      0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3, 0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208,
      0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};
  std::uint32_t h[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
  std::string m(data);
  const std::uint64_t bits = static_cast<std::uint64_t>(data.size()) * 8;
  m += static_cast<char>(0x80);
  while (m.size() % 64 != 56) m += '\0';
  for (int i = 7; i >= 0; --i) m += static_cast<char>((bits >> (8 * i)) & 0xff);
  auto rotr = [](std::uint32_t x, int n) { return (x >> n) | (x << (32 - n)); };
  for (std::size_t off = 0; off < m.size(); off += 64) {
    std::uint32_t w[64];
    for (int i = 0; i < 16; ++i)
      w[i] = (static_cast<std::uint32_t>(static_cast<unsigned char>(m[off + 4 * i])) << 24) |
             (static_cast<std::uint32_t>(static_cast<unsigned char>(m[off + 4 * i + 1])) << 16) |
             (static_cast<std::uint32_t>(static_cast<unsigned char>(m[off + 4 * i + 2])) << 8) |
             static_cast<std::uint32_t>(static_cast<unsigned char>(m[off + 4 * i + 3]));
    for (int i = 16; i < 64; ++i) {
      const std::uint32_t s0 = rotr(w[i - 15], 7) ^ rotr(w[i - 15], 18) ^ (w[i - 15] >> 3);
      const std::uint32_t s1 = rotr(w[i - 2], 17) ^ rotr(w[i - 2], 19) ^ (w[i - 2] >> 10);
      w[i] = w[i - 16] + s0 + w[i - 7] + s1;
    }
    std::uint32_t a = h[0], b = h[1], c = h[2], d = h[3], e = h[4], f = h[5], g = h[6], hh = h[7];
    for (int i = 0; i < 64; ++i) {
      const std::uint32_t S1 = rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25);
      const std::uint32_t ch = (e & f) ^ (~e & g);
      const std::uint32_t t1 = hh + S1 + ch + K[i] + w[i];
      const std::uint32_t S0 = rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22);
      const std::uint32_t mj = (a & b) ^ (a & c) ^ (b & c);
      const std::uint32_t t2 = S0 + mj;
      hh = g; g = f; f = e; e = d + t1; d = c; c = b; b = a; a = t1 + t2;
    }
    h[0] += a; h[1] += b; h[2] += c; h[3] += d; h[4] += e; h[5] += f; h[6] += g; h[7] += hh;
  }
  std::string out;
  char buf[9];
  for (std::uint32_t v : h) {
    std::snprintf(buf, sizeof buf, "%08x", v);
    out += buf;
  }
  return out;
}

/// The current profile format version ("bwplan_profile").
inline constexpr int profile_version = 1;
/// The current error-band file version ("bwplan_error_bands").
inline constexpr int error_bands_version = 1;

namespace detail {

inline nlohmann::ordered_json band_to_json(const error_band& b) {
  nlohmann::ordered_json j{{"gpu", b.gpu}, {"stack", b.stack}, {"mode", b.mode}, {"rows", b.rows}, {"memory", b.memory}, {"tokens_per_s", b.tokens_per_s}};
  if (b.memory_rows >= 0) j["memory_rows"] = b.memory_rows;
  if (b.tokens_per_s_rows >= 0) j["tokens_per_s_rows"] = b.tokens_per_s_rows;
  return j;
}

inline std::string format_number(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

inline const nlohmann::json& member(const nlohmann::json& j, const std::string& file, const std::string& ptr, const char* key) {
  if (!j.is_object()) throw config_error(file, ptr, std::string("expected an object, got ") + j.type_name());
  auto it = j.find(key);
  if (it == j.end()) throw config_error(file, ptr + "/" + key, "missing required field");
  return *it;
}
inline std::string text(const nlohmann::json& j, const std::string& file, const std::string& ptr, const char* key) {
  const auto& v = member(j, file, ptr, key);
  if (!v.is_string()) throw config_error(file, ptr + "/" + key, std::string("expected a string, got ") + v.type_name());
  return v.get<std::string>();
}
inline double number_in(const nlohmann::json& v, const std::string& file, const std::string& ptr, double lo, double hi) {
  if (!v.is_number() || !std::isfinite(v.get<double>()) || v.get<double>() < lo || v.get<double>() > hi)
    throw config_error(file, ptr, "expected a number between " + format_number(lo) + " and " + format_number(hi) + ", got " +
                                      v.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).substr(0, 40));
  return v.get<double>();
}
inline int count(const nlohmann::json& j, const std::string& file, const std::string& ptr, const char* key) {
  const auto& v = member(j, file, ptr, key);
  if (!v.is_number_integer() || v.get<std::int64_t>() < 0 || v.get<std::int64_t>() > 100000000)
    throw config_error(file, ptr + "/" + key, "expected a row count (an integer >= 0)");
  return static_cast<int>(v.get<std::int64_t>());
}

inline error_band band_from_json(const nlohmann::json& j, const std::string& file, const std::string& ptr) {
  error_band b;
  b.gpu = text(j, file, ptr, "gpu");
  b.stack = text(j, file, ptr, "stack");
  b.mode = text(j, file, ptr, "mode");
  b.rows = count(j, file, ptr, "rows");
  b.memory = number_in(member(j, file, ptr, "memory"), file, ptr + "/memory", 0, 10);
  b.tokens_per_s = number_in(member(j, file, ptr, "tokens_per_s"), file, ptr + "/tokens_per_s", 0, 10);
  // optional: the rows behind each quantity (a public group may have measured one without the other)
  for (const char* k : {"memory_rows", "tokens_per_s_rows"})
    if (j.contains(k)) {
      const int n = count(j, file, ptr, k);
      if (n > b.rows) throw config_error(file, ptr + "/" + k, "more than the group's rows (" + std::to_string(b.rows) + ")");
      (std::string_view(k) == "memory_rows" ? b.memory_rows : b.tokens_per_s_rows) = n;
    }
  return b;
}

}  // namespace detail

/// The JSON of error bands `b` (configs/error-bands.json): version, how it was generated, the inputs, the quantile,
/// the groups and the fallback. No date: regenerating from the same rows gives the same bytes.
[[nodiscard]] inline nlohmann::ordered_json error_bands_to_json(const error_bands& b, const std::vector<profile_input>& inputs,
                                                                const std::string& generated_by) {
  nlohmann::ordered_json j;
  j["bwplan_error_bands"] = error_bands_version;
  j["generated_by"] = generated_by;
  j["about"] = "relative half-widths: the quantile of |measured / estimate - 1| of peak reserved memory and tokens/s over the "
               "measured rows of each GPU / stack / mode group, with the default constants (docs/calibration.md#bands)";
  j["inputs"] = nlohmann::ordered_json::array();
  for (const auto& i : inputs) j["inputs"].push_back({{"file", i.file}, {"sha256", i.sha256}, {"rows", i.rows}});
  j["quantile"] = b.quantile;
  j["groups"] = nlohmann::ordered_json::array();
  for (const auto& g : b.groups) j["groups"].push_back(detail::band_to_json(g));
  j["fallback"] = detail::band_to_json(b.fallback);
  return j;
}

/// Reads an error-band file. Throws config_error naming the file and member.
[[nodiscard]] inline error_bands error_bands_from_json(const nlohmann::json& j, const std::string& file) {
  const auto& v = detail::member(j, file, "", "bwplan_error_bands");
  if (!v.is_number_integer() || v.get<std::int64_t>() != error_bands_version)
    throw config_error(file, "/bwplan_error_bands", "unsupported version (this bwplan reads version " + std::to_string(error_bands_version) + ")");
  error_bands b;
  b.quantile = detail::number_in(detail::member(j, file, "", "quantile"), file, "/quantile", 0.5, 1);
  const auto& g = detail::member(j, file, "", "groups");
  if (!g.is_array()) throw config_error(file, "/groups", "expected an array");
  for (std::size_t i = 0; i < g.size(); ++i) b.groups.push_back(detail::band_from_json(g[i], file, "/groups/" + std::to_string(i)));
  b.fallback = detail::band_from_json(detail::member(j, file, "", "fallback"), file, "/fallback");
  return b;
}

/// Reads the error-band file at `path`. Throws config_error.
[[nodiscard]] inline error_bands load_error_bands(const std::filesystem::path& path) {
  const std::string shown = display_path(path.string());
  return error_bands_from_json(parse_json(read_text_file(path), shown), shown);
}

/// The JSON of profile `p` (docs/calibration.md#profile). Every constant is written, fitted or not; `fitted` says which.
[[nodiscard]] inline nlohmann::ordered_json profile_to_json(const calibration_profile& p) {
  nlohmann::ordered_json j;
  j["bwplan_profile"] = p.version;
  j["bwplan_version"] = p.bwplan_version;
  j["created"] = p.created;
  j["inputs"] = nlohmann::ordered_json::array();
  for (const auto& i : p.inputs) j["inputs"].push_back({{"file", i.file}, {"sha256", i.sha256}, {"rows", i.rows}});
  j["entries"] = nlohmann::ordered_json::array();
  for (const auto& e : p.entries) {
    nlohmann::ordered_json x;
    x["gpu"] = e.gpu;
    x["stack"] = e.stack;
    x["rows"] = e.rows;
    x["software"] = e.software;
    x["fitted"] = e.fitted;
    x["measured"] = e.measured;
    nlohmann::ordered_json c;
    for (const auto& par : calibration_parameters()) c[std::string(par.name)] = get_constant(e.constants, par.name);
    x["constants"] = c;
    // the GPU's matmul factor the constants were fitted under (throughput_calibration::fitted_matmul)
    x["matmul_factor"] = e.constants.throughput.fitted_matmul > 0 ? e.constants.throughput.fitted_matmul : 1.0;
    x["error"] = {{"tokens_per_s", {{"before", e.tps_before}, {"after", e.tps_after}}},
                  {"peak_reserved", {{"before", e.reserved_before}, {"after", e.reserved_after}}}};
    if (e.band) x["band"] = {{"rows", e.band->rows}, {"memory", e.band->memory}, {"tokens_per_s", e.band->tokens_per_s}};
    j["entries"].push_back(x);
  }
  return j;
}

/// Reads a profile. Throws config_error naming the file, the member and the problem: another version, a missing
/// member, an unknown constant, a value outside the constant's bounds (calibration_parameters), an unknown stack.
[[nodiscard]] inline calibration_profile profile_from_json(const nlohmann::json& j, const std::string& file) {
  using namespace detail;
  calibration_profile p;
  const auto& v = member(j, file, "", "bwplan_profile");
  if (!v.is_number_integer() || v.get<std::int64_t>() != profile_version)
    throw config_error(file, "/bwplan_profile", "unsupported profile version " + v.dump().substr(0, 20) + " (this bwplan reads version " +
                                                    std::to_string(profile_version) + ")");
  p.version = profile_version;
  p.bwplan_version = text(j, file, "", "bwplan_version");
  p.created = text(j, file, "", "created");
  const auto& ins = member(j, file, "", "inputs");
  if (!ins.is_array()) throw config_error(file, "/inputs", "expected an array");
  for (std::size_t i = 0; i < ins.size(); ++i) {
    const std::string ptr = "/inputs/" + std::to_string(i);
    p.inputs.push_back({text(ins[i], file, ptr, "file"), text(ins[i], file, ptr, "sha256"), count(ins[i], file, ptr, "rows")});
  }
  const auto& es = member(j, file, "", "entries");
  if (!es.is_array() || es.empty()) throw config_error(file, "/entries", "expected a non-empty array");
  for (std::size_t i = 0; i < es.size(); ++i) {
    const std::string ptr = "/entries/" + std::to_string(i);
    const auto& x = es[i];
    profile_entry e;
    e.gpu = text(x, file, ptr, "gpu");
    e.stack = text(x, file, ptr, "stack");
    if (!parse_stack(e.stack)) throw config_error(file, ptr + "/stack", "unknown stack '" + e.stack.substr(0, 40) + "' (hf, torchtitan, torchtune, megatron)");
    e.rows = count(x, file, ptr, "rows");
    if (auto it = x.find("software"); it != x.end() && it->is_string()) e.software = it->get<std::string>();
    const auto& fitted = member(x, file, ptr, "fitted");
    if (!fitted.is_array()) throw config_error(file, ptr + "/fitted", "expected an array of constant names");
    for (std::size_t k = 0; k < fitted.size(); ++k) {
      if (!fitted[k].is_string() || !find_calibration_parameter(fitted[k].get<std::string>()))
        throw config_error(file, ptr + "/fitted/" + std::to_string(k), "not a constant bwplan knows");
      e.fitted.push_back(fitted[k].get<std::string>());
    }
    const auto& c = member(x, file, ptr, "constants");
    if (!c.is_object()) throw config_error(file, ptr + "/constants", "expected an object");
    for (auto it = c.begin(); it != c.end(); ++it) {
      const calibration_parameter* par = find_calibration_parameter(it.key());
      const std::string cp = ptr + "/constants/" + pointer_token(it.key());
      if (!par) throw config_error(file, cp, "unknown constant (known: gemm_max, gemm_half_k, gemm_half_mn, attention, memory, launch_s, nvlink, efa, cublas_workspace, fragmentation, cuda_context, nccl)");
      set_constant(e.constants, par->name, number_in(*it, file, cp, par->lo, par->hi));
    }
    // absent in the profiles written before bwplan ran GPUs at their measured matmul rates: fitted under 1
    e.constants.throughput.fitted_matmul =
        x.contains("matmul_factor") ? number_in(x.at("matmul_factor"), file, ptr + "/matmul_factor", 0.05, 2.0) : 1.0;
    if (auto it = x.find("measured"); it != x.end()) {
      if (!it->is_array()) throw config_error(file, ptr + "/measured", "expected an array of constant names");
      for (std::size_t k = 0; k < it->size(); ++k) {
        if (!(*it)[k].is_string() || !find_calibration_parameter((*it)[k].get<std::string>()))
          throw config_error(file, ptr + "/measured/" + std::to_string(k), "not a constant bwplan knows");
        e.measured.push_back((*it)[k].get<std::string>());
      }
    }
    for (const auto& fn : e.fitted)
      if (c.find(fn) == c.end()) throw config_error(file, ptr + "/constants/" + fn, "missing: the entry says it was fitted");
    if (auto it = x.find("band"); it != x.end()) {
      error_band b{e.gpu, e.stack, "*", count(*it, file, ptr + "/band", "rows"), 0, 0, -1, -1, {}, {}};
      b.memory = number_in(member(*it, file, ptr + "/band", "memory"), file, ptr + "/band/memory", 0, 10);
      b.tokens_per_s = number_in(member(*it, file, ptr + "/band", "tokens_per_s"), file, ptr + "/band/tokens_per_s", 0, 10);
      e.band = b;
    }
    if (p.find(e.gpu, e.stack)) throw config_error(file, ptr, "a second entry for " + e.gpu + " / " + e.stack);
    p.entries.push_back(std::move(e));
  }
  return p;
}

/// Reads the profile at `path`. Throws config_error.
[[nodiscard]] inline calibration_profile load_profile(const std::filesystem::path& path) {
  const std::string shown = display_path(path.string());
  return profile_from_json(parse_json(read_text_file(path), shown), shown);
}

}  // namespace bwplan::io
