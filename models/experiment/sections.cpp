// The strategy, training and cost sections of an experiment, and the checks across them
// (sections.hpp).
#include "models/experiment/sections.hpp"

#include "models/strategies/pipeline_split.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <optional>
#include <unordered_set>

#include "models/experiment/defaults.hpp"
#include "models/strategies/partitioning_parser.hpp"
#include "models/strategies/pipeline_split.hpp"
#include "models/strategies/value_ranges.hpp"

namespace offsim::models {

using sim::config::check_range;
using sim::config::Context;
using sim::config::MapReader;
using sim::config::Node;

namespace {

using ranges::kMaxRanks;

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

// Whether the model (when read before the strategy) splits over tp ranks; reports at `at` when not.
bool tp_splits_model(Context& ctx, const TrainingFromStrategy* training, int tp, const sim::config::Location& at) {
  if (!training || !training->model || tp <= 1) return true;
  const auto uneven = widths_not_dividing(*training->model, tp);
  if (uneven.empty()) return true;
  ctx.error(
      at, "strategy.tp",
      fmt::format("the model does not split over tp = {} ranks: {} must divide by it", tp, fmt::join(uneven, ", ")));
  return false;
}

// training.framework: the framework whose kernels run; left out, load.cpp infers it from the
// strategy and the model.
void read_framework(MapReader& r, TrainingSpec& t, TrainingRead& out) {
  if (!r.has("framework")) return;
  const auto fw = r.choice("framework", framework_names(), framework_names().front());
  if (fw.valid) {
    if (const auto f = framework_from_name(fw.value)) t.framework = *f;
  }
  out.framework_given = true;
}

}  // namespace

namespace {

// training.precision: bf16 mixed precision, or FP8 GEMMs as Transformer Engine runs them
// (models/transformer/fp8.hpp) with its recipe and amax history; the device's FP8 support is checked
// against its cost table once both are read (load.cpp).
void read_precision(MapReader& r, const Node& node, TrainingSpec& t) {
  auto& ctx = node.context();
  const auto precision = r.choice("precision", {"bf16", "fp8"}, defaults::text("training.precision"));
  const auto recipe = r.optional<std::string>("fp8_recipe", std::string{"delayed"});
  const auto history = r.optional<std::int64_t>("fp8_amax_history", 1024);
  if (precision.valid && precision.value == "fp8") {
    Fp8Training f;
    f.at = precision.loc;
    f.recipe_at = r.has("fp8_recipe") ? recipe.loc : precision.loc;
    if (recipe.value == "current") {
      f.recipe = Fp8Recipe::kCurrent;
    } else if (recipe.value == "mxfp8") {
      f.recipe = Fp8Recipe::kMxfp8;
    } else if (recipe.value != "delayed") {
      ctx.error(recipe.loc, node.child_path("fp8_recipe"),
                fmt::format("expected one of delayed, current, mxfp8 (Transformer Engine's DelayedScaling, "
                            "Float8CurrentScaling, MXFP8BlockScaling), got \"{}\"",
                            recipe.value));
    }
    constexpr std::int64_t kMaxAmaxHistory = std::int64_t{1} << 20;
    if (history.value < 1 || history.value > kMaxAmaxHistory) {
      ctx.error(history.loc, node.child_path("fp8_amax_history"),
                fmt::format("expected 1 to {} entries, got {}", kMaxAmaxHistory, history.value));
    }
    if (f.recipe != Fp8Recipe::kDelayed && r.has("fp8_amax_history")) {
      ctx.error(history.loc, node.child_path("fp8_amax_history"),
                "an amax history is kept by fp8_recipe: delayed only");
    }
    f.amax_history = history.value;
    t.fp8 = f;
  } else {
    for (const char* key : {"fp8_recipe", "fp8_amax_history"}) {
      if (r.has(key)) {
        ctx.error(key == std::string_view{"fp8_recipe"} ? recipe.loc : history.loc, node.child_path(key),
                  "needs precision: fp8");
      }
    }
  }
}

}  // namespace

std::optional<TrainingSpec> parse_training(const Node& node, TrainingRead* read) {
  auto& ctx = node.context();
  const std::size_t errors_before = ctx.error_count();
  MapReader r(node);
  TrainingSpec t;
  TrainingRead unused;
  TrainingRead& out = read ? *read : unused;
  // A key left out takes configs/defaults.yaml's value, named in the report when it moves a result.
  const auto defaulted = [&](const char* key) {
    if (r.has(key)) return false;
    out.defaults.push_back(fmt::format("training.{}={}", key, defaults::text(std::string("training.") + key)));
    return true;
  };
  const auto mb = r.required<std::int64_t>("micro_batch");
  const auto ga = defaulted("grad_accum") ? sim::config::Located<std::int64_t>{defaults::integer("training.grad_accum"),
                                                                               node.location(), true}
                                          : r.required<std::int64_t>("grad_accum");
  for (const auto& [v, key] : {std::pair{mb, "micro_batch"}, std::pair{ga, "grad_accum"}}) {
    if (v.valid) (void)check_range(ctx, v.loc, node.child_path(key), v.value, ranges::kBatch);
  }
  t.micro_batch = mb.value;
  t.grad_accum = ga.value;
  out.grad_accum_at = ga.loc;
  // The sequence length trained; checked against the model's context once both are read (load.cpp).
  if (r.has("seq")) {
    const auto seq = r.required<std::int64_t>("seq");
    if (seq.valid && (seq.value < 1 || seq.value > kMaxSeq)) {
      ctx.error(seq.loc, node.child_path("seq"), fmt::format("expected 1 to {} tokens, got {}", kMaxSeq, seq.value));
    } else if (seq.valid) {
      out.seq = seq;
    }
  }
  read_precision(r, node, t);
  read_framework(r, t, out);
  (void)defaulted("recompute");
  const std::string recompute =
      r.choice("recompute", {"none", "selective", "full"}, defaults::text("training.recompute")).value;
  t.recompute = recompute == "full"        ? Recompute::kFull
                : recompute == "selective" ? Recompute::kSelective
                                           : Recompute::kNone;
  // Megatron's fused scale-mask-softmax (its --masked-softmax-fusion, on by default there); off:
  // PyTorch's separate kernels. Flash attention has no scores to run it on.
  const auto fused_softmax = r.optional<bool>("fused_softmax", false);
  t.fused_softmax = fused_softmax.value;
  if (r.has("flash_attention")) {
    t.flash_attention = r.required<bool>("flash_attention").value;
  } else if (t.fused_softmax) {
    t.flash_attention = false;  // asked for the fused softmax: attention without flash
  } else if (out.framework_given && t.framework == Framework::kDeepSpeedMegatron) {
    t.flash_attention = defaults::flag("megatron.use_flash_attn_deepspeed");
    out.defaults.push_back(
        fmt::format("training.flash_attention={} (Megatron-DeepSpeed's --use-flash-attn default)", t.flash_attention));
  } else {
    (void)defaulted("flash_attention");
    t.flash_attention = defaults::flag("training.flash_attention");
  }
  // Megatron's default follows its code: the megatron strategy, or a data-parallel run that names
  // a Megatron framework (Megatron-DeepSpeed's GPT under ZeRO, as SC21's ZeRO-3 baseline ran).
  const bool megatron_code = out.megatron || (out.framework_given && t.framework != Framework::kPyTorch &&
                                              t.framework != Framework::kHfTransformers);
  if (!r.has("fused_softmax") && megatron_code && !t.flash_attention) {
    t.fused_softmax = defaults::flag("megatron.masked_softmax_fusion");
    if (t.fused_softmax) out.defaults.emplace_back("training.fused_softmax=true (Megatron-LM's masked_softmax_fusion)");
  }
  if (t.fused_softmax && t.flash_attention) {
    ctx.error(fused_softmax.loc, node.child_path("fused_softmax"),
              "true needs flash_attention: false (the fused softmax runs on the attention scores, which flash "
              "attention never writes out)");
  }
  if (ctx.error_count() != errors_before) return std::nullopt;
  return t;
}

namespace {

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
  // `local`: an entry of devices_per_node, named within a node (the error lists a node's GPUs by
  // the names that list takes, and what was written).
  const auto check = [&](const Node& item, const std::string& name, const std::string* local = nullptr) {
    if (!topology) return true;
    const auto d = topology->find_device(name);
    if (!d || topology->device(*d).kind != topo::DeviceKind::kGpu) {
      std::vector<std::string> names;
      for (const auto g : topology->devices_of(topo::DeviceKind::kGpu)) {
        const auto& gpu = topology->device(g);
        if (local && gpu.node != 0) continue;
        if (names.size() == kGpusNamed) {
          names.push_back("...");
          break;
        }
        std::string shown = gpu.name;
        if (local && shown.starts_with("n0.")) shown = shown.substr(3);
        names.push_back(shown);
      }
      ctx.error(item.location(), item.path(),
                local ? fmt::format("expected a GPU of a node ({}), got \"{}\"", fmt::join(names, ", "), *local)
                      : fmt::format("expected a GPU of the machine ({}), got \"{}\"", fmt::join(names, ", "), name));
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
        check(items[i], full, &*name);
        reported[i] = ctx.error_count() != errors;
      } else if (topology) {
        if (const auto d = topology->find_device(full)) listed.insert(*d);
      }
      out.push_back(full);
    }
  }
  return out;
}

}  // namespace

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
    // Layers that do not divide go to the middle stages with a note in the report
    // (pipeline_split.hpp); only splits that leave no layers are errors.
    if (mg->pp > 0 && mg->virtual_stages > 0) {
      try {
        (void)split_pipeline_layers(m.layers, *mg);
      } catch (const std::invalid_argument& e) {
        const bool edges = mg->first_stage_layers || mg->last_stage_layers ||
                           mg->account_for_embedding_in_pipeline_split || mg->account_for_loss_in_pipeline_split;
        std::string message = e.what();
        if (message.starts_with("megatron: ")) message = message.substr(10);
        ctx.error(edges ? at.split_at : at.pp_at, "strategy." + (edges ? at.split_key : std::string("pp")), message);
      }
    }
    if (mg->cp > 1) {
      if (m.seq % (2 * mg->cp) != 0) {
        ctx.error(at.cp_at, "strategy.cp",
                  fmt::format("the sequence ({}) must split into 2 x cp = {} chunks (each context rank holds two)",
                              m.seq, 2 * mg->cp));
      }
      if (!training.flash_attention) {
        ctx.error(at.cp_at, "strategy.cp",
                  "context parallelism runs TransformerEngine's ring of flash attention blocks; it needs "
                  "training.flash_attention: true");
      }
    }
    if (mg->virtual_stages > 1 && mg->pp > 0 && training.grad_accum % mg->pp != 0) {
      ctx.error(grad_accum_at, "training.grad_accum",
                fmt::format("the interleaved schedule needs micro-batches divisible by pp ({}), got {}", mg->pp,
                            training.grad_accum));
    }
  }
}

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

