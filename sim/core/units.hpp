#pragma once
// Strong unit types of the engine.
//
// Integral quantities (Bytes, TimePs) are int64 so that event times compare exactly and sums are
// associative; rates and FLOP counts are double because they come from measured efficiencies.
//
// The one rounding rule for rate -> ticks: a duration computed from an amount and a rate is
// rounded UP to the next picosecond (`duration_of`). A non-zero amount therefore never takes zero
// time, and a transfer or kernel never completes before its work could have been done.
//
// The clock is checked: a duration or a time that does not fit int64 picoseconds (2^63 - 1 ps,
// about 106.75 days) throws SimulationLimit (exit 3: the simulation cannot be done), never wraps.
#include <compare>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>
#include <string_view>

#include "sim/core/errors.hpp"

namespace offsim::sim {

/// The longest time the clock holds: 2^63 - 1 ps, about 106.75 days.
inline constexpr std::int64_t kMaxTimePs = std::numeric_limits<std::int64_t>::max();

/// Throws SimulationLimit for `a op b` (ps) leaving the clock. Out of line: the checks stay small.
[[noreturn]] void throw_time_overflow(std::int64_t a, char op, std::int64_t b);

struct Bytes {
  std::int64_t count = 0;
  constexpr Bytes() = default;
  constexpr explicit Bytes(std::int64_t n) : count(n) {}
  constexpr auto operator<=>(const Bytes&) const = default;
  constexpr Bytes operator+(Bytes o) const { return Bytes{count + o.count}; }
  constexpr Bytes operator-(Bytes o) const { return Bytes{count - o.count}; }
  constexpr Bytes& operator+=(Bytes o) {
    count += o.count;
    return *this;
  }
  constexpr Bytes& operator-=(Bytes o) {
    count -= o.count;
    return *this;
  }
  constexpr Bytes operator*(std::int64_t k) const { return Bytes{count * k}; }
  [[nodiscard]] constexpr double as_double() const { return static_cast<double>(count); }
};

struct TimePs {
  std::int64_t ps = 0;
  constexpr TimePs() = default;
  constexpr explicit TimePs(std::int64_t t) : ps(t) {}
  constexpr auto operator<=>(const TimePs&) const = default;
  // Checked: a sum or difference that leaves int64 throws SimulationLimit instead of wrapping.
  constexpr TimePs operator+(TimePs o) const {
    std::int64_t r = 0;
    if (__builtin_add_overflow(ps, o.ps, &r)) [[unlikely]]
      throw_time_overflow(ps, '+', o.ps);
    return TimePs{r};
  }
  constexpr TimePs operator-(TimePs o) const {
    std::int64_t r = 0;
    if (__builtin_sub_overflow(ps, o.ps, &r)) [[unlikely]]
      throw_time_overflow(ps, '-', o.ps);
    return TimePs{r};
  }
  constexpr TimePs& operator+=(TimePs o) { return *this = *this + o; }
  /// k times this duration, checked as the sum of k of them would be.
  [[nodiscard]] constexpr TimePs times(std::int64_t k) const {
    std::int64_t r = 0;
    if (__builtin_mul_overflow(ps, k, &r)) [[unlikely]]
      throw_time_overflow(ps, '*', k);
    return TimePs{r};
  }
  [[nodiscard]] constexpr double seconds() const { return static_cast<double>(ps) * 1e-12; }
  static constexpr TimePs max() { return TimePs{kMaxTimePs}; }
  static constexpr TimePs from_us(std::int64_t us) {
    std::int64_t r = 0;
    if (__builtin_mul_overflow(us, std::int64_t{1'000'000}, &r)) [[unlikely]]
      throw_time_overflow(us, '*', 1'000'000);
    return TimePs{r};
  }
};

inline constexpr std::int64_t kPsPerSecond = 1'000'000'000'000;

struct Bandwidth {
  double bytes_per_s = 0.0;
  constexpr auto operator<=>(const Bandwidth&) const = default;
  constexpr Bandwidth operator*(double k) const { return Bandwidth{bytes_per_s * k}; }
};

struct Flops {
  double count = 0.0;
  constexpr auto operator<=>(const Flops&) const = default;
  constexpr Flops operator+(Flops o) const { return Flops{count + o.count}; }
  constexpr Flops& operator+=(Flops o) {
    count += o.count;
    return *this;
  }
  constexpr Flops operator*(double k) const { return Flops{count * k}; }
};

struct FlopRate {
  double flops_per_s = 0.0;
  constexpr auto operator<=>(const FlopRate&) const = default;
  constexpr FlopRate operator*(double k) const { return FlopRate{flops_per_s * k}; }
};

/// Time to process `amount` units at `rate` units/s, rounded up to the next picosecond; `unit`
/// names the amount in messages ("B", "FLOP"). Throws SimulationLimit when the duration does not
/// fit the clock (above 2^63 - 1 ps; 1 GB at 1 GB/s is exactly 1e12 ps), and std::domain_error
/// (a bug: readers refuse such rates) for a non-positive rate with a positive amount or an amount
/// or rate that is not a number.
[[nodiscard]] TimePs duration_of(double amount, double rate_per_s, std::string_view unit = "B");
[[nodiscard]] inline TimePs operator/(Bytes b, Bandwidth bw) {
  return duration_of(b.as_double(), bw.bytes_per_s, "B");
}
[[nodiscard]] inline TimePs operator/(Flops f, FlopRate r) {
  return duration_of(f.count, r.flops_per_s, "FLOP");
}
/// Seconds to the clock, rounded to the nearest picosecond; SimulationLimit when it does not fit.
[[nodiscard]] TimePs seconds_to_time(double seconds);

/// A unit string that could not be read. The message says what was expected, with an example.
class UnitError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Unit-string parsers. A number and a unit, optional space between: "36 GB/s", "1.5 us",
// "64 GiB", "191.5 TFLOP/s". SI prefixes are powers of 1000 (kB, MB, GB), IEC prefixes powers of
// 1024 (KiB, MiB, GiB); "KB" is rejected as ambiguous. Bit rates ("200 Gb/s") divide by 8.
// A bare number is an error: a dimensional value must say its unit.
[[nodiscard]] Bytes parse_bytes(std::string_view text);
[[nodiscard]] TimePs parse_time(std::string_view text);
[[nodiscard]] Bandwidth parse_bandwidth(std::string_view text);
[[nodiscard]] Flops parse_flops(std::string_view text);
[[nodiscard]] FlopRate parse_flop_rate(std::string_view text);

// Human-readable formatting, normalised (used in reports and the resolved configuration).
[[nodiscard]] std::string format_bytes(Bytes b);           // IEC: "1.50 GiB"
[[nodiscard]] std::string format_time(TimePs t);           // "12.345 ms"
[[nodiscard]] std::string format_bandwidth(Bandwidth bw);  // SI: "36.0 GB/s"
[[nodiscard]] std::string format_flop_rate(FlopRate r);    // "191.5 TFLOP/s"

}  // namespace offsim::sim
