#pragma once
// Reads a node description (devices, memories, directed or full-duplex links) from YAML into a
// sealed Topology. Problems are recorded in the config Context with their file:line:col.
//
//   name: frontier-node
//   devices:
//     - {name: cpu, kind: cpu, device_kind: epyc-7a53, cores: 56,
//        memory: {kind: dram, capacity: "512 GB", bandwidth: "205 GB/s", shared_by_transfers: true}}
//     - {name: gcd, count: 8, kind: gpu, device_kind: mi250x-gcd,
//        memory: {kind: hbm, capacity: "64 GB", bandwidth: "1.6 TB/s"}}     # gcd0..gcd7
//   links:
//     - {between: [gcd0, gcd1], bandwidth: "200 GB/s", latency: "0 s", class: gpu-gpu}  # both ways
//     - {from: gcd1, to: hsn0, bandwidth: "25 GB/s", latency: "0 s", class: nic}        # one way
#include <optional>
#include <string>

#include "sim/config/config_reader.hpp"
#include "topologies/topology.hpp"

namespace offsim::topo {

struct NodeTopology {
  std::string name;
  Topology topology;
};

/// Returns nullopt if errors were recorded (the Context holds them).
[[nodiscard]] std::optional<NodeTopology> parse_node_topology(const sim::config::Node& node);

}  // namespace offsim::topo
