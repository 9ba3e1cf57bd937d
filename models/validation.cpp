#include "models/validation.hpp"

#include <fmt/format.h>
#include <algorithm>
#include <cmath>
#include <map>

#include "models/experiment.hpp"
#include "sim/config/config_reader.hpp"
#include "sim/report/json_writer.hpp"
#include "sim/report/text_table.hpp"

namespace offsim::models {

namespace {

// Issue #7's bound on the mean absolute error of a group of timing cases.
constexpr double kGroupMeanBound = 0.10;

struct Metric {
  std::string name;
  std::vector<std::string> predicted;  // "iteration" or phase names, summed
  double measured_s = 0.0;
};

struct Case {
  std::string name;
  std::string group;
  std::filesystem::path experiment;
  std::vector<std::string> overrides;
  std::vector<Metric> metrics;
  double tolerance = 0.0;
  std::optional<std::string> known_gap;
};

Case parse_case(const std::filesystem::path& file) {
  sim::config::Context ctx;
  const auto root = ctx.load_root(file);
  Case c;
  {
    sim::config::MapReader r(root);
    c.name = r.required<std::string>("name").value;
    c.group = r.required<std::string>("group").value;
    c.experiment = file.parent_path() / r.required<std::string>("experiment").value;
    if (auto set = r.child("set")) {
      for (const auto& item : set->items()) {
        if (auto v = item.as<std::string>()) c.overrides.push_back(*v);
      }
    }
    (void)r.required<std::string>("measured_source");
    (void)r.required<std::string>("inputs");
    (void)r.required<std::string>("uncertain");
    const auto tol = r.required<double>("tolerance");
    c.tolerance = tol.value;
    if (tol.valid && !(tol.value > 0.0)) ctx.error(tol.loc, "tolerance", "expected a positive fraction");
    if (auto gap = r.child("known_gap")) c.known_gap = gap->as<std::string>();
    if (auto list = r.required_child("metrics", "a list of {name, predicted, measured}")) {
      for (const auto& item : list->items()) {
        sim::config::MapReader m(item);
        Metric metric;
        metric.name = m.required<std::string>("name").value;
        metric.measured_s = m.required<sim::TimePs>("measured").value.seconds();
        if (auto p = m.required_child("predicted", "a list of phases, or [iteration]")) {
          for (const auto& phase : p->items()) {
            if (auto v = phase.as<std::string>()) metric.predicted.push_back(*v);
          }
        }
        c.metrics.push_back(std::move(metric));
      }
    }
  }
  ctx.finish();
  return c;
}

double predicted_of(const Metric& m, const ExperimentResult& r) {
  double total = 0.0;
  for (const auto& p : m.predicted) {
    if (p == "iteration") {
      total += r.iteration_time.seconds();
      continue;
    }
    for (const auto& phase : r.phases) {
      if (phase.phase == p) total += phase.time.seconds();
    }
  }
  return total;
}

}  // namespace

bool ValidationRow::within() const {
  return std::fabs(error()) <= tolerance;
}

ValidationReport validate(const std::filesystem::path& dir) {
  std::vector<std::filesystem::path> files;
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir)) {
    if (e.path().extension() == ".yaml") files.push_back(e.path());
  }
  std::sort(files.begin(), files.end());
  ValidationReport report;
  for (const auto& file : files) {
    const Case c = parse_case(file);
    const ExperimentResult result = run_experiment(load_experiment(c.experiment, c.overrides));
    for (const auto& m : c.metrics) {
      report.rows.push_back({c.name, c.group, m.name, m.measured_s, predicted_of(m, result), c.tolerance, c.known_gap});
    }
  }
  std::map<std::string, ValidationGroup> groups;
  std::vector<std::string> order;
  double total = 0.0;
  std::size_t bounded = 0;
  for (const auto& row : report.rows) {
    if (!groups.contains(row.group)) order.push_back(row.group);
    auto& g = groups[row.group];
    g.name = row.group;
    if (row.known_gap) {
      ++g.known_gaps;
      continue;
    }
    const double err = std::fabs(row.error());
    g.mean_abs_error += err;
    ++g.rows;
    total += err;
    ++bounded;
    if (g.worst.empty() || err > g.worst_abs_error) {
      g.worst_abs_error = err;
      g.worst = fmt::format("{} {} {:+.1f}%", row.case_name, row.metric, 100.0 * row.error());
    }
    if (!row.within()) report.passed = false;
  }
  for (const auto& name : order) {
    auto g = groups[name];
    if (g.rows > 0) g.mean_abs_error /= static_cast<double>(g.rows);
    if (g.mean_abs_error > kGroupMeanBound) report.passed = false;
    report.groups.push_back(g);
  }
  report.overall_mean_abs_error = bounded > 0 ? total / static_cast<double>(bounded) : 0.0;
  return report;
}

