#include "sim/report/timeline.hpp"

#include <fmt/format.h>
#include <algorithm>
#include <map>
#include <optional>
#include <set>

#include "sim/report/json_writer.hpp"

namespace offsim::sim::report {

namespace {

// A step function: (time, value) points, each value holding until the next point.
struct Series {
  std::string name;
  std::vector<std::pair<std::int64_t, double>> points;
};

// Sums the rate timelines of constraints into one step function per key; `keys_of` names the
// series a constraint counts in (none, one or several), in first-seen order.
template <class KeysOf>
std::vector<Series> summed_rates(const RunResult& run, KeysOf&& keys_of) {
  std::vector<std::string> order;
  std::map<std::string, std::vector<const ConstraintResult*>> members;
  for (const auto& c : run.constraints) {
    if (c.stats.bytes_carried <= 0.0) continue;
    for (std::string key : keys_of(c)) {
      if (!members.contains(key)) order.push_back(key);
      members[key].push_back(&c);
    }
  }
  std::vector<Series> out;
  for (const auto& group : order) {
    // Changes of every member in time order; each change replaces that member's contribution.
    std::vector<std::tuple<std::int64_t, std::size_t, double>> changes;
    const auto& list = members[group];
    for (std::size_t i = 0; i < list.size(); ++i) {
      for (const auto& sample : list[i]->stats.timeline) changes.emplace_back(sample.time.ps, i, sample.bytes_per_s);
    }
    std::stable_sort(changes.begin(), changes.end(),
                     [](const auto& a, const auto& b) { return std::get<0>(a) < std::get<0>(b); });
    std::vector<double> current(list.size(), 0.0);
    Series s{group, {}};
    // The total is kept up to date per change (summing every member was O(changes x members)),
    // and is exactly 0 whenever no member moves bytes, whatever the rounding before.
    double total = 0.0;
    std::size_t moving = 0;
    for (const auto& [time, member, rate] : changes) {
      moving += (rate > 0.0 ? 1 : 0);
      moving -= (current[member] > 0.0 ? 1 : 0);
      total += rate - current[member];
      current[member] = rate;
      if (moving == 0) total = 0.0;
      if (!s.points.empty() && s.points.back().first == time) {
        s.points.back().second = total;
      } else {
        s.points.emplace_back(time, total);
      }
    }
    out.push_back(std::move(s));
  }
  return out;
}

// One series per reporting group of links (the link class and direction).
std::vector<Series> link_groups(const RunResult& run) {
  return summed_rates(run, [](const ConstraintResult& c) { return std::vector<std::string>{c.group}; });
}

// One series per device and direction: the bytes/s on all the links out of it, and into it.
std::vector<Series> device_link_rates(const RunResult& run) {
  return summed_rates(run, [](const ConstraintResult& c) {
    std::vector<std::string> keys;
    if (!c.from.empty()) keys.push_back(c.from + " links out");
    if (!c.to.empty()) keys.push_back(c.to + " links in");
    return keys;
  });
}

std::vector<Series> memory_series(const RunResult& run) {
  std::vector<Series> out;
  for (const auto& p : run.pools) {
    if (p.peak.count == 0) continue;
    Series s{p.name, {}};
    for (const auto& sample : p.timeline) s.points.emplace_back(sample.time.ps, sample.used.as_double());
    out.push_back(std::move(s));
  }
  return out;
}

double seconds(std::int64_t ps) {
  return static_cast<double>(ps) * 1e-12;
}
double micros(std::int64_t ps) {
  return static_cast<double>(ps) * 1e-6;
}

}  // namespace

std::string timeline_csv(const RunResult& run) {
  std::vector<Series> series = memory_series(run);
  const std::size_t pools = series.size();
  for (auto& s : link_groups(run)) series.push_back(std::move(s));
  std::set<std::int64_t> times{0};
  for (const auto& s : series) {
    for (const auto& [t, v] : s.points) times.insert(t);
  }
  std::string out = "time_s";
  for (std::size_t i = 0; i < series.size(); ++i) {
    out += i < pools ? fmt::format(",{}_used_bytes", series[i].name) : fmt::format(",{}_bytes_per_s", series[i].name);
  }
  out += '\n';
  std::vector<std::size_t> next(series.size(), 0);
  std::vector<double> value(series.size(), 0.0);
  for (const auto t : times) {
    for (std::size_t i = 0; i < series.size(); ++i) {
      while (next[i] < series[i].points.size() && series[i].points[next[i]].first <= t)
        value[i] = series[i].points[next[i]++].second;
    }
    out += fmt::format("{}", seconds(t));
    for (const double v : value) out += fmt::format(",{}", v);
    out += '\n';
  }
  return out;
}

std::string chrome_trace(const Platform& platform, const TaskGraph& graph, const RunResult& run) {
  constexpr int kComputePid = 1;
  constexpr int kTransferPid = 2;
  constexpr int kMemoryPid = 3;
  std::string out = "{\"displayTimeUnit\": \"ms\", \"traceEvents\": [\n";
  bool first = true;
  const auto emit = [&](const std::string& event) {
    if (!first) out += ",\n";
    first = false;
    out += event;
  };
  const auto q = [](std::string_view s) { return JsonWriter::escape(s); };
  emit(fmt::format(R"({{"ph": "M", "pid": {}, "name": "process_name", "args": {{"name": "compute units"}}}})",
                   kComputePid));
  emit(fmt::format(R"({{"ph": "M", "pid": {}, "name": "process_name", "args": {{"name": "transfers and links"}}}})",
                   kTransferPid));
  emit(fmt::format(R"({{"ph": "M", "pid": {}, "name": "process_name", "args": {{"name": "memory"}}}})", kMemoryPid));
  // Tracks for the units that ran something: a machine's idle units (all but the simulated ranks'
  // under rank symmetry, tens of thousands on a full Frontier) would only bloat the file.
  std::vector<bool> used(platform.units.size(), false);
  // Work modelled as a flow through a constraint named after a unit (the host cores that CPU Adam
  // and the casts stream through are named after the cores' unit) shows on that unit's track too.
  std::map<std::string, std::size_t> unit_by_name;
  for (std::size_t u = 0; u < platform.units.size(); ++u) unit_by_name.emplace(platform.units[u].name, u);
  std::vector<std::optional<std::size_t>> unit_of_constraint(platform.constraints.size());
  for (std::size_t c = 0; c < platform.constraints.size(); ++c) {
    if (auto it = unit_by_name.find(platform.constraints[c].name); it != unit_by_name.end()) {
      unit_of_constraint[c] = it->second;
    }
  }
  const auto unit_worked_by = [&](const TransferTask& x) -> std::optional<std::size_t> {
    for (const auto c : x.route) {
      if (unit_of_constraint[c.index]) return unit_of_constraint[c.index];
    }
    return std::nullopt;
  };
  for (const auto& task : graph.tasks()) {
    if (const auto* c = std::get_if<ComputeTask>(&task.body)) used[c->unit] = true;
    if (const auto* x = std::get_if<TransferTask>(&task.body)) {
      if (const auto u = unit_worked_by(*x)) used[*u] = true;
    }
  }
  for (std::size_t u = 0; u < platform.units.size(); ++u) {
    if (!used[u]) continue;
    emit(fmt::format(R"({{"ph": "M", "pid": {}, "tid": {}, "name": "thread_name", "args": {{"name": {}}}}})",
                     kComputePid, u, q(platform.units[u].name)));
  }
  for (const auto& task : graph.tasks()) {
    const auto& rec = run.tasks[task.id.index];
    if (const auto* c = std::get_if<ComputeTask>(&task.body)) {
      emit(fmt::format(R"({{"ph": "X", "pid": {}, "tid": {}, "name": {}, "cat": {}, "ts": {}, "dur": {}}})",
                       kComputePid, c->unit, q(graph.name(task)), q(graph.phase(task)), micros(rec.start.ps),
                       micros(rec.end.ps - rec.start.ps)));
    } else if (const auto* x = std::get_if<TransferTask>(&task.body)) {
      if (const auto u = unit_worked_by(*x)) {
        emit(fmt::format(R"({{"ph": "X", "pid": {}, "tid": {}, "name": {}, "cat": {}, "ts": {}, "dur": {}}})",
                         kComputePid, *u, q(graph.name(task)), q(graph.phase(task)), micros(rec.start.ps),
                         micros(rec.end.ps - rec.start.ps)));
      }
      const std::string cat = x->route.empty() ? "transfer" : run.constraints[x->route.front().index].group;
      emit(
          fmt::format(R"({{"ph": "b", "pid": {}, "id": {}, "name": {}, "cat": {}, "ts": {}, "args": {{"bytes": {}}}}})",
                      kTransferPid, task.id.index, q(graph.name(task)), q(cat), micros(rec.start.ps), x->bytes.count));
      emit(fmt::format(R"({{"ph": "e", "pid": {}, "id": {}, "name": {}, "cat": {}, "ts": {}}})", kTransferPid,
                       task.id.index, q(graph.name(task)), q(cat), micros(rec.end.ps)));
    }
  }
  for (const auto& s : memory_series(run)) {
    for (const auto& [t, v] : s.points) {
      emit(fmt::format(R"({{"ph": "C", "pid": {}, "name": {}, "ts": {}, "args": {{"used_bytes": {}}}}})", kMemoryPid,
                       q(s.name), micros(t), v));
    }
  }
  // Link counters: per class and direction, then per device (its links out and in).
  for (const auto& series : {link_groups(run), device_link_rates(run)}) {
    for (const auto& s : series) {
      for (const auto& [t, v] : s.points) {
        emit(fmt::format(R"({{"ph": "C", "pid": {}, "name": {}, "ts": {}, "args": {{"bytes_per_s": {}}}}})",
                         kTransferPid, q(s.name), micros(t), v));
      }
    }
  }
  out += "\n]}\n";
  return out;
}

}  // namespace offsim::sim::report
