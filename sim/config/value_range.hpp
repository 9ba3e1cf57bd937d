#pragma once
// The range of a configuration value, defined once and used by every reader of that value (the
// native YAML, a DeepSpeed ds_config, a Hugging Face config.json; --set overrides, sweep points and
// search candidates are read through those same readers), so that no reader lets through what
// another refuses (issue 32: a ds_config offload ratio of -1 crashed the simulator while the native
// key refused it). Where the bounds come from is said next to each definition.
#include <fmt/format.h>

#include <string>
#include <string_view>
#include <type_traits>

#include "sim/config/config_reader.hpp"

namespace offsim::sim::config {

template <class T>
struct ValueRange {
  T min;
  T max;
  bool min_excluded = false;  // (min, max] instead of [min, max]
  std::string_view why;       // why the bounds, said in the error: "offsim's limit", "DeepSpeed's range"

  /// Whether `v` is inside (NaN never is).
  [[nodiscard]] constexpr bool contains(T v) const { return (min_excluded ? v > min : v >= min) && v <= max; }

  /// "expected 1 to 65536 (offsim's limit)", or "expected more than 0 and at most 1 (...)".
  [[nodiscard]] std::string expected() const {
    const std::string lo = bound(min), hi = bound(max);
    std::string s = min_excluded ? fmt::format("expected more than {} and at most {}", lo, hi)
                                 : fmt::format("expected {} to {}", lo, hi);
    if (!why.empty()) s += fmt::format(" ({})", why);
    return s;
  }

 private:
  // A bound of a real value as %g writes it (1e+15, not sixteen digits).
  static std::string bound(T v) {
    if constexpr (std::is_floating_point_v<T>) {
      return fmt::format("{:g}", v);
    } else {
      return fmt::format("{}", v);
    }
  }
};

/// Records "expected A to B (why), got v" at `at` under `path` when `value` is outside `range`;
/// returns whether it is inside.
template <class T>
bool check_range(Context& ctx, const Location& at, std::string_view path, T value, const ValueRange<T>& range) {
  if (range.contains(value)) return true;
  ctx.error(at, path, fmt::format("{}, got {}", range.expected(), value));
  return false;
}

}  // namespace offsim::sim::config
