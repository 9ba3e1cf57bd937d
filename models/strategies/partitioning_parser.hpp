#pragma once
// YAML for hierarchical partitioning and collective plans (docs/strategies.md):
//
//   partitioning:
//     parameters:           {over: cluster, gather: [cluster], quantization: !include q.yaml}
//     secondary_parameters: {over: node, gather: [gcd_pair, node]}             # optional (hpZ)
//     gradients:            {over: cluster, reduce: [node, cluster], algorithm: all_to_all}
//     optimizer:            {over: cluster}
//
// Levels name groups of consecutive ranks: gcd_pair (2), node (the machine's GPUs per node),
// cluster (all ranks), or a number of ranks. A stage list names levels; each level is the band
// from the next smaller listed level (or 1) up to it, run in the listed order.
#include <optional>

#include "models/strategies/strategy.hpp"
#include "sim/config/config_reader.hpp"

namespace offsim::models {

struct LevelSizes {
  int ranks = 0;          // cluster
  int gpus_per_node = 0;  // node
};

/// A quantization format {bits, group_elements, scale_bytes, source} (configs/strategies/zeropp-*.yaml).
[[nodiscard]] std::optional<Quantization> parse_quantization_format(const sim::config::Node& node);

/// Parses `partitioning:`; nullopt (with errors recorded) when it is invalid.
[[nodiscard]] std::optional<Partitioning> parse_partitioning(const sim::config::Node& node, const LevelSizes& levels);

/// Reads the optional `stages`, `algorithm` and `quantization` keys of a collective benchmark.
/// `all_reduce`: whether the collective is an all-reduce (the only one the tree algorithm runs).
[[nodiscard]] std::optional<CollectivePlan> parse_collective_plan(sim::config::MapReader& r,
                                                                  const sim::config::Node& node,
                                                                  const LevelSizes& levels, bool all_reduce);

/// Reads the optional `collectives: {fidelity, max_ring_steps}` and `simulate` keys.
[[nodiscard]] CollectiveOptions parse_collective_options(sim::config::MapReader& r);
[[nodiscard]] bool parse_all_ranks(sim::config::MapReader& r);

}  // namespace offsim::models
