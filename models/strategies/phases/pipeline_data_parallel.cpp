#include "models/strategies/phases/pipeline_data_parallel.hpp"

#include <fmt/compile.h>
#include <fmt/format.h>

#include <map>

#include "models/strategies/phases/steps.hpp"
#include "models/transformer/phases.hpp"

namespace offsim::models {

using sim::TaskId;

namespace {

// The simulated ranks by their number of parameters (which differs between stages).
std::map<std::int64_t, std::vector<int>> ranks_by_size(const std::vector<std::int64_t>& params) {
  std::map<std::int64_t, std::vector<int>> by_size;
  for (std::size_t s = 0; s < params.size(); ++s) by_size[params[s]].push_back(static_cast<int>(s));
  return by_size;
}

// One collective per distinct size over the group, each rank in its own; returns each rank's end.
std::vector<TaskId> by_size(const PipelineDataParallel& p, CollectiveKind kind, const char* name,
                            const std::vector<TaskId>& after, bool reduce) {
  const int sims = p.ranks.size();
  std::vector<TaskId> done = after;
  for (const auto& [n, members] : ranks_by_size(p.params)) {
    std::vector<bool> taking_part(static_cast<std::size_t>(sims), false);
    for (const int s : members) taking_part[s] = true;
    // Gradients in the dtype they accumulate in (fp32: Megatron's main_grad, BF16_Optimizer's
    // buffer); parameters in bf16.
    const auto result =
        p.comm.add(kind, fmt::format(FMT_COMPILE("dp.{}.{}"), name, n), reduce ? p.policy.reduced_elements(n) : n,
                   p.group_plan, p.ranks.per_rank(after), taking_part);
    for (const int s : members) done[s] = result[s];
  }
  return done;
}

}  // namespace

std::vector<TaskId> pipeline_data_parallel_step(const PipelineDataParallel& p, std::vector<TaskId>& last,
                                                std::vector<PhaseSpan>& spans) {
  const int sims = p.ranks.size();
  if (p.policy.bf16_optimizer()) {
    // BF16_Optimizer adds each micro-batch's bf16 gradients into its fp32 buffer (precision.hpp).
    // DeepSpeed does it after every micro-batch's backward; here the micro-batches' additions run
    // back to back after the rank's last operation, before the gradient all-reduce: the same work
    // on the rank, placed after the schedule instead of inside it.
    for (int s = 0; s < sims; ++s) {
      const TaskId before = last[s];
      last[s] = accumulate_fp32_gradients(p.ranks, s, "accumulate_fp32_gradients", p.costs, p.params[s],
                                          p.micro_batches, last[s]);
      if (p.ranks.slot(s).rank == 0) spans.push_back({phase::kOptimizer, before, last[s], true});
    }
  }
  // The gradients reduced to their owners where the optimizer is partitioned (ZeroPolicy).
  const std::vector<TaskId> reduced =
      p.group_ranks > 1 ? by_size(p, p.policy.gradient_reduction(), "gradients", last, true) : last;
  std::vector<TaskId> end(static_cast<std::size_t>(sims));
  for (int s = 0; s < sims; ++s) {
    const std::int64_t updated = p.policy.updated_parameters(p.params[s], p.params[s], p.group_ranks);
    end[s] = gpu_optimizer_step(p.ranks, s, p.policy, p.costs, p.params[s], updated, p.adam[s], reduced[s]).last;
    if (p.ranks.slot(s).rank == 0) {
      spans.push_back({phase::kGradientReduction, last[s], reduced[s], true});
      spans.push_back({phase::kOptimizer, reduced[s], end[s], true});
    }
  }
  if (!p.policy.gathers_updated_parameters() || p.group_ranks <= 1) return end;
  const std::vector<TaskId> gathered = by_size(p, CollectiveKind::kAllGather, "parameters", end, false);
  for (int s = 0; s < sims; ++s) {
    if (p.ranks.slot(s).rank == 0) spans.push_back({phase::kParameterAllgather, end[s], gathered[s], true});
  }
  return gathered;
}

}  // namespace offsim::models
