#pragma once
// What a ZeRO stage means for one run, worked out once from the stage the user named, the
// framework whose data-parallel optimizer runs, and the gradients' dtypes. Every strategy and the
// search ask this value what to do (is the optimizer partitioned? are parameters gathered before
// use? are gradients reduced every micro-batch, to their owners or to all?); nothing outside it
// compares a stage number.
//
// The stages (Rajbhandari et al., "ZeRO", SC20, section 5), over the group a state is sharded over:
//   0: nothing partitioned;
//   1: the optimizer states (fp32 master, m, v) partitioned, each rank updating its share, then
//      all-gathering the updated parameters;
//   2: the gradients too: reduced to their owners every micro-batch, one reduce bucket on the GPU;
//   3: the parameters too: gathered before each module runs and freed after it.
// The framework decides the rest (layer_kernels.hpp states the frameworks' sources):
//   DeepSpeed, stages 0-1 with fp32 gradient accumulation: BF16_Optimizer (bf16_optimizer.py),
//     which partitions the optimizer as ZeRO-1 does and all-reduces fp32 gradients;
//   DeepSpeed, ZeRO stages 1-2: DeepSpeedZeroOptimizer (runtime/zero/stage_1_and_2.py);
//   DeepSpeed, stage 3: DeepSpeedZeroOptimizer_Stage3 (runtime/zero/stage3.py);
//   Megatron-LM: its DDP with main_grad, and at stage 1 its distributed optimizer;
//   stage 2 under pipelines: PyTorch's FSDP2 as torch.distributed.pipelining runs it (torchtitan,
//     and Meta's Llama 3 405B training, arXiv:2407.21783 section 3.3.2), kFsdpUnderPipeline below.
#include <cstdint>
#include <optional>

#include "models/collectives/plan.hpp"
#include "models/placement/state_placement.hpp"
#include "models/transformer/precision.hpp"
#include "sim/config/value_range.hpp"

namespace offsim::models {

/// The optimizer implementation that runs the data-parallel step (its source decides the offload
/// mechanics, the hooks' host costs and the collectives).
enum class OptimizerEngine {
  kReplicated,      // every rank updates every parameter (DeepSpeed's FP16_Optimizer, PyTorch DDP)
  kBf16Optimizer,   // DeepSpeed's BF16_Optimizer (bf16_optimizer.py)
  kZeroStage1And2,  // DeepSpeed's DeepSpeedZeroOptimizer (stage_1_and_2.py)
  kZeroStage3,      // DeepSpeed's DeepSpeedZeroOptimizer_Stage3 (stage3.py)
  kMegatron,        // Megatron-LM's DDP (main_grad), and at stage 1 its distributed optimizer
  // PyTorch's FSDP2 (fully_shard per transformer block, reshard_after_forward false: torchtitan's
  // default with pipeline parallelism, parallelize.py "reshard_after_forward = not pp_enabled")
  // under a torch.distributed.pipelining schedule, whose backward_maybe_with_nosync (stage.py)
  // turns gradient sync and resharding off for every micro-batch but the last: each rank
  // accumulates its stage's whole gradients in the reduce dtype (FSDPParam's
  // unsharded_accumulated_grad, fp32 by default) from its first backward, reduce-scatters them
  // once after its last backward into its fp32 gradient shard and frees the whole buffer; the
  // optimizer updates the rank's shard (the fp32 sharded parameters are the master weights) and
  // the bf16 parameters are all-gathered once before the next forwards.
  kFsdpUnderPipeline,
  // PyTorch's FSDP2 (fully_shard, ZeRO-3) as torchtitan runs it without pipelines
  // (phases/fsdp2.hpp): each FSDP unit's parameters all-gathered (one collective per unit) before
  // its forward and, where resharded after forward, again before its backward; its gradients
  // reduce-scattered in the reduce dtype right after its backward, every micro-batch; the sharded
  // parameters are fp32 and are the optimizer's master weights, the sharded gradients fp32 too.
  kFsdp2,
};

class ZeroPolicy {
 public:
  /// ZeRO's stages (DeepSpeed runtime/zero/config.py, ZeroStageEnum 0-3): the one definition every
  /// reader checks zero_stage against (models/strategies/value_ranges.hpp) and the policy enforces.
  static constexpr sim::config::ValueRange<int> kStages{0, 3, false, "ZeRO's stages"};
  /// Megatron-LM's: 0, or 1 for its distributed optimizer; 2 for FSDP2 under its pipeline schedule
  /// (kFsdpUnderPipeline).
  static constexpr sim::config::ValueRange<int> kMegatronStages{
      0, 2, false, "0-1: Megatron's distributed optimizer, 2: FSDP2 under the pipeline schedule"};

