// DeepSpeed's estimators, line by line as in its source (deepspeed_estimator.hpp names the files).
#include "models/deepspeed_estimator.hpp"

#include <algorithm>

namespace offsim::models {

DeepSpeedEstimate deepspeed_model_states_estimate(const DeepSpeedEstimatorInput& in) {
  const auto params = static_cast<double>(in.total_params);
  const double total_gpus = static_cast<double>(in.nodes) * in.gpus_per_node;
  const double per_node = in.gpus_per_node;
  const double buffer = in.additional_buffer_factor;
  DeepSpeedEstimate out;
  if (in.partitioned.gradients && !in.partitioned.parameters) {
    // stage_1_and_2.py, estimate_zero2_model_states_mem_needs.
    if (in.cpu_offload) {
      out.gpu_bytes = 2.0 * params;
      out.cpu_bytes = params * std::max(4.0 * total_gpus, 16.0) * buffer;
    } else {
      out.gpu_bytes = 4.0 * params + static_cast<double>(static_cast<std::int64_t>(16.0 * params / total_gpus));
      out.cpu_bytes = params * 4.0 * per_node * buffer;
    }
    return out;
  }
  if (!in.partitioned.parameters) return out;
  // stage3.py, estimate_zero3_model_states_mem_needs.
  const double gpus_factor = 1.0 / in.nodes;
  const double largest_layer_memory = 4.0 * static_cast<double>(in.largest_layer_params);
  if (in.cpu_offload) {
    if (in.cpu_offload_params) {
      out.gpu_bytes = largest_layer_memory;
      out.cpu_bytes = in.zero_init ? params * 18.0 * gpus_factor * buffer
                                   : params * std::max(4.0 * per_node, 18.0 * gpus_factor) * buffer;
    } else {
      out.gpu_bytes = largest_layer_memory + static_cast<double>(static_cast<std::int64_t>(2.0 * params / total_gpus));
      out.cpu_bytes = in.zero_init ? params * 16.0 * gpus_factor * buffer
                                   : params * std::max(4.0 * per_node, 16.0 * gpus_factor) * buffer;
    }
  } else {
    out.gpu_bytes = largest_layer_memory + static_cast<double>(static_cast<std::int64_t>(18.0 * params / total_gpus));
    out.cpu_bytes = in.zero_init ? static_cast<double>(in.largest_layer_params) * 4.0 * per_node * buffer
                                 : params * 4.0 * per_node * buffer;
  }
  return out;
}

}  // namespace offsim::models
