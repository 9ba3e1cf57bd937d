#pragma once
// DeepSpeed-Ulysses sequence parallelism under ZeRO data parallelism, as DeepSpeed runs it
// (deepspeed/sequence/layer.py, DistributedAttention and _SeqAllToAll; ALST's UlyssesSPAttentionHF
// in deepspeed/runtime/sequence_parallel/ulysses_sp.py; Jacobs et al., arXiv 2309.14509):
// - The ranks form groups of sp consecutive ranks (DeepSpeed's mesh (data_parallel,
//   sequence_parallel), the last dimension fastest). Each rank of a group holds s / sp tokens of
//   every sequence of the group's micro-batch: everything outside attention (projections, MLP,
//   norms, embedding, head and loss, stored activations) is that of s / sp tokens
//   (context_parallel_share).
// - Attention: before the core, q, k and v go through one all-to-all each (three calls, one after
//   another: layer.py's "TODO Merge three alltoall calls into one"; ulysses_sp.py's
//   combine_sequence per tensor) from [s/sp, b, heads, d] to [s, b, heads/sp, d]; the core runs
//   over all s tokens with heads / sp (and kv_heads / sp) heads; the context goes back by a fourth
//   all-to-all [s, b, heads/sp, d] -> [s/sp, b, heads, d]. Backward runs the same four exchanges on
//   the gradients in reverse order. Each all-to-all sends (sp - 1) / sp of a rank's buffer of
//   b x s/sp x width bf16 elements, the paper's 4Nh/P per link for a layer's four (section 3.2).
// - ZeRO's group is all dp x sp ranks (DeepSpeed's seq_data_parallel_group): gradients are
//   reduced and states partitioned over all ranks, as without sequence parallelism.
// - Under sequence parallelism DeepSpeed reduces gradients in seq_parallel_comm_data_type (fp32 by
//   default; engine.py), read by the ds_config reader.
#include <array>
#include <cstdint>
#include <string>

#include "models/collectives/plan.hpp"
#include "models/strategies/layer_kernels.hpp"
#include "models/strategies/phases/iteration.hpp"
#include "models/strategies/phases/layer_compute.hpp"
#include "models/transformer/transformer.hpp"

namespace offsim::models {

/// The key/value heads each Ulysses all-to-all carries: the model's, or sp where they are fewer and
/// divide sp (ALST's UlyssesSPAttentionHF repeats each kv_replication_factor = sp / kv_heads times
/// before the exchange, so that every rank gets one).
[[nodiscard]] std::int64_t ulysses_kv_heads(const ModelSpec& m, int sp);

/// Why the model cannot run Ulysses over sp ranks (empty when it can): its heads and the sequence
/// must divide by sp, and its key/value heads too, or sp by them (ulysses_kv_heads).
[[nodiscard]] std::string ulysses_unfit(const ModelSpec& m, int sp);

/// Each rank's buffer of a layer's four all-to-alls, in elements (q, k, v, context): b x s/sp x
/// width, widths heads x d, kv x d, kv x d_v and heads x d_v (kv: ulysses_kv_heads).
[[nodiscard]] std::array<std::int64_t, 4> ulysses_exchange_elements(const ModelSpec& m, std::int64_t micro_batch,
                                                                    int sp);

/// What one rank of a Ulysses group of sp sees. With sp = 1 every member gives what the data-parallel
/// builder computes without sequence parallelism.
class UlyssesShare {
 public:
  UlyssesShare(const IterationInputs& full, int sp);
  UlyssesShare(const UlyssesShare&) = delete;
  UlyssesShare& operator=(const UlyssesShare&) = delete;

  /// The inputs of one rank: the model with s / sp tokens per sequence.
  [[nodiscard]] const IterationInputs& inputs() const { return sp_ > 1 ? share_ : full_; }
  /// kernel_times of the rank, its attention core over s tokens with heads / sp.
  [[nodiscard]] KernelTimes kernel_times(std::int64_t params_on_rank, std::int64_t tp, bool sequence_parallel,
                                         std::int64_t ep) const;
  [[nodiscard]] LayerTimes layer_times(const KernelTimes& k) const;
  [[nodiscard]] LayerCompute::Parallelism parallelism(int tp, int ep, const CollectivePlan& tp_plan,
                                                      const CollectivePlan& dispatch_plan,
                                                      std::int64_t activation_elements,
                                                      std::int64_t dispatch_elements) const;
  /// Bytes kept per layer: those of s / sp tokens, the attention's s x s terms (without flash
  /// attention) over s tokens with heads / sp.
  [[nodiscard]] sim::Bytes stored_activations(std::int64_t tp, bool sequence_parallel) const;
  /// A rank's layer FLOPs: the GEMMs of s / sp tokens, 1 / sp of the whole sequence's attention.
  [[nodiscard]] LayerWork layer_forward() const;
  /// After the build (sp > 1): the work figures of dp = ranks / sp replicas of sp devices each,
  /// and the report's statement of the model.
  void finish(BuiltIteration& out, int ranks) const;

 private:
  const IterationInputs& full_;
  const int sp_;
  ModelSpec model_;  // s / sp tokens per sequence
  IterationInputs share_;
  CollectivePlan plan_;
  double before_attention_ = 0.0;
};

}  // namespace offsim::models
