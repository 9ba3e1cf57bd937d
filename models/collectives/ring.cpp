// Flow-level ring collectives: each of a ring's steps as its own transfer per rank and direction
// (docs/collectives.md). The analytic fidelity prices the same ring in analytic.cpp.
#include <fmt/compile.h>
#include <fmt/format.h>

#include <algorithm>
#include <vector>

#include "models/collectives/communicator.hpp"
#include "models/transformer/phases.hpp"

namespace offsim::models {

using sim::TaskId;

std::vector<TaskId> Communicator::add_ring_flows(const std::string& name, const CollectiveFit& f, int g,
                                                 std::int64_t chunk_bytes,
                                                 const std::vector<std::vector<Flow>>& directions, RankDeps first) {
  require_single_rank_classes(name);
  const int sims = layout_.simulated_ranks();
  const int steps = g - 1;
  const int merged = options_.max_ring_steps > 0 ? std::min(steps, options_.max_ring_steps) : steps;
  // own[d][s]: rank s's last send in direction d; into[d][s]: the last sends it received.
  const std::size_t rings = directions.size();
  std::vector<std::vector<TaskId>> own(rings, std::vector<TaskId>(sims));
  std::vector<std::vector<std::vector<TaskId>>> into(rings, std::vector<std::vector<TaskId>>(sims));
  for (int step = 0; step < merged; ++step) {
    const std::int64_t chunks = steps / merged + (step < steps % merged ? 1 : 0);
    std::vector<std::vector<std::vector<TaskId>>> next_into(rings, std::vector<std::vector<TaskId>>(sims));
    for (std::size_t d = 0; d < rings; ++d) {
      for (const Flow& fl : directions[d]) {
        std::vector<TaskId> deps(first[fl.from].begin(), first[fl.from].end());
        if (step > 0) {
          deps = into[d][fl.from];
          deps.push_back(own[d][fl.from]);
        }
        const TaskId t = graph_.add(
            fmt::format(FMT_COMPILE("{}.{}{}{}.r{}"), name, rings > 2 ? fmt::format(FMT_COMPILE("ch{}."), d / 2) : "",
                        d % 2 == 0 ? "cw" : "ccw", step, layout_.simulated[fl.from]),
            phase::kCommunication,
            sim::TransferTask{fl.route,
                              sim::Bytes{chunk_bytes * chunks},
                              sim::TimePs{f.step_latency.ps * chunks},
                              f.bus_bandwidth * 0.5,
                              {}},
            std::move(deps));
        own[d][fl.from] = t;
        next_into[d][fl.to].push_back(t);
      }
    }
    into = std::move(next_into);
  }
  std::vector<TaskId> done(sims);
  for (int s = 0; s < sims; ++s) {
    if (!active(s)) {
      done[s] = pass_through(name, s, first[s]);
      continue;
    }
    std::vector<TaskId> deps;
    for (std::size_t d = 0; d < rings; ++d) {
      deps.push_back(own[d][s]);
      deps.insert(deps.end(), into[d][s].begin(), into[d][s].end());
    }
    done[s] = graph_.add(rank_task_name(name, ".done", s), phase::kCommunication, sim::BarrierTask{}, std::move(deps));
  }
  return done;
}

}  // namespace offsim::models
