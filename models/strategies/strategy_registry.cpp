#include "models/strategies/strategy_registry.hpp"

#include <algorithm>
#include <utility>
#include <variant>

namespace offsim::models {

namespace {

// Per alternative: its name and what differs; the rest of an entry is generic (entry_of).
template <class Spec>
struct Kind;

template <>
struct Kind<DataParallelSpec> {
  static constexpr const char* kName = "data_parallel";
  static constexpr bool kTrains = true;
  static constexpr bool kTransformerEngine = false;
  static BuiltIteration build(const IterationInputs& in, const DataParallelSpec& s) {
    return build_data_parallel(in, s);
  }
  // The ZeRO group's replicas: the ranks over the tensor-parallel groups inside them.
  static std::int64_t replicas(const DataParallelSpec& s) {
    return static_cast<std::int64_t>(s.devices.size()) / std::max(1, s.tp);
  }
  static int channels(const DataParallelSpec& s) { return s.collectives.channels; }
  static std::optional<std::int64_t> period(const DataParallelSpec& /*s*/) { return std::nullopt; }
  static bool all_micro_batches(DataParallelSpec& /*s*/) { return false; }
};

template <>
struct Kind<CollectiveSpec> {
  static constexpr const char* kName = "collective";
  static constexpr bool kTrains = false;
  static constexpr bool kTransformerEngine = false;
  static BuiltIteration build(const IterationInputs& in, const CollectiveSpec& s) { return build_collective(in, s); }
  static std::int64_t replicas(const CollectiveSpec& /*s*/) { return 1; }
  static int channels(const CollectiveSpec& s) { return s.options.channels; }
  static std::optional<std::int64_t> period(const CollectiveSpec& /*s*/) { return std::nullopt; }
  static bool all_micro_batches(CollectiveSpec& /*s*/) { return false; }
};

template <>
struct Kind<MegatronSpec> {
  static constexpr const char* kName = "megatron";
  static constexpr bool kTrains = true;
  static constexpr bool kTransformerEngine = true;
  static BuiltIteration build(const IterationInputs& in, const MegatronSpec& s) { return build_megatron(in, s); }
  static std::int64_t replicas(const MegatronSpec& s) { return s.dp; }
  static int channels(const MegatronSpec& s) { return s.collectives.channels; }
  // Past the warm-up the schedule repeats every pp micro-batches.
  static std::optional<std::int64_t> period(const MegatronSpec& s) {
    if (s.all_micro_batches) return std::nullopt;
    return std::max(1, s.pp);
  }
  static bool all_micro_batches(MegatronSpec& s) {
    s.all_micro_batches = true;
    return true;
  }
};

template <std::size_t I>
StrategyKindEntry entry_of() {
  using Spec = std::variant_alternative_t<I, StrategySpec>;
  using K = Kind<Spec>;
  return StrategyKindEntry{
      K::kName,
      [](const IterationInputs& in, const StrategySpec& s) { return K::build(in, std::get<I>(s)); },
      K::kTrains,
      K::kTransformerEngine,
      [](const StrategySpec& s) -> const std::vector<std::string>& { return std::get<I>(s).devices; },
      [](const StrategySpec& s) { return K::replicas(std::get<I>(s)); },
      [](const StrategySpec& s) { return K::channels(std::get<I>(s)); },
      [](const StrategySpec& s) { return K::period(std::get<I>(s)); },
      [](StrategySpec& s) { return K::all_micro_batches(std::get<I>(s)); },
  };
}

template <std::size_t... I>
std::vector<StrategyKindEntry> entries(std::index_sequence<I...> /*alternatives*/) {
  return {entry_of<I>()...};
}

}  // namespace

const std::vector<StrategyKindEntry>& strategy_registry() {
  static const std::vector<StrategyKindEntry> table =
      entries(std::make_index_sequence<std::variant_size_v<StrategySpec>>{});
  return table;
}

const StrategyKindEntry& strategy_kind(const StrategySpec& spec) {
  return strategy_registry().at(spec.index());
}

}  // namespace offsim::models
