// `offsim check`: a moved figure is named, a missing one too, and --update re-records below the
// kept head of the file (models/regression.hpp).
#include <gtest/gtest.h>

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

}  // namespace
}  // namespace offsim::models