std::string validation_text(const ValidationReport& report) {
  sim::report::TextTable t({"case", "metric", "measured", "predicted", "error", "status"});
  for (const auto& r : report.rows) {
    t.add_row({r.case_name, r.metric, fmt::format("{:.3f} s", r.measured_s), fmt::format("{:.3f} s", r.predicted_s),
               fmt::format("{:+.1f}%", 100.0 * r.error()),
               r.known_gap ? "known gap" : (r.within() ? "ok" : fmt::format("FAIL (> {:.0f}%)", 100.0 * r.tolerance))});
  }
  std::string out = t.str() + "\n";
  sim::report::TextTable g({"group", "cases in bounds", "mean |error|", "worst", "known gaps"});
  for (const auto& grp : report.groups) {
    g.add_row({grp.name, std::to_string(grp.rows), grp.rows ? fmt::format("{:.1f}%", 100.0 * grp.mean_abs_error) : "-",
               grp.worst.empty() ? "-" : grp.worst, std::to_string(grp.known_gaps)});
  }
  out += g.str();
  const bool any_bounded =
      std::any_of(report.rows.begin(), report.rows.end(), [](const auto& r) { return !r.known_gap; });
  out += any_bounded
             ? fmt::format("\noverall mean |error| over bounded rows: {:.1f}%; {}\n",
                           100.0 * report.overall_mean_abs_error, report.passed ? "all bounds hold" : "BOUNDS FAILED")
             : "\nno bounded rows: every case is a known gap\n";
  std::map<std::string, std::string> gaps;
  for (const auto& r : report.rows) {
    if (r.known_gap) gaps[r.case_name] = *r.known_gap;
  }
  if (!gaps.empty()) out += "\nknown gaps (in the table, out of the bounds):\n";
  for (const auto& [name, why] : gaps) out += fmt::format("  {}: {}\n", name, why);
  return out;
}

std::string validation_json(const ValidationReport& report) {
  sim::report::JsonWriter j;
  j.begin_object().field("passed", report.passed).field("overall_mean_abs_error", report.overall_mean_abs_error);
  j.key("rows").begin_array();
  for (const auto& r : report.rows) {
    j.begin_object().field("case", r.case_name).field("group", r.group).field("metric", r.metric);
    j.field("measured_s", r.measured_s).field("predicted_s", r.predicted_s).field("error", r.error());
    j.field("tolerance", r.tolerance);
    if (r.known_gap) {
      j.field("known_gap", *r.known_gap);
    } else {
      j.field("within", r.within());
    }
    j.end_object();
  }
  j.end_array();
  j.key("groups").begin_array();
  for (const auto& g : report.groups) {
    j.begin_object().field("group", g.name).field("bounded_rows", static_cast<std::uint64_t>(g.rows));
    j.field("mean_abs_error", g.mean_abs_error)
        .field("known_gaps", static_cast<std::uint64_t>(g.known_gaps))
        .end_object();
  }
  j.end_array().end_object();
  return j.str();
}

}  // namespace offsim::models