// Step of read_megatron: true when `key` is left out, so Megatron-LM's default
// (configs/defaults.yaml) applies; the default is then named in the report.
bool megatron_default(MapReader& r, const char* key, std::vector<std::string>& defaults_applied) {
  if (r.has(key)) return false;
  defaults_applied.push_back(
      fmt::format("strategy.{}={} (Megatron-LM's default)", key, defaults::text(std::string("megatron.") + key)));
  return true;
}

// Step of read_megatron: a degree (tp, pp, dp) >= 1, its location in `at`; dp is required, the
// others take Megatron-LM's default.
int megatron_degree(const Node& node, MapReader& r, const char* key, std::vector<std::string>& defaults_applied,
                    sim::config::Location* at) {
  auto& ctx = node.context();
  const bool defaulted = std::string_view(key) != "dp" && megatron_default(r, key, defaults_applied);
  const auto v = defaulted
                     ? sim::config::Located<int>{static_cast<int>(defaults::integer(std::string("megatron.") + key)),
                                                 node.location(), true}
                     : r.required<int>(key);
  if (v.valid && v.value < 1) ctx.error(v.loc, node.child_path(key), fmt::format("expected >= 1, got {}", v.value));
  if (at) *at = v.loc;
  return v.value;
}

// Step 1 of read_megatron: tp, pp, dp and cp (Megatron-Core's context_parallel_size, 1 when
// absent); returns whether the model splits over tp.
bool read_megatron_degrees(const Node& node, MapReader& r, TrainingFromStrategy* training,
                           std::vector<std::string>& defaults_applied, MegatronSpec& mg) {
  auto& ctx = node.context();
  sim::config::Location tp_at = node.location();
  mg.tp = megatron_degree(node, r, "tp", defaults_applied, &tp_at);
  if (training) training->tp_at = tp_at;
  const bool tp_ok = tp_splits_model(ctx, training, mg.tp, tp_at);
  mg.pp = megatron_degree(node, r, "pp", defaults_applied, training ? &training->pp_at : nullptr);
  mg.dp = megatron_degree(node, r, "dp", defaults_applied, nullptr);
  const auto cp = r.optional<int>("cp", 1);
  if (cp.valid && cp.value < 1)
    ctx.error(cp.loc, node.child_path("cp"), fmt::format("expected >= 1, got {}", cp.value));
  mg.cp = cp.value;
  if (training) training->cp_at = cp.loc;
  return tp_ok;
}

