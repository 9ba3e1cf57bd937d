#include "models/strategies/layer_kernels.hpp"

namespace offsim::models {

using sim::Bytes;
using sim::TimePs;

KernelTimes kernel_times(const IterationInputs& in, std::int64_t params_on_rank, std::int64_t tp) {
  const auto& m = in.model;
  const auto& t = in.training;
  const auto& c = in.costs;
  const LayerWork w = layer_forward(m, t.micro_batch, t.flash_attention);
  const std::int64_t tokens = t.micro_batch * m.seq;
  // GEMMs by shape on one rank of the tensor-parallel group (Megatron's column/row split). Backward
  // runs two GEMMs of each forward shape (input and weight gradients), costed as twice the
  // forward shape's time.
  TimePs gemms{0};
  TimePs attention_core{0};
  for (const auto& g : layer_gemms(m, t.micro_batch, tp)) {
    const TimePs d = c.gemm_time(g, g.attention_core && t.flash_attention);
    gemms += d;
    if (g.attention_core) attention_core += d;
  }
  // Non-GEMM kernels (norms, softmax, activation functions, residual adds, dropout) are charged
  // as HBM traffic of twice the bytes the layer stashes: each stashed tensor is written once and
  // read once. A coarse stand-in until kernel tables cover them. Under tensor parallelism each rank
  // handles 1/tp of them (exact for the split parts, an approximation for the replicated norms
  // and dropouts, which sequence parallelism splits too).
  const Bytes elementwise{w.activations.count * 2 / tp};
  const TimePs layer_fwd = gemms + c.memory_bound_time(elementwise);
  TimePs recompute{0};
  if (t.recompute == Recompute::kFull) recompute = layer_fwd;
  if (t.recompute == Recompute::kSelective) recompute = attention_core;
  KernelTimes k;
  k.layer_fwd = layer_fwd;
  k.layer_bwd = recompute + gemms + gemms + c.memory_bound_time(elementwise * 2);
  const GemmShape head = head_gemm(m, t.micro_batch, tp);
  const Bytes logits{tokens * ((m.vocab + tp - 1) / tp) * kLogitBytesPerElement};
  k.head_fwd = c.gemm_time(head) + c.memory_bound_time(logits);
  k.head_bwd = c.gemm_time(head) + c.gemm_time(head) + c.memory_bound_time(logits);
  k.embed_fwd = c.memory_bound_time(Bytes{tokens * m.hidden * kBf16Bytes});
  k.embed_bwd = c.memory_bound_time(Bytes{tokens * m.hidden * kBf16Bytes * 2});
  k.adam = c.memory_bound_time(Bytes{params_on_rank * kAdamTrafficBytesPerParam});
  return k;
}

}  // namespace offsim::models
