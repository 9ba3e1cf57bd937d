#pragma once
// Replayed operations (issue 35): a schedule's repeated operations built once in full and then
// replayed as one task of the whole chain's duration (a "whole-chain price").
//
// With analytic collectives and tensor-parallel classes (one simulated rank per TP group) and no
// link activity reported (a sweep's or search's point), a Megatron operation's compute is a chain
// on its rank alone: kernels on its GPU, which nothing else uses while the schedule runs (one
// operation at a time), and analytic all-reduces, fixed-rate transfers that share no link and
// credit none. The first operation of each kind (TP group, forward or backward, virtual stage) is
// built in full and recorded; the next ones are one delay of its summed duration: kernel times,
// latencies and each transfer's bytes at its bound, each rounded up to the picosecond as the flow
// network rounds it, so the operation ends at the same picosecond. A fixed-rate transfer's start
// and end touch no shared flow (the flow network advances shared flows lazily), so the shared
// pipeline flows see the same changes at the same instants and every figure is the same to the
// bit (tests/unit/sweep_test.cpp compares the CSV rows with full builds), with one task per
// operation. The first operation of a kind too: once built and found to be a chain, its tasks are
// taken out of the graph again and replaced by the same one task (their kernels are on no report
// a point makes: its row reads the makespan, memory and rank 0's phase spans, whose ends are the
// operation's ends). A chain that is not one (a task with two dependencies, a memory task, a routed
// transfer) is never replayed: its kind is built in full.
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "models/strategies/phases/rank_timeline.hpp"
#include "sim/exec/task_graph.hpp"

namespace offsim::models {

/// The chains recorded by kind (the TP group's first rank, forward, virtual stage): their
/// duration, or nullopt when the kind's first operation was not a chain. A Megatron experiment
/// whose schedule is extrapolated from its steady state is built twice, at pp and 2 pp
/// micro-batches (models/experiment/run.cpp), with the same ranks, kernels and collectives: an
/// operation of a kind is the same chain in both (a kind's operations are already taken as the
/// same within one build; those the overlapped DDP hooks into, whose tasks depend on the
/// micro-batch count, are never replayed), so the second build replays what the first recorded
/// instead of building each kind's first operation in full again (a third of its tasks' building
/// in the tp 8 search's extrapolated points).
struct ReplayedChains {
  std::map<std::tuple<int, bool, int>, std::optional<sim::TimePs>> durations;
};

class OperationReplays {
 public:
  /// (the TP group's first rank, forward, virtual stage).
  using Key = std::tuple<int, bool, int>;
  /// An operation being built in full to be recorded (slot null: nothing to record).
  struct Recording {
    std::optional<sim::TimePs>* slot = nullptr;
    sim::TaskGraph::Mark begin;  // the graph before the operation's first task
    sim::TaskId start{};
  };

  /// `carried`: the chains an earlier build of the same experiment recorded (and where this one
  /// records its own); null: this build's alone.
  explicit OperationReplays(bool enabled, ReplayedChains* carried = nullptr)
      : enabled_(enabled), replays_(carried != nullptr ? carried->durations : own_.durations) {}
  OperationReplays(const OperationReplays&) = delete;  // replays_ may name own_
  OperationReplays& operator=(const OperationReplays&) = delete;
  [[nodiscard]] bool enabled() const { return enabled_; }

  /// When an operation of `key` was recorded as a chain: adds its replay on simulated rank s after
  /// `at` (which becomes its last task) and returns true.
  bool replayed(const Key& key, RankTimeline& timeline, int s, const std::string& tag, sim::TaskId& at);
  /// The first operation of `key` starts after `at`: record it (finish() once it is built).
  /// An empty Recording when `key` was seen before (built in full, not a chain).
  Recording start(const Key& key, const sim::TaskGraph& g, sim::TaskId at);
  /// Where a repeated piece of the recorded operation (a layer) begins: the graph's mark and the
  /// task the piece starts after.
  struct Piece {
    sim::TaskGraph::Mark begin;
    sim::TaskId start{};
  };
  /// The recorded operation is its head and then `repeats` pieces built alike (same tasks, same
  /// durations: a chunk's layers), of which the first, begun at `piece`, has just been built and
  /// ends at `at`. When head and piece are a chain, so is the operation, of the head's duration and
  /// `repeats` times the piece's: it is recorded without building the other pieces, its tasks give
  /// way to its replay, which `at` becomes, and true is returned (the caller builds no more of it).
  /// False: the caller builds the rest in full, then calls finish().
  bool finish_repeated(const Recording& recording, const Piece& piece, std::int64_t repeats, RankTimeline& timeline,
                       int s, const std::string& tag, std::uint32_t unit, sim::TaskId& at);
  /// The recorded operation, on simulated rank s, ended at `at`, its kernels on `unit`. When it is
  /// a chain, its tasks give way to its replay, which `at` becomes (the caller holds no other id
  /// of them).
  void finish(const Recording& recording, RankTimeline& timeline, int s, const std::string& tag, std::uint32_t unit,
              sim::TaskId& at);

 private:
  // The tasks built since `recording` began give way to the replay of `duration` (which `at`
  // becomes), when the graph can take them back (TaskGraph::roll_back); false: they stay as built.
  static bool replaced_by_replay(const Recording& recording, sim::TimePs duration, RankTimeline& timeline, int s,
                                 const std::string& tag, sim::TaskId& at);
  // The one task of a replayed chain of `duration` on simulated rank s, after `at`, which it becomes.
  static void add_replay(RankTimeline& timeline, int s, const std::string& tag, sim::TimePs duration, sim::TaskId& at);

  bool enabled_;
  ReplayedChains own_;
  std::map<Key, std::optional<sim::TimePs>>& replays_;  // the chain's duration; nullopt: not a chain
};

}  // namespace offsim::models
