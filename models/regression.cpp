#include "models/regression.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>

#include "models/case_files.hpp"
#include "models/experiment.hpp"
#include "models/figures.hpp"
#include "sim/config/config_reader.hpp"
#include "sim/report/atomic_file.hpp"
#include "sim/report/text_table.hpp"

namespace offsim::models {

namespace {

// The figures a case records, in this order: every headline figure but tokens_per_s (tokens per
// iteration over iteration_time_s, which a case records).
const std::vector<const Figure*> kRecorded = [] {
  std::vector<const Figure*> out;
  for (const Figure& f : headline_figures()) {
    if (f.name != "tokens_per_s") out.push_back(&f);
  }
  return out;
}();

}  // namespace

bool RegressionFigure::drifted() const {
  if (recorded_missing) return true;
  return std::fabs(predicted - recorded) > tolerance * std::fabs(recorded);
}

bool RegressionReport::passed() const {
  // An --update run re-records what moved: it passes.
  return update || std::none_of(figures.begin(), figures.end(), [](const auto& f) { return f.drifted(); });
}

RegressionReport check_regressions(const std::filesystem::path& dir, bool update) {
  const std::vector<std::filesystem::path> files = case_files(dir);
  RegressionReport report;
  for (const auto& file : files) {
    sim::config::Context ctx;
    const auto root = ctx.load_root(file);
    std::string name;
    std::filesystem::path experiment;
    std::vector<std::string> overrides;
    double tolerance = 0.0;
    std::map<std::string, double> recorded;
    {
      sim::config::MapReader r(root);
      name = r.required<std::string>("name").value;
      experiment = file.parent_path() / r.required<std::string>("experiment").value;
      if (auto set = r.child("set")) {
        for (const auto& item : set->items()) {
          if (auto v = item.as<std::string>()) overrides.push_back(*v);
        }
      }
      const auto tol = r.required<double>("tolerance");
      if (tol.valid && !(tol.value >= 0.0)) ctx.error(tol.loc, "tolerance", "expected a relative tolerance >= 0");
      tolerance = tol.value;
      if (auto rec = r.child("recorded")) {
        sim::config::MapReader rr(*rec);
        for (const Figure* f : kRecorded) {
          const std::string figure(f->name);
          if (rr.has(figure)) recorded[figure] = rr.required<double>(figure).value;
        }
      }
    }
    ctx.finish();
    const ExperimentResult result = run_experiment(load_experiment(experiment, overrides));
    bool moved = false;
    for (const Figure* figure : kRecorded) {
      const std::string key(figure->name);
      RegressionFigure f{name, key, 0.0, figure->get(result), tolerance, !recorded.contains(key)};
      if (!f.recorded_missing) f.recorded = recorded.at(key);
      moved = moved || f.drifted();
      report.figures.push_back(f);
    }
    if (update && moved) {
      // Keep everything above `recorded:` (comments and all), write the new figures below it.
      std::ifstream in(file, std::ios::binary);
      std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      const auto at = text.find("\nrecorded:");
      std::string head = at == std::string::npos ? text : text.substr(0, at + 1);
      if (!head.empty() && head.back() != '\n') head += '\n';
      head += "recorded:  # written by offsim check --update\n";
      for (const Figure* f : kRecorded) head += fmt::format("  {}: {}\n", f->name, f->get(result));
      sim::report::write_file_atomically(file, head);
      report.updated.push_back(file.string());
    }
  }
  report.cases = files.size();
  report.update = update;
  return report;
}

std::string regression_text(const RegressionReport& report) {
  if (report.update) {
    if (report.updated.empty()) {
      return fmt::format("{} cases, every prediction within its tolerance: no case file rewritten\n", report.cases);
    }
    return fmt::format("recorded new figures in {} of {} case files (the others are within their tolerance):\n  {}\n",
                       report.updated.size(), report.cases, fmt::join(report.updated, "\n  "));
  }
  sim::report::TextTable table({"case", "figure", "recorded", "predicted", "change", "status"});
  std::size_t drifted = 0;
  for (const auto& f : report.figures) {
    if (!f.drifted()) continue;
    ++drifted;
    table.add_row({f.case_name, f.figure, f.recorded_missing ? "-" : fmt::format("{:.6g}", f.recorded),
                   fmt::format("{:.6g}", f.predicted),
                   f.recorded_missing || f.recorded == 0.0
                       ? "-"
                       : fmt::format("{:+.3f}%", 100.0 * (f.predicted - f.recorded) / std::fabs(f.recorded)),
                   f.recorded_missing ? "NOT RECORDED" : fmt::format("DRIFTED (> {:g}%)", 100.0 * f.tolerance)});
  }
  if (drifted == 0) {
    return fmt::format("{} cases, {} figures: every prediction within its tolerance\n", report.cases,
                       report.figures.size());
  }
  return fmt::format(
      "{}\n{} of {} figures in {} cases moved; if the change is intended, re-record with "
      "`offsim check DIR --update` and commit the diff\n",
      table.str(), drifted, report.figures.size(), report.cases);
}

}  // namespace offsim::models
