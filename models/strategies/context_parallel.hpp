#pragma once
// Context parallelism as Megatron-Core runs it through TransformerEngine's ring attention
// (transformer_engine/pytorch/attention: AttnFuncWithCPAndKVP2P, cp_comm_type "p2p"):
// - The sequence of each micro-batch is split over the cp ranks of a CP group, each rank holding
//   2 chunks of s / (2 cp) tokens (chunks c and 2 cp - 1 - c, so that every rank has the same
//   share of the causal mask). Everything outside attention (projections, MLP, norms, the
//   embedding and head, stored activations, pipeline and TP transfers) is that of s / cp tokens.
// - Attention runs in cp steps per layer: step i attends the rank's queries to the key/value block
//   it received i hops back around the ring. With the load-balanced chunks every step is one
//   block of the same work, that of attention over s / cp tokens, so a rank's attention is cp
//   times that of s / cp tokens (its 1 / cp share of the whole sequence's).
// - Forward: while step i computes, the KV block of step i is forwarded to the next rank (P2P,
//   cp - 1 sends); step i + 1 waits for step i and for the block's arrival.
// - Backward: step i sends the KV block onwards together with the dKV accumulated so far (step 0
//   the KV only, the last step the dKV only, which the layer then waits for): 2 (cp - 1) blocks.
// - Gradients are reduced over the dp x cp ranks that hold the same weights (Megatron-Core's data
//   parallel group with context parallelism); the distributed optimizer shards over them.
#include <cstdint>
#include <functional>
#include <string>

#include <map>
#include <vector>

#include "models/collectives/plan.hpp"
#include "models/platform/machine_resources.hpp"
#include "models/strategies/phases/rank_timeline.hpp"
#include "models/transformer/transformer.hpp"
#include "sim/exec/task_graph.hpp"

namespace offsim::models {

/// The model one CP rank sees outside attention: seq / cp tokens per sequence.
[[nodiscard]] ModelSpec context_parallel_share(const ModelSpec& m, int cp);

/// Bytes of the key/value block a rank forwards per ring step, on one TP rank: K and V of its
/// s / cp tokens, the KV heads split over tp, bf16: 2 x b x (s / cp) x kv_width / tp x 2 B.
[[nodiscard]] sim::Bytes ring_kv_bytes(const ModelSpec& m, std::int64_t micro_batch, int cp, int tp);

/// One layer's ring attention on one rank, added to a graph through two callbacks: step(i, deps)
/// adds step i's attention block (compute) and send(i, bytes, deps) the rank's i-th ring transfer.
/// Each rank's receive is taken to end with its own send (every rank of the ring runs the same
/// work at the same time, so the block it receives arrives when the one it sends does).
/// Returns the task after which the layer's attention is done.
struct RingCallbacks {
  std::function<sim::TaskId(int step, std::vector<sim::TaskId> deps)> step;
  std::function<sim::TaskId(int step, sim::Bytes bytes, std::vector<sim::TaskId> deps)> send;
  std::function<sim::TaskId(std::vector<sim::TaskId> deps)> join;
};
[[nodiscard]] sim::TaskId add_ring_attention(bool forward, int cp, sim::Bytes kv, sim::TaskId start,
                                             const RingCallbacks& add);

/// The report's statement of the model above.
[[nodiscard]] std::string context_parallel_approximation(int cp);

/// One layer's ring attention on the simulated ranks of a Megatron grid (rank r = t + tp x (c + cp
/// x ...)): add_ring_attention with each step's block on the rank's GPU and each send to the next
/// context rank. Flow fidelity: a flow on the rank's route, sharing links with all other traffic.
/// Analytic (the ranks in lockstep, with classes each standing for its `class_size` members): a
/// transfer at the rate the members' sends would get on an otherwise idle machine (each link split
/// evenly among those crossing it, ADR 0006), crediting every member's links.
class RingAttention {
 public:
  struct Grid {
    int tp = 1;
    int cp = 1;
    int class_size = 1;  // ranks each simulated rank stands for (consecutive)
  };
  RingAttention(RankTimeline& ranks, const MachineResources& machine, const topo::Topology& topology,
                const std::vector<std::size_t>& devices, Grid grid, Fidelity fidelity, bool link_statistics,
                sim::Bytes kv);
  /// The ring on simulated rank s after `start`: cp blocks of `block` time (`block_flops` each).
  sim::TaskId run(int s, bool forward, const std::string& name, const char* phase, sim::TimePs block,
                  sim::Flops block_flops, sim::TaskId start);

 private:
  struct Route {
    std::vector<sim::ConstraintId> route;  // every member's send, sorted
    double rate = 0.0;                     // the analytic rate of the slowest member's send
  };
  sim::TransferTask send(int from, sim::Bytes bytes);
  const Route& route(int from);

  RankTimeline& ranks_;
  const MachineResources& machine_;
  const topo::Topology& topology_;
  const std::vector<std::size_t>& devices_;
  const Grid grid_;
  const Fidelity fidelity_;
  const bool link_statistics_;
  const sim::Bytes kv_;
  std::map<int, Route> routes_;  // by sending rank
};

}  // namespace offsim::models
