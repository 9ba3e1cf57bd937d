#pragma once
// Data-parallel gradient reduction in buckets, as DeepSpeed's engines run it, as a phase any
// schedule can use. Backward produces gradient items (a step's parameters) in order; consecutive
// items fill a bucket until it holds at least reduce_bucket_elements; each bucket is reduced once
// its last item exists (overlap_comm) or after the backward, one bucket after another on the
// rank's reduce stream: to the owners of its partition (DeepSpeed's ZeRO optimizer,
// stage_1_and_2.py average_tensor: one reduce per owner's slice of a bucket, costed as a
// reduce-scatter) or to all (a replicated optimizer, and BF16_Optimizer: engine.py
// allreduce_gradients, buffered_allreduce_fallback) as the ZeroPolicy says, experts' gradients over their own
// data-parallel group first, at stage 3 over the partitioning's group (qgZ's quantized format, MiCS's all-reduce across
// shard groups at the boundary). Stage 3 with host launch costs launches each bucket's per-tensor reduce-scatters from
// the rank's host thread, which holds back the next backward kernel. With optimizer offload each reduced bucket then
// goes to the host (HostOffload::offload_bucket).
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "models/collectives/communicator.hpp"
#include "models/strategies/phases/host_offload.hpp"
#include "models/strategies/phases/parameter_gather.hpp"
#include "models/strategies/phases/rank_timeline.hpp"
#include "models/strategies/phases/zero_policy.hpp"

namespace offsim::models {

class GradientReduction {
 public:
  /// A gradient-producing step of backward.
  struct Item {
    std::int64_t elements = 0;
    std::int64_t expert_elements = 0;  // expert parallelism: reduced over the expert-data-parallel group
    std::int64_t tensors = 0;          // parameter tensors (DeepSpeed's early stage 3 reduces each apart)
    // The bucket ends with this item whatever its size (Megatron-Core: each model chunk is a DDP
    // of its own, whose buckets never reach into another chunk).
    bool closes_bucket = false;
  };
  struct Plans {
    const CollectivePlan& replicas;    // below stage 3: across the replicas
    const CollectivePlan& experts;     // the experts' gradients, over their data-parallel group
    const Partitioning& partitioning;  // stage 3: its gradient_reduce and replica_reduce
  };
  struct Options {
    std::int64_t bucket_elements = 0;
    bool overlap_comm = false;
    int shard_ranks = 1;                     // the ranks a partition is shared over
    int replicas = 1;                        // the data-parallel replicas
    std::optional<FetchHostCost> host_cost;  // stage 3's launch costs (zero3_host)
    // The simulated ranks taking part (empty: all): ranks of other pipeline stages hold other
    // gradients and reduce them in a reduction of their own (Communicator::add's participants).
    std::vector<bool> participants;
    std::string name_prefix;  // before each bucket's collective name ("mb<n>.bucket<b>")
  };
  /// Consecutive items closed into a bucket once it holds bucket_elements (or an item closes it).
  struct Bucket {
    std::size_t last_item = 0;
    std::int64_t elements = 0, expert_elements = 0, tensors = 0;
  };
  [[nodiscard]] static std::vector<Bucket> buckets_of(const std::vector<Item>& items, std::int64_t bucket_elements);

  /// `items` in the order backward produces them.
  GradientReduction(RankTimeline& ranks, Communicator& comm, const ZeroPolicy& policy, std::vector<Item> items,
                    Plans plans, Options options, HostThreads& host_threads, HostOffload* offload);

  /// A new micro-batch's backward begins: no item is produced yet.
  void begin_micro_batch();
  /// On rank r, item `item`'s gradients exist after `ready`; `first` is the backward step's first
  /// kernel (what a blocking step of the reduction holds back). Items are produced in order, on
  /// every participating rank.
  void produced(std::size_t item, int r, sim::TaskId ready, sim::TaskId first);
  /// Every rank has produced `item` (`mbs`: the micro-batch's name): if it closes a bucket, stage
  /// 3's host thread launches the bucket's reduce-scatters.
  void item_done(std::size_t item, const std::string& mbs);
  /// The micro-batch's buckets reduced (each rank's backward ends at last_backward[r]).
  void reduce(std::int64_t micro_batch, bool boundary, const std::vector<sim::TaskId>& last_backward);
  /// Each rank's reduce stream: its last reduction (empty before the first).
  [[nodiscard]] const std::vector<sim::TaskId>& stream() const { return stream_; }

 private:
  [[nodiscard]] std::int64_t partition(std::int64_t n) const {
    return (n + options_.shard_ranks - 1) / options_.shard_ranks;
  }

  RankTimeline& ranks_;
  Communicator& comm_;
  const ZeroPolicy policy_;
  const std::vector<Item> items_;
  const Plans plans_;
  const Options options_;
  HostThreads& host_threads_;
  HostOffload* const offload_;
  std::vector<Bucket> buckets_;
  // This micro-batch: each item's ready task per rank; each rank's backward steps' first kernels.
  std::vector<std::vector<sim::TaskId>> ready_;
  std::vector<std::vector<sim::TaskId>> backward_tasks_;
  std::vector<std::vector<sim::TaskId>> host_launches_;  // per closed bucket, per rank
  std::vector<sim::TaskId> stream_;
};

}  // namespace offsim::models