// Step 2 of read_megatron: uneven pipeline splits (Megatron-Core's decoder_first/last_pipeline_num_layers
// and account_for_embedding/loss_in_pipeline_split). The split's errors are located at the first
// of its keys given (check_against_model).
void read_pipeline_split(const Node& node, MapReader& r, TrainingFromStrategy* training, MegatronSpec& mg) {
  auto& ctx = node.context();
  bool split_located = false;
  const auto locate_split = [&](const sim::config::Location& loc, const char* key) {
    if (training && !split_located) {
      training->split_at = loc;
      training->split_key = key;
    }
    split_located = true;
  };
  for (const auto& [key, field] : {std::pair{"first_stage_layers", &mg.first_stage_layers},
                                   std::pair{"last_stage_layers", &mg.last_stage_layers}}) {
    if (!r.has(key)) continue;
    const auto n = r.required<std::int64_t>(key);
    if (n.valid && n.value < 1) ctx.error(n.loc, node.child_path(key), fmt::format("expected >= 1, got {}", n.value));
    *field = n.value;
    locate_split(n.loc, key);
  }
  for (const auto& [key, field] :
       {std::pair{"account_for_embedding_in_pipeline_split", &mg.account_for_embedding_in_pipeline_split},
        std::pair{"account_for_loss_in_pipeline_split", &mg.account_for_loss_in_pipeline_split}}) {
    if (!r.has(key)) continue;
    const auto flag = r.required<bool>(key);
    *field = flag.value;
    locate_split(flag.loc, key);
  }
}

