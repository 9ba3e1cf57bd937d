#include "models/strategies/phases/gradient_reduction.hpp"

#include <fmt/compile.h>
#include <fmt/format.h>

namespace offsim::models {

using sim::TaskId;
using sim::TimePs;

GradientReduction::GradientReduction(RankTimeline& ranks, Communicator& comm, const ZeroPolicy& policy,
                                     std::vector<Item> items, Plans plans, Options options, HostThreads& host_threads,
                                     HostOffload* offload)
    : ranks_(ranks),
      comm_(comm),
      policy_(policy),
      items_(std::move(items)),
      plans_(plans),
      options_(std::move(options)),
      host_threads_(host_threads),
      offload_(offload),
      buckets_(buckets_of(items_, options_.bucket_elements)),
      ready_(items_.size()),
      backward_tasks_(static_cast<std::size_t>(ranks.size())) {}

std::vector<GradientReduction::Bucket> GradientReduction::buckets_of(const std::vector<Item>& items,
                                                                     std::int64_t bucket_elements) {
  std::vector<Bucket> buckets;
  Bucket open;
  for (std::size_t i = 0; i < items.size(); ++i) {
    open.elements += items[i].elements;
    open.expert_elements += items[i].expert_elements;
    open.tensors += items[i].tensors;
    if (open.elements + open.expert_elements >= bucket_elements || items[i].closes_bucket || i + 1 == items.size()) {
      open.last_item = i;
      buckets.push_back(open);
      open = Bucket{};
    }
  }
  return buckets;
}

void GradientReduction::begin_micro_batch() {
  for (auto& tasks : ready_) tasks.assign(static_cast<std::size_t>(ranks_.size()), TaskId{});
  for (auto& tasks : backward_tasks_) tasks.clear();
  host_launches_.clear();
}

void GradientReduction::produced(std::size_t item, int r, TaskId ready, TaskId first) {
  ready_[item][static_cast<std::size_t>(r)] = ready;
  backward_tasks_[static_cast<std::size_t>(r)].push_back(first);
}

// Stage 3 with host launch costs: once item `item` closes a bucket, the rank's host thread launches
// the bucket's per-tensor reduce-scatters (from the backward hooks, before the next module's
// fetch: built here, in program order, so the host thread's work stays in order).
void GradientReduction::item_done(std::size_t item, const std::string& mbs) {
  if (policy_.engine() != OptimizerEngine::kZeroStage3 || !options_.host_cost) return;
  const std::size_t b = host_launches_.size();  // the next bucket to close
  if (b >= buckets_.size() || buckets_[b].last_item != item) return;
  const TimePs launch{options_.host_cost->reduce_scatter.at(plans_.partitioning.shard_ranks).ps * buckets_[b].tensors};
  std::vector<TaskId> host(static_cast<std::size_t>(ranks_.size()));
  for (int r = 0; r < ranks_.size(); ++r) {
    host[r] = host_threads_.work(r, fmt::format(FMT_COMPILE("{}.bucket{}.host.reduce_scatter"), mbs, b), launch,
                                 {ready_[item][static_cast<std::size_t>(r)]});
  }
  host_launches_.push_back(std::move(host));
}

void GradientReduction::reduce(std::int64_t mb, bool boundary, const std::vector<TaskId>& last_backward) {
  const int sims = ranks_.size();
  const CollectiveKind reduction = policy_.gradient_reduction();
  const Partitioning& part = plans_.partitioning;
  for (std::size_t b = 0; b < buckets_.size(); ++b) {
    const Bucket& bucket = buckets_[b];
    const std::vector<TaskId>& ready_on_rank = ready_[bucket.last_item];
    std::vector<std::vector<TaskId>> deps(static_cast<std::size_t>(sims));
    for (int r = 0; r < sims; ++r) {
      if (!options_.participants.empty() && !options_.participants[static_cast<std::size_t>(r)]) continue;
      // BF16_Optimizer reduces after its accumulation, whatever overlap_comm says.
      deps[r] = {options_.overlap_comm && !policy_.bf16_optimizer() ? ready_on_rank[r] : last_backward[r]};
      if (!stream_.empty()) deps[r].push_back(stream_[r]);
    }
    const std::string name = fmt::format(FMT_COMPILE("{}mb{}.bucket{}"), options_.name_prefix, mb, b);
    if (b < host_launches_.size()) {
      // The bucket's launches (item_done): the reduction waits for them, and so does the next
      // backward kernel, which the same host thread launches after them.
      for (int r = 0; r < sims; ++r) {
        deps[r].push_back(host_launches_[b][r]);
        const std::size_t next = bucket.last_item + 1;
        if (options_.overlap_comm && next < backward_tasks_[r].size()) {
          ranks_.graph().add_dependency(backward_tasks_[r][next], host_launches_[b][r]);
        }
      }
    }
    if (bucket.expert_elements > 0) {
      // Expert parallelism: the bucket's expert gradients over the experts' data-parallel group,
      // then the rest over all ranks.
      deps = ranks_.per_rank(comm_.add(reduction, name + ".experts", policy_.reduced_elements(bucket.expert_elements),
                                       plans_.experts, deps, options_.participants));
    }
    if (!policy_.gathers_parameters_before_use()) {
      stream_ = comm_.add(reduction, name, policy_.reduced_elements(bucket.elements), plans_.replicas, deps,
                          options_.participants);
    } else {
      // A quantized reduction (qgZ) sends its own format whatever the gradients' dtype.
      const std::int64_t elements =
          part.gradient_reduce.quantization.quantized() ? bucket.elements : policy_.reduced_elements(bucket.elements);
      stream_ = comm_.add(reduction, name, elements, part.gradient_reduce, deps);
      if (boundary && options_.shard_ranks < options_.replicas) {
        // The shard groups are replicas: all-reduce the reduced partition across them (MiCS).
        stream_ = comm_.add(CollectiveKind::kAllReduce, name + ".replicas",
                            policy_.reduced_elements(partition(bucket.elements)), part.replica_reduce, stream_);
      }
    }
    if (offload_) {
      // The rank's partition of the bucket: its share of the rest over the shard group, and of its
      // experts' gradients over their own data-parallel group (expert parallelism).
      int expert_group = 1;
      for (const auto& band : plans_.experts.stages) expert_group *= band.group();
      const std::int64_t experts = (bucket.expert_elements + expert_group - 1) / expert_group;
      offload_->offload_bucket(mb, boundary, name, partition(bucket.elements) + experts, bucket.last_item + 1, stream_,
                               backward_tasks_, options_.overlap_comm);
    }
  }
}

}  // namespace offsim::models
