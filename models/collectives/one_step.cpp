// Flow-level stages whose flows all run in one step: the all-to-all (qgZ's gradient exchange) and
// the tree's up and down edges.
#include <fmt/compile.h>
#include <fmt/format.h>

#include <vector>

#include "models/collectives/communicator.hpp"
#include "models/transformer/phases.hpp"

namespace offsim::models {

using sim::TaskId;

std::vector<TaskId> Communicator::add_one_step_flows(const std::string& name, sim::TimePs latency, std::int64_t bytes,
                                                     const std::vector<Flow>& flows, RankDeps first) {
  // Every flow starts with its sender; a rank is done when its sends and the sends into it are.
  require_single_rank_classes(name);
  const int sims = layout_.simulated_ranks();
  std::vector<std::vector<TaskId>> finish(sims);
  for (const Flow& fl : flows) {
    const TaskId t = graph_.add(
        fmt::format(FMT_COMPILE("{}.r{}to{}"), name, layout_.simulated[fl.from], layout_.simulated[fl.to]),
        phase::kCommunication, sim::TransferTask{fl.route, sim::Bytes{bytes}, latency, {}, {}}, first[fl.from]);
    finish[fl.from].push_back(t);
    finish[fl.to].push_back(t);
  }
  std::vector<TaskId> done(sims);
  for (int s = 0; s < sims; ++s) {
    done[s] = !active(s) || finish[s].empty() ? pass_through(name, s, first[s])
                                              : graph_.add(rank_task_name(name, ".done", s), phase::kCommunication,
                                                           sim::BarrierTask{}, std::move(finish[s]));
  }
  return done;
}

}  // namespace offsim::models