// Step of read_megatron_options: Megatron-Core's overlapped DDP (DistributedDataParallelConfig's
// overlap_grad_reduce, overlap_param_gather, align_param_gather and bucket_size;
// configs/defaults.yaml cites the defaults). Read after zero_stage and optimizer.
void read_megatron_overlap(const Node& node, MapReader& r, MegatronSpec& mg) {
  auto& ctx = node.context();
  const auto grad = r.optional<bool>("overlap_grad_reduce", defaults::flag("megatron.overlap_grad_reduce"));
  const auto param = r.optional<bool>("overlap_param_gather", defaults::flag("megatron.overlap_param_gather"));
  const auto align = r.optional<bool>("align_param_gather", defaults::flag("megatron.align_param_gather"));
  mg.overlap_grad_reduce = grad.value;
  mg.overlap_param_gather = param.value;
  mg.align_param_gather = align.value;
  if (grad.value && mg.optimizer != MegatronSpec::Optimizer::kMegatron) {
    ctx.error(grad.loc, node.child_path("overlap_grad_reduce"),
              "Megatron-Core's overlapped gradient reduction runs with optimizer: megatron");
  } else if (grad.value && ZeroPolicy::partitioning_if_valid(mg.zero_stage).value_or(ZeroPartitioning{}).gradients) {
    ctx.error(grad.loc, node.child_path("overlap_grad_reduce"),
              "Megatron-Core's DDP option; zero_stage 2 is FSDP2, which reduce-scatters once after the last backward");
  }
  // megatron/training/arguments.py: --overlap-param-gather asserts the distributed optimizer and
  // --overlap-grad-reduce.
  if (param.value && (!grad.value || mg.zero_stage != 1)) {
    ctx.error(param.loc, node.child_path("overlap_param_gather"),
              "needs the distributed optimizer (zero_stage: 1) and overlap_grad_reduce: true, as Megatron-LM asserts");
  }
  if (r.has("bucket_size")) {
    const auto size = r.required<std::int64_t>("bucket_size");
    if (size.valid && size.value < 1)
      ctx.error(size.loc, node.child_path("bucket_size"), fmt::format("expected >= 1, got {}", size.value));
    mg.bucket_size = size.value;
  } else {
    // distributed_data_parallel.py: max(40,000,000, 1,000,000 x the data-parallel size).
    mg.bucket_size = std::max(defaults::integer("megatron.bucket_size_min"),
                              defaults::integer("megatron.bucket_size_per_dp_rank") * std::max(1, mg.dp));
  }
  // Transformer Engine's userbuffers TP overlap (models/strategies/tp_overlap.hpp): Megatron-LM
  // asserts sequence parallelism with it (arguments.py: "Tensor parallel communication/GEMM
  // overlap can happen only when sequence parallelism is enabled").
  const auto ub = r.optional<bool>("tp_comm_overlap", defaults::flag("megatron.tp_comm_overlap"));
  const auto cfg = r.child("tp_comm_overlap_cfg");
  if (ub.valid && ub.value) {
    if (!mg.sequence_parallel) {
      ctx.error(ub.loc, node.child_path("tp_comm_overlap"),
                "needs sequence_parallel: true (Megatron-LM overlaps the sequence-parallel collectives only)");
    }
    if (mg.tp == 1) ctx.warning(ub.loc, node.child_path("tp_comm_overlap"), "no effect with tp 1 (no TP collective)");
    mg.tp_comm_overlap = read_tp_comm_overlap(
        cfg ? &*cfg : nullptr, [](const std::string& key) { return defaults::text("te_userbuffers." + key); });
  } else if (cfg) {
    ctx.warning(cfg->location(), cfg->path(), "ignored: tp_comm_overlap is off");
  }
}

