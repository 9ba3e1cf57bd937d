#pragma once
// Sweeps: one base experiment, axes of overrides, one CSV row per point (docs/sweeps.md).
//
//   name: scaling
//   base: ../experiments/neox20b-frontier-3level.yaml
//   axes:
//     - {key: experiment, values: [../experiments/neox20b-frontier-zero3.yaml, ...]}   # swaps the base
//     - zip:                                            # these vary together
//         - {key: hardware.nodes, values: [2, 6, 48]}
//         - {key: strategy.dp, values: [16, 48, 384]}
//     - {key: training.micro_batch, range: {from: 1, to: 4, step: 1}}
//   where: ["training.micro_batch <= 2"]               # optional: keep points that satisfy all
//
// Points are the grid (cartesian product) of the axes, a zip counting as one axis, in order with
// the last axis varying fastest; `where` filters them. Point indices never change with --jobs,
// ranks or resumption, so the final CSV (rows sorted by index) is always the same.
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "models/collectives/plan.hpp"
#include "models/experiment.hpp"

namespace offsim::models {

struct SweepPoint {
  std::size_t index = 0;
  std::filesystem::path experiment;
  std::vector<std::pair<std::string, std::string>> values;  // axis key -> value, in axis order
  // When not empty, the overrides that make this point, applied instead of the axis values (which
  // then only label the row): offsim search labels its points by strategy.
  std::vector<std::string> overrides;
  // How much simulating this point costs relative to the sweep's other points, for scheduling
  // only (0: unknown): `run_sweep` hands the costliest points to its workers first, so that the
  // last point to finish is a short one (largest first). It never changes a row or its place.
  double relative_work = 0.0;
};

struct Sweep {
  std::string name;
  std::vector<std::string> keys;  // axis keys in column order
  std::vector<SweepPoint> points;
  // The collective fidelity every point runs with; nullopt: as each experiment file says.
  // `offsim sweep` defaults to analytic (docs/sweeps.md): the same iteration times as flow on
  // the shipped sweep, several times faster, and link bytes still reported.
  std::optional<Fidelity> collective_fidelity;
};

/// Reads a sweep file. Throws sim::config::ConfigError naming file:line:col for bad input.
[[nodiscard]] Sweep load_sweep(const std::filesystem::path& file);

/// The CSV header: index, the axis keys, then the figures of each point.
[[nodiscard]] std::string sweep_header(const Sweep& sweep);
/// Simulates one point and returns its CSV row (with a trailing newline). Never throws: a point
/// whose configuration is invalid or whose simulation fails gets status "error" and the message.
/// `cache`: machines and calibration tables shared by the points (ReadCache).
[[nodiscard]] std::string run_sweep_point(const Sweep& sweep, const SweepPoint& point, ReadCache* cache = nullptr);

struct SweepOptions {
  std::filesystem::path out;
  int jobs = 1;
  bool resume = false;
  // Called after each finished point (done, total) from the thread that finished it, under the
  // output lock; for progress display.
  std::function<void(std::size_t, std::size_t)> progress;
  // Called first in each worker thread the sweep starts (--jobs > 1), e.g. to set up its heap.
  std::function<void()> on_worker_start;
  // What the caller already read through a ReadCache (the search's base experiment: its machine and
  // tables are every point's), shared with the points; null: the sweep reads through its own.
  ReadCache* reads = nullptr;
  // `out` is the caller's journal, which it turns into files of its own and removes (the search's
  // search.partial.csv): left in the order its rows finished, not rewritten sorted at the end
  // (the caller sorts them: sorted_csv).
  bool out_is_journal = false;
};

struct SweepSummary {
  std::size_t points = 0;
  std::size_t skipped = 0;  // already in the file (--resume)
  std::size_t ran = 0;
};

/// Runs the points not yet in `out` (when resuming), appending each row as its point finishes and
/// flushing it; when the rows did not arrive in index order or rows were already there, rewrites
/// `out` atomically at the end with all of them sorted by index (unless out_is_journal). Without
/// --resume an existing `out` is an error (nothing a user produced is overwritten by accident).
SweepSummary run_sweep(const Sweep& sweep, const SweepOptions& options);

/// Indices of the rows already complete in `out` (a torn last line is ignored); empty when the
/// file does not exist. Throws std::runtime_error when the header differs from the sweep's.
[[nodiscard]] std::vector<std::string> finished_rows(const Sweep& sweep, const std::filesystem::path& out);

/// The sweep's CSV: its header, then `rows` (finished_rows) sorted by their index.
[[nodiscard]] std::string sorted_csv(const Sweep& sweep, std::vector<std::string> rows);

/// Rewrites `out` atomically (waiting for the disk): sorted_csv(sweep, rows).
void write_sorted(const Sweep& sweep, const std::filesystem::path& out, std::vector<std::string> rows);

/// The `top` feasible rows of a finished sweep CSV ranked by `metric` (a column; larger is better
/// for tflops, mfu and tokens, smaller for times and bytes), as a text table with each row's
/// distance from the best; points within `tie` (a fraction) of the best are named as tied, since
/// the model cannot tell them apart.
[[nodiscard]] std::string best_points(const std::filesystem::path& csv, const std::string& metric, std::size_t top,
                                      double tie = 0.0);

}  // namespace offsim::models
