// The tree all-reduce stage (NCCL's pipelined binary tree), at either fidelity.
#include <algorithm>
#include <vector>

#include "models/collectives/communicator.hpp"

namespace offsim::models {

using sim::TaskId;
using sim::TimePs;

std::vector<TaskId> Communicator::add_tree_stage(const std::string& name, const Band& band, std::int64_t bytes,
                                                 RankDeps first) {
  // A binary tree over the subgroup in band order (parent of position k: (k - 1) / 2), pipelined as
  // NCCL's tree all-reduce is: the reduction climbing and the broadcast descending stream at once
  // in opposite directions of each link, so every edge carries the whole buffer each way and the
  // time is about S / (slowest edge) + 2 x depth x step latency. No measured tree efficiency:
  // only the links limit it (the report says so).
  const int g = band.group();
  const int sims = layout_.simulated_ranks();
  const auto member = [&](int r, int k) { return r - r % band.hi + r % band.lo + k * band.lo; };
  const auto position = [&](int r) { return (r % band.hi) / band.lo; };
  int depth = 0;
  while ((1 << (depth + 1)) - 1 < g) ++depth;  // levels below the root
  // The per-hop latency is the ring fit's per-step latency (no tree was measured).
  CollectiveFit f = fit("all_gather", g);
  const std::string note = "tree all-reduce: pipelined, link-limited, hop latency from the all-gather ring fit";
  if (std::find(notes_.begin(), notes_.end(), note) == notes_.end()) notes_.push_back(note);
  f.step_latency = TimePs{f.step_latency.ps * 2 * std::max(1, depth)};
  std::vector<std::vector<Flow>> flows(1);
  for (int s = 0; s < sims; ++s) {
    if (!active(s)) continue;
    for (const int r : class_of(s)) {
      const int k = position(r);
      std::vector<int> peers;
      if (k > 0) peers.push_back((k - 1) / 2);      // up: the reduction
      for (const int c : {2 * k + 1, 2 * k + 2}) {  // down: the broadcast
        if (c < g) peers.push_back(c);
      }
      for (const int p : peers) {
        const int peer = member(r, p);
        flows[0].push_back({s, layout_.simulated_index[peer], route(r, peer), r});
      }
    }
  }
  if (options_.fidelity == Fidelity::kAnalytic)
    return emit_analytic(name, analytic_bodies(f, band, false, bytes, 1, flows), first);
  return add_one_step_flows(name, f.step_latency, bytes, flows[0], first);
}

}  // namespace offsim::models