// Step of read_megatron_options: zero_stage 2 is FSDP2 as torch.distributed.pipelining runs it
// (phases/zero_policy.hpp, kFsdpUnderPipeline): with pipelines only, and not under DeepSpeed,
// whose pipeline engine asserts ZeRO stage < 2 (runtime/pipe/engine.py).
void check_megatron_fsdp(const Node& node, const sim::config::Located<int>& zero, const MegatronSpec& mg) {
  const auto partitioned = zero.valid ? ZeroPolicy::partitioning_if_valid(zero.value) : std::nullopt;
  if (!partitioned || !partitioned->gradients || partitioned->parameters) return;
  auto& ctx = node.context();
  if (mg.optimizer == MegatronSpec::Optimizer::kDeepSpeed) {
    ctx.error(zero.loc, node.child_path("zero_stage"),
              "DeepSpeed's pipeline engine refuses ZeRO stages 2-3 (runtime/pipe/engine.py); with optimizer: "
              "deepspeed use 0 or 1");
  } else if (mg.pp < 2) {
    ctx.error(zero.loc, node.child_path("zero_stage"),
              "2 is FSDP2 under a pipeline schedule (pp >= 2); without pipelines use kind: data_parallel");
  }
}

// Step 3 of read_megatron: the schedule (and the interleaved schedule's virtual stages),
// sequence parallelism, the ZeRO stage, the optimizer and its gradient accumulation dtype, the
// collective options and which ranks and micro-batches are simulated.
void read_megatron_options(const Node& node, MapReader& r, std::vector<std::string>& defaults_applied,
                           MegatronSpec& mg) {
  auto& ctx = node.context();
  (void)megatron_default(r, "schedule", defaults_applied);
  const auto schedule = r.choice("schedule", {"1f1b", "interleaved"}, defaults::text("megatron.schedule"));
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
  (void)megatron_default(r, "sequence_parallel", defaults_applied);
  mg.sequence_parallel = r.optional<bool>("sequence_parallel", defaults::flag("megatron.sequence_parallel")).value;
  (void)megatron_default(r, "zero_stage", defaults_applied);
  const auto zero = r.optional<int>("zero_stage", static_cast<int>(defaults::integer("megatron.zero_stage")));
  if (zero.valid && !ZeroPolicy::kMegatronStages.contains(zero.value)) {
    ctx.error(zero.loc, node.child_path("zero_stage"),
              fmt::format("expected 0 or 1 (Megatron's distributed optimizer) or 2 (FSDP2 under the pipeline "
                          "schedule) with kind megatron, got {}",
                          zero.value));
  }
  mg.zero_stage = zero.value;
  // Megatron-LM's optimizer, or DeepSpeed's as Megatron-DeepSpeed runs it (and its gradient
  // accumulation dtype, DeepSpeed's data_types.grad_accum_dtype).
  const auto optimizer = r.choice("optimizer", {"megatron", "deepspeed"}, "megatron");
  if (optimizer.valid && optimizer.value == "deepspeed") mg.optimizer = MegatronSpec::Optimizer::kDeepSpeed;
  check_megatron_fsdp(node, zero, mg);
  if (r.has("grad_accum_dtype")) {
    const auto accum = r.choice("grad_accum_dtype", {"fp32", "bf16"});
    if (accum.valid) mg.fp32_grad_accum = accum.value == "fp32";
  }
  read_megatron_overlap(node, r, mg);
  mg.collectives = parse_collective_options(r);
  mg.all_ranks = parse_all_ranks(r);
  mg.all_micro_batches = r.choice("simulate_micro_batches", {"steady_state", "all"}, "steady_state").value == "all";
}

