#include "sim/core/units.hpp"

#include <fmt/format.h>
#include <array>
#include <charconv>
#include <cmath>
#include <optional>
#include <utility>

namespace offsim::sim {

namespace {

// 2^63 as a double: the first value that does not fit int64 (kMaxTimePs itself rounds up to it).
constexpr double kTwoTo63 = 9223372036854775808.0;

std::string clock_limit() {
  return fmt::format("the simulated clock holds at most {} ps (2^63 - 1 ps, about {:.2f} days)", kMaxTimePs,
                     static_cast<double>(kMaxTimePs) * 1e-12 / 86400.0);
}

}  // namespace

void throw_time_overflow(std::int64_t a, char op, std::int64_t b) {
  throw SimulationLimit(
      fmt::format("simulated time out of range: {} ps {} {} ps does not fit; {}", a, op, b, clock_limit()));
}

TimePs duration_of(double amount, double rate_per_s, std::string_view unit) {
  if (std::isnan(amount) || std::isnan(rate_per_s)) {
    throw std::domain_error(
        fmt::format("duration_of: {} {} at {} {}/s is not a number", amount, unit, rate_per_s, unit));
  }
  if (amount <= 0.0) return TimePs{0};
  if (!(rate_per_s > 0.0)) throw std::domain_error(fmt::format("duration_of: rate {} must be positive", rate_per_s));
  // Multiply before dividing: whole amounts at round rates then give exact picoseconds.
  const double ps = std::ceil(amount * static_cast<double>(kPsPerSecond) / rate_per_s);
  if (!(ps < kTwoTo63)) {
    throw SimulationLimit(fmt::format("a duration of {:.4g} s ({:.6g} {} at {:.6g} {}/s) does not fit: {}",
                                      amount / rate_per_s, amount, unit, rate_per_s, unit, clock_limit()));
  }
  return TimePs{static_cast<std::int64_t>(ps)};
}

TimePs seconds_to_time(double seconds) {
  const double ps = std::round(seconds * static_cast<double>(kPsPerSecond));
  if (!(ps < kTwoTo63 && ps >= -kTwoTo63)) {
    throw SimulationLimit(fmt::format("a time of {:.6g} s does not fit: {}", seconds, clock_limit()));
  }
  return TimePs{static_cast<std::int64_t>(ps)};
}

namespace {

struct Quantity {
  double value;
  std::string_view unit;
};

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// Splits "36 GB/s" into 36 and "GB/s". `what` and `example` only feed the error message.
Quantity split_quantity(std::string_view text, std::string_view what, std::string_view example) {
  const std::string_view s = trim(text);
  double value = 0.0;
  const auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), value);
  if (ec != std::errc{} || ptr == s.data()) {
    throw UnitError(fmt::format("expected {} such as \"{}\", got \"{}\"", what, example, text));
  }
  if (!std::isfinite(value) || value < 0.0) {
    throw UnitError(
        fmt::format("expected {} such as \"{}\" (non-negative and finite), got \"{}\"", what, example, text));
  }
  const std::string_view unit = trim(s.substr(static_cast<std::size_t>(ptr - s.data())));
  if (unit.empty()) {
    throw UnitError(fmt::format("expected {} such as \"{}\", got the bare number \"{}\" (a unit is required)", what,
                                example, text));
  }
  return {value, unit};
}

struct Prefix {
  std::string_view name;
  double factor;
};
// Order matters: longer IEC prefixes are tried before the one-letter SI ones.
constexpr std::array<Prefix, 13> kBytePrefixes{{{"Ki", 1024.0},
                                                {"Mi", 1048576.0},
                                                {"Gi", 1073741824.0},
                                                {"Ti", 1099511627776.0},
                                                {"Pi", 1125899906842624.0},
                                                {"k", 1e3},
                                                {"M", 1e6},
                                                {"G", 1e9},
                                                {"T", 1e12},
                                                {"P", 1e15},
                                                {"E", 1e18},
                                                {"K", -1.0},  // ambiguous, rejected
                                                {"", 1.0}}};
constexpr std::array<Prefix, 8> kSiPrefixes{
    {{"k", 1e3}, {"M", 1e6}, {"G", 1e9}, {"T", 1e12}, {"P", 1e15}, {"E", 1e18}, {"K", 1e3}, {"", 1.0}}};

// Matches `unit` as <prefix><base>; returns the prefix factor.
template <std::size_t N>
std::optional<double> match_prefixed(std::string_view unit, std::string_view base,
                                     const std::array<Prefix, N>& prefixes) {
  if (unit.size() < base.size() || unit.substr(unit.size() - base.size()) != base) return std::nullopt;
  const std::string_view prefix = unit.substr(0, unit.size() - base.size());
  for (const auto& p : prefixes) {
    if (p.name == prefix) return p.factor;
  }
  return std::nullopt;
}

std::optional<double> byte_factor(std::string_view unit, std::string_view text) {
  if (auto f = match_prefixed(unit, "B", kBytePrefixes)) {
    if (*f < 0.0) throw UnitError(fmt::format("\"{}\" is ambiguous: write kB (1000 B) or KiB (1024 B)", text));
    return f;
  }
  return std::nullopt;
}

std::int64_t to_int64_checked(double v, std::string_view text, std::string_view what) {
  if (v >= 9.2e18) throw UnitError(fmt::format("{} \"{}\" is too large", what, text));
  return static_cast<std::int64_t>(std::llround(v));
}

}  // namespace

