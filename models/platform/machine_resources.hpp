#pragma once
// The machine as the engine sees it: compute units, memory pools and flow constraints made from a
// topology, and the constraints a transfer between two devices crosses. Strategies and
// collectives both build on it; it knows nothing of either.
#include <cstdint>
#include <optional>
#include <vector>

#include "sim/exec/task_graph.hpp"
#include "topologies/topology.hpp"

namespace offsim::models {

/// The machine as engine resources: one compute unit per GPU (its stream) and per CPU (its
/// cores), one memory pool per device memory, one constraint per directed link and per memory
/// whose bandwidth transfers share.
struct MachineResources {
  sim::Platform platform;
  std::vector<std::optional<std::uint32_t>> unit_of_device;
  std::vector<std::optional<std::uint32_t>> pool_of_device;
  std::vector<std::optional<sim::ConstraintId>> memory_constraint_of_device;
  std::vector<sim::ConstraintId> constraint_of_link;

  /// Constraints a transfer from `src` to `dst` crosses: the source memory (if shared), the
  /// route's links, the destination memory (if shared).
  [[nodiscard]] std::vector<sim::ConstraintId> transfer_route(const topo::Topology& t, std::size_t src,
                                                              std::size_t dst) const;
};
[[nodiscard]] MachineResources make_machine_resources(const topo::Topology& topology);

}  // namespace offsim::models
