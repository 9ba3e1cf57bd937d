// Whole-iteration simulation cost of shipped experiments: what a sweep point costs. Rank symmetry
// (one node or one pipeline replica simulated for all) against every rank simulated, and the
// analytic collective fidelity against flows.
#include <benchmark/benchmark.h>

#include <string>

#include "models/experiment.hpp"

namespace {

using offsim::models::load_experiment;
using offsim::models::run_experiment;

void run(benchmark::State& state, const std::string& experiment, std::vector<std::string> overrides) {
  const auto spec = load_experiment(std::string(OFFSIM_SOURCE_DIR) + "/configs/experiments/" + experiment, overrides);
  for (auto _ : state) {
    const auto r = run_experiment(spec);
    benchmark::DoNotOptimize(r.iteration_time);
    state.counters["events"] = static_cast<double>(r.events);
    state.counters["ranks_simulated"] = static_cast<double>(r.simulated_ranks);
  }
}

// ZeRO-3, GPT-NeoX-20B, micro-batch 4, per GCD count: representative node vs all ranks.
void BM_Zero3Symmetric(benchmark::State& state) {
  const auto nodes = state.range(0);
  run(state, "neox20b-frontier-zero3.yaml",
      {"hardware.nodes=" + std::to_string(nodes), "strategy.dp=" + std::to_string(8 * nodes)});
}
BENCHMARK(BM_Zero3Symmetric)->Arg(2)->Arg(6)->Arg(48)->Unit(benchmark::kMillisecond);

void BM_Zero3AllRanks(benchmark::State& state) {
  const auto nodes = state.range(0);
  run(state, "neox20b-frontier-zero3.yaml",
      {"hardware.nodes=" + std::to_string(nodes), "strategy.dp=" + std::to_string(8 * nodes),
       "strategy.simulate=all_ranks"});
}
BENCHMARK(BM_Zero3AllRanks)->Arg(2)->Arg(6)->Unit(benchmark::kMillisecond);

void BM_ZeroPlusPlus384(benchmark::State& state) {
  run(state, "neox20b-frontier-zeropp.yaml", {});
}
BENCHMARK(BM_ZeroPlusPlus384)->Unit(benchmark::kMillisecond);

void BM_Megatron3DFlow(benchmark::State& state) {
  run(state, "gpt3-175b-3d-frontier.yaml", {"strategy.collectives.fidelity=flow"});
}
BENCHMARK(BM_Megatron3DFlow)->Unit(benchmark::kMillisecond)->Iterations(1);

void BM_Megatron3DAnalytic(benchmark::State& state) {
  run(state, "gpt3-175b-3d-frontier.yaml", {});
}
BENCHMARK(BM_Megatron3DAnalytic)->Unit(benchmark::kMillisecond);

}  // namespace
