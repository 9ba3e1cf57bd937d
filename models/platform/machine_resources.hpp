#pragma once
// The machine as the engine sees it: compute units, memory pools and flow constraints made from a
// topology, and the constraints a transfer between two devices crosses. Strategies and
// collectives both build on it; it knows nothing of either.
#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <vector>

#include "sim/exec/task_graph.hpp"
#include "topologies/topology.hpp"

namespace offsim::models {

/// The machine as engine resources: one compute unit per GPU (its stream) and per CPU (its
/// cores), one memory pool per device memory, one constraint per directed link and per memory
/// whose bandwidth transfers share. Only for the nodes a run simulates (and the network): a job
/// on 64 nodes of a 9,408-node machine, or one node standing for all of them, costs nothing for the
/// nodes nothing runs on. A link into or out of a node left out has no constraint (kNoConstraint).
struct MachineResources {
  static constexpr sim::ConstraintId kNoConstraint{std::numeric_limits<std::uint32_t>::max()};
  sim::Platform platform;
  std::vector<std::optional<std::uint32_t>> unit_of_device;
  std::vector<std::optional<std::uint32_t>> pool_of_device;
  std::vector<std::optional<sim::ConstraintId>> memory_constraint_of_device;
  std::vector<sim::ConstraintId> constraint_of_link;

  /// The constraint of topology link `link`; throws std::logic_error for a link of a node left out.
  [[nodiscard]] sim::ConstraintId link_constraint(const topo::Topology& t, std::size_t link) const;
  /// Constraints a transfer from `src` to `dst` crosses: the source memory (if shared), the
  /// route's links, the destination memory (if shared).
  [[nodiscard]] std::vector<sim::ConstraintId> transfer_route(const topo::Topology& t, std::size_t src,
                                                              std::size_t dst) const;
  /// transfer_route appended to `out` (a pipeline transfer's route is its TP members' routes one
  /// after the other: no vector per member).
  void append_transfer_route(std::vector<sim::ConstraintId>& out, const topo::Topology& t, std::size_t src,
                             std::size_t dst) const;
};
/// A built iteration's machine resources, shared read-only with the other points of a search or
/// sweep that lay out the same ranks on the same machine (layout_cache.hpp): copying them (a name
/// per unit, pool and link) into every point was about 3% of a search. A phase that adds a resource
/// (host offload's CPU-work constraint) calls to_change(), which copies them first when shared;
/// references taken before stay valid (the version they name is kept alive), they only do not see
/// the addition.
class SharedMachine {
 public:
  SharedMachine() : owned_(std::make_shared<MachineResources>()), current_(owned_) {}
  /// Resources this iteration alone holds (changed in place).
  static SharedMachine owned(std::shared_ptr<MachineResources> machine) {
    SharedMachine m;
    m.current_ = m.owned_ = std::move(machine);
    return m;
  }
  /// Resources others share (copied at the first change).
  static SharedMachine shared(std::shared_ptr<const MachineResources> machine) {
    SharedMachine m;
    m.owned_.reset();
    m.current_ = std::move(machine);
    return m;
  }
  /// The shared version (read-only, as others see it); null once this iteration holds its own.
  [[nodiscard]] std::shared_ptr<const MachineResources> shared_version() const { return owned_ ? nullptr : current_; }
  [[nodiscard]] const MachineResources& operator*() const { return *current_; }
  [[nodiscard]] const MachineResources* operator->() const { return current_.get(); }
  /// The resources to add to: this iteration's own copy.
  [[nodiscard]] MachineResources& to_change() {
    if (!owned_) {
      earlier_ = current_;
      owned_ = std::make_shared<MachineResources>(*current_);
      current_ = owned_;
    }
    return *owned_;
  }

 private:
  std::shared_ptr<MachineResources> owned_;          // null while shared
  std::shared_ptr<const MachineResources> current_;  // what readers see
  std::shared_ptr<const MachineResources> earlier_;  // the shared version a copy replaced
};

/// `simulated_nodes` (indexed by node; empty: every node): the nodes whose devices and links become
/// resources. Network devices (node -1) and the links between them always do.
[[nodiscard]] MachineResources make_machine_resources(const topo::Topology& topology,
                                                      const std::vector<bool>& simulated_nodes = {});

}  // namespace offsim::models
