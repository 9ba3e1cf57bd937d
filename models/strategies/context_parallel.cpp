#include "models/strategies/context_parallel.hpp"

#include <fmt/format.h>

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

}  // namespace offsim::models
