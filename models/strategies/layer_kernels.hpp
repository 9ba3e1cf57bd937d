#pragma once
// Per-rank kernel times of one micro-batch (layers, embedding, head, Adam) on one tensor-parallel
// rank, and the byte sizes of the training states: shared by the data-parallel and Megatron
// strategies. The cost model behind each time is stated in layer_kernels.cpp.
#include <cstdint>
#include <optional>
#include <string>

#include "models/placement/state_placement.hpp"
#include "models/strategies/strategy.hpp"
#include "models/transformer/precision.hpp"

namespace offsim::models {

// What layer_elementwise_kernels leaves out, for the report: which attention kernels `t` runs,
// and what no kernel class of the calibration covers.
[[nodiscard]] std::string non_gemm_kernels_approximation(const TrainingSpec& t);

struct KernelTimes {
  sim::TimePs embed_fwd, embed_bwd, layer_fwd, layer_bwd, head_fwd, head_bwd, adam;
  // The part of layer_fwd / layer_bwd that runs on the experts' routed tokens (their GEMMs and
  // per-expert kernels): what expert parallelism places between its all-to-alls. 0 when dense.
  // experts_bwd leaves out the recomputed forward (which is in layer_bwd).
  sim::TimePs experts_fwd{0}, experts_bwd{0};
  // The part of layer_fwd / layer_bwd that is the attention core (QK^T, softmax, times V, or the
  // flash kernel): what context parallelism's ring runs block by block. attention_bwd includes its
  // recomputed forward (selective or full recomputation).
  sim::TimePs attention_fwd{0}, attention_bwd{0};
};

/// Kernel times for a rank of a tensor-parallel group of `tp` that updates `params_on_rank`
/// parameters with Adam on the GPU.
[[nodiscard]] KernelTimes kernel_times(const IterationInputs& in, std::int64_t params_on_rank, std::int64_t tp,
                                       bool sequence_parallel = false, std::int64_t ep = 1);

/// The parameters one rank of a tensor-parallel group of `tp` holds: every count split by tp
/// (Megatron splits the projections and the vocabulary; the norms and the row-parallel biases it
/// keeps whole are a few parameters per layer, counted split too). tp = 1: `all` unchanged.
[[nodiscard]] ParameterCounts tensor_parallel_share(const ParameterCounts& all, std::int64_t tp);

/// Whether Transformer Engine runs `g` in FP8 under `precision: fp8`: the projections, not the
/// attention cores (bf16 attention) nor the MoE router (a plain torch GEMM in Megatron-Core).
[[nodiscard]] bool runs_in_fp8(const GemmShape& g);
/// The FP8 state one rank keeps for `layers` layers of a tensor-parallel group of `tp` (experts
/// over `ep`): each FP8 GEMM's weight copies and scaling state (fp8.hpp).
[[nodiscard]] sim::Bytes fp8_state_bytes(const ModelSpec& m, const Fp8Training& f, std::int64_t tp, std::int64_t ep,
                                         std::int64_t layers);
/// What the report says of FP8 training (`userbuffers`: Transformer Engine's TP overlap is on,
/// which all-gathers the FP8 inputs: tp_overlap.hpp).
[[nodiscard]] std::string fp8_approximation(const Fp8Training& f, bool userbuffers = false);

/// What the report says of DeepSpeed's BF16_Optimizer (ZeroPolicy::deepspeed): what it does,
/// and which of its passes over the fp32 gradient buffer are not timed.
[[nodiscard]] std::string bf16_optimizer_approximation();

/// Bytes one rank of a tensor-parallel group of `tp` keeps per layer for backward: with sequence
/// parallelism everything is split by tp; without it, Korthikanti et al. section 4.2: of the
/// sbh(34 + 5as/h) per layer, the sbh x 10 of the norms, dropouts and layer input stay whole on
/// every rank and the rest splits by tp.
[[nodiscard]] sim::Bytes stored_activations_on_tp_rank(const ModelSpec& m, const TrainingSpec& t, std::int64_t tp,
                                                       bool sequence_parallel);

}  // namespace offsim::models
