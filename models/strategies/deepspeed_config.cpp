#include "models/strategies/deepspeed_config.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <optional>
#include <string_view>
#include <utility>

#include "sim/config/did_you_mean.hpp"

#include "models/strategies/phases/zero_policy.hpp"
#include "models/strategies/value_ranges.hpp"

namespace offsim::models {

using sim::config::MapReader;
using sim::config::Node;

namespace {

// DeepSpeed's defaults (runtime/zero/config.py, offload_config.py, the same in 0.13.3 and 0.16;
// configs/defaults.yaml cites them; deepspeed-offload.md section 4). Applied only when the
// ds_config leaves the key out, and named in a warning and in the report's defaults applied.
constexpr auto kDefaultReduceBucketSize = static_cast<double>(deepspeed_defaults::kReduceBucketSize);
constexpr auto kDefaultSubGroupSize = static_cast<double>(deepspeed_defaults::kSubGroupSize);
constexpr bool kDefaultPinMemory = false;
constexpr double kDefaultRatio = 1.0;
constexpr int kDefaultBufferCount = 4;  // offload_optimizer.buffer_count
// Every value's range is the native reader's (models/strategies/value_ranges.hpp).
using sim::config::check_range;
using sim::config::ValueRange;

// Every key DeepSpeedZeroConfig accepts, by field name and alias (deepspeed/runtime/zero/config.py,
// DeepSpeed 0.16 to 0.18): another key is refused, as DeepSpeed's pydantic model (extra="forbid") does.
constexpr std::array<std::string_view, 55> kDeepSpeedZeroKeys{"stage",
                                                              "contiguous_gradients",
                                                              "reduce_scatter",
                                                              "reduce_bucket_size",
                                                              "use_multi_rank_bucket_allreduce",
                                                              "allgather_partitions",
                                                              "allgather_bucket_size",
                                                              "overlap_comm",
                                                              "load_from_fp32_weights",
                                                              "elastic_checkpoint",
                                                              "offload_param",
                                                              "offload_optimizer",
                                                              "zenflow",
                                                              "sub_group_size",
                                                              "cpu_offload_param",
                                                              "cpu_offload_use_pin_memory",
                                                              "cpu_offload",
                                                              "prefetch_bucket_size",
                                                              "stage3_prefetch_bucket_size",
                                                              "param_persistence_threshold",
                                                              "stage3_param_persistence_threshold",
                                                              "model_persistence_threshold",
                                                              "stage3_model_persistence_threshold",
                                                              "max_live_parameters",
                                                              "stage3_max_live_parameters",
                                                              "max_reuse_distance",
                                                              "stage3_max_reuse_distance",
                                                              "gather_16bit_weights_on_model_save",
                                                              "stage3_gather_16bit_weights_on_model_save",
                                                              "module_granularity_threshold",
                                                              "stage3_module_granularity_threshold",
                                                              "use_all_reduce_for_fetch_params",
                                                              "stage3_use_all_reduce_for_fetch_params",
                                                              "allgather_sequential",
                                                              "stage3_allgather_sequential",
                                                              "partition_stream_chunk_size",
                                                              "stage3_partition_stream_chunk_size",
                                                              "stage3_gather_fp16_weights_on_model_save",
                                                              "ignore_unused_parameters",
                                                              "legacy_stage1",
                                                              "round_robin_gradients",
                                                              "zero_hpz_partition_size",
                                                              "zero_quantized_weights",
                                                              "zero_quantized_nontrainable_weights",
                                                              "zero_quantized_gradients",
                                                              "zeropp_loco_param",
                                                              "mics_shard_size",
                                                              "mics_hierarchical_params_gather",
                                                              "memory_efficient_linear",
                                                              "pipeline_loading_checkpoint",
                                                              "override_module_apply",
                                                              "log_trace_cache_warnings",
                                                              "enable_sanity_checks",
                                                              "save_muon_momentum_buffer_in_memory",
                                                              "leaf_module"};
// Those of them that change DeepSpeed's time or memory and offsim does not model: named apart from
// the keys that change neither, so that a user knows the prediction does not follow them.
constexpr std::array<std::string_view, 14> kZeroKeysThatMoveResults{"contiguous_gradients",
                                                                    "reduce_scatter",
                                                                    "allgather_bucket_size",
                                                                    "prefetch_bucket_size",
                                                                    "stage3_prefetch_bucket_size",
                                                                    "max_live_parameters",
                                                                    "stage3_max_live_parameters",
                                                                    "max_reuse_distance",
                                                                    "stage3_max_reuse_distance",
                                                                    "round_robin_gradients",
                                                                    "zenflow",
                                                                    "mics_shard_size",
                                                                    "module_granularity_threshold",
                                                                    "stage3_module_granularity_threshold"};

// The candidate made of the same '_'-separated words in another order (comm_overlap and
// overlap_comm), which an edit distance does not find.
std::optional<std::string> same_words(const std::string& key, const std::vector<std::string>& candidates) {
  const auto words = [](const std::string& s) {
    std::vector<std::string> out;
    std::size_t start = 0;
    for (std::size_t end; (end = s.find('_', start)) != std::string::npos; start = end + 1) {
      out.push_back(s.substr(start, end - start));
    }
    out.push_back(s.substr(start));
    std::sort(out.begin(), out.end());
    return out;
  };
  const auto mine = words(key);
  for (const auto& c : candidates) {
    if (words(c) == mine) return c;
  }
  return std::nullopt;
}

// "auto": a value the Hugging Face Trainer fills in from its own arguments.
bool is_auto(const Node& n) {
  return n.is_scalar() && n.yaml().Scalar() == "auto";
}

// What the ZeRO section is read against: the ranks and their levels, the ZeRO++ formats named in
// the strategy, the DeepSpeed version's host costs, and tensor parallelism.
struct ZeroContext {
  const LevelSizes& levels;
  std::optional<Quantization> qwz, qgz;
  Runtime runtime;
  int tp;
};

// Reads one ds_config into a DeepSpeedImport section by section, collecting the DeepSpeed defaults
// it applies and the keys it does not model, for the two warnings at the end.
class DsConfigReader {
 public:
  DsConfigReader(const Node& node, DeepSpeedImport& out) : node_(node), ctx_(node.context()), out_(out) {}
  // What the ZeRO stage read so far partitions (phases/zero_policy.hpp); nothing for a stage out of
  // range, which is reported at its key.
  [[nodiscard]] ZeroPartitioning zero_partitioned() const {
    return ZeroPolicy::partitioning_if_valid(out_.strategy.zero_stage).value_or(ZeroPartitioning{});
  }

