#pragma once
// DeepSpeed's own memory estimators for ZeRO-2 and ZeRO-3 model states, as DeepSpeed computes them
// (deepspeed/runtime/zero/stage_1_and_2.py estimate_zero2_model_states_mem_needs and
// deepspeed/runtime/zero/stage3.py estimate_zero3_model_states_mem_needs), for `offsim estimate`
// to print beside offsim's simulated peaks. They count model states only (no activations, no
// buffers) with DeepSpeed's additional_buffer_factor of 1.5 on the CPU side.
#include <cstdint>

#include "models/placement/state_placement.hpp"

namespace offsim::models {

struct DeepSpeedEstimatorInput {
  // What the ZeRO stage partitions (ZeroPolicy): gradients but not parameters is ZeRO-2's
  // estimator, parameters ZeRO-3's; DeepSpeed has none for the others.
  ZeroPartitioning partitioned{true, true, true};
  std::int64_t total_params = 0;
  std::int64_t largest_layer_params = 0;  // the largest module's own parameters (stage 3)
  int gpus_per_node = 1;
  int nodes = 1;
  bool cpu_offload = false;               // offload_optimizer: cpu
  bool cpu_offload_params = false;        // offload_param: cpu (stage 3)
  bool zero_init = true;                  // deepspeed.zero.Init (the estimators' default)
  double additional_buffer_factor = 1.5;  // the estimators' default
};

struct DeepSpeedEstimate {
  double gpu_bytes = 0.0;  // per GPU
  double cpu_bytes = 0.0;  // per node
};

/// The estimate for ZeRO-2 or ZeRO-3; {0, 0} for other stages (DeepSpeed has no estimator for them).
[[nodiscard]] DeepSpeedEstimate deepspeed_model_states_estimate(const DeepSpeedEstimatorInput& in);

}  // namespace offsim::models
