#include "models/strategies/layer_kernels.hpp"

#include <cmath>

#include <fmt/format.h>

namespace offsim::models {

using sim::Bytes;
using sim::TimePs;

namespace {
// The two gradient GEMMs of a forward GEMM C (m x n) = A (m x k) . B (k x n): the input gradient
// dA = dC . B^T (m x k x n) and the weight gradient dB = A^T . dC (k x n x m).
TimePs gradient_gemms_time(const CostModel& c, const GemmShape& g) {
  GemmShape input_grad = g, weight_grad = g;
  input_grad.n = g.k;
  input_grad.k = g.n;
  weight_grad.m = g.k;
  weight_grad.k = g.m;
  return c.gemm_time(input_grad) + c.gemm_time(weight_grad);
}
}  // namespace

// Flash attention's backward runs 5 matrix products where its forward runs 2 (Dao 2023,
// FlashAttention-2, section 3.1.2: it recomputes the scores): 2.5 times the forward's FLOPs.
constexpr double kFlashBackwardOverForward = 2.5;

KernelTimes kernel_times(const IterationInputs& in, std::int64_t params_on_rank, std::int64_t tp,
                         bool sequence_parallel, std::int64_t ep) {
  const auto& m = in.model;
  const auto& t = in.training;
  const auto& c = in.costs;
  const std::int64_t tokens = t.micro_batch * m.seq;
  // GEMMs by shape on one rank of the tensor-parallel group (Megatron's column/row split).
  // Backward runs the two gradient GEMMs of each forward one, each with its own shape; flash attention's fused
  // backward core costs kFlashBackwardOverForward forward cores.
  TimePs gemms_fwd{0}, gemms_bwd{0};
  TimePs attention_core{0};
  KernelTimes k;
  const auto& measured_flash = c.device().flash_attention;
  for (const auto& g : layer_gemms(m, t.micro_batch, tp, ep)) {
    const bool fused = g.attention_core && t.flash_attention;
    if (fused && measured_flash) {
      // The device's measured flash-attention kernels: forward FLOPs at the forward efficiency,
      // 2.5 x those FLOPs at the backward efficiency (FlashAttention-2's own count).
      const double peak = c.device().peak_matrix_bf16.flops_per_s;
      const double flops = g.flops();
      const TimePs fwd = sim::duration_of(flops, peak * measured_flash->forward, "FLOP");
      gemms_fwd += fwd;
      attention_core += fwd;
      const TimePs bwd = sim::duration_of(kFlashBackwardOverForward * flops, peak * measured_flash->backward, "FLOP");
      gemms_bwd += bwd;
      k.attention_bwd += bwd;
      continue;
    }
    const TimePs d = c.gemm_time(g, fused);
    gemms_fwd += d;
    if (g.attention_core) attention_core += d;
    if (fused) {
      const TimePs bwd{std::llround(kFlashBackwardOverForward * static_cast<double>(d.ps))};
      gemms_bwd += bwd;
      k.attention_bwd += bwd;
      continue;
    }
    const TimePs b = gradient_gemms_time(c, g);
    gemms_bwd += b;
    if (g.attention_core) k.attention_bwd += b;
    if (g.expert) {
      k.experts_fwd += d;
      k.experts_bwd += b;
    }
  }
  // Non-GEMM kernels one by one (transformer.hpp, layer_elementwise_kernels): each streams its
  // bytes at the device's measured efficiency for its kind, never faster than a kernel launch.
  TimePs elementwise_fwd{0}, elementwise_bwd{0}, attention_elementwise{0};
  for (const auto& kernel :
       layer_elementwise_kernels(m, t.micro_batch, tp, t.attention_kernels(), sequence_parallel, ep)) {
    if (kernel.forward_bytes > 0.0) {
      const TimePs d = c.memory_bound_time(Bytes{static_cast<std::int64_t>(kernel.forward_bytes)}, kernel.kernel);
      elementwise_fwd += d;
      if (kernel.attention_core) attention_elementwise += d;
      if (kernel.expert) k.experts_fwd += d;
    }
    if (kernel.backward_bytes > 0.0) {
      const TimePs d =
          c.memory_bound_time(Bytes{static_cast<std::int64_t>(kernel.backward_bytes)}, kernel.kernel, true);
      elementwise_bwd += d;
      if (kernel.attention_core) k.attention_bwd += d;
      if (kernel.expert) k.experts_bwd += d;
    }
  }
  const TimePs layer_fwd = gemms_fwd + elementwise_fwd;
  TimePs recompute{0};
  if (t.recompute == Recompute::kFull) recompute = layer_fwd;
  if (t.recompute == Recompute::kSelective) recompute = attention_core + attention_elementwise;
  k.layer_fwd = layer_fwd;
  k.attention_fwd = attention_core + attention_elementwise;
  if (t.recompute != Recompute::kNone) k.attention_bwd += k.attention_fwd;
  k.layer_bwd = recompute + gemms_bwd + elementwise_bwd;
  const GemmShape head = head_gemm(m, t.micro_batch, tp);
  const Bytes logits{tokens * ((m.vocab + tp - 1) / tp) * kLogitBytesPerElement};
  k.head_fwd = c.gemm_time(head) + c.memory_bound_time(logits);
  k.head_bwd = gradient_gemms_time(c, head) + c.memory_bound_time(logits);
  k.embed_fwd = c.memory_bound_time(Bytes{tokens * m.hidden * kBf16Bytes});
  k.embed_bwd = c.memory_bound_time(Bytes{tokens * m.hidden * kBf16Bytes * 2});
  k.adam = c.memory_bound_time(Bytes{params_on_rank * kAdamTrafficBytesPerParam});
  return k;
}

std::string bf16_optimizer_approximation() {
  return "optimizer: DeepSpeed's BF16_Optimizer (fp32 gradient accumulation at ZeRO stage 0-1): fp32 gradient "
         "all-reduce after the backward whatever overlap_comm says (engine.py: allreduce_gradients after the "
         "optimizer's backward), master weights and Adam states partitioned over the data-parallel group, bf16 "
         "parameters all-gathered after the step; its passes over the fp32 gradient buffer costed by their bytes "
         "(adding each "
         "micro-batch's bf16 gradients 18 B, the gradient norm and the zeroing 8 B per parameter); the scaling of "
         "gradient clipping is not";
}

std::string non_gemm_kernels_approximation(const TrainingSpec& t) {
  const char* attention = "";
  switch (t.attention_kernels()) {
    case AttentionKernels::kUnfused:
      attention = "attention scale, mask, softmax and dropout as PyTorch's separate kernels over all scores";
      break;
    case AttentionKernels::kFusedSoftmax:
      attention =
          "attention scale, mask and softmax as Megatron's fused kernel (loads the unmasked half of the scores, "
          "writes all; at the PyTorch softmax's measured efficiency), dropout apart";
      break;
    case AttentionKernels::kFlash:
      attention = "attention scale, mask, softmax and dropout inside flash attention";
      break;
  }
  return fmt::format(
      "non-GEMM layer kernels are PyTorch's eager kernels (norms, activation, dropouts, residual adds, bias "
      "gradients; {}), each costed by its HBM bytes; a norm is one kernel (PyTorch's layer_norm, apex's fused "
      "RMSNorm), not the several of an eager RMSNorm; Megatron's bias-dropout-add fusion would move fewer bytes; "
      "without sequence parallelism norms and dropouts run whole on every tensor-parallel rank",
      attention);
}

ParameterCounts tensor_parallel_share(const ParameterCounts& all, std::int64_t tp) {
  if (tp == 1) return all;
  const auto share = [&](std::int64_t n) { return (n + tp - 1) / tp; };
  ParameterCounts c;
  c.per_layer = share(all.per_layer);
  c.layers = c.per_layer * (all.per_layer > 0 ? all.layers / all.per_layer : 0);
  c.embedding = share(all.embedding);
  c.position = share(all.position);
  c.final_norm = share(all.final_norm);
  c.output_head = share(all.output_head);
  c.total = c.layers + c.embedding + c.position + c.final_norm + c.output_head;
  c.active = share(all.active);
  c.experts_per_layer = share(all.experts_per_layer);
  return c;
}

sim::Bytes stored_activations_on_tp_rank(const ModelSpec& m, const TrainingSpec& t, std::int64_t tp,
                                         bool sequence_parallel) {
  const Bytes stored = stored_activation_bytes(m, t.micro_batch, t.recompute, t.flash_attention);
  if (tp == 1) return stored;
  if (sequence_parallel) return Bytes{stored.count / tp};
  if (t.recompute == Recompute::kFull) return stored;
  return Bytes{
      static_cast<std::int64_t>(static_cast<double>(stored.count) * (10.0 + 24.0 / static_cast<double>(tp)) / 34.0)};
}

}  // namespace offsim::models