  // Ulysses sequence parallelism (ulysses.hpp), before the batch sizes, which count dp = ranks / sp.
  void read_sequence_parallel(MapReader& r, std::size_t devices, int tp);
  void read_batch_sizes(MapReader& r, std::size_t devices, int tp);
  void read_precision(MapReader& r);
  void read_zero(const std::optional<Node>& zero, const ZeroContext& zc);
  // data_types.grad_accum_dtype and communication_data_type, after read_precision and read_zero.
  void read_data_types(MapReader& r);
  // The two warnings: defaults applied, keys ignored (those of `r` not read are ignored too).
  void warn(MapReader& r);
  // Top-level sections that change the run: AutoTP (read against strategy.tp), Ulysses sequence
  // parallelism and fp8 (refused at their keys), and those offsim does not model (named apart).
  void read_parallelism_and_features(MapReader& r, int tp);
  void set_runtime(Runtime runtime) { runtime_ = runtime; }
  [[nodiscard]] const std::vector<std::string>& defaults() const { return defaults_; }

 private:
  std::optional<std::int64_t> batch(const Node& n);
  double zero_number(MapReader& z, const Node& zero, const char* key, double fallback, const ValueRange<double>& range);
  std::int64_t sub_group_size(MapReader& z, const Node& zero);
  void read_legacy_cpu_offload(MapReader& z, const Node& zero, Runtime runtime);
  void read_optimizer_offload(MapReader& z, const Node& zero, Runtime runtime);
  void read_param_offload(MapReader& z);
  void read_zero_plus_plus(MapReader& z, const Node& zero, const ZeroContext& zc);

