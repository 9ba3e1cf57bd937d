#pragma once
// The steps every strategy's schedule shares, as free functions over a RankTimeline: the model
// states' setup allocations, BF16_Optimizer's fp32 gradient accumulation, the optimizer step on
// the GPU, and the iteration's work figures. A builder is its schedule (which
// micro-batch runs when, on which rank) plus what only it does; what it shares is here, once.
#include <cstdint>
#include <optional>
#include <string_view>

#include "models/placement/state_placement.hpp"
#include "models/strategies/phases/iteration.hpp"
#include "models/strategies/phases/rank_timeline.hpp"
#include "models/strategies/phases/zero_policy.hpp"

namespace offsim::models {

/// Where the rank's bf16 parameters live when ZeRO-Infinity offloads them: its host's memory pool.
struct ParameterHostPool {
  std::uint32_t pool = 0;
};

/// The setup allocations of simulated rank r's model states (models/placement): its parameters
/// (in host memory with parameter offload), gradients and optimizer states on the GPU, one after
/// another. The gradients' tenant names what the policy keeps: the whole model's gradient buffers,
/// the rank's partition, or with optimizer offload the fp32 gradients of its GPU subgroups.
/// Returns the last allocation.
sim::TaskId allocate_model_states(RankTimeline& ranks, int r, const StatePlacement& states, const ZeroPolicy& policy,
                                  bool optimizer_offload, std::optional<ParameterHostPool> parameters_on_host = {});

/// BF16_Optimizer adds `micro_batches` micro-batches' bf16 gradients of the rank's `held`
/// parameters into its fp32 buffer (transformer/precision.hpp), on the compute stream after `after`.
sim::TaskId accumulate_fp32_gradients(RankTimeline& ranks, int r, std::string_view name, const CostModel& costs,
                                      std::int64_t held, std::int64_t micro_batches, sim::TaskId after);

/// The optimizer step of simulated rank r on its GPU once `ready`: Adam over the `updated`
/// parameters (at `adam` time, the kernel table's), and with BF16_Optimizer first its passes over
/// the fp32 gradient buffer of the `held` ones (the gradient norm and the zeroing) and Adam without
/// the cast, both costed by their bytes. Returns the step's first and last tasks.
struct StepTasks {
  sim::TaskId first;
  sim::TaskId last;
};
StepTasks gpu_optimizer_step(RankTimeline& ranks, int r, const ZeroPolicy& policy, const CostModel& costs,
                             std::int64_t held, std::int64_t updated, sim::TimePs adam, sim::TaskId ready);

/// The iteration's work figures: `sequences_per_replica` sequences on each of `replicas` replicas,
/// each replica's work split over `devices_per_replica` devices.
void set_work_figures(BuiltIteration& out, const IterationInputs& in, double sequences_per_replica, int replicas,
                      int devices_per_replica);

}  // namespace offsim::models
