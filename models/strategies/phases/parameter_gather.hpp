#pragma once
// ZeRO-3's parameter gathering as a phase any schedule can use: the model's modules (one
// all-gather per submodule at or above the persistence threshold), each gathered on a stream of
// its own one module ahead of the compute (or, DeepSpeed's first stage 3, blocking), freed after
// use with at most two modules live, over the partitioning's groups (hpZ's secondary partition in
// backward), with the framework's host launch cost per gather and, under ZeRO-Infinity, the
// rank's shard fetched from host memory first.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "models/collectives/communicator.hpp"
#include "models/collectives/plan.hpp"
#include "models/strategies/phases/host_offload.hpp"
#include "models/strategies/phases/rank_timeline.hpp"
#include "models/transformer/transformer.hpp"

namespace offsim::models {

/// Hierarchical partitioning of the ZeRO-3 states (docs/strategies.md): each state is sharded
/// over a group of consecutive ranks, and each collective runs in stages over hierarchy bands,
/// with its own algorithm and quantization. ZeRO-3 shards everything over all ranks with flat
/// rings; ZeRO++ adds int8 forward gathers (qwZ), a secondary weight partition inside the node
/// (hpZ) and int4 all-to-all gradient reduction in two hops (qgZ); MiCS shards over a node and
/// all-reduces gradients across the node replicas. The primary weights, gradients and optimizer
/// states share one group (each rank updates the shard it owns); only the secondary differs.
struct Partitioning {
  int shard_ranks = 0;              // the group the primary states are sharded over
  CollectivePlan parameter_gather;  // forward (and backward, without a secondary) all-gather
  int secondary_ranks = 0;          // hpZ secondary partition group; 0: none
  CollectivePlan secondary_gather;  // backward all-gather inside the secondary group
  CollectivePlan gradient_reduce;   // reduce-scatter inside the shard group
  CollectivePlan replica_reduce;    // all-reduce across shard groups (when shard_ranks < ranks)
};

// Stage 3: how a module's parameters are fetched.
//  kPrefetch: on a gather stream of their own, one module ahead of the compute (DeepSpeed since
//    its stage-3 overlap rework, PR #1453, merged late 2021).
//  kBlocking: each all-gather waits for the device's queued work and the module waits for it, so
//    gathers never overlap compute (DeepSpeed's first ZeRO-3 releases, March to late 2021: "the
//    async version is not async at all, because each all_gather calls torch.cuda.synchronize()",
//    PR #1188; prefetching skipped by an off-by-one trace, issue #1069).
enum class ZeroFetch { kPrefetch, kBlocking };
// Stage 3: host time the framework spends launching each parameter's all-gather and each
// gradient tensor's reduce-scatter, fixed + per_rank x (ranks of the collective), serialised on
// the rank's host thread (`zero3_host`, a sourced table in configs/calibration/). DeepSpeed's
// early stage 3 built one view per rank of each tensor, and PyTorch's list-based all_gather and
// reduce_scatter copied each rank's part with its own copy kernel, so that work grows with the
// group.
struct HostLaunchCost {
  sim::TimePs fixed{0};
  sim::TimePs per_rank{0};
  [[nodiscard]] sim::TimePs at(std::int64_t ranks) const { return sim::TimePs{fixed.ps + per_rank.ps * ranks}; }
};
struct FetchHostCost {
  std::string name;
  HostLaunchCost all_gather;      // per parameter gathered
  HostLaunchCost reduce_scatter;  // per gradient tensor reduced
};

// A module whose parameters stage 3 gathers before it runs: one all-gather per submodule whose
// parameters reach the persistence threshold, in forward order (DeepSpeed fetches each submodule's
// parameters in its pre-forward hook); smaller ones (norms, biases) stay resident on every rank.
struct Module {
  std::string name;
  std::vector<std::int64_t> gathers;  // elements of each all-gather
  std::vector<bool> expert;           // per gather: the rank's experts (gathered over their data-parallel group)
  std::int64_t persistent = 0;        // elements kept whole on every rank
  // false: kept gathered from its forward until after its backward, which gathers nothing (FSDP2's
  // reshard_after_forward, phases/fsdp2.hpp); DeepSpeed reshards every module.
  bool reshard_after_forward = true;
  [[nodiscard]] std::int64_t gathered() const {
    std::int64_t n = 0;
    for (const auto g : gathers) n += g;
    return n;
  }
};

/// Splits `parts` (submodule parameter counts) into gathered and persistent by the threshold.
[[nodiscard]] Module make_module(std::string name, const std::vector<std::int64_t>& parts,
                                 std::int64_t persistence_threshold, const std::vector<bool>& expert = {});

/// The model's modules in forward order for a rank holding the `params` share of a tensor-parallel
/// group of tp (its experts / ep): the embedding, each layer (its linear projections, then the rest),
/// the head (which multiplies by the embedding when they are tied).
[[nodiscard]] std::vector<Module> model_modules(const ModelSpec& m, const ParameterCounts& params, std::int64_t tp,
                                                std::int64_t ep, std::int64_t persistence_threshold);

// hpZ: after its first forward gather, each rank keeps a secondary shard of the module (bf16)
// until the optimizer step drops them (DeepSpeed invalidate_secondary_tensor).
inline constexpr const char* kSecondaryPartitionTenant = "secondary parameter partition (hpZ, bf16)";

/// Stage 3's gathers and frees around each module's compute on every simulated rank.
class ParameterGather {
 public:
  struct Plans {
    const Partitioning& partitioning;
    const CollectivePlan& experts;  // the experts' parameters, over their data-parallel group
  };
  /// `parameters_on_host`: ZeRO-Infinity parameter offload (each shard copied from the host first,
  /// pinned or not).
  ParameterGather(RankTimeline& ranks, Communicator& comm, Plans plans, ZeroFetch fetch,
                  std::optional<FetchHostCost> host_cost, HostThreads& host_threads, HostOffload* parameters_on_host,
                  bool pinned);

