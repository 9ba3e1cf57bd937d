// Megatron-Core's TP all-reduce of the norms' (and row-parallel biases') gradients
// (sequence_parallel_grads.hpp).
#include "models/strategies/phases/sequence_parallel_grads.hpp"

namespace offsim::models {

std::int64_t sequence_parallel_gradient_elements(const ModelSpec& m, int tp, bool sequence_parallel,
                                                 std::int64_t layers, bool final_norm) {
  if (tp < 2 || (!sequence_parallel && !m.qk_norm)) return 0;
  const std::int64_t norm = m.norm == NormKind::kLayerNorm ? 2 * m.hidden : m.hidden;  // weight (and bias)
  std::int64_t per_layer = m.qk_norm ? 2 * m.head_dim() : 0;
  if (sequence_parallel) per_layer += m.norms_per_layer() * norm + (m.linear_bias ? 2 * m.hidden : 0);
  return layers * per_layer + (sequence_parallel && final_norm ? norm : 0);
}

}  // namespace offsim::models
