#include "models/strategies/phases/operation_replay.hpp"

#include <fmt/compile.h>
#include <fmt/format.h>

#include <variant>

#include "models/transformer/phases.hpp"

namespace offsim::models {

namespace {

// The duration of the chain of tasks [begin, end of the graph) from `start` to `last`, when it is
// one: each task depending on the one before alone, kernels on `unit`, barriers, delays and
// fixed-rate transfers that hold no link and credit none. A fixed-rate transfer takes its latency
// and then its bytes at its bound, rounded up to the picosecond as the flow network does
// (FlowNetwork::start_fixed), so the sum is the chain's duration to the picosecond.
std::optional<sim::TimePs> chain_of(const sim::TaskGraph& g, sim::TaskId start, std::size_t begin, sim::TaskId last,
                                    std::uint32_t unit) {
  sim::TimePs total{0};
  sim::TaskId previous = start;
  for (std::size_t i = begin; i < g.size(); ++i) {
    const sim::Task& t = g.tasks()[i];
    const auto deps = g.deps(t);
    if (deps.size() != 1 || deps[0] != previous) return std::nullopt;
    previous = t.id;
    if (const auto* c = std::get_if<sim::ComputeTask>(&t.body)) {
      if (c->unit != unit) return std::nullopt;
      total = total + c->duration;
    } else if (const auto* x = std::get_if<sim::TransferTask>(&t.body)) {
      if (!x->route.empty() || !x->accounted.empty()) return std::nullopt;
      if (x->bytes.count == 0) {
        total = total + x->latency;  // a delay: it touches no flow
      } else if (x->rate_bound) {
        total = total + x->latency + sim::duration_of(x->bytes.as_double(), x->rate_bound->bytes_per_s);
      } else {
        return std::nullopt;
      }
    } else if (!std::holds_alternative<sim::BarrierTask>(t.body)) {
      return std::nullopt;  // memory, or anything else that is not a delay
    }
  }
  if (previous != last) return std::nullopt;
  return total;
}

}  // namespace

void OperationReplays::add_replay(RankTimeline& timeline, int s, const std::string& tag, sim::TimePs duration,
                                  sim::TaskId& at) {
  sim::TaskGraph& g = timeline.graph();
  at = g.add(g.name_from([&] { return timeline.task_name(s, tag + ".replay"); }), phase::kCommunication,
             sim::TransferTask{{}, sim::Bytes{0}, duration, {}, {}}, {at});
}

bool OperationReplays::replayed(const Key& key, RankTimeline& timeline, int s, const std::string& tag,
                                sim::TaskId& at) {
  const auto it = replays_.find(key);
  if (it == replays_.end() || !it->second) return false;
  add_replay(timeline, s, tag, *it->second, at);
  return true;
}

OperationReplays::Recording OperationReplays::start(const Key& key, const sim::TaskGraph& g, sim::TaskId at) {
  const auto [it, first_of_its_kind] = replays_.try_emplace(key);
  if (!first_of_its_kind) return {};
  return {&it->second, g.mark(), at};
}

bool OperationReplays::replaced_by_replay(const Recording& recording, sim::TimePs duration, RankTimeline& timeline,
                                          int s, const std::string& tag, sim::TaskId& at) {
  if (!timeline.graph().roll_back(recording.begin)) return false;
  at = recording.start;
  add_replay(timeline, s, tag, duration, at);
  return true;
}

bool OperationReplays::finish_repeated(const Recording& recording, const Piece& piece, std::int64_t repeats,
                                       RankTimeline& timeline, int s, const std::string& tag, std::uint32_t unit,
                                       sim::TaskId& at) {
  if (recording.slot == nullptr) return false;
  const sim::TaskGraph& g = timeline.graph();
  const auto built = chain_of(g, recording.start, recording.begin.tasks, at, unit);
  if (!built) return false;
  const auto one_piece = chain_of(g, piece.start, piece.begin.tasks, at, unit);
  if (!one_piece) return false;
  // Integer picoseconds: the sum of the pieces' task durations, as if each were built (and as
  // checked: past the clock's range it throws SimulationLimit as the full sum would).
  const sim::TimePs total = *built + one_piece->times(repeats - 1);
  if (!replaced_by_replay(recording, total, timeline, s, tag, at)) return false;
  *recording.slot = total;
  return true;
}

void OperationReplays::finish(const Recording& recording, RankTimeline& timeline, int s, const std::string& tag,
                              std::uint32_t unit, sim::TaskId& at) {
  if (recording.slot == nullptr) return;
  *recording.slot = chain_of(timeline.graph(), recording.start, recording.begin.tasks, at, unit);
  // The chain's tasks and their one-task replay end at the same picosecond (above): the replay
  // is simulated instead, as the operations after it are.
  if (*recording.slot) (void)replaced_by_replay(recording, **recording.slot, timeline, s, tag, at);
}

}  // namespace offsim::models
