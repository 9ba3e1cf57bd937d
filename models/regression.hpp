#pragma once
// `offsim check DIR`: regression checks on predicted figures (docs/regression.md).
//
// A case file (configs/regression/*.yaml) names an experiment, its `set:` overrides, a relative
// `tolerance`, and, last, the `recorded:` figures of a past run. check re-runs every case and
// names each figure that moved by more than the tolerance; --update rewrites the `recorded:`
// block (everything above it, comments included, is kept) atomically, in the cases where a figure
// moved beyond the tolerance or was not recorded: a case within its tolerance keeps its file
// byte for byte, so a re-record shows only what changed.
#include <filesystem>
#include <string>
#include <vector>

namespace offsim::models {

struct RegressionFigure {
  std::string case_name;
  std::string figure;
  double recorded = 0.0;
  double predicted = 0.0;
  double tolerance = 0.0;
  bool recorded_missing = false;  // a figure the case did not record yet
  [[nodiscard]] bool drifted() const;
};

struct RegressionReport {
  std::vector<RegressionFigure> figures;
  std::vector<std::string> updated;  // files rewritten by --update
  std::size_t cases = 0;             // case files run
  bool update = false;               // the report of an --update run
  [[nodiscard]] bool passed() const;
};

/// Runs every case under `dir` (sorted by path). With `update`, rewrites the recorded figures of
/// each case that drifted instead of failing (its `figures` are those found before the rewrite).
/// Throws sim::config::ConfigError for bad case files.
[[nodiscard]] RegressionReport check_regressions(const std::filesystem::path& dir, bool update);
[[nodiscard]] std::string regression_text(const RegressionReport& report);

}  // namespace offsim::models
