#pragma once
// `offsim calibrate`: fit cost tables to microbenchmark measurements.
//
// Input: CSV files with a header row. The columns of bench/hip/bench_csv.hpp are read by name, and
// the measured-collective files of bench/data/ are read through aliases (collective -> benchmark,
// gcds -> ranks, total_bytes -> bytes, mean_time_s -> time_s). `--filter column=value` keeps only
// matching rows.
//
// Fits (ordinary least squares with Eigen), one per group of rows:
//   copies (h2d, d2h, peer) by benchmark and memory:   t = latency + bytes / bandwidth
//   collectives by benchmark and ranks g (ring model):  t = steps x step_latency + x / bus_bandwidth
//       all_gather, reduce_scatter: steps = g - 1, x = (g-1)/g x bytes;  all_reduce: 2(g-1), 2(g-1)/g x bytes
//   cpu_adam by threads:                                params_per_s = elements / time (mean)
//   gemm by shape (needs the peak rate):                efficiency = 2 m n k / time / peak
// The output YAML records the command line, the source files and each fit's residual.
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "sim/core/units.hpp"

namespace offsim::models {

struct LineFit {
  double intercept = 0.0;
  double slope = 0.0;
  std::size_t rows = 0;
  double max_relative_residual = 0.0;  // max |fit - y| / y
};

/// Least-squares fit of y = intercept + slope x. Throws std::invalid_argument for fewer than two
/// distinct x values.
[[nodiscard]] LineFit fit_line(const std::vector<double>& x, const std::vector<double>& y);

struct CalibrateOptions {
  std::vector<std::filesystem::path> files;
  std::string device_kind;
  std::vector<std::string> filters;   // column=value
  std::optional<sim::FlopRate> peak;  // needed for gemm rows
  std::string command_line;           // recorded in the output
};

/// Error in a calibration input, naming file:line and the column.
class CalibrationError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// The calibration table as YAML text. Throws CalibrationError for bad input or no usable rows.
[[nodiscard]] std::string calibrate(const CalibrateOptions& options);

}  // namespace offsim::models
