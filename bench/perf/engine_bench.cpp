// Engine benchmarks: event-queue throughput and max-min reshare cost.
// Run with ./run bench (or build/bench/perf/offsim_bench_perf --benchmark_filter=...).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <vector>

#include "sim/core/simulator.hpp"
#include "sim/resources/flow_network.hpp"

namespace {

using namespace offsim::sim;

// A fixed linear congruential generator: benchmarks see the same inputs on every run.
struct Lcg {
  std::uint64_t state;
  std::uint64_t next() {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    return state >> 33;
  }
};

// Schedules N events at pseudo-random times, then drains the queue. items/s = events/s.
void BM_EventQueue(benchmark::State& state) {
  const auto n = static_cast<std::int64_t>(state.range(0));
  for (auto _ : state) {
    Simulator sim;
    Lcg rng{42};
    std::int64_t fired = 0;
    for (std::int64_t i = 0; i < n; ++i) {
      sim.schedule_at(TimePs{static_cast<std::int64_t>(rng.next() % 1'000'000)}, EventPhase::kStart,
                      [&fired] { ++fired; });
    }
    sim.run();
    benchmark::DoNotOptimize(fired);
  }
  state.SetItemsProcessed(state.iterations() * n);
}
BENCHMARK(BM_EventQueue)->Arg(1'000)->Arg(100'000)->Arg(1'000'000);

// Events that schedule their successor, as a simulation does: a steady queue of 1024 pending.
void BM_EventChain(benchmark::State& state) {
  constexpr int kPending = 1024;
  const auto n = static_cast<std::int64_t>(state.range(0));
  for (auto _ : state) {
    Simulator sim;
    Lcg rng{7};
    std::int64_t remaining = n;
    // The closure an event carries is a pointer, as the simulation's are (a pointer and an index).
    std::function<void()> step = [&] {
      if (--remaining > 0)
        sim.schedule_after(TimePs{static_cast<std::int64_t>(1 + rng.next() % 1000)}, EventPhase::kStart,
                           [&step] { step(); });
    };
    for (int i = 0; i < kPending; ++i) sim.schedule_at(TimePs{i}, EventPhase::kStart, [&step] { step(); });
    sim.run();
  }
  state.SetItemsProcessed(state.iterations() * n);
}
BENCHMARK(BM_EventChain)->Arg(1'000'000);

// One max-min reshare of F active flows, each crossing 3 of L = F / 4 links.
void BM_MaxMinReshare(benchmark::State& state) {
  const auto flows = static_cast<std::size_t>(state.range(0));
  const std::size_t links = std::max<std::size_t>(4, flows / 4);
  Simulator sim;
  FlowNetwork net(sim);
  std::vector<ConstraintId> ids;
  Lcg rng{1};
  for (std::size_t l = 0; l < links; ++l)
    ids.push_back(net.add_constraint("l", Bandwidth{1e9 * static_cast<double>(1 + rng.next() % 8)}));
  for (std::size_t f = 0; f < flows; ++f) {
    FlowSpec spec;
    for (int hop = 0; hop < 3; ++hop) spec.route.push_back(ids[rng.next() % links]);
    spec.bytes = Bytes{1'000'000'000};
    if (f % 5 == 0) spec.rate_bound = Bandwidth{5e8};
    net.start_flow(std::move(spec), {});
  }
  for (auto _ : state) net.reshare();
  state.SetItemsProcessed(state.iterations() * static_cast<std::int64_t>(flows));
  state.counters["flows"] = static_cast<double>(flows);
}
BENCHMARK(BM_MaxMinReshare)->Arg(10)->Arg(100)->Arg(1'000)->Arg(10'000)->Unit(benchmark::kMicrosecond);

// One reshare of 16 flows on a machine of 600,000 idle constraints (a 9,408-node Frontier has
// about 550,000 directed links): the cost must follow the active flows, not the machine size.
void BM_ReshareOnLargeIdleNetwork(benchmark::State& state) {
  constexpr std::size_t kConstraints = 600'000;
  Simulator sim;
  FlowNetwork net(sim);
  std::vector<ConstraintId> ids;
  for (std::size_t l = 0; l < kConstraints; ++l) ids.push_back(net.add_constraint("l", Bandwidth{25e9}));
  Lcg rng{5};
  for (int f = 0; f < 16; ++f) {
    net.start_flow(
        {{ids[rng.next() % kConstraints], ids[rng.next() % kConstraints]}, Bytes{1'000'000'000}, TimePs{0}, {}}, {});
  }
  for (auto _ : state) net.reshare();
}
BENCHMARK(BM_ReshareOnLargeIdleNetwork)->Unit(benchmark::kMicrosecond);

// A whole simulation: F flows of different sizes start at once on a shared 8-link fabric and run
// to completion (F completions, each followed by a reshare).
void BM_FlowSimulation(benchmark::State& state) {
  const auto flows = static_cast<std::size_t>(state.range(0));
  for (auto _ : state) {
    Simulator sim;
    FlowNetwork net(sim);
    std::vector<ConstraintId> ids;
    for (int l = 0; l < 8; ++l) ids.push_back(net.add_constraint("l", Bandwidth{50e9}));
    Lcg rng{3};
    std::size_t done = 0;
    for (std::size_t f = 0; f < flows; ++f) {
      net.start_flow({{ids[f % 8], ids[(f + 3) % 8]},
                      Bytes{static_cast<std::int64_t>(1'000'000 + rng.next() % 1'000'000)},
                      TimePs{0},
                      {}},
                     [&done] { ++done; });
    }
    sim.run();
    benchmark::DoNotOptimize(done);
  }
  state.SetItemsProcessed(state.iterations() * static_cast<std::int64_t>(flows));
}
BENCHMARK(BM_FlowSimulation)->Arg(100)->Arg(1'000)->Unit(benchmark::kMillisecond);

// F flows of different sizes on F / 2 independent link pairs (two flows share each pair, as the
// rings of different nodes share nothing): each completion reshares one pair's component only.
// The completion scan and byte accounting still visit every active flow per change (their
// per-flow arithmetic is what keeps finish times byte-identical), so the run is still O(F^2),
// with a small constant.
void BM_FlowSimulationIndependent(benchmark::State& state) {
  const auto flows = static_cast<std::size_t>(state.range(0));
  for (auto _ : state) {
    Simulator sim;
    FlowNetwork net(sim);
    std::vector<ConstraintId> ids;
    for (std::size_t l = 0; l < flows; ++l) ids.push_back(net.add_constraint("l", Bandwidth{50e9}));
    Lcg rng{9};
    std::size_t done = 0;
    for (std::size_t f = 0; f < flows; ++f) {
      const std::size_t pair = 2 * (f / 2);
      net.start_flow({{ids[pair], ids[pair + 1]},
                      Bytes{static_cast<std::int64_t>(1'000'000 + rng.next() % 1'000'000)},
                      TimePs{0},
                      {}},
                     [&done] { ++done; });
    }
    sim.run();
    benchmark::DoNotOptimize(done);
  }
  state.SetItemsProcessed(state.iterations() * static_cast<std::int64_t>(flows));
}
BENCHMARK(BM_FlowSimulationIndependent)->Arg(1'000)->Arg(3'000)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
