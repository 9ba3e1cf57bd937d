// The strategy readers of kind: data_parallel (ZeRO 0-3, offload, tp, ep, hierarchical
// partitioning) and its steps, and of kind: deepspeed (a ds_config mapped onto data_parallel);
// parse_strategy (sections.cpp) calls them through strategy_kinds().
#include <fmt/format.h>

#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "models/experiment/defaults.hpp"
#include "models/experiment/section_helpers.hpp"
#include "models/experiment/sections.hpp"
#include "models/experiment/torchtitan_section.hpp"
#include "models/strategies/partitioning_parser.hpp"
#include "models/strategies/value_ranges.hpp"

namespace offsim::models::detail {

using sim::config::check_range;
using sim::config::Context;
using sim::config::MapReader;
using sim::config::Node;

namespace {

// Optimizer offload moves states to the CPU nearest each rank in its node (nearest_cpu, as the
// data-parallel builder picks it), whose memory must have a capacity and a
// bandwidth shared by transfers, and with NVMe to an NVMe device of the node with a capacity.
// Reports the first rank whose node lacks one, at `at` (offload_optimizer.device).
void check_offload_hosts(Context& ctx, const topo::Topology& t, const DataParallelSpec& dp,
                         const sim::config::Location& at) {
  const std::string path = "strategy.offload_optimizer.device";
  for (const auto& name : dp.devices) {
    const auto gpu = t.find_device(name);
    if (!gpu) continue;  // reported with the devices
    const int node = t.device(*gpu).node;
    std::optional<std::size_t> cpu;
    try {
      cpu = nearest_cpu(t, *gpu);
    } catch (const topo::TopologyError& e) {  // the builder would stop there too
      ctx.error(at, path, e.what());
      return;
    }
    if (!cpu) {
      ctx.error(at, path, fmt::format("'{}' has no CPU in its node to offload to", name));
      return;
    }
    const auto& memory = t.device(*cpu).memory;
    if (!memory || !memory->bandwidth) {
      ctx.error(at, path,
                fmt::format("offload needs the memory of '{}' (the CPU of '{}') with a capacity and a bandwidth "
                            "shared by transfers (memory: {{..., shared_by_transfers: true}})",
                            t.device(*cpu).name, name));
      return;
    }
    if (dp.offload->nvme) {
      bool found = false;
      for (const auto d : t.devices_of(topo::DeviceKind::kNvme)) {
        if (t.device(d).node == node && t.device(d).memory) found = true;
      }
      if (!found) {
        ctx.error(at, path, fmt::format("the node of '{}' has no NVMe device with a memory capacity", name));
        return;
      }
    }
  }
}

// data_parallel's offload_optimizer and offload_param; returns where the offload device is given
// (the location of the checks that need the machine).
sim::config::Location read_offload(const Node& node, MapReader& r, const sim::config::Located<int>& stage,
                                   const sim::config::Located<std::string>& runtime, DataParallelSpec& dp) {
  auto& ctx = node.context();
  sim::config::Location offload_at = node.location();
  // What the stage partitions (nullopt: an invalid stage, reported already).
  const auto partitioned = stage.valid ? ZeroPolicy::partitioning_if_valid(stage.value) : std::nullopt;
  if (auto off = r.child("offload_optimizer")) {
    MapReader o(*off);
    const auto device = o.choice("device", {"cpu", "nvme", "none"});
    offload_at = device.loc;
    OptimizerOffload offload;
    offload.pin_memory = o.required<bool>("pin_memory").value;
    auto ratio = o.optional<double>("ratio", 1.0);
    if (ratio.valid)
      ratio.valid = check_range(ctx, ratio.loc, off->child_path("ratio"), ratio.value, ranges::kOffloadRatio);
    if (ratio.valid && stage.valid) {
      if (auto why = ranges::twin_flow_problem(stage.value, device.value == "nvme", ratio.value)) {
        ctx.error(ratio.loc, off->child_path("ratio"), *why);
      }
    }
    offload.ratio = ratio.value;
    const auto sub = o.required<std::int64_t>("sub_group_size");
    if (sub.valid) {
      (void)check_range(ctx, sub.loc, off->child_path("sub_group_size"), static_cast<double>(sub.value),
                        ranges::kSubGroupElements);
    }
    offload.sub_group_size = sub.value;
    if (runtime.valid && runtime.value != "deepspeed-0.13" && runtime.value != "deepspeed-0.16") {
      ctx.error(
          runtime.loc, node.child_path("runtime"),
          fmt::format("optimizer offload is modelled for deepspeed-0.13 and deepspeed-0.16, got {}", runtime.value));
    }
    offload.runtime = runtime.value == "deepspeed-0.16" ? Runtime::kDeepSpeed016 : Runtime::kDeepSpeed013;
    if (device.value == "nvme") {
      offload.nvme = true;
      offload.pipeline_read = o.required<bool>("pipeline_read").value;
      offload.pipeline_write = o.required<bool>("pipeline_write").value;
      const auto buffers = o.required<int>("buffer_count");
      if (buffers.valid) {
        (void)check_range(ctx, buffers.loc, off->child_path("buffer_count"), buffers.value, ranges::kNvmeBufferCount);
      }
      offload.buffer_count = buffers.value;
      if (partitioned && !partitioned->parameters) {
        ctx.error(
            device.loc, off->child_path("device"),
            fmt::format("NVMe optimizer offload is implemented for zero_stage 3, got zero_stage {}", stage.value));
      }
      dp.offload = offload;
    }
    if (device.value == "cpu") {
      if (partitioned && !partitioned->gradients) {
        ctx.error(
            device.loc, off->child_path("device"),
            fmt::format("optimizer offload is implemented for zero_stage 2 and 3, got zero_stage {}", stage.value));
      }
      dp.offload = offload;
    }
  }
  if (auto op = r.child("offload_param")) {
    MapReader o(*op);
    const auto device = o.choice("device", {"cpu", "none"});
    const auto pin = o.required<bool>("pin_memory");
    if (device.valid && device.value == "cpu") {
      if (partitioned && !partitioned->parameters) {
        ctx.error(device.loc, op->child_path("device"),
                  fmt::format("parameter offload needs zero_stage 3, got zero_stage {}", stage.value));
      } else if (!dp.offload) {
        ctx.error(device.loc, op->child_path("device"), ranges::kParamOffloadNeedsOptimizerOffload);
      }
      dp.offload_param = true;
      dp.param_pin_memory = pin.value;
    }
  }
  return offload_at;
}

// data_parallel's ZeRO-3 keys: the persistence threshold (DeepSpeed's default at stage 3, named
// through `ds_default`), the fetch mode and the host's per-fetch costs.
template <class NameDefault>
void read_zero3_keys(const Node& node, MapReader& r, const sim::config::Located<int>& stage, const std::string& runtime,
                     DataParallelSpec& dp, const NameDefault& ds_default, std::vector<std::string>& defaults_applied) {
  auto& ctx = node.context();
  // Used at stage 3 only; DeepSpeed's default there (recorded in the effective configuration).
  const auto partitioned = stage.valid ? ZeroPolicy::partitioning_if_valid(stage.value) : std::nullopt;
  const bool stage3 = partitioned && partitioned->parameters;
  if (stage3 && !r.has("param_persistence_threshold")) {
    ds_default("param_persistence_threshold", fmt::format("{}", DataParallelSpec::kDeepSpeedPersistenceThreshold));
  }
  const auto threshold = r.optional<std::int64_t>("param_persistence_threshold",
                                                  stage3 ? DataParallelSpec::kDeepSpeedPersistenceThreshold : 0);
  if (threshold.valid) {
    (void)check_range(ctx, threshold.loc, node.child_path("param_persistence_threshold"),
                      static_cast<double>(threshold.value), ranges::kPersistenceThreshold);
  }
  dp.param_persistence_threshold = threshold.value;
  // Left out at stage 3: the DeepSpeed release's (configs/defaults.yaml, deepspeed_runtimes), named
  // in the report where it moves a result (blocking fetch, a host table).
  const std::string runtime_key = "deepspeed_runtimes." + runtime;
  const std::string& default_fetch = defaults::text(runtime_key + ".zero3_fetch");
  const std::string& default_host = defaults::text(runtime_key + ".zero3_host");
  const auto fetch = r.choice("zero3_fetch", {"prefetch", "blocking"}, stage3 ? default_fetch : "prefetch");
  // (absent, `fetch` holds the default and is not `valid`)
  if (fetch.value == "blocking") {
    if (!stage3 && fetch.valid) ctx.error(fetch.loc, node.child_path("zero3_fetch"), "applies to zero_stage 3 only");
    dp.zero3_fetch = DataParallelSpec::Fetch::kBlocking;
  }
  // (child, not has: a key given with --set counts as given)
  const bool fetch_given = r.child("zero3_fetch").has_value();
  const bool host_given = r.child("zero3_host").has_value();
  if (stage3 && !fetch_given && default_fetch != "prefetch") {
    defaults_applied.push_back(fmt::format("strategy.zero3_fetch={} ({}'s stage 3)", default_fetch, runtime));
  }
  if (stage3 && !host_given && default_host != "none") {
    dp.zero3_host = defaults::zero3_host_table(default_host);
    defaults_applied.push_back(
        fmt::format("strategy.zero3_host={} ({}'s stage-3 host launch costs)", default_host, runtime));
  }
  auto host = r.child("zero3_host");
  if (host && host->is_scalar()) {
    // `zero3_host: none`: the opt-out from the release's table.
    if (host->as<std::string>() != "none") {
      ctx.error(host->location(), host->path(),
                "expected a host launch table (!include ../calibration/x.yaml) or \"none\"");
    }
    if (!stage3) ctx.error(host->location(), host->path(), "applies to zero_stage 3 only");
    host.reset();
  }
  if (host) {
    if (!stage3) ctx.error(host->location(), host->path(), "applies to zero_stage 3 only");
    MapReader h(*host);
    DataParallelSpec::FetchHostCost cost;
    cost.name = h.required<std::string>("name").value;
    (void)h.required<std::string>("source");
    (void)h.optional<std::string>("derivation", "");
    const auto launch = [&](const char* key) {
      DataParallelSpec::HostLaunchCost c;
      if (auto n = h.required_child(key, "mapping")) {
        MapReader l(*n);
        c.fixed = l.required<sim::TimePs>("fixed").value;
        c.per_rank = l.required<sim::TimePs>("per_rank").value;
      }
      return c;
    };
    cost.all_gather = launch("all_gather");
    cost.reduce_scatter = launch("reduce_scatter");
    dp.zero3_host = cost;
  }
}

// What step 1 of read_data_parallel read that the later steps check against.
struct DataParallelDegrees {
  sim::config::Located<int> stage;   // zero_stage
  sim::config::Located<int> degree;  // dp
  sim::config::Located<int> ep;
  int rank_count = 0;  // tp x dp (0 when dp is invalid)
  bool tp_ok = false;  // whether the model splits over tp
};

// Step 1 of read_data_parallel: the ZeRO stage (DeepSpeed's default when absent), dp, tp
// (Megatron-DeepSpeed's tensor parallelism under ZeRO: dp replicas of tp ranks each), sequence
// parallelism and ep (experts over ep consecutive ranks, for mixture-of-experts models).
template <class NameDefault>
DataParallelDegrees read_dp_degrees(const Node& node, MapReader& r, TrainingFromStrategy* training,
                                    DataParallelSpec& dp, const NameDefault& ds_default, const char* stage_default) {
  auto& ctx = node.context();
  DataParallelDegrees out;
  if (!r.has("zero_stage")) ds_default("zero_stage", defaults::text(stage_default));
  out.stage = r.optional<int>("zero_stage", static_cast<int>(defaults::integer(stage_default)));
  const auto& stage = out.stage;
  if (stage.valid) (void)check_range(ctx, stage.loc, node.child_path("zero_stage"), stage.value, ranges::kZeroStage);
  dp.zero_stage = stage.value;
  out.degree = r.required<int>("dp");
  const auto& degree = out.degree;
  const auto tp = r.optional<int>("tp", 1);
  if (tp.valid && tp.value < 1)
    ctx.error(tp.loc, node.child_path("tp"), fmt::format("expected >= 1, got {}", tp.value));
  dp.tp = std::max(1, tp.value);
  if (training) training->tp_at = tp.loc;
  out.tp_ok = tp_splits_model(ctx, training, dp.tp, tp.loc);
  dp.sequence_parallel = r.optional<bool>("sequence_parallel", false).value;
  out.ep = r.optional<int>("ep", 1);
  const auto& ep = out.ep;
  if (ep.valid && (ep.value < 1 || (degree.valid && degree.value % ep.value != 0))) {
    ctx.error(ep.loc, node.child_path("ep"),
              fmt::format("expected a divisor of dp ({}), got {}", degree.valid ? degree.value : 0, ep.value));
  }
  dp.ep = std::max(1, ep.value);
  if (training) training->ep_at = ep.loc;
  out.rank_count = degree.valid ? checked_ranks(ctx, degree.loc, node.child_path("dp"), {degree.value, dp.tp},
                                                fmt::format("tp x dp = {} x {}", dp.tp, degree.value))
                                : 0;
  return out;
}

// Step 2 of read_data_parallel: the gradients' bucket size, overlap_comm (DeepSpeed's defaults
// when absent) and DeepSpeed's data_types.grad_accum_dtype: fp32 at stages 0-1 is its
// BF16_Optimizer; bf16 at stage 0 stands for 16-bit gradients with a replicated optimizer
// (FP16_Optimizer, PyTorch DDP).
template <class NameDefault>
void read_dp_gradients(const Node& node, MapReader& r, const std::optional<ZeroPartitioning>& partitioned,
                       DataParallelSpec& dp, const NameDefault& ds_default) {
  auto& ctx = node.context();
  if (!r.has("reduce_bucket_elements"))
    ds_default("reduce_bucket_elements", defaults::text("deepspeed.reduce_bucket_size"));
  const auto bucket =
      r.optional<std::int64_t>("reduce_bucket_elements", defaults::integer("deepspeed.reduce_bucket_size"));
  if (bucket.valid) {
    (void)check_range(ctx, bucket.loc, node.child_path("reduce_bucket_elements"), static_cast<double>(bucket.value),
                      ranges::kReduceBucketElements);
  }
  dp.reduce_bucket_elements = bucket.value;
  if (r.has("overlap_comm")) {
    dp.overlap_comm = r.required<bool>("overlap_comm").value;
  } else {
    // DeepSpeed's overlap_comm_valid: None -> True iff stage 3.
    dp.overlap_comm = partitioned && ZeroPolicy::deepspeed_default_overlap_comm(*partitioned);
    ds_default("overlap_comm", dp.overlap_comm ? "true" : "false");
  }
  if (r.has("grad_accum_dtype")) {
    const auto accum = r.choice("grad_accum_dtype", {"fp32", "bf16"});
    if (accum.valid) {
      dp.fp32_grad_accum = accum.value == "fp32";
      if (*dp.fp32_grad_accum && partitioned && partitioned->gradients) {
        ctx.error(accum.loc, node.child_path("grad_accum_dtype"),
                  "fp32 gradient accumulation is modelled at zero_stage 0-1 (DeepSpeed's BF16_Optimizer); stages 2-3 "
                  "keep bf16 gradient partitions");
      }
    }
  }
}

// Step 4 of read_data_parallel: FSDP's MixedPrecision.reduce_dtype, DeepSpeed's
// communication_data_type: at stages 2-3, where the gradient partitions are reduce-scattered; at
// 0-1 the reduction follows grad_accum_dtype. Returns where fp32 reduction is asked for.
std::optional<sim::config::Location> read_gradient_reduce_dtype(const Node& node, MapReader& r,
                                                                const std::optional<ZeroPartitioning>& partitioned,
                                                                DataParallelSpec& dp) {
  auto& ctx = node.context();
  std::optional<sim::config::Location> fp32_reduce_at;
  if (r.has("gradient_reduce_dtype")) {
    const auto reduce = r.choice("gradient_reduce_dtype", {"fp32", "bf16"});
    if (reduce.valid && reduce.value == "fp32") {
      if (partitioned && !partitioned->gradients) {
        ctx.error(reduce.loc, node.child_path("gradient_reduce_dtype"),
                  "applies to zero_stage 2-3 (at stages 0-1 the reduction follows grad_accum_dtype)");
      }
      dp.fp32_gradient_reduce = true;
      fp32_reduce_at = reduce.loc;
    }
  }
  return fp32_reduce_at;
}

// Step 6 of read_data_parallel: the ranks' devices, listed (tp x dp of them) or, the documented
// default, the machine's GPUs in declaration order.
void place_dp_ranks(const Node& node, MapReader& r, const topo::Topology* topology, const DataParallelDegrees& d,
                    DataParallelSpec& dp) {
  auto& ctx = node.context();
  const auto& degree = d.degree;
  const int rank_count = d.rank_count;
  const std::vector<std::size_t> gpus =
      topology ? topology->devices_of(topo::DeviceKind::kGpu) : std::vector<std::size_t>{};
  if (auto devices = parse_devices(r, node, topology, false)) {
    dp.devices = std::move(*devices);
    if (degree.valid && degree.value < 1) {
      ctx.error(degree.loc, node.child_path("dp"), fmt::format("expected >= 1, got {}", degree.value));
    } else if (degree.valid && static_cast<int>(dp.devices.size()) != rank_count && d.tp_ok) {
      ctx.error(degree.loc, node.child_path("dp"),
                dp.tp == 1 ? fmt::format("the devices list {} ranks but dp is {}", dp.devices.size(), degree.value)
                           : fmt::format("the devices list {} ranks but tp x dp is {} x {} = {}", dp.devices.size(),
                                         dp.tp, degree.value, rank_count));
    }
  } else if (topology && degree.valid) {
    if (degree.value < 1 || static_cast<std::size_t>(rank_count) > gpus.size()) {
      if (degree.value < 1 || d.tp_ok) {  // (a tp the model cannot split over is reported at tp)
        ctx.error(degree.loc, node.child_path("dp"),
                  dp.tp == 1 ? fmt::format("expected 1 to {} (the machine's GPUs), got {}", gpus.size(), degree.value)
                             : fmt::format("tp x dp = {} x {} = {} ranks but the machine has {} GPUs", dp.tp,
                                           degree.value, rank_count, gpus.size()));
      }
    } else {
      for (int i = 0; i < rank_count; ++i) dp.devices.push_back(topology->device(gpus[i]).name);
    }
  }
}

// Step 7 of read_data_parallel: the hierarchical partitioning (ZeRO++, MiCS, 3-level), at
// zero_stage 3 without tp, over the ranks placed.
void read_dp_partitioning(const Node& node, MapReader& r, const sim::config::Located<int>& stage,
                          const std::optional<ZeroPartitioning>& partitioned, LevelSizes levels, DataParallelSpec& dp) {
  auto& ctx = node.context();
  if (auto part = r.child("partitioning")) {
    levels.ranks = static_cast<int>(dp.devices.size());
    if (dp.tp > 1) {
      ctx.error(part->location(), part->path(), "hierarchical partitioning together with tp > 1 is not modelled");
    } else if (partitioned && !partitioned->parameters) {
      ctx.error(part->location(), part->path(),
                fmt::format("hierarchical partitioning applies to zero_stage 3, got zero_stage {}", stage.value));
    } else if (levels.ranks > 0) {
      dp.partitioning = parse_partitioning(*part, levels);
    }
  }
}

// Step 6 of read_data_parallel: the ranks' devices, the collective options, and the compositions
// expert parallelism is not modelled in (refused at ep).
void place_dp_ranks_and_options(const Node& node, MapReader& r, const topo::Topology* topology,
                                const DataParallelDegrees& degrees, DataParallelSpec& dp) {
  auto& ctx = node.context();
  place_dp_ranks(node, r, topology, degrees, dp);
  dp.collectives = parse_collective_options(r);
  dp.all_ranks = parse_all_ranks(r);
  if (dp.ep > 1 && (dp.offload_param || r.has("partitioning"))) {
    const std::string why = dp.offload_param ? std::string(
                                                   "parameter offload (ZeRO-Infinity's fetch of each shard "
                                                   "from the host is sized by the shard group, not the "
                                                   "experts' own)")
                                             : std::string("a hierarchical partitioning");
    ctx.error(degrees.ep.loc, node.child_path("ep"),
              fmt::format("expert parallelism together with {} is not modelled", why));
  }
}

}  // namespace

// kind: data_parallel, ZeRO 0-3 with offload, tp, ep and partitionings; also read for an unknown kind.
std::optional<StrategySpec> read_data_parallel(const Node& node, MapReader& r, const topo::Topology* topology,
                                               TrainingFromStrategy* training, LevelSizes levels,
                                               std::size_t errors_before) {
  auto& ctx = node.context();
  DataParallelSpec dp;
  // Keys left out take DeepSpeed's defaults (configs/defaults.yaml), named in the report.
  std::vector<std::string> unused_defaults;
  std::vector<std::string>& defaults_applied = training ? training->defaults : unused_defaults;
  // training.framework: torchtitan: FSDP2 with torchtitan's defaults instead (torchtitan_section.hpp).
  const bool torchtitan = training && training->torchtitan;
  const auto ds_default = [&](const char* key, const std::string& value) {
    defaults_applied.push_back(
        torchtitan ? torchtitan_default(key, value)
                   : fmt::format("strategy.{}={} (DeepSpeed {}'s default)", key, value, defaults::deepspeed_version()));
  };
  const DataParallelDegrees degrees =
      read_dp_degrees(node, r, training, dp, ds_default, torchtitan ? "torchtitan.zero_stage" : "deepspeed.stage");
  const auto& stage = degrees.stage;
  if (torchtitan) {
    read_torchtitan_fsdp(node, r, stage, dp, defaults_applied);
    place_dp_ranks_and_options(node, r, topology, degrees, dp);
    if (ctx.error_count() != errors_before) return std::nullopt;
    return StrategySpec{dp};
  }
  // What the stage partitions (nullopt: an invalid stage, reported above).
  const auto partitioned = stage.valid ? ZeroPolicy::partitioning_if_valid(stage.value) : std::nullopt;
  read_dp_gradients(node, r, partitioned, dp, ds_default);
  // The DeepSpeed release whose mechanics run: stage 3's fetch and host costs, the offload path.
  // Left out, the release configs/defaults.yaml takes DeepSpeed's defaults from, named in the
  // report where it decides something (stage 3, offload).
  const std::string default_runtime = "deepspeed-" + defaults::deepspeed_version();
  const auto runtime = r.choice("runtime", defaults::deepspeed_runtimes(), default_runtime);
  // Step 3: the ZeRO-3 keys.
  read_zero3_keys(node, r, stage, runtime.value, dp, ds_default, defaults_applied);
  if (!r.child("runtime") && ((partitioned && partitioned->parameters) || r.has("offload_optimizer")))
    defaults_applied.push_back("strategy.runtime=" + default_runtime);
  const std::optional<sim::config::Location> fp32_reduce_at = read_gradient_reduce_dtype(node, r, partitioned, dp);
  // Step 5: the offload, which fp32 gradient reduction does not go with.
  const sim::config::Location offload_at = read_offload(node, r, stage, runtime, dp);
  if (fp32_reduce_at && dp.offload) {
    ctx.error(*fp32_reduce_at, node.child_path("gradient_reduce_dtype"),
              "fp32 gradient reduction is not modelled with optimizer offload (DeepSpeed's offload recipes move bf16 "
              "gradient partitions)");
  }
  place_dp_ranks_and_options(node, r, topology, degrees, dp);
  if (dp.offload && topology && !dp.devices.empty()) check_offload_hosts(ctx, *topology, dp, offload_at);
  read_dp_partitioning(node, r, stage, partitioned, levels, dp);
  if (ctx.error_count() != errors_before) return std::nullopt;
  return StrategySpec{dp};
}

// kind: deepspeed, a ds_config mapped onto data_parallel (deepspeed_config.hpp).
std::optional<StrategySpec> read_deepspeed(const Node& node, MapReader& r, const topo::Topology* topology,
                                           TrainingFromStrategy* training, LevelSizes levels,
                                           std::size_t errors_before) {
  auto& ctx = node.context();
  // The DeepSpeed release whose mechanics are simulated; left out, the release configs/defaults.yaml
  // takes DeepSpeed's defaults from.
  const std::string default_runtime = "deepspeed-" + defaults::deepspeed_version();
  if (!r.has("runtime") && training) training->defaults.push_back("strategy.runtime=" + default_runtime);
  const auto runtime = r.choice("runtime", {"deepspeed-0.13", "deepspeed-0.16"}, default_runtime);
  std::optional<Quantization> qwz, qgz;
  if (auto q = r.child("qwz")) qwz = parse_quantization_format(*q);
  if (auto q = r.child("qgz")) qgz = parse_quantization_format(*q);
  const auto degree = r.required<int>("dp");
  if (degree.valid && degree.value < 1) {
    ctx.error(degree.loc, node.child_path("dp"), fmt::format("expected >= 1, got {}", degree.value));
  }
  // Megatron-DeepSpeed's --tensor-model-parallel-size: dp replicas of tp ranks each.
  const auto tp = r.optional<int>("tp", 1);
  if (tp.valid && tp.value < 1)
    ctx.error(tp.loc, node.child_path("tp"), fmt::format("expected >= 1, got {}", tp.value));
  const int tp_size = std::max(1, tp.value);
  const sim::config::Location tp_at = tp.loc;
  const bool tp_ok = tp_splits_model(ctx, training, tp_size, tp_at);
  const int rank_count = degree.valid && degree.value >= 1
                             ? checked_ranks(ctx, degree.loc, node.child_path("dp"), {degree.value, tp_size},
                                             fmt::format("tp x dp = {} x {}", tp_size, degree.value))
                             : 0;
  std::vector<std::string> devices;
  if (auto d = parse_devices(r, node, topology, false)) {
    devices = std::move(*d);
  } else if (topology && degree.valid && degree.value >= 1) {
    const auto gpus = topology->devices_of(topo::DeviceKind::kGpu);
    for (int i = 0; i < rank_count && static_cast<std::size_t>(i) < gpus.size(); ++i) {
      devices.push_back(topology->device(gpus[i]).name);
    }
  }
  if (degree.valid && degree.value >= 1 && static_cast<int>(devices.size()) != rank_count && tp_ok) {
    ctx.error(degree.loc, node.child_path("dp"),
              tp_size == 1
                  ? fmt::format("dp is {} but {} devices are listed or available", degree.value, devices.size())
                  : fmt::format("tp x dp = {} x {} = {} ranks but {} devices are listed or available", tp_size,
                                degree.value, rank_count, devices.size()));
  }
  levels.ranks = static_cast<int>(devices.size());
  auto config = r.required_child("config", "a DeepSpeed ds_config (usually !include ../strategies/ds/x.json)");
  const auto collectives = parse_collective_options(r);
  const bool all_ranks = parse_all_ranks(r);
  if (levels.ranks < 1 && ctx.error_count() == errors_before) {
    ctx.error(node.location(), node.child_path("devices"), "expected at least one device");
  }
  if (!config || levels.ranks < 1) return std::nullopt;
  auto imported = import_deepspeed_config(
      *config, devices, levels, qwz, qgz,
      runtime.value == "deepspeed-0.16" ? Runtime::kDeepSpeed016 : Runtime::kDeepSpeed013, tp_size);
  if (!imported || ctx.error_count() != errors_before) return std::nullopt;
  imported->strategy.collectives = collectives;
  imported->strategy.all_ranks = all_ranks;
  if (training) {
    training->micro_batch = imported->micro_batch;
    training->grad_accum = imported->grad_accum;
    training->at = config->location();
    training->deepspeed = *imported;
    training->tp_at = tp_at;
  }
  return StrategySpec{imported->strategy};
}

}  // namespace offsim::models::detail
