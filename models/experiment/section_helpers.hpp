#pragma once
// What the strategy readers share, internal to models/experiment/: the rank-count and tp checks and
// the devices' reader (defined in sections.cpp), and the readers of each strategy kind that
// strategy_kinds() (sections.cpp) lists: read_collective there, read_megatron in
// megatron_section.cpp, read_data_parallel and read_deepspeed in data_parallel_section.cpp.
#include <cstddef>
#include <initializer_list>
#include <optional>
#include <string>
#include <vector>

#include "models/experiment/sections.hpp"
#include "models/strategies/partitioning_parser.hpp"

namespace offsim::models::detail {

/// The product of a strategy's parallel degrees (`what`: "tp x dp = 2 x 4"), or 0 with an error at
/// `loc` when it exceeds ranges::kMaxRanks.
[[nodiscard]] int checked_ranks(sim::config::Context& ctx, const sim::config::Location& loc, const std::string& path,
                                std::initializer_list<int> factors, const std::string& what);

/// Whether the model (when read before the strategy) splits over tp ranks; reports at `at` when not.
[[nodiscard]] bool tp_splits_model(sim::config::Context& ctx, const TrainingFromStrategy* training, int tp,
                                   const sim::config::Location& at);

/// The ranks' devices: `devices` or `devices_per_node`; nullopt when neither key is given (an
/// error too when `required`).
[[nodiscard]] std::optional<std::vector<std::string>> parse_devices(sim::config::MapReader& r,
                                                                    const sim::config::Node& node,
                                                                    const topo::Topology* topology, bool required);

// The readers of strategy_kinds(): each reads `node` (through `r`, whose `kind` is read) into a
// spec, or nullopt when errors were reported since `errors_before`.

/// kind: megatron (megatron_section.cpp).
[[nodiscard]] std::optional<StrategySpec> read_megatron(const sim::config::Node& node, sim::config::MapReader& r,
                                                        const topo::Topology* topology, TrainingFromStrategy* training,
                                                        LevelSizes levels, std::size_t errors_before);

/// kind: data_parallel, also read for an unknown kind (data_parallel_section.cpp).
[[nodiscard]] std::optional<StrategySpec> read_data_parallel(const sim::config::Node& node, sim::config::MapReader& r,
                                                             const topo::Topology* topology,
                                                             TrainingFromStrategy* training, LevelSizes levels,
                                                             std::size_t errors_before);

/// kind: deepspeed, a ds_config mapped onto data_parallel (data_parallel_section.cpp).
[[nodiscard]] std::optional<StrategySpec> read_deepspeed(const sim::config::Node& node, sim::config::MapReader& r,
                                                         const topo::Topology* topology, TrainingFromStrategy* training,
                                                         LevelSizes levels, std::size_t errors_before);

}  // namespace offsim::models::detail
