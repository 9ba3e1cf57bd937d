#pragma once
// The data-parallel step after a pipeline schedule, as Megatron-LM runs it (and DeepSpeed's
// optimizer under Megatron-DeepSpeed): BF16_Optimizer's fp32 accumulation where it runs, then each
// rank's gradients reduced over its data-parallel group after its last backward (no overlap with
// the cool-down), Adam on the GPU over the rank's optimizer share, and where the optimizer is
// partitioned the updated parameters all-gathered. Ranks of different pipeline stages hold
// different amounts: one collective per distinct size, each rank taking part in its own.
#include <cstdint>
#include <vector>

#include "models/collectives/communicator.hpp"
#include "models/strategies/phases/iteration.hpp"
#include "models/strategies/phases/rank_timeline.hpp"
#include "models/strategies/phases/zero_policy.hpp"

namespace offsim::models {

struct PipelineDataParallel {
  RankTimeline& ranks;
  Communicator& comm;
  const ZeroPolicy& policy;
  const CollectivePlan& group_plan;  // the data-parallel group
  int group_ranks = 1;               // its size
  const CostModel& costs;
  std::int64_t micro_batches = 1;
  std::vector<std::int64_t> params;  // per simulated rank: the parameters it holds
  std::vector<sim::TimePs> adam;     // per simulated rank: Adam over its optimizer share (kernel table)
};

/// The step after each simulated rank's `last` task (which BF16_Optimizer's accumulation
/// advances); rank 0's phases go to `spans`. Returns each rank's last task.
[[nodiscard]] std::vector<sim::TaskId> pipeline_data_parallel_step(const PipelineDataParallel& step,
                                                                   std::vector<sim::TaskId>& last,
                                                                   std::vector<PhaseSpan>& spans);

}  // namespace offsim::models
