// bwplan: GPU memory and throughput planning for LLM training
// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <compare>

namespace bwplan {

/// A quantity with a compile-time dimension tag; the value is held in the base unit
/// (byte, second, FLOP, byte/s, FLOP/s) as a double (FP4 stores half a byte per element).
/// Construct and read through named units: `bytes::base(x)`, `q.in(gib)`.
template <class Dim>
class quantity {
 public:
  constexpr quantity() = default;
  /// Builds a quantity from a value already in the base unit.
  [[nodiscard]] static constexpr quantity base(double v) noexcept { return quantity{v}; }
  /// The value expressed in `unit` (for display and for JSON keys that name their unit).
  [[nodiscard]] constexpr double in(quantity unit) const noexcept { return value_ / unit.value_; }
  /// The value in the base unit.
  [[nodiscard]] constexpr double raw() const noexcept { return value_; }

  friend constexpr quantity operator+(quantity a, quantity b) noexcept { return quantity{a.value_ + b.value_}; }
  friend constexpr quantity operator-(quantity a, quantity b) noexcept { return quantity{a.value_ - b.value_}; }
  friend constexpr quantity operator*(double k, quantity q) noexcept { return quantity{k * q.value_}; }
  friend constexpr quantity operator*(quantity q, double k) noexcept { return quantity{k * q.value_}; }
  friend constexpr quantity operator/(quantity q, double k) noexcept { return quantity{q.value_ / k}; }
  friend constexpr double operator/(quantity a, quantity b) noexcept { return a.value_ / b.value_; }
  constexpr quantity& operator+=(quantity o) noexcept { value_ += o.value_; return *this; }
  constexpr quantity& operator-=(quantity o) noexcept { value_ -= o.value_; return *this; }
  friend constexpr auto operator<=>(const quantity&, const quantity&) = default;

 private:
  explicit constexpr quantity(double v) noexcept : value_(v) {}
  double value_ = 0;
};

struct bytes_dim {};
struct seconds_dim {};
struct flops_dim {};
struct byte_rate_dim {};
struct flop_rate_dim {};

using bytes = quantity<bytes_dim>;          ///< memory size, base unit byte
using seconds = quantity<seconds_dim>;      ///< time, base unit second
using flops = quantity<flops_dim>;          ///< floating-point operations (a count)
using byte_rate = quantity<byte_rate_dim>;  ///< bandwidth, base unit byte/s
using flop_rate = quantity<flop_rate_dim>;  ///< compute rate, base unit FLOP/s

inline constexpr bytes byte = bytes::base(1);
inline constexpr bytes kib = bytes::base(1024.0);
inline constexpr bytes mib = bytes::base(1024.0 * 1024.0);
inline constexpr bytes gib = bytes::base(1024.0 * 1024.0 * 1024.0);
inline constexpr bytes gb = bytes::base(1e9);
inline constexpr seconds second = seconds::base(1);
inline constexpr seconds microsecond = seconds::base(1e-6);
inline constexpr byte_rate gb_per_s = byte_rate::base(1e9);
inline constexpr byte_rate tb_per_s = byte_rate::base(1e12);
inline constexpr flop_rate tflop_per_s = flop_rate::base(1e12);

/// Transfer time of `b` at rate `r`.
[[nodiscard]] constexpr seconds operator/(bytes b, byte_rate r) noexcept { return seconds::base(b.raw() / r.raw()); }
/// Compute time of `f` at rate `r`.
[[nodiscard]] constexpr seconds operator/(flops f, flop_rate r) noexcept { return seconds::base(f.raw() / r.raw()); }

static_assert((80 * gb).in(gib) < 75, "GB and GiB must not be confused");

}  // namespace bwplan
