#pragma once
// The vocabulary every strategy and every shared phase speaks: the training options, what a
// builder is given (IterationInputs) and what it returns (BuiltIteration). Below the strategies
// (models/strategies/ includes this folder, never the other way round).
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "models/collectives/plan.hpp"
#include "models/cost/cost_model.hpp"
#include "models/platform/machine_resources.hpp"
#include "models/transformer/fp8.hpp"
#include "models/transformer/framework.hpp"
#include "models/transformer/transformer.hpp"
#include "sim/exec/task_graph.hpp"
#include "topologies/topology.hpp"

namespace offsim::models {

struct TrainingSpec {
  std::int64_t micro_batch = 1;
  std::int64_t grad_accum = 1;
  Recompute recompute = Recompute::kNone;
  bool flash_attention = false;
  // Megatron's fused scale-mask-softmax in place of PyTorch's separate kernels (without flash
  // attention only; `fused_softmax:` in the experiment).
  bool fused_softmax = false;
  std::optional<Fp8Training> fp8;  // `precision: fp8` (Transformer Engine); nullopt: bf16
  // The framework whose kernels run (`training.framework`; by default from the strategy and the
  // model's file: a Hugging Face config.json under data_parallel trains with transformers).
  Framework framework = Framework::kPyTorch;
  [[nodiscard]] AttentionKernels attention_kernels() const {
    if (flash_attention) return AttentionKernels::kFlash;
    return fused_softmax ? AttentionKernels::kFusedSoftmax : AttentionKernels::kUnfused;
  }
};

/// A time interval of the representative rank reported as `phase`: from the start of `first`
/// (or its end, when from_end) to the end of `last`. Spans of one phase add up.
struct PhaseSpan {
  std::string phase;
  sim::TaskId first;
  sim::TaskId last;
  bool from_end = false;
};

/// Flow-level collectives replayed from one recorded run of each (phases/collective_replay.hpp):
/// the replays' tasks, which the run must check (replays_held), and the link statistics each
/// recorded collective left, which the run adds once per replay (add_replayed_statistics).
struct ReplayedCollectives {
  struct Link {
    sim::ConstraintId constraint;
    std::vector<double> credits;  // every amount the recorded run added to its bytes, in order
    sim::TimePs busy{0};
    double peak = 0.0;
  };
  struct Group {
    std::vector<Link> links;                          // the recorded collective's, by constraint id
    std::vector<std::vector<sim::TaskId>> instances;  // per replay: each member's task
    // The ranks' group the collective runs over (a TP group's first rank): recorded collectives of
    // one owner may share links, replayed one after another (replays_held checks it).
    int owner = 0;
  };
  std::vector<Group> groups;
  [[nodiscard]] bool empty() const { return groups.empty(); }
};

struct BuiltIteration {
  SharedMachine machine;
  sim::TaskGraph graph;
  std::vector<PhaseSpan> spans;       // rank 0, in time order
  std::vector<std::size_t> devices;   // device index of each rank
  int simulated_ranks = 0;            // ranks simulated (fewer than devices under rank symmetry)
  double tokens_per_iteration = 0.0;  // of the whole job
  sim::Bytes model_states_per_device{0};
  sim::Flops model_flops_per_device{};
  sim::Flops hardware_flops_per_device{};
  std::vector<std::string> approximations;
  ReplayedCollectives replayed;  // empty unless IterationInputs::replay_flow_collectives
};

struct ReplayedChains;  // phases/operation_replay.hpp

struct IterationInputs {
  const ModelSpec& model;
  const TrainingSpec& training;
  const topo::Topology& topology;
  const CostModel& costs;
  const MeasuredCosts& collectives;
  const MeasuredCosts& host;    // host-side costs (cpu_adam); may be empty
  bool link_statistics = true;  // whether the run reports link activity (RunExperimentOptions::link_statistics)
  // Whether a builder may replay flow-level collectives (phases/collective_replay.hpp): only a run
  // that checks and completes them (simulate_iteration) asks for it; a graph dump does not.
  bool replay_flow_collectives = false;
  // The chain durations a builder's replayed operations found (phases/operation_replay.hpp), kept
  // for the next build of the same experiment with another number of micro-batches (the steady
  // state's two simulations); null: the builder keeps its own.
  ReplayedChains* replayed_chains = nullptr;

  /// The strategy's collective options, with this run's link_statistics.
  [[nodiscard]] CollectiveOptions collective_options(CollectiveOptions options) const {
    options.link_statistics = link_statistics;
    return options;
  }
};

}  // namespace offsim::models
