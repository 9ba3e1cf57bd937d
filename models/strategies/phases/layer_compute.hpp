#pragma once
// One transformer layer's compute on every simulated rank, split around the collectives its
// parallelism puts inside the layer:
// - tensor parallelism (Megatron's layer): `reductions` equal pieces, each followed by the
//   all-reduce of the micro-batch's activations inside the tensor-parallel group (after the
//   attention and after the MLP in forward; two in backward, four with full recomputation). The
//   equal split is an approximation: the attention and MLP halves differ. Under Transformer
//   Engine's userbuffers overlap (tp_overlap.hpp) a layer is one piece, and tp_reduction puts what
//   the overlapped GEMM + collective pairs add in place of the all-reduce.
// - expert parallelism (DeepSpeed-MoE): the MoE layer's compute around the all-to-alls that send
//   each routed token to its expert's rank and back: forward [attention and router, dispatch,
//   experts, combine]; backward [combine's gradient, experts, dispatch's gradient, the rest], after
//   the recomputed forward (all-to-alls included) with full recomputation. An all-to-all is costed
//   as a reduce-scatter of the same bytes. With tp > 1 too (the experts split over the
//   tensor-parallel group, Megatron-Core's expert_tensor_parallel_size = tp): the rest of the layer
//   in two halves around the attention's TP all-reduce, and a TP all-reduce after the experts'
//   row-parallel down-projection (before the combine; in backward after the combine's gradient).
// - Ulysses sequence parallelism (DeepSpeed's DistributedAttention, ALST's UlyssesSPAttentionHF;
//   models/strategies/ulysses.hpp): the layer's compute around the all-to-alls that turn its
//   s / sp tokens x all heads into s tokens x heads / sp for the attention core and back: forward
//   [projections before the attention, q, k, v all-to-alls (three, one after another), attention
//   core, context all-to-all, the rest]; backward the reverse [the rest's gradient, the context
//   gradient's all-to-all, attention core, dq, dk, dv all-to-alls, the projections before it],
//   after the recomputed forward (all-to-alls included) with full recomputation.
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "models/collectives/communicator.hpp"
#include "models/strategies/phases/rank_timeline.hpp"
#include "models/transformer/transformer.hpp"

namespace offsim::models {

/// A layer's tasks per rank: its first and last compute task, and its end (the last collective).
struct LayerTasks {
  std::vector<sim::TaskId> first, last_compute, end;
};

/// The layer's kernel times on one rank (layer_kernels.hpp's KernelTimes): the whole layer, and
/// the part that runs on the experts' routed tokens (0 when dense).
struct LayerTimes {
  sim::TimePs forward{0}, backward{0};
  sim::TimePs experts_forward{0}, experts_backward{0};
  // Ulysses: the attention core's part (KernelTimes::attention_fwd / attention_bwd) and the share
  // of the rest that runs before it (the projections feeding the attention).
  sim::TimePs attention_forward{0}, attention_backward{0};
  double before_attention = 0.0;
};

class LayerCompute {
 public:
  struct Parallelism {
    int tp = 1;
    int ep = 1;
    const CollectivePlan& tp_plan;         // the tensor-parallel group
    const CollectivePlan& dispatch_plan;   // the expert-parallel group (all-to-all)
    std::int64_t activation_elements = 0;  // each tensor-parallel all-reduce (b x s x h)
    std::int64_t dispatch_elements = 0;    // each all-to-all
    // Ulysses sequence parallelism over sp consecutive ranks (sp_plan: all-to-all), each rank's
    // buffer of the q, k, v and context all-to-alls in elements.
    int sp = 1;
    const CollectivePlan* sp_plan = nullptr;
    std::array<std::int64_t, 4> sp_elements{};
  };
  LayerCompute(RankTimeline& ranks, Communicator& comm, LayerTimes times, Recompute recompute, Parallelism parallel);

  /// The layer `name` (forward or backward, `flops` for the report) after each rank's `deps`.
  LayerTasks run(const std::string& name, const char* phase, bool forward, sim::Flops flops,
                 std::vector<std::vector<sim::TaskId>> deps);

 private:
  LayerTasks expert_parallel(const std::string& name, const char* phase, bool forward, sim::Flops flops,
                             std::vector<std::vector<sim::TaskId>> deps);
  // Defined in sequence_all_to_all.cpp.
  LayerTasks sequence_parallel(const std::string& name, const char* phase, bool forward, sim::Flops flops,
                               std::vector<std::vector<sim::TaskId>> deps);

  RankTimeline& ranks_;
  Communicator& comm_;
  const LayerTimes times_;
  const Recompute recompute_;
  const Parallelism parallel_;
};

/// A layer's TP all-reduce of `elements` over `comm` after `deps`, or, under Transformer Engine's
/// userbuffers overlap, in its place `overlap_extra`: what the overlapped GEMM + collective pairs
/// add to the layer's kernels (tp_overlap.hpp's TpOverlapTimes), a compute task of phase
/// communication with no collective task. Returns each member's last task.
[[nodiscard]] std::vector<sim::TaskId> tp_reduction(Communicator& comm, RankTimeline& timeline,
                                                    const std::vector<int>& members, const std::string& name,
                                                    std::optional<sim::TimePs> overlap_extra, std::int64_t elements,
                                                    const CollectivePlan& plan,
                                                    const std::vector<std::vector<sim::TaskId>>& deps);

}  // namespace offsim::models
