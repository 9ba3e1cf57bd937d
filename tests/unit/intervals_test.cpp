// The 80% prediction intervals (models/intervals.hpp): split conformal order statistics written
// out first, the pools' fallback, leave-one-group-out, the table's CSV round trip, and the report.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "models/experiment.hpp"
#include "models/intervals.hpp"
#include "tests/unit/source_paths.hpp"

namespace offsim::models {
namespace {

// n residuals of mechanism `mech` on `device` in `group`, measured / predicted = 1 + k / 100 for
// k = 1..n (ln ascending with k).
std::vector<Residual> rows(int n, const std::string& mech, const std::string& device, const std::string& group) {
  std::vector<Residual> out;
  for (int k = 1; k <= n; ++k) {
    out.push_back({group, fmt::format("c{}", k), "iteration", mech, device, 1.0 + k / 100.0, 1.0});
  }
  return out;
}

// Split conformal at 80% over n sorted residuals: the lower end is the floor(0.1 (n + 1))-th, the
// upper the ceil(0.9 (n + 1))-th. n = 9: the 1st and the 9th; n = 19: the 2nd and the 18th.
TEST(Intervals, SplitConformalOrderStatistics) {
  const auto nine = interval_for(rows(9, "zero3", "a100", "g"), "zero3", "a100");
  ASSERT_TRUE(nine.has_value());
  EXPECT_DOUBLE_EQ(nine->low, 1.01);
  EXPECT_DOUBLE_EQ(nine->high, 1.09);
  EXPECT_EQ(nine->rows, 9U);
  EXPECT_EQ(nine->pool, "zero3 on a100");
  const auto nineteen = interval_for(rows(19, "zero3", "a100", "g"), "zero3", "a100");
  ASSERT_TRUE(nineteen.has_value());
  EXPECT_DOUBLE_EQ(nineteen->low, 1.02);
  EXPECT_DOUBLE_EQ(nineteen->high, 1.18);
}

// Fewer than 9 rows of the mechanism on the device cannot give both ends at 80%: the pool widens
// to the mechanism on any device, then to every row; none at all gives no interval.
TEST(Intervals, ThinPoolsWidenToTheMechanismThenEverything) {
  auto table = rows(8, "zero3", "a100", "g1");
  auto h100 = rows(4, "zero3", "h100", "g2");
  table.insert(table.end(), h100.begin(), h100.end());
  const auto mech = interval_for(table, "zero3", "a100");
  ASSERT_TRUE(mech.has_value());
  EXPECT_EQ(mech->pool, "zero3 (any device)");
  EXPECT_EQ(mech->rows, 12U);
  const auto all = interval_for(table, "megatron", "a100");
  ASSERT_TRUE(all.has_value());
  EXPECT_EQ(all->pool, "every mechanism");
  EXPECT_FALSE(interval_for(rows(8, "zero3", "a100", "g"), "zero3", "a100").has_value());
  // Leave-one-group-out: g1's 8 rows out, g2's 4 remain: too few for any pool.
  EXPECT_FALSE(interval_for(table, "zero3", "a100", "g1").has_value());
}

TEST(Intervals, OverlapIsOnTheScaledEnds) {
  const PredictionInterval i{0.9, 1.2, 0.8, "p", 9};
  EXPECT_TRUE(intervals_overlap(10.0, i, 12.0, i));   // [9, 12] and [10.8, 14.4]
  EXPECT_FALSE(intervals_overlap(10.0, i, 14.0, i));  // [9, 12] and [12.6, 16.8]
}

TEST(Intervals, TheTableReadsBackAsWritten) {
  const auto table = rows(3, "zero-offload", "a100", "offload-polaris-a100");
  const auto back = parse_residuals(residuals_csv(table));
  ASSERT_EQ(back.size(), 3U);
  EXPECT_EQ(back[2].case_name, "c3");
  EXPECT_EQ(back[2].mechanism, "zero-offload");
  EXPECT_DOUBLE_EQ(back[2].log_residual(), std::log(1.03));
  EXPECT_THROW((void)parse_residuals("group,case\n"), std::runtime_error);
  // The shipped table is non-empty and every row has a mechanism the code names.
  ASSERT_FALSE(shipped_residuals().empty());
  for (const auto& r : shipped_residuals()) {
    EXPECT_TRUE(r.mechanism == "collective" || r.mechanism == "zero-offload" || r.mechanism == "zero3" ||
                r.mechanism == "data-parallel" || r.mechanism == "megatron-pipeline" || r.mechanism == "megatron")
        << r.mechanism;
  }
}

// The report and summary.json give the iteration time's interval and the TFLOPS' (inverted).
TEST(Intervals, TheReportAndSummaryGiveTheInterval) {
  const ExperimentSpec spec = load_experiment(std::string(OFFSIM_SOURCE_DIR) + "/tests/data/tiny-dp2.yaml", {});
  const ExperimentResult r = run_experiment(spec);
  const auto interval = prediction_interval(spec);
  ASSERT_TRUE(interval.has_value());
  EXPECT_LE(interval->low, interval->high);
  const std::string text = text_report(spec, r);
  EXPECT_NE(text.find("  80% interval       "), std::string::npos) << text;
  const std::string json = summary_json(spec, r, Provenance{});
  EXPECT_NE(json.find("\"interval_80\""), std::string::npos);
  EXPECT_NE(json.find("\"tflops_per_device\": ["), std::string::npos) << json;
}

}  // namespace
}  // namespace offsim::models