  /// DeepSpeed's engine, by stage and gradient accumulation dtype (nullopt: its default, engine.py
  /// get_data_types: fp32 for bf16 without ZeRO, the model's bf16 under ZeRO), and at stages 2-3
  /// the dtype of the reduce-scatter (communication_data_type, FSDP's reduce_dtype). At stages 0-1
  /// the optimizer wrapper follows the accumulation dtype (engine.py _do_optimizer_sanity_check):
  /// fp32 is BF16_Optimizer, which keeps an fp32 buffer of every gradient besides the bf16 ones,
  /// all-reduces the fp32 gradients, partitions the fp32 master, m and v over the data-parallel
  /// group as ZeRO-1 does and all-gathers the updated bf16 parameters (bf16_optimizer.py); 16 bits
  /// is the ZeRO-1 optimizer at stage 1 and, at stage 0, 16-bit gradients with the optimizer
  /// replicated (FP16_Optimizer, or PyTorch's DDP). Throws std::invalid_argument outside 0-3.
  [[nodiscard]] static ZeroPolicy deepspeed(int stage, std::optional<bool> fp32_grad_accum, bool fp32_gradient_reduce);
  /// Megatron-LM's: main_grad in fp32 (at ZeRO-0 and with its distributed optimizer alike) unless
  /// set to 16 bits (fp16 training's default, --grad-reduce-in-bf16), the optimizer partitioned at
  /// stage 1 (its distributed optimizer); at stage 2 FSDP2 under the pipeline schedule
  /// (kFsdpUnderPipeline), fp32_grad_accum its reduce dtype (fp32 unless set to 16 bits: torchtitan's
  /// mixed_precision_reduce default, and Meta's "reduce-scatter gradients in FP32"). Throws
  /// std::invalid_argument outside 0-2.
  [[nodiscard]] static ZeroPolicy megatron(int stage, std::optional<bool> fp32_grad_accum);
  /// PyTorch's FSDP2 (fully_shard) without pipelines: everything partitioned (stage 3), the
  /// reduce-scatter in fp32 when `fp32_reduce` (MixedPrecisionPolicy.reduce_dtype; torchtitan's
  /// mixed_precision_reduce default), the gradient and parameter shards fp32 (kFsdp2).
  [[nodiscard]] static ZeroPolicy fsdp2(bool fp32_reduce);
  /// What stage `stage` (0-3) partitions, whatever the framework (tests, reports). Throws
  /// std::invalid_argument outside kStages.
  [[nodiscard]] static ZeroPartitioning partitioning_of_stage(int stage);
  /// The same for a reader, which has reported an out-of-range stage already: nullopt then.
  [[nodiscard]] static std::optional<ZeroPartitioning> partitioning_if_valid(int stage) {
    if (!kStages.contains(stage)) return std::nullopt;
    return partitioning_of_stage(stage);
  }

  /// The stage as named, for reports and labels only.
  [[nodiscard]] int stage() const { return stage_; }
  [[nodiscard]] OptimizerEngine engine() const { return engine_; }
  /// DeepSpeed's default for overlap_comm when a ds_config leaves it out: on for stage 3 only
  /// (runtime/zero/config.py: overlap_comm None becomes True for DeepSpeedZeroOptimizer_Stage3).
  [[nodiscard]] bool deepspeed_default_overlap_comm() const { return deepspeed_default_overlap_comm(partitioned_); }
  [[nodiscard]] static bool deepspeed_default_overlap_comm(const ZeroPartitioning& partitioned) {
    return partitioned.parameters;
  }
  /// What is partitioned over the shard group (for the optimizer, the data-parallel group).
  [[nodiscard]] const ZeroPartitioning& partitioned() const { return partitioned_; }