// Step 4 of read_megatron: the ranks' devices, listed (as many as the degrees' product) or the
// machine's first GPUs.
void place_megatron_ranks(const Node& node, MapReader& r, const topo::Topology* topology, bool tp_ok,
                          std::size_t errors_before, MegatronSpec& mg) {
  auto& ctx = node.context();
  const std::string degrees = mg.cp > 1
                                  ? fmt::format("tp x cp x pp x dp = {} x {} x {} x {}", mg.tp, mg.cp, mg.pp, mg.dp)
                                  : fmt::format("tp x pp x dp = {} x {} x {}", mg.tp, mg.pp, mg.dp);
  const std::string product = mg.cp > 1 ? "tp x cp x pp x dp" : "tp x pp x dp";
  const auto ranks = static_cast<std::size_t>(
      checked_ranks(ctx, node.location(), node.path(),
                    {std::max(1, mg.tp), std::max(1, mg.cp), std::max(1, mg.pp), std::max(1, mg.dp)}, degrees));
  if (auto devices = parse_devices(r, node, topology, false)) {
    mg.devices = std::move(*devices);
    if (mg.devices.size() != ranks && ctx.error_count() == errors_before) {
      ctx.error(node.location(), node.child_path("devices"),
                fmt::format("{} = {} ranks but the devices list {}", product, ranks, mg.devices.size()));
    }
  } else if (topology) {
    const auto gpus = topology->devices_of(topo::DeviceKind::kGpu);
    if (ranks > gpus.size()) {
      // (a tp the model cannot split over is reported at tp, not as the ranks it makes)
      if (tp_ok) {
        ctx.error(node.location(), node.path(),
                  fmt::format("{} = {} ranks but the machine has {} GPUs", product, ranks, gpus.size()));
      }
    } else {
      for (std::size_t i = 0; i < ranks; ++i) mg.devices.push_back(topology->device(gpus[i]).name);
    }
  }
}

