// The search's layout cache (models/strategies/layout_cache.hpp) and stage flow cache: lay_out_ranks gives the same
// devices, layout, note and machine resources from the cache as it makes without it, keys on the
// machine's identity (a copy of one sealed topology hits, another machine with the same names
// misses), and a point's figures are the same either way.
#include <gtest/gtest.h>

#include <algorithm>

#include "models/collectives/stage_flow_cache.hpp"
#include "models/experiment.hpp"
#include "models/strategies/layout_cache.hpp"
#include "models/strategies/strategy.hpp"

namespace offsim::models {
namespace {

const std::string kGpt3 = std::string(OFFSIM_SOURCE_DIR) + "/configs/experiments/scale/gpt3-175b-a100-1024.yaml";

void expect_same(const BuiltIteration& a, const RankLayout& la, const BuiltIteration& b, const RankLayout& lb) {
  EXPECT_EQ(a.devices, b.devices);
  EXPECT_EQ(a.simulated_ranks, b.simulated_ranks);
  EXPECT_EQ(a.approximations, b.approximations);
  EXPECT_EQ(la.devices, lb.devices);
  EXPECT_EQ(la.simulated, lb.simulated);
  EXPECT_EQ(la.simulated_index, lb.simulated_index);
  EXPECT_EQ(la.mirror_of, lb.mirror_of);
  EXPECT_EQ(la.symmetric, lb.symmetric);
  EXPECT_EQ(la.class_size, lb.class_size);
  const auto& pa = a.machine->platform;
  const auto& pb = b.machine->platform;
  ASSERT_EQ(pa.units.size(), pb.units.size());
  for (std::size_t i = 0; i < pa.units.size(); ++i) {
    EXPECT_EQ(pa.units[i].name, pb.units[i].name);
    EXPECT_EQ(pa.units[i].lanes, pb.units[i].lanes);
  }
  ASSERT_EQ(pa.constraints.size(), pb.constraints.size());
  for (std::size_t i = 0; i < pa.constraints.size(); ++i) {
    const auto& x = pa.constraints[i];
    const auto& y = pb.constraints[i];
    EXPECT_EQ(x.name, y.name);
    EXPECT_EQ(x.capacity.bytes_per_s, y.capacity.bytes_per_s);
    EXPECT_EQ(std::tie(x.link_class, x.group, x.from, x.to), std::tie(y.link_class, y.group, y.from, y.to));
  }
  ASSERT_EQ(pa.pools.size(), pb.pools.size());
  for (std::size_t i = 0; i < pa.pools.size(); ++i) {
    EXPECT_EQ(pa.pools[i].name, pb.pools[i].name);
    EXPECT_EQ(pa.pools[i].capacity.count, pb.pools[i].capacity.count);
  }
  EXPECT_EQ(a.machine->unit_of_device, b.machine->unit_of_device);
  EXPECT_EQ(a.machine->pool_of_device, b.machine->pool_of_device);
  EXPECT_EQ(a.machine->memory_constraint_of_device, b.machine->memory_constraint_of_device);
  EXPECT_EQ(a.machine->constraint_of_link, b.machine->constraint_of_link);
}

TEST(LayoutCache, CachedLayoutsAreTheOnesMadeAndKeyOnTheMachine) {
  const ExperimentSpec spec = load_experiment(kGpt3, {});
  const auto& names = std::get<MegatronSpec>(spec.strategy).devices;
  const topo::Topology& machine = spec.hardware->topology;
  ASSERT_NE(machine.identity(), nullptr);
  // Without a scope nothing is kept.
  BuiltIteration uncached;
  const RankLayout plain = lay_out_ranks(uncached, machine, names, "megatron", false, 64);
  EXPECT_EQ(layout_cache::size(), 0u);
  {
    const LayoutCacheScope scope;
    BuiltIteration first;
    const RankLayout made = lay_out_ranks(first, machine, names, "megatron", false, 64);
    EXPECT_EQ(layout_cache::size(), 1u);
    expect_same(first, made, uncached, plain);
    // A copy of the machine (what each point of a search holds) hits the entry.
    const topo::Topology copy = machine;
    EXPECT_EQ(copy.identity(), machine.identity());
    BuiltIteration second;
    const RankLayout cached = lay_out_ranks(second, copy, names, "megatron", false, 64);
    EXPECT_EQ(layout_cache::size(), 1u);
    expect_same(second, cached, uncached, plain);
    // Another block size, or every rank, is another entry.
    BuiltIteration all;
    (void)lay_out_ranks(all, machine, names, "megatron", true, 64);
    EXPECT_EQ(layout_cache::size(), 2u);
    // The same file read again is another machine (its own seal): a miss, not the entry above.
    const ExperimentSpec again = load_experiment(kGpt3, {});
    EXPECT_NE(again.hardware->topology.identity(), machine.identity());
    BuiltIteration other;
    (void)lay_out_ranks(other, again.hardware->topology, names, "megatron", false, 64);
    EXPECT_EQ(layout_cache::size(), 3u);
  }
  EXPECT_EQ(layout_cache::size(), 0u);  // dropped with the scope
}

// A point that adds a resource to machine resources it shares with the cache (host offload's CPU-work
// constraint) changes its own copy: the entry, the next point and a reference taken before the
// change keep the resources as laid out.
TEST(LayoutCache, AResourceAddedToSharedResourcesStaysWithThePointThatAddedIt) {
  const ExperimentSpec spec = load_experiment(kGpt3, {});
  const auto& names = std::get<MegatronSpec>(spec.strategy).devices;
  const topo::Topology& machine = spec.hardware->topology;
  const LayoutCacheScope scope;
  BuiltIteration first;
  (void)lay_out_ranks(first, machine, names, "megatron", false, 64);
  const MachineResources& before = *first.machine;
  const std::size_t constraints = before.platform.constraints.size();
  const sim::ConstraintId added =
      first.machine.to_change().platform.add_constraint({"host.cores", sim::Bandwidth{1e9}, "cpu-work", "", "", ""});
  EXPECT_EQ(added.index, constraints);
  EXPECT_EQ(first.machine->platform.constraints.size(), constraints + 1);
  EXPECT_EQ(before.platform.constraints.size(), constraints);  // still valid, the shared version
  EXPECT_NE(&*first.machine, &before);
  BuiltIteration second;
  (void)lay_out_ranks(second, machine, names, "megatron", false, 64);
  EXPECT_EQ(&*second.machine, &before);  // the entry, shared and unchanged
  EXPECT_EQ(second.machine->platform.constraints.size(), constraints);
  // Resources a point holds alone (laid out without the cache) change in place.
  SharedMachine own = SharedMachine::owned(std::make_shared<MachineResources>(before));
  const MachineResources* where = &*own;
  (void)own.to_change().platform.add_constraint({"x", sim::Bandwidth{1e9}, "cpu-work", "", "", ""});
  EXPECT_EQ(&*own, where);
}

TEST(LayoutCache, APointsFiguresAreTheSameCachedOrNot) {
  const ExperimentSpec spec = load_experiment(kGpt3, {});
  const RunExperimentOptions options{.link_statistics = false};
  const ExperimentResult plain = run_experiment(spec, options);
  const LayoutCacheScope scope;
  const ExperimentResult first = run_experiment(spec, options);
  const ExperimentResult cached = run_experiment(spec, options);
  for (const ExperimentResult* r : {&first, &cached}) {
    EXPECT_EQ(r->iteration_time.ps, plain.iteration_time.ps);
    EXPECT_EQ(r->peak_bytes("hbm"), plain.peak_bytes("hbm"));
    EXPECT_EQ(r->phases.size(), plain.phases.size());
    for (std::size_t i = 0; i < r->phases.size() && i < plain.phases.size(); ++i)
      EXPECT_EQ(r->phases[i].time.ps, plain.phases[i].time.ps) << r->phases[i].phase;
    EXPECT_EQ(r->tasks, plain.tasks);
    EXPECT_EQ(r->events, plain.events);
    EXPECT_EQ(r->approximations, plain.approximations);
  }
}

// The collectives' stage flows (models/collectives/stage_flow_cache.hpp): points that share their
// machine resources build each kind of stage's flows once, while a scope lives, and their figures
// (link activity included, which the analytic transfers take from the flows) are the ones each
// point gets building its own. Megatron's TP groups, and NeoX-20B's 3-level partitioning on
// Frontier (several bands over one layout: a stage found under another band's key would move the
// figures), each run three times: without a scope, the first point under one, the next.
void expect_same_figures(const ExperimentResult& a, const ExperimentResult& b) {
  EXPECT_EQ(a.iteration_time.ps, b.iteration_time.ps);
  EXPECT_EQ(a.peak_bytes("hbm"), b.peak_bytes("hbm"));
  EXPECT_EQ(a.tasks, b.tasks);
  EXPECT_EQ(a.events, b.events);
  ASSERT_EQ(a.link_stats.size(), b.link_stats.size());
  for (std::size_t i = 0; i < a.link_stats.size(); ++i) {
    EXPECT_EQ(a.link_stats[i].name, b.link_stats[i].name);
    EXPECT_EQ(a.link_stats[i].bytes, b.link_stats[i].bytes) << a.link_stats[i].name;
  }
}

TEST(StageFlowCache, PointsOnSharedResourcesBuildEachStagesFlowsOnceWithTheSameFigures) {
  for (const std::string& file :
       {kGpt3, std::string(OFFSIM_SOURCE_DIR) + "/configs/experiments/neox20b-frontier-3level.yaml"}) {
    SCOPED_TRACE(file);
    const ExperimentSpec spec = load_experiment(file, {});
    const ExperimentResult plain = run_experiment(spec, {});
    EXPECT_EQ(stage_flow_cache::size(), 0u);  // nothing kept without a scope
    {
      const LayoutCacheScope scope;
      const ExperimentResult first = run_experiment(spec, {});
      const std::size_t kinds = stage_flow_cache::size();
      EXPECT_GT(kinds, 0u);
      const ExperimentResult next = run_experiment(spec, {});
      EXPECT_EQ(stage_flow_cache::size(), kinds);  // every kind found, none built again
      expect_same_figures(first, plain);
      expect_same_figures(next, plain);
    }
    EXPECT_EQ(stage_flow_cache::size(), 0u);  // dropped with the scope
  }
}

// Analytic stages over the shared flows (stage_flow_cache::find_analytic): priced once per flows,
// fit, sizes and statistics while a scope lives, with the figures each point gets pricing its own;
// a run without link statistics (its transfers credit no link) keeps stages of its own.
TEST(StageFlowCache, AnalyticStagesArePricedOnceAcrossPointsWithTheSameFigures) {
  for (const std::string& file :
       {kGpt3, std::string(OFFSIM_SOURCE_DIR) + "/configs/experiments/neox20b-frontier-3level.yaml"}) {
    SCOPED_TRACE(file);
    const ExperimentSpec spec = load_experiment(file, {"strategy.collectives.fidelity=analytic"});
    const ExperimentResult plain = run_experiment(spec, {});
    const ExperimentResult plain_lean = run_experiment(spec, {.link_statistics = false});
    EXPECT_EQ(stage_flow_cache::analytic_size(), 0u);  // nothing kept without a scope
    {
      const LayoutCacheScope scope;
      const ExperimentResult first = run_experiment(spec, {});
      const std::size_t stages = stage_flow_cache::analytic_size();
      EXPECT_GT(stages, 0u);
      const ExperimentResult next = run_experiment(spec, {});
      EXPECT_EQ(stage_flow_cache::analytic_size(), stages);  // every stage found, none priced again
      expect_same_figures(first, plain);
      expect_same_figures(next, plain);
      const ExperimentResult lean = run_experiment(spec, {.link_statistics = false});
      EXPECT_GT(stage_flow_cache::analytic_size(), stages);
      expect_same_figures(lean, plain_lean);
    }
    EXPECT_EQ(stage_flow_cache::analytic_size(), 0u);  // dropped with the scope
  }
}

// Communicators of one context (stage_flow_cache::Context: machine, topology, layout, measured
// collectives, options) share the analytic stages they priced, across a point's two builds and
// across points, and give again the notes each stage's pricing gave (here the roofline ring's, one
// per collective): every figure and note as each communicator pricing its own. Another table
// (measured) is another context.
TEST(StageFlowCache, CommunicatorsOfOneContextShareTheirStagesAndTheirNotes) {
  const ExperimentSpec roofline =
      load_experiment(kGpt3, {"strategy.collectives.fidelity=analytic", "calibration.collectives=roofline"});
  const ExperimentSpec measured = load_experiment(kGpt3, {"strategy.collectives.fidelity=analytic"});
  const RunExperimentOptions options{.link_statistics = false};
  const ExperimentResult plain = run_experiment(roofline, options);
  const auto roofline_notes = [](const ExperimentResult& r) {
    return std::count_if(r.approximations.begin(), r.approximations.end(), [](const std::string& a) {
      return a.find("(calibration.collectives: roofline)") != std::string::npos;
    });
  };
  EXPECT_EQ(roofline_notes(plain), 2);               // reduce_scatter's and all_gather's
  EXPECT_EQ(stage_flow_cache::context_count(), 0u);  // nothing kept without a scope
  {
    const LayoutCacheScope scope;
    const ExperimentResult first = run_experiment(roofline, options);
    const std::size_t contexts = stage_flow_cache::context_count();
    EXPECT_GT(contexts, 0u);
    const ExperimentResult next = run_experiment(roofline, options);
    EXPECT_EQ(stage_flow_cache::context_count(), contexts);  // every communicator's context found
    for (const ExperimentResult* r : {&first, &next}) {
      expect_same_figures(*r, plain);
      EXPECT_EQ(r->approximations, plain.approximations);
    }
    const ExperimentResult other = run_experiment(measured, options);
    EXPECT_GT(stage_flow_cache::context_count(), contexts);
    EXPECT_EQ(roofline_notes(other), 0);
    expect_same_figures(other, run_experiment(measured, options));
  }
  EXPECT_EQ(stage_flow_cache::context_count(), 0u);  // dropped with the scope
}

// A layout is shared only when copying and comparing it costs less than building its flows: its
// devices and, under rank symmetry only, its mirrors (a number per device of the machine).
TEST(StageFlowCache, OnlyLayoutsWithinTheBoundAreShared) {
  RankLayout layout;
  layout.devices.assign(8, 0);
  layout.mirror_of.assign(stage_flow_cache::kMaxLayoutEntries, 0);
  EXPECT_TRUE(stage_flow_cache::shareable(layout));  // its mirrors are nobody's without symmetry
  layout.symmetric = true;
  EXPECT_FALSE(stage_flow_cache::shareable(layout));
  layout.mirror_of.resize(stage_flow_cache::kMaxLayoutEntries - 8);
  EXPECT_TRUE(stage_flow_cache::shareable(layout));
}

}  // namespace
}  // namespace offsim::models
