#pragma once
// The simulated ranks of one iteration's task graph, and the tasks every strategy adds to them:
// compute on a rank's GPU, allocations and frees in its memory. A rank's tasks are named
// `r<rank>.<name>` (its prefix), so that a graph reads the same whatever schedule built it.
// The steps every schedule shares (phases/steps.hpp) take this context; a builder keeps only its
// schedule and what is its own.
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "sim/core/units.hpp"
#include "sim/exec/task_graph.hpp"

namespace offsim::models {

/// The tasks a new task waits for, as the timeline's methods take them: a braced list (`{a, b}`,
/// whose array lives to the end of the call's full expression), a vector or a span, viewed and
/// not copied. The graph copies them at once, so a builder's `{at[i]}` costs no allocation (a
/// `std::vector` parameter made one per task: issue 35).
class TaskIds {
 public:
  TaskIds(std::initializer_list<sim::TaskId> ids) : ids_(ids.begin(), ids.size()) {}
  TaskIds(const std::vector<sim::TaskId>& ids) : ids_(ids) {}  // NOLINT(google-explicit-constructor)
  TaskIds(std::span<const sim::TaskId> ids) : ids_(ids) {}     // NOLINT(google-explicit-constructor)
  [[nodiscard]] std::span<const sim::TaskId> span() const { return ids_; }

 private:
  std::span<const sim::TaskId> ids_;
};

/// Where one simulated rank runs.
struct RankSlot {
  int rank = 0;            // its number in the job
  std::uint32_t unit = 0;  // its GPU's compute unit
  std::uint32_t pool = 0;  // its GPU's memory
  std::string prefix;      // "r<rank>"
};

class RankTimeline {
 public:
  explicit RankTimeline(sim::TaskGraph& graph) : graph_(graph) {}

  /// Adds a simulated rank (in the order of the simulated ranks); returns its index.
  int add_rank(int rank, std::uint32_t unit, std::uint32_t pool);

  [[nodiscard]] int size() const { return static_cast<int>(slots_.size()); }
  [[nodiscard]] const RankSlot& slot(int r) const { return slots_[static_cast<std::size_t>(r)]; }
  [[nodiscard]] sim::TaskGraph& graph() { return graph_; }
  /// `prefix.name` of simulated rank r.
  [[nodiscard]] std::string task_name(int r, std::string_view name) const;

  /// A kernel on rank r's GPU: `duration` as the cost model decided; flops and the bytes it moves
  /// for the reports.
  sim::TaskId compute(int r, std::string_view name, const char* phase, sim::TimePs duration, sim::Flops flops,
                      const char* kernel, TaskIds deps, sim::Bytes bytes = sim::Bytes{0});
  /// A memory-bound kernel on rank r's GPU that moves `bytes` in `duration`.
  sim::TaskId memory_pass(int r, std::string_view name, const char* phase, sim::TimePs duration, sim::Bytes bytes,
                          const char* kernel, TaskIds deps) {
    return compute(r, name, phase, duration, {}, kernel, deps, bytes);
  }
  /// `bytes` of `tenant` reserved (alloc) or released (release) in rank r's GPU memory.
  sim::TaskId alloc(int r, std::string_view name, const char* phase, const char* tenant, sim::Bytes bytes,
                    TaskIds deps);
  sim::TaskId release(int r, std::string_view name, const char* phase, const char* tenant, sim::Bytes bytes,
                      TaskIds deps);
  /// A barrier of rank r after `deps`.
  sim::TaskId barrier(int r, std::string_view name, const char* phase, TaskIds deps);

  /// Each rank's task as its only dependency (the form collectives take).
  [[nodiscard]] std::vector<std::vector<sim::TaskId>> per_rank(const std::vector<sim::TaskId>& tasks) const;

 private:
  sim::TaskGraph& graph_;
  std::vector<RankSlot> slots_;
};

/// Framework work on each rank's host thread (launching collectives, Python bookkeeping): a delay
/// that holds no link or unit. One thread per rank, so each piece also waits for the rank's
/// previous one: callers must add them in the thread's program order.
class HostThreads {
 public:
  explicit HostThreads(RankTimeline& ranks) : ranks_(ranks), last_(static_cast<std::size_t>(ranks.size())) {}
  sim::TaskId work(int r, std::string_view name, sim::TimePs duration, std::vector<sim::TaskId> deps);

 private:
  RankTimeline& ranks_;
  std::vector<std::optional<sim::TaskId>> last_;
};

}  // namespace offsim::models