  const Node& node_;
  sim::config::Context& ctx_;
  DeepSpeedImport& out_;
  std::vector<std::string> defaults_;
  std::vector<std::string> ignored_;
  // Where a legacy cpu_offload_params asked for parameter offload (checked once the optimizer
  // offload, legacy or not, is read).
  std::optional<std::pair<sim::config::Location, std::string>> legacy_param_offload_;
  std::vector<std::string> not_modelled_;  // keys that change DeepSpeed's time or memory, not modelled
  bool fp16_ = false;                      // fp16 mixed precision (no bf16 section enabled)
  Runtime runtime_ = Runtime::kDeepSpeed013;
};

// A batch size within ranges::kBatch (nullopt with an error otherwise).
std::optional<std::int64_t> DsConfigReader::batch(const Node& n) {
  const auto v = n.as<std::int64_t>();
  if (v && !check_range(ctx_, n.location(), n.path(), *v, ranges::kBatch)) return std::nullopt;
  return v;
}

void DsConfigReader::read_batch_sizes(MapReader& r, std::size_t devices, int tp) {
  if (auto mb = r.child("train_micro_batch_size_per_gpu"); mb && !is_auto(*mb)) out_.micro_batch = batch(*mb);
  if (auto ga = r.child("gradient_accumulation_steps"); ga && !is_auto(*ga)) out_.grad_accum = batch(*ga);
  auto total = r.child("train_batch_size");
  if (!total || is_auto(*total)) return;
  // DeepSpeed's batch arithmetic (runtime/config.py, _configure_train_batch_size):
  // train_batch_size = micro-batch x accumulation x data-parallel ranks; a missing one of the
  // two others is derived from it (accumulation 1 when both are missing), and it must divide.
  const auto v = total->as<std::int64_t>();
  if (!v) return;
  // With tensor parallelism (Megatron-DeepSpeed) the data-parallel ranks are the replicas; with
  // Ulysses the sequence-parallel groups (DeepSpeed's data_parallel world: the mpu's or the mesh's).
  const auto ranks = static_cast<std::int64_t>(devices) / std::max(1, tp) / std::max(1, out_.strategy.sp);
  const auto derive = [&](std::optional<std::int64_t>& missing, std::int64_t per, const char* what) {
    if (per <= 0 || ranks <= 0) return;
    if (*v % (per * ranks) != 0 || *v / (per * ranks) < 1) {
      ctx_.error(total->location(), total->path(),
                 fmt::format("train_batch_size {} is not a multiple of {} x {} ranks, so no whole {} fits", *v, per,
                             ranks, what));
      return;
    }
    missing = *v / (per * ranks);
  };
  if (out_.micro_batch && out_.grad_accum) {
    if (*v != *out_.micro_batch * *out_.grad_accum * ranks) {
      ctx_.error(total->location(), total->path(),
                 fmt::format("train_batch_size {} != micro-batch {} x accumulation {} x {} ranks", *v,
                             *out_.micro_batch, *out_.grad_accum, ranks));
    }
  } else if (out_.micro_batch) {
    derive(out_.grad_accum, *out_.micro_batch, "gradient_accumulation_steps");
  } else if (out_.grad_accum) {
    derive(out_.micro_batch, *out_.grad_accum, "train_micro_batch_size_per_gpu");
  } else {
    out_.grad_accum = 1;
    derive(out_.micro_batch, 1, "train_micro_batch_size_per_gpu");
  }
}

void DsConfigReader::read_sequence_parallel(MapReader& r, std::size_t devices, int tp) {
  // DeepSpeed's `sequence_parallel_size` (deepspeed/__init__.py: the (data_parallel,
  // sequence_parallel) mesh), or the `sequence_parallel: {enabled, size, mode: ulysses}` section
  // LLaMA-Factory writes for ALST.
  std::optional<sim::config::Located<int>> size;
  std::string path;
  if (auto section = r.child("sequence_parallel"); section && section->is_map()) {
    MapReader sp(*section);
    const auto enabled = sp.optional<bool>("enabled", false);
    const auto n = sp.optional<int>("size", 1);
    const auto mode = sp.has("mode") ? sp.choice("mode", {"ulysses"})
                                     : sim::config::Located<std::string>{"ulysses", section->location(), true};
    if (auto u = sp.child("ulysses"); u && u->is_map()) {
      MapReader ur(*u);
      if (const auto degree = ur.optional<int>("degree", n.value); degree.valid && degree.value != n.value) {
        ctx_.error(
            degree.loc, u->child_path("degree"),
            fmt::format("the Ulysses degree ({}) differs from sequence_parallel.size ({})", degree.value, n.value));
      }
      for (const auto& k : ur.take_unread_keys()) ignored_.push_back("sequence_parallel.ulysses." + k);
    }
    // ALST's tiled MLP and loss, and its activation checkpoint offload: memory, not modelled.
    for (const char* key : {"tiling", "memory_optimizations"}) {
      if (sp.has(key)) not_modelled_.push_back(std::string("sequence_parallel.") + key);
    }
    for (const auto& k : sp.take_unread_keys()) ignored_.push_back("sequence_parallel." + k);
    if (enabled.valid && enabled.value && n.valid && mode.valid) {
      size = n;
      path = section->child_path("size");
    }
  }
  if (auto n = r.child("sequence_parallel_size")) {
    if (const auto v = n->as<int>()) {
      size = sim::config::Located<int>{*v, n->location(), true};
      path = n->path();
    }
  }
  if (!size || size->value == 1) return;
  const auto ranks = static_cast<std::int64_t>(devices) / std::max(1, tp);
  if (size->value < 1 || tp > 1 || ranks % size->value != 0) {
    ctx_.error(size->loc, path,
               size->value < 1 ? fmt::format("expected >= 1, got {}", size->value)
               : tp > 1        ? std::string("Ulysses together with strategy.tp > 1 is not modelled")
                               : fmt::format("Ulysses over {} ranks must divide the {} ranks", size->value, ranks));
    return;
  }
  out_.strategy.sp = size->value;
  out_.sp_at = size->loc;
  out_.sp_path = path;
}

// 16-bit mixed precision: `bf16` (or its older spelling `bfloat16`), or `fp16`, whose dynamic loss
// scaling changes no kernel's time or size, so it is timed as bf16 (and the report says so).
void DsConfigReader::read_precision(MapReader& r) {
  std::optional<Node> disabled;  // a precision section present but not enabled, for the error
  // "auto" follows the Trainer's --bf16 / --fp16, and offsim trains in 16 bits: an "auto" bf16
  // section is on; an "auto" fp16 section is on when no bf16 section is (the user's flag was --fp16).
  const auto enabled = [&](const char* key, bool auto_means_on) {
    auto section = r.child(key);
    if (!section) return false;
    MapReader b(*section);
    const auto flag = b.child("enabled");
    const bool on = flag && (is_auto(*flag) ? auto_means_on : flag->as<bool>().value_or(false));
    if (!on) disabled = section;
    for (const auto& k : b.take_unread_keys()) ignored_.push_back(fmt::format("{}.{}", key, k));
    return on;
  };
  // An FP8 section (Transformer Engine through accelerate's DeepSpeed plugin): FP8 is modelled
  // under Megatron-Core only (training.precision: fp8 with strategy kind megatron).
  bool fp8_refused = false;
  if (auto fp8 = r.child("fp8")) {
    MapReader f(*fp8);
    const auto flag = f.child("enabled");
    if (flag && !is_auto(*flag) && flag->as<bool>().value_or(false)) {
      ctx_.error(fp8->location(), fp8->path(),
                 "FP8 training through DeepSpeed is not modelled: offsim models FP8 as Transformer Engine under "
                 "Megatron-Core (training.precision: fp8 with strategy kind megatron); enable bf16 here instead");
      fp8_refused = true;
    }
    for (const auto& k : f.take_unread_keys()) ignored_.push_back(fmt::format("fp8.{}", k));
  }
  const bool bf16 = enabled("bf16", true) || enabled("bfloat16", true);
  const bool fp16 = enabled("fp16", !bf16);
  fp16_ = fp16 && !bf16;
  if (fp16_) defaults_.push_back("fp16 timed as bf16 mixed precision (loss scaling is not timed)");
  if (!bf16 && !fp16 && !fp8_refused) {
    const Node& at = disabled ? *disabled : node_;
    ctx_.error(at.location(), at.path(),
               "offsim models 16-bit mixed precision: enable bf16 (or bfloat16, or fp16); fp32 training is not "
               "modelled");
  }
}

// A size in elements of the ZeRO section within `range`, its DeepSpeed default when left out.
double DsConfigReader::zero_number(MapReader& z, const Node& zero, const char* key, double fallback,
                                   const ValueRange<double>& range) {
  if (!z.has(key)) {
    defaults_.push_back(fmt::format("{}={:g}", key, fallback));
    return fallback;
  }
  const auto v = z.required<double>(key);
  if (v.valid && !check_range(ctx_, v.loc, zero.child_path(key), v.value, range)) return fallback;
  return v.value;
}

// The optimizer offload's subgroup, in elements (ranges::kSubGroupElements).
std::int64_t DsConfigReader::sub_group_size(MapReader& z, const Node& zero) {
  return static_cast<std::int64_t>(
      zero_number(z, zero, "sub_group_size", kDefaultSubGroupSize, ranges::kSubGroupElements));
}

void DsConfigReader::read_zero(const std::optional<Node>& zero, const ZeroContext& zc) {
  DataParallelSpec& dp = out_.strategy;
  // No zero_optimization section: DeepSpeed's default, stage 0 (plain data parallelism).
  if (!zero) {
    dp.zero_stage = 0;
    dp.reduce_bucket_elements = static_cast<std::int64_t>(kDefaultReduceBucketSize);
    dp.overlap_comm = false;  // DeepSpeed: None -> True iff stage 3
    defaults_.push_back(fmt::format("zero_optimization.stage=0, reduce_bucket_size={:g}, overlap_comm=false",
                                    kDefaultReduceBucketSize));
    return;
  }
  MapReader z(*zero);
  const auto stage = z.required<int>("stage");
  if (stage.valid) (void)check_range(ctx_, stage.loc, zero->child_path("stage"), stage.value, ranges::kZeroStage);
  dp.zero_stage = stage.value;
  const auto auto_size = [&](const char* key) {
    const auto v = z.child(key);
    return v && is_auto(*v);
  };
  out_.auto_reduce_bucket = auto_size("reduce_bucket_size");
  out_.auto_persistence_threshold = auto_size("stage3_param_persistence_threshold");
  if (out_.auto_reduce_bucket) defaults_.push_back("reduce_bucket_size=auto: hidden^2, as the HF Trainer fills it");
  if (out_.auto_persistence_threshold) {
    defaults_.push_back("stage3_param_persistence_threshold=auto: 10 x hidden, as the HF Trainer fills it");
  }
  dp.reduce_bucket_elements =
      out_.auto_reduce_bucket
          ? 0
          : static_cast<std::int64_t>(
                zero_number(z, *zero, "reduce_bucket_size", kDefaultReduceBucketSize, ranges::kReduceBucketElements));
  if (z.has("overlap_comm")) {
    dp.overlap_comm = z.required<bool>("overlap_comm").value;
  } else {
    // DeepSpeed: None -> True iff stage 3.
    dp.overlap_comm = ZeroPolicy::deepspeed_default_overlap_comm(zero_partitioned());
    defaults_.push_back(fmt::format("overlap_comm={}", dp.overlap_comm));
  }
  // Read at stage 3 only (DeepSpeed's stages 1-2 have no parameter partitions to persist); its
  // default is named only there.
  dp.param_persistence_threshold =
      out_.auto_persistence_threshold ? 0
      : zero_partitioned().parameters || z.has("stage3_param_persistence_threshold")
          ? static_cast<std::int64_t>(zero_number(z, *zero, "stage3_param_persistence_threshold",
                                                  static_cast<double>(DataParallelSpec::kDeepSpeedPersistenceThreshold),
                                                  ranges::kPersistenceThreshold))
          : DataParallelSpec::kDeepSpeedPersistenceThreshold;
  read_legacy_cpu_offload(z, *zero, zc.runtime);
  read_optimizer_offload(z, *zero, zc.runtime);
  read_param_offload(z);
  if (legacy_param_offload_ && !out_.strategy.offload) {
    ctx_.error(legacy_param_offload_->first, legacy_param_offload_->second, ranges::kParamOffloadNeedsOptimizerOffload);
  }
  read_zero_plus_plus(z, *zero, zc);
  for (const auto& k : z.take_unread_keys()) {
    if (std::find(kDeepSpeedZeroKeys.begin(), kDeepSpeedZeroKeys.end(), k) != kDeepSpeedZeroKeys.end()) {
      (std::find(kZeroKeysThatMoveResults.begin(), kZeroKeysThatMoveResults.end(), k) != kZeroKeysThatMoveResults.end()
           ? not_modelled_
           : ignored_)
          .push_back("zero_optimization." + k);
      continue;
    }
    // A key DeepSpeed does not know: DeepSpeed 0.6 and later refuse it (DeepSpeedZeroConfig,
    // extra="forbid"), older releases ignored it, so it is a located warning, with the key meant.
    std::vector<std::string> known(kDeepSpeedZeroKeys.begin(), kDeepSpeedZeroKeys.end());
    auto hint = sim::config::did_you_mean(k, known);
    if (!hint) hint = same_words(k, known);  // comm_overlap: overlap_comm
    const auto at = z.child(k);
    ctx_.warning(at ? at->location() : zero->location(), zero->child_path(k),
                 fmt::format("not a DeepSpeed ZeRO key ({}DeepSpeed 0.6 and later refuse it, older releases ignored "
                             "it); offsim ignores it",
                             hint ? fmt::format("did you mean '{}'? ", *hint) : std::string()));
  }
}

// DeepSpeed's legacy `cpu_offload: true` (with `cpu_offload_use_pin_memory`) means
// offload_optimizer {device: cpu} (runtime/zero/config.py reads it as that, with a warning).
void DsConfigReader::read_legacy_cpu_offload(MapReader& z, const Node& zero, Runtime runtime) {
  // DeepSpeed 0.3's `cpu_offload_params` (later `cpu_offload_param`): offload_param {device: cpu}.
  for (const char* key : {"cpu_offload_params", "cpu_offload_param"}) {
    if (!z.has(key) || z.has("offload_param")) continue;
    const auto legacy = z.required<bool>(key);
    if (!legacy.valid || !legacy.value) continue;
    DataParallelSpec& dp = out_.strategy;
    dp.offload_param = true;
    dp.param_pin_memory =
        z.has("cpu_offload_use_pin_memory") ? z.required<bool>("cpu_offload_use_pin_memory").value : kDefaultPinMemory;
    defaults_.push_back(
        fmt::format("{} (legacy) read as offload_param: {{device: cpu, pin_memory: {}}}", key, dp.param_pin_memory));
    if (!zero_partitioned().parameters) ctx_.error(legacy.loc, zero.child_path(key), "parameter offload needs stage 3");
    legacy_param_offload_.emplace(legacy.loc, zero.child_path(key));
  }
  if (!z.has("cpu_offload") || z.has("offload_optimizer")) return;
  DataParallelSpec& dp = out_.strategy;
  const auto legacy = z.required<bool>("cpu_offload");
  if (!legacy.valid || !legacy.value) return;
  OptimizerOffload offload;
  offload.pin_memory =
      z.has("cpu_offload_use_pin_memory") ? z.required<bool>("cpu_offload_use_pin_memory").value : kDefaultPinMemory;
  offload.ratio = kDefaultRatio;
  offload.sub_group_size = sub_group_size(z, zero);
  offload.runtime = runtime;
  defaults_.push_back(fmt::format("cpu_offload (legacy) read as offload_optimizer: {{device: cpu, pin_memory: {}}}",
                                  offload.pin_memory));
  if (!zero_partitioned().gradients) {
    ctx_.error(legacy.loc, zero.child_path("cpu_offload"), "optimizer offload is implemented for stages 2 and 3");
  }
  dp.offload = offload;
}

void DsConfigReader::read_optimizer_offload(MapReader& z, const Node& zero, Runtime runtime) {
  auto off = z.child("offload_optimizer");
  if (!off) return;
  DataParallelSpec& dp = out_.strategy;
  MapReader o(*off);
  const std::string device = o.choice("device", {"cpu", "none", "nvme"}).value;
  if (device == "cpu" || device == "nvme") {
    OptimizerOffload offload;
    offload.pin_memory = o.has("pin_memory") ? o.required<bool>("pin_memory").value : kDefaultPinMemory;
    if (!o.has("pin_memory")) defaults_.push_back(fmt::format("offload_optimizer.pin_memory={}", kDefaultPinMemory));
    if (o.has("ratio")) {
      const auto ratio = o.required<double>("ratio");
      const std::string path = off->child_path("ratio");
      if (ratio.valid && check_range(ctx_, ratio.loc, path, ratio.value, ranges::kOffloadRatio)) {
        offload.ratio = ratio.value;
        if (auto why = ranges::twin_flow_problem(dp.zero_stage, device == "nvme", ratio.value)) {
          ctx_.error(ratio.loc, path, *why);
        }
      }
    } else {
      offload.ratio = kDefaultRatio;
    }
    offload.sub_group_size = sub_group_size(z, zero);
    offload.runtime = runtime;
    if (device == "nvme") {
      // DeepSpeed defaults: buffer_count above, pipeline_read / pipeline_write false.
      offload.nvme = true;
      const auto flag = [&](const char* key) {
        if (o.has(key)) return o.required<bool>(key).value;
        defaults_.push_back(fmt::format("offload_optimizer.{}=false", key));
        return false;
      };
      offload.pipeline_read = flag("pipeline_read");
      offload.pipeline_write = flag("pipeline_write");
      offload.buffer_count = kDefaultBufferCount;
      if (o.has("buffer_count")) {
        const auto buffers = o.required<int>("buffer_count");
        if (buffers.valid &&
            check_range(ctx_, buffers.loc, off->child_path("buffer_count"), buffers.value, ranges::kNvmeBufferCount)) {
          offload.buffer_count = buffers.value;
        }
      } else {
        defaults_.push_back(fmt::format("offload_optimizer.buffer_count={}", kDefaultBufferCount));
      }
      if (!zero_partitioned().parameters)
        ctx_.error(off->location(), off->path(), "NVMe optimizer offload needs stage 3");
    }
    if (!zero_partitioned().gradients) {
      ctx_.error(off->location(), off->path(), "optimizer offload is implemented for stages 2 and 3");
    }
    dp.offload = offload;
  }
  for (const auto& k : o.take_unread_keys()) ignored_.push_back("zero_optimization.offload_optimizer." + k);
}

// ZeRO-Infinity parameter offload: the bf16 parameter partition lives in host memory.
void DsConfigReader::read_param_offload(MapReader& z) {
  auto op = z.child("offload_param");
  if (!op) return;
  DataParallelSpec& dp = out_.strategy;
  MapReader o(*op);
  const auto device = o.choice("device", {"cpu", "none", "nvme"});
  if (device.valid && device.value != "none") {
    if (device.value == "nvme") {
      ctx_.error(device.loc, op->child_path("device"), "parameter offload to NVMe is not modelled (cpu is)");
    } else if (!zero_partitioned().parameters) {
      ctx_.error(device.loc, op->child_path("device"), "parameter offload needs stage 3");
    } else if (!dp.offload) {
      ctx_.error(device.loc, op->child_path("device"), ranges::kParamOffloadNeedsOptimizerOffload);
    }
    dp.offload_param = true;
    dp.param_pin_memory = o.has("pin_memory") ? o.required<bool>("pin_memory").value : kDefaultPinMemory;
    if (!o.has("pin_memory")) defaults_.push_back(fmt::format("offload_param.pin_memory={}", kDefaultPinMemory));
  }
  for (const auto& k : o.take_unread_keys()) ignored_.push_back("zero_optimization.offload_param." + k);
}

// ZeRO++ as DeepSpeed builds its groups: hpZ over zero_hpz_partition_size consecutive ranks,
// qgZ's all-to-all in two hops (node, then across nodes), qwZ on the forward gathers.
void DsConfigReader::read_zero_plus_plus(MapReader& z, const Node& zero, const ZeroContext& zc) {
  DataParallelSpec& dp = out_.strategy;
  const LevelSizes& levels = zc.levels;
  const bool quantized_weights = z.has("zero_quantized_weights") && z.required<bool>("zero_quantized_weights").value;
  const bool quantized_gradients =
      z.has("zero_quantized_gradients") && z.required<bool>("zero_quantized_gradients").value;
  int hpz = 1;
  if (z.has("zero_hpz_partition_size")) {
    const auto v = z.required<int>("zero_hpz_partition_size");
    if (v.valid && check_range(ctx_, v.loc, zero.child_path("zero_hpz_partition_size"), std::int64_t{v.value},
                               ranges::kParallelSize)) {
      hpz = v.value;
    }
  }
  if (!quantized_weights && !quantized_gradients && hpz <= 1) return;
  if (!zero_partitioned().parameters) ctx_.error(zero.location(), zero.path(), "ZeRO++ options need stage 3");
  if (zc.tp > 1) ctx_.error(zero.location(), zero.path(), "ZeRO++ options together with tp > 1 are not modelled");
  Partitioning p;
  p.shard_ranks = levels.ranks;
  p.parameter_gather.stages = {Band{"cluster", 1, levels.ranks}};
  p.gradient_reduce.stages = {Band{"cluster", 1, levels.ranks}};
  if (quantized_weights) {
    if (!zc.qwz)
      ctx_.error(zero.location(), zero.path(), "zero_quantized_weights needs strategy.qwz (the int8 format)");
    p.parameter_gather.quantization = zc.qwz.value_or(Quantization{});
  }
  if (hpz > 1) {
    if (levels.ranks % hpz != 0) {
      ctx_.error(zero.location(), zero.path(),
                 fmt::format("zero_hpz_partition_size {} does not divide the {} ranks", hpz, levels.ranks));
    } else {
      p.secondary_ranks = hpz;
      p.secondary_gather.stages = {Band{"hpz", 1, hpz}};
    }
  }
  if (quantized_gradients) {
    if (!zc.qgz) {
      ctx_.error(zero.location(), zero.path(), "zero_quantized_gradients needs strategy.qgz (the int4 format)");
    }
    p.gradient_reduce.algorithm = StageAlgorithm::kAllToAll;
    p.gradient_reduce.quantization = zc.qgz.value_or(Quantization{});
    const int per_node = std::min(levels.gpus_per_node, levels.ranks);
    p.gradient_reduce.stages = {Band{"node", 1, per_node}};
    if (per_node < levels.ranks) p.gradient_reduce.stages.push_back(Band{"cluster", per_node, levels.ranks});
  }
  dp.partitioning = p;
}

// The gradient accumulation dtype picks DeepSpeed's optimizer wrapper at stages 0-1
// (layer_kernels.hpp, deepspeed_gradient_handling). Left out: DeepSpeed's default, fp32 for bf16
// without ZeRO and the model's dtype otherwise (engine.py get_data_types), so fp16 training
// accumulates in 16 bits (FP16_Optimizer without ZeRO).
void DsConfigReader::read_data_types(MapReader& r) {
  DataParallelSpec& dp = out_.strategy;
  std::optional<std::string> dtype;
  if (auto types = r.child("data_types")) {
    MapReader t(*types);
    if (t.has("grad_accum_dtype")) {
      const auto v = t.choice("grad_accum_dtype", {"fp32", "bf16", "fp16"});
      if (v.valid) dtype = v.value;
    }
    for (const auto& k : t.take_unread_keys()) ignored_.push_back("data_types." + k);
  }
  // communication_data_type (top level): the dtype of the gradient reduction; fp32 is modelled at
  // stages 2-3 without offload (gradient_reduce_dtype), the 16-bit dtypes are the default.
  // Under Ulysses DeepSpeed's engine replaces it with seq_parallel_comm_data_type (fp32 unless given;
  // runtime/engine.py, constants.py).
  const char* comm_key = dp.sp > 1 ? "seq_parallel_comm_data_type" : "communication_data_type";
  const bool comm_given = r.has(comm_key);
  if (dp.sp > 1 && !comm_given) defaults_.emplace_back("seq_parallel_comm_data_type=fp32");
  if (comm_given || dp.sp > 1) {
    const auto comm = comm_given ? r.choice(comm_key, {"fp32", "fp16", "bf16"})
                                 : sim::config::Located<std::string>{"fp32", node_.location(), true};
    if (comm.valid && comm.value == "fp32") {
      if (zero_partitioned().gradients && !dp.offload) {
        dp.fp32_gradient_reduce = true;
      } else {
        ignored_.push_back(std::string(comm_key) + "=fp32 (modelled at stages 2-3 without optimizer offload only)");
      }
    }
  }
  if (!dtype) {
    if (fp16_) dp.fp32_grad_accum = false;
    return;
  }
  dp.fp32_grad_accum = *dtype == "fp32";
  if (*dp.fp32_grad_accum && zero_partitioned().gradients) {
    dp.fp32_grad_accum.reset();
    ignored_.push_back("data_types.grad_accum_dtype=fp32 (fp32 accumulation is modelled at stages 0-1 only)");
  }
}

void DsConfigReader::read_parallelism_and_features(MapReader& r, int tp) {
  // AutoTP (DeepSpeed's tensor_parallel.autotp_size): the ranks' layout is the strategy's, so the
  // size must be strategy.tp, which offsim runs as tensor parallelism under ZeRO.
  if (auto section = r.child("tensor_parallel"); section && section->is_map()) {
    MapReader t(*section);
    if (t.has("autotp_size")) {
      const auto size = t.required<int>("autotp_size");
      if (size.valid && size.value > 1 && size.value != tp) {
        ctx_.error(size.loc, section->child_path("autotp_size"),
                   fmt::format("AutoTP over {} ranks: give strategy.tp: {} (offsim runs it as tensor parallelism "
                               "under ZeRO; the strategy has tp = {})",
                               size.value, size.value, tp));
      }
    }
    for (const auto& k : t.take_unread_keys()) ignored_.push_back("tensor_parallel." + k);
  }
  // Ulysses sequence parallelism: read by read_sequence_parallel.
  // An enabled fp8 section is refused where the precision is read (read_precision).
  // Sections that change DeepSpeed's time or memory and offsim does not model.
  for (const char* key : {"activation_checkpointing", "aio", "compression_training", "curriculum_learning",
                          "data_efficiency", "progressive_layer_drop", "sparse_attention"}) {
    if (r.has(key)) not_modelled_.emplace_back(key);
  }
  // Adam's states and step are what offsim times; another optimizer has other states.
  // (Read from the YAML: an Adam optimizer section stays among the ignored keys.)
  // (operator[] on a config that is no mapping throws: the fuzzer's ds-config-scalar-optimizer.)
  if (!node_.yaml().IsMap()) return;
  if (const YAML::Node opt = node_.yaml()["optimizer"];
      opt.IsDefined() && opt.IsMap() && opt["type"].IsDefined() && opt["type"].IsScalar()) {
    const std::string type = opt["type"].Scalar();
    std::string lower(type);
    std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return std::tolower(c); });
    if (lower != "adam" && lower != "adamw" && lower != "fusedadam" && lower != "cpuadam") {
      not_modelled_.push_back(fmt::format("optimizer.type={} (Adam's states and step are timed)", type));
      (void)r.has("optimizer");  // named above, not among the ignored keys
    }
  }
}

