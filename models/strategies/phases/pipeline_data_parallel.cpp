#include "models/strategies/phases/pipeline_data_parallel.hpp"

#include <fmt/compile.h>
#include <fmt/format.h>

#include <map>
#include <stdexcept>

#include "models/strategies/phases/steps.hpp"
#include "models/transformer/phases.hpp"

namespace offsim::models {

using sim::TaskId;

namespace {

// The simulated ranks by their number of parameters (which differs between stages).
std::map<std::int64_t, std::vector<int>> ranks_by_size(const std::vector<std::int64_t>& params) {
  std::map<std::int64_t, std::vector<int>> by_size;
  for (std::size_t s = 0; s < params.size(); ++s) by_size[params[s]].push_back(static_cast<int>(s));
  return by_size;
}

// One collective per distinct size over the group, each rank in its own; returns each rank's end.
std::vector<TaskId> by_size(const PipelineDataParallel& p, CollectiveKind kind, const char* name,
                            const std::vector<TaskId>& after, bool reduce) {
  const int sims = p.ranks.size();
  std::vector<TaskId> done = after;
  for (const auto& [n, members] : ranks_by_size(p.params)) {
    std::vector<bool> taking_part(static_cast<std::size_t>(sims), false);
    for (const int s : members) taking_part[s] = true;
    // Gradients in the dtype they accumulate in (fp32: Megatron's main_grad, BF16_Optimizer's
    // buffer); parameters in bf16.
    const auto result = p.comm.add(kind, fmt::format(FMT_COMPILE("dp.{}.{}"), name, n),
                                   reduce ? p.policy.reduced_elements(n) : n, p.group_plan, after, taking_part);
    for (const int s : members) done[s] = result[s];
  }
  return done;
}

constexpr const char* kWholeGradients = "gradients (whole, until the reduce-scatter)";

}  // namespace

TaskId allocate_whole_gradients(RankTimeline& ranks, int r, const ZeroPolicy& policy, std::int64_t held,
                                const std::string& tag, TaskId after) {
  if (!policy.accumulates_whole_gradients()) return after;
  return ranks.alloc(r, tag + ".alloc.gradients", "setup", kWholeGradients,
                     sim::Bytes{policy.whole_gradient_buffer_bytes(held)}, {after});
}

std::vector<TaskId> pipeline_data_parallel_step(const PipelineDataParallel& p, std::vector<TaskId>& last,
                                                std::vector<PhaseSpan>& spans) {
  const int sims = p.ranks.size();
  if (p.policy.bf16_optimizer()) {
    // BF16_Optimizer adds each micro-batch's bf16 gradients into its fp32 buffer (precision.hpp).
    // DeepSpeed does it after every micro-batch's backward; here the micro-batches' additions run
    // back to back after the rank's last operation, before the gradient all-reduce: the same work
    // on the rank, placed after the schedule instead of inside it.
    for (int s = 0; s < sims; ++s) {
      const TaskId before = last[s];
      last[s] = accumulate_fp32_gradients(p.ranks, s, "accumulate_fp32_gradients", p.costs, p.params[s],
                                          p.micro_batches, last[s]);
      if (p.ranks.slot(s).rank == 0) spans.push_back({phase::kOptimizer, before, last[s], true});
    }
  }
  if (p.unfused_accumulation_bytes_per_param > 0) {
    // The micro-batches' gradients added outside the weight-gradient GEMMs (Megatron's main_grad
    // hook, autograd's AccumulateGrad), after the schedule as above.
    for (int s = 0; s < sims; ++s) {
      const TaskId before = last[s];
      const sim::Bytes bytes{p.params[s] * p.unfused_accumulation_bytes_per_param};
      last[s] = p.ranks.memory_pass(s, "accumulate_gradients", phase::kOptimizer, p.costs.memory_bound_time(bytes),
                                    bytes, "memory", {last[s]});
      if (p.ranks.slot(s).rank == 0) spans.push_back({phase::kOptimizer, before, last[s], true});
    }
  }
  // The gradients reduced to their owners where the optimizer is partitioned (ZeroPolicy); with
  // Megatron-Core's overlap_grad_reduce in buckets during the schedule.
  const bool overlapped_reduction = p.overlapped != nullptr && p.overlapped->options().overlap_grad_reduce;
  std::vector<TaskId> reduced = p.group_ranks <= 1 ? last
                                : overlapped_reduction
                                    ? p.overlapped->reduce(last)
                                    : by_size(p, p.policy.gradient_reduction(), "gradients", last, true);
  if (p.after_reduction) p.after_reduction(reduced);
  std::vector<TaskId> end(static_cast<std::size_t>(sims));
  for (int s = 0; s < sims; ++s) {
    if (p.policy.accumulates_whole_gradients()) {  // reduce-scattered into the partition: the buffer goes
      reduced[s] = p.ranks.release(s, "free.gradients", "memory", kWholeGradients,
                                   sim::Bytes{p.policy.whole_gradient_buffer_bytes(p.params[s])}, {reduced[s]});
    }
    const std::int64_t updated = p.policy.updated_parameters(p.params[s], p.params[s], p.group_ranks);
    end[s] = gpu_optimizer_step(p.ranks, s, p.policy, p.costs, p.params[s], updated, p.adam[s], reduced[s]).last;
    if (p.ranks.slot(s).rank == 0) {
      spans.push_back({phase::kGradientReduction, last[s], reduced[s], true});
      spans.push_back({phase::kOptimizer, reduced[s], end[s], true});
    }
  }
  if (!p.policy.gathers_updated_parameters() || p.group_ranks <= 1) return end;
  // overlap_param_gather: gathered before the next iteration's forwards (OverlappedDataParallel::gather_ahead).
  if (p.overlapped != nullptr && p.overlapped->options().overlap_param_gather) return end;
  const std::vector<TaskId> gathered = by_size(p, CollectiveKind::kAllGather, "parameters", end, false);
  for (int s = 0; s < sims; ++s) {
    if (p.ranks.slot(s).rank == 0) spans.push_back({phase::kParameterAllgather, end[s], gathered[s], true});
  }
  return gathered;
}

OverlappedDataParallel::OverlappedDataParallel(RankTimeline& ranks, Communicator& comm, const ZeroPolicy& policy,
                                               const CollectivePlan& group_plan, int group_ranks,
                                               std::vector<RankChunks> chunks, Options options)
    : ranks_(ranks),
      comm_(comm),
      policy_(policy),
      group_plan_(group_plan),
      group_ranks_(group_ranks),
      chunks_(std::move(chunks)),
      options_(options),
      host_threads_(ranks) {
  // distributed_data_parallel.py: overlap_param_gather only with the distributed optimizer
  // (arguments.py asserts overlap_grad_reduce with it too; the readers check both).
  if (options_.overlap_param_gather && !policy_.gathers_updated_parameters()) {
    throw std::invalid_argument("overlap_param_gather needs the distributed optimizer (zero_stage 1)");
  }
  const int sims = ranks_.size();
  first_item_.resize(static_cast<std::size_t>(sims));
  items_.resize(static_cast<std::size_t>(sims));
  buckets_.resize(static_cast<std::size_t>(sims));
  ready_.resize(static_cast<std::size_t>(sims));
  chunk_of_bucket_.resize(static_cast<std::size_t>(sims));
  chunk_entry_.resize(static_cast<std::size_t>(sims));
  gated_.resize(static_cast<std::size_t>(sims));
  std::map<std::vector<std::pair<std::int64_t, bool>>, std::size_t> group_of;
  for (int s = 0; s < sims; ++s) {
    const RankChunks& rc = chunks_[static_cast<std::size_t>(s)];
    auto& items = items_[static_cast<std::size_t>(s)];
    first_item_[s].resize(rc.pieces.size());
    // The chunks in the order their last backwards end: the last chunk first (schedules.py's
    // cool-down runs the chunks from the last to the first).
    for (std::size_t c = rc.pieces.size(); c-- > 0;) {
      const bool split = rc.bucketed && c == 0;
      first_item_[s][c] = {items.size(), split};
      std::int64_t chunk_elements = 0;
      for (const std::int64_t n : rc.pieces[c]) {
        if (split) items.push_back({n, 0, 1, false});
        chunk_elements += n;
      }
      if (!split) items.push_back({chunk_elements, 0, 1, false});
      items.back().closes_bucket = true;
    }
    buckets_[s] = GradientReduction::buckets_of(items, options_.bucket_size);
    for (const auto& bucket : buckets_[s]) {
      int chunk = 0;  // the chunk whose items the bucket ends in (a bucket never spans chunks)
      while (chunk + 1 < static_cast<int>(rc.pieces.size()) && first_item_[s][chunk].first > bucket.last_item) ++chunk;
      chunk_of_bucket_[s].push_back(chunk);
    }
    chunk_entry_[s].resize(rc.pieces.size());
    ready_[s].resize(items.size());
    std::vector<std::pair<std::int64_t, bool>> key;
    for (const auto& item : items) key.emplace_back(item.elements, item.closes_bucket);
    const auto [it, added] = group_of.try_emplace(std::move(key), groups_.size());
    if (added) groups_.emplace_back();
    groups_[it->second].push_back(s);
  }
}

std::size_t OverlappedDataParallel::item_of(int s, int chunk, std::size_t k) const {
  const auto [first, split] = first_item_[static_cast<std::size_t>(s)][static_cast<std::size_t>(chunk)];
  return split ? first + k : first;
}

std::size_t OverlappedDataParallel::bucket_of(int s, std::size_t item) const {
  const auto& buckets = buckets_[static_cast<std::size_t>(s)];
  std::size_t b = 0;
  while (buckets[b].last_item < item) ++b;
  return b;
}

void OverlappedDataParallel::forward_chunk(int s, int chunk, TaskId entry) {
  chunk_entry_[static_cast<std::size_t>(s)][static_cast<std::size_t>(chunk)] = entry;
}

void OverlappedDataParallel::forward_piece(int s, int chunk, std::size_t k, TaskId task) {
  if (!options_.overlap_param_gather || group_ranks_ <= 1) return;
  const std::size_t pieces = chunks_[static_cast<std::size_t>(s)].pieces[static_cast<std::size_t>(chunk)].size();
  // The k-th piece forward is the (pieces - 1 - k)-th backward.
  gated_[static_cast<std::size_t>(s)].emplace_back(bucket_of(s, item_of(s, chunk, pieces - 1 - k)), task);
}

void OverlappedDataParallel::gather(const std::vector<TaskId>& ready) {
  if (!options_.overlap_param_gather || group_ranks_ <= 1) return;
  const int sims = ranks_.size();
  std::vector<std::vector<TaskId>> gathered(static_cast<std::size_t>(sims));
  for (const auto& members : groups_) {
    const int first = members.front();
    const auto& buckets = buckets_[static_cast<std::size_t>(first)];
    const auto& chunk_of = chunk_of_bucket_[static_cast<std::size_t>(first)];
    std::vector<bool> taking_part(static_cast<std::size_t>(sims), false);
    for (const int s : members) {
      taking_part[static_cast<std::size_t>(s)] = true;
      gathered[static_cast<std::size_t>(s)].resize(buckets.size());
    }
    std::vector<TaskId> stream = ready;
    // In the order the forwards use them: the first chunk's buckets first, each from its input
    // end (the buckets were laid out in backward order).
    for (std::size_t b = buckets.size(); b-- > 0;) {
      std::vector<std::vector<TaskId>> deps = ranks_.per_rank(stream);
      const bool chunk_starts = b + 1 == buckets.size() || chunk_of[b + 1] != chunk_of[b];
      if (!options_.align_param_gather && chunk_starts) {
        // Unaligned: issued by the chunk's first forward pre-hook.
        for (const int s : members) {
          deps[static_cast<std::size_t>(s)].push_back(
              chunk_entry_[static_cast<std::size_t>(s)][static_cast<std::size_t>(chunk_of[b])]);
        }
      }
      stream = comm_.add(CollectiveKind::kAllGather,
                         fmt::format(FMT_COMPILE("dp.parameters.r{}.bucket{}"), ranks_.slot(first).rank, b),
                         buckets[b].elements, group_plan_, deps, taking_part);
      for (const int s : members) gathered[static_cast<std::size_t>(s)][b] = stream[static_cast<std::size_t>(s)];
    }
  }
  for (int s = 0; s < sims; ++s) {
    for (const auto& [bucket, task] : gated_[static_cast<std::size_t>(s)]) {
      ranks_.graph().add_dependency(task, gathered[static_cast<std::size_t>(s)][bucket]);
    }
  }
}

void OverlappedDataParallel::backward_piece(int s, int chunk, std::size_t k, TaskId done) {
  const auto [first, split] = first_item_[static_cast<std::size_t>(s)][static_cast<std::size_t>(chunk)];
  const std::size_t pieces = chunks_[static_cast<std::size_t>(s)].pieces[static_cast<std::size_t>(chunk)].size();
  // An unsplit chunk is one item: its gradients exist after its last piece.
  if (!split && k + 1 != pieces) return;
  ready_[static_cast<std::size_t>(s)][item_of(s, chunk, k)] = done;
}

std::vector<TaskId> OverlappedDataParallel::reduce(const std::vector<TaskId>& last) {
  static const Partitioning kNoPartitioning{};
  const int sims = ranks_.size();
  std::vector<TaskId> reduced = last;
  for (const auto& members : groups_) {
    const int first = members.front();
    std::vector<bool> taking_part(static_cast<std::size_t>(sims), false);
    for (const int s : members) taking_part[static_cast<std::size_t>(s)] = true;
    GradientReduction reduction(
        ranks_, comm_, policy_, items_[static_cast<std::size_t>(first)],
        GradientReduction::Plans{group_plan_, group_plan_, kNoPartitioning},
        GradientReduction::Options{options_.bucket_size, true, group_ranks_, group_ranks_, std::nullopt, taking_part,
                                   fmt::format(FMT_COMPILE("dp.gradients.r{}."), ranks_.slot(first).rank)},
        host_threads_, nullptr);
    reduction.begin_micro_batch();
    for (std::size_t i = 0; i < items_[static_cast<std::size_t>(first)].size(); ++i) {
      for (const int s : members) {
        const TaskId ready = ready_[static_cast<std::size_t>(s)][i];
        reduction.produced(i, s, ready, ready);
      }
    }
    reduction.reduce(options_.micro_batches - 1, true, last);
    for (const int s : members) reduced[static_cast<std::size_t>(s)] = reduction.stream()[static_cast<std::size_t>(s)];
  }
  return reduced;
}

std::string fsdp_under_pipeline_approximation() {
  return "FSDP2 under the pipeline (zero_stage 2): gradients accumulated whole and reduce-scattered once after the "
         "last backward, as torch.distributed.pipelining runs it; the parameters' all-gather placed after the step "
         "(FSDP2 issues it before the next forwards, prefetching block by block), and with interleaving the whole "
         "gradient buffer allocated at the rank's first backward rather than chunk by chunk";
}

}  // namespace offsim::models
