#include "models/strategies/phases/zero_policy.hpp"

#include <fmt/format.h>

#include <stdexcept>

namespace offsim::models {

ZeroPartitioning ZeroPolicy::partitioning_of_stage(int stage) {
  if (!kStages.contains(stage)) {
    throw std::invalid_argument(fmt::format("zero_stage: {}, got {}", kStages.expected(), stage));
  }
  return {stage >= 1, stage >= 2, stage >= 3};
}

ZeroPolicy ZeroPolicy::deepspeed(int stage, std::optional<bool> fp32_grad_accum, bool fp32_gradient_reduce) {
  ZeroPolicy p;
  p.stage_ = stage;
  p.partitioned_ = partitioning_of_stage(stage);
  const bool fp32_accum = fp32_grad_accum.value_or(!p.partitioned_.optimizer);
  if (!p.partitioned_.gradients && fp32_accum) {
    // BF16_Optimizer: the optimizer partitioned as at stage 1, whatever stage 0-1 was named.
    p.engine_ = OptimizerEngine::kBf16Optimizer;
    p.partitioned_.optimizer = true;
    p.fp32_gradients_ = true;
    p.buffers_ = GradientBuffers::kFp32AndWorking;
    return p;
  }
  p.engine_ = p.partitioned_.parameters  ? OptimizerEngine::kZeroStage3
              : p.partitioned_.optimizer ? OptimizerEngine::kZeroStage1And2
                                         : OptimizerEngine::kReplicated;
  p.fp32_gradients_ = p.partitioned_.gradients && fp32_gradient_reduce;
  return p;
}

ZeroPolicy ZeroPolicy::megatron(int stage, std::optional<bool> fp32_grad_accum) {
  if (!kMegatronStages.contains(stage)) {
    throw std::invalid_argument(fmt::format("megatron: zero_stage: {}, got {}", kMegatronStages.expected(), stage));
  }
  ZeroPolicy p;
  p.stage_ = stage;
  p.partitioned_ = partitioning_of_stage(stage);
  p.engine_ = p.partitioned_.gradients ? OptimizerEngine::kFsdpUnderPipeline : OptimizerEngine::kMegatron;
  p.fp32_gradients_ = fp32_grad_accum.value_or(true);
  p.buffers_ = p.fp32_gradients_ ? GradientBuffers::kFp32 : GradientBuffers::kWorking;
  return p;
}

ZeroPolicy ZeroPolicy::fsdp2(bool fp32_reduce) {
  ZeroPolicy p;
  p.stage_ = 3;
  p.partitioned_ = partitioning_of_stage(3);
  p.engine_ = OptimizerEngine::kFsdp2;
  p.fp32_gradients_ = fp32_reduce;
  return p;
}

const char* ZeroPolicy::gradient_tenant() const {
  if (accumulates_whole_gradients()) return "gradient partition (fp32)";
  switch (buffers_) {
    case GradientBuffers::kFp32:
      return "gradients (fp32 main_grad)";
    case GradientBuffers::kFp32AndWorking:
      return "gradients (fp32 buffer and bf16)";
    case GradientBuffers::kWorking:
      break;
  }
  return "gradients (bf16)";
}

}  // namespace offsim::models