  /// The gather stream starts after each rank's `ready`.
  void start(const std::vector<sim::TaskId>& ready) { stream_ = ready; }
  /// Before `mod` runs (`when`: "mb0.fwd", ...) after each rank's `previous`: its gather and, on the
  /// first forward with hpZ, the secondary shard it keeps. Returns each rank's dependencies.
  [[nodiscard]] std::vector<std::vector<sim::TaskId>> before(const Module& mod, const std::string& when,
                                                             const std::vector<sim::TaskId>& previous);
  /// A backward `when` ("mb0.bwd") of a module not resharded after forward gathers nothing: its
  /// dependencies are each rank's `previous`.
  /// After `mod` ran (each rank's last task `done`): its gathered parameters freed (not after the
  /// forward of a module that is not resharded).
  void after(const Module& mod, const std::string& when, const std::vector<sim::TaskId>& done);
  /// Elements of the hpZ secondary partition each rank keeps (known once the first forward is built).
  [[nodiscard]] std::int64_t secondary_elements() const { return secondary_elements_; }

 private:
  std::vector<sim::TaskId> gather(const Module& mod, const std::string& when, const std::vector<sim::TaskId>& previous);

  RankTimeline& ranks_;
  Communicator& comm_;
  const Partitioning& part_;
  const CollectivePlan& expert_plan_;
  const ZeroFetch fetch_;
  const std::optional<FetchHostCost> host_cost_;
  HostThreads& host_threads_;
  HostOffload* const parameters_on_host_;
  const bool pinned_;
  std::vector<sim::TaskId> stream_;  // each rank's gather stream
  // The modules freed one and two modules ago (two modules live at most).
  std::vector<std::vector<sim::TaskId>> freed_two_ago_, freed_one_ago_;
  std::int64_t secondary_elements_ = 0;
};

/// What the report says of stage 3's gathering.
[[nodiscard]] std::vector<std::string> parameter_gather_approximations(ZeroFetch fetch,
                                                                       const std::optional<FetchHostCost>& host_cost,
                                                                       int shard_ranks);

}  // namespace offsim::models
