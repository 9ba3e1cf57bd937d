#pragma once
// Optimizer offload to the host (DeepSpeed `offload_optimizer: {device: cpu | nvme}`, ZeRO-Offload
// and ZeRO-Infinity) as a phase any schedule can use: where each simulated rank's host and NVMe
// are, the rank's optimizer partition split into subgroups (Twin-Flow: the first ratio x n on the
// CPU, the rest on the GPU), each reduced gradient bucket's trip to the host, and the optimizer
// step on the host with its copies back. Both DeepSpeed implementations are modelled, chosen by
// the ZeroPolicy's engine: stage_1_and_2.py (ZeRO-2) and stage3.py (ZeRO-3), and the 0.13 and
// 0.16.3+ recipes (docs/strategies.md and deepspeed-offload.md state them).
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "models/placement/state_placement.hpp"
#include "models/strategies/phases/iteration.hpp"
#include "models/strategies/phases/rank_timeline.hpp"
#include "models/strategies/phases/zero_policy.hpp"

namespace offsim::models {

/// The DeepSpeed release whose offload mechanics are simulated (deepspeed-offload.md section 2):
/// 0.13 copies each gradient partition to the host with a blocking copy and up-casts on the CPU;
/// 0.16.3 and later up-cast on the GPU and copy asynchronously.
enum class Runtime { kDeepSpeed013, kDeepSpeed016 };

/// ZeRO-3 optimizer offload to host memory (DeepSpeed `offload_optimizer: {device: cpu}`).
struct OptimizerOffload {
  bool pin_memory = true;
  double ratio = 1.0;  // Twin-Flow: the first ratio x subgroups update on the CPU, the rest on the GPU
  std::int64_t sub_group_size = 0;
  Runtime runtime = Runtime::kDeepSpeed013;
  // ZeRO-Infinity (`device: nvme`, stage 3): the host subgroups' fp32 states and gradients live on
  // the node's NVMe and are swapped through `buffer_count` pinned host buffers of the largest
  // subgroup; pipeline_read prefetches the next subgroup during CPU Adam, pipeline_write lets the
  // next subgroup start before the write-back ends (deepspeed-offload.md section 6).
  bool nvme = false;
  bool pipeline_read = false;
  bool pipeline_write = false;
  int buffer_count = 0;
};

/// The CPU of `gpu`'s node fewest hops from it (the first declared among equals): the host of its
/// offload. Nullopt when the node has no CPU.
[[nodiscard]] std::optional<std::size_t> nearest_cpu(const topo::Topology& t, std::size_t gpu);

class HostOffload {
 public:
  /// Places every simulated rank's host (the nearest CPU of its node) and NVMe, splits the
  /// `updated_on_rank` parameters into subgroups, and notes in `out` which host copies and CPU
  /// rates are measured. Throws std::invalid_argument when a rank has no CPU (or NVMe) to offload to.
  HostOffload(RankTimeline& ranks, BuiltIteration& out, const IterationInputs& in, std::vector<std::size_t> gpus,
              const OptimizerOffload& offload, const ZeroPolicy& policy, bool parameter_offload,
              std::int64_t updated_on_rank);

  /// Adds what the host and NVMe keep to a rank's state counts (models/placement).
  void describe(StateCounts& counts) const;
  /// The share of each reduced gradient partition that goes to the host (the CPU subgroups').
  [[nodiscard]] double cpu_fraction() const { return cpu_fraction_; }
  [[nodiscard]] std::uint32_t host_pool(int r) const { return hosts_[static_cast<std::size_t>(r)].host_pool; }

  /// The setup allocations on rank r's host (or NVMe) after `last`; returns the last one.
  sim::TaskId allocate_host_states(int r, const StatePlacement& states, sim::TaskId last);
  /// A copy between rank r's GPU and its host, at the host's measured copy fit when there is one.
  sim::TaskId copy(int r, const std::string& name, const char* phase, bool to_host, sim::Bytes bytes,
                   std::vector<sim::TaskId> deps, bool pinned);
  /// One reduced gradient bucket of `partition_elements` (the rank's partition of it) to the host,
  /// after each rank's `reduce_stream`, which it advances. At the accumulation boundary (DeepSpeed
  /// 0.13) a blocking step holds back backward_tasks[r][next_item] when overlap_comm.
  void offload_bucket(std::int64_t micro_batch, bool boundary, const std::string& bucket,
                      std::int64_t partition_elements, std::size_t next_item, std::vector<sim::TaskId>& reduce_stream,
                      const std::vector<std::vector<sim::TaskId>>& backward_tasks, bool overlap_comm);
  /// The optimizer step of rank r from `ready`, subgroup by subgroup; returns its last task and
  /// sets `first_step`.
  sim::TaskId step(int r, sim::TaskId ready, sim::TaskId& first_step);

 private:
  // Where a simulated rank's offload goes.
  struct Host {
    std::size_t host = 0;  // the nearest CPU
    std::uint32_t host_pool = 0;
    sim::ConstraintId host_memory;                // its DDR, crossed by host copies and CPU work
    std::optional<sim::ConstraintId> host_cores;  // its cores' streaming throughput, crossed by CPU work
    std::size_t nvme = 0;                         // ZeRO-Infinity: the node's NVMe device
    std::uint32_t nvme_pool = 0;
  };
  void split_subgroups(std::int64_t updated_on_rank);
  void place_hosts();
  [[nodiscard]] const CopyFit* copy_fit(bool to_host, bool pinned) const;
  void check_copy_fits();
  void measure_host_rates();
  sim::TaskId host_traffic(int r, const std::string& name, const char* phase, sim::Bytes bytes,
                           std::optional<sim::Bandwidth> bound, std::vector<sim::TaskId> deps);
  sim::TaskId swap(int r, const std::string& name, bool to_nvme, sim::Bytes bytes, std::vector<sim::TaskId> deps);

  RankTimeline& ranks_;
  BuiltIteration& out;
  const IterationInputs& in;
  const std::vector<std::size_t> gpus_;  // the GPU device of each simulated rank
  const OptimizerOffload& off;
  const ZeroPolicy policy;
  const bool parameter_offload;
  const int sims;
  std::vector<Host> hosts_;
  // The rank's partition is updated in subgroups of sub_group_size elements; the first
  // int(ratio x n) subgroups on the host CPU, the rest on the GPU (Twin-Flow).
  std::vector<std::int64_t> subgroups;
  std::size_t cpu_subgroups = 0;
  std::int64_t cpu_params = 0;
  double cpu_fraction_ = 0.0;
  // CPU work's measured rates (measure_host_rates).
  std::optional<sim::Bandwidth> cpu_adam_bound, cpu_upcast_bound, cpu_downcast_bound;
  std::vector<std::vector<sim::TaskId>> gradient_swaps;  // ZeRO-Infinity gradient writes
};

}  // namespace offsim::models
