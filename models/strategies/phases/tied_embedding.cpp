// The tied word embedding's gradient all-reduce between the first and last pipeline stage
// (tied_embedding.hpp).
#include "models/strategies/phases/tied_embedding.hpp"

#include <fmt/format.h>

#include <map>

#include "models/transformer/phases.hpp"

namespace offsim::models {

std::vector<TiedPair> embedding_group_pairs(const RankTimeline& timeline, int stage_ranks, int pp) {
  std::vector<TiedPair> pairs;
  if (pp <= 1) return pairs;
  std::map<int, int> sim_of_rank;
  for (int s = 0; s < timeline.size(); ++s) sim_of_rank[timeline.slot(s).rank] = s;
  for (int s = 0; s < timeline.size(); ++s) {
    const int rank = timeline.slot(s).rank;
    if ((rank / stage_ranks) % pp != 0) continue;
    const auto found = sim_of_rank.find(rank + stage_ranks * (pp - 1));
    if (found != sim_of_rank.end()) pairs.push_back({s, found->second});
  }
  return pairs;
}

sim::Bytes tied_embedding_gradient_bytes(const ModelSpec& m, int tp, std::int64_t gradient_bytes) {
  return sim::Bytes{(m.vocab + tp - 1) / tp * m.hidden * gradient_bytes};
}

std::string tied_embedding_approximation() {
  return "tied embeddings: the word embedding's gradient all-reduce between the first and last pipeline stage "
         "(after the data-parallel reduction) runs as a two-rank ring of flows on the pair's route, without a "
         "collective efficiency table; as for the pipeline transfers, the other replicas' pairs are not simulated "
         "beside it";
}

void all_reduce_tied_gradients(RankTimeline& timeline, const std::vector<TiedPair>& pairs, sim::Bytes bytes,
                               const std::function<std::vector<sim::ConstraintId>(int, int)>& route,
                               std::vector<sim::TaskId>& last) {
  sim::TaskGraph& g = timeline.graph();
  const sim::Bytes half{bytes.count / 2};
  for (const TiedPair& pair : pairs) {
    std::vector<sim::TaskId> after{last[pair.first], last[pair.last]};
    for (const char* step : {"reduce_scatter", "all_gather"}) {
      const auto flow = [&](int from, int to) {
        const auto name = fmt::format("tied_grads.{}.r{}to{}", step, timeline.slot(from).rank, timeline.slot(to).rank);
        return g.add(name, phase::kCommunication, sim::TransferTask{route(from, to), half, sim::TimePs{0}, {}, {}},
                     after);
      };
      after = {flow(pair.first, pair.last), flow(pair.last, pair.first)};
    }
    last[pair.first] = timeline.barrier(pair.first, "tied_grads.done", phase::kCommunication, after);
    last[pair.last] = timeline.barrier(pair.last, "tied_grads.done", phase::kCommunication, after);
  }
}

}  // namespace offsim::models
