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
/// What the report says of FP8 training.
[[nodiscard]] std::string fp8_approximation(const Fp8Training& f);

/// What the report says of DeepSpeed's BF16_Optimizer (deepspeed_gradient_handling): what it does,
/// and which of its passes over the fp32 gradient buffer are not timed.
[[nodiscard]] std::string bf16_optimizer_approximation();

/// How a framework's data-parallel optimizer treats the gradients, as both strategies and the
/// search need it: the dtype they are reduced in, the wrapper, whose optimizer states are
/// partitioned, and the buffers they live in.
struct GradientHandling {
  bool fp32_gradients = false;  // reduced (and, at stages 0-1, accumulated) in fp32
  bool bf16_optimizer = false;  // DeepSpeed's BF16_Optimizer
  int optimizer_stage = 0;      // the ZeRO stage whose partitioning of the optimizer states applies
  GradientBuffers buffers = GradientBuffers::kWorking;  // at stages 0-1 without offload
  /// Reduced to the owners of their partition (a reduce-scatter) where the optimizer states are
  /// partitioned; BF16_Optimizer all-reduces (engine.py allreduce_gradients), as does a replicated
  /// optimizer.
  [[nodiscard]] constexpr bool reduce_to_owners() const { return optimizer_stage >= 1 && !bf16_optimizer; }
  /// n gradients in the communicator's unit, bf16 elements.
  [[nodiscard]] constexpr std::int64_t reduced_elements(std::int64_t n) const {
    return fp32_gradients ? n * kFp32Bytes / kBf16Bytes : n;
  }
  /// The name of the gradients' setup allocation at stages 0-1 without offload.
  [[nodiscard]] const char* gradient_tenant() const;
};
/// DeepSpeed's, by stage and gradient accumulation dtype (nullopt: its default, engine.py
/// get_data_types: fp32 for bf16 without ZeRO, the model's bf16 under ZeRO), and at stages 2-3 the
/// dtype of the reduce-scatter (communication_data_type, FSDP's reduce_dtype). At stages 0-1 the
/// optimizer wrapper follows the accumulation dtype (engine.py _do_optimizer_sanity_check): fp32 is
/// BF16_Optimizer, which keeps an fp32 buffer of every gradient besides the bf16 ones, all-reduces
/// the fp32 gradients, partitions the fp32 master, m and v over the data-parallel group as ZeRO-1
/// does and all-gathers the updated bf16 parameters (bf16_optimizer.py); 16 bits is the ZeRO-1
/// optimizer at stage 1 and, at stage 0, 16-bit gradients with the optimizer replicated
/// (FP16_Optimizer, or PyTorch's DDP).
[[nodiscard]] constexpr GradientHandling deepspeed_gradient_handling(int zero_stage,
                                                                     std::optional<bool> fp32_grad_accum,
                                                                     bool fp32_gradient_reduce) {
  const bool fp32_accum = fp32_grad_accum.value_or(zero_stage == 0);
  const bool bf16 = zero_stage <= 1 && fp32_accum;
  return {bf16 || (zero_stage >= 2 && fp32_gradient_reduce), bf16, bf16 ? 1 : zero_stage,
          bf16 ? GradientBuffers::kFp32AndWorking : GradientBuffers::kWorking};
}
/// Megatron-LM's: main_grad in fp32 (at ZeRO-0 and with its distributed optimizer alike) unless set
/// to 16 bits (fp16 training's default, --grad-reduce-in-bf16), the optimizer partitioned at
/// zero_stage 1 (its distributed optimizer).
[[nodiscard]] constexpr GradientHandling megatron_gradient_handling(int zero_stage,
                                                                    std::optional<bool> fp32_grad_accum) {
  const bool fp32 = fp32_grad_accum.value_or(true);
  return {fp32, false, zero_stage, fp32 ? GradientBuffers::kFp32 : GradientBuffers::kWorking};
}

/// Bytes one rank of a tensor-parallel group of `tp` keeps per layer for backward: with sequence
/// parallelism everything is split by tp; without it, Korthikanti et al. section 4.2: of the
/// sbh(34 + 5as/h) per layer, the sbh x 10 of the norms, dropouts and layer input stay whole on
/// every rank and the rest splits by tp.
[[nodiscard]] sim::Bytes stored_activations_on_tp_rank(const ModelSpec& m, const TrainingSpec& t, std::int64_t tp,
                                                       bool sequence_parallel);

}  // namespace offsim::models
