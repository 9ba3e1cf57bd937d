#pragma once
// The data-parallel step after a pipeline schedule, as Megatron-LM runs it (and DeepSpeed's
// optimizer under Megatron-DeepSpeed): BF16_Optimizer's fp32 accumulation where it runs, then each
// rank's gradients reduced over its data-parallel group after its last backward (no overlap with
// the cool-down), Adam on the GPU over the rank's optimizer share, and where the optimizer is
// partitioned the updated parameters all-gathered. Ranks of different pipeline stages hold
// different amounts: one collective per distinct size, each rank taking part in its own.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "models/collectives/communicator.hpp"
#include "models/strategies/phases/gradient_reduction.hpp"
#include "models/strategies/phases/iteration.hpp"
#include "models/strategies/phases/rank_timeline.hpp"
#include "models/strategies/phases/zero_policy.hpp"

namespace offsim::models {

class OverlappedDataParallel;

struct PipelineDataParallel {
  RankTimeline& ranks;
  Communicator& comm;
  const ZeroPolicy& policy;
  const CollectivePlan& group_plan;  // the data-parallel group
  int group_ranks = 1;               // its size
  const CostModel& costs;
  std::int64_t micro_batches = 1;
  std::vector<std::int64_t> params;  // per simulated rank: the parameters it holds
  std::vector<sim::TimePs> adam;     // per simulated rank: Adam over its optimizer share (kernel table)
  // Megatron-Core's overlapped DDP (OverlappedDataParallel): the gradients were reduced in buckets
  // during the schedule and, with overlap_param_gather, the updated parameters are gathered before
  // the next forwards; null: both after the schedule.
  OverlappedDataParallel* overlapped = nullptr;
  // Run on each rank's task after the gradient reduction, before the optimizer (Megatron's tied
  // embedding all-reduce, phases/tied_embedding.hpp); may move them on. Empty: nothing.
  std::function<void(std::vector<sim::TaskId>&)> after_reduction;
  // Bytes per parameter a rank moves over the iteration to accumulate its micro-batches' gradients
  // outside the GEMMs (transformer/precision.hpp; 0: fused or nothing to add), run back to back
  // after the rank's last operation like BF16_Optimizer's additions.
  std::int64_t unfused_accumulation_bytes_per_param = 0;
};

/// Megatron-Core's DistributedDataParallel with overlap_grad_reduce and overlap_param_gather
/// (megatron/core/distributed/distributed_data_parallel.py and param_and_grad_buffer.py). Each
/// model chunk of a rank is a DDP of its own whose gradient buffer is split into buckets in
/// backward order (_compute_default_per_buffer_param_layout: parameters in reverse, a bucket closed
/// once it holds bucket_size elements); only the first chunk of the first pipeline stage is
/// bucketed (training.py: bucketing disabled for chunks after the first and for pp ranks > 0), the
/// others are one bucket. overlap_grad_reduce: a bucket's reduce-scatter (distributed optimizer) or
/// all-reduce starts once its gradients of the last micro-batch exist (register_grad_ready with
/// is_last_microbatch), the buckets one after another on the data-parallel stream, and the
/// optimizer waits for all (finish_grad_sync). overlap_param_gather: the parameters a step updated
/// are all-gathered per bucket before the next iteration's forwards use them (the forward
/// pre-hooks' finish_param_sync), instead of right after the step: of one iteration in the steady
/// state, the previous step's gathers run on the data-parallel stream in forward order and the
/// first micro-batch's forward of each layer waits for its bucket. With align_param_gather every
/// chunk's gathers are issued at the iteration's start (schedules.py's param_sync_func, issued
/// ahead of each chunk); without it (Megatron-Core's default) a chunk's first bucket is issued only
/// when its first forward reaches it (finish_param_sync dispatches a not-yet-dispatched bucket), the
/// chunk's next buckets one after another behind it.
class OverlappedDataParallel {
 public:
  /// A simulated rank's model chunks: per chunk (in model order) the elements of each piece of
  /// work its backward produces gradients in, in backward order; `bucketed`: the first chunk is
  /// split into buckets of bucket_size elements (the first pipeline stage).
  struct RankChunks {
    std::vector<std::vector<std::int64_t>> pieces;
    bool bucketed = false;
  };
  struct Options {
    bool overlap_grad_reduce = false;
    bool overlap_param_gather = false;
    bool align_param_gather = false;
    std::int64_t bucket_size = 0;
    std::int64_t micro_batches = 1;  // the last one's backward produces what is reduced
  };
  OverlappedDataParallel(RankTimeline& ranks, Communicator& comm, const ZeroPolicy& policy,
                         const CollectivePlan& group_plan, int group_ranks, std::vector<RankChunks> chunks,
                         Options options);