  // Parameters.
  /// Stage 3: each module's parameters are all-gathered before it runs and freed after.
  [[nodiscard]] bool gathers_parameters_before_use() const { return partitioned_.parameters; }
  /// The optimizer updated a share of parameters every rank holds whole: all-gather them after the step.
  [[nodiscard]] bool gathers_updated_parameters() const { return partitioned_.optimizer && !partitioned_.parameters; }

  // Gradients.
  /// Reduced every micro-batch into the rank's gradient partition (stages 2-3), rather than once
  /// at the accumulation boundary (FSDP2 under a pipeline schedule: once, after the last backward).
  [[nodiscard]] bool reduces_every_micro_batch() const {
    return partitioned_.gradients && !accumulates_whole_gradients();
  }
  /// The gradients partitioned, but accumulated whole in a transient buffer (in the reduce dtype)
  /// from the rank's first backward until their one reduce-scatter after its last
  /// (kFsdpUnderPipeline); the partition is fp32.
  [[nodiscard]] bool accumulates_whole_gradients() const { return engine_ == OptimizerEngine::kFsdpUnderPipeline; }
  /// FSDP2 (kFsdp2): one all-gather and one reduce-scatter per FSDP unit, the parameter and
  /// gradient shards in fp32 (the parameter shard is the optimizer's master copy).
  [[nodiscard]] bool fsdp2() const { return engine_ == OptimizerEngine::kFsdp2; }
  /// The bytes of that transient buffer for n gradients (0 when there is none).
  [[nodiscard]] std::int64_t whole_gradient_buffer_bytes(std::int64_t n) const {
    return accumulates_whole_gradients() ? n * (fp32_gradients_ ? kFp32Bytes : kBf16Bytes) : 0;
  }
  /// Reduced to the owners of their partition (a reduce-scatter) where the optimizer states are
  /// partitioned; BF16_Optimizer all-reduces (engine.py allreduce_gradients), as does a replicated
  /// optimizer.
  [[nodiscard]] bool reduce_to_owners() const { return partitioned_.optimizer && !bf16_optimizer(); }
  [[nodiscard]] CollectiveKind gradient_reduction() const {
    return reduce_to_owners() ? CollectiveKind::kReduceScatter : CollectiveKind::kAllReduce;
  }
  /// Reduced (and, at stages 0-1, accumulated) in fp32.
  [[nodiscard]] bool fp32_gradients() const { return fp32_gradients_; }
  /// n gradients in the communicator's unit, bf16 elements.
  [[nodiscard]] std::int64_t reduced_elements(std::int64_t n) const {
    return fp32_gradients_ ? n * kFp32Bytes / kBf16Bytes : n;
  }
  /// How the gradients are kept at stages 0-1 without offload (models/placement).
  [[nodiscard]] GradientBuffers gradient_buffers() const { return buffers_; }
  /// The name of the gradients' setup allocation at stages 0-1 without offload (and of FSDP2's
  /// fp32 partition under pipelines).
  [[nodiscard]] const char* gradient_tenant() const;

  // The optimizer.
  [[nodiscard]] bool bf16_optimizer() const { return engine_ == OptimizerEngine::kBf16Optimizer; }
  /// The parameters whose optimizer states a rank holds and updates: all it holds when the
  /// optimizer is replicated, its 1/shard_ranks share of the sharded ones otherwise.
  [[nodiscard]] std::int64_t updated_parameters(std::int64_t held, std::int64_t sharded, int shard_ranks) const {
    return models::updated_parameters(partitioned_, held, sharded, shard_ranks);
  }

 private:
  int stage_ = 0;
  OptimizerEngine engine_ = OptimizerEngine::kReplicated;
  ZeroPartitioning partitioned_;
  bool fp32_gradients_ = false;
  GradientBuffers buffers_ = GradientBuffers::kWorking;
};

}  // namespace offsim::models