// kind: megatron, 3D parallelism.
std::optional<StrategySpec> read_megatron(const Node& node, MapReader& r, const topo::Topology* topology,
                                          TrainingFromStrategy* training, LevelSizes /*levels*/,
                                          std::size_t errors_before) {
  auto& ctx = node.context();
  MegatronSpec mg;
  // Keys left out take Megatron-LM's defaults (configs/defaults.yaml), named in the report.
  std::vector<std::string> unused_defaults;
  std::vector<std::string>& defaults_applied = training ? training->defaults : unused_defaults;
  const bool tp_ok = read_megatron_degrees(node, r, training, defaults_applied, mg);
  read_pipeline_split(node, r, training, mg);
  read_megatron_options(node, r, defaults_applied, mg);
  place_megatron_ranks(node, r, topology, tp_ok, errors_before, mg);
  if (ctx.error_count() != errors_before) return std::nullopt;
  return StrategySpec{mg};
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
                                    DataParallelSpec& dp, const NameDefault& ds_default) {
  auto& ctx = node.context();
  DataParallelDegrees out;
  if (!r.has("zero_stage")) ds_default("zero_stage", defaults::text("deepspeed.stage"));
  out.stage = r.optional<int>("zero_stage", static_cast<int>(defaults::integer("deepspeed.stage")));
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

// kind: data_parallel, ZeRO 0-3 with offload, tp, ep and partitionings; also read for an unknown kind.
std::optional<StrategySpec> read_data_parallel(const Node& node, MapReader& r, const topo::Topology* topology,
                                               TrainingFromStrategy* training, LevelSizes levels,
                                               std::size_t errors_before) {
  auto& ctx = node.context();
  DataParallelSpec dp;
  // Keys left out take DeepSpeed's defaults (configs/defaults.yaml), named in the report.
  std::vector<std::string> unused_defaults;
  std::vector<std::string>& defaults_applied = training ? training->defaults : unused_defaults;
  const auto ds_default = [&](const char* key, const std::string& value) {
    defaults_applied.push_back(
        fmt::format("strategy.{}={} (DeepSpeed {}'s default)", key, value, defaults::deepspeed_version()));
  };
  const DataParallelDegrees degrees = read_dp_degrees(node, r, training, dp, ds_default);
  const auto& stage = degrees.stage;
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
  place_dp_ranks(node, r, topology, degrees, dp);
  dp.collectives = parse_collective_options(r);
  dp.all_ranks = parse_all_ranks(r);
  if (dp.ep > 1 && (dp.tp > 1 || dp.offload || r.has("partitioning"))) {
    ctx.error(degrees.ep.loc, node.child_path("ep"),
              "expert parallelism together with tp > 1, a partitioning or optimizer offload is not modelled");
  }
  if (dp.offload && topology && !dp.devices.empty()) check_offload_hosts(ctx, *topology, dp, offload_at);
  read_dp_partitioning(node, r, stage, partitioned, levels, dp);
  if (ctx.error_count() != errors_before) return std::nullopt;
  return StrategySpec{dp};
}

}  // namespace

