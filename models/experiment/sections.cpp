// The strategy, training and cost sections of an experiment, and the checks across them
// (sections.hpp). The strategy readers of each kind: collective here, megatron in
// megatron_section.cpp, data_parallel and deepspeed in data_parallel_section.cpp; the helpers
// they share (section_helpers.hpp) are defined here.
#include "models/experiment/sections.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <memory>
#include <optional>

#include "models/experiment/defaults.hpp"
#include "models/experiment/section_helpers.hpp"
#include "models/strategies/partitioning_parser.hpp"
#include "models/strategies/pipeline_split.hpp"
#include "models/strategies/ulysses.hpp"
#include "models/strategies/value_ranges.hpp"

namespace offsim::models {

using detail::parse_devices;
using detail::read_data_parallel;
using detail::read_deepspeed;
using detail::read_megatron;
using sim::config::check_range;
using sim::config::Context;
using sim::config::MapReader;
using sim::config::Node;

namespace detail {

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

}  // namespace detail

namespace {

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
  const bool megatron_code =
      out.megatron || (out.framework_given && t.framework != Framework::kPyTorch &&
                       t.framework != Framework::kHfTransformers && t.framework != Framework::kTorchtitan);
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

namespace detail {

namespace {

// devices_per_node lists this thread expanded over a machine without an error (parse_devices), the
// last few: the machine (its identity, held so that no other takes its address), the entries as
// written, and the devices they name.
struct ExpandedDeviceList {
  std::shared_ptr<const void> machine;
  int nodes = 0;
  std::vector<std::optional<std::string>> names;
  std::vector<std::string> devices;
};
std::vector<ExpandedDeviceList>& expanded_device_lists() {
  thread_local std::vector<ExpandedDeviceList> lists;
  return lists;
}
const std::vector<std::string>* expanded_before(const topo::Topology* topology, int nodes,
                                                const std::vector<std::optional<std::string>>& names) {
  if (topology == nullptr || !topology->identity()) return nullptr;
  for (const auto& e : expanded_device_lists()) {
    if (e.machine == topology->identity() && e.nodes == nodes && e.names == names) return &e.devices;
  }
  return nullptr;
}
void remember_expanded(const topo::Topology* topology, int nodes, std::vector<std::optional<std::string>> names,
                       const std::vector<std::string>& devices) {
  constexpr std::size_t kKept = 8;
  if (topology == nullptr || !topology->identity()) return;
  auto& lists = expanded_device_lists();
  if (lists.size() == kKept) lists.erase(lists.begin());
  lists.push_back({topology->identity(), nodes, std::move(names), devices});
}

}  // namespace

// The ranks' devices: `devices` (explicit), or `devices_per_node`, the same local order on every
// node of the machine (named n<k>.<device> when it has several nodes), nodes in order. nullopt
// when neither key is given (an error too when `required`).
std::optional<std::vector<std::string>> parse_devices(MapReader& r, const Node& node, const topo::Topology* topology,
                                                      bool required) {
  auto& ctx = node.context();
  std::vector<std::string> out;
  // Device indices listed so far, one flag per device of the machine: the duplicate check stays
  // linear without a hash node per name (a search's strategy lists 1,024 GPUs).
  std::vector<bool> listed(topology != nullptr ? topology->devices().size() : 0, false);
  constexpr std::size_t kGpusNamed = 8;  // how many GPU names an error lists
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
    if (listed[*d]) {
      ctx.error(item.location(), item.path(), fmt::format("device \"{}\" is listed twice", name));
      return false;
    }
    listed[*d] = true;
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
  // A list expanded over this machine before on this thread, without an error, gives the same
  // devices: a search's strategies name the same node GPUs for every point (1,024 checked names).
  if (const auto* devices = expanded_before(topology, nodes, names)) return *devices;
  const std::size_t errors_before = ctx.error_count();
  std::vector<bool> reported(items.size(), false);
  for (int n = 0; n < nodes; ++n) {
    // "n<k>." by hand: fmt::format per name was a quarter of this function in a sweep's points.
    const std::string prefix = nodes > 1 ? 'n' + std::to_string(n) + '.' : std::string();
    for (std::size_t i = 0; i < items.size(); ++i) {
      const auto& name = names[i];
      if (!name) continue;
      std::string full;
      full.reserve(prefix.size() + name->size());
      full.append(prefix).append(*name);
      if (!reported[i]) {
        const std::size_t errors = ctx.error_count();
        check(items[i], full, &*name);
        reported[i] = ctx.error_count() != errors;
      } else if (topology) {
        if (const auto d = topology->find_device(full)) listed[*d] = true;
      }
      out.push_back(full);
    }
  }
  if (ctx.error_count() == errors_before) remember_expanded(topology, nodes, std::move(names), out);
  return out;
}

}  // namespace detail

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
    if (const std::string unfit = dp->sp > 1 ? ulysses_unfit(m, dp->sp) : ""; !unfit.empty() && at.deepspeed) {
      ctx.error(at.deepspeed->sp_at, at.deepspeed->sp_path, unfit);
    }
  }
  if (const auto* mg = std::get_if<MegatronSpec>(&strategy)) {
    tensor_parallel(mg->tp);
    // Layers that do not divide go to the middle stages with a note in the report
    // (pipeline_split.hpp); splits that leave a stage or a chunk no layer are errors.
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
