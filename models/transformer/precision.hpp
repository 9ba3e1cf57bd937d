#pragma once
// Precision facts of bf16 mixed-precision training with Adam: bytes per element of each state and
// the optimizer step's memory traffic per parameter. Used by the strategies, the placement of
// states and the host-rate calibration; they depend on nothing else.
#include <cstdint>

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
// DeepSpeed's BF16_Optimizer (runtime/bf16_optimizer.py) keeps an fp32 gradient buffer of every
// parameter the rank holds. After each micro-batch's backward it adds the bf16 gradients into it
// (_update_hp_grad: lp.grad.to(fp32), read 2 B and write 4 B, then add_, read 4 + 4 B and write
// 4 B): 18 B per parameter. In the step the global gradient norm reads the buffer and
// clear_hp_grads zeroes it (4 + 4 B per parameter), and the optimizer's own traffic has no cast:
// fused Adam 28 B and the copy back into bf16 6 B per parameter it updates.
inline constexpr std::int64_t kBf16OptimizerAccumulationBytesPerParam = (kBf16Bytes + kFp32Bytes) + 3 * kFp32Bytes;
inline constexpr std::int64_t kBf16OptimizerStepPassBytesPerParam = 2 * kFp32Bytes;
inline constexpr std::int64_t kBf16OptimizerAdamTrafficBytesPerParam =
    kAdamTrafficBytesPerParam - (kBf16Bytes + kFp32Bytes);
// Gradient accumulation over micro-batches outside the weight-gradient GEMM (where Megatron's
// gradient_accumulation_fusion, which has the GEMM add into main_grad, is off or absent):
// - into Megatron's fp32 main_grad buffer, by its DDP's backward hook every micro-batch
//   (Megatron-LM v2.5 megatron/model/distributed.py _make_param_hook: param.main_grad.add_(
//   param.grad.data); Megatron-DeepSpeed alike): read the fp32 buffer and the 16-bit gradient, write
//   the buffer, 10 B per parameter;
// - in 16 bits, by autograd's AccumulateGrad (its in-place add from the second micro-batch on: the
//   first micro-batch's gradient becomes param.grad without a copy): read two, write one, 6 B in
//   16 bits (12 B where the gradients are fp32). This
//   is Megatron-LM v2.5's fp16 training without contiguous buffers (--use-contiguous-buffers-in-ddp
//   off unless bf16) and DeepSpeed's FP16 / ZeRO stage 0-1 optimizers, which own param.grad.
inline constexpr std::int64_t kMainGradHookAccumulationBytesPerParam = kFp32Bytes + kBf16Bytes + kFp32Bytes;
// FSDP2 under a pipeline schedule (PyTorch's torch/distributed/fsdp/_fully_shard/_fsdp_param.py,
// FSDPParam.to_accumulated_grad_if_needed and accumulate_unsharded_grad_if_needed, run by
// FSDPParamGroup.post_backward): with gradient sync off for every micro-batch but the last and a
// reduce dtype (fp32) other than the parameters' (bf16), the first micro-batch's unsharded gradient
// is cast into an fp32 buffer (read 2 B, write 4 B) and every later one added into it (10 B).
inline constexpr std::int64_t kFsdp2UpcastBytesPerParam = kBf16Bytes + kFp32Bytes;
[[nodiscard]] constexpr std::int64_t autograd_accumulation_bytes_per_param(std::int64_t gradient_bytes) {
  return 3 * gradient_bytes;
}
// DeepSpeed's CPU Adam on fp32 host states: read p, g, m, v and write p, m, v (deepspeed-offload.md
// section 5).
inline constexpr std::int64_t kHostAdamTrafficBytesPerParam = 4 * kFp32Bytes + 3 * kFp32Bytes;
// Logits kept for the loss's backward: bf16 logits and their fp32 softmax.
inline constexpr std::int64_t kLogitBytesPerElement = kBf16Bytes + kFp32Bytes;
// The loss's transient fp32 workspace per logit: the fp32 copy of the logits the log-softmax
// reads in forward (PyTorch's cross_entropy on logits.float(), Megatron's vocab-parallel cross
// entropy alike), and the fp32 gradient of the log-softmax in backward: held around the head.
inline constexpr std::int64_t kLossWorkspaceBytesPerElement = kFp32Bytes;

}  // namespace offsim::models