namespace {

// Every strategy kind: its name, its line in `offsim list`, and its reader. The builder follows from
// the spec the reader returns (build_iteration); `deepspeed` reads into a data_parallel spec.
struct StrategyKind {
  const char* kind;
  const char* description;
  std::optional<StrategySpec> (*read)(const Node&, MapReader&, const topo::Topology*, TrainingFromStrategy*, LevelSizes,
                                      std::size_t);
};

const std::vector<StrategyKind>& strategy_kinds() {
  static const std::vector<StrategyKind> kinds{
      {"data_parallel",
       "data parallelism with ZeRO stage 0-3: bucketed ring all-reduce or reduce-scatter of gradients, "
       "partitioned optimizer states (1+, and at 0 DeepSpeed's BF16_Optimizer with fp32 gradients), gradients "
       "(2+) and parameters with per-submodule all-gathers (3), "
       "hierarchical partitioning (ZeRO++, MiCS, 3-level), optimizer offload to CPU (stages 2-3) or NVMe, "
       "parameter offload",
       read_data_parallel},
      {"deepspeed",
       "a DeepSpeed ds_config.json as the strategy: ZeRO stage, buckets, overlap, optimizer offload, "
       "ZeRO++ (qwZ, hpZ, qgZ), gradient accumulation dtype and batch settings mapped onto data_parallel; "
       "ignored keys listed",
       read_deepspeed},
      {"megatron",
       "3D parallelism as Megatron-LM/DeepSpeed run it: tensor parallelism (column/row split, all-reduces per "
       "layer, or with tp_comm_overlap Transformer Engine's userbuffers overlap of them with the GEMMs), context "
       "parallelism (cp: ring attention), pipeline stages with the 1F1B or interleaved schedule "
       "(even or Megatron-Core's uneven splits), data-parallel replicas with ZeRO-0/1 (Megatron's optimizer, "
       "its reduce-scatter and gather optionally overlapped with compute, or DeepSpeed's) or ZeRO-2 (FSDP2 under "
       "the pipeline schedule: gradients sharded, reduce-scattered once per iteration)",
       read_megatron},
      {"collective", "one all-gather, reduce-scatter or all-reduce over the listed ranks (collective benchmarks)",
       read_collective}};
  return kinds;
}

}  // namespace

std::vector<StrategyInfo> list_strategies() {
  std::vector<StrategyInfo> out;
  for (const auto& k : strategy_kinds()) out.push_back({k.kind, k.description});
  return out;
}

std::optional<StrategySpec> parse_strategy(const Node& node, const topo::Topology* topology,
                                           TrainingFromStrategy* training) {
  auto& ctx = node.context();
  const std::size_t errors_before = ctx.error_count();
  MapReader r(node);
  std::vector<std::string> names;
  for (const auto& k : strategy_kinds()) names.emplace_back(k.kind);
  const auto kind = r.choice("kind", names);
  if (training) training->kind_at = kind.loc;
  // Level sizes for partitioning and collective stages: filled once the ranks are known.
  LevelSizes levels;
  if (topology) {
    for (const auto g : topology->devices_of(topo::DeviceKind::kGpu)) {
      if (topology->device(g).node == 0) ++levels.gpus_per_node;
    }
  }
  // An unknown kind has its error from choice(); the rest is read as data_parallel, so that its
  // other mistakes are reported in the same run.
  const auto& kinds = strategy_kinds();
  const auto it = std::find_if(kinds.begin(), kinds.end(), [&](const StrategyKind& k) { return kind.value == k.kind; });
  return (it == kinds.end() ? read_data_parallel : it->read)(node, r, topology, training, levels, errors_before);
}

}  // namespace offsim::models
