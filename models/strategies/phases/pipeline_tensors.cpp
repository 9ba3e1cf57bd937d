// The pipeline tensors of Megatron's schedules: split, gathered or whole (pipeline_tensors.hpp).
#include "models/strategies/phases/pipeline_tensors.hpp"

#include "models/transformer/precision.hpp"

namespace offsim::models {

PipelineTensorExchange pipeline_tensor_exchange(std::int64_t elements, int tp, bool sequence_parallel,
                                                bool scatter_gather, bool partitioned_by_engine) {
  const bool split = tp > 1 && (sequence_parallel || scatter_gather || partitioned_by_engine);
  const bool gathered = tp > 1 && scatter_gather && !sequence_parallel && !partitioned_by_engine;
  return {sim::Bytes{elements * kBf16Bytes / (split ? tp : 1)}, gathered};
}

std::vector<sim::TaskId> gather_received_tensor(Communicator& tp_group, const std::string& name, bool forward, int vs,
                                                int last_virtual, std::int64_t elements, const CollectivePlan& plan,
                                                std::vector<sim::TaskId> at) {
  if (forward ? vs == 0 : vs == last_virtual) return at;
  std::vector<std::vector<sim::TaskId>> deps(at.size());
  for (std::size_t i = 0; i < at.size(); ++i) deps[i] = {at[i]};
  return tp_group.add(CollectiveKind::kAllGather, name, elements, plan, deps);
}

}  // namespace offsim::models
