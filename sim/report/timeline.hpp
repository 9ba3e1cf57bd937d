#pragma once
// Outputs over time of one simulated run:
//  - timeline.csv: one row per instant at which something changed; memory used per pool (bytes)
//    and the aggregate rate per link group (bytes/s); values hold until the next row. Pools that
//    were never used and link groups that never carried traffic are left out.
//  - trace.json: the Chrome Trace Event format (opens in Perfetto and chrome://tracing): one
//    track per compute unit (complete events), transfers as async events by link group, and
//    memory and link-rate counters.
// Link rates need the run to have recorded timelines (ExecOptions::record_link_timelines).
//
// A compact trace (TraceSelection::compact), for runs whose full trace would be too large to
// write or read (GPT-1T on a full Frontier: 3.4 M events, 400 MB): the counters per link class
// and direction for every link, and full detail (task slices, transfers, memory, per-device link
// counters) for the selected representative units and pools only; timeline.csv keeps those pools
// and the link classes. Both files are written to a TextSink as they are produced.
#include <cstdint>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "sim/exec/executor.hpp"
#include "sim/exec/task_graph.hpp"
#include "sim/report/text_sink.hpp"

namespace offsim::sim::report {

/// What the outputs over time hold: everything (compact false), or the compact form's
/// representatives.
struct TraceSelection {
  bool compact = false;
  std::vector<std::uint32_t> units;  // compute units whose tasks are written (compact only)
  std::vector<std::uint32_t> pools;  // memory pools written (compact only)
  std::vector<std::string> devices;  // devices whose links' rates are written (ConstraintSpec::from, to)
  std::string note;                  // compact only: what the trace holds, in trace.json's otherData
  /// Compact only: nothing that begins at or after this instant is written (ps). The whole run
  /// unless the representatives' own events exceed the limit (compact_window_end).
  std::int64_t window_end_ps = std::numeric_limits<std::int64_t>::max();
};

/// The events a full trace.json of this run holds at most (task slices and transfers, memory
/// samples, link-rate samples per class and per device; samples at one instant count apart):
/// its size, known before writing it (the shipped experiments write 48-62 bytes of trace.json and
/// timeline.csv per counted event).
[[nodiscard]] std::size_t full_trace_events(const TaskGraph& graph, const RunResult& run);

/// A step function: (time, value) points, each value holding until the next point.
struct Series {
  std::string name;
  std::vector<std::pair<std::int64_t, double>> points;
};

/// The bytes/s of every reporting group of links (the link class and direction), summed over its
/// links: both files hold them, so they are computed once for both.
[[nodiscard]] std::vector<Series> link_class_rates(const RunResult& run);

/// The end of the window of a compact trace: the largest instant such that the events the
/// selection writes (its tasks and transfers, its pools' samples, the link-class and its devices'
/// link counters) that begin before it number at most `limit`; int64 max when all of them fit.
/// A single simulated rank can run tens of millions of tasks (a tiny model at a huge width), so
/// a compact trace alone does not bound the files: the window does. Deterministic (a histogram of
/// the events' instants over the run, cut at a bucket boundary).
[[nodiscard]] std::int64_t compact_window_end(const Platform& platform, const TaskGraph& graph, const RunResult& run,
                                              const TraceSelection& selection, const std::vector<Series>& link_classes,
                                              std::size_t limit);

void write_timeline_csv(const RunResult& run, const TraceSelection& selection, const std::vector<Series>& link_classes,
                        TextSink& out);
void write_chrome_trace(const Platform& platform, const TaskGraph& graph, const RunResult& run,
                        const TraceSelection& selection, const std::vector<Series>& link_classes, TextSink& out);

/// The full files, as strings.
[[nodiscard]] std::string timeline_csv(const RunResult& run);
[[nodiscard]] std::string chrome_trace(const Platform& platform, const TaskGraph& graph, const RunResult& run);

}  // namespace offsim::sim::report
