#pragma once
// `offsim validate`: predictions against published measurements, with the error shown.
//
// A case file (configs/validation/**/*.yaml) names an experiment, the overrides that reproduce
// the measured setup, the measured values and where they come from, what was uncertain, and
// optionally a known gap (a measurement the model cannot explain yet, kept in the table but out
// of the bounds). A metric's prediction is `iteration` or a sum of reported phases, or a ratio of
// one summary figure between two runs (a published speedup).
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace offsim::models {

struct ValidationRow {
  std::string case_name;
  std::string group;
  std::string metric;
  double measured_s = 0.0;
  double predicted_s = 0.0;
  double tolerance = 0.0;
  std::optional<std::string> known_gap;
  bool is_ratio = false;  // measured_s / predicted_s hold a ratio of two runs, not seconds
  bool is_bytes = false;  // measured_s / predicted_s hold bytes (a memory peak), not seconds
  [[nodiscard]] double error() const { return (predicted_s - measured_s) / measured_s; }
  [[nodiscard]] bool within() const;
};

/// A qualitative claim of a study, asserted on the simulated timeline of rank 0.
struct ClaimRow {
  std::string case_name;
  std::string claim;
  std::string value;  // what the simulation shows
  std::string bound;  // what the claim requires
  bool holds = false;
  std::optional<std::string> known_gap;
};

/// Mean and worst absolute error over a set of rows.
struct ErrorSummary {
  std::size_t rows = 0;
  double mean_abs_error = 0.0;
  std::string worst;  // "case metric +12.3%"
  double worst_abs_error = 0.0;
  void add(const ValidationRow& row);
  void finish();  // sum -> mean
};

/// A group's errors twice: over every row (known gaps included: the honest figure) and over the
/// rows inside the bounds (known gaps excluded: what the bounds are checked on).
struct ValidationGroup {
  std::string name;
  ErrorSummary all;
  ErrorSummary bounded;
  std::size_t known_gaps = 0;
};

struct ValidationReport {
  std::vector<ValidationRow> rows;
  std::vector<ClaimRow> claims;
  std::vector<ValidationGroup> groups;
  ErrorSummary overall_all;      // every row of every group, known gaps included
  ErrorSummary overall_bounded;  // the rows inside the bounds
  bool passed = true;            // every bounded row within its tolerance, every group's mean within kGroupMeanBound
};

/// Runs every case under `dir` (sorted by path). Throws sim::config::ConfigError for bad cases.
[[nodiscard]] ValidationReport validate(const std::filesystem::path& dir);
[[nodiscard]] std::string validation_text(const ValidationReport& report);
[[nodiscard]] std::string validation_json(const ValidationReport& report);

}  // namespace offsim::models
