#include "models/validation.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <tuple>

#include "models/case_files.hpp"
#include "models/experiment.hpp"
#include "models/figures.hpp"
#include "models/transformer/phases.hpp"
#include "sim/config/config_reader.hpp"
#include "sim/report/json_writer.hpp"
#include "sim/report/text_table.hpp"

namespace offsim::models {

namespace {

// Issue #7's bound on the mean absolute error of a group of timing cases.
constexpr double kGroupMeanBound = 0.10;

using Getter = double (*)(const ExperimentResult&);

// What a ratio's `figure:` may name: a headline figure (feasible aside), or iteration_time
// (iteration_time_s) and optimizer_time (rank 0's optimizer phase), as case files name them.
Getter ratio_getter(std::string_view name) {
  if (name == "iteration_time") return find_figure("iteration_time_s")->get;
  if (name == "optimizer_time") return [](const ExperimentResult& r) { return r.phase_seconds(phase::kOptimizer); };
  const Figure* f = find_figure(name);
  return f != nullptr && f->kind != FigureKind::kFlag ? f->get : nullptr;
}

std::vector<std::string> ratio_choices() {
  std::vector<std::string> out;
  for (const Figure& f : headline_figures()) {
    if (ratio_getter(f.name) != nullptr) out.emplace_back(f.name);
  }
  out.emplace_back("iteration_time");
  out.emplace_back("optimizer_time");
  return out;
}

// One run of an experiment: the file and the overrides that set it up.
struct Run {
  std::filesystem::path experiment;
  std::vector<std::string> overrides;
  bool operator<(const Run& o) const { return std::tie(experiment, overrides) < std::tie(o.experiment, o.overrides); }
};

// A timing (`predicted`: phases or iteration, summed, of the case's experiment), a memory peak
// (`memory: hbm_peak`: the fullest GPU memory pool's peak, bytes), or a ratio of one summary figure
// between two runs (`ratio`: a headline figure, iteration_time or optimizer_time of `of` over
// `over`; see ratio_getter), as published studies report speedups.
struct Metric {
  std::string name;
  std::vector<std::string> predicted;  // "iteration" or phase names, summed
  bool hbm_peak = false;               // the metric is the HBM peak in bytes
  double measured = 0.0;               // seconds, bytes, or the ratio
  std::optional<std::string> ratio_figure;
  Run of, over;
  std::optional<std::string> known_gap;  // this metric only; otherwise the case's
};

struct Claim {
  std::string name;
  double bound = 0.0;
  bool feasible = true;  // `feasible`: the measured verdict
  std::optional<std::string> known_gap;
};

// `feasible` asserts the measured verdict (`measured: false`: the run went out of memory), a
// feasibility data point; the others assert a study's qualitative claim on rank 0's timeline.
const std::vector<std::string> kClaims{"backward_and_update_dominate", "gpu_idle_during_update",
                                       "gpu_memory_lowest_during_update", "host_links_mean_below_peak", "feasible"};

struct Case {
  std::string name;
  std::string group;
  Run run;  // the case's experiment (none when every metric is a ratio)
  std::vector<Metric> metrics;
  double tolerance = 0.0;
  std::optional<std::string> known_gap;
  std::vector<Claim> claims;
};

Case parse_case(const std::filesystem::path& file) {
  sim::config::Context ctx;
  const auto root = ctx.load_root(file);
  Case c;
  {
    sim::config::MapReader r(root);
    c.name = r.required<std::string>("name").value;
    c.group = r.required<std::string>("group").value;
    const auto read_run = [&](sim::config::MapReader& m) {
      Run run;
      run.experiment = file.parent_path() / m.required<std::string>("experiment").value;
      if (auto set = m.child("set")) {
        for (const auto& item : set->items()) {
          if (auto v = item.as<std::string>()) run.overrides.push_back(*v);
        }
      }
      return run;
    };
    if (r.has("experiment")) c.run = read_run(r);
    (void)r.required<std::string>("measured_source");
    (void)r.required<std::string>("inputs");
    (void)r.required<std::string>("uncertain");
    const auto tol = r.required<double>("tolerance");
    c.tolerance = tol.value;
    if (tol.valid && !(tol.value > 0.0)) ctx.error(tol.loc, "tolerance", "expected a positive fraction");
    if (auto gap = r.child("known_gap")) c.known_gap = gap->as<std::string>();
    // A case of claims only (a run that went out of memory has no timings) may leave metrics out.
    const bool claims_only = r.has("claims") && !r.has("metrics");
    if (auto list = claims_only ? std::nullopt : r.required_child("metrics", "a list of {name, predicted, measured}")) {
      for (const auto& item : list->items()) {
        sim::config::MapReader m(item);
        Metric metric;
        metric.name = m.required<std::string>("name").value;
        if (auto gap = m.child("known_gap")) metric.known_gap = gap->as<std::string>();
        if (auto ratio = m.child("ratio")) {
          sim::config::MapReader rr(*ratio);
          metric.ratio_figure = rr.choice("figure", ratio_choices()).value;
          if (auto of = rr.required_child("of", "a run: {experiment, set}")) {
            sim::config::MapReader o(*of);
            metric.of = read_run(o);
          }
          if (auto over = rr.required_child("over", "a run: {experiment, set}")) {
            sim::config::MapReader o(*over);
            metric.over = read_run(o);
          }
          metric.measured = m.required<double>("measured").value;
        } else if (auto memory = m.child("memory")) {
          if (c.run.experiment.empty()) {
            ctx.error(item.location(), item.path(), "a memory metric needs the case's experiment");
          }
          metric.hbm_peak = m.choice("memory", {"hbm_peak"}).valid;
          metric.measured = m.required<sim::Bytes>("measured").value.as_double();
        } else {
          if (c.run.experiment.empty()) {
            ctx.error(item.location(), item.path(), "a timing metric needs the case's experiment");
          }
          metric.measured = m.required<sim::TimePs>("measured").value.seconds();
          if (auto p = m.required_child("predicted", "a list of phases, or [iteration], or give a ratio")) {
            for (const auto& phase : p->items()) {
              if (auto v = phase.as<std::string>()) metric.predicted.push_back(*v);
            }
          }
        }
        c.metrics.push_back(std::move(metric));
      }
    }
    if (auto list = r.child("claims")) {
      for (const auto& item : list->items()) {
        sim::config::MapReader m(item);
        Claim claim;
        claim.name = m.choice("name", kClaims).value;
        (void)m.required<std::string>("source");
        // The bound's key says what it bounds; the memory claim compares two measurements.
        if (claim.name == "backward_and_update_dominate") claim.bound = m.required<double>("min_share").value;
        if (claim.name == "gpu_idle_during_update") claim.bound = m.required<double>("max_busy").value;
        if (claim.name == "host_links_mean_below_peak") claim.bound = m.required<double>("max_fraction").value;
        if (claim.name == "feasible") claim.feasible = m.required<bool>("measured").value;
        if (auto gap = m.child("known_gap")) claim.known_gap = gap->as<std::string>();
        c.claims.push_back(std::move(claim));
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

using Interval = ExperimentResult::Interval;

std::vector<Interval> intervals_of(const ExperimentResult& r, std::initializer_list<const char*> phases) {
  std::vector<Interval> out;
  for (const auto& i : r.rank0_phases) {
    for (const char* p : phases) {
      if (i.phase == p) out.push_back(i);
    }
  }
  return out;
}

double seconds_of(const std::vector<Interval>& list) {
  double total = 0.0;
  for (const auto& i : list) total += (i.end - i.begin).seconds();
  return total;
}

// Seconds of [a, b) covered by the compute tasks.
double busy_in(const ExperimentResult& r, const Interval& in) {
  double busy = 0.0;
  for (const auto& c : r.rank0_compute) {
    const auto lo = std::max(c.begin, in.begin);
    const auto hi = std::min(c.end, in.end);
    if (hi > lo) busy += (hi - lo).seconds();
  }
  return busy;
}

// Min and max of a step function over [a, b].
std::pair<double, double> range_in(const std::vector<sim::MemorySample>& samples, const Interval& in) {
  double lo = std::numeric_limits<double>::infinity();
  double hi = 0.0;
  double current = 0.0;
  for (const auto& s : samples) {
    if (s.time <= in.begin) {
      current = s.used.as_double();
      continue;
    }
    if (s.time > in.end) break;
    lo = std::min(lo, current);
    hi = std::max(hi, current);
    current = s.used.as_double();
  }
  lo = std::min(lo, current);
  hi = std::max(hi, current);
  return {lo, hi};
}

// Bytes moved over [a, b) by a rate step function.
double bytes_in(const std::vector<sim::RateSample>& samples, const Interval& in) {
  double bytes = 0.0;
  for (std::size_t i = 0; i < samples.size(); ++i) {
    const auto from = std::max(samples[i].time, in.begin);
    const auto to = std::min(i + 1 < samples.size() ? samples[i + 1].time : in.end, in.end);
    if (to > from) bytes += samples[i].bytes_per_s * (to - from).seconds();
  }
  return bytes;
}

ClaimRow evaluate(const Case& c, const Claim& claim, const ExperimentResult& r) {
  ClaimRow row{c.name, claim.name, "", "", false, claim.known_gap};
  const auto update = intervals_of(r, {phase::kOptimizer});
  const auto compute_phases = intervals_of(r, {phase::kForward, phase::kBackward});
  if (claim.name == "feasible") {
    row.value = r.feasible ? "feasible" : fmt::format("infeasible: {}", fmt::join(r.infeasible_reasons, "; "));
    row.bound = claim.feasible ? "feasible (it ran)" : "infeasible (it ran out of memory)";
    row.holds = r.feasible == claim.feasible;
    return row;
  }
  if (claim.name == "backward_and_update_dominate") {
    const double share =
        seconds_of(intervals_of(r, {phase::kBackward, phase::kExposedCommunication, phase::kOptimizer})) /
        r.iteration_time.seconds();
    row.value = fmt::format("{:.1f}% of the iteration", 100.0 * share);
    row.bound = fmt::format(">= {:.0f}%", 100.0 * claim.bound);
    row.holds = share >= claim.bound;
  } else if (claim.name == "gpu_idle_during_update") {
    double busy = 0.0;
    for (const auto& i : update) busy += busy_in(r, i);
    const double fraction = busy / std::max(1e-30, seconds_of(update));
    row.value = fmt::format("GPU busy {:.1f}% of the update", 100.0 * fraction);
    row.bound = fmt::format("<= {:.0f}%", 100.0 * claim.bound);
    row.holds = fraction <= claim.bound;
  } else if (claim.name == "gpu_memory_lowest_during_update") {
    double update_max = 0.0;
    double elsewhere_min = std::numeric_limits<double>::infinity();
    for (const auto& i : update) update_max = std::max(update_max, range_in(r.rank0_memory, i).second);
    for (const auto& i : compute_phases) elsewhere_min = std::min(elsewhere_min, range_in(r.rank0_memory, i).first);
    row.value = fmt::format("update max {}, forward/backward min {}",
                            sim::format_bytes(sim::Bytes{static_cast<std::int64_t>(update_max)}),
                            sim::format_bytes(sim::Bytes{static_cast<std::int64_t>(elsewhere_min)}));
    row.bound = "update max <= forward/backward min";
    row.holds = update_max <= elsewhere_min;
  } else {  // host_links_mean_below_peak: each direction's mean in backward and in the update
    double worst = 0.0;
    for (const auto& phase : {intervals_of(r, {phase::kBackward, phase::kExposedCommunication}), update}) {
      const double t = seconds_of(phase);
      if (t <= 0.0) continue;
      double h2d = 0.0;
      double d2h = 0.0;
      for (const auto& i : phase) {
        h2d += bytes_in(r.rank0_h2d, i);
        d2h += bytes_in(r.rank0_d2h, i);
      }
      if (r.rank0_h2d_capacity > 0.0) worst = std::max(worst, h2d / t / r.rank0_h2d_capacity);
      if (r.rank0_d2h_capacity > 0.0) worst = std::max(worst, d2h / t / r.rank0_d2h_capacity);
    }
    row.value = fmt::format("highest mean {:.0f}% of a host link's peak", 100.0 * worst);
    row.bound = fmt::format("<= {:.0f}%", 100.0 * claim.bound);
    row.holds = worst <= claim.bound;
  }
  return row;
}

// Each timing row's 80% interval from the other groups' residuals (leave-one-group-out: the row's
// own group never sizes its interval), and how many hold their measurement.
void add_intervals(ValidationReport& report) {
  for (auto& row : report.rows) {
    if (!row.is_time()) continue;
    row.interval = interval_for(report.residuals, row.mechanism, row.device, row.group);
    report.timed += row.interval ? 1 : 0;
    report.covered += row.covered() ? 1 : 0;
  }
}

}  // namespace

bool ValidationRow::within() const {
  return std::fabs(error()) <= tolerance;
}

ValidationReport validate(const std::filesystem::path& dir) {
  const std::vector<std::filesystem::path> files = case_files(dir);
  ValidationReport report;
  // Ratio metrics share runs (a baseline appears in several ratios): each run is simulated once.
  std::map<Run, ExperimentResult> runs;
  const auto result_of = [&](const Run& run) -> const ExperimentResult& {
    auto it = runs.find(run);
    if (it == runs.end()) it = runs.emplace(run, run_experiment(load_experiment(run.experiment, run.overrides))).first;
    return it->second;
  };
  const Figure& hbm_peak = *figures_named({"hbm_peak_bytes"}).front();
  for (const auto& file : files) {
    const Case c = parse_case(file);
    ExperimentResult result;
    std::string mechanism, device;
    if (!c.run.experiment.empty()) {
      const ExperimentSpec spec = load_experiment(c.run.experiment, c.run.overrides);
      mechanism = mechanism_of(spec);
      device = device_family(spec);
      result = run_experiment(spec, {!c.claims.empty()});
    }
    for (const auto& m : c.metrics) {
      if (m.ratio_figure) {
        const Getter figure = ratio_getter(*m.ratio_figure);
        const double predicted = figure(result_of(m.of)) / figure(result_of(m.over));
        report.rows.push_back({c.name,
                               c.group,
                               m.name,
                               m.measured,
                               predicted,
                               c.tolerance,
                               m.known_gap ? m.known_gap : c.known_gap,
                               true,
                               false,
                               {},
                               {},
                               std::nullopt});
        continue;
      }
      if (m.hbm_peak) {
        report.rows.push_back({c.name,
                               c.group,
                               m.name,
                               m.measured,
                               hbm_peak.get(result),
                               c.tolerance,
                               m.known_gap ? m.known_gap : c.known_gap,
                               false,
                               true,
                               {},
                               {},
                               std::nullopt});
        continue;
      }
      report.rows.push_back({c.name, c.group, m.name, m.measured, predicted_of(m, result), c.tolerance,
                             m.known_gap ? m.known_gap : c.known_gap, false, false, mechanism, device, std::nullopt});
      report.residuals.push_back(
          {c.group, c.name, m.name, mechanism, device, m.measured, report.rows.back().predicted_s});
    }
    for (const auto& claim : c.claims) {
      report.claims.push_back(evaluate(c, claim, result));
      if (!report.claims.back().holds && !claim.known_gap) report.passed = false;
    }
  }
  add_intervals(report);
  std::map<std::string, ValidationGroup> groups;
  std::vector<std::string> order;
  for (const auto& row : report.rows) {
    if (!groups.contains(row.group)) order.push_back(row.group);
    auto& g = groups[row.group];
    g.name = row.group;
    g.timed += row.interval ? 1 : 0;
    g.covered += row.covered() ? 1 : 0;
    g.all.add(row);
    report.overall_all.add(row);
    if (row.known_gap) {
      ++g.known_gaps;
      continue;
    }
    g.bounded.add(row);
    report.overall_bounded.add(row);
    if (!row.within()) report.passed = false;
  }
  for (const auto& name : order) {
    auto g = groups[name];
    g.all.finish();
    g.bounded.finish();
    if (g.bounded.mean_abs_error > kGroupMeanBound) report.passed = false;
    report.groups.push_back(g);
  }
  report.overall_all.finish();
  report.overall_bounded.finish();
  if (report.timed > 0 && (report.coverage() < kCoverageMin || report.coverage() > kCoverageMax)) report.passed = false;
  return report;
}

void ErrorSummary::add(const ValidationRow& row) {
  const double err = std::fabs(row.error());
  mean_abs_error += err;
  ++rows;
  if (worst.empty() || err > worst_abs_error) {
    worst_abs_error = err;
    worst = fmt::format("{} {} {:+.1f}%", row.case_name, row.metric, 100.0 * row.error());
  }
}

void ErrorSummary::finish() {
  if (rows > 0) mean_abs_error /= static_cast<double>(rows);
}

std::string validation_text(const ValidationReport& report) {
  sim::report::TextTable t({"case", "metric", "measured", "predicted", "error", "80% interval", "status"});
  for (const auto& r : report.rows) {
    const auto value = [&](double v) {
      if (r.is_bytes) return sim::format_bytes(sim::Bytes{static_cast<std::int64_t>(v)});
      return r.is_ratio ? fmt::format("{:.3f}x", v) : sim::format_time(sim::seconds_to_time(v));
    };
    // The interval as the measurement's range relative to the prediction, and whether it held.
    const std::string interval = r.interval ? fmt::format("{:+.0f}% .. {:+.0f}% {}", 100.0 * (r.interval->low - 1.0),
                                                          100.0 * (r.interval->high - 1.0), r.covered() ? "in" : "OUT")
                                            : std::string("-");
    t.add_row({r.case_name, r.metric, value(r.measured_s), value(r.predicted_s),
               fmt::format("{:+.1f}%", 100.0 * r.error()), interval,
               r.known_gap ? "known gap" : (r.within() ? "ok" : fmt::format("FAIL (> {:.0f}%)", 100.0 * r.tolerance))});
  }
  std::string out = t.str() + "\n";
  if (!report.claims.empty()) {
    sim::report::TextTable claims({"case", "claim", "simulated", "required", "status"});
    for (const auto& c : report.claims) {
      claims.add_row(
          {c.case_name, c.claim, c.value, c.bound, c.holds ? "holds" : (c.known_gap ? "known gap" : "FAILS")});
    }
    out += claims.str() + "\n";
  }
  // Every row first (known gaps included): a known gap is still an error.
  sim::report::TextTable g({"group", "rows", "mean |error| (all)", "worst (all)", "bounded rows",
                            "mean |error| (bounded)", "known gaps", "in 80% interval"});
  const auto percent = [](const ErrorSummary& e) {
    return e.rows ? fmt::format("{:.1f}%", 100.0 * e.mean_abs_error) : std::string("-");
  };
  for (const auto& grp : report.groups) {
    g.add_row({grp.name, std::to_string(grp.all.rows), percent(grp.all), grp.all.worst.empty() ? "-" : grp.all.worst,
               std::to_string(grp.bounded.rows), percent(grp.bounded), std::to_string(grp.known_gaps),
               grp.timed ? fmt::format("{} of {}", grp.covered, grp.timed) : std::string("-")});
  }
  out += g.str();
  if (report.timed > 0) {
    out += fmt::format(
        "\n80% intervals (split conformal, leave-one-group-out, pooled by mechanism and device; docs/validation.md): "
        "{} of {} timing rows inside, {:.1f}% (required {:.0f}-{:.0f}%){}\n",
        report.covered, report.timed, 100.0 * report.coverage(), 100.0 * kCoverageMin, 100.0 * kCoverageMax,
        report.coverage() < kCoverageMin || report.coverage() > kCoverageMax ? ": COVERAGE OUT OF RANGE" : "");
  }
  if (report.overall_all.rows > 0) {
    out += fmt::format("\nmean |error| over all {} rows: {:.1f}% (worst {})\n", report.overall_all.rows,
                       100.0 * report.overall_all.mean_abs_error, report.overall_all.worst);
  }
  out += report.overall_bounded.rows > 0
             ? fmt::format("mean |error| over the {} bounded rows: {:.1f}%; {}\n", report.overall_bounded.rows,
                           100.0 * report.overall_bounded.mean_abs_error,
                           report.passed ? "all bounds hold" : "BOUNDS FAILED")
             : "no bounded rows: every case is a known gap\n";
  // One line per reason, naming what it covers: a whole case when every metric of the case has
  // this reason, else the case's metric.
  std::map<std::string, std::vector<std::string>> covered_by_reason;
  for (const auto& r : report.rows) {
    if (!r.known_gap) continue;
    const bool whole_case = std::all_of(report.rows.begin(), report.rows.end(), [&](const auto& o) {
      return o.case_name != r.case_name || o.known_gap == r.known_gap;
    });
    auto& names = covered_by_reason[*r.known_gap];
    const std::string name = whole_case ? r.case_name : fmt::format("{} {}", r.case_name, r.metric);
    if (std::find(names.begin(), names.end(), name) == names.end()) names.push_back(name);
  }
  std::map<std::string, std::string> gaps;
  for (const auto& [why, names] : covered_by_reason) gaps[fmt::format("{}", fmt::join(names, ", "))] = why;
  for (const auto& c : report.claims) {
    if (c.known_gap && !c.holds) gaps[c.case_name + " " + c.claim] = *c.known_gap;
  }
  if (!gaps.empty()) out += "\nknown gaps (in the table, out of the bounds):\n";
  for (const auto& [name, why] : gaps) out += fmt::format("  {}: {}\n", name, why);
  return out;
}

std::string validation_json(const ValidationReport& report) {
  sim::report::JsonWriter j;
  const auto summary = [&j](const char* key, const ErrorSummary& e) {
    j.key(key).begin_object().field("rows", static_cast<std::uint64_t>(e.rows));
    j.field("mean_abs_error", e.mean_abs_error).field("worst", e.worst).field("worst_abs_error", e.worst_abs_error);
    j.end_object();
  };
  j.begin_object().field("passed", report.passed);
  summary("all_rows", report.overall_all);
  summary("bounded_rows", report.overall_bounded);
  j.key("interval_coverage").begin_object();
  j.field("method", "split conformal 80%, leave-one-group-out, pooled by mechanism and device (docs/validation.md)");
  j.field("rows", static_cast<std::uint64_t>(report.timed))
      .field("covered", static_cast<std::uint64_t>(report.covered));
  j.field("fraction", report.coverage()).field("required_min", kCoverageMin).field("required_max", kCoverageMax);
  j.end_object();
  j.key("rows").begin_array();
  for (const auto& r : report.rows) {
    j.begin_object().field("case", r.case_name).field("group", r.group).field("metric", r.metric);
    if (r.is_ratio) {
      j.field("measured_ratio", r.measured_s).field("predicted_ratio", r.predicted_s);
    } else if (r.is_bytes) {
      j.field("measured_bytes", r.measured_s).field("predicted_bytes", r.predicted_s);
    } else {
      j.field("measured_s", r.measured_s).field("predicted_s", r.predicted_s);
    }
    j.field("error", r.error());
    if (r.interval) {
      j.key("interval_80").begin_object();
      j.field("low_s", r.predicted_s * r.interval->low).field("high_s", r.predicted_s * r.interval->high);
      j.field("pool", r.interval->pool).field("pool_rows", static_cast<std::uint64_t>(r.interval->rows));
      j.field("covered", r.covered()).end_object();
    }
    j.field("tolerance", r.tolerance);
    if (r.known_gap) {
      j.field("known_gap", *r.known_gap);
    } else {
      j.field("within", r.within());
    }
    j.end_object();
  }
  j.end_array();
  j.key("claims").begin_array();
  for (const auto& c : report.claims) {
    j.begin_object().field("case", c.case_name).field("claim", c.claim).field("simulated", c.value);
    j.field("required", c.bound).field("holds", c.holds);
    if (c.known_gap) j.field("known_gap", *c.known_gap);
    j.end_object();
  }
  j.end_array();
  j.key("groups").begin_array();
  for (const auto& g : report.groups) {
    j.begin_object().field("group", g.name);
    summary("all_rows", g.all);
    summary("bounded_rows", g.bounded);
    j.field("known_gaps", static_cast<std::uint64_t>(g.known_gaps));
    j.field("interval_rows", static_cast<std::uint64_t>(g.timed))
        .field("interval_covered", static_cast<std::uint64_t>(g.covered));
    j.end_object();
  }
  j.end_array().end_object();
  return j.str();
}

}  // namespace offsim::models
