#include "models/experiment.hpp"

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <map>
#include <optional>
#include <unordered_set>

#include "models/figures.hpp"
#include "models/strategies/deepspeed_config.hpp"
#include "models/strategies/partitioning_parser.hpp"
#include "models/transformer/model_parser.hpp"
#include "sim/report/json_writer.hpp"
#include "sim/report/text_table.hpp"
#include "sim/report/timeline.hpp"

namespace offsim::models {

using sim::config::Context;
using sim::config::MapReader;
using sim::config::Node;

namespace {

// The most ranks a strategy may ask for (tp x pp x dp): 14 x Frontier's 75,264 GCDs. A larger
// product is refused before it overflows (docs/fuzzing.md).
constexpr std::int64_t kMaxRanks = std::int64_t{1} << 20;
// The most micro-batches, and the largest micro-batch, of an iteration (a micro-batch of 65,536
// sequences is 30 times the GPT-3 175B global batch).
constexpr std::int64_t kMaxBatch = std::int64_t{1} << 16;

// The product of a strategy's parallel degrees (`what`: "tp x dp = 2 x 4"), or 0 with an error at
// `loc` when it exceeds kMaxRanks.
int checked_ranks(Context& ctx, const sim::config::Location& loc, const std::string& path,
                  std::initializer_list<int> factors, const std::string& what) {
  std::int64_t ranks = 1;
  for (const int f : factors) {
    ranks *= f;  // |ranks| <= 2^20 before, |f| < 2^31: no overflow
    if (ranks > kMaxRanks || ranks < -kMaxRanks) {
      ctx.error(loc, path, fmt::format("{}: more ranks than offsim simulates ({})", what, kMaxRanks));
      return 0;
    }
  }
  return static_cast<int>(ranks);
}

std::optional<TrainingSpec> parse_training(const Node& node, sim::config::Location* grad_accum_at) {
  auto& ctx = node.context();
  const std::size_t errors_before = ctx.error_count();
  MapReader r(node);
  TrainingSpec t;
  const auto mb = r.required<std::int64_t>("micro_batch");
  const auto ga = r.required<std::int64_t>("grad_accum");
  if (mb.valid && mb.value < 1) ctx.error(mb.loc, node.child_path("micro_batch"), "expected a positive integer");
  if (ga.valid && ga.value < 1) ctx.error(ga.loc, node.child_path("grad_accum"), "expected a positive integer");
  for (const auto& [v, key] : {std::pair{mb, "micro_batch"}, std::pair{ga, "grad_accum"}}) {
    if (v.valid && v.value > kMaxBatch) {
      ctx.error(v.loc, node.child_path(key),
                fmt::format("expected at most {} (offsim's limit), got {}", kMaxBatch, v.value));
    }
  }
  t.micro_batch = mb.value;
  t.grad_accum = ga.value;
  if (grad_accum_at) *grad_accum_at = ga.loc;
  (void)r.choice("precision", {"bf16"});
  const std::string recompute = r.choice("recompute", {"none", "selective", "full"}).value;
  t.recompute = recompute == "full"        ? Recompute::kFull
                : recompute == "selective" ? Recompute::kSelective
                                           : Recompute::kNone;
  t.flash_attention = r.required<bool>("flash_attention").value;
  if (ctx.error_count() != errors_before) return std::nullopt;
  return t;
}

// The ranks' devices: `devices` (explicit), or `devices_per_node`, the same local order on every
// node of the machine (named n<k>.<device> when it has several nodes), nodes in order. nullopt
// when neither key is given (an error too when `required`).
std::optional<std::vector<std::string>> parse_devices(MapReader& r, const Node& node, const topo::Topology* topology,
                                                      bool required) {
  auto& ctx = node.context();
  std::vector<std::string> out;
  std::unordered_set<std::size_t> listed;  // device indices: the duplicate check stays linear
  constexpr std::size_t kGpusNamed = 8;    // how many GPU names an error lists
  // Whether `name` is a GPU of the machine not listed before; reports the first problem at `item`.
  const auto check = [&](const Node& item, const std::string& name) {
    if (!topology) return true;
    const auto d = topology->find_device(name);
    if (!d || topology->device(*d).kind != topo::DeviceKind::kGpu) {
      std::vector<std::string> names;
      for (const auto g : topology->devices_of(topo::DeviceKind::kGpu)) {
        if (names.size() == kGpusNamed) {
          names.push_back("...");
          break;
        }
        names.push_back(topology->device(g).name);
      }
      ctx.error(item.location(), item.path(),
                fmt::format("expected a GPU of the machine ({}), got \"{}\"", fmt::join(names, ", "), name));
      return false;
    }
    if (!listed.insert(*d).second) {
      ctx.error(item.location(), item.path(), fmt::format("device \"{}\" is listed twice", name));
      return false;
    }
    return true;
  };
  if (auto list = r.child("devices")) {
    for (const auto& item : list->items()) {
      if (auto name = item.as<std::string>()) {
        check(item, *name);
        out.push_back(*name);
      }
    }
    return out;
  }
  auto local = required ? r.required_child("devices_per_node", "a list of a node's GPUs (or give devices)")
                        : r.child("devices_per_node");
  if (!local) return std::nullopt;
  int nodes = 1;
  if (topology) {
    for (const auto& d : topology->devices()) nodes = std::max(nodes, d.node + 1);
  }
  // Each entry is checked once per node, and a bad entry is reported once (on the first node
  // where it fails), not once per node.
  const std::vector<Node> items = local->items();
  if (topology) {
    // A longer list repeats a GPU on every node: refused before nodes x entries names are made.
    std::size_t node_gpus = 0;
    for (const auto g : topology->devices_of(topo::DeviceKind::kGpu)) {
      if (topology->device(g).node == 0) ++node_gpus;
    }
    if (items.size() > node_gpus) {
      ctx.error(local->location(), local->path(),
                fmt::format("{} entries, but a node of the machine has {} GPUs", items.size(), node_gpus));
      return std::nullopt;
    }
  }
  std::vector<std::optional<std::string>> names;  // read once: a non-string entry is one error
  for (const auto& item : items) names.push_back(item.as<std::string>());
  std::vector<bool> reported(items.size(), false);
  for (int n = 0; n < nodes; ++n) {
    for (std::size_t i = 0; i < items.size(); ++i) {
      const auto& name = names[i];
      if (!name) continue;
      const std::string full = nodes > 1 ? fmt::format("n{}.{}", n, *name) : *name;
      if (!reported[i]) {
        const std::size_t errors = ctx.error_count();
        check(items[i], full);
        reported[i] = ctx.error_count() != errors;
      } else if (topology) {
        if (const auto d = topology->find_device(full)) listed.insert(*d);
      }
      out.push_back(full);
    }
  }
  return out;
}

// `cost:` {currency, price_per_node_hour: {value, source}, power_per_node: {watts, source},
// token_budget}: every number with its source, as everywhere else.
std::optional<CostSpec> parse_cost(const Node& node) {
  auto& ctx = node.context();
  const std::size_t errors_before = ctx.error_count();
  MapReader r(node);
  CostSpec c;
  const auto positive = [&](const sim::config::Located<double>& v, const std::string& path) {
    if (v.valid && !(v.value > 0.0)) ctx.error(v.loc, path, fmt::format("expected a positive number, got {}", v.value));
  };
  if (auto price = r.child("price_per_node_hour")) {
    MapReader p(*price);
    const auto value = p.required<double>("value");
    positive(value, price->child_path("value"));
    (void)p.required<std::string>("source");
    c.price_per_node_hour = value.value;
    c.currency = r.required<std::string>("currency").value;
  }
  if (auto power = r.child("power_per_node")) {
    MapReader p(*power);
    const auto watts = p.required<double>("watts");
    positive(watts, power->child_path("watts"));
    (void)p.required<std::string>("source");
    c.power_per_node_w = watts.value;
  }
  if (r.has("token_budget")) {
    const auto budget = r.required<double>("token_budget");
    positive(budget, node.child_path("token_budget"));
    c.token_budget = budget.value;
  }
  if (ctx.error_count() != errors_before) return std::nullopt;
  return c;
}

// Training values a strategy section may carry (a DeepSpeed config's batch settings).
struct TrainingFromStrategy {
  std::optional<std::int64_t> micro_batch;
  std::optional<std::int64_t> grad_accum;
  sim::config::Location at;
  std::optional<DeepSpeedImport> deepspeed;  // for its "auto" sizes, resolved with the model
  // Where the strategy gives its degrees, for the checks that need the model (check_against_model).
  sim::config::Location tp_at, pp_at, ep_at;
  bool collective = false;  // kind: collective, which has no model or training (even when invalid)
};

// What a strategy asks of the model's shape: tensor parallelism splits heads and MLP widths,
// pipelines split layers, expert parallelism splits experts. Checked once both are read, so that
// each mismatch is located at the strategy's key (the strategy builders assume them).
void check_against_model(Context& ctx, const StrategySpec& strategy, const ModelSpec& m, const TrainingSpec& training,
                         const TrainingFromStrategy& at, const sim::config::Location& grad_accum_at) {
  const auto tensor_parallel = [&](int tp) {
    if (tp <= 1) return;
    if (const auto uneven = widths_not_dividing(m, tp); !uneven.empty()) {
      ctx.error(at.tp_at, "strategy.tp",
                fmt::format("the model does not split over tp = {} ranks: {} must divide by it", tp,
                            fmt::join(uneven, ", ")));
    }
  };
  if (const auto* dp = std::get_if<DataParallelSpec>(&strategy)) {
    tensor_parallel(dp->tp);
    if (dp->ep > 1 && (!m.moe() || m.experts % dp->ep != 0)) {
      ctx.error(at.ep_at, "strategy.ep",
                m.moe() ? fmt::format("the model's {} experts do not divide by ep = {}", m.experts, dp->ep)
                        : fmt::format("expert parallelism (ep = {}) needs a mixture-of-experts model; {} is dense",
                                      dp->ep, m.name));
    }
  }
  if (const auto* mg = std::get_if<MegatronSpec>(&strategy)) {
    tensor_parallel(mg->tp);
    const std::int64_t chunks = std::int64_t{mg->pp} * std::max(1, mg->virtual_stages);
    if (chunks > 0 && m.layers % chunks != 0) {
      ctx.error(at.pp_at, "strategy.pp",
                mg->virtual_stages > 1
                    ? fmt::format("{} layers do not split into pp x virtual_stages = {} x {} = {} equal chunks",
                                  m.layers, mg->pp, mg->virtual_stages, chunks)
                    : fmt::format("{} layers do not split into pp = {} equal stages", m.layers, mg->pp));
    }
    if (mg->virtual_stages > 1 && mg->pp > 0 && training.grad_accum % mg->pp != 0) {
      ctx.error(grad_accum_at, "training.grad_accum",
                fmt::format("the interleaved schedule needs micro-batches divisible by pp ({}), got {}", mg->pp,
                            training.grad_accum));
    }
  }
}

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

// kind: collective, one collective over the listed ranks.
std::optional<StrategySpec> read_collective(const Node& node, MapReader& r, const topo::Topology* topology,
                                            TrainingFromStrategy* training, LevelSizes levels,
                                            std::size_t errors_before) {
  auto& ctx = node.context();
  if (training) training->collective = true;
  CollectiveSpec c;
  const std::string op = r.choice("operation", {"all_gather", "reduce_scatter", "all_reduce"}).value;
  c.operation = op == "reduce_scatter" ? CollectiveKind::kReduceScatter
                : op == "all_reduce"   ? CollectiveKind::kAllReduce
                                       : CollectiveKind::kAllGather;
  c.bytes = r.required<sim::Bytes>("bytes").value;
  c.devices = parse_devices(r, node, topology, true).value_or(std::vector<std::string>{});
  if (c.devices.size() < 2 && ctx.error_count() == errors_before) {
    ctx.error(node.location(), node.child_path("devices"), "a collective needs at least two ranks");
  }
  levels.ranks = static_cast<int>(c.devices.size());
  if (levels.ranks > 0) {
    if (auto plan = parse_collective_plan(r, node, levels, c.operation == CollectiveKind::kAllReduce)) c.plan = *plan;
  }
  c.options = parse_collective_options(r);
  c.all_ranks = parse_all_ranks(r);
  if (ctx.error_count() != errors_before) return std::nullopt;
  return StrategySpec{c};
}

// kind: deepspeed, a ds_config mapped onto data_parallel (deepspeed_config.hpp).
std::optional<StrategySpec> read_deepspeed(const Node& node, MapReader& r, const topo::Topology* topology,
                                           TrainingFromStrategy* training, LevelSizes levels,
                                           std::size_t errors_before) {
  auto& ctx = node.context();
  const auto runtime = r.choice("runtime", {"deepspeed-0.13", "deepspeed-0.16"});
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
  if (degree.valid && degree.value >= 1 && static_cast<int>(devices.size()) != rank_count) {
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

// kind: megatron, 3D parallelism.
std::optional<StrategySpec> read_megatron(const Node& node, MapReader& r, const topo::Topology* topology,
                                          TrainingFromStrategy* training, LevelSizes /*levels*/,
                                          std::size_t errors_before) {
  auto& ctx = node.context();
  MegatronSpec mg;
  const auto positive = [&](const char* key, sim::config::Location* at) {
    const auto v = r.required<int>(key);
    if (v.valid && v.value < 1) ctx.error(v.loc, node.child_path(key), fmt::format("expected >= 1, got {}", v.value));
    if (at) *at = v.loc;
    return v.value;
  };
  mg.tp = positive("tp", training ? &training->tp_at : nullptr);
  mg.pp = positive("pp", training ? &training->pp_at : nullptr);
  mg.dp = positive("dp", nullptr);
  const auto schedule = r.choice("schedule", {"1f1b", "interleaved"});
  if (schedule.valid && schedule.value == "interleaved") {
    const auto v = r.required<int>("virtual_stages");
    if (v.valid && v.value < 2) {
      ctx.error(v.loc, node.child_path("virtual_stages"),
                fmt::format("expected >= 2 for interleaved, got {}", v.value));
    }
    mg.virtual_stages = v.value;
  } else if (auto v = r.child("virtual_stages")) {
    // Left from an interleaved configuration (--set strategy.schedule=1f1b): named, not an error.
    ctx.warning(v->location(), v->path(), "ignored: the 1f1b schedule has one stage per rank");
  }
  mg.sequence_parallel = r.required<bool>("sequence_parallel").value;
  const auto zero = r.required<int>("zero_stage");
  if (zero.valid && zero.value != 0 && zero.value != 1) {
    ctx.error(zero.loc, node.child_path("zero_stage"),
              fmt::format("expected 0 or 1 (Megatron's distributed optimizer) with pipelines, got {}", zero.value));
  }
  mg.zero_stage = zero.value;
  mg.collectives = parse_collective_options(r);
  mg.all_ranks = parse_all_ranks(r);
  mg.all_micro_batches = r.choice("simulate_micro_batches", {"steady_state", "all"}, "steady_state").value == "all";
  const auto ranks = static_cast<std::size_t>(
      checked_ranks(ctx, node.location(), node.path(), {std::max(1, mg.tp), std::max(1, mg.pp), std::max(1, mg.dp)},
                    fmt::format("tp x pp x dp = {} x {} x {}", mg.tp, mg.pp, mg.dp)));
  if (auto devices = parse_devices(r, node, topology, false)) {
    mg.devices = std::move(*devices);
    if (mg.devices.size() != ranks && ctx.error_count() == errors_before) {
      ctx.error(node.location(), node.child_path("devices"),
                fmt::format("tp x pp x dp = {} ranks but the devices list {}", ranks, mg.devices.size()));
    }
  } else if (topology) {
    const auto gpus = topology->devices_of(topo::DeviceKind::kGpu);
    if (ranks > gpus.size()) {
      ctx.error(node.location(), node.path(),
                fmt::format("tp x pp x dp = {} ranks but the machine has {} GPUs", ranks, gpus.size()));
    } else {
      for (std::size_t i = 0; i < ranks; ++i) mg.devices.push_back(topology->device(gpus[i]).name);
    }
  }
  if (ctx.error_count() != errors_before) return std::nullopt;
  return StrategySpec{mg};
}

// data_parallel's offload_optimizer and offload_param; returns where the offload device is given
// (the location of the checks that need the machine).
sim::config::Location read_offload(const Node& node, MapReader& r, const sim::config::Located<int>& stage,
                                   DataParallelSpec& dp) {
  auto& ctx = node.context();
  sim::config::Location offload_at = node.location();
  if (auto off = r.child("offload_optimizer")) {
    MapReader o(*off);
    const auto device = o.choice("device", {"cpu", "nvme", "none"});
    offload_at = device.loc;
    OptimizerOffload offload;
    offload.pin_memory = o.required<bool>("pin_memory").value;
    const auto ratio = o.optional<double>("ratio", 1.0);
    if (ratio.valid && !(ratio.value > 0.0 && ratio.value <= 1.0)) {
      ctx.error(ratio.loc, off->child_path("ratio"), fmt::format("expected a fraction in (0, 1], got {}", ratio.value));
    }
    offload.ratio = ratio.value;
    const auto sub = o.required<std::int64_t>("sub_group_size");
    if (sub.valid && sub.value < 1)
      ctx.error(sub.loc, off->child_path("sub_group_size"), "expected a positive integer");
    offload.sub_group_size = sub.value;
    const auto runtime = r.choice("runtime", {"deepspeed-0.13", "deepspeed-0.16"});
    offload.runtime = runtime.value == "deepspeed-0.16" ? Runtime::kDeepSpeed016 : Runtime::kDeepSpeed013;
    if (device.value == "nvme") {
      offload.nvme = true;
      offload.pipeline_read = o.required<bool>("pipeline_read").value;
      offload.pipeline_write = o.required<bool>("pipeline_write").value;
      const auto buffers = o.required<int>("buffer_count");
      if (buffers.valid && buffers.value < 1) {
        ctx.error(buffers.loc, off->child_path("buffer_count"), "expected a positive count");
      }
      offload.buffer_count = buffers.value;
      if (stage.valid && stage.value != 3) {
        ctx.error(
            device.loc, off->child_path("device"),
            fmt::format("NVMe optimizer offload is implemented for zero_stage 3, got zero_stage {}", stage.value));
      }
      if (ratio.valid && ratio.value != 1.0) {
        ctx.error(ratio.loc, off->child_path("ratio"), "Twin-Flow with an NVMe tier is not modelled");
      }
      dp.offload = offload;
    }
    if (device.value == "cpu") {
      if (stage.valid && stage.value != 2 && stage.value != 3) {
        ctx.error(
            device.loc, off->child_path("device"),
            fmt::format("optimizer offload is implemented for zero_stage 2 and 3, got zero_stage {}", stage.value));
      }
      if (stage.valid && stage.value == 2 && ratio.valid && ratio.value != 1.0) {
        ctx.error(ratio.loc, off->child_path("ratio"), "Twin-Flow (ratio < 1) is a ZeRO-3 feature in DeepSpeed");
      }
      dp.offload = offload;
    }
  }
  if (auto op = r.child("offload_param")) {
    MapReader o(*op);
    const auto device = o.choice("device", {"cpu", "none"});
    const auto pin = o.required<bool>("pin_memory");
    if (device.valid && device.value == "cpu") {
      if (stage.valid && stage.value != 3) {
        ctx.error(device.loc, op->child_path("device"),
                  fmt::format("parameter offload needs zero_stage 3, got zero_stage {}", stage.value));
      } else if (!dp.offload) {
        ctx.error(device.loc, op->child_path("device"),
                  "parameter offload is modelled together with offload_optimizer (as ZeRO-Infinity runs it)");
      }
      dp.offload_param = true;
      dp.param_pin_memory = pin.value;
    }
  }
  return offload_at;
}

// kind: data_parallel, ZeRO 0-3 with offload, tp, ep and partitionings; also read for an unknown kind.
std::optional<StrategySpec> read_data_parallel(const Node& node, MapReader& r, const topo::Topology* topology,
                                               TrainingFromStrategy* training, LevelSizes levels,
                                               std::size_t errors_before) {
  auto& ctx = node.context();
  DataParallelSpec dp;
  const auto stage = r.required<int>("zero_stage");
  if (stage.valid && (stage.value < 0 || stage.value > 3)) {
    ctx.error(stage.loc, node.child_path("zero_stage"),
              fmt::format("expected one of {{0, 1, 2, 3}}, got {}", stage.value));
  }
  dp.zero_stage = stage.value;
  const auto degree = r.required<int>("dp");
  // Tensor parallelism under ZeRO (Megatron-DeepSpeed): dp replicas of tp ranks each.
  const auto tp = r.optional<int>("tp", 1);
  if (tp.valid && tp.value < 1)
    ctx.error(tp.loc, node.child_path("tp"), fmt::format("expected >= 1, got {}", tp.value));
  dp.tp = std::max(1, tp.value);
  if (training) training->tp_at = tp.loc;
  dp.sequence_parallel = r.optional<bool>("sequence_parallel", false).value;
  // Expert parallelism for mixture-of-experts models: experts over ep consecutive ranks.
  const auto ep = r.optional<int>("ep", 1);
  if (ep.valid && (ep.value < 1 || (degree.valid && degree.value % ep.value != 0))) {
    ctx.error(ep.loc, node.child_path("ep"),
              fmt::format("expected a divisor of dp ({}), got {}", degree.valid ? degree.value : 0, ep.value));
  }
  dp.ep = std::max(1, ep.value);
  if (training) training->ep_at = ep.loc;
  const int rank_count = degree.valid ? checked_ranks(ctx, degree.loc, node.child_path("dp"), {degree.value, dp.tp},
                                                      fmt::format("tp x dp = {} x {}", dp.tp, degree.value))
                                      : 0;
  const auto bucket = r.required<std::int64_t>("reduce_bucket_elements");
  if (bucket.valid && bucket.value < 1)
    ctx.error(bucket.loc, node.child_path("reduce_bucket_elements"), "expected a positive integer");
  dp.reduce_bucket_elements = bucket.value;
  dp.overlap_comm = r.required<bool>("overlap_comm").value;
  {
    // Used at stage 3 only; DeepSpeed's default there (recorded in the effective configuration).
    const bool stage3 = stage.valid && stage.value == 3;
    const auto threshold = r.optional<std::int64_t>("param_persistence_threshold",
                                                    stage3 ? DataParallelSpec::kDeepSpeedPersistenceThreshold : 0);
    if (threshold.valid && threshold.value < 0) {
      ctx.error(threshold.loc, node.child_path("param_persistence_threshold"), "expected a count >= 0");
    }
    dp.param_persistence_threshold = threshold.value;
    const auto fetch = r.choice("zero3_fetch", {"prefetch", "blocking"}, "prefetch");
    if (fetch.valid && fetch.value == "blocking") {
      if (!stage3) ctx.error(fetch.loc, node.child_path("zero3_fetch"), "applies to zero_stage 3 only");
      dp.zero3_fetch = DataParallelSpec::Fetch::kBlocking;
    }
    if (auto host = r.child("zero3_host")) {
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
  const sim::config::Location offload_at = read_offload(node, r, stage, dp);
  const std::vector<std::size_t> gpus =
      topology ? topology->devices_of(topo::DeviceKind::kGpu) : std::vector<std::size_t>{};
  if (auto devices = parse_devices(r, node, topology, false)) {
    dp.devices = std::move(*devices);
    if (degree.valid && degree.value < 1) {
      ctx.error(degree.loc, node.child_path("dp"), fmt::format("expected >= 1, got {}", degree.value));
    } else if (degree.valid && static_cast<int>(dp.devices.size()) != rank_count) {
      ctx.error(degree.loc, node.child_path("dp"),
                dp.tp == 1 ? fmt::format("the devices list {} ranks but dp is {}", dp.devices.size(), degree.value)
                           : fmt::format("the devices list {} ranks but tp x dp is {} x {} = {}", dp.devices.size(),
                                         dp.tp, degree.value, rank_count));
    }
  } else if (topology && degree.valid) {
    // Documented default: ranks take the machine's GPUs in declaration order.
    if (degree.value < 1 || static_cast<std::size_t>(rank_count) > gpus.size()) {
      ctx.error(degree.loc, node.child_path("dp"),
                dp.tp == 1 ? fmt::format("expected 1 to {} (the machine's GPUs), got {}", gpus.size(), degree.value)
                           : fmt::format("tp x dp = {} x {} = {} ranks but the machine has {} GPUs", dp.tp,
                                         degree.value, rank_count, gpus.size()));
    } else {
      for (int i = 0; i < rank_count; ++i) dp.devices.push_back(topology->device(gpus[i]).name);
    }
  }
  dp.collectives = parse_collective_options(r);
  dp.all_ranks = parse_all_ranks(r);
  if (dp.ep > 1 && (dp.tp > 1 || dp.offload || r.has("partitioning"))) {
    ctx.error(ep.loc, node.child_path("ep"),
              "expert parallelism together with tp > 1, a partitioning or optimizer offload is not modelled");
  }
  if (dp.offload && topology && !dp.devices.empty()) check_offload_hosts(ctx, *topology, dp, offload_at);
  if (auto part = r.child("partitioning")) {
    levels.ranks = static_cast<int>(dp.devices.size());
    if (dp.tp > 1) {
      ctx.error(part->location(), part->path(), "hierarchical partitioning together with tp > 1 is not modelled");
    } else if (stage.valid && stage.value != 3) {
      ctx.error(part->location(), part->path(),
                fmt::format("hierarchical partitioning applies to zero_stage 3, got zero_stage {}", stage.value));
    } else if (levels.ranks > 0) {
      dp.partitioning = parse_partitioning(*part, levels);
    }
  }
  if (ctx.error_count() != errors_before) return std::nullopt;
  return StrategySpec{dp};
}

std::optional<StrategySpec> parse_strategy(const Node& node, const topo::Topology* topology,
                                           TrainingFromStrategy* training) {
  auto& ctx = node.context();
  const std::size_t errors_before = ctx.error_count();
  MapReader r(node);
  std::vector<std::string> kinds;
  for (const auto& s : list_strategies()) kinds.push_back(s.kind);
  const auto kind = r.choice("kind", kinds);
  // Level sizes for partitioning and collective stages: filled once the ranks are known.
  LevelSizes levels;
  if (topology) {
    for (const auto g : topology->devices_of(topo::DeviceKind::kGpu)) {
      if (topology->device(g).node == 0) ++levels.gpus_per_node;
    }
  }
  // The reader of each kind that list_strategies() names (offsim list): a kind without one is a bug.
  using Reader = std::optional<StrategySpec> (*)(const Node&, MapReader&, const topo::Topology*, TrainingFromStrategy*,
                                                 LevelSizes, std::size_t);
  static const std::map<std::string, Reader, std::less<>> readers{{"collective", read_collective},
                                                                  {"deepspeed", read_deepspeed},
                                                                  {"megatron", read_megatron},
                                                                  {"data_parallel", read_data_parallel}};
  for (const auto& k : kinds) {
    if (!readers.contains(k)) throw std::logic_error(fmt::format("strategy kind '{}' has no reader", k));
  }
  const auto reader = readers.find(kind.value);
  return (reader == readers.end() ? read_data_parallel : reader->second)(node, r, topology, training, levels,
                                                                         errors_before);
}

}  // namespace

std::shared_ptr<const ReadCache::Entry> ReadCache::find(const std::string& place,
                                                        const std::vector<std::string>& overrides) const {
  const std::lock_guard guard(mutex_);
  const auto it = entries_.find(place);
  if (it == entries_.end() || it->second.overrides != overrides) return nullptr;
  return it->second.entry;
}

void ReadCache::insert(const std::string& place, std::vector<std::string> overrides, Entry entry) {
  const std::lock_guard guard(mutex_);
  entries_.insert_or_assign(place, Held{std::move(overrides), std::make_shared<const Entry>(std::move(entry))});
}

std::size_t ReadCache::size() const {
  const std::lock_guard guard(mutex_);
  return entries_.size();
}

namespace {

// The value at `node` read by `parse`, through the cache when there is one (ReadCache).
template <typename Value>
std::optional<Value> read_through(const Node& node, ReadCache* cache, std::optional<Value> (*parse)(const Node&)) {
  if (!cache) return parse(node);
  auto& ctx = node.context();
  const std::string place = node.file() + '\n' + node.path();
  std::vector<std::string> overrides = ctx.override_texts_under(node.path());
  if (const auto hit = cache->find(place, overrides)) {
    for (const auto& w : hit->warnings) ctx.warning(w.loc, w.key_path, w.message);
    ctx.note_known_paths(hit->known_paths);
    ctx.mark_overrides_used_under(node.path());
    return std::get<Value>(hit->value);
  }
  const std::size_t errors = ctx.error_count();
  const std::size_t warnings = ctx.warnings().size();
  std::optional<Value> parsed = parse(node);
  if (parsed && ctx.error_count() == errors && ctx.overrides_used_under(node.path())) {
    cache->insert(place, std::move(overrides),
                  {*parsed,
                   {ctx.warnings().begin() + static_cast<std::ptrdiff_t>(warnings), ctx.warnings().end()},
                   std::make_shared<const std::vector<std::string>>(ctx.known_paths_under(node.path()))});
  }
  return parsed;
}

}  // namespace

ExperimentSpec load_experiment(const std::filesystem::path& file, const std::vector<std::string>& overrides,
                               ReadCache* cache) {
  Context ctx(overrides);
  const Node root = ctx.load_root(file);
  ExperimentSpec spec;
  spec.file = file.string();
  {
    MapReader r(root);
    // `set: [key.path=value, ...]` in the file: overrides like --set (which wins), for example to
    // take a slice of a large machine: set: ["hardware.nodes=2"].
    if (auto set = r.child("set")) {
      std::vector<sim::config::Located<std::string>> entries;
      for (const auto& item : set->items()) {
        if (auto v = item.as<std::string>()) entries.push_back({*v, item.location(), true});
      }
      ctx.add_file_overrides(entries);
    }
    spec.name = r.required<std::string>("name").value;
    std::optional<topo::NodeTopology> hw;
    sim::config::Location collectives_loc = root.location();
    if (auto n = r.required_child("hardware", "a machine description (usually !include ../hardware/x.yaml)")) {
      hw = read_through<topo::NodeTopology>(*n, cache, topo::parse_machine);
    }
    if (auto n = r.required_child("calibration", "a mapping with device and collectives")) {
      MapReader c(*n);
      if (auto d = c.required_child("device", "a device cost table")) {
        if (auto costs = read_through<DeviceCosts>(*d, cache, parse_device_costs)) {
          spec.device = *costs;
          if (hw) {
            for (const auto g : hw->topology.devices_of(topo::DeviceKind::kGpu)) {
              const auto& dev = hw->topology.device(g);
              if (dev.device_kind != costs->device_kind) {
                ctx.error(d->location(), d->child_path("device_kind"),
                          fmt::format("the table is for '{}' but GPU '{}' of the machine is a '{}'", costs->device_kind,
                                      dev.name, dev.device_kind));
                break;
              }
            }
          }
        }
      }
      if (auto host = c.child("host")) {
        if (auto costs = read_through<MeasuredCosts>(*host, cache, parse_measured_costs)) spec.host = *costs;
      }
      if (auto coll = c.child("collectives")) {
        if (coll->is_scalar()) {
          // `collectives: roofline`: the machine has no measured collectives; say so explicitly.
          if (coll->as<std::string>() == "roofline") {
            spec.collectives.roofline_collectives = true;
          } else {
            ctx.error(coll->location(), coll->path(),
                      "expected a table of measured collectives (!include ../calibration/x.yaml) or \"roofline\"");
          }
        } else if (auto costs = read_through<MeasuredCosts>(*coll, cache, parse_measured_costs)) {
          spec.collectives = *costs;
        }
        collectives_loc = coll->location();
      }
    }
    bool needs_model = true;
    bool strategy_ok = false, model_ok = false, training_ok = false;
    sim::config::Location grad_accum_at = root.location();
    TrainingFromStrategy from_strategy;
    if (auto n = r.required_child("strategy", "a strategy mapping with kind")) {
      if (auto s = parse_strategy(*n, hw ? &hw->topology : nullptr, &from_strategy)) {
        spec.strategy = *s;
        strategy_ok = true;
        // More than one rank needs the collectives the strategy runs.
        std::size_t ranks = 0;
        if (const auto* dp = std::get_if<DataParallelSpec>(&*s)) ranks = dp->devices.size();
        if (const auto* mg = std::get_if<MegatronSpec>(&*s)) ranks = mg->devices.size();
        if (const auto* c = std::get_if<CollectiveSpec>(&*s)) {
          ranks = c->devices.size();
          needs_model = false;
        }
        for (const char* needed : {"reduce_scatter", "all_gather"}) {
          if (ranks > 1 && !spec.collectives.roofline_collectives && !spec.collectives.collectives.contains(needed)) {
            ctx.error(collectives_loc, "calibration.collectives",
                      fmt::format("no {} fits (the strategy over {} ranks needs them)", needed, ranks));
          }
        }
      }
      if (from_strategy.collective) needs_model = false;
    }
    // A collective benchmark has no model; training a model needs one.
    if (needs_model) {
      if (auto n = r.required_child("model", "a model (usually !include ../models/x.yaml)")) {
        if (auto m = parse_model(*n)) {
          spec.model = *m;
          model_ok = true;
        }
      }
      if (auto n = r.required_child("training", "a mapping with micro_batch, grad_accum, ...")) {
        if (auto t = parse_training(*n, &grad_accum_at)) {
          spec.training = *t;
          training_ok = true;
        }
      }
      // A DeepSpeed config's batch settings win over the training section, with a warning when
      // they differ: the config is what DeepSpeed would run.
      const auto adopt = [&](const std::optional<std::int64_t>& v, std::int64_t& field, const char* what) {
        if (!v) return;
        if (*v < 1 || *v > kMaxBatch) {
          ctx.error(from_strategy.at, "strategy.config",
                    fmt::format("{} must be from 1 to {} (offsim's limit), got {}", what, kMaxBatch, *v));
          return;
        }
        if (*v != field) {
          ctx.warning(from_strategy.at, "strategy.config",
                      fmt::format("{} {} from the DeepSpeed config replaces training's {}", what, *v, field));
        }
        field = *v;
      };
      adopt(from_strategy.micro_batch, spec.training.micro_batch, "train_micro_batch_size_per_gpu");
      adopt(from_strategy.grad_accum, spec.training.grad_accum, "gradient_accumulation_steps");
      if (auto* dp = std::get_if<DataParallelSpec>(&spec.strategy); dp && from_strategy.deepspeed) {
        resolve_deepspeed_auto(*from_strategy.deepspeed, spec.model.hidden, *dp);
      }
      if (strategy_ok && model_ok && training_ok) {
        check_against_model(ctx, spec.strategy, spec.model, spec.training, from_strategy, grad_accum_at);
      }
    }
    if (auto c = r.child("cost")) spec.cost = parse_cost(*c);
    if (hw) spec.hardware = std::move(*hw);
  }
  ctx.finish();
  spec.effective = ctx.effective();
  spec.warnings = ctx.warnings();
  return spec;
}

namespace {

IterationInputs inputs_of(const ExperimentSpec& spec, const CostModel& costs) {
  return IterationInputs{spec.model, spec.training, spec.hardware.topology, costs, spec.collectives, spec.host};
}

}  // namespace

std::string dump_task_graph(const ExperimentSpec& spec, bool dot) {
  const CostModel costs(spec.device);
  const BuiltIteration built = build_iteration(inputs_of(spec, costs), spec.strategy);
  return dot ? built.graph.to_dot(built.machine.platform) : built.graph.to_text(built.machine.platform);
}

namespace {

// Links: per class, total bytes and the busiest link.
std::vector<LinkClassSummary> summarise_links(const std::vector<LinkStat>& stats) {
  std::vector<LinkClassSummary> links;
  for (const auto& c : stats) {
    auto it = std::find_if(links.begin(), links.end(), [&](const auto& l) { return l.link_class == c.link_class; });
    if (it == links.end()) {
      links.push_back({c.link_class, 0.0, sim::TimePs{0}, c.name, 0.0});
      it = links.end() - 1;
    }
    it->bytes += c.bytes;
    if (c.busy > it->busiest_link_busy) {
      it->busiest_link_busy = c.busy;
      it->busiest_link = c.name;
      it->peak_bytes_per_s = c.peak_bytes_per_s;
    }
  }
  return links;
}

// One simulated iteration of the experiment as it is.
ExperimentResult simulate_iteration(const ExperimentSpec& spec, const RunExperimentOptions& options) {
  const CostModel costs(spec.device);
  const BuiltIteration built = build_iteration(inputs_of(spec, costs), spec.strategy);
  const sim::RunResult run =
      sim::execute(built.machine.platform, built.graph, sim::ExecOptions{options.outputs_over_time});

  ExperimentResult r;
  r.iteration_time = run.makespan;
  r.ranks = built.devices.size();
  r.simulated_ranks = static_cast<std::size_t>(built.simulated_ranks);
  r.model_states_per_device = built.model_states_per_device;
  {
    std::vector<int> nodes;
    for (const auto d : built.devices) nodes.push_back(spec.hardware.topology.device(d).node);
    std::sort(nodes.begin(), nodes.end());
    r.nodes = static_cast<std::size_t>(std::unique(nodes.begin(), nodes.end()) - nodes.begin());
  }
  r.tasks = built.graph.size();
  r.events = run.events_processed;
  r.approximations = built.approximations;
  if (spec.model.moe()) {
    r.approximations.push_back(fmt::format(
        "mixture of experts: the router spreads tokens evenly over the {} experts ({} per token), run one after "
        "another as eager PyTorch does; real routing is uneven and the busiest expert sets the pace, so this is a "
        "lower bound on the MLP time",
        spec.model.experts, spec.model.experts_per_token));
  }
  if (options.outputs_over_time) {
    r.timeline_csv = sim::report::timeline_csv(run);
    r.trace_json = sim::report::chrome_trace(built.machine.platform, built.graph, run);
  }

  for (const auto& span : built.spans) {
    const auto& first = run.tasks[span.first.index];
    const sim::TimePs begin = span.from_end ? first.end : first.start;
    const sim::TimePs length = run.tasks[span.last.index].end - begin;
    r.rank0_phases.push_back({span.phase, begin, run.tasks[span.last.index].end});
    auto it = std::find_if(r.phases.begin(), r.phases.end(), [&](const PhaseTime& p) { return p.phase == span.phase; });
    if (it == r.phases.end()) {
      r.phases.push_back({span.phase, length});
    } else {
      it->time += length;
    }
  }

  // Rank 0's GPU: its compute tasks, its memory, its host links.
  const std::size_t device0 = built.devices.front();
  const std::uint32_t unit0 = *built.machine.unit_of_device[device0];
  for (const auto& t : built.graph.tasks()) {
    if (const auto* c = std::get_if<sim::ComputeTask>(&t.body); c && c->unit == unit0) {
      r.rank0_compute.push_back({built.graph.phase(t), run.tasks[t.id.index].start, run.tasks[t.id.index].end});
    }
  }
  r.rank0_memory = run.pools[*built.machine.pool_of_device[device0]].timeline;
  const std::string& gpu0 = spec.hardware.topology.device(device0).name;
  for (const auto& c : run.constraints) {
    if (c.link_class != "cpu-gpu") continue;
    if (c.name.ends_with("->" + gpu0)) {
      r.rank0_h2d = c.stats.timeline;
      r.rank0_h2d_capacity = c.capacity.bytes_per_s;
    } else if (c.name.starts_with(gpu0 + "->")) {
      r.rank0_d2h = c.stats.timeline;
      r.rank0_d2h_capacity = c.capacity.bytes_per_s;
    }
  }

  const double seconds = run.makespan.seconds();
  if (seconds > 0.0) {
    r.model_tflops_per_device = built.model_flops_per_device.count / seconds / 1e12;
    r.tflops_per_device = built.hardware_flops_per_device.count / seconds / 1e12;
    r.tokens_per_s = built.tokens_per_iteration / seconds;
    r.mfu = built.model_flops_per_device.count / seconds / spec.device.peak_matrix_bf16.flops_per_s;
  }

  // Memory: per pool kind, the fullest pool; any overflow makes the configuration infeasible.
  for (const auto& pool : run.pools) {
    auto it = std::find_if(r.memory.begin(), r.memory.end(), [&](const auto& m) { return m.kind == pool.kind; });
    if (it == r.memory.end()) {
      r.memory.push_back({pool.kind, pool.name, pool.peak, pool.capacity});
    } else if (pool.peak > it->peak) {
      *it = {pool.kind, pool.name, pool.peak, pool.capacity};
    }
    if (pool.overflow) {
      std::vector<std::string> tenants;
      for (const auto& t : pool.overflow->top_tenants)
        tenants.push_back(fmt::format("{} {}", t.tenant, sim::format_bytes(t.bytes)));
      r.feasible = false;
      r.infeasible_reasons.push_back(
          fmt::format("{} needs {} of {} (over by {}) at t={}: {}", pool.name, sim::format_bytes(pool.overflow->used),
                      sim::format_bytes(pool.capacity), sim::format_bytes(pool.overflow->excess),
                      sim::format_time(pool.overflow->time), fmt::join(tenants, ", ")));
    }
  }
  for (const auto& c : run.constraints) {
    r.link_stats.push_back({c.name, c.link_class, c.stats.bytes_carried, c.stats.busy_time, c.stats.peak_bytes_per_s});
  }
  r.links = summarise_links(r.link_stats);
  return r;
}

// Megatron's pipeline schedules repeat: past the warm-up, every further pp micro-batches run the
// same operations on every stage, with the same transfers, so the iteration time, every phase time
// and every link's bytes and busy time are affine in the number of micro-batches m. A long schedule
// is therefore simulated at m1 = pp and m2 = 2 pp micro-batches (multiples of pp, as the
// interleaved schedule requires) and extrapolated to m: x(m) = x(m2) + (m - m2) / (m2 - m1) x
// (x(m2) - x(m1)). tests/unit/megatron_test.cpp checks the extrapolation against full
// simulations of both schedules (equal to 1e-9). Only when m > m1 + m2, where it saves work.
// (The warm-up and cool-down of 1F1B and interleaved schedules span fewer than pp micro-batches
// of each stage, so from m = pp on every further one adds the same steady-state period.)
struct SteadyState {
  std::int64_t m1 = 0, m2 = 0, m = 0;
};
std::optional<SteadyState> steady_state_plan(const ExperimentSpec& spec) {
  const auto* mg = std::get_if<MegatronSpec>(&spec.strategy);
  if (mg == nullptr || mg->all_micro_batches) return std::nullopt;
  const std::int64_t period = std::max(1, mg->pp);
  const std::int64_t m = spec.training.grad_accum;
  if (m <= 3 * period) return std::nullopt;
  return SteadyState{period, 2 * period, m};
}

ExperimentResult extrapolate_steady_state(const SteadyState& plan, const ExperimentResult& r1, ExperimentResult r2) {
  const double a = static_cast<double>(plan.m - plan.m2) / static_cast<double>(plan.m2 - plan.m1);
  const auto time = [a](sim::TimePs x1, sim::TimePs x2) {
    return sim::TimePs{x2.ps + static_cast<std::int64_t>(std::llround(a * static_cast<double>(x2.ps - x1.ps)))};
  };
  ExperimentResult r = std::move(r2);
  const sim::TimePs simulated = r.iteration_time;
  r.iteration_time = time(r1.iteration_time, r.iteration_time);
  for (auto& phase : r.phases) {
    const auto it =
        std::find_if(r1.phases.begin(), r1.phases.end(), [&](const auto& p) { return p.phase == phase.phase; });
    phase.time = time(it == r1.phases.end() ? sim::TimePs{0} : it->time, phase.time);
  }
  for (std::size_t i = 0; i < r.link_stats.size() && i < r1.link_stats.size(); ++i) {
    auto& l = r.link_stats[i];
    l.bytes += a * (l.bytes - r1.link_stats[i].bytes);
    l.busy = time(r1.link_stats[i].busy, l.busy);
  }
  r.links = summarise_links(r.link_stats);
  // The work per device grows with m like the micro-batches do; the rates follow from the time.
  const double work = static_cast<double>(plan.m) / static_cast<double>(plan.m2);
  const double rate = r.iteration_time.ps > 0
                          ? work * static_cast<double>(simulated.ps) / static_cast<double>(r.iteration_time.ps)
                          : 0.0;
  r.model_tflops_per_device *= rate;
  r.tflops_per_device *= rate;
  r.tokens_per_s *= rate;
  r.mfu *= rate;
  r.tasks += r1.tasks;
  r.events += r1.events;
  r.approximations.push_back(fmt::format(
      "pipeline steady state: {} micro-batches extrapolated from simulations of {} and {} (the schedule repeats "
      "every pp micro-batches, so times and link traffic are affine in their number; memory peaks, rank 0's "
      "timeline and the trace are those of the {}-micro-batch run); run with --all-micro-batches to simulate "
      "every one",
      plan.m, plan.m1, plan.m2, plan.m2));
  return r;
}

}  // namespace

ExperimentResult run_experiment(const ExperimentSpec& spec, const RunExperimentOptions& options) {
  const auto plan = steady_state_plan(spec);
  if (!plan) return simulate_iteration(spec, options);
  ExperimentSpec shorter = spec;
  shorter.training.grad_accum = plan->m1;
  const ExperimentResult r1 = simulate_iteration(shorter, {});
  shorter.training.grad_accum = plan->m2;
  return extrapolate_steady_state(*plan, r1, simulate_iteration(shorter, options));
}

namespace {

std::string phase_key(const std::string& phase) {
  return phase + "_s";
}

// nccl-tests' bus bandwidth: (g-1)/g x S / t for all-gather and reduce-scatter, twice that for
// all-reduce (the convention of bench/data/frontier-rccl-collectives.csv).
double bus_bandwidth(const CollectiveSpec& c, const ExperimentResult& r) {
  const double g = static_cast<double>(c.devices.size());
  const double factor = (c.operation == CollectiveKind::kAllReduce ? 2.0 : 1.0) * (g - 1.0) / g;
  const double t = r.iteration_time.seconds();
  return t > 0.0 ? factor * c.bytes.as_double() / t : 0.0;
}

}  // namespace

double ExperimentResult::phase_seconds(std::string_view phase) const {
  for (const auto& p : phases) {
    if (p.phase == phase) return p.time.seconds();
  }
  return 0.0;
}

std::int64_t ExperimentResult::peak_bytes(std::string_view kind) const {
  for (const auto& m : memory) {
    if (m.kind == kind) return m.peak.count;
  }
  return 0;
}

CostFigures cost_figures(const CostSpec& c, const ExperimentResult& r) {
  CostFigures f;
  const double seconds = r.iteration_time.seconds();
  const double nodes = static_cast<double>(r.nodes);
  f.node_hours_per_iteration = nodes * seconds / 3600.0;
  const double tokens = r.tokens_per_s * seconds;
  const double per_million = tokens > 0.0 ? 1e6 / tokens : 0.0;
  if (c.power_per_node_w) f.energy_kwh_per_iteration = *c.power_per_node_w * nodes * seconds / 3.6e6;
  if (c.price_per_node_hour) f.price_per_iteration = *c.price_per_node_hour * f.node_hours_per_iteration;
  if (f.energy_kwh_per_iteration) f.energy_kwh_per_million_tokens = *f.energy_kwh_per_iteration * per_million;
  if (f.price_per_iteration) f.price_per_million_tokens = *f.price_per_iteration * per_million;
  if (c.token_budget && tokens > 0.0) {
    const double iterations = *c.token_budget / tokens;
    f.time_to_train_s = iterations * seconds;
    f.node_hours_to_train = iterations * f.node_hours_per_iteration;
    if (f.energy_kwh_per_iteration) f.energy_kwh_to_train = iterations * *f.energy_kwh_per_iteration;
    if (f.price_per_iteration) f.price_to_train = iterations * *f.price_per_iteration;
  }
  return f;
}

namespace {

// The effective configuration as a tree: maps keep reading order, numeric keys make sequences.
// (Children are a struct, not std::pair<std::string, ConfigTree>, which clang 14 with libstdc++ 12
// cannot instantiate inside ConfigTree: the fuzz build, docs/fuzzing.md.)
struct ConfigTree {
  struct Child;
  std::string value;
  bool leaf = false;
  std::vector<Child> children;
  ConfigTree& child(const std::string& key);
  void emit(YAML::Emitter& out) const;
};

struct ConfigTree::Child {
  std::string key;
  ConfigTree tree;
};

ConfigTree& ConfigTree::child(const std::string& key) {
  for (auto& [k, c] : children) {
    if (k == key) return c;
  }
  children.push_back({key, ConfigTree{}});
  return children.back().tree;
}

void ConfigTree::emit(YAML::Emitter& out) const {
  if (leaf) {
    out << value;
    return;
  }
  const bool sequence = !children.empty() && std::all_of(children.begin(), children.end(), [](const Child& kv) {
    return !kv.key.empty() &&
           std::all_of(kv.key.begin(), kv.key.end(), [](unsigned char c) { return std::isdigit(c); });
  });
  if (sequence) {
    out << YAML::BeginSeq;
    for (const auto& [k, c] : children) c.emit(out);
    out << YAML::EndSeq;
    return;
  }
  out << YAML::BeginMap;
  for (const auto& [k, c] : children) {
    out << YAML::Key << k << YAML::Value;
    c.emit(out);
  }
  out << YAML::EndMap;
}

}  // namespace

std::string resolved_config_yaml(const ExperimentSpec& spec) {
  ConfigTree root;
  for (const auto& [path, value] : spec.effective) {
    ConfigTree* node = &root;
    std::size_t start = 0;
    while (true) {
      const std::size_t dot = path.find('.', start);
      node = &node->child(path.substr(start, dot == std::string::npos ? std::string::npos : dot - start));
      if (dot == std::string::npos) break;
      start = dot + 1;
    }
    node->leaf = true;
    node->value = value;
  }
  YAML::Emitter out;
  root.emit(out);
  return fmt::format(
      "# The configuration offsim simulated for {}: every value it read, after !include, set: and --set\n"
      "# (sources and notes omitted). It loads as an experiment by itself.\n{}\n",
      spec.file, out.c_str());
}

namespace {

// summary.json's headline figures, in its key order (a subset of the table, in another order).
const Figure* const kSummaryFeasible = figures_named({"feasible"}).front();
const std::vector<const Figure*> kSummaryFigures =
    figures_named({"iteration_time_s", "tokens_per_s", "model_tflops_per_device", "tflops_per_device", "mfu",
                   "exposed_communication_s", "model_states_bytes_per_device"});

void write_figure(sim::report::JsonWriter& j, const Figure& f, const ExperimentResult& r) {
  const double v = f.get(r);
  switch (f.kind) {
    case FigureKind::kFlag:
      j.field(f.name, v != 0.0);
      break;
    case FigureKind::kCount:
      j.field(f.name, static_cast<std::int64_t>(v));
      break;
    case FigureKind::kReal:
      j.field(f.name, v);
      break;
  }
}

}  // namespace

std::string summary_json(const ExperimentSpec& spec, const ExperimentResult& r, const Provenance& p) {
  sim::report::JsonWriter j;
  j.begin_object();
  j.key("offsim").begin_object().field("version", p.version).field("git", p.git_hash).end_object();
  j.field("experiment", spec.name);
  j.field("config_file", spec.file);
  write_figure(j, *kSummaryFeasible, r);
  j.key("infeasible_reasons").begin_array();
  for (const auto& reason : r.infeasible_reasons) j.value(reason);
  j.end_array();
  for (const Figure* f : kSummaryFigures) write_figure(j, *f, r);
  if (const auto* c = std::get_if<CollectiveSpec>(&spec.strategy))
    j.field("bus_bandwidth_bytes_per_s", bus_bandwidth(*c, r));
  j.key("phases").begin_object();
  // The three headline phases are always present, then any others the strategy reports.
  for (const std::string_view key : {"forward", "backward", "optimizer"})
    j.field(phase_key(std::string(key)), r.phase_seconds(key));
  for (const auto& ph : r.phases) {
    if (ph.phase != "forward" && ph.phase != "backward" && ph.phase != "optimizer")
      j.field(phase_key(ph.phase), ph.time.seconds());
  }
  j.end_object();
  j.key("memory").begin_object();
  for (const auto& m : r.memory) {
    j.key(m.kind).begin_object();
    j.field("peak_bytes", m.peak.count).field("capacity_bytes", m.capacity.count).field("pool", m.fullest_pool);
    j.end_object();
  }
  j.end_object();
  j.key("links").begin_object();
  for (const auto& l : r.links) {
    j.key(l.link_class).begin_object();
    j.field("bytes", l.bytes)
        .field("busiest_link", l.busiest_link)
        .field("busiest_link_busy_s", l.busiest_link_busy.seconds())
        .field("busy_fraction",
               r.iteration_time.ps > 0 ? l.busiest_link_busy.seconds() / r.iteration_time.seconds() : 0.0);
    j.field("busiest_link_peak_bytes_per_s", l.peak_bytes_per_s);
    j.end_object();
  }
  j.end_object();
  if (spec.cost) {
    const CostFigures f = cost_figures(*spec.cost, r);
    j.key("cost").begin_object();
    j.field("nodes", static_cast<std::uint64_t>(r.nodes)).field("node_hours_per_iteration", f.node_hours_per_iteration);
    const auto optional = [&](const char* key, const std::optional<double>& v) {
      if (v) j.field(key, *v);
    };
    if (!spec.cost->currency.empty()) j.field("currency", spec.cost->currency);
    optional("energy_kwh_per_iteration", f.energy_kwh_per_iteration);
    optional("price_per_iteration", f.price_per_iteration);
    optional("energy_kwh_per_million_tokens", f.energy_kwh_per_million_tokens);
    optional("price_per_million_tokens", f.price_per_million_tokens);
    optional("time_to_train_s", f.time_to_train_s);
    optional("node_hours_to_train", f.node_hours_to_train);
    optional("energy_kwh_to_train", f.energy_kwh_to_train);
    optional("price_to_train", f.price_to_train);
    j.end_object();
  }
  j.key("simulation").begin_object();
  j.field("ranks", static_cast<std::uint64_t>(r.ranks));
  j.field("ranks_simulated", static_cast<std::uint64_t>(r.simulated_ranks));
  j.field("tasks", static_cast<std::uint64_t>(r.tasks));
  j.field("events", r.events);
  j.end_object();
  j.key("approximations").begin_array();
  for (const auto& a : r.approximations) j.value(a);
  j.end_array();
  j.key("warnings").begin_array();
  for (const auto& w : spec.warnings) j.value(w.str());
  j.end_array();
  j.key("config").begin_object();
  for (const auto& [key, value] : spec.effective) j.field(key, value);
  j.end_object();
  j.end_object();
  return j.str();
}

std::string text_report(const ExperimentSpec& spec, const ExperimentResult& r) {
  std::string out;
  if (const auto* c = std::get_if<CollectiveSpec>(&spec.strategy)) {
    out += fmt::format("offsim: {}  (a collective of {} over {} ranks on {})\n\n", spec.name,
                       sim::format_bytes(c->bytes), r.ranks, spec.hardware.name);
  } else {
    const ParameterCounts params = count_parameters(spec.model);
    out += fmt::format("offsim: {}  ({} with {:.3f} B parameters, {} ranks on {})\n\n", spec.name, spec.model.name,
                       static_cast<double>(params.total) / 1e9, r.ranks, spec.hardware.name);
  }
  out += fmt::format("feasible             {}\n", r.feasible ? "yes" : "NO");
  // Pools that overflow alike (every GPU of a data-parallel group) are named on one line.
  std::vector<std::pair<std::string, std::vector<std::string>>> overflows;  // what, which pools
  for (const auto& reason : r.infeasible_reasons) {
    const auto space = reason.find(' ');
    const std::string pool = reason.substr(0, space), what = reason.substr(space + 1);
    auto it = std::find_if(overflows.begin(), overflows.end(), [&](const auto& o) { return o.first == what; });
    if (it == overflows.end()) {
      overflows.push_back({what, {pool}});
    } else {
      it->second.push_back(pool);
    }
  }
  for (const auto& [what, pools] : overflows) {
    if (pools.size() == 1) {
      out += fmt::format("  {} {}\n", pools.front(), what);
    } else {
      constexpr std::size_t kNamed = 3;
      const std::vector<std::string> named(pools.begin(), pools.begin() + std::min(kNamed, pools.size()));
      out += fmt::format("  {} pools ({}{}) each {}\n", pools.size(), fmt::join(named, ", "),
                         pools.size() > kNamed ? ", ..." : "", what);
    }
  }
  // An infeasible run's figures are what it would do with enough memory: said on each line.
  const std::string if_it_fit = r.feasible ? "" : "  (if it fit: it does not)";
  out += fmt::format("iteration time       {}{}\n", sim::format_time(r.iteration_time), if_it_fit);
  const auto* collective = std::get_if<CollectiveSpec>(&spec.strategy);
  if (collective) {
    out += fmt::format("bus bandwidth        {} (as nccl-tests report it)\n\n",
                       sim::format_bandwidth(sim::Bandwidth{bus_bandwidth(*collective, r)}));
  } else {
    out += fmt::format("TFLOPS per device    {:.1f} with recomputation (Megatron's count), {:.1f} model{}\n",
                       r.tflops_per_device, r.model_tflops_per_device, if_it_fit);
    out += fmt::format("tokens per second    {:.0f} (whole job){}\n", r.tokens_per_s, if_it_fit);
    out += fmt::format("model states         {} per device\n", sim::format_bytes(r.model_states_per_device));
    out += fmt::format("MFU                  {:.1f}% of {}{}\n\n", 100.0 * r.mfu,
                       sim::format_flop_rate(spec.device.peak_matrix_bf16), if_it_fit);
  }

  sim::report::TextTable phases({"phase (rank 0)", "time", "share"});
  const double total = r.iteration_time.seconds();
  const PhaseTime* largest = nullptr;
  for (const auto& p : r.phases) {
    phases.add_row({p.phase, sim::format_time(p.time),
                    fmt::format("{:.1f}%", total > 0 ? 100.0 * p.time.seconds() / total : 0.0)});
    if (!largest || p.time > largest->time) largest = &p;
  }
  out += phases.str() + "\n";

  sim::report::TextTable memory({"memory", "fullest pool", "peak", "capacity", "use"});
  for (const auto& m : r.memory) {
    memory.add_row(
        {m.kind, m.fullest_pool, sim::format_bytes(m.peak), sim::format_bytes(m.capacity),
         fmt::format("{:.1f}%", m.capacity.count > 0 ? 100.0 * m.peak.as_double() / m.capacity.as_double() : 0.0)});
  }
  out += memory.str() + "\n";

  sim::report::TextTable links({"link class", "bytes moved", "busiest link", "busy", "peak rate"});
  for (const auto& l : r.links) {
    links.add_row({l.link_class, sim::format_bytes(sim::Bytes{static_cast<std::int64_t>(l.bytes)}), l.busiest_link,
                   fmt::format("{:.1f}%", total > 0 ? 100.0 * l.busiest_link_busy.seconds() / total : 0.0),
                   sim::format_bandwidth(sim::Bandwidth{l.peak_bytes_per_s})});
  }
  out += links.str() + "\n";

  if (spec.cost && !collective) {
    const CostFigures f = cost_figures(*spec.cost, r);
    const std::string& cur = spec.cost->currency;
    out += fmt::format("cost                 {} node{}: {:.4g} node-hours per iteration", r.nodes,
                       r.nodes == 1 ? "" : "s", f.node_hours_per_iteration);
    if (f.energy_kwh_per_iteration) out += fmt::format(", {:.4g} kWh", *f.energy_kwh_per_iteration);
    if (f.price_per_iteration) out += fmt::format(", {:.4g} {}", *f.price_per_iteration, cur);
    out += "\n";
    if (f.energy_kwh_per_million_tokens || f.price_per_million_tokens) {
      out += "per million tokens  ";
      if (f.energy_kwh_per_million_tokens) out += fmt::format(" {:.4g} kWh", *f.energy_kwh_per_million_tokens);
      if (f.price_per_million_tokens) out += fmt::format(" {:.4g} {}", *f.price_per_million_tokens, cur);
      out += "\n";
    }
    if (f.time_to_train_s) {
      out += fmt::format("to train on {:.3g} tokens: {:.1f} days, {:.4g} node-hours", *spec.cost->token_budget,
                         *f.time_to_train_s / 86400.0, *f.node_hours_to_train);
      if (f.energy_kwh_to_train) out += fmt::format(", {:.4g} MWh", *f.energy_kwh_to_train / 1000.0);
      if (f.price_to_train) out += fmt::format(", {:.4g} {}", *f.price_to_train, cur);
      out += "\n";
    }
    out += "\n";
  }
  if (largest && total > 0 && !collective) {
    out += fmt::format("bottleneck: {} takes {:.0f}% of the iteration", largest->phase,
                       100.0 * largest->time.seconds() / total);
    const double exposed = r.phase_seconds("exposed_communication");
    out += fmt::format("; communication left exposed after backward is {:.1f}%.\n", 100.0 * exposed / total);
  }
  out += "\napproximations in this model:\n";
  for (const auto& a : r.approximations) out += fmt::format("  - {}\n", a);
  for (const auto& w : spec.warnings) out += fmt::format("warning: {}\n", w.str());
  return out;
}

}  // namespace offsim::models
