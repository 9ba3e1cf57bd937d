#pragma once
// Human- and machine-readable views of a machine: the text summary, JSON, Graphviz DOT, routes,
// and bisection figures (`offsim topo`).
#include <string>

#include "topologies/topology_parser.hpp"

namespace offsim::topo {

struct Bisection {
  double min_bytes_per_s = 0.0;  // worst balanced split of one node's GPUs
  double max_bytes_per_s = 0.0;  // best balanced split
  std::string worst_split;       // "{gcd0, gcd1, gcd6, gcd7} | {gcd2, gcd3, gcd4, gcd5}"
};

/// Bisection bandwidth inside node 0: over every split of its GPUs into equal halves, the maximum
/// flow from one half to the other through GPU-GPU links and switches (not through the host),
/// per direction. nullopt for fewer than two GPUs.
[[nodiscard]] std::optional<Bisection> node_gpu_bisection(const Topology& t);

[[nodiscard]] std::string topology_summary(const NodeTopology& m);
[[nodiscard]] std::string topology_json(const NodeTopology& m);
[[nodiscard]] std::string topology_dot(const NodeTopology& m);
/// The links from device `a` to device `b` and the bottleneck; throws TopologyError for unknown names.
[[nodiscard]] std::string describe_route(const Topology& t, const std::string& a, const std::string& b);

}  // namespace offsim::topo
