#pragma once
// Outputs over time of one simulated run:
//  - timeline.csv: one row per instant at which something changed; memory used per pool (bytes)
//    and the aggregate rate per link group (bytes/s); values hold until the next row. Pools that
//    were never used and link groups that never carried traffic are left out.
//  - trace.json: the Chrome Trace Event format (opens in Perfetto and chrome://tracing): one
//    track per compute unit (complete events), transfers as async events by link group, and
//    memory and link-rate counters.
// Link rates need the run to have recorded timelines (ExecOptions::record_link_timelines).
#include <string>

#include "sim/exec/executor.hpp"
#include "sim/exec/task_graph.hpp"

namespace offsim::sim::report {

[[nodiscard]] std::string timeline_csv(const RunResult& run);
[[nodiscard]] std::string chrome_trace(const Platform& platform, const TaskGraph& graph, const RunResult& run);

}  // namespace offsim::sim::report