void DsConfigReader::warn(MapReader& r) {
  for (const auto& k : r.take_unread_keys()) ignored_.push_back(k);
  if (!defaults_.empty()) {
    ctx_.warning(node_.location(), node_.path(),
                 fmt::format("DeepSpeed {} defaults applied: {}", runtime_ == Runtime::kDeepSpeed016 ? "0.16" : "0.13",
                             fmt::join(defaults_, ", ")));
  }
  if (!not_modelled_.empty()) {
    ctx_.warning(node_.location(), node_.path(),
                 fmt::format("ds_config keys that change DeepSpeed's time or memory but offsim does not model (the "
                             "prediction does not follow them): {}",
                             fmt::join(not_modelled_, ", ")));
  }
  if (!ignored_.empty()) {
    ctx_.warning(node_.location(), node_.path(),
                 fmt::format("ds_config keys offsim does not model, ignored: {}", fmt::join(ignored_, ", ")));
  }
}

}  // namespace

std::optional<DeepSpeedImport> import_deepspeed_config(const Node& node, const std::vector<std::string>& devices,
                                                       const LevelSizes& levels, std::optional<Quantization> qwz,
                                                       std::optional<Quantization> qgz, Runtime runtime, int tp) {
  auto& ctx = node.context();
  const std::size_t errors_before = ctx.error_count();
  DeepSpeedImport out;
  out.strategy.devices = devices;
  out.strategy.tp = tp;
  DsConfigReader reader(node, out);
  MapReader r(node);
  reader.read_sequence_parallel(r, devices.size(), tp);
  reader.read_batch_sizes(r, devices.size(), tp);
  reader.read_precision(r);
  reader.read_zero(r.child("zero_optimization"), ZeroContext{levels, qwz, qgz, runtime, tp});
  reader.read_data_types(r);
  reader.read_parallelism_and_features(r, tp);
  reader.set_runtime(runtime);
  reader.warn(r);
  out.defaults = reader.defaults();
  if (ctx.error_count() != errors_before) return std::nullopt;
  return out;
}

void resolve_deepspeed_auto(const DeepSpeedImport& imported, std::int64_t hidden, DataParallelSpec& strategy) {
  if (imported.auto_reduce_bucket) strategy.reduce_bucket_elements = hidden * hidden;
  if (imported.auto_persistence_threshold) strategy.param_persistence_threshold = 10 * hidden;
}

}  // namespace offsim::models
