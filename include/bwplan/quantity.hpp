// bwplan: GPU memory and throughput planning for LLM training
// SPDX-License-Identifier: Apache-2.0
#pragma once

// Quantities as users type them: token counts with K/M/B/T suffixes and durations with s/m/h/d/w units.
// Standard library only. Errors name the caller's label (`what`), e.g. the flag or the plan key.

#include <bwplan/error.hpp>

#include <cctype>
#include <cmath>
#include <cstdio>
#include <string>

namespace bwplan {

/// Parses a token count with an optional K/M/B/T suffix (powers of 1000; G = B), e.g. "100B", "1T", "2.5e9",
/// "4M". Returns tokens, finite, in [1, 1e18]. Throws invalid_request "`what`: …" otherwise.
[[nodiscard]] inline double parse_token_count(const std::string& text, const std::string& what) {
  std::size_t pos = 0;
  double v = 0;
  try {
    v = std::stod(text, &pos);
  } catch (const std::exception&) {
    throw invalid_request(what + ": expected a token count such as 100B or 1T, got '" + text + "'");
  }
  const std::string rest = text.substr(pos);
  double mult = 1;
  if (rest.size() == 1) {
    switch (std::toupper(static_cast<unsigned char>(rest[0]))) {
      case 'K': mult = 1e3; break;
      case 'M': mult = 1e6; break;
      case 'B': case 'G': mult = 1e9; break;
      case 'T': mult = 1e12; break;
      default: throw invalid_request(what + ": unknown suffix '" + rest + "' (use K, M, B or T), got '" + text + "'");
    }
  } else if (!rest.empty()) {
    throw invalid_request(what + ": expected a token count such as 100B or 1T, got '" + text + "'");
  }
  v *= mult;
  if (!(v >= 1 && v <= 1e18)) throw invalid_request(what + ": must be between 1 and 1e18 tokens, got '" + text + "'");
  return v;
}

/// Parses a duration such as "3600s", "90m", "72h", "3d" or "1w" into seconds; a number without a unit counts
/// `unitless_s` seconds. Returns seconds, finite, in (0, 10 years]. Throws invalid_request "`what`: …" otherwise.
[[nodiscard]] inline double parse_duration(const std::string& text, const std::string& what, double unitless_s = 3600) {
  const std::string bad = what + ": expected a positive duration such as 3600s, 90m, 36h, 2d or 1w, got '" + text + "'";
  std::size_t pos = 0;
  double v = 0;
  try {
    v = std::stod(text, &pos);
  } catch (const std::exception&) {
    throw invalid_request(bad);
  }
  const std::string rest = text.substr(pos);
  double mult = unitless_s;
  if (rest == "s") mult = 1;
  else if (rest == "m" || rest == "min") mult = 60;
  else if (rest == "h") mult = 3600;
  else if (rest == "d") mult = 86400;
  else if (rest == "w") mult = 7 * 86400;
  else if (!rest.empty()) throw invalid_request(what + ": unknown unit '" + rest + "' (use s, m, h, d or w), got '" + text + "'");
  if (!(v > 0) || !std::isfinite(v)) throw invalid_request(bad);
  const double s = v * mult;
  constexpr double ten_years = 10 * 365.25 * 86400;
  if (!(s <= ten_years)) throw invalid_request(what + ": longer than 10 years, got '" + text + "'");
  return s;
}

/// Human-readable duration of `s` ≥ 0 seconds, e.g. "45 s", "3.2 h", "4.1 d".
[[nodiscard]] inline std::string human_duration(double s) {
  char buf[64];
  if (s < 120) std::snprintf(buf, sizeof buf, "%.0f s", s);
  else if (s < 7200) std::snprintf(buf, sizeof buf, "%.1f min", s / 60);
  else if (s < 3 * 86400) std::snprintf(buf, sizeof buf, "%.1f h", s / 3600);
  else std::snprintf(buf, sizeof buf, "%.1f d", s / 86400);
  return buf;
}

}  // namespace bwplan
