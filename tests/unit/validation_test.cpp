#include <gtest/gtest.h>

#include <fmt/format.h>
#include <unistd.h>
#include <filesystem>
#include <fstream>

#include "models/experiment.hpp"
#include "models/validation.hpp"

namespace offsim::models {
namespace {

namespace fs = std::filesystem;

TEST(Validate, ErrorsBoundsAndKnownGaps) {
  // Three cases on the tiny two-rank experiment, with "measurements" set from its prediction p:
  //   a: measured p / 1.05 -> error +5%, within 15%;  b: measured p / 2 -> +100%, out of bounds;
  //   c: like b but declared a known gap -> listed, not bounded.
  const fs::path dir = fs::temp_directory_path() / fmt::format("offsim-validate-{}", ::getpid());
  fs::create_directories(dir);
  const std::string experiment = std::string(OFFSIM_SOURCE_DIR) + "/tests/data/tiny-dp2.yaml";
  const double p = run_experiment(load_experiment(experiment, {})).iteration_time.seconds();
  const auto write_case = [&](const char* name, double measured, const char* gap) {
    std::ofstream(dir / (std::string(name) + ".yaml")) << fmt::format(
        "name: {}\ngroup: g\nexperiment: {}\nmeasured_source: s\ninputs: i\nuncertain: u\ntolerance: 0.15\n{}"
        "metrics:\n  - {{name: iteration, predicted: [iteration], measured: \"{} ps\"}}\n",
        name, experiment, gap, static_cast<long long>(std::llround(measured * 1e12)));
  };
  write_case("a", p / 1.05, "");
  write_case("c", p / 2, "known_gap: \"a missing mechanism\"\n");
  ValidationReport report = validate(dir);
  ASSERT_EQ(report.rows.size(), 2u);
  EXPECT_NEAR(report.rows[0].error(), 0.05, 1e-9);
  EXPECT_TRUE(report.rows[0].within());
  EXPECT_TRUE(report.passed);
  EXPECT_EQ(report.groups[0].known_gaps, 1u);
  // Bounded rows: a only (5%). All rows: a and c, (5% + 100%) / 2 = 52.5%; the known gap counts.
  EXPECT_EQ(report.groups[0].bounded.rows, 1u);
  EXPECT_NEAR(report.groups[0].bounded.mean_abs_error, 0.05, 1e-9);
  EXPECT_EQ(report.groups[0].all.rows, 2u);
  EXPECT_NEAR(report.groups[0].all.mean_abs_error, 0.525, 1e-9);
  EXPECT_NEAR(report.overall_all.mean_abs_error, 0.525, 1e-9);
  EXPECT_NEAR(report.overall_all.worst_abs_error, 1.0, 1e-9);
  EXPECT_NEAR(report.overall_bounded.mean_abs_error, 0.05, 1e-9);
  const std::string text = validation_text(report);
  EXPECT_NE(text.find("mean |error| over all 2 rows: 52.5% (worst c iteration +100.0%)"), std::string::npos) << text;
  EXPECT_NE(text.find("mean |error| over the 1 bounded rows: 5.0%; all bounds hold"), std::string::npos) << text;
  const std::string json = validation_json(report);
  EXPECT_NE(json.find("\"all_rows\""), std::string::npos) << json;
  write_case("b", p / 2, "");
  report = validate(dir);
  EXPECT_FALSE(report.passed);
  EXPECT_NE(validation_text(report).find("FAIL (> 15%)"), std::string::npos);
  fs::remove_all(dir);
}

TEST(Validate, MemoryPeakMetricsCompareBytes) {
  // The tiny experiment's HBM peak q, "measured" as q / 1.1: error +10%, shown in bytes.
  const fs::path dir = fs::temp_directory_path() / fmt::format("offsim-validate-mem-{}", ::getpid());
  fs::create_directories(dir);
  const std::string experiment = std::string(OFFSIM_SOURCE_DIR) + "/tests/data/tiny-dp2.yaml";
  const auto q = static_cast<double>(run_experiment(load_experiment(experiment, {})).peak_bytes("hbm"));
  std::ofstream(dir / "m.yaml") << fmt::format(
      "name: m\ngroup: g\nexperiment: {}\nmeasured_source: s\ninputs: i\nuncertain: u\ntolerance: 0.15\n"
      "metrics:\n  - {{name: peak, memory: hbm_peak, measured: \"{} B\"}}\n",
      experiment, static_cast<long long>(std::llround(q / 1.1)));
  const ValidationReport report = validate(dir);
  ASSERT_EQ(report.rows.size(), 1u);
  EXPECT_TRUE(report.rows[0].is_bytes);
  EXPECT_NEAR(report.rows[0].error(), 0.1, 1e-6);
  EXPECT_NE(validation_text(report).find("iB"), std::string::npos) << validation_text(report);
  EXPECT_NE(validation_json(report).find("\"predicted_bytes\""), std::string::npos);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace offsim::models
