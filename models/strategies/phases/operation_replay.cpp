#include "models/strategies/phases/operation_replay.hpp"

#include <fmt/compile.h>
#include <fmt/format.h>

#include <variant>

#include "models/transformer/phases.hpp"

namespace offsim::models {

namespace {

// The chain of tasks [begin, end of the graph) from `start` to `last`, when it is one: each task
// depending on the one before alone, kernels on `unit`, barriers, delays and fixed-rate transfers
// that hold no link and credit none. Each transfer takes the time before it (kernels, delays) into
// its latency; `tail` gets the time after the last one.
std::optional<std::vector<sim::TransferTask>> chain_of(const sim::TaskGraph& g, sim::TaskId start, std::size_t begin,
                                                       sim::TaskId last, std::uint32_t unit, sim::TimePs& tail) {
  std::vector<sim::TransferTask> transfers;
  sim::TimePs before{0};  // since the last transfer
  sim::TaskId previous = start;
  for (std::size_t i = begin; i < g.size(); ++i) {
    const sim::Task& t = g.tasks()[i];
    const auto deps = g.deps(t);
    if (deps.size() != 1 || deps[0] != previous) return std::nullopt;
    previous = t.id;
    if (const auto* c = std::get_if<sim::ComputeTask>(&t.body)) {
      if (c->unit != unit) return std::nullopt;
      before = before + c->duration;
    } else if (const auto* x = std::get_if<sim::TransferTask>(&t.body)) {
      if (!x->route.empty() || !x->accounted.empty()) return std::nullopt;
      if (x->bytes.count == 0) {
        before = before + x->latency;  // a delay: it touches no flow
      } else if (x->rate_bound) {
        transfers.push_back(*x);
        transfers.back().latency = before + x->latency;
        before = sim::TimePs{0};
      } else {
        return std::nullopt;
      }
    } else if (!std::holds_alternative<sim::BarrierTask>(t.body)) {
      return std::nullopt;  // memory, or anything else that is not a delay
    }
  }
  if (previous != last) return std::nullopt;
  tail = before;
  return transfers;
}

}  // namespace

bool OperationReplays::replayed(const Key& key, RankTimeline& timeline, int s, const std::string& tag,
                                sim::TaskId& at) {
  const auto it = replays_.find(key);
  if (it == replays_.end() || !it->second.transfers) return false;
  const Replay& r = it->second;
  sim::TaskGraph& g = timeline.graph();
  for (std::size_t i = 0; i < r.transfers->size(); ++i) {
    at = g.add(timeline.task_name(s, fmt::format(FMT_COMPILE("{}.replay{}"), tag, i)), phase::kCommunication,
               (*r.transfers)[i], {at});
  }
  if (r.tail.ps > 0) {
    at = g.add(timeline.task_name(s, tag + ".replay.tail"), phase::kCommunication,
               sim::TransferTask{{}, sim::Bytes{0}, r.tail, {}, {}}, {at});
  }
  return true;
}

OperationReplays::Recording OperationReplays::start(const Key& key, const sim::TaskGraph& g, sim::TaskId at) {
  const auto [it, first_of_its_kind] = replays_.try_emplace(key);
  if (!first_of_its_kind) return {};
  return {&it->second.transfers, &it->second.tail, g.size(), at};
}

void OperationReplays::finish(const Recording& recording, const sim::TaskGraph& g, sim::TaskId last,
                              std::uint32_t unit) {
  if (recording.slot == nullptr) return;
  *recording.slot = chain_of(g, recording.start, recording.begin, last, unit, *recording.tail);
}

}  // namespace offsim::models
