#include "models/strategies/context_parallel.hpp"

#include <fmt/compile.h>
#include <fmt/format.h>

#include <algorithm>
#include <limits>

#include "models/transformer/phases.hpp"
#include "models/transformer/precision.hpp"

namespace offsim::models {

using sim::Bytes;
using sim::TaskId;

ModelSpec context_parallel_share(const ModelSpec& m, int cp) {
  ModelSpec share = m;
  share.seq = m.seq / cp;
  return share;
}

Bytes ring_kv_bytes(const ModelSpec& m, std::int64_t micro_batch, int cp, int tp) {
  constexpr std::int64_t kKeyAndValue = 2;
  return Bytes{kKeyAndValue * micro_batch * (m.seq / cp) * (m.kv_width() / tp) * kBf16Bytes};
}

TaskId add_ring_attention(bool forward, int cp, Bytes kv, TaskId start, const RingCallbacks& add) {
  TaskId computed = start;
  TaskId sent = start;
  for (int i = 0; i < cp; ++i) {
    // The block of step i has arrived (by symmetry, with the rank's own (i-1)-th send) and the
    // previous step is done.
    std::vector<TaskId> ready{computed};
    if (i > 0) ready.push_back(sent);
    TaskId send = sent;
    if (forward && i < cp - 1) {
      send = add.send(i, kv, {sent});
    } else if (!forward) {
      // KV onwards (all but the last step) and the dKV of the previous step (all but the first).
      const Bytes bytes{(i < cp - 1 ? kv.count : 0) + (i > 0 ? kv.count : 0)};
      std::vector<TaskId> deps{sent};
      if (i > 0) deps.push_back(computed);
      send = add.send(i, bytes, std::move(deps));
    }
    computed = add.step(i, std::move(ready));
    sent = send;
  }
  if (forward) return computed;
  return add.join({computed, sent});
}

std::string context_parallel_approximation(int cp) {
  return fmt::format(
      "context parallelism (cp = {}): TransformerEngine's P2P ring attention, every ring step one attention "
      "block of s/cp tokens (the load-balanced chunks make all steps equal), the KV block forwarded during "
      "each forward step and KV plus dKV (bf16) during each backward step, each rank's receive taken to end "
      "with its own send (the ring in lockstep), no latency per P2P transfer; the recomputed forward's KV "
      "exchange (with recomputation) is merged into the backward ring; the KV receive buffers are not counted in "
      "memory; gradients reduced over dp x cp in two stages (over the cp band, then the dp band: the bytes per "
      "rank of one flat ring over dp x cp)",
      cp);
}

RingAttention::RingAttention(RankTimeline& ranks, const MachineResources& machine, const topo::Topology& topology,
                             const std::vector<std::size_t>& devices, Grid grid, Fidelity fidelity,
                             bool link_statistics, sim::Bytes kv)
    : ranks_(ranks),
      machine_(machine),
      topology_(topology),
      devices_(devices),
      grid_(grid),
      fidelity_(fidelity),
      link_statistics_(link_statistics),
      kv_(kv) {}

sim::TaskId RingAttention::run(int s, bool forward, const std::string& name, const char* phase, sim::TimePs block,
                               sim::Flops block_flops, sim::TaskId start) {
  RingCallbacks add;
  add.step = [&](int step, std::vector<sim::TaskId> deps) {
    return ranks_.compute(s, fmt::format(FMT_COMPILE("{}.ring{}"), name, step), phase, block, block_flops, "attention",
                          std::move(deps));
  };
  add.send = [&](int step, sim::Bytes bytes, std::vector<sim::TaskId> deps) {
    return ranks_.graph().add(ranks_.task_name(s, fmt::format(FMT_COMPILE("{}.kv{}"), name, step)),
                              phase::kCommunication, send(ranks_.slot(s).rank, bytes), std::move(deps));
  };
  add.join = [&](std::vector<sim::TaskId> deps) {
    return ranks_.graph().add(ranks_.task_name(s, name + ".ring.done"), "pipeline", sim::BarrierTask{},
                              std::move(deps));
  };
  return add_ring_attention(forward, grid_.cp, kv_, start, add);
}

sim::TransferTask RingAttention::send(int from, sim::Bytes bytes) {
  const Route& r = route(from);
  if (fidelity_ != Fidelity::kAnalytic) return sim::TransferTask{r.route, bytes, sim::TimePs{0}, {}, {}};
  return sim::TransferTask{
      {}, bytes, sim::TimePs{0}, sim::Bandwidth{r.rate}, link_statistics_ ? r.route : std::vector<sim::ConstraintId>{}};
}

const RingAttention::Route& RingAttention::route(int from) {
  const auto cached = routes_.find(from);
  if (cached != routes_.end()) return cached->second;
  const int tp = grid_.tp;
  const int cp = grid_.cp;
  const auto next = [&](int r) {
    const int c = (r / tp) % cp;
    return r + tp * ((c + 1) % cp - c);
  };
  std::vector<std::vector<sim::ConstraintId>> hops;
  std::map<std::uint32_t, int> crossing;
  for (int member = 0; member < grid_.class_size; ++member) {
    const int r = from + member;
    hops.push_back(machine_.transfer_route(topology_, devices_[r], devices_[next(r)]));
    for (const auto c : hops.back()) ++crossing[c.index];
  }
  Route ring;
  ring.rate = std::numeric_limits<double>::infinity();
  const auto& constraints = machine_.platform.constraints;
  for (const auto& hop : hops) {
    for (const auto c : hop)
      ring.rate = std::min(ring.rate, constraints[c.index].capacity.bytes_per_s / crossing[c.index]);
    ring.route.insert(ring.route.end(), hop.begin(), hop.end());
  }
  std::sort(ring.route.begin(), ring.route.end());
  return routes_.emplace(from, std::move(ring)).first->second;
}

}  // namespace offsim::models
