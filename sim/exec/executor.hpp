#pragma once
// Dataflow executor: runs a TaskGraph on the resources of a Platform.
//
// A task becomes ready when all its dependencies have finished. Ready tasks are started in
// (priority, id) order. Compute tasks queue on their unit; transfers become flows on the flow
// network; alloc, free and barrier tasks finish the instant they start. If the event queue drains
// while tasks are still waiting, the run is a deadlock and the error names what was waiting on what.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "sim/exec/task_graph.hpp"
#include "sim/resources/flow_network.hpp"
#include "sim/resources/memory_pool.hpp"

namespace offsim::sim {

struct TaskRecord {
  TimePs ready{0};
  TimePs start{0};
  TimePs end{0};
};

struct UnitResult {
  std::string name;
  int lanes = 1;
  TimePs busy_time{0};
  std::uint64_t tasks_run = 0;
};

struct ConstraintResult {
  std::string name;
  std::string link_class;
  std::string group;
  std::string from, to;  // a link's endpoints (ConstraintSpec)
  Bandwidth capacity;
  ConstraintStats stats;
};

struct PoolResult {
  std::string name;
  std::string kind;
  Bytes capacity{0};
  Bytes peak{0};
  TimePs peak_time{0};
  std::vector<MemorySample> timeline;
  std::optional<MemoryOverflow> overflow;
};

struct RunResult {
  TimePs makespan{0};
  std::uint64_t events_processed = 0;
  std::vector<TaskRecord> tasks;  // indexed by TaskId
  std::vector<UnitResult> units;
  std::vector<ConstraintResult> constraints;  // empty without link statistics (ExecOptions)
  std::vector<PoolResult> pools;
};

struct ExecOptions {
  bool record_link_timelines = false;
  bool record_link_credits = false;  // ConstraintStats::credits (a replay's recording run)
  // false: the constraints' statistics (bytes, busy time, peak) are not kept and the result lists
  // no constraint (RunResult::constraints is empty); task times, memory and every other figure are
  // the same (a sweep or search point, whose rows hold no link activity). Recording timelines or
  // credits keeps them.
  bool link_statistics = true;
};

/// Runs `graph` on fresh resources built from `platform`. Throws std::invalid_argument for an
/// invalid graph and SimulationError for a deadlock.
[[nodiscard]] RunResult execute(const Platform& platform, const TaskGraph& graph, const ExecOptions& options = {});

}  // namespace offsim::sim
