#pragma once
// Host dispatch of eager frameworks: the host (Python and PyTorch's dispatcher) spends a measured
// time on each operator before its kernel is issued, never waiting for the GPU inside a phase;
// the GPU runs the kernels in issue order. Kernel i (GPU time g_i, host cost d_i) is issued at
//   h_i = h_{i-1} + d_i                       (h_0 = the phase's start: host and GPU aligned)
// and runs from
//   s_i = max(e_{i-1}, h_i),   e_i = s_i + g_i   (e_0 = the phase's start).
// So a chain of kernels shorter than their dispatch costs the host's time (n equal kernels with
// g <= d: n d + g), and a long kernel lets the host run ahead (k small kernels, then one of GPU
// time G: (k + 1) d + G; in general e_n = max over j of h_j + g_j + ... + g_n). It is exact for one
// GPU's stream; layer_kernels.cpp applies it to each rank's phases (forward; backward with any
// recomputed forward), treating the phase boundaries as synchronisations.
#include <cstdint>
#include <string>
#include <vector>

#include "sim/core/units.hpp"

namespace offsim::models {

/// One kernel of a rank's stream: its GPU time and the host time spent before it is issued.
struct DispatchedKernel {
  sim::TimePs gpu{0};
  sim::TimePs host{0};
};

/// The recurrence above, run over consecutive segments of one stream: `run` advances the host's
/// and the GPU's clocks over a sequence and returns the GPU's end time since the stream began.
class DispatchStream {
 public:
  sim::TimePs run(const std::vector<DispatchedKernel>& kernels);
  [[nodiscard]] sim::TimePs gpu_end() const { return gpu_; }
  [[nodiscard]] sim::TimePs host_time() const { return host_; }

 private:
  sim::TimePs host_{0};  // h: when the host has issued the last kernel
  sim::TimePs gpu_{0};   // e: when the GPU finishes the last kernel
};

/// e_n of `kernels` from an aligned start.
[[nodiscard]] sim::TimePs dispatched_time(const std::vector<DispatchedKernel>& kernels);

}  // namespace offsim::models

namespace offsim::models {

struct IterationInputs;
struct KernelTimes;
struct ModelSpec;

/// Rewrites `k`'s embedding, layer and head times (forward and backward) as the GPU's end times of
/// the recurrence above over one rank's stream of a micro-batch on one GPU, when the host table
/// (in.host) has a dispatch table: forward = embedding, `layers` layers, head; backward = head,
/// `layers` layers (with the recomputed forward under full recomputation), embedding. A layer's
/// time becomes the mean of its phase's layers (their sum is the recurrence's, exactly). Each eager
/// operator costs the host its class's measured forward time (autograd recording); backward, one
/// node per forward operator, spread evenly over the node's kernels. The optimizer step (one fused
/// kernel) is left as it is. Returns false (k unchanged) without a dispatch table.
bool apply_host_dispatch(const IterationInputs& in, const ModelSpec& m, std::int64_t layers, std::int64_t tp,
                         bool sequence_parallel, std::int64_t ep, KernelTimes& k);

/// What the report says of host dispatch, with or without a dispatch table in `in.host`.
[[nodiscard]] std::string host_dispatch_approximation(const IterationInputs& in);

}  // namespace offsim::models
