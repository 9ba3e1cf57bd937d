#include "sim/report/timeline.hpp"

#include <fmt/format.h>
#include <algorithm>
#include <map>
#include <optional>
#include <queue>
#include <set>

#include "sim/report/json_writer.hpp"

namespace offsim::sim::report {

namespace {

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
    // Changes of every member in time order (equal times: in member order, then in the member's
    // own order), merged from the members' timelines, each already in time order: a heap of one
    // cursor per member, not every change of every member copied and sorted (GPT-1T's gpu-gpu
    // links hold millions). Each change replaces that member's contribution.
    const auto& list = members[group];
    using Cursor = std::pair<std::int64_t, std::size_t>;  // (time of the member's next change, member)
    std::priority_queue<Cursor, std::vector<Cursor>, std::greater<>> heads;
    std::vector<std::size_t> next(list.size(), 0);
    for (std::size_t i = 0; i < list.size(); ++i) {
      if (!list[i]->stats.timeline.empty()) heads.emplace(list[i]->stats.timeline.front().time.ps, i);
    }
    std::vector<double> current(list.size(), 0.0);
    Series s{group, {}};
    // The total is kept up to date per change (summing every member was O(changes x members)),
    // and is exactly 0 whenever no member moves bytes, whatever the rounding before.
    double total = 0.0;
    std::size_t moving = 0;
    while (!heads.empty()) {
      const auto [time, member] = heads.top();
      heads.pop();
      const auto& timeline = list[member]->stats.timeline;
      const double rate = timeline[next[member]].bytes_per_s;
      if (++next[member] < timeline.size()) heads.emplace(timeline[next[member]].time.ps, member);
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

// One series per device and direction: the bytes/s on all the links out of it, and into it; only
// the devices in `only` when given.
std::vector<Series> device_link_rates(const RunResult& run, const std::set<std::string, std::less<>>* only) {
  return summed_rates(run, [only](const ConstraintResult& c) {
    std::vector<std::string> keys;
    const auto wanted = [only](const std::string& device) {
      return !device.empty() && (only == nullptr || only->contains(device));
    };
    if (wanted(c.from)) keys.push_back(c.from + " links out");
    if (wanted(c.to)) keys.push_back(c.to + " links in");
    return keys;
  });
}

bool selected(const std::vector<std::uint32_t>& sorted, std::uint32_t index) {
  return std::binary_search(sorted.begin(), sorted.end(), index);
}

// The pools that were used (only the selection's in a compact trace).
std::vector<Series> memory_series(const RunResult& run, const TraceSelection& selection) {
  std::vector<Series> out;
  for (std::uint32_t i = 0; i < run.pools.size(); ++i) {
    const auto& p = run.pools[i];
    if (p.peak.count == 0 || (selection.compact && !selected(selection.pools, i))) continue;
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

std::vector<Series> link_class_rates(const RunResult& run) {
  return summed_rates(run, [](const ConstraintResult& c) { return std::vector<std::string>{c.group}; });
}

void write_timeline_csv(const RunResult& run, const TraceSelection& selection, const std::vector<Series>& link_classes,
                        TextSink& out) {
  std::vector<Series> series = memory_series(run, selection);
  const std::size_t pools = series.size();
  series.insert(series.end(), link_classes.begin(), link_classes.end());
  std::set<std::int64_t> times{0};
  for (const auto& s : series) {
    for (const auto& [t, v] : s.points) {
      if (t < selection.window_end_ps) times.insert(t);
    }
  }
  out.append("time_s");
  for (std::size_t i = 0; i < series.size(); ++i) {
    if (i < pools) {
      out.format(",{}_used_bytes", series[i].name);
    } else {
      out.format(",{}_bytes_per_s", series[i].name);
    }
  }
  out.append('\n');
  std::vector<std::size_t> next(series.size(), 0);
  std::vector<double> value(series.size(), 0.0);
  for (const auto t : times) {
    for (std::size_t i = 0; i < series.size(); ++i) {
      while (next[i] < series[i].points.size() && series[i].points[next[i]].first <= t)
        value[i] = series[i].points[next[i]++].second;
    }
    out.format("{}", seconds(t));
    for (const double v : value) out.format(",{}", v);
    out.append('\n');
  }
}

std::string timeline_csv(const RunResult& run) {
  TextSink out;
  write_timeline_csv(run, TraceSelection{}, link_class_rates(run), out);
  return out.take();
}

std::size_t full_trace_events(const TaskGraph& graph, const RunResult& run) {
  std::size_t events = 0;
  for (const auto& task : graph.tasks()) {
    if (std::holds_alternative<ComputeTask>(task.body)) events += 1;
    if (std::holds_alternative<TransferTask>(task.body)) events += 3;  // begin, end, maybe a slice
  }
  for (const auto& p : run.pools) {
    if (p.peak.count != 0) events += p.timeline.size();
  }
  for (const auto& c : run.constraints) {
    if (c.stats.bytes_carried <= 0.0) continue;
    const std::size_t series = 1 + (c.from.empty() ? 0 : 1) + (c.to.empty() ? 0 : 1);
    events += series * c.stats.timeline.size();
  }
  return events;
}

namespace {

constexpr int kComputePid = 1;
constexpr int kTransferPid = 2;
constexpr int kMemoryPid = 3;

// trace.json's events, comma-separated, each written to the sink as it is made.
class EventWriter {
 public:
  explicit EventWriter(TextSink& out) : out_(out) {}
  template <class... T>
  void operator()(fmt::format_string<T...> f, T&&... args) {
    if (!first_) out_.append(",\n");
    first_ = false;
    out_.format(f, std::forward<T>(args)...);
  }

 private:
  TextSink& out_;
  bool first_ = true;
};

std::string q(std::string_view s) {
  return JsonWriter::escape(s);
}

// Which compute unit's track shows each transfer, and whether it touches the selection.
struct TransferPlacement {
  // Work modelled as a flow through a constraint named after a unit (the host cores that CPU Adam
  // and the casts stream through are named after the cores' unit) shows on that unit's track too.
  std::vector<std::optional<std::size_t>> unit_of_constraint;
  std::vector<bool> touches_selection;  // per constraint: from or to a selected device (compact)

  TransferPlacement(const Platform& platform, const TraceSelection& selection)
      : unit_of_constraint(platform.constraints.size()), touches_selection(platform.constraints.size(), false) {
    std::map<std::string, std::size_t, std::less<>> unit_by_name;
    for (std::size_t u = 0; u < platform.units.size(); ++u) unit_by_name.emplace(platform.units[u].name, u);
    const std::set<std::string, std::less<>> selected_names(selection.devices.begin(), selection.devices.end());
    for (std::size_t c = 0; c < platform.constraints.size(); ++c) {
      const auto& spec = platform.constraints[c];
      if (auto it = unit_by_name.find(spec.name); it != unit_by_name.end()) unit_of_constraint[c] = it->second;
      touches_selection[c] = selected_names.contains(spec.from) || selected_names.contains(spec.to);
    }
  }
  [[nodiscard]] std::optional<std::size_t> unit_worked_by(const TransferTask& x) const {
    for (const auto c : x.route) {
      if (unit_of_constraint[c.index]) return unit_of_constraint[c.index];
    }
    return std::nullopt;
  }
  [[nodiscard]] bool touches(const TransferTask& x) const {
    return std::any_of(x.route.begin(), x.route.end(), [&](ConstraintId c) { return touches_selection[c.index]; });
  }
};

// The metadata: process names, and a track per unit that ran something (only the selected units
// in a compact trace): a machine's idle units (all but the simulated ranks' under rank symmetry,
// tens of thousands on a full Frontier) would only bloat the file.
void write_tracks(const Platform& platform, const TaskGraph& graph, const TraceSelection& selection,
                  const TransferPlacement& placement, EventWriter& emit) {
  emit(R"({{"ph": "M", "pid": {}, "name": "process_name", "args": {{"name": "compute units"}}}})", kComputePid);
  emit(R"({{"ph": "M", "pid": {}, "name": "process_name", "args": {{"name": "transfers and links"}}}})", kTransferPid);
  emit(R"({{"ph": "M", "pid": {}, "name": "process_name", "args": {{"name": "memory"}}}})", kMemoryPid);
  std::vector<bool> used(platform.units.size(), false);
  for (const auto& task : graph.tasks()) {
    if (const auto* c = std::get_if<ComputeTask>(&task.body)) used[c->unit] = true;
    if (const auto* x = std::get_if<TransferTask>(&task.body)) {
      if (const auto u = placement.unit_worked_by(*x)) used[*u] = true;
    }
  }
  for (std::uint32_t u = 0; u < platform.units.size(); ++u) {
    if (!used[u] || (selection.compact && !selected(selection.units, u))) continue;
    emit(R"({{"ph": "M", "pid": {}, "tid": {}, "name": "thread_name", "args": {{"name": {}}}}})", kComputePid, u,
         q(platform.units[u].name));
  }
}

// Compute slices on their unit's track; transfers as async events by link group, and as slices on
// the track of a unit they stand for. In a compact trace only the selected units' tasks and the
// transfers into or out of them.
void write_tasks(const TaskGraph& graph, const RunResult& run, const TraceSelection& selection,
                 const TransferPlacement& placement, EventWriter& emit) {
  const auto shown = [&](std::size_t unit) {
    return !selection.compact || selected(selection.units, static_cast<std::uint32_t>(unit));
  };
  for (const auto& task : graph.tasks()) {
    const auto& rec = run.tasks[task.id.index];
    if (rec.start.ps >= selection.window_end_ps) continue;
    if (const auto* c = std::get_if<ComputeTask>(&task.body)) {
      if (!shown(c->unit)) continue;
      emit(R"({{"ph": "X", "pid": {}, "tid": {}, "name": {}, "cat": {}, "ts": {}, "dur": {}}})", kComputePid, c->unit,
           q(graph.name(task)), q(graph.phase(task)), micros(rec.start.ps), micros(rec.end.ps - rec.start.ps));
    } else if (const auto* x = std::get_if<TransferTask>(&task.body)) {
      const auto u = placement.unit_worked_by(*x);
      if (selection.compact && !(u && shown(*u)) && !placement.touches(*x)) continue;
      if (u && shown(*u)) {
        emit(R"({{"ph": "X", "pid": {}, "tid": {}, "name": {}, "cat": {}, "ts": {}, "dur": {}}})", kComputePid, *u,
             q(graph.name(task)), q(graph.phase(task)), micros(rec.start.ps), micros(rec.end.ps - rec.start.ps));
      }
      const std::string cat = x->route.empty() ? "transfer" : run.constraints[x->route.front().index].group;
      emit(R"({{"ph": "b", "pid": {}, "id": {}, "name": {}, "cat": {}, "ts": {}, "args": {{"bytes": {}}}}})",
           kTransferPid, task.id.index, q(graph.name(task)), q(cat), micros(rec.start.ps), x->bytes.count);
      emit(R"({{"ph": "e", "pid": {}, "id": {}, "name": {}, "cat": {}, "ts": {}}})", kTransferPid, task.id.index,
           q(graph.name(task)), q(cat), micros(rec.end.ps));
    }
  }
}

// Memory counters, then link counters: per class and direction, then per device (its links out
// and in; only the selected units' in a compact trace).
void write_counters(const RunResult& run, const TraceSelection& selection, const std::vector<Series>& link_classes,
                    EventWriter& emit) {
  for (const auto& s : memory_series(run, selection)) {
    for (const auto& [t, v] : s.points) {
      if (t >= selection.window_end_ps) break;
      emit(R"({{"ph": "C", "pid": {}, "name": {}, "ts": {}, "args": {{"used_bytes": {}}}}})", kMemoryPid, q(s.name),
           micros(t), v);
    }
  }
  const std::set<std::string, std::less<>> devices(selection.devices.begin(), selection.devices.end());
  const auto write = [&](const std::vector<Series>& series) {
    for (const auto& s : series) {
      for (const auto& [t, v] : s.points) {
        if (t >= selection.window_end_ps) break;
        emit(R"({{"ph": "C", "pid": {}, "name": {}, "ts": {}, "args": {{"bytes_per_s": {}}}}})", kTransferPid,
             q(s.name), micros(t), v);
      }
    }
  };
  write(link_classes);
  write(device_link_rates(run, selection.compact ? &devices : nullptr));
}

}  // namespace

std::int64_t compact_window_end(const Platform& platform, const TaskGraph& graph, const RunResult& run,
                                const TraceSelection& selection, const std::vector<Series>& link_classes,
                                std::size_t limit) {
  // The cut's resolution, not a property of anything modelled: the window ends on one of this
  // many equal steps of the run, so it holds at most `limit` events and at least all but one
  // step's worth.
  constexpr std::int64_t kSteps = 1 << 16;
  const std::int64_t step = std::max<std::int64_t>(run.makespan.ps, 0) / kSteps + 1;
  std::vector<std::size_t> per_step(static_cast<std::size_t>(kSteps) + 1, 0);
  std::size_t total = 0;
  const auto add = [&](std::int64_t t, std::size_t events) {
    const std::int64_t k = std::clamp<std::int64_t>(t / step, 0, kSteps);
    per_step[static_cast<std::size_t>(k)] += events;
    total += events;
  };
  // What write_tasks, write_counters and write_timeline_csv write for this selection.
  const TransferPlacement placement(platform, selection);
  for (const auto& task : graph.tasks()) {
    const auto start = run.tasks[task.id.index].start.ps;
    if (const auto* c = std::get_if<ComputeTask>(&task.body)) {
      if (selected(selection.units, c->unit)) add(start, 1);
    } else if (const auto* x = std::get_if<TransferTask>(&task.body)) {
      const auto u = placement.unit_worked_by(*x);
      const bool on_unit = u && selected(selection.units, static_cast<std::uint32_t>(*u));
      if (on_unit || placement.touches(*x)) add(start, on_unit ? 3 : 2);
    }
  }
  const auto add_series = [&](const Series& s) {
    for (const auto& point : s.points) add(point.first, 2);  // a trace counter and a csv row
  };
  for (const auto& s : memory_series(run, selection)) add_series(s);
  for (const auto& s : link_classes) add_series(s);
  for (std::size_t c = 0; c < run.constraints.size(); ++c) {
    if (!placement.touches_selection[c] || run.constraints[c].stats.bytes_carried <= 0.0) continue;
    for (const auto& sample : run.constraints[c].stats.timeline) add(sample.time.ps, 1);
  }
  if (total <= limit) return std::numeric_limits<std::int64_t>::max();
  std::size_t within = 0;
  std::int64_t k = 0;
  while (k <= kSteps && within + per_step[static_cast<std::size_t>(k)] <= limit)
    within += per_step[static_cast<std::size_t>(k++)];
  return std::max<std::int64_t>(k * step, 1);
}

void write_chrome_trace(const Platform& platform, const TaskGraph& graph, const RunResult& run,
                        const TraceSelection& selection, const std::vector<Series>& link_classes, TextSink& out) {
  out.append("{\"displayTimeUnit\": \"ms\", ");
  // Chrome's Trace Event format keeps otherData as the trace's metadata (Perfetto shows it too).
  if (selection.compact) out.format("\"otherData\": {{\"trace\": \"compact\", \"holds\": {}}}, ", q(selection.note));
  out.append("\"traceEvents\": [\n");
  EventWriter emit(out);
  const TransferPlacement placement(platform, selection);
  write_tracks(platform, graph, selection, placement, emit);
  write_tasks(graph, run, selection, placement, emit);
  write_counters(run, selection, link_classes, emit);
  out.append("\n]}\n");
}

std::string chrome_trace(const Platform& platform, const TaskGraph& graph, const RunResult& run) {
  TextSink out;
  write_chrome_trace(platform, graph, run, TraceSelection{}, link_class_rates(run), out);
  return out.take();
}

}  // namespace offsim::sim::report
