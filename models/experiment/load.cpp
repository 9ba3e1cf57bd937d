// load_experiment: an experiment file (with !include, set: and --set) read and checked, and the
// cache of machines and calibration tables a sweep's points share.
#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <set>

#include "models/experiment.hpp"
#include "models/experiment/defaults.hpp"
#include "models/experiment/sections.hpp"
#include "models/experiment/torchtitan_section.hpp"
#include "models/strategies/deepspeed_pipeline.hpp"
#include "models/strategies/strategy_registry.hpp"
#include "models/strategies/value_ranges.hpp"
#include "models/transformer/model_parser.hpp"

namespace offsim::models {

using sim::config::Context;
using sim::config::MapReader;
using sim::config::Node;

std::shared_ptr<const ReadCache::Entry> ReadCache::find_or_begin_reading(const std::string& place,
                                                                         const std::vector<std::string>& overrides) {
  std::unique_lock lock(mutex_);
  auto key = std::make_pair(place, overrides);
  read_ended_.wait(lock, [&] { return !reading_.contains(key); });
  if (auto hit = find_locked(place, overrides)) return hit;
  reading_.insert(std::move(key));
  return nullptr;
}

void ReadCache::end_reading(const std::string& place, const std::vector<std::string>& overrides) {
  {
    const std::lock_guard guard(mutex_);
    reading_.erase(std::make_pair(place, overrides));
  }
  read_ended_.notify_all();
}

std::shared_ptr<const ReadCache::Entry> ReadCache::find_locked(const std::string& place,
                                                               const std::vector<std::string>& overrides) {
  const auto it = entries_.find(place);
  if (it == entries_.end()) return nullptr;
  auto& held = it->second;
  const auto match = std::find_if(held.begin(), held.end(), [&](const Held& h) { return h.overrides == overrides; });
  if (match == held.end()) return nullptr;
  std::rotate(held.begin(), match, match + 1);  // most recently used first
  return held.front().entry;
}

void ReadCache::insert(const std::string& place, std::vector<std::string> overrides, Entry entry) {
  using Machine = std::shared_ptr<const topo::NodeTopology>;
  const auto* machine = std::get_if<Machine>(&entry.value);
  const std::size_t elements =
      machine != nullptr
          ? std::max<std::size_t>(1, (*machine)->topology.devices().size() + (*machine)->topology.links().size())
          : 1;
  const std::lock_guard guard(mutex_);
  auto& held = entries_[place];
  std::erase_if(held, [&](const Held& h) { return h.overrides == overrides; });
  held.insert(held.begin(), Held{std::move(overrides), std::make_shared<const Entry>(std::move(entry)), elements});
  // Keep the newest value, then older ones while the place stays within its bounds.
  std::size_t kept = 1;
  std::size_t total = elements;
  while (kept < held.size() && kept < kValuesPerPlace && total + held[kept].elements <= kElementsPerPlace) {
    total += held[kept].elements;
    ++kept;
  }
  held.erase(held.begin() + static_cast<std::ptrdiff_t>(kept), held.end());
}

std::size_t ReadCache::size() const {
  const std::lock_guard guard(mutex_);
  std::size_t values = 0;
  for (const auto& [place, held] : entries_) values += held.size();
  return values;
}

void ReadCache::forget(const std::string& file) {
  const std::lock_guard guard(mutex_);
  const std::string prefix = file + '\n';
  std::erase_if(entries_, [&](const auto& entry) { return entry.first.starts_with(prefix); });
  // And the values read against what was read from it (a strategy in another file, read against
  // the machine or model of this one: read_key names them in its key).
  const std::string machine = "\nmachine " + prefix;
  const std::string model = "\nmodel " + prefix;
  for (auto& [place, held] : entries_) {
    std::erase_if(held, [&](const Held& h) {
      return std::ranges::any_of(h.overrides,
                                 [&](const std::string& o) { return o.starts_with(machine) || o.starts_with(model); });
    });
  }
  std::erase_if(entries_, [](const auto& entry) { return entry.second.empty(); });
}

namespace {

// training.seq against the model's context: required beyond configs/defaults.yaml's
// training.seq_required_above (a long-context model's context is not what it trains at), else the
// context by default; longer than the context only with rotary positions (learned positions end
// there).
void apply_sequence_length(Context& ctx, const Node& training, const TrainingRead& read, ExperimentSpec& spec) {
  ModelSpec& m = spec.model;
  m.context = m.seq;
  const std::int64_t limit = defaults::integer("training.seq_required_above");
  if (read.seq) {
    if (read.seq->value > m.context && m.position == PositionKind::kLearned) {
      ctx.error(read.seq->loc, training.child_path("seq"),
                fmt::format("{} tokens, but the model's learned positions end at {} (its context)", read.seq->value,
                            m.context));
      return;
    }
    m.seq = read.seq->value;
    return;
  }
  if (m.context > limit) {
    ctx.error(training.location(), training.child_path("seq"),
              fmt::format("missing required key (the sequence length to train at: the model's context is {} tokens, "
                          "longer than {}, so offsim does not take it; for example seq: {})",
                          m.context, limit, limit));
    return;
  }
  spec.defaults_applied.push_back(fmt::format("training.seq={} (the model's context)", m.context));
}

// What an override that names the machine's GPU kind (--set hardware.device=h200, which is no key)
// is told: the machine's GPUs, and the kinds that have cost tables beside the machine's folder.
std::string gpu_kind_note(const topo::NodeTopology& hw, const std::string& machine_file) {
  std::set<std::string> machine_kinds;
  for (const auto g : hw.topology.devices_of(topo::DeviceKind::kGpu)) {
    machine_kinds.insert(hw.topology.device(g).device_kind);
  }
  std::set<std::string> with_tables;
  std::error_code ec;
  const auto folder = std::filesystem::path(machine_file).parent_path() / ".." / "calibration";
  for (std::filesystem::directory_iterator it(folder, ec), end; !ec && it != end; it.increment(ec)) {
    if (it->path().extension() != ".yaml") continue;
    try {
      const YAML::Node y = YAML::LoadFile(it->path().string());
      if (y.IsMap() && y["peak"] && y["device_kind"] && y["device_kind"].IsScalar()) {
        with_tables.insert(y["device_kind"].Scalar());
      }
    } catch (const YAML::Exception&) {  // not a table: not listed
    }
  }
  return fmt::format(
      "the machine's GPUs are {}; another kind of GPU is another machine (hardware: !include "
      "../hardware/x.yaml){}; offsim list devices names them with their machines",
      fmt::join(machine_kinds, ", "),
      with_tables.empty() ? std::string()
                          : fmt::format(", and the kinds with cost tables are {}", fmt::join(with_tables, ", ")));
}

// The value at `node` that `parse()` reads, through the cache when there is one (ReadCache), kept
// as `Held`. `inputs`: what the reader takes from outside the node, as texts that begin with a
// newline (no override can spell them), named with the overrides under it.
template <typename Held, typename Parse>
std::optional<Held> read_through(const Node& node, ReadCache* cache, const std::vector<std::string>& inputs,
                                 Parse&& parse) {
  if (!cache) return parse();
  auto& ctx = node.context();
  const std::string place = node.file() + '\n' + node.path();
  std::vector<std::string> overrides = ctx.override_texts_under(node.path());
  overrides.insert(overrides.end(), inputs.begin(), inputs.end());
  if (const auto hit = cache->find_or_begin_reading(place, overrides)) {
    for (const auto& w : hit->warnings) ctx.warning(w.loc, w.key_path, w.message);
    ctx.note_known_paths(hit->known_paths);
    ctx.mark_overrides_used_under(node.path());
    return std::get<Held>(hit->value);
  }
  // This thread reads it; others asking for it meanwhile wait, and find it (or read it themselves
  // if this read fails or does not qualify for the cache).
  struct EndReading {
    ReadCache& cache;
    const std::string& place;
    const std::vector<std::string>& overrides;
    ~EndReading() { cache.end_reading(place, overrides); }
  } const end_reading{*cache, place, overrides};
  const std::size_t errors = ctx.error_count();
  const std::size_t warnings = ctx.warnings().size();
  std::optional<Held> parsed = parse();
  if (parsed && ctx.error_count() == errors && ctx.overrides_used_under(node.path())) {
    cache->insert(place, overrides,  // (a copy: end_reading names the read by them)
                  {*parsed,
                   {ctx.warnings().begin() + static_cast<std::ptrdiff_t>(warnings), ctx.warnings().end()},
                   std::make_shared<const std::vector<std::string>>(ctx.known_paths_under(node.path()))});
  }
  return parsed;
}

// The value at `node` read by `parse` (of the node alone), through the cache when there is one.
template <typename Value>
std::optional<Value> read_through(const Node& node, ReadCache* cache, std::optional<Value> (*parse)(const Node&)) {
  return read_through<Value>(node, cache, {}, [&] { return parse(node); });
}

// `calibration:`, or the machine's own tables (its `calibration:`) for what the experiment leaves
// out; returns where the collectives are given (for the strategy's checks).
sim::config::Location read_calibration(MapReader& r, const Node& root, const std::optional<Node>& hw_node,
                                       const topo::NodeTopology* hw, ReadCache* cache, ExperimentSpec& spec) {
  auto& ctx = root.context();
  sim::config::Location collectives_loc = root.location();
  // The machine's own tables (its `calibration:`), for what the experiment leaves out.
  std::optional<Node> machine_tables;
  if (hw_node && hw_node->is_map()) {
    const YAML::Node found = hw_node->yaml()["calibration"];
    if (found.IsDefined()) machine_tables = ctx.resolve(*hw_node, "calibration", &found);
    if (machine_tables && (machine_tables->broken() || !machine_tables->is_map())) machine_tables.reset();
  }
  std::optional<Node> calibration = r.child("calibration");
  if (!calibration && machine_tables) {
    calibration = machine_tables;
    spec.defaults_applied.push_back(fmt::format(
        "calibration=the machine's tables ({})",
        hw_node->yaml()["name"].IsDefined() && hw_node->yaml()["name"].IsScalar() ? hw_node->yaml()["name"].Scalar()
                                                                                  : hw_node->file()));
  } else if (!calibration) {
    ctx.error(root.location(), "calibration",
              "missing required key (expected a mapping with device: a device cost table, usually !include "
              "../calibration/x.yaml; the machine names no tables of its own)");
  }
  if (calibration) {
    MapReader c(*calibration);
    std::optional<Node> d = c.child("device");
    if (!d && !c.has("device") && calibration->path() == "calibration" && machine_tables) {
      // The experiment's calibration without a device table: the machine's.
      MapReader m(*machine_tables);
      d = m.child("device");
      (void)m.take_unread_keys();
      if (d) spec.defaults_applied.emplace_back("calibration.device=the machine's table");
    }
    if (!d && !c.has("device")) {  // (a failed include is reported already)
      ctx.error(calibration->location(), calibration->child_path("device"),
                "missing required key (expected a device cost table, usually !include ../calibration/x.yaml)");
    }
    if (d) {
      if (auto costs = read_through<DeviceCosts>(*d, cache, parse_device_costs)) {
        spec.device = *costs;
        // The machine's distinct GPU kinds first; its GPUs one by one only when one differs (the
        // first such GPU is named).
        const auto differs = [&](const std::string& kind) { return kind != costs->device_kind; };
        if (hw &&
            std::any_of(hw->topology.gpu_device_kinds().begin(), hw->topology.gpu_device_kinds().end(), differs)) {
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
    // The experiment's calibration without a host or collectives table: the machine's, named
    // (a machine names its measured tables so that including it gives them; roofline only when asked).
    const auto machine_table = [&](const char* key) -> std::optional<Node> {
      if (c.has(key) || calibration->path() != "calibration" || !machine_tables) return std::nullopt;
      MapReader m(*machine_tables);
      std::optional<Node> found = m.child(key);
      (void)m.take_unread_keys();
      if (found) spec.defaults_applied.push_back(fmt::format("calibration.{}=the machine's table", key));
      return found;
    };
    std::optional<Node> host = c.child("host");
    if (!host) host = machine_table("host");
    if (host) {
      if (auto costs = read_through<MeasuredCosts>(*host, cache, parse_measured_costs)) spec.host = *costs;
    }
    std::optional<Node> coll = c.child("collectives");
    if (!coll) coll = machine_table("collectives");
    if (coll) {
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
  return collectives_loc;
}

}  // namespace

// training.precision: fp8 needs FP8 tensor cores (the device table's fp8 section) and, for MXFP8,
// block-scaled ones; it is modelled as Transformer Engine under Megatron-Core (strategy megatron).
static void check_fp8(Context& ctx, const ExperimentSpec& spec, bool strategy_ok) {
  const Fp8Training& f = *spec.training.fp8;
  const std::string path = "training.precision";
  const auto& fp8 = spec.device.fp8;
  if (!fp8) {
    ctx.error(f.at, path,
              fmt::format("fp8 needs FP8 GEMM costs, and the device table '{}' has no fp8 section (no FP8 tensor-core "
                          "rate is known for it)",
                          spec.device.device_kind));
  } else if (!fp8->supported) {
    ctx.error(f.at, path,
              fmt::format("fp8 needs FP8 tensor cores, which '{}' does not have ({}); train in bf16",
                          spec.device.device_kind, fp8->source));
  } else if (f.recipe == Fp8Recipe::kMxfp8 && !fp8->mxfp8) {
    ctx.error(f.recipe_at, "training.fp8_recipe",
              fmt::format("mxfp8 needs tensor cores that take block-scaled MXFP8 operands, which '{}' does not have "
                          "({}); use fp8_recipe: delayed or current",
                          spec.device.device_kind, fp8->source));
  }
  if (strategy_ok && !strategy_kind(spec.strategy).runs_transformer_engine) {
    ctx.error(f.at, path,
              "fp8 is modelled as Transformer Engine under Megatron-Core: it needs strategy kind megatron "
              "(FP8 with ZeRO / FSDP data parallelism is not modelled)");
  }
}

namespace {

// What the model, strategy and training steps of load_experiment hand on to the next.
struct SectionsRead {
  bool needs_model = true;  // false for a collective benchmark
  bool strategy_ok = false, model_ok = false, training_ok = false;
  TrainingFromStrategy from_strategy;
  // The machine's and the model's place and overrides, when read: what the strategy is read
  // against, in its cache key (what a place read under its overrides holds does not change).
  std::string machine_read, model_read;
};

// `node`'s place and the overrides under it, as a cache key's input (it begins with a newline).
std::string read_key(const char* what, const Node& node) {
  return fmt::format("\n{} {}\n{}\n{}", what, node.file(), node.path(),
                     fmt::join(node.context().override_texts_under(node.path()), "\n"));
}

// Step 1 of load_experiment: `set: [key.path=value, ...]` in the file, overrides like --set (which
// wins), for example to take a slice of a large machine: set: ["hardware.nodes=2"].
void add_file_set(Context& ctx, MapReader& r) {
  if (auto set = r.child("set")) {
    std::vector<sim::config::Located<std::string>> entries;
    for (const auto& item : set->items()) {
      if (auto v = item.as<std::string>()) entries.push_back({*v, item.location(), true});
    }
    ctx.add_file_overrides(entries);
  }
}

// Step 3 of load_experiment: an override naming the machine's GPU kind (no key) is told why
// (gpu_kind_note).
void note_gpu_kind_overrides(Context& ctx, const topo::NodeTopology* hw, const std::optional<Node>& hw_node) {
  for (const char* key : {"hardware.device", "hardware.device_kind", "hardware.gpu"}) {
    if (hw && hw_node && !ctx.override_texts_under(key).empty()) {
      ctx.note_unknown_override(key, gpu_kind_note(*hw, hw_node->file()));
    }
  }
}

// Step 4 of load_experiment: the model before the strategy (when the experiment has one), so that
// the strategy's tp is checked against its heads and widths where it is read. Through the cache
// when there is one: a sweep's points read the same model file under the same overrides.
void read_model(MapReader& r, ReadCache* cache, ExperimentSpec& spec, SectionsRead& read) {
  if (!r.has("model")) return;
  const std::optional<Node> model_node = r.child("model");
  if (!model_node) return;
  if (auto m = read_through<ModelSpec>(*model_node, cache, parse_model)) {
    spec.model = *m;
    read.model_ok = true;
    read.from_strategy.model = &spec.model;
    if (cache) read.model_read = read_key("model", *model_node);
  }
}

// Step 5 of load_experiment: the strategy; more than one rank needs the collectives it runs
// (reduce_scatter, all_gather) in the calibration given at `collectives_loc`.
// parse_strategy through the cache when there is one: what it reads besides the node (the
// machine, the model it checks tp against, torchtitan's flag) named in the key.
std::optional<StrategySpec> parse_strategy_through(const Node& node, const topo::NodeTopology* hw, ReadCache* cache,
                                                   SectionsRead& read) {
  const topo::Topology* topology = hw ? &hw->topology : nullptr;
  TrainingFromStrategy& from = read.from_strategy;
  if (!hw || read.machine_read.empty()) return parse_strategy(node, topology, &from);
  const ModelSpec* model = from.model;
  const bool torchtitan = from.torchtitan;
  const std::vector<std::string> inputs{read.machine_read, model ? read.model_read : std::string("\nno model"),
                                        torchtitan ? "\ntorchtitan" : "\nnot torchtitan"};
  const auto held = read_through<ReadCache::StrategyRead>(node, cache, inputs, [&] {
    std::optional<ReadCache::StrategyRead> out;
    if (auto s = parse_strategy(node, topology, &from)) {
      auto training = std::make_shared<TrainingFromStrategy>(from);
      training->model = nullptr;
      out = ReadCache::StrategyRead{std::move(*s), std::move(training)};
    }
    return out;
  });
  if (!held) return std::nullopt;
  from = *held->training;
  from.model = model;
  from.torchtitan = torchtitan;
  return held->strategy;
}

void read_strategy(Context& ctx, MapReader& r, const topo::NodeTopology* hw, ReadCache* cache,
                   const sim::config::Location& collectives_loc, ExperimentSpec& spec, SectionsRead& read) {
  auto n = r.required_child("strategy", "a strategy mapping with kind");
  if (!n) return;
  if (auto s = parse_strategy_through(*n, hw, cache, read)) {
    spec.strategy_kind_at = read.from_strategy.kind_at;
    spec.strategy = *s;
    read.strategy_ok = true;
    const StrategyKindEntry& kind = strategy_kind(*s);
    const std::size_t ranks = kind.devices(*s).size();
    if (!kind.trains) read.needs_model = false;
    for (const char* needed : {"reduce_scatter", "all_gather"}) {
      if (ranks > 1 && !spec.collectives.roofline_collectives && !spec.collectives.collectives.contains(needed)) {
        ctx.error(collectives_loc, "calibration.collectives",
                  fmt::format("no {} fits (the strategy over {} ranks needs them)", needed, ranks));
      }
    }
  }
  if (read.from_strategy.collective) read.needs_model = false;
}

// Step of read_training: a DeepSpeed config's batch settings win over the training section, with
// a warning when they differ: the config is what DeepSpeed would run.
void adopt_deepspeed_batch(Context& ctx, const TrainingFromStrategy& from_strategy, TrainingSpec& training) {
  const auto adopt = [&](const std::optional<std::int64_t>& v, std::int64_t& field, const char* what) {
    if (!v) return;
    if (!ranges::kBatch.contains(*v)) {
      ctx.error(from_strategy.at, "strategy.config",
                fmt::format("{}: {}, got {}", what, ranges::kBatch.expected(), *v));
      return;
    }
    if (*v != field) {
      ctx.warning(from_strategy.at, "strategy.config",
                  fmt::format("{} {} from the DeepSpeed config replaces training's {}", what, *v, field));
    }
    field = *v;
  };
  adopt(from_strategy.micro_batch, training.micro_batch, "train_micro_batch_size_per_gpu");
  adopt(from_strategy.grad_accum, training.grad_accum, "gradient_accumulation_steps");
}

// training.framework left out: Megatron's frameworks under the megatron strategy (Megatron-Core's
// kernels: fused norms, the generic list), Hugging Face transformers for a config.json under
// data_parallel (its model classes are what such a run trains), plain PyTorch modules otherwise.
// Only the inference that changes the kernels is named among the defaults applied.
void infer_framework(ExperimentSpec& spec) {
  if (std::holds_alternative<MegatronSpec>(spec.strategy)) {
    spec.training.framework = Framework::kMegatronCore;
  } else if (spec.model.hf_config && std::holds_alternative<DataParallelSpec>(spec.strategy)) {
    spec.training.framework = Framework::kHfTransformers;
    spec.defaults_applied.emplace_back(
        "training.framework=hf-transformers (a Hugging Face config.json under data_parallel)");
  }
}

// The pipeline engine of a Megatron-DeepSpeed run named by training.framework: deepspeed-megatron
// (strategy.pipeline_engine left out, pp > 1) is DeepSpeed's PipelineEngine, which has no
// interleaved schedule (megatron_section.cpp resolves optimizer: deepspeed the same way).
void resolve_pipeline_engine(Context& ctx, const TrainingFromStrategy& from_strategy, ExperimentSpec& spec) {
  auto* mg = std::get_if<MegatronSpec>(&spec.strategy);
  if (!mg || from_strategy.pipeline_engine_given || mg->pp < 2 ||
      spec.training.framework != Framework::kDeepSpeedMegatron ||
      mg->pipeline_engine == MegatronSpec::PipelineEngine::kDeepSpeed) {
    return;
  }
  mg->pipeline_engine = MegatronSpec::PipelineEngine::kDeepSpeed;
  spec.defaults_applied.emplace_back(
      "strategy.pipeline_engine=deepspeed (training.framework deepspeed-megatron with pp > 1 runs DeepSpeed's "
      "PipelineEngine)");
  if (from_strategy.interleaved_at)
    ctx.error(*from_strategy.interleaved_at, "strategy.schedule", interleaved_under_deepspeed());
}

// The scatter/gather of pipeline tensors once the framework and the pipeline's engine are known
// (megatron_section.cpp read_pipeline_tensors named Megatron-LM's default where it mattered then).
// Under training.framework: deepspeed-megatron, Megatron's own schedules take Megatron-DeepSpeed's
// default (configs/defaults.yaml megatron_deepspeed: its training runs Megatron-Core's
// p2p_communication, which never splits, whatever its arguments.py flag says), named as that
// framework's; where DeepSpeed's engine runs the pipeline the key does not matter and is not named.
void resolve_pipeline_tensors(const TrainingFromStrategy& from_strategy, std::vector<std::string>& strategy_defaults,
                              ExperimentSpec& spec) {
  auto* mg = std::get_if<MegatronSpec>(&spec.strategy);
  if (!mg || from_strategy.scatter_gather_given) return;
  constexpr std::string_view kNamed = "strategy.scatter_gather_tensors_in_pipeline=";
  const auto named = std::find_if(strategy_defaults.begin(), strategy_defaults.end(),
                                  [&](const std::string& d) { return d.starts_with(kNamed); });
  const bool matters = mg->tp > 1 && mg->pp > 1 && !mg->sequence_parallel &&
                       mg->pipeline_engine == MegatronSpec::PipelineEngine::kMegatron;
  if (!matters) {
    if (named != strategy_defaults.end()) strategy_defaults.erase(named);
    return;
  }
  if (spec.training.framework != Framework::kDeepSpeedMegatron || named == strategy_defaults.end()) return;
  mg->scatter_gather_tensors_in_pipeline = defaults::flag("megatron_deepspeed.scatter_gather_tensors_in_pipeline");
  *named = fmt::format(
      "{}{} (Megatron-DeepSpeed's: its train_step runs Megatron-Core's p2p_communication, which sends whole tensors; "
      "--no-scatter-gather-tensors-in-pipeline reaches only text generation)",
      kNamed, mg->scatter_gather_tensors_in_pipeline);
}

// Megatron-DeepSpeed's gradient accumulation (configs/defaults.yaml megatron_deepspeed: its layers
// comment the fused path out) for Megatron's optimizer under training.framework:
// deepspeed-megatron, named among the defaults applied; DeepSpeed's optimizer owns param.grad.
void resolve_gradient_accumulation_fusion(const TrainingFromStrategy& from_strategy,
                                          std::vector<std::string>& strategy_defaults, ExperimentSpec& spec) {
  auto* mg = std::get_if<MegatronSpec>(&spec.strategy);
  if (!mg || from_strategy.gradient_accumulation_fusion_given ||
      spec.training.framework != Framework::kDeepSpeedMegatron || mg->optimizer != MegatronSpec::Optimizer::kMegatron) {
    return;
  }
  mg->gradient_accumulation_fusion = defaults::flag("megatron_deepspeed.gradient_accumulation_fusion");
  strategy_defaults.push_back(fmt::format(
      "strategy.gradient_accumulation_fusion={} (Megatron-DeepSpeed's: its linear layers' fused weight-gradient "
      "accumulation is commented out, so each micro-batch's gradients are added into main_grad apart)",
      mg->gradient_accumulation_fusion));
}

// Step 6 of load_experiment (training a model, not a collective benchmark): the model required,
// the training section read, the defaults recorded, the DeepSpeed config's batch adopted, then the
// checks of the strategy against the model and of fp8 against the device.
void read_training(Context& ctx, MapReader& r, ReadCache* cache, ExperimentSpec& spec, SectionsRead& read) {
  const TrainingFromStrategy& from_strategy = read.from_strategy;
  sim::config::Location grad_accum_at = r.node().location();
  if (!r.has("model")) (void)r.required_child("model", "a model (usually !include ../models/x.yaml)");
  TrainingRead training_read;
  training_read.megatron = read.strategy_ok && std::holds_alternative<MegatronSpec>(spec.strategy);
  std::optional<Node> training_node = r.required_child(
      "training", "a mapping with micro_batch, and seq where the model's context is longer than 8,192 tokens");
  if (training_node) {
    // Through the cache when there is one (what parse_training says besides the spec with it; its
    // one input, whether the strategy is Megatron's, in the key).
    const auto held = read_through<ReadCache::TrainingSectionRead>(
        *training_node, cache, {training_read.megatron ? "\nmegatron" : "\nnot megatron"}, [&] {
          std::optional<ReadCache::TrainingSectionRead> out;
          if (auto t = parse_training(*training_node, &training_read)) {
            out = ReadCache::TrainingSectionRead{*t, std::make_shared<const TrainingRead>(training_read)};
          }
          return out;
        });
    if (held) {
      training_read = *held->read;
      spec.training = held->training;
      read.training_ok = true;
    }
    grad_accum_at = training_read.grad_accum_at;
  }
  if (read.model_ok && training_node) apply_sequence_length(ctx, *training_node, training_read, spec);
  if (read.model_ok && read.training_ok && !training_read.framework_given) infer_framework(spec);
  if (read.strategy_ok && read.training_ok) {
    resolve_pipeline_engine(ctx, from_strategy, spec);
    resolve_pipeline_tensors(from_strategy, read.from_strategy.defaults, spec);
    resolve_gradient_accumulation_fusion(from_strategy, read.from_strategy.defaults, spec);
  }
  if (read.training_ok && spec.training.framework == Framework::kTorchtitan) {
    detail::check_torchtitan_training(*training_node, training_read.defaults);
    const auto* dp = std::get_if<DataParallelSpec>(&spec.strategy);
    if (read.strategy_ok && dp && !dp->fsdp2) {
      ctx.error(training_node->location(), "training.framework",
                "torchtitan's FSDP2 runs as kind: data_parallel with the training section in the experiment file "
                "itself (not a DeepSpeed config, not an !include'd training section, which the strategy is read "
                "before)");
    }
  }
  spec.defaults_applied.insert(spec.defaults_applied.end(), training_read.defaults.begin(),
                               training_read.defaults.end());
  spec.defaults_applied.insert(spec.defaults_applied.end(), from_strategy.defaults.begin(),
                               from_strategy.defaults.end());
  if (from_strategy.deepspeed) {
    for (const auto& d : from_strategy.deepspeed->defaults) spec.defaults_applied.push_back("strategy.config." + d);
  }
  adopt_deepspeed_batch(ctx, from_strategy, spec.training);
  if (auto* dp = std::get_if<DataParallelSpec>(&spec.strategy); dp && from_strategy.deepspeed) {
    resolve_deepspeed_auto(*from_strategy.deepspeed, spec.model.hidden, *dp);
  }
  if (read.strategy_ok && read.model_ok && read.training_ok) {
    check_against_model(ctx, spec.strategy, spec.model, spec.training, from_strategy, grad_accum_at);
  }
  if (read.training_ok && spec.training.fp8) check_fp8(ctx, spec, read.strategy_ok);
}

// A file of another kind given where an experiment was expected (`offsim run sweep.yaml`): its
// top-level keys say which, and one located error says which command reads it, in place of the
// missing hardware, model, strategy and training of an experiment and every key unknown to one.
// Only a file with none of an experiment's sections is taken for another kind.
void reject_other_kinds_of_file(Context& ctx, const Node& root) {
  const YAML::Node& y = root.yaml();
  if (!y.IsMap()) return;
  std::map<std::string, sim::config::Location> keys;
  for (auto it = y.begin(); it != y.end(); ++it) {
    if (!it->first.IsScalar()) continue;
    const YAML::Mark m = it->first.Mark();
    keys.emplace(it->first.Scalar(), sim::config::Location{root.file(), m.line + 1, m.column + 1});
  }
  for (const char* section : {"hardware", "model", "strategy", "training"}) {
    if (keys.contains(section)) return;
  }
  const std::string file = root.file();
  struct Kind {
    std::vector<std::string> keys;  // all present
    std::string what;               // "a sweep file"
    std::string use;                // the command that reads it
  };
  const std::vector<Kind> kinds{
      {{"axes"}, "a sweep file", fmt::format("offsim sweep {} --out results.csv", file)},
      {{"zip"}, "a sweep file", fmt::format("offsim sweep {} --out results.csv", file)},
      {{"experiment", "metrics"}, "a validation case", fmt::format("offsim validate {}", file)},
      {{"experiment", "recorded"}, "a regression case", fmt::format("offsim check {}", file)},
      {{"node", "network"},
       "a machine",
       fmt::format("offsim topo {}; an experiment names it as hardware: !include {}", file,
                   std::filesystem::path(file).filename().string())},
      {{"layers", "hidden"},
       "a model",
       fmt::format("offsim model {}; an experiment names it as model: !include FILE", file)},
      {{"device_kind"}, "a device cost table", "an experiment names it as calibration: {device: !include FILE}"},
      {{"framework", "modules"}, "a framework profile", "an experiment names the framework as training.framework"},
  };
  for (const auto& kind : kinds) {
    if (!std::all_of(kind.keys.begin(), kind.keys.end(), [&](const auto& k) { return keys.contains(k); })) continue;
    const std::string& key = kind.keys.front();
    ctx.error(keys.at(key), key,
              fmt::format("this file is {}, not an experiment (one with hardware, model, strategy and "
                          "training): {}",
                          kind.what, kind.use));
    ctx.finish();  // throws: nothing else of an experiment is there to check
  }
}

}  // namespace

// The steps in file order, each reporting its errors and going on, so that one run lists them all.
ExperimentSpec load_experiment(const std::filesystem::path& file, const std::vector<std::string>& overrides,
                               ReadCache* cache) {
  Context ctx(overrides);
  const Node root = ctx.load_root(file);
  reject_other_kinds_of_file(ctx, root);
  ExperimentSpec spec;
  spec.file = file.string();
  {
    MapReader r(root);
    add_file_set(ctx, r);
    spec.name = r.required<std::string>("name").value;
    // Step 2: the machine, then the calibration tables (the experiment's or the machine's own).
    std::shared_ptr<const topo::NodeTopology> hw;  // null when the machine has errors
    std::optional<Node> hw_node;
    if (auto n = r.required_child("hardware", "a machine description (usually !include ../hardware/x.yaml)")) {
      hw_node = n;
      const auto read = read_through<std::shared_ptr<const topo::NodeTopology>>(
          *n, cache, {}, [&]() -> std::optional<std::shared_ptr<const topo::NodeTopology>> {
            auto machine = topo::parse_machine(*n);
            if (!machine) return std::nullopt;
            return std::make_shared<const topo::NodeTopology>(std::move(*machine));
          });
      if (read) hw = *read;
    }
    const sim::config::Location collectives_loc = read_calibration(r, root, hw_node, hw.get(), cache, spec);
    note_gpu_kind_overrides(ctx, hw.get(), hw_node);
    SectionsRead read;
    if (cache && hw) read.machine_read = read_key("machine", *hw_node);
    read_model(r, cache, spec, read);
    read.from_strategy.torchtitan = detail::names_torchtitan(r);
    read_strategy(ctx, r, hw.get(), cache, collectives_loc, spec, read);
    // A collective benchmark has no model; training a model needs one.
    if (read.needs_model) read_training(ctx, r, cache, spec, read);
    if (auto c = r.child("cost")) spec.cost = parse_cost(*c);
    if (hw) spec.hardware = std::move(hw);
  }
  ctx.finish();
  spec.effective = ctx.effective();
  spec.warnings = ctx.warnings();
  return spec;
}

}  // namespace offsim::models
