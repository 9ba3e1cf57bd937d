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
// The GPU optimizer step's HBM traffic per parameter under DeepSpeed's bf16 mixed precision
// (runtime/zero/stage_1_and_2.py step, runtime/bf16_optimizer.py): the bf16 gradient is cast into
// an fp32 gradient (read 2 B, write 4 B); fused Adam reads fp32 p, g, m, v (16 B) and writes p, m,
// v (12 B); the fp32 master weights are copied back into the bf16 working copy (read 4 B, write
// 2 B). Three kernels' traffic, 40 B.
inline constexpr std::int64_t kAdamTrafficBytesPerParam =
    (kBf16Bytes + kFp32Bytes) + (4 * kFp32Bytes + 3 * kFp32Bytes) + (kFp32Bytes + kBf16Bytes);
// DeepSpeed's CPU Adam on fp32 host states: read p, g, m, v and write p, m, v (deepspeed-offload.md
// section 5).
inline constexpr std::int64_t kHostAdamTrafficBytesPerParam = 4 * kFp32Bytes + 3 * kFp32Bytes;
// Logits kept for the loss's backward: bf16 logits and their fp32 softmax.
inline constexpr std::int64_t kLogitBytesPerElement = kBf16Bytes + kFp32Bytes;
// The loss's transient fp32 workspace per logit: the fp32 copy of the logits the log-softmax
// reads in forward (PyTorch's cross_entropy on logits.float(), Megatron's vocab-parallel cross
// entropy alike), and the fp32 gradient of the log-softmax in backward: held around the head.
inline constexpr std::int64_t kLossWorkspaceBytesPerElement = kFp32Bytes;

// What layer_elementwise_kernels leaves out, for the report.
inline constexpr const char* kNonGemmKernelsApproximation =
    "non-GEMM layer kernels are PyTorch's unfused eager kernels (norms, activation, attention scale, mask, softmax "
    "and dropout, dropouts, residual adds, bias gradients), each costed by its HBM bytes; fused implementations "
    "(Megatron's fused softmax, bias-GeLU, bias-dropout-add) move fewer bytes; without sequence parallelism norms "
    "and dropouts run whole on every tensor-parallel rank";

struct KernelTimes {
  sim::TimePs embed_fwd, embed_bwd, layer_fwd, layer_bwd, head_fwd, head_bwd, adam;
  // The part of layer_fwd / layer_bwd that runs on the experts' routed tokens (their GEMMs and
  // per-expert kernels): what expert parallelism places between its all-to-alls. 0 when dense.
  // experts_bwd leaves out the recomputed forward (which is in layer_bwd).
  sim::TimePs experts_fwd{0}, experts_bwd{0};
};

/// Kernel times for a rank of a tensor-parallel group of `tp` that updates `params_on_rank`
/// parameters with Adam on the GPU.
[[nodiscard]] KernelTimes kernel_times(const IterationInputs& in, std::int64_t params_on_rank, std::int64_t tp,
                                       bool sequence_parallel = false, std::int64_t ep = 1);

/// The parameters one rank of a tensor-parallel group of `tp` holds: every count split by tp
/// (Megatron splits the projections and the vocabulary; the norms and the row-parallel biases it
/// keeps whole are a few parameters per layer, counted split too). tp = 1: `all` unchanged.
[[nodiscard]] ParameterCounts tensor_parallel_share(const ParameterCounts& all, std::int64_t tp);

/// Bytes one rank of a tensor-parallel group of `tp` keeps per layer for backward: with sequence
/// parallelism everything is split by tp; without it, Korthikanti et al. section 4.2: of the
/// sbh(34 + 5as/h) per layer, the sbh x 10 of the norms, dropouts and layer input stay whole on
/// every rank and the rest splits by tp.
[[nodiscard]] sim::Bytes stored_activations_on_tp_rank(const ModelSpec& m, const TrainingSpec& t, std::int64_t tp,
                                                       bool sequence_parallel);

}  // namespace offsim::models
