#pragma once
// Per-rank kernel times of one micro-batch (layers, embedding, head, Adam) on one tensor-parallel
// rank, and the byte sizes of the training states: shared by the data-parallel and Megatron
// strategies. The cost model behind each time is stated in layer_kernels.cpp.
#include <cstdint>

#include "models/strategies/strategy.hpp"

namespace offsim::models {

// Bytes per element of each state under bf16 mixed precision with Adam.
inline constexpr std::int64_t kBf16Bytes = 2;
inline constexpr std::int64_t kFp32Bytes = 4;
// fp32 master weights, Adam momentum and variance.
inline constexpr std::int64_t kOptimizerStateBytesPerParam = 3 * kFp32Bytes;
// Adam's HBM traffic per parameter: read fp32 p, m, v and the bf16 gradient (14 B), write fp32
// p, m, v and the bf16 working copy of p (14 B).
inline constexpr std::int64_t kAdamTrafficBytesPerParam = 3 * kFp32Bytes + kBf16Bytes + 3 * kFp32Bytes + kBf16Bytes;
// DeepSpeed's CPU Adam on fp32 host states: read p, g, m, v and write p, m, v (deepspeed-offload.md
// section 5).
inline constexpr std::int64_t kHostAdamTrafficBytesPerParam = 4 * kFp32Bytes + 3 * kFp32Bytes;
// Logits kept for the loss's backward: bf16 logits and their fp32 softmax.
inline constexpr std::int64_t kLogitBytesPerElement = kBf16Bytes + kFp32Bytes;

struct KernelTimes {
  sim::TimePs embed_fwd, embed_bwd, layer_fwd, layer_bwd, head_fwd, head_bwd, adam;
};

/// Kernel times for a rank of a tensor-parallel group of `tp` that updates `params_on_rank`
/// parameters with Adam on the GPU.
[[nodiscard]] KernelTimes kernel_times(const IterationInputs& in, std::int64_t params_on_rank, std::int64_t tp);

}  // namespace offsim::models
