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
//   offload host rates from DeepSpeed training timings (fit_offload_host below)
// The output YAML records the command line, the source files and each fit's residual.
#include <filesystem>
#include <optional>
#include <stdexcept>
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

/// Error in a calibration input, naming file:line and the column.
class CalibrationError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// One DeepSpeed 0.13 ZeRO-3 training run with the whole optimizer offloaded to the host (ratio 1),
/// as `bench/data/offload-polaris-a100.csv` records them (DeepSpeed timers, seconds).
struct OffloadTimingRow {
  double params_per_rank = 0.0;  // the rank's optimizer partition: parameters / data-parallel ranks
  int ranks_per_node = 0;        // ranks sharing one host
  int grad_accum = 0;
  double forward_s = 0.0, backward_s = 0.0, step_s = 0.0;
};

/// Host rates that explain offloaded training timings through the simulator's own model of
/// DeepSpeed 0.13's ZeRO-3 offload path (models/strategies/data_parallel.cpp):
///  - step: per subgroup, CPU Adam (28 B of DDR traffic per element) and the CPU down-cast (6 B)
///    stream through the host's cores, whose throughput `cpu_work` the node's k ranks share; then
///    a per-rank pageable H2D of the bf16 parameters (2 B). The ranks go through their subgroups
///    in step (same sizes, started together by the gradient-norm all-reduce), so the copies do not
///    overlap other ranks' CPU work: step = N (k u + v), u = 34 B / cpu_work, v = 2 B / h2d_pageable,
///    least squares in (u, v) on relative residuals.
///  - backward, k = 1 and one micro-step (every bucket's boundary copies block the backward):
///    backward = 3 x forward (recomputation + backward, from the measured forward) +
///    N (2 B + 2 B pinned ping-pong at `pinned` + 2 B pageable D2H + 6 B up-cast through the cores);
///    the mean over rows gives d2h_pageable. Rows with k >= 2 or several micro-steps are not used.
struct OffloadHostFit {
  sim::Bandwidth cpu_work;
  sim::Bandwidth h2d_pageable;
  std::optional<sim::Bandwidth> d2h_pageable;  // nullopt without single-rank, one-micro-step rows
  std::size_t step_rows = 0, backward_rows = 0;
  double step_max_relative_residual = 0.0, backward_max_relative_residual = 0.0;
};

/// Throws CalibrationError when the rows cannot determine the rates (one rank count per node only,
/// or no positive solution).
[[nodiscard]] OffloadHostFit fit_offload_host(const std::vector<OffloadTimingRow>& rows, sim::Bandwidth pinned);

struct CalibrateOptions {
  std::vector<std::filesystem::path> files;
  std::string device_kind;
  std::vector<std::string> filters;   // column=value
  std::optional<sim::FlopRate> peak;  // needed for gemm rows
  // The host link's pinned copy rate, needed for training-timing rows (the backward's pinned
  // ping-pong copies run at it in the simulator).
  std::optional<sim::Bandwidth> pinned_bandwidth;
  // Only all_reduce measured: write reduce_scatter fits from it. A ring all-reduce is a
  // reduce-scatter followed by an all-gather, so at the same bus bandwidth (nccl-tests
  // PERFORMANCE.md) a reduce-scatter of the same buffer takes half the all-reduce's time.
  bool reduce_scatter_from_all_reduce = false;
  std::string command_line;  // recorded in the output
};

/// The calibration table as YAML text. Throws CalibrationError for bad input or no usable rows.
/// `poor_fits`, when given, receives one line per fit whose line misses a measured row by more
/// than `kPoorFitResidual` (the table still holds it: the line model may not suit those rows).
[[nodiscard]] std::string calibrate(const CalibrateOptions& options, std::vector<std::string>* poor_fits = nullptr);

/// The largest relative residual of a fit that `calibrate` does not report as poor.
inline constexpr double kPoorFitResidual = 0.2;

}  // namespace offsim::models
