// The strategy reader of kind: megatron (3D parallelism, Megatron-LM/Megatron-Core's keys) and its
// steps; parse_strategy (sections.cpp) calls it through strategy_kinds().
#include <fmt/format.h>

#include <optional>
#include <string>
#include <vector>

#include "models/experiment/defaults.hpp"
#include "models/experiment/section_helpers.hpp"
#include "models/experiment/sections.hpp"
#include "models/strategies/deepspeed_pipeline.hpp"
#include "models/strategies/partitioning_parser.hpp"
#include "models/strategies/pipeline_split.hpp"
#include "models/strategies/value_ranges.hpp"

namespace offsim::models::detail {

using sim::config::check_range;
using sim::config::Context;
using sim::config::MapReader;
using sim::config::Node;

namespace {

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
  const ZeroPartitioning partitioned = ZeroPolicy::partitioning_if_valid(mg.zero_stage).value_or(ZeroPartitioning{});
  const bool distributed_optimizer = partitioned.optimizer && !partitioned.gradients;  // stage 1
  if (param.value && (!grad.value || !distributed_optimizer)) {
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
              "2 is FSDP2 under a pipeline schedule (pp >= 2); without pipelines use kind: data_parallel with "
              "training.framework: torchtitan (FSDP2, with tp)");
  }
}

// Step of read_megatron_options: the pipeline's engine (MegatronSpec::PipelineEngine). Left out:
// DeepSpeed's PipelineEngine where Megatron-DeepSpeed runs the pipeline (optimizer: deepspeed and
// pp > 1; training.framework: deepspeed-megatron is resolved in load.cpp), else Megatron's own.
// DeepSpeed's engine runs only TrainSchedule (runtime/pipe/schedule.py): no interleaving.
void read_pipeline_engine(const Node& node, MapReader& r, std::vector<std::string>& defaults_applied,
                          const std::optional<sim::config::Location>& interleaved_at, TrainingFromStrategy* training,
                          MegatronSpec& mg) {
  auto& ctx = node.context();
  const bool given = r.has("pipeline_engine");
  const bool deepspeed_default = mg.optimizer == MegatronSpec::Optimizer::kDeepSpeed && mg.pp > 1;
  const auto engine =
      r.choice("pipeline_engine", {"megatron", "deepspeed"}, deepspeed_default ? "deepspeed" : "megatron");
  if ((given ? engine.valid && engine.value == "deepspeed" : deepspeed_default)) {
    mg.pipeline_engine = MegatronSpec::PipelineEngine::kDeepSpeed;
  }
  if (!given && deepspeed_default) {
    defaults_applied.emplace_back(
        "strategy.pipeline_engine=deepspeed (Megatron-DeepSpeed's pipeline with optimizer: deepspeed and pp > 1 runs "
        "DeepSpeed's PipelineEngine)");
  }
  if (training) {
    training->pipeline_engine_given = given;
    training->interleaved_at = interleaved_at;
  }
  if (interleaved_at && mg.pipeline_engine == MegatronSpec::PipelineEngine::kDeepSpeed) {
    ctx.error(*interleaved_at, node.child_path("schedule"), interleaved_under_deepspeed());
  }
}

// Step of read_megatron_options: Megatron-LM's scatter/gather of pipeline tensors
// (phases/pipeline_tensors.hpp), named among the defaults applied where it would change the run
// (tp > 1, pp > 1, no sequence parallelism, Megatron's own schedules). Under training.framework:
// deepspeed-megatron load.cpp's resolve_pipeline_tensors puts Megatron-DeepSpeed's default in.
void read_pipeline_tensors(MapReader& r, std::vector<std::string>& defaults_applied, TrainingFromStrategy* training,
                           MegatronSpec& mg) {
  const char* key = "scatter_gather_tensors_in_pipeline";
  if (training) training->scatter_gather_given = r.has(key);
  const bool matters =
      mg.tp > 1 && mg.pp > 1 && !mg.sequence_parallel && mg.pipeline_engine == MegatronSpec::PipelineEngine::kMegatron;
  if (matters) (void)megatron_default(r, key, defaults_applied);
  mg.scatter_gather_tensors_in_pipeline =
      r.optional<bool>(key, defaults::flag("megatron.scatter_gather_tensors_in_pipeline")).value;
}

// Step 3 of read_megatron: the schedule (and the interleaved schedule's virtual stages),
// sequence parallelism, the ZeRO stage, the optimizer and its gradient accumulation dtype, the
// collective options and which ranks and micro-batches are simulated.
void read_megatron_options(const Node& node, MapReader& r, std::vector<std::string>& defaults_applied,
                           TrainingFromStrategy* training, MegatronSpec& mg) {
  auto& ctx = node.context();
  (void)megatron_default(r, "schedule", defaults_applied);
  const auto schedule = r.choice("schedule", {"1f1b", "interleaved"}, defaults::text("megatron.schedule"));
  std::optional<sim::config::Location> interleaved_at;
  if (schedule.valid && schedule.value == "interleaved") {
    interleaved_at = schedule.loc;
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
  read_pipeline_engine(node, r, defaults_applied, interleaved_at, training, mg);
  read_pipeline_tensors(r, defaults_applied, training, mg);
  // Megatron-LM's gradient_accumulation_fusion (on by default; load.cpp puts Megatron-DeepSpeed's in
  // under its framework). DeepSpeed's optimizer owns param.grad: there the key is named ignored.
  const auto fusion =
      r.optional<bool>("gradient_accumulation_fusion", defaults::flag("megatron.gradient_accumulation_fusion"));
  mg.gradient_accumulation_fusion = fusion.value;
  if (training) training->gradient_accumulation_fusion_given = r.has("gradient_accumulation_fusion");
  if (r.has("gradient_accumulation_fusion") && mg.optimizer == MegatronSpec::Optimizer::kDeepSpeed) {
    node.context().warning(fusion.loc, node.child_path("gradient_accumulation_fusion"),
                           "ignored: DeepSpeed's optimizer owns param.grad, which autograd accumulates");
  }
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

}  // namespace

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
  read_megatron_options(node, r, defaults_applied, training, mg);
  place_megatron_ranks(node, r, topology, tp_ok, errors_before, mg);
  if (ctx.error_count() != errors_before) return std::nullopt;
  return StrategySpec{mg};
}

}  // namespace offsim::models::detail
