#pragma once
// Replayed flow-level collectives (issue 35): a collective that repeats unchanged (Megatron's TP
// all-reduce: the same buffer over the same group at every layer piece of every micro-batch) is
// simulated once, alone, from simultaneous starts, and every occurrence in the iteration becomes
// one delay per member of that member's recorded duration; the run then checks the replay's
// preconditions and adds the recorded link statistics once per replay.
//
// Why it is exact. A flow's max-min rate depends only on the flows of its connected component
// (flows joined by shared constraints; FlowNetwork recomputes components alone, to the bit, ADR
// 0013), and the flow network is translation-invariant (a flow's finish is now + its bytes left
// at its rate, bytes are stepped over time differences). So a collective whose flows share no
// constraint with any other flow while it runs, and whose members all start at the same instant,
// runs in the iteration exactly as it ran alone from time 0: each member ends at its start plus
// its recorded duration, to the picosecond, and its constraints are credited the same amounts in
// the same order. Preconditions, each checked, with the full simulation as the fallback:
//   1. exclusive links (checked when the graph is built, replay_links_exclusive): no other task of
//      the graph routes or accounts a flow on a constraint a recorded collective used, and two
//      groups' recorded collectives use disjoint constraints (collectives of one owner, a group of
//      ranks with several recorded shapes, may share theirs: see 2);
//   2. simultaneous starts (checked after the run, replays_held): every replay's members start at
//      one instant. Then the replays of one group do not overlap either: each member's next one
//      starts after its previous one ended, and with simultaneous starts and ends all of one
//      replay's flows ended before any of the next started. Where an owner has several recorded
//      shapes, every replay of a later-recorded one starts after every replay of the earlier ones
//      ended, so that they never overlap and each link is credited in the full run's order;
//   3. the recording holds only transfers and barriers (no kernel or memory task, which would use
//      a unit or pool the iteration shares): otherwise the collective is built in full.
// When 1 or 2 fails the iteration is built and simulated again without replays (simulate_iteration,
// build_megatron). The statistics (add_replayed_statistics): each constraint's bytes are the sum of
// the recorded amounts, replay after replay in the order the full run would add them (nothing else
// credits the constraint: precondition 1), busy time the recorded busy time per replay, the peak the
// recorded peak. Link timelines are not replayed: a run that records them (--out) builds in full.
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "models/strategies/phases/iteration.hpp"
#include "models/strategies/phases/rank_timeline.hpp"
#include "sim/exec/executor.hpp"
#include "sim/exec/task_graph.hpp"

namespace offsim::models {

class CollectiveReplays {
 public:
  /// Adds the collective to `scratch` after the given per-member start tasks; returns each member's
  /// last task.
  using Build = std::function<std::vector<sim::TaskId>(sim::TaskGraph& scratch,
                                                       const std::vector<std::vector<sim::TaskId>>& starts)>;

  CollectiveReplays(bool enabled, const sim::Platform& platform) : enabled_(enabled), platform_(platform) {}
  [[nodiscard]] bool enabled() const { return enabled_; }

  /// The collective `key` (one per group and shape) on simulated ranks `members` after `deps`:
  /// replayed (one delay per member, named `<name>.replay` on the member's rank) and its last task
  /// per member returned; nullopt when it cannot be replayed (precondition 3), to be built in full.
  /// The first call for a key records it by running `build` alone.
  /// `owner` (>= 0; the key itself when left out): the group of ranks the collective runs over,
  /// for keys of several shapes on the same links (precondition 1).
  std::optional<std::vector<sim::TaskId>> add(int key, RankTimeline& timeline, const std::vector<int>& members,
                                              const std::string& name,
                                              const std::vector<std::vector<sim::TaskId>>& deps, const Build& build,
                                              std::optional<int> owner = std::nullopt);

  /// What the run checks and completes (BuiltIteration::replayed).
  [[nodiscard]] ReplayedCollectives take();

 private:
  struct Recording {
    std::vector<sim::TimePs> durations;  // per member
    std::size_t group = 0;               // in result_.groups
  };
  std::optional<Recording> record(const Build& build, std::size_t members, int owner);

  bool enabled_;
  const sim::Platform& platform_;
  std::map<int, std::optional<Recording>> recordings_;  // nullopt: not replayable
  ReplayedCollectives result_;
};

/// Precondition 1 on a built graph: no task other than the replays routes or accounts a flow on a
/// constraint a recorded collective used, and groups' constraints are disjoint.
[[nodiscard]] bool replay_links_exclusive(const ReplayedCollectives& replayed, const sim::TaskGraph& graph);

/// Precondition 2 after the run: every replay's members started at one instant.
[[nodiscard]] bool replays_held(const ReplayedCollectives& replayed, const sim::RunResult& run);

/// Adds each replay's recorded link statistics to the run's constraints.
void add_replayed_statistics(const ReplayedCollectives& replayed, sim::RunResult& run);

}  // namespace offsim::models