Bytes parse_bytes(std::string_view text) {
  constexpr std::string_view kWhat = "a size";
  constexpr std::string_view kExample = "64 GiB";
  const auto q = split_quantity(text, kWhat, kExample);
  const auto f = byte_factor(q.unit, text);
  if (!f)
    throw UnitError(fmt::format("expected {} such as \"{}\" (B, kB, MB, GB, KiB, MiB, GiB, ...), got \"{}\"", kWhat,
                                kExample, text));
  const double bytes = q.value * *f;
  if (std::fabs(bytes - std::round(bytes)) > 1e-6 * std::max(1.0, bytes) && bytes < 1e15) {
    throw UnitError(fmt::format("size \"{}\" is not a whole number of bytes", text));
  }
  return Bytes{to_int64_checked(bytes, text, "size")};
}

TimePs parse_time(std::string_view text) {
  constexpr std::string_view kWhat = "a duration";
  constexpr std::string_view kExample = "1.5 us";
  const auto q = split_quantity(text, kWhat, kExample);
  static constexpr std::array<std::pair<std::string_view, double>, 9> kUnits{{{"ps", 1.0},
                                                                              {"ns", 1e3},
                                                                              {"us", 1e6},
                                                                              {"µs", 1e6},
                                                                              {"ms", 1e9},
                                                                              {"s", 1e12},
                                                                              {"min", 60e12},
                                                                              {"h", 3600e12},
                                                                              {"d", 86400e12}}};
  for (const auto& [name, factor] : kUnits) {
    if (q.unit == name) {
      const double ps = q.value * factor;
      if (ps > 0.0 && ps < 0.5) throw UnitError(fmt::format("duration \"{}\" is below the 1 ps resolution", text));
      return TimePs{to_int64_checked(ps, text, "duration")};
    }
  }
  throw UnitError(
      fmt::format("expected {} such as \"{}\" (ps, ns, us, ms, s, min, h), got \"{}\"", kWhat, kExample, text));
}

Bandwidth parse_bandwidth(std::string_view text) {
  constexpr std::string_view kWhat = "a bandwidth";
  constexpr std::string_view kExample = "36 GB/s";
  const auto q = split_quantity(text, kWhat, kExample);
  if (q.unit.size() > 2 && q.unit.substr(q.unit.size() - 2) == "/s") {
    const std::string_view per = q.unit.substr(0, q.unit.size() - 2);
    if (auto f = byte_factor(per, text)) return Bandwidth{q.value * *f};
    if (auto f = match_prefixed(per, "b", kSiPrefixes)) return Bandwidth{q.value * *f / 8.0};
  }
  throw UnitError(
      fmt::format("expected {} such as \"{}\" (B/s with SI or IEC prefix, or bits: \"200 Gb/s\"), got \"{}\"", kWhat,
                  kExample, text));
}

Flops parse_flops(std::string_view text) {
  constexpr std::string_view kWhat = "a FLOP count";
  constexpr std::string_view kExample = "3.2 TFLOP";
  const auto q = split_quantity(text, kWhat, kExample);
  if (auto f = match_prefixed(q.unit, "FLOP", kSiPrefixes)) return Flops{q.value * *f};
  throw UnitError(fmt::format("expected {} such as \"{}\", got \"{}\"", kWhat, kExample, text));
}

FlopRate parse_flop_rate(std::string_view text) {
  constexpr std::string_view kWhat = "a FLOP rate";
  constexpr std::string_view kExample = "191.5 TFLOP/s";
  const auto q = split_quantity(text, kWhat, kExample);
  if (auto f = match_prefixed(q.unit, "FLOP/s", kSiPrefixes)) return FlopRate{q.value * *f};
  if (auto f = match_prefixed(q.unit, "FLOPS", kSiPrefixes)) return FlopRate{q.value * *f};
  throw UnitError(fmt::format("expected {} such as \"{}\", got \"{}\"", kWhat, kExample, text));
}

std::string format_bytes(Bytes b) {
  const double v = b.as_double();
  const double a = std::fabs(v);
  if (a >= 1099511627776.0) return fmt::format("{:.2f} TiB", v / 1099511627776.0);
  if (a >= 1073741824.0) return fmt::format("{:.2f} GiB", v / 1073741824.0);
  if (a >= 1048576.0) return fmt::format("{:.2f} MiB", v / 1048576.0);
  if (a >= 1024.0) return fmt::format("{:.2f} KiB", v / 1024.0);
  return fmt::format("{} B", b.count);
}

std::string format_time(TimePs t) {
  const double s = t.seconds();
  const double a = std::fabs(s);
  if (a >= 1.0) return fmt::format("{:.3f} s", s);
  if (a >= 1e-3) return fmt::format("{:.3f} ms", s * 1e3);
  if (a >= 1e-6) return fmt::format("{:.3f} us", s * 1e6);
  return fmt::format("{:.3f} ns", s * 1e9);
}

std::string format_bandwidth(Bandwidth bw) {
  const double v = bw.bytes_per_s;
  if (v >= 1e12) return fmt::format("{:.2f} TB/s", v / 1e12);
  if (v >= 1e9) return fmt::format("{:.1f} GB/s", v / 1e9);
  if (v >= 1e6) return fmt::format("{:.1f} MB/s", v / 1e6);
  return fmt::format("{:.0f} B/s", v);
}

std::string format_flop_rate(FlopRate r) {
  const double v = r.flops_per_s;
  if (v >= 1e15) return fmt::format("{:.2f} PFLOP/s", v / 1e15);
  if (v >= 1e12) return fmt::format("{:.1f} TFLOP/s", v / 1e12);
  return fmt::format("{:.1f} GFLOP/s", v / 1e9);
}

}  // namespace offsim::sim
