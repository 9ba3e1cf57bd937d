#include "models/strategies/deepspeed_config.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "models/strategies/value_ranges.hpp"

namespace offsim::models {

using sim::config::MapReader;
using sim::config::Node;

namespace {

// DeepSpeed 0.13.3 defaults (runtime/zero/config.py, offload_config.py; deepspeed-offload.md
// section 4). Applied only when the ds_config leaves the key out, and named in a warning.
constexpr auto kDefaultReduceBucketSize = static_cast<double>(deepspeed_defaults::kReduceBucketSize);
constexpr auto kDefaultSubGroupSize = static_cast<double>(deepspeed_defaults::kSubGroupSize);
constexpr bool kDefaultPinMemory = false;
constexpr double kDefaultRatio = 1.0;
constexpr int kDefaultBufferCount = 4;  // offload_optimizer.buffer_count
// Every value's range is the native reader's (models/strategies/value_ranges.hpp).
using sim::config::check_range;
using sim::config::ValueRange;

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

  void read_batch_sizes(MapReader& r, std::size_t devices, int tp);
  void read_precision(MapReader& r);
  void read_zero(const std::optional<Node>& zero, const ZeroContext& zc);
  // data_types.grad_accum_dtype and communication_data_type, after read_precision and read_zero.
  void read_data_types(MapReader& r);
  // The two warnings: defaults applied, keys ignored (those of `r` not read are ignored too).
  void warn(MapReader& r);

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
  bool fp16_ = false;  // fp16 mixed precision (no bf16 section enabled)
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
  // With tensor parallelism (Megatron-DeepSpeed) the data-parallel ranks are the replicas.
  const auto ranks = static_cast<std::int64_t>(devices) / std::max(1, tp);
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
  const bool bf16 = enabled("bf16", true) || enabled("bfloat16", true);
  const bool fp16 = enabled("fp16", !bf16);
  fp16_ = fp16 && !bf16;
  if (fp16_) defaults_.push_back("fp16 timed as bf16 mixed precision (loss scaling is not timed)");
  if (!bf16 && !fp16) {
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
    dp.overlap_comm = dp.zero_stage == 3;  // DeepSpeed: None -> True iff stage 3
    defaults_.push_back(fmt::format("overlap_comm={}", dp.overlap_comm));
  }
  dp.param_persistence_threshold =
      out_.auto_persistence_threshold
          ? 0
          : static_cast<std::int64_t>(zero_number(z, *zero, "stage3_param_persistence_threshold",
                                                  static_cast<double>(DataParallelSpec::kDeepSpeedPersistenceThreshold),
                                                  ranges::kPersistenceThreshold));
  read_legacy_cpu_offload(z, *zero, zc.runtime);
  read_optimizer_offload(z, *zero, zc.runtime);
  read_param_offload(z);
  read_zero_plus_plus(z, *zero, zc);
  for (const auto& k : z.take_unread_keys()) ignored_.push_back("zero_optimization." + k);
}

// DeepSpeed's legacy `cpu_offload: true` (with `cpu_offload_use_pin_memory`) means
// offload_optimizer {device: cpu} (runtime/zero/config.py reads it as that, with a warning).
void DsConfigReader::read_legacy_cpu_offload(MapReader& z, const Node& zero, Runtime runtime) {
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
  if (dp.zero_stage != 2 && dp.zero_stage != 3) {
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
      if (dp.zero_stage != 3) ctx_.error(off->location(), off->path(), "NVMe optimizer offload needs stage 3");
    }
    if (dp.zero_stage != 2 && dp.zero_stage != 3) {
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
    } else if (dp.zero_stage != 3) {
      ctx_.error(device.loc, op->child_path("device"), "parameter offload needs stage 3");
    } else if (!dp.offload) {
      ctx_.error(device.loc, op->child_path("device"),
                 "parameter offload is modelled together with offload_optimizer (as ZeRO-Infinity runs it)");
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
  if (dp.zero_stage != 3) ctx_.error(zero.location(), zero.path(), "ZeRO++ options need stage 3");
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
  if (r.has("communication_data_type")) {
    const auto comm = r.choice("communication_data_type", {"fp32", "fp16", "bf16"});
    if (comm.valid && comm.value == "fp32") {
      if (dp.zero_stage >= 2 && !dp.offload) {
        dp.fp32_gradient_reduce = true;
      } else {
        ignored_.push_back("communication_data_type=fp32 (modelled at stages 2-3 without optimizer offload only)");
      }
    }
  }
  if (!dtype) {
    if (fp16_) dp.fp32_grad_accum = false;
    return;
  }
  dp.fp32_grad_accum = *dtype == "fp32";
  if (*dp.fp32_grad_accum && dp.zero_stage >= 2) {
    dp.fp32_grad_accum.reset();
    ignored_.push_back("data_types.grad_accum_dtype=fp32 (fp32 accumulation is modelled at stages 0-1 only)");
  }
}

void DsConfigReader::warn(MapReader& r) {
  for (const auto& k : r.take_unread_keys()) ignored_.push_back(k);
  if (!defaults_.empty()) {
    ctx_.warning(node_.location(), node_.path(),
                 fmt::format("DeepSpeed 0.13.3 defaults applied: {}", fmt::join(defaults_, ", ")));
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
  reader.read_batch_sizes(r, devices.size(), tp);
  reader.read_precision(r);
  reader.read_zero(r.child("zero_optimization"), ZeroContext{levels, qwz, qgz, runtime, tp});
  reader.read_data_types(r);
  reader.warn(r);
  if (ctx.error_count() != errors_before) return std::nullopt;
  return out;
}

void resolve_deepspeed_auto(const DeepSpeedImport& imported, std::int64_t hidden, DataParallelSpec& strategy) {
  if (imported.auto_reduce_bucket) strategy.reduce_bucket_elements = hidden * hidden;
  if (imported.auto_persistence_threshold) strategy.param_persistence_threshold = 10 * hidden;
}

}  // namespace offsim::models