  [[nodiscard]] const Options& options() const { return options_; }
  /// Rank s's first forward of `chunk` may start after `entry` (where its pre-hook runs).
  void forward_chunk(int s, int chunk, sim::TaskId entry);
  /// Rank s's first forward of `chunk` starts its k-th piece in `task`: it waits for its bucket's gather.
  void forward_piece(int s, int chunk, std::size_t k, sim::TaskId task);
  /// overlap_param_gather, once the schedule is built: the gathers after each rank's `ready`
  /// (and, unaligned, each chunk's first forward), and the forward pieces waiting for them.
  void gather(const std::vector<sim::TaskId>& ready);
  /// Rank s's last backward of `chunk` produced its k-th piece's gradients after `done`.
  void backward_piece(int s, int chunk, std::size_t k, sim::TaskId done);
  /// overlap_grad_reduce: the buckets reduced as their gradients exist; returns each rank's last
  /// reduction (ranks that reduce nothing: their `last`).
  [[nodiscard]] std::vector<sim::TaskId> reduce(const std::vector<sim::TaskId>& last);

 private:
  // Rank s's gradient item of chunk c's k-th backward piece: the chunks' pieces in the order the
  // schedule's last backwards produce them (the last chunk first).
  [[nodiscard]] std::size_t item_of(int s, int chunk, std::size_t k) const;
  [[nodiscard]] std::size_t bucket_of(int s, std::size_t item) const;

  RankTimeline& ranks_;
  Communicator& comm_;
  const ZeroPolicy& policy_;
  const CollectivePlan& group_plan_;
  const int group_ranks_;
  const std::vector<RankChunks> chunks_;
  const Options options_;
  HostThreads host_threads_;  // GradientReduction's (Megatron's buckets launch no host work)
  // Per rank and chunk: its first item and whether each piece is an item of its own (bucketed).
  std::vector<std::vector<std::pair<std::size_t, bool>>> first_item_;
  std::vector<std::vector<GradientReduction::Item>> items_;              // per rank
  std::vector<std::vector<GradientReduction::Bucket>> buckets_;          // per rank
  std::vector<std::vector<sim::TaskId>> ready_;                          // per rank, per item
  std::vector<std::vector<int>> chunk_of_bucket_;                        // per rank, per bucket
  std::vector<std::vector<sim::TaskId>> chunk_entry_;                    // per rank, per chunk
  std::vector<std::vector<std::pair<std::size_t, sim::TaskId>>> gated_;  // per rank: (bucket, forward piece)
  // The ranks with the same items, reduced and gathered together (by their first rank).
  std::vector<std::vector<int>> groups_;
};

/// FSDP2 under the pipeline schedule (ZeroPolicy::accumulates_whole_gradients): simulated rank r's
/// first backward (`tag`) allocates the whole gradient buffer of its `held` parameters after `after`,
/// which pipeline_data_parallel_step frees after the reduce-scatter. Returns `after` otherwise.
sim::TaskId allocate_whole_gradients(RankTimeline& ranks, int r, const ZeroPolicy& policy, std::int64_t held,
                                     const std::string& tag, sim::TaskId after);

/// What the report says of FSDP2 under the pipeline schedule (allocate_whole_gradients and the step).
[[nodiscard]] std::string fsdp_under_pipeline_approximation();

/// The step after each simulated rank's `last` task (which BF16_Optimizer's accumulation
/// advances); rank 0's phases go to `spans`. Returns each rank's last task.
[[nodiscard]] std::vector<sim::TaskId> pipeline_data_parallel_step(const PipelineDataParallel& step,
                                                                   std::vector<sim::TaskId>& last,
                                                                   std::vector<PhaseSpan>& spans);

}  // namespace offsim::models
