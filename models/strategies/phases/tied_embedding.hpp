#pragma once
// The tied word embedding's gradient all-reduce between the first and the last pipeline stage.
// When the input embedding and the output head share one weight (ModelSpec::tied_embeddings, as
// GPT-2/GPT-3 style models do; Llama's untie_embeddings_and_output_weights does not) and pp > 1,
// the first stage's embedding and the last stage's head each hold a copy of it (V / tp x h per TP
// rank, the vocabulary split over the TP group), and after the schedule the two copies' gradients
// are summed over the two ranks so that both take the same optimizer step:
// - Megatron-LM (read at v2.5, e269e200 of 2021-08-10, the SC21 code line): training.py
//   train_step, after the data-parallel all-reduce (allreduce_gradients), "All-reduce
//   word_embeddings' grad across first and last stages": torch.distributed.all_reduce(main_grad,
//   group=mpu.get_embedding_group()) on the first and last stage (ignore_virtual: model[0] and
//   model[-1] under the interleaved schedule). Megatron-Core (read at core_v0.12.0):
//   distributed/finalize_model_grads.py finalize_model_grads runs finish_grad_sync (the
//   data-parallel reduction), then _allreduce_embedding_grads -> _allreduce_word_embedding_grads,
//   the same all-reduce of the main_grad over the embedding group when
//   share_embeddings_and_output_weights; the optimizer step follows. The main_grad's dtype is the
//   gradients' (fp32 for bf16 training unless grad_reduce_in_bf16 / fp16's 16-bit main_grad).
// - DeepSpeed's pipeline engine: ReduceTiedGrads (deepspeed_pipeline.hpp), before ReduceGrads.
// Both are costed the same way: a two-rank ring of flows on the pair's route.
#include <functional>
#include <string>
#include <vector>

#include "models/strategies/phases/rank_timeline.hpp"
#include "models/transformer/transformer.hpp"
#include "sim/core/units.hpp"

namespace offsim::models {

/// A first-stage rank and its last-stage counterpart (simulated indices) holding a tied weight.
struct TiedPair {
  int first = 0;
  int last = 0;
};

/// The embedding group's pairs among the simulated ranks: each simulated rank of pipeline stage 0
/// with its last-stage counterpart, rank + stage_ranks x (pp - 1) (ranks r = t + tp x (c + cp x
/// (stage + pp x replica)), stage_ranks = tp x cp), where that one is simulated too. None with pp 1.
[[nodiscard]] std::vector<TiedPair> embedding_group_pairs(const RankTimeline& timeline, int stage_ranks, int pp);

/// The word embedding's gradient on one TP rank: ceil(V / tp) x h elements of `gradient_bytes`
/// each (Megatron's VocabParallelEmbedding splits the vocabulary over the TP group).
[[nodiscard]] sim::Bytes tied_embedding_gradient_bytes(const ModelSpec& m, int tp, std::int64_t gradient_bytes);

/// The tied weight's gradient (`bytes` per rank) all-reduced within each pair after both ranks'
/// `last` task, as a two-rank ring: each rank sends the other half the buffer twice (reduce-scatter,
/// all-gather), as flows on the pair's routes (route(from, to), simulated indices); no collective
/// efficiency table is applied, an approximation. `last`: each simulated rank's last task, moved
/// past the all-reduce for the pairs' ranks.
void all_reduce_tied_gradients(RankTimeline& timeline, const std::vector<TiedPair>& pairs, sim::Bytes bytes,
                               const std::function<std::vector<sim::ConstraintId>(int, int)>& route,
                               std::vector<sim::TaskId>& last);

/// The report's note on how Megatron's all-reduce of the tied embedding's gradient is costed.
[[nodiscard]] std::string tied_embedding_approximation();

}  // namespace offsim::models
