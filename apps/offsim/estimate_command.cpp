// offsim estimate DS_CONFIG --model CONFIG --gpus N [--machine M] [--seq S]: the files a DeepSpeed
// user has, simulated as one experiment (the machine's own cost tables, DeepSpeed's defaults), with
// memory per tier per GPU beside DeepSpeed's own estimators (models/deepspeed_estimator.hpp).
#include <fmt/format.h>
#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <stdexcept>

#include "apps/offsim/commands.hpp"
#include "models/deepspeed_estimator.hpp"
#include "models/experiment.hpp"
#include "models/experiment/defaults.hpp"
#include "models/strategies/phases/zero_policy.hpp"
#include "models/transformer/model_parser.hpp"
#include "sim/config/config_reader.hpp"

namespace offsim::app {

namespace {

namespace fs = std::filesystem;

// --machine: a file, or a name of configs/hardware (found from here or a parent folder).
fs::path machine_file(const std::string& machine) {
  if (fs::is_regular_file(machine)) return fs::absolute(machine);
  const std::string file = machine.ends_with(".yaml") ? machine : machine + ".yaml";
  for (fs::path at = fs::current_path(); !at.empty(); at = at.parent_path()) {
    if (fs::is_regular_file(at / "configs" / "hardware" / file)) return at / "configs" / "hardware" / file;
    if (at == at.parent_path()) break;
  }
  throw std::invalid_argument(fmt::format(
      "--machine {}: no such file, nor configs/hardware/{} here or in a parent folder (offsim list machines)", machine,
      file));
}

// GPUs per node of a machine file, and whether it is a system of nodes (hardware.nodes applies).
std::pair<int, bool> gpus_per_node(const fs::path& file) {
  const YAML::Node y = YAML::LoadFile(file.string());
  if (!y.IsMap()) throw std::invalid_argument(fmt::format("{}: not a machine description", file.string()));
  const bool system = y["node"].IsDefined();
  // (A YAML::Node assigned to another writes into it: a fresh node for the node file.)
  const YAML::Node node = !system ? y
                          : y["node"].Tag() == "!include"
                              ? YAML::LoadFile((file.parent_path() / y["node"].Scalar()).string())
                              : y["node"];
  int gpus = 0;
  if (node.IsMap() && node["devices"].IsDefined() && node["devices"].IsSequence()) {
    for (const auto& d : node["devices"]) {
      if (d.IsMap() && d["kind"].IsDefined() && d["kind"].IsScalar() && d["kind"].Scalar() == "gpu") {
        gpus += d["count"].IsDefined() ? d["count"].as<int>(1) : 1;
      }
    }
  }
  return {std::max(gpus, 1), system};
}

// The largest module's own parameters, as DeepSpeed's model_to_params counts them for its ZeRO-3
// estimator: the embedding (or the untied head), or the widest MLP projection. Approximate: a fused
// QKV projection narrower than these is not looked for.
std::int64_t largest_layer(const models::ModelSpec& m) {
  const std::int64_t embedding = m.vocab * m.hidden;
  const std::int64_t mlp = m.ffn * m.hidden + (m.linear_bias ? m.ffn : 0);
  return std::max(embedding, mlp);
}

std::string gib(double bytes) {
  return fmt::format("{:.2f} GiB", bytes / (1024.0 * 1024.0 * 1024.0));
}

}  // namespace

int estimate_command(const EstimateOptions& o) {
  const fs::path ds = fs::absolute(o.ds_config), model_file = fs::absolute(o.model);
  const fs::path machine = machine_file(o.machine);
  const auto [per_node, system] = gpus_per_node(machine);
  const int nodes = (o.gpus + per_node - 1) / per_node;
  if (!system && nodes > 1) {
    throw std::invalid_argument(
        fmt::format("--gpus {}: {} is one node of {} GPUs; name a system (offsim list machines)", o.gpus,
                    machine.filename().string(), per_node));
  }
  // The model first: its context decides whether --seq is needed (training.seq's rule).
  std::optional<models::ModelSpec> model;
  {
    sim::config::Context ctx;
    model = models::parse_model(ctx.load_root(model_file));
    ctx.finish();
  }
  const std::int64_t limit = models::defaults::integer("training.seq_required_above");
  if (o.seq == 0 && model && model->seq > limit) {
    throw std::invalid_argument(fmt::format(
        "--seq: the model's context is {} tokens, longer than {}: give the sequence length to train at (--seq {})",
        model->seq, limit, limit));
  }
  // The experiment, written where it is read (and removed after).
  const fs::path dir = fs::temp_directory_path() / fmt::format("offsim-estimate-{}", ::getpid());
  fs::create_directories(dir);
  const fs::path file = dir / "estimate.yaml";
  {
    std::ofstream out(file);
    out << fmt::format("name: estimate\nhardware: !include \"{}\"\n", machine.string());
    if (system) out << fmt::format("set: [\"hardware.nodes={}\"]\n", nodes);
    out << fmt::format("model: !include \"{}\"\n", model_file.string());
    out << "training: {micro_batch: 1" << (o.seq > 0 ? fmt::format(", seq: {}", o.seq) : "") << "}\n";
    out << fmt::format("strategy: {{kind: deepspeed, dp: {}, runtime: deepspeed-0.16, config: !include \"{}\"}}\n",
                       o.gpus, ds.string());
  }
  struct Remove {
    fs::path dir;
    ~Remove() {
      std::error_code ec;
      fs::remove_all(dir, ec);
    }
  } const remove{dir};
  // The generated experiment in the temporary folder includes exactly the files the user named on
  // the command line (machine, model, ds_config), wherever they are: the include policy (stay inside
  // the experiment's folder or its project) would refuse them, so it is widened for this load only.
  const char* previous = std::getenv(sim::config::kAllowIncludeOutsideEnv);
  const std::optional<std::string> restore = previous ? std::optional<std::string>(previous) : std::nullopt;
  ::setenv(sim::config::kAllowIncludeOutsideEnv, "1", 1);
  struct RestoreEnv {
    std::optional<std::string> value;
    ~RestoreEnv() {
      if (value) {
        ::setenv(sim::config::kAllowIncludeOutsideEnv, value->c_str(), 1);
      } else {
        ::unsetenv(sim::config::kAllowIncludeOutsideEnv);
      }
    }
  } const restore_env{restore};
  const models::ExperimentSpec spec = models::load_experiment(file, o.overrides);
  const models::ExperimentResult r = models::run_experiment(spec, {});
  const auto& dp = std::get<models::DataParallelSpec>(spec.strategy);
  const models::ParameterCounts params = models::count_parameters(spec.model);

  fmt::print("offsim estimate: {} on {} x {} ({} node{} of {}), {} ({:.3f} B parameters)\n", o.ds_config, o.gpus,
             spec.device.device_kind, nodes, nodes == 1 ? "" : "s", spec.hardware->name, o.model,
             static_cast<double>(params.total) / 1e9);
  fmt::print("ZeRO stage {}{}{}; sequence length {}, micro-batch {}, {} micro-batch{} per step\n", dp.zero_stage,
             dp.offload ? (dp.offload->nvme ? ", optimizer offloaded to NVMe" : ", optimizer offloaded to CPU") : "",
             dp.offload_param ? ", parameters offloaded to CPU" : "", spec.model.seq, spec.training.micro_batch,
             spec.training.grad_accum, spec.training.grad_accum == 1 ? "" : "es");
  if (!spec.defaults_applied.empty()) {
    fmt::print("defaults applied: {}\n", fmt::join(spec.defaults_applied, "; "));
  }
  fmt::print("\n");

  models::DeepSpeedEstimatorInput in;
  in.total_params = params.total;
  in.largest_layer_params = largest_layer(spec.model);
  in.gpus_per_node = std::min(o.gpus, per_node);
  in.nodes = nodes;
  in.cpu_offload = dp.offload.has_value() && !dp.offload->nvme;
  in.cpu_offload_params = dp.offload_param;
  // DeepSpeed's estimators cover its two ZeRO optimizers that partition gradients (stage_1_and_2.py
  // at stage 2, stage3.py).
  const models::ZeroPolicy policy = models::ZeroPolicy::deepspeed(dp.zero_stage, dp.fp32_grad_accum, false);
  const bool estimator = policy.partitioned().gradients;
  in.partitioned = policy.partitioned();
  const models::DeepSpeedEstimate ds_estimate = models::deepspeed_model_states_estimate(in);
  fmt::print("{:<26} {:<22} {:<28} {}\n", "memory", "offsim: model states", "offsim: peak (all)",
             "DeepSpeed's estimator (model states)");
  for (const auto& m : r.memory) {
    const bool gpu = m.kind == "hbm";
    const std::string states = gpu ? gib(r.model_states_per_device.as_double()) : "";
    std::string theirs = "n/a (ZeRO-2 and -3 only)";
    if (estimator) theirs = gpu ? gib(ds_estimate.gpu_bytes) + " per GPU" : gib(ds_estimate.cpu_bytes) + " per node";
    fmt::print("{:<26} {:<22} {:<28} {}\n",
               fmt::format("{} ({}{})",
                           gpu                ? "GPU"
                           : m.kind == "dram" ? "CPU"
                                              : m.kind,
                           m.fullest_pool, gpu ? "" : ", fullest"),
               states, fmt::format("{} of {}", gib(m.peak.as_double()), gib(m.capacity.as_double())), theirs);
  }
  if (estimator) {
    fmt::print(
        "(DeepSpeed: deepspeed/runtime/zero/{} with zero_init, additional_buffer_factor 1.5, largest layer {} "
        "parameters)\n",
        policy.engine() == models::OptimizerEngine::kZeroStage3
            ? "stage3.py estimate_zero3_model_states_mem_needs"
            : "stage_1_and_2.py estimate_zero2_model_states_mem_needs",
        in.largest_layer_params);
  }
  fmt::print("\nfeasible                   {}\n", r.feasible ? "yes" : "NO");
  for (const auto& reason : r.infeasible_reasons) fmt::print("  {}\n", reason);
  fmt::print("iteration time             {}{}\n", sim::format_time(r.iteration_time),
             r.feasible ? "" : " (if it fit: it does not)");
  fmt::print("TFLOPS per GPU             {:.1f} (model FLOPs {:.1f})\n", r.tflops_per_device,
             r.model_tflops_per_device);
  fmt::print("tokens per second          {:.0f} (whole job)\n", r.tokens_per_s);
  for (const auto& w : spec.warnings) fmt::print("warning: {}\n", w.str());
  return 0;
}

}  // namespace offsim::app
