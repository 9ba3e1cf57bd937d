// `offsim check`: a moved figure is named, a missing one too, and --update re-records below the
// kept head of the file, only in the cases that moved (models/regression.hpp).
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>

#include "models/regression.hpp"

namespace offsim::models {
namespace {

namespace fs = std::filesystem;

TEST(Regression, NamesDriftedFiguresAndReRecords) {
  const fs::path dir = fs::temp_directory_path() / "offsim-regression-test";
  fs::remove_all(dir);
  fs::create_directories(dir);
  const fs::path file = dir / "tiny.yaml";
  const std::string head = fmt::format(
      "# kept comment\nname: tiny\nexperiment: {}/tests/data/tiny-dp2.yaml\ntolerance: 0.01\n", OFFSIM_SOURCE_DIR);
  std::ofstream(file) << head << "recorded:\n  iteration_time_s: 1.0\n";

  const RegressionReport first = check_regressions(dir, false);
  EXPECT_FALSE(first.passed());
  const auto find = [&](const std::string& figure) {
    return *std::find_if(first.figures.begin(), first.figures.end(), [&](const auto& f) { return f.figure == figure; });
  };
  EXPECT_TRUE(find("iteration_time_s").drifted());  // recorded 1 s, the tiny model takes microseconds
  EXPECT_FALSE(find("iteration_time_s").recorded_missing);
  EXPECT_TRUE(find("mfu").recorded_missing);
  EXPECT_NE(regression_text(first).find("DRIFTED (> 1%)"), std::string::npos);

  const RegressionReport update = check_regressions(dir, true);
  EXPECT_EQ(update.updated.size(), 1u);
  std::ifstream in(file);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_TRUE(text.starts_with(head)) << text;
  EXPECT_NE(text.find("recorded:  # written by offsim check --update\n  feasible: 1\n"), std::string::npos) << text;

  const RegressionReport again = check_regressions(dir, false);
  EXPECT_TRUE(again.passed()) << regression_text(again);
}

TEST(Regression, UpdateLeavesCasesWithinTheirToleranceAsTheyAre) {
  const fs::path dir = fs::temp_directory_path() / "offsim-regression-update-test";
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string head =
      fmt::format("name: tiny\nexperiment: {}/tests/data/tiny-dp2.yaml\ntolerance: 0.01\n", OFFSIM_SOURCE_DIR);
  // Record both cases, then nudge one figure of `kept` by 0.5% (inside its 1%) and one of `moved`
  // by 5% (outside it), each written with fewer digits than a re-record would print.
  std::ofstream(dir / "kept.yaml") << head;
  std::ofstream(dir / "moved.yaml") << head;
  ASSERT_EQ(check_regressions(dir, true).updated.size(), 2u);
  const auto text_of = [](const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  };
  const RegressionReport recorded = check_regressions(dir, false);
  ASSERT_TRUE(recorded.passed());
  const double t = std::find_if(recorded.figures.begin(), recorded.figures.end(), [](const auto& f) {
                     return f.figure == "iteration_time_s";
                   })->predicted;
  const auto nudge = [&](const fs::path& p, double factor) {
    std::string text = text_of(p);
    const auto at = text.find("  iteration_time_s: ");
    const auto end = text.find('\n', at);
    text.replace(at, end - at, fmt::format("  iteration_time_s: {:.6g}", t * factor));
    std::ofstream(p, std::ios::binary) << text;
    return text;
  };
  const std::string kept = nudge(dir / "kept.yaml", 1.005);
  nudge(dir / "moved.yaml", 1.05);

  const RegressionReport update = check_regressions(dir, true);
  EXPECT_TRUE(update.passed());
  ASSERT_EQ(update.updated.size(), 1u);
  EXPECT_EQ(fs::path(update.updated[0]).filename(), "moved.yaml");
  EXPECT_EQ(text_of(dir / "kept.yaml"), kept);
  EXPECT_EQ(regression_text(update).rfind("recorded new figures in 1 of 2 case files", 0), 0u)
      << regression_text(update);
  EXPECT_TRUE(check_regressions(dir, false).passed());
  EXPECT_EQ(regression_text(check_regressions(dir, true)),
            "2 cases, every prediction within its tolerance: no case file rewritten\n");
}

}  // namespace
}  // namespace offsim::models
