#pragma once
// An 80% interval on every prediction, from the validation residuals (docs/validation.md,
// "Prediction intervals"): split conformal quantiles of ln(measured / predicted) over the shipped
// validation rows of the nearest mechanism and device, computed once by `offsim validate
// --residuals configs/calibration/validation-residuals.csv` and compiled in. Nothing here is
// fitted by hand: the table is what that command writes from the shipped validation set (a test
// checks the shipped file against it).
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace offsim::models {

struct ExperimentSpec;
struct ExperimentResult;

/// One timing row of the validation set: what was measured, what offsim predicted, and the
/// mechanism and device of its experiment (mechanism_of, device_family).
struct Residual {
  std::string group;
  std::string case_name;
  std::string metric;
  std::string mechanism;
  std::string device;
  double measured_s = 0.0;
  double predicted_s = 0.0;
  /// ln(measured / predicted): how far off the prediction was, as a factor.
  [[nodiscard]] double log_residual() const;
};

/// The strategy's mechanism, the key residuals are pooled by: "collective", "zero-offload"
/// (data_parallel with optimizer offload), "zero3", "data-parallel" (ZeRO 0-2), "megatron-pipeline"
/// (pp > 1), "megatron".
[[nodiscard]] std::string mechanism_of(const ExperimentSpec& spec);
/// The device table's kind up to its first '-' ("a100-80gb" -> "a100", "mi250x-gcd" -> "mi250x").
[[nodiscard]] std::string device_family(const ExperimentSpec& spec);

/// The residual table as CSV (header, then one row per residual, in the order given) and back.
/// Throws std::runtime_error on a malformed table.
[[nodiscard]] std::string residuals_csv(const std::vector<Residual>& rows);
[[nodiscard]] std::vector<Residual> parse_residuals(std::string_view csv);
/// configs/calibration/validation-residuals.csv, compiled in.
[[nodiscard]] const std::vector<Residual>& shipped_residuals();

/// An interval as factors on the prediction: the measured time is expected in
/// [predicted x low, predicted x high] for `coverage` of runs like the pool's.
struct PredictionInterval {
  double low = 1.0;
  double high = 1.0;
  double coverage = 0.8;
  std::string pool;  // which residuals: "zero3 on a100", "zero3 (any device)", "every mechanism"
  std::size_t rows = 0;
};

/// Split conformal at 80%: of the n residuals of the nearest pool with n >= 9 (same mechanism and
/// device, else same mechanism, else all), sorted, the floor(0.1 (n + 1))-th and the
/// ceil(0.9 (n + 1))-th (n >= 9 is where both exist). `exclude_group`: leave that validation group
/// out (the coverage check). nullopt when not even all rows make a pool.
[[nodiscard]] std::optional<PredictionInterval> interval_for(const std::vector<Residual>& residuals,
                                                             std::string_view mechanism, std::string_view device,
                                                             std::string_view exclude_group = {});
/// The shipped residuals' interval for an experiment's prediction.
[[nodiscard]] std::optional<PredictionInterval> prediction_interval(const ExperimentSpec& spec);

/// Whether two predictions' intervals [a x low, a x high] overlap.
[[nodiscard]] bool intervals_overlap(double a, const PredictionInterval& ia, double b, const PredictionInterval& ib);

}  // namespace offsim::models
