#include "models/strategies/phases/steps.hpp"

#include "models/transformer/phases.hpp"

namespace offsim::models {

using sim::Bytes;
using sim::TaskId;

TaskId allocate_model_states(RankTimeline& ranks, int r, const StatePlacement& states, const ZeroPolicy& policy,
                             bool optimizer_offload, std::optional<ParameterHostPool> parameters_on_host) {
  const TaskId parameters =
      parameters_on_host
          ? ranks.graph().add(ranks.task_name(r, "alloc.parameters"), "setup",
                              sim::AllocTask{parameters_on_host->pool, "parameter partition on host (bf16)",
                                             Bytes{states.parameters.host}})
          : ranks.alloc(r, "alloc.parameters", "setup",
                        policy.gathers_parameters_before_use() ? "parameter partition (bf16)" : "parameters (bf16)",
                        Bytes{states.parameters.gpu}, {});
  const char* gradients = optimizer_offload                    ? "fp32 gradients of GPU subgroups"
                          : policy.reduces_every_micro_batch() ? "gradient partition (bf16)"
                                                               : policy.gradient_tenant();
  const TaskId grads = ranks.alloc(r, "alloc.gradients", "setup", gradients, Bytes{states.gradients.gpu}, {parameters});
  return ranks.alloc(r, "alloc.optimizer", "setup", "optimizer states (fp32 master, m, v)", Bytes{states.optimizer.gpu},
                     {grads});
}

TaskId accumulate_fp32_gradients(RankTimeline& ranks, int r, std::string_view name, const CostModel& costs,
                                 std::int64_t held, std::int64_t micro_batches, TaskId after) {
  const Bytes bytes{held * kBf16OptimizerAccumulationBytesPerParam * micro_batches};
  return ranks.memory_pass(r, name, phase::kOptimizer, costs.memory_bound_time(bytes), bytes, "memory", {after});
}

StepTasks gpu_optimizer_step(RankTimeline& ranks, int r, const ZeroPolicy& policy, const CostModel& costs,
                             std::int64_t held, std::int64_t updated, sim::TimePs adam, TaskId ready) {
  if (!policy.bf16_optimizer()) {
    const TaskId step = ranks.memory_pass(r, "adam", phase::kOptimizer, adam,
                                          Bytes{updated * kAdamTrafficBytesPerParam}, "adam", {ready});
    return {step, step};
  }
  const Bytes passes{held * kBf16OptimizerStepPassBytesPerParam};
  const Bytes adam_bytes{updated * kBf16OptimizerAdamTrafficBytesPerParam};
  const TaskId first = ranks.memory_pass(r, "bf16_optimizer.gradient_passes", phase::kOptimizer,
                                         costs.memory_bound_time(passes), passes, "memory", {ready});
  return {first, ranks.memory_pass(r, "adam", phase::kOptimizer, costs.memory_bound_time(adam_bytes), adam_bytes,
                                   "adam", {first})};
}

void set_work_figures(BuiltIteration& out, const IterationInputs& in, double sequences_per_replica, int replicas,
                      int devices_per_replica) {
  const double share = sequences_per_replica / devices_per_replica;
  out.tokens_per_iteration = sequences_per_replica * static_cast<double>(in.model.seq) * replicas;
  out.model_flops_per_device = model_flops_per_sequence(in.model) * share;
  out.hardware_flops_per_device = hardware_flops_per_sequence(in.model, in.training.recompute) * share;
}

}  // namespace offsim::models
