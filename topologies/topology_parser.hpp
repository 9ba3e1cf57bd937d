#pragma once
// Reads a machine from YAML into a sealed Topology. Two forms (docs/topologies.md):
//
// A node:
//   name: frontier-node
//   devices:
//     - {name: cpu, kind: cpu, device_kind: epyc-7a53, cores: 56,
//        memory: {kind: dram, capacity: "512 GB", bandwidth: "205 GB/s", shared_by_transfers: true}}
//     - {name: gcd, count: 8, kind: gpu, device_kind: mi250x-gcd,
//        memory: {kind: hbm, capacity: "64 GB", bandwidth: "1.6 TB/s"}}     # gcd0..gcd7
//     - {name: hsn, count: 4, kind: nic}
//   links:
//     - {between: [gcd0, gcd1], bandwidth: "200 GB/s", latency: "0 s", class: gpu-gpu}  # both ways
//     - {from: nvme, to: cpu, bandwidth: "8 GB/s", latency: "0 s", class: nvme}         # one way
//   routes:                                     # optional explicit routes
//     - {from: gcd0, to: gcd3, via: [gcd2]}
//
// A system: a node repeated `nodes` times (names prefixed n<k>. when nodes > 1), its NICs joined
// by a network:
//   name: frontier
//   node: !include frontier-node.yaml
//   nodes: 9408
//   network:
//     kind: dragonfly            # or: switch (one non-blocking switch, e.g. a full fat-tree)
//     nic_link: {bandwidth: "25 GB/s", latency: "0 s"}
//     group_size: 128            # dragonfly: nodes per group, all-to-all inside a group
//     global_links_per_group_pair: 4
//     global_link: {bandwidth: "25 GB/s", latency: "0 s"}
//
// Problems are recorded in the config Context with their file:line:col.
#include <cstddef>
#include <optional>
#include <string>

#include "sim/config/config_reader.hpp"
#include "topologies/topology.hpp"

namespace offsim::topo {

struct NodeTopology {
  std::string name;
  int nodes = 1;
  std::string network_kind;  // "none", "switch" or "dragonfly"
  Topology topology;
};

/// The largest machine parse_machine builds, in devices and links over all its nodes and its
/// network (Frontier's 9,408 nodes hold 0.68 M). A larger one is refused with a located error
/// before anything is built. The fuzz harness lowers it (tests/fuzz/fuzz_readers.cpp): larger
/// machines are legal, only slower under the sanitizers than the fuzzer's hang limit.
inline std::size_t max_machine_elements = std::size_t{1} << 22;

/// Returns nullopt if errors were recorded (the Context holds them).
[[nodiscard]] std::optional<NodeTopology> parse_machine(const sim::config::Node& node);

/// Whether `node` describes a system (node:, nodes:, network:), whose node count can be set,
/// rather than one node.
[[nodiscard]] bool describes_system(const sim::config::Node& node);

}  // namespace offsim::topo
