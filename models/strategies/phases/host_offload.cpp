#include "models/strategies/phases/host_offload.hpp"

#include <fmt/compile.h>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <stdexcept>

#include "models/transformer/phases.hpp"
#include "sim/core/errors.hpp"

namespace offsim::models {

using sim::AllocTask;
using sim::BarrierTask;
using sim::Bytes;
using sim::TaskId;
using sim::TimePs;
using sim::TransferTask;

std::optional<std::size_t> nearest_cpu(const topo::Topology& t, std::size_t gpu) {
  std::optional<std::size_t> best;
  std::size_t best_hops = 0;
  for (const auto cpu : t.devices_of(topo::DeviceKind::kCpu)) {
    if (t.device(cpu).node != t.device(gpu).node) continue;
    const std::size_t hops = t.route(gpu, cpu).links.size();
    if (!best || hops < best_hops) {
      best = cpu;
      best_hops = hops;
    }
  }
  return best;
}

HostOffload::HostOffload(RankTimeline& ranks, BuiltIteration& out_, const IterationInputs& in_,
                         std::vector<std::size_t> gpus, const OptimizerOffload& offload, const ZeroPolicy& zero,
                         bool parameters_on_host, std::int64_t updated_on_rank)
    : ranks_(ranks),
      out(out_),
      in(in_),
      gpus_(std::move(gpus)),
      off(offload),
      policy(zero),
      parameter_offload(parameters_on_host),
      sims(static_cast<int>(gpus_.size())),
      gradient_swaps(gpus_.size()) {
  split_subgroups(updated_on_rank);
  place_hosts();
  check_copy_fits();
  measure_host_rates();
}

// The optimizer partition's subgroups and the CPU's share of them.
void HostOffload::split_subgroups(std::int64_t updated_on_rank) {
  // ZeRO-2 (stage_1_and_2.py) runs CPU Adam over the whole partition at once (one parameter group
  // here); stage 3 in subgroups.
  const std::int64_t group_size =
      policy.engine() == OptimizerEngine::kZeroStage1And2 ? updated_on_rank : off.sub_group_size;
  // Each subgroup is tasks of its own on every rank (copies, CPU Adam): more of them than the graph
  // may hold is a simulation limit (exit 3), found before they are listed (sub_group_size 1 on a
  // 13 B model would list 13e9).
  const std::int64_t count = (updated_on_rank + group_size - 1) / group_size;
  if (static_cast<std::uint64_t>(count) > out.graph.task_limit()) {
    throw sim::SimulationLimit(fmt::format(
        "sub_group_size {} splits a rank's {} optimizer parameters into {} subgroups, each tasks "
        "of its own: more than the {} tasks a graph may hold here; use larger subgroups (DeepSpeed's default is 1e9)",
        group_size, updated_on_rank, count, out.graph.task_limit()));
  }
  for (std::int64_t left = updated_on_rank; left > 0; left -= group_size) {
    subgroups.push_back(std::min(left, group_size));
  }
  cpu_subgroups = static_cast<std::size_t>(off.ratio * static_cast<double>(subgroups.size()));
  for (std::size_t j = 0; j < cpu_subgroups; ++j) cpu_params += subgroups[j];
  cpu_fraction_ = static_cast<double>(cpu_params) / static_cast<double>(updated_on_rank);
}

// Each simulated rank's host and, for ZeRO-Infinity, NVMe. Host cores are one resource per CPU,
// shared by the ranks offloading to it (calibration.host cpu_work: the streaming throughput its
// cores sustain for CPU Adam and casts).
void HostOffload::place_hosts() {
  std::map<std::size_t, sim::ConstraintId> cores_of_host;
  for (int r = 0; r < sims; ++r) {
    Host info;
    const std::size_t device = gpus_[static_cast<std::size_t>(r)];
    const auto host = nearest_cpu(in.topology, device);
    if (!host) {
      throw std::invalid_argument(
          fmt::format("'{}' has no CPU in its node to offload to", in.topology.device(device).name));
    }
    info.host = *host;
    const auto& mem = out.machine->memory_constraint_of_device[info.host];
    if (!mem || !out.machine->pool_of_device[info.host]) {
      throw std::invalid_argument(
          fmt::format("optimizer offload needs the memory of '{}' with a bandwidth shared by transfers",
                      in.topology.device(info.host).name));
    }
    info.host_memory = *mem;
    if (in.host.cpu_work_bandwidth) {
      auto it = cores_of_host.find(info.host);
      if (it == cores_of_host.end()) {
        // Named after the host's cores unit, which it stands for: trace.json draws the host work
        // that streams through it on that unit's track.
        const std::string cores = out.machine->platform.units.at(*out.machine->unit_of_device.at(info.host)).name;
        it = cores_of_host
                 .emplace(info.host, out.machine.to_change().platform.add_constraint(
                                         {cores, *in.host.cpu_work_bandwidth, "cpu-work", "", "", ""}))
                 .first;
      }
      info.host_cores = it->second;
    }
    info.host_pool = *out.machine->pool_of_device[info.host];
    if (off.nvme) {
      std::optional<std::size_t> nvme;
      for (const auto d : in.topology.devices_of(topo::DeviceKind::kNvme)) {
        if (in.topology.device(d).node == in.topology.device(device).node && out.machine->pool_of_device[d]) {
          nvme = d;
          break;
        }
      }
      if (!nvme) {
        throw std::invalid_argument(fmt::format("NVMe offload: the node of '{}' has no NVMe device with a capacity",
                                                in.topology.device(device).name));
      }
      info.nvme = *nvme;
      info.nvme_pool = *out.machine->pool_of_device[*nvme];
    }
    hosts_.push_back(info);
  }
}

void HostOffload::describe(StateCounts& c) const {
  c.optimizer_offload = true;
  c.offloaded_elements = cpu_params;
  c.nvme = off.nvme;
  if (off.nvme && !subgroups.empty()) {
    c.swap_buffer_elements = off.buffer_count * *std::max_element(subgroups.begin(), subgroups.end());
  }
}

TaskId HostOffload::allocate_host_states(int r, const StatePlacement& st, TaskId last) {
  const auto host_alloc = [&](const char* name, const char* tenant, Bytes bytes, TaskId after) {
    return ranks_.graph().add(ranks_.task_name(r, name), "setup", AllocTask{hosts_[r].host_pool, tenant, bytes},
                              {after});
  };
  if (off.nvme) {
    // States and fp32 gradients on the NVMe; the host keeps the pinned swap buffers.
    last = ranks_.graph().add(ranks_.task_name(r, "alloc.nvme_states"), "setup",
                              AllocTask{hosts_[r].nvme_pool, "optimizer states and fp32 gradients on NVMe",
                                        Bytes{st.optimizer.nvme + st.gradients.nvme}},
                              {last});
    last = host_alloc("alloc.swap_buffers", "pinned NVMe swap buffers", Bytes{st.swap_buffers.host}, last);
  } else {
    last = host_alloc("alloc.host_optimizer", "optimizer states on host (fp32 master, m, v)", Bytes{st.optimizer.host},
                      last);
    last = host_alloc("alloc.host_gradients", "fp32 gradients on host", Bytes{st.gradients.host}, last);
  }
  if (policy.engine() == OptimizerEngine::kZeroStage3) {
    last =
        host_alloc("alloc.host_gradient_buffer", "bf16 gradient buffer on host", Bytes{st.gradient_buffer.host}, last);
  }
  return last;
}

// Host-side work (CPU Adam, casts) is traffic through the host's DDR and, when the host table
// measures it, through the cores' streaming throughput that every rank on the host shares; each
// rank's work is also capped at a measured per-thread-count rate when the table has one.
TaskId HostOffload::host_traffic(int r, const std::string& name, const char* phase, Bytes bytes,
                                 std::optional<sim::Bandwidth> bound, std::vector<TaskId> deps) {
  std::vector<sim::ConstraintId> route{hosts_[r].host_memory};
  if (hosts_[r].host_cores) route.push_back(*hosts_[r].host_cores);
  return ranks_.graph().add(ranks_.task_name(r, name), phase,
                            TransferTask{std::move(route), bytes, TimePs{0}, bound, {}}, std::move(deps));
}

// Host copies of pinned or pageable buffers (offload_optimizer.pin_memory) follow the copy fits
// measured for the host (calibration.host copies: latency and bandwidth); without a fit only the
// links limit them, and the report says pinned and pageable are not told apart.
const CopyFit* HostOffload::copy_fit(bool to_host, bool pinned) const {
  const std::string key = fmt::format(FMT_COMPILE("{}_{}"), to_host ? "d2h" : "h2d", pinned ? "pinned" : "pageable");
  const auto it = in.host.copies.find(key);
  return it == in.host.copies.end() ? nullptr : &it->second;
}
// Notes the host copies that have no measured fit.
void HostOffload::check_copy_fits() {
  // Pageable copies happen whatever pin_memory says (dtype-changing copies, below).
  std::vector<std::string> missing;
  for (const bool pinned : {true, false}) {
    if (pinned && !off.pin_memory) continue;
    for (const bool to_host : {true, false}) {
      if (!copy_fit(to_host, pinned))
        missing.push_back(fmt::format(FMT_COMPILE("{}_{}"), to_host ? "d2h" : "h2d", pinned ? "pinned" : "pageable"));
    }
  }
  if (!missing.empty()) {
    out.approximations.push_back(fmt::format(
        "host copies: no measured copy fit for {} in calibration.host, so only the links limit those copies",
        fmt::join(missing, ", ")));
  }
}
TaskId HostOffload::copy(int r, const std::string& name, const char* phase, bool to_host, Bytes bytes,
                         std::vector<TaskId> deps, bool pinned) {
  const std::size_t gpu = gpus_[static_cast<std::size_t>(r)];
  const std::size_t cpu = hosts_[r].host;
  const CopyFit* fit = copy_fit(to_host, pinned);
  return ranks_.graph().add(ranks_.task_name(r, name), phase,
                            TransferTask{to_host ? out.machine->transfer_route(in.topology, gpu, cpu)
                                                 : out.machine->transfer_route(in.topology, cpu, gpu),
                                         bytes,
                                         fit ? fit->latency : TimePs{0},
                                         fit ? std::optional<sim::Bandwidth>(fit->bandwidth) : std::nullopt,
                                         {}},
                            std::move(deps));
}
// ZeRO-Infinity swaps: NVMe to host memory (read) or back (write), through the NVMe links and DDR.
TaskId HostOffload::swap(int r, const std::string& name, bool to_nvme, Bytes bytes, std::vector<TaskId> deps) {
  const std::size_t cpu = hosts_[r].host;
  const std::size_t nvme = hosts_[r].nvme;
  return ranks_.graph().add(ranks_.task_name(r, name), phase::kOptimizer,
                            TransferTask{to_nvme ? out.machine->transfer_route(in.topology, cpu, nvme)
                                                 : out.machine->transfer_route(in.topology, nvme, cpu),
                                         bytes,
                                         TimePs{0},
                                         {},
                                         {}},
                            std::move(deps));
}
// Host work is capped at the rate measured for the threads each rank has (cores / ranks on the
// host, nearest measured count), when the host table has one; otherwise DDR is its only limit.
void HostOffload::measure_host_rates() {
  const auto ranks_per_host =
      std::count_if(hosts_.begin(), hosts_.end(), [&](const Host& x) { return x.host == hosts_[0].host; });
  const int threads = std::max(1, in.topology.device(hosts_[0].host).cores / static_cast<int>(ranks_per_host));
  const std::string& host_kind = in.topology.device(hosts_[0].host).device_kind;
  const auto measured = [&](const std::vector<CpuRateFit>& fits, const char* what,
                            std::int64_t bytes_per_element) -> std::optional<sim::Bandwidth> {
    const CpuRateFit* best = nearest(
        fits, [](const CpuRateFit& f) { return f.threads; }, threads);
    if (!best) {
      if (!in.host.cpu_work_bandwidth) {
        out.approximations.push_back(fmt::format(
            "{} on {}: no measured rate (calibration.host); bounded only by host memory bandwidth (roofline)", what,
            host_kind));
      }
      return std::nullopt;
    }
    if (best->threads != threads) {
      out.approximations.push_back(
          fmt::format("{} with {} threads per rank uses the rate measured with {}", what, threads, best->threads));
    }
    return sim::Bandwidth{best->params_per_s * static_cast<double>(bytes_per_element)};
  };
  cpu_adam_bound = measured(in.host.cpu_adam, "CPU Adam", kHostAdamTrafficBytesPerParam);
  cpu_upcast_bound = measured(in.host.cpu_upcast, "CPU up-cast (bf16 to fp32)", kBf16Bytes + kFp32Bytes);
  cpu_downcast_bound = measured(in.host.cpu_downcast, "CPU down-cast (fp32 to bf16)", kBf16Bytes + kFp32Bytes);
  if (in.host.cpu_work_bandwidth) {
    out.approximations.push_back(fmt::format(
        "CPU Adam and casts on {} share its cores' streaming throughput ({}, calibration.host cpu_work), each "
        "costed by its DDR traffic: Adam {} B, a cast {} B per element",
        host_kind, sim::format_bandwidth(*in.host.cpu_work_bandwidth), kHostAdamTrafficBytesPerParam,
        kBf16Bytes + kFp32Bytes));
  }
  out.approximations.push_back("Twin-Flow: each gradient bucket is offloaded in the CPU share of the partition");
}

void HostOffload::offload_bucket(std::int64_t mb, bool boundary, const std::string& bucket,
                                 std::int64_t partition_elements, std::size_t next, std::vector<TaskId>& reduce_stream,
                                 const std::vector<std::vector<TaskId>>& backward_tasks, bool overlap_comm) {
  // The reduced partition goes to the host (deepspeed-offload.md section 2). First micro-step:
  // a non-blocking D2H into the bf16 host buffer and its H2D "ping-pong" back. Later
  // micro-steps: the host buffer comes back to the GPU (H2D), the new partition is added, and
  // the sum goes back (D2H). At the boundary, 0.13 copies it once more with a blocking D2H and
  // up-casts it on the CPU (the autograd thread waits: the next backward kernel cannot start);
  // 0.16.3+ up-casts on the GPU and copies the fp32 result asynchronously.
  const std::int64_t e =
      static_cast<std::int64_t>(std::llround(cpu_fraction_ * static_cast<double>(partition_elements)));
  if (e == 0) return;
  if (policy.engine() == OptimizerEngine::kZeroStage1And2) {
    // ZeRO-2 offload (stage_1_and_2.py, deepspeed-offload.md section 2): on the compute stream,
    // up-cast the reduced partition on the GPU and copy it to the host fp32 gradient (4 B per
    // element, non-blocking). From the second micro-step on, the host gradient accumulates
    // through the GPU: H2D of the host fp32 gradient, add, D2H back.
    for (int r = 0; r < sims; ++r) {
      const std::string name = bucket + ".offload";
      std::vector<TaskId> after{reduce_stream[r]};
      if (mb > 0) {
        after = {
            copy(r, name + ".h2d_accumulate", phase::kBackward, false, Bytes{e * kFp32Bytes}, after, off.pin_memory)};
      }
      const TaskId cast =
          ranks_.compute(r, name + ".gpu_upcast", phase::kBackward,
                         in.costs.memory_bound_time(Bytes{e * (kBf16Bytes + 2 * kFp32Bytes)}), {}, "memory", after);
      reduce_stream[r] =
          copy(r, name + ".d2h_fp32", phase::kBackward, true, Bytes{e * kFp32Bytes}, {cast}, off.pin_memory);
      if (overlap_comm && next < backward_tasks[r].size()) ranks_.graph().add_dependency(backward_tasks[r][next], cast);
    }
    return;
  }
  for (int r = 0; r < sims; ++r) {
    const std::string name = bucket + ".offload";
    TaskId last;
    if (mb == 0) {
      const TaskId d2h =
          copy(r, name + ".d2h", phase::kBackward, true, Bytes{e * kBf16Bytes}, {reduce_stream[r]}, off.pin_memory);
      last = copy(r, name + ".h2d", phase::kBackward, false, Bytes{e * kBf16Bytes}, {d2h}, off.pin_memory);
    } else {
      const TaskId h2d = copy(r, name + ".h2d_accumulate", phase::kBackward, false, Bytes{e * kBf16Bytes},
                              {reduce_stream[r]}, off.pin_memory);
      last = copy(r, name + ".d2h_accumulate", phase::kBackward, true, Bytes{e * kBf16Bytes}, {h2d}, off.pin_memory);
    }
    reduce_stream[r] = last;
    if (!boundary) continue;
    TaskId blocking;
    if (off.runtime == Runtime::kDeepSpeed013) {
      // `fp32_grad_tensor.copy_(grad_buffer)` changes dtype across devices: PyTorch copies into a
      // fresh pageable bf16 temporary and up-casts on the CPU, so this copy is pageable whatever
      // pin_memory says (deepspeed-offload.md section 2, step d).
      const TaskId d2h_blocking =
          copy(r, name + ".d2h_blocking", phase::kBackward, true, Bytes{e * kBf16Bytes}, {last}, /*pinned=*/false);
      blocking = host_traffic(r, name + ".cpu_upcast", phase::kBackward, Bytes{e * (kBf16Bytes + kFp32Bytes)},
                              cpu_upcast_bound, {d2h_blocking});
      reduce_stream[r] = blocking;
    } else {
      blocking = ranks_.compute(r, name + ".gpu_upcast", phase::kBackward,
                                in.costs.memory_bound_time(Bytes{e * (kBf16Bytes + kFp32Bytes)}), {}, "memory", {last});
      reduce_stream[r] =
          copy(r, name + ".d2h_fp32", phase::kBackward, true, Bytes{e * kFp32Bytes}, {blocking}, off.pin_memory);
    }
    // The next backward kernel waits for the blocking step; without overlap_comm the buckets
    // are reduced after the whole backward, so no backward kernel comes after them.
    if (overlap_comm && next < backward_tasks[r].size())
      ranks_.graph().add_dependency(backward_tasks[r][next], blocking);
    if (off.nvme) {
      // ZeRO-Infinity: the fp32 gradient goes on to the NVMe (AsyncTensorSwapper).
      gradient_swaps[r].push_back(
          swap(r, name + ".swap_out_gradient", true, Bytes{e * kFp32Bytes}, {reduce_stream[r]}));
    }
  }
}

TaskId HostOffload::step(int r, TaskId ready, TaskId& first_step) {
  // DeepSpeed 0.13 and later, stage 3: subgroups strictly one after another. A host subgroup
  // runs CPU Adam, then the blocking copy-back: down-cast on the CPU and H2D of the bf16
  // parameters. A GPU subgroup runs Adam on the GPU. No overlap between subgroups.
  TaskId last = ready;
  // The copy-back `bf16_partition.copy_(fp32_partition)` changes dtype across devices: PyTorch
  // down-casts into a fresh pageable temporary on the CPU and copies that, so the H2D is pageable
  // whatever pin_memory says (stage 3, and stage 2 before 0.14.1). ZeRO-2 from 0.14.1 (PR #5301)
  // copies from the pinned fp32 partition.
  const bool copy_back_pinned =
      policy.engine() == OptimizerEngine::kZeroStage1And2 && off.runtime != Runtime::kDeepSpeed013 && off.pin_memory;
  // ZeRO-Infinity: each subgroup's fp32 p, m, v and gradient are read from the NVMe before CPU
  // Adam (the next one prefetched with pipeline_read) and p, m, v written back after it (the
  // next subgroup waits for the write unless pipeline_write).
  std::vector<TaskId> nvme_writes;
  std::optional<TaskId> prefetched;
  if (off.nvme) {
    std::vector<TaskId> swapped{ready};
    swapped.insert(swapped.end(), gradient_swaps[r].begin(), gradient_swaps[r].end());
    last = ranks_.graph().add(ranks_.task_name(r, "gradients_on_nvme"), phase::kOptimizer, BarrierTask{}, swapped);
    if (r == 0) out.spans.push_back({phase::kNvmeGradientFlush, ready, last, true});
  }
  for (std::size_t j = 0; j < subgroups.size(); ++j) {
    const std::int64_t n = subgroups[j];
    const std::string name = fmt::format(FMT_COMPILE("subgroup{}"), j);
    if (j < cpu_subgroups) {
      std::vector<TaskId> adam_deps{last};
      if (off.nvme) {
        const Bytes in_bytes{n * (kOptimizerStateBytesPerParam + kFp32Bytes)};
        const TaskId read = prefetched ? *prefetched : swap(r, name + ".swap_in", false, in_bytes, {last});
        adam_deps.push_back(read);
        prefetched.reset();
        if (off.pipeline_read && j + 1 < cpu_subgroups) {
          const Bytes next_bytes{subgroups[j + 1] * (kOptimizerStateBytesPerParam + kFp32Bytes)};
          prefetched = swap(r, fmt::format(FMT_COMPILE("subgroup{}.swap_in"), j + 1), false, next_bytes, {read});
        }
      }
      const TaskId step = host_traffic(r, name + ".cpu_adam", phase::kOptimizer,
                                       Bytes{n * kHostAdamTrafficBytesPerParam}, cpu_adam_bound, adam_deps);
      const TaskId down = host_traffic(r, name + ".cpu_downcast", phase::kOptimizer,
                                       Bytes{n * (kFp32Bytes + kBf16Bytes)}, cpu_downcast_bound, {step});
      std::vector<TaskId> copy_deps{down};
      if (off.nvme) {
        nvme_writes.push_back(swap(r, name + ".swap_out", true, Bytes{n * kOptimizerStateBytesPerParam}, {step}));
        if (!off.pipeline_write) copy_deps.push_back(nvme_writes.back());
      }
      // With parameter offload the down-cast writes the host partition: nothing goes back.
      last = parameter_offload ? ranks_.graph().add(ranks_.task_name(r, name + ".params_on_host"), phase::kOptimizer,
                                                    BarrierTask{}, copy_deps)
                               : copy(r, name + ".h2d_params", phase::kOptimizer, false, Bytes{n * kBf16Bytes},
                                      copy_deps, copy_back_pinned);
      if (j == 0) first_step = step;
    } else {
      last = ranks_.compute(r, name + ".gpu_adam", phase::kOptimizer,
                            in.costs.memory_bound_time(Bytes{n * kAdamTrafficBytesPerParam}), {}, "adam", {last});
      if (j == 0) first_step = last;
    }
  }
  if (!nvme_writes.empty()) {
    nvme_writes.push_back(last);
    last = ranks_.graph().add(ranks_.task_name(r, "states_on_nvme"), phase::kOptimizer, BarrierTask{}, nvme_writes);
  }
  return last;
}

}  // namespace offsim::models
