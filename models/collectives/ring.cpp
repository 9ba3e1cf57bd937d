#include "models/collectives/ring.hpp"

#include <fmt/format.h>

namespace offsim::models {

using sim::BarrierTask;
using sim::Bytes;
using sim::TaskId;
using sim::TransferTask;

RingCollectives::RingCollectives(sim::TaskGraph& graph, const MachineResources& machine, const topo::Topology& topology,
                                 std::vector<std::size_t> devices, const MeasuredCosts& costs,
                                 std::vector<std::string>& notes)
    : graph_(graph), devices_(std::move(devices)) {
  const int g = ranks();
  if (g < 2) return;
  for (int r = 0; r < g; ++r) {
    route_forward_.push_back(machine.transfer_route(topology, devices_[r], devices_[(r + 1) % g]));
    route_backward_.push_back(machine.transfer_route(topology, devices_[r], devices_[(r + g - 1) % g]));
  }
  std::string note;
  reduce_scatter_ = &costs.collective("reduce_scatter", g, &note);
  if (!note.empty()) notes.push_back(note);
  note.clear();
  all_gather_ = &costs.collective("all_gather", g, &note);
  if (!note.empty()) notes.push_back(note);
}

std::vector<std::vector<TaskId>> RingCollectives::add_pass(const std::string& name, const CollectiveFit& fit,
                                                           Bytes chunk, const std::vector<std::vector<TaskId>>& first) {
  const int g = ranks();
  std::vector<std::vector<TaskId>> previous;
  for (int step = 0; step < g - 1; ++step) {
    std::vector<std::vector<TaskId>> current(2, std::vector<TaskId>(g));
    for (int dir = 0; dir < 2; ++dir) {
      for (int r = 0; r < g; ++r) {
        const int from = dir == 0 ? (r + g - 1) % g : (r + 1) % g;  // the neighbour that sends to r
        std::vector<TaskId> deps = step == 0 ? first[r] : std::vector<TaskId>{previous[dir][r], previous[dir][from]};
        current[dir][r] =
            graph_.add(fmt::format("{}.{}{}.r{}", name, dir == 0 ? "cw" : "ccw", step, r), "communication",
                       TransferTask{dir == 0 ? route_forward_[r] : route_backward_[r], chunk, fit.step_latency,
                                    fit.bus_bandwidth * 0.5},
                       std::move(deps));
      }
    }
    previous = std::move(current);
  }
  return previous;
}

std::vector<TaskId> RingCollectives::add(CollectiveKind kind, const std::string& name, Bytes total,
                                         const std::vector<std::vector<TaskId>>& deps) {
  const int g = ranks();
  std::vector<TaskId> done(g);
  if (g < 2) {
    done[0] = graph_.add(name + ".done.r0", "communication", BarrierTask{}, deps[0]);
    return done;
  }
  const Bytes chunk{(total.count + 2 * g - 1) / (2 * g)};
  std::vector<std::vector<TaskId>> first = deps;
  const auto finish = [&](const std::vector<std::vector<TaskId>>& last, const std::string& pass) {
    // Rank r holds its result once its own last sends and the chunks sent to it have completed.
    std::vector<TaskId> out(g);
    for (int r = 0; r < g; ++r) {
      out[r] = graph_.add(fmt::format("{}.{}.done.r{}", name, pass, r), "communication", BarrierTask{},
                          {last[0][r], last[0][(r + g - 1) % g], last[1][r], last[1][(r + 1) % g]});
    }
    return out;
  };
  if (kind == CollectiveKind::kReduceScatter || kind == CollectiveKind::kAllReduce) {
    done = finish(add_pass(name + ".rs", *reduce_scatter_, chunk, first), "rs");
    for (int r = 0; r < g; ++r) first[r] = {done[r]};
  }
  if (kind == CollectiveKind::kAllGather || kind == CollectiveKind::kAllReduce) {
    done = finish(add_pass(name + ".ag", *all_gather_, chunk, first), "ag");
  }
  return done;
}

}  // namespace offsim::models
