#include "models/strategies/phases/parameter_gather.hpp"

#include <fmt/compile.h>
#include <fmt/format.h>

#include <algorithm>

#include "models/transformer/phases.hpp"
#include "models/transformer/precision.hpp"

namespace offsim::models {

using sim::Bytes;
using sim::TaskId;

namespace {
constexpr const char* kGathered = "gathered parameters (bf16)";
}  // namespace

Module make_module(std::string name, const std::vector<std::int64_t>& parts, std::int64_t persistence_threshold,
                   const std::vector<bool>& expert) {
  Module mod;
  mod.name = std::move(name);
  for (std::size_t i = 0; i < parts.size(); ++i) {
    const std::int64_t n = parts[i];
    if (n <= 0) continue;
    if (n < persistence_threshold) {
      mod.persistent += n;
    } else {
      mod.gathers.push_back(n);
      mod.expert.push_back(i < expert.size() && expert[i]);
    }
  }
  return mod;
}

std::vector<Module> model_modules(const ModelSpec& m, const ParameterCounts& params, std::int64_t tp, std::int64_t ep,
                                  std::int64_t threshold) {
  // A layer's submodules: its linear projections (weight and bias) and what remains (the norms).
  std::vector<std::int64_t> layer_parts;
  std::vector<bool> expert_parts;  // expert parallelism: the parts gathered over the experts' group
  std::int64_t linear = 0;
  for (const auto& gemm : layer_gemms(m, 1, 1, ep)) {
    if (gemm.attention_core) continue;
    layer_parts.push_back((gemm.parameters() + tp - 1) / tp);
    expert_parts.push_back(ep > 1 && gemm.expert);
    linear += layer_parts.back();
  }
  layer_parts.push_back(params.per_layer - linear);
  expert_parts.push_back(false);
  std::vector<Module> modules{make_module("embedding", {params.embedding, params.position}, threshold)};
  for (std::int64_t l = 0; l < m.layers; ++l)
    modules.push_back(make_module(fmt::format(FMT_COMPILE("layer{}"), l), layer_parts, threshold, expert_parts));
  modules.push_back(
      make_module("head", {params.final_norm, m.tied_embeddings ? params.embedding : params.output_head}, threshold));
  return modules;
}

ParameterGather::ParameterGather(RankTimeline& ranks, Communicator& comm, Plans plans, ZeroFetch fetch,
                                 std::optional<FetchHostCost> host_cost, HostThreads& host_threads,
                                 HostOffload* parameters_on_host, bool pinned)
    : ranks_(ranks),
      comm_(comm),
      part_(plans.partitioning),
      expert_plan_(plans.experts),
      fetch_(fetch),
      host_cost_(std::move(host_cost)),
      host_threads_(host_threads),
      parameters_on_host_(parameters_on_host),
      pinned_(pinned),
      freed_two_ago_(static_cast<std::size_t>(ranks.size())),
      freed_one_ago_(static_cast<std::size_t>(ranks.size())) {}

// The all-gather of `mod` for every rank, issued on the gather stream after the previous gather
// and after the module before last was freed (two modules live at most).
std::vector<TaskId> ParameterGather::gather(const Module& mod, const std::string& when,
                                            const std::vector<TaskId>& previous) {
  const int sims = ranks_.size();
  std::vector<TaskId> done(static_cast<std::size_t>(sims));
  // Names are built only for a graph that keeps them (sim::ScopedUnnamedTasks: a sweep's points).
  const sim::TaskGraph& g = ranks_.graph();
  const std::string alloc_name = g.name_from([&] { return fmt::format(FMT_COMPILE("{}.alloc.{}"), when, mod.name); });
  for (int r = 0; r < sims; ++r) {
    std::vector<TaskId> d{stream_[r]};
    // Blocking fetch: the gather starts once the rank's queued work (the previous module) is done.
    if (fetch_ == ZeroFetch::kBlocking) d.push_back(previous[r]);
    d.insert(d.end(), freed_two_ago_[r].begin(), freed_two_ago_[r].end());
    done[r] =
        ranks_.alloc(r, alloc_name, phase::kCommunication, kGathered, Bytes{mod.gathered() * kBf16Bytes}, std::move(d));
  }
  // Backward gathers come from the secondary partition inside its group when there is one (hpZ).
  const bool from_secondary = part_.secondary_ranks > 0 && when.ends_with(".bwd");
  const int group = from_secondary ? part_.secondary_ranks : part_.shard_ranks;
  for (std::size_t i = 0; i < mod.gathers.size(); ++i) {
    if (host_cost_) {
      // The framework's host work before this parameter's all-gather is enqueued (a delay on the
      // rank's fetch path: it holds no link or unit).
      for (int r = 0; r < sims; ++r) {
        done[r] = host_threads_.work(
            r, g.name_from([&] { return fmt::format(FMT_COMPILE("{}.host.gather.{}.{}"), when, mod.name, i); }),
            host_cost_->all_gather.at(group), {done[r]});
      }
    }
    if (parameters_on_host_) {
      // ZeRO-Infinity: the rank's shard comes from host memory first.
      for (int r = 0; r < sims; ++r) {
        done[r] = parameters_on_host_->copy(
            r, g.name_from([&] { return fmt::format(FMT_COMPILE("{}.fetch.{}.{}"), when, mod.name, i); }),
            phase::kCommunication, false, Bytes{(mod.gathers[i] + group - 1) / group * kBf16Bytes}, {done[r]}, pinned_);
      }
    }
    const CollectivePlan& plan = mod.expert[i]    ? expert_plan_
                                 : from_secondary ? part_.secondary_gather
                                                  : part_.parameter_gather;
    done = comm_.add(CollectiveKind::kAllGather,
                     g.name_from([&] { return fmt::format(FMT_COMPILE("gather.{}.{}.{}"), when, mod.name, i); }),
                     mod.gathers[i], plan, done);
  }
  stream_ = done;
  return done;
}

std::vector<std::vector<TaskId>> ParameterGather::before(const Module& mod, const std::string& when,
                                                         const std::vector<TaskId>& previous) {
  if (!mod.reshard_after_forward && when.ends_with(".bwd")) {
    std::vector<std::vector<TaskId>> deps(previous.size());
    for (std::size_t r = 0; r < previous.size(); ++r) deps[r] = {previous[r]};
    return deps;
  }
  const std::vector<TaskId> gathered = gather(mod, when, previous);
  const bool keep_secondary = part_.secondary_ranks > 0 && when == "mb0.fwd";
  const std::int64_t secondary_shard =
      (mod.gathered() + part_.secondary_ranks - 1) / std::max(1, part_.secondary_ranks);
  if (keep_secondary) secondary_elements_ += secondary_shard;
  std::vector<std::vector<TaskId>> deps(previous.size());
  for (int r = 0; r < ranks_.size(); ++r) {
    deps[r] = {previous[r], gathered[r]};
    if (keep_secondary) {
      deps[r].push_back(ranks_.alloc(r, fmt::format(FMT_COMPILE("alloc.secondary.{}"), mod.name), phase::kCommunication,
                                     kSecondaryPartitionTenant, Bytes{secondary_shard * kBf16Bytes}, {gathered[r]}));
    }
  }
  return deps;
}

void ParameterGather::after(const Module& mod, const std::string& when, const std::vector<TaskId>& done) {
  if (!mod.reshard_after_forward && when.ends_with(".fwd")) return;
  const std::string name =
      ranks_.graph().name_from([&] { return fmt::format(FMT_COMPILE("{}.free.{}"), when, mod.name); });
  for (int r = 0; r < ranks_.size(); ++r) {
    const TaskId f =
        ranks_.release(r, name, phase::kCommunication, kGathered, Bytes{mod.gathered() * kBf16Bytes}, {done[r]});
    freed_two_ago_[r] = freed_one_ago_[r];
    freed_one_ago_[r] = {f};
  }
}

std::vector<std::string> parameter_gather_approximations(ZeroFetch fetch, const std::optional<FetchHostCost>& host_cost,
                                                         int shard_ranks) {
  std::vector<std::string> notes;
  if (fetch == ZeroFetch::kPrefetch)
    notes.emplace_back("ZeRO-3 prefetch: one module ahead, at most two modules gathered");
  if (fetch == ZeroFetch::kBlocking) {
    notes.emplace_back(
        "ZeRO-3 blocking fetch (DeepSpeed of 2021): every gather waits for the previous module and the module for "
        "it, no overlap");
  }
  if (host_cost) {
    const auto& h = *host_cost;
    const auto group = static_cast<std::int64_t>(shard_ranks);
    notes.push_back(fmt::format(
        "ZeRO-3 host launch costs ({}): {} + {} per rank per parameter all-gather, {} + {} per rank per gradient "
        "tensor reduce-scatter ({} and {} at {} ranks), serial on the rank's host thread; the reduce-scatters of a "
        "bucket hold back the next backward kernel",
        h.name, sim::format_time(h.all_gather.fixed), sim::format_time(h.all_gather.per_rank),
        sim::format_time(h.reduce_scatter.fixed), sim::format_time(h.reduce_scatter.per_rank),
        sim::format_time(h.all_gather.at(group)), sim::format_time(h.reduce_scatter.at(group)), group));
  } else {
    notes.emplace_back(
        "ZeRO-3: no host cost per collective launch (strategy.zero3_host): the framework's hooks and launches are "
        "assumed to keep ahead of the GPU");
  }
  return notes;
}

}  // namespace offsim::models
