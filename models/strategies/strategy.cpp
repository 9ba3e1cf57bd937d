#include "models/strategies/strategy.hpp"

#include <fmt/format.h>

#include "models/collectives/communicator.hpp"
#include "models/strategies/layer_kernels.hpp"
#include "models/strategies/layout_cache.hpp"
#include "models/strategies/phases/zero_policy.hpp"
#include "models/strategies/strategy_registry.hpp"
#include "models/transformer/phases.hpp"

namespace offsim::models {

BuiltIteration build_iteration(const IterationInputs& in, const StrategySpec& strategy) {
  return strategy_kind(strategy).build(in, strategy);
}

RankLayout lay_out_ranks(BuiltIteration& out, const topo::Topology& topology, const std::vector<std::string>& names,
                         const char* strategy, bool all_ranks, int block_ranks) {
  // The points of a search lay out the same ranks on the same machine (layout_cache.hpp).
  const bool cacheable = out.devices.empty();
  if (const auto hit = cacheable ? layout_cache::find(topology, names, all_ranks, block_ranks) : nullptr) {
    out.devices = hit->devices;
    if (!hit->note.empty()) out.approximations.push_back(hit->note);
    out.simulated_ranks = hit->layout.simulated_ranks();
    out.machine = SharedMachine::shared(hit->machine);
    return hit->layout;
  }
  for (const auto& name : names) {
    const auto d = topology.find_device(name);
    if (!d || topology.device(*d).kind != topo::DeviceKind::kGpu) {
      throw std::invalid_argument(fmt::format("{}: '{}' is not a GPU of the machine", strategy, name));
    }
    out.devices.push_back(*d);
  }
  std::string note;
  RankLayout layout = make_rank_layout(topology, out.devices, all_ranks, &note, block_ranks);
  if (!note.empty()) out.approximations.push_back(note);
  out.simulated_ranks = layout.simulated_ranks();
  // Engine resources for the nodes of the simulated ranks only (the representative block under
  // rank symmetry, else every node with a rank): the rest of the machine is never touched.
  std::vector<bool> simulated_nodes;
  for (const int r : layout.simulated) {
    const int node = topology.device(out.devices[r]).node;
    if (node < 0) continue;
    if (static_cast<std::size_t>(node) >= simulated_nodes.size()) simulated_nodes.resize(node + 1, false);
    simulated_nodes[node] = true;
  }
  auto machine = std::make_shared<MachineResources>(make_machine_resources(topology, simulated_nodes));
  if (cacheable) {
    layout_cache::insert(topology, names, all_ranks, block_ranks,
                         std::make_shared<const LaidOutRanks>(LaidOutRanks{out.devices, layout, note, machine}));
    out.machine = SharedMachine::shared(std::move(machine));
  } else {
    out.machine = SharedMachine::owned(std::move(machine));
  }
  return layout;
}

void add_common_approximations(BuiltIteration& out, const IterationInputs& in, const ZeroPolicy& policy) {
  const auto cost_notes = in.costs.approximations();
  out.approximations.insert(out.approximations.begin(), cost_notes.begin(), cost_notes.end());
  out.approximations.push_back(non_gemm_kernels_approximation(in.training));
  if (policy.bf16_optimizer()) out.approximations.push_back(bf16_optimizer_approximation());
}

BuiltIteration build_collective(const IterationInputs& in, const CollectiveSpec& spec) {
  BuiltIteration out;
  const RankLayout layout = lay_out_ranks(out, in.topology, spec.devices, "collective", spec.all_ranks);
  Communicator comm(out.graph, out.machine, in.topology, layout, in.collectives, in.costs,
                    in.collective_options(spec.options), out.approximations);
  CollectivePlan plan = spec.plan;  // its algorithm and quantization; no stages: one flat stage
  if (plan.stages.empty()) plan.stages = Communicator::flat(layout.ranks()).stages;
  const auto start = out.graph.add("start", "setup", sim::BarrierTask{});
  const std::vector<std::vector<sim::TaskId>> deps(layout.simulated_ranks(), std::vector<sim::TaskId>{start});
  // The buffer as bf16 elements (the wire format of an unquantized collective).
  const auto done = comm.add(spec.operation, "collective", (spec.bytes.count + 1) / 2, plan, deps);
  const auto end = out.graph.add("end", "end", sim::BarrierTask{}, done);
  out.spans.push_back({phase::kCollective, start, end, true});
  if (spec.plan.stages.empty()) {
    out.approximations.push_back(
        "one bidirectional ring in rank order (RCCL may run several rings over more links and NICs)");
  }
  return out;
}

}  // namespace offsim::models
