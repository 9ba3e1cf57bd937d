#pragma once
// Ring collectives as flows on the machine's routes (the `flow` fidelity).
//
// A bidirectional ring over the ranks in order: the buffer of S bytes is split in two halves, one
// travelling the ring forward and one backward (both directions of every full-duplex link). Each
// half moves in chunks of S/(2g):
//   reduce-scatter: g-1 steps, after which rank r holds the reduced 1/g of the buffer;
//   all-gather:     g-1 steps, after which every rank holds the whole buffer;
//   all-reduce:     reduce-scatter then all-gather.
// A step's flow leaves rank r after rank r's previous step and after the chunk it forwards has
// arrived from its neighbour. Each step first waits the calibrated per-step latency, and each
// direction is capped at half the calibrated bus bandwidth, so an uncontended ring reproduces
//   t = (g-1) x step_latency + (g-1)/g x S / bus_bandwidth    (per reduce-scatter or all-gather),
// while slower or shared links lower the rate further. Reduction arithmetic is not modelled.
#include <string>
#include <vector>

#include "models/cost/cost_model.hpp"
#include "models/strategies/strategy.hpp"

namespace offsim::models {

class RingCollectives {
 public:
  /// `devices`: the device of each rank, in ring order. Fits missing for the group size are
  /// replaced by the nearest measured group size, and a note says so.
  RingCollectives(sim::TaskGraph& graph, const MachineResources& machine, const topo::Topology& topology,
                  std::vector<std::size_t> devices, const MeasuredCosts& costs, std::vector<std::string>& notes);

  /// Adds one collective of `total` bytes (S). `deps[r]`: what rank r waits for before its first
  /// send. Returns, per rank, a barrier that ends when that rank holds its result.
  std::vector<sim::TaskId> add(CollectiveKind kind, const std::string& name, sim::Bytes total,
                               const std::vector<std::vector<sim::TaskId>>& deps);

  [[nodiscard]] int ranks() const { return static_cast<int>(devices_.size()); }

 private:
  // One reduce-scatter or all-gather pass; `first` holds each rank's dependencies for step 0.
  // Returns the last step's sends, [direction][rank].
  std::vector<std::vector<sim::TaskId>> add_pass(const std::string& name, const CollectiveFit& fit, sim::Bytes chunk,
                                                 const std::vector<std::vector<sim::TaskId>>& first);

  sim::TaskGraph& graph_;
  std::vector<std::size_t> devices_;
  std::vector<std::vector<sim::ConstraintId>> route_forward_;
  std::vector<std::vector<sim::ConstraintId>> route_backward_;
  const CollectiveFit* reduce_scatter_ = nullptr;
  const CollectiveFit* all_gather_ = nullptr;
};

}  // namespace offsim::models
