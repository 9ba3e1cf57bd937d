#pragma once
// The strategy kinds, one entry per StrategySpec alternative: its builder and what the call sites
// (loading, running, reporting, searching) ask of a strategy, so that none of them tests for a
// particular alternative. A new alternative without its entry does not compile
// (strategy_registry.cpp builds the table over the variant). The readers, which map the names a
// configuration uses onto these alternatives (`deepspeed` reads a ds_config into data_parallel),
// stay with the configuration sections (models/experiment/, strategy_kinds() in sections.cpp).
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "models/strategies/strategy.hpp"

namespace offsim::models {

struct StrategyKindEntry {
  const char* name;  // the alternative's kind
  BuiltIteration (*build)(const IterationInputs& in, const StrategySpec& spec);
  /// Trains a model (false: one collective alone, a benchmark: no model, batch or training figures).
  bool trains;
  /// Runs Transformer Engine under Megatron-Core, which FP8 training needs.
  bool runs_transformer_engine;
  /// The ranks' device names.
  const std::vector<std::string>& (*devices)(const StrategySpec& spec);
  /// The data-parallel replicas of the data (the global batch's multiplier); 1 for a benchmark.
  std::int64_t (*replicas)(const StrategySpec& spec);
  /// The collectives' channels option.
  int (*channels)(const StrategySpec& spec);
  /// A pipeline schedule that repeats every period micro-batches past its warm-up, extrapolated
  /// from its steady state (models/experiment/run.cpp); nullopt: simulated whole.
  std::optional<std::int64_t> (*steady_state_period)(const StrategySpec& spec);
  /// Asks for every micro-batch to be simulated (`--all-micro-batches`); false where the kind
  /// simulates them all anyway.
  bool (*simulate_all_micro_batches)(StrategySpec& spec);
};

/// The entry of the strategy's alternative.
[[nodiscard]] const StrategyKindEntry& strategy_kind(const StrategySpec& spec);
/// Every entry, in the variant's order.
[[nodiscard]] const std::vector<StrategyKindEntry>& strategy_registry();

}  // namespace offsim::models
