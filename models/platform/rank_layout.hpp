#pragma once
// Which ranks a run simulates: every rank, or one representative block of nodes standing for all
// (rank symmetry, ADR 0004), and within it classes of ranks in lockstep (ADR 0008).
#include <cstddef>
#include <string>
#include <vector>

#include "topologies/topology.hpp"

namespace offsim::models {

/// Which ranks are simulated: all, or those of one representative node standing for every node.
/// Within the simulated block, ranks may further form classes of `class_size` consecutive ranks that
/// do the same work in lockstep (a tensor-parallel group): only each class's first rank is then
/// simulated, and its collectives and transfers carry the traffic of every member (collapse_classes).
struct RankLayout {
  std::vector<std::size_t> devices;    // device of every rank
  std::vector<int> simulated;          // rank of each simulated index
  std::vector<int> simulated_index;    // per rank: the simulated index that stands for it
  std::vector<std::size_t> mirror_of;  // per device: its counterpart in the representative node
  bool symmetric = false;              // true when only one node's ranks are simulated
  int class_size = 1;                  // ranks each simulated rank stands for inside the block
  [[nodiscard]] int ranks() const { return static_cast<int>(devices.size()); }
  [[nodiscard]] int simulated_ranks() const { return static_cast<int>(simulated.size()); }
};

/// Collapses a layout's simulated ranks into classes of `class_size` consecutive ranks (which must
/// divide the simulated block): only each class's first rank stays simulated, and stands for the
/// others. Valid only where the members do identical work and their collectives are analytic (the
/// communicator then takes each class at the pace of its slowest member's subgroup).
void collapse_classes(RankLayout& layout, int class_size);

/// Lays out the ranks. Uses the representative-node form when `all_ranks` is false and the layout
/// is symmetric (node-major, the same local device order in every node, more than one node);
/// otherwise simulates every rank. `block_ranks`: the representative block spans at least that
/// many ranks (whole nodes; a pipeline replica, say). `note` says which, and why.
[[nodiscard]] RankLayout make_rank_layout(const topo::Topology& topology, std::vector<std::size_t> devices,
                                          bool all_ranks, std::string* note, int block_ranks = 0);

}  // namespace offsim::models
