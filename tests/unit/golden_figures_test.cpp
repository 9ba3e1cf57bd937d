// Golden regression of predicted figures: every configs/experiments/NAME.yaml is run and its
// headline figures compared with tests/golden/NAME.figures (one "key value" per line).
// Tolerance: 1e-9 relative. The simulation is deterministic, so any larger drift is a change in
// the model: if it is intended, re-record with OFFSIM_UPDATE_GOLDEN=1 and explain the change in
// the commit message. The re-record rewrites only the files where a figure moved beyond the
// tolerance or appeared or went: the others keep their bytes (no float noise in the diff).
#include <gtest/gtest.h>

#include <fmt/format.h>
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "models/experiment.hpp"
#include "models/figures.hpp"

namespace offsim::models {
namespace {

namespace fs = std::filesystem;
constexpr double kRelativeTolerance = 1e-9;

std::map<std::string, double> figures_of(const ExperimentResult& r) {
  std::map<std::string, double> f;
  // The headline figures the .figures files hold (a subset of the table), then the phases, memory
  // kinds and link classes the experiment reports.
  for (const Figure* figure : figures_named({"feasible", "iteration_time_s", "tflops_per_device", "mfu"}))
    f[std::string(figure->name)] = figure->get(r);
  for (const auto& p : r.phases) f["phase." + p.phase + "_s"] = p.time.seconds();
  for (const auto& m : r.memory) f["memory." + m.kind + ".peak_bytes"] = m.peak.as_double();
  for (const auto& l : r.links) f["links." + l.link_class + ".bytes"] = l.bytes;
  return f;
}

TEST(GoldenFigures, ShippedExperiments) {
  const fs::path source(OFFSIM_SOURCE_DIR);
  const bool update = std::getenv("OFFSIM_UPDATE_GOLDEN") != nullptr;
  std::vector<fs::path> experiments;
  for (const auto& e : fs::directory_iterator(source / "configs/experiments")) {
    if (e.path().extension() == ".yaml") experiments.push_back(e.path());
  }
  std::sort(experiments.begin(), experiments.end());
  ASSERT_FALSE(experiments.empty());
  for (const auto& yaml : experiments) {
    SCOPED_TRACE(yaml.string());
    const auto actual = figures_of(run_experiment(load_experiment(yaml, {})));
    const fs::path golden = source / "tests/golden" / (yaml.stem().string() + ".figures");
    if (!update) {
      ASSERT_TRUE(fs::exists(golden)) << "no golden file " << golden << " (record it with OFFSIM_UPDATE_GOLDEN=1)";
    }
    std::map<std::string, double> expected;
    {
      std::ifstream in(golden);
      std::string key;
      double value = 0.0;
      while (in >> key >> value) expected[key] = value;
    }
    const auto within = [&](const std::string& k, double v) {
      return actual.contains(k) && std::fabs(actual.at(k) - v) <= kRelativeTolerance * std::fabs(v);
    };
    if (update) {
      const bool same =
          expected.size() == actual.size() &&
          std::all_of(expected.begin(), expected.end(), [&](const auto& e) { return within(e.first, e.second); });
      if (same) continue;
      std::ofstream out(golden);
      for (const auto& [k, v] : actual) out << fmt::format("{} {}\n", k, v);
      continue;
    }
    EXPECT_EQ(expected.size(), actual.size());
    for (const auto& [k, v] : expected) {
      ASSERT_TRUE(actual.contains(k)) << k;
      EXPECT_TRUE(within(k, v)) << k << ": got " << actual.at(k) << ", golden " << v;
    }
  }
}

}  // namespace
}  // namespace offsim::models
