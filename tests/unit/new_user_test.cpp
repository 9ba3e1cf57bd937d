// A new user's first hour (issue 34): the smallest experiment runs on defaults that are named,
// training.seq decides the sequence length, DeepSpeed's defaults and estimators are DeepSpeed's.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include "models/deepspeed_estimator.hpp"
#include "models/experiment.hpp"
#include "models/experiment/defaults.hpp"
#include "models/strategies/deepspeed_config.hpp"
#include "models/strategies/phases/zero_policy.hpp"
#include "tests/unit/source_paths.hpp"

namespace offsim::models {
namespace {

namespace fs = std::filesystem;
const std::string kRoot = OFFSIM_SOURCE_DIR;

// An experiment written to a temporary folder, `body` after the name line ({0}: the source folder).
fs::path experiment(const std::string& file, const std::string& body) {
  const fs::path dir = testing::scratch_folder("offsim-new-user");
  std::ofstream(dir / file) << fmt::format(fmt::runtime("name: new-user\n" + body), kRoot);
  return dir / file;
}

std::string load_error(const fs::path& file) {
  try {
    (void)load_experiment(file, {});
  } catch (const sim::config::ConfigError& e) {
    return e.what();
  }
  return "";
}

bool has(const std::vector<std::string>& list, const std::string& item) {
  return std::find(list.begin(), list.end(), item) != list.end();
}

TEST(NewUser, TheSmallestExperimentRunsOnNamedDefaults) {
  const ExperimentSpec spec = load_experiment(kRoot + "/configs/experiments/minimal-one-gpu.yaml", {});
  EXPECT_EQ(spec.model.seq, 2048);
  EXPECT_EQ(spec.training.micro_batch, 4);
  EXPECT_EQ(spec.training.grad_accum, 1);
  EXPECT_TRUE(spec.training.flash_attention);
  EXPECT_EQ(spec.training.recompute, Recompute::kNone);
  EXPECT_EQ(spec.device.device_kind, "h100-sxm");  // the machine's table
  const auto& dp = std::get<DataParallelSpec>(spec.strategy);
  EXPECT_EQ(dp.zero_stage, 0);
  EXPECT_EQ(dp.reduce_bucket_elements, 500'000'000);
  EXPECT_FALSE(dp.overlap_comm);
  const auto& d = spec.defaults_applied;
  EXPECT_TRUE(has(d, "calibration=the machine's tables (dgx-h100)")) << fmt::format("{}", fmt::join(d, "; "));
  EXPECT_TRUE(has(d, "training.grad_accum=1"));
  EXPECT_TRUE(has(d, "training.recompute=none"));
  EXPECT_TRUE(has(d, "training.flash_attention=true"));
  EXPECT_TRUE(has(d, "strategy.zero_stage=0 (DeepSpeed 0.16's default)"));
  EXPECT_TRUE(has(d, "strategy.reduce_bucket_elements=500000000 (DeepSpeed 0.16's default)"));
  EXPECT_TRUE(has(d, "strategy.overlap_comm=false (DeepSpeed 0.16's default)"));
  EXPECT_FALSE(has(d, "training.seq=2048 (the model's context)"));  // given
  const ExperimentResult r = run_experiment(spec);
  EXPECT_GT(r.iteration_time.seconds(), 0.0);
  const std::string report = text_report(spec, r);
  EXPECT_NE(report.find("sequence length      2048 tokens (the model's context), micro-batch 4"), std::string::npos)
      << report;
  EXPECT_NE(report.find("defaults applied     calibration=the machine's tables"), std::string::npos);
  const std::string json = summary_json(spec, r, {"test", "none"});
  EXPECT_NE(json.find("\"seq\": 2048"), std::string::npos);
  EXPECT_NE(json.find("\"defaults_applied\": ["), std::string::npos);
}

// A key the file leaves out but a --set gives is the user's value, not a default: it is read (a
// defaulted key used to skip the override, which then failed as "no such key") and not named
// among the defaults applied.
TEST(NewUser, ASetKeyIsNoDefault) {
  const ExperimentSpec spec = load_experiment(kRoot + "/configs/experiments/minimal-one-gpu.yaml",
                                              {"training.grad_accum=2", "training.recompute=full"});
  EXPECT_EQ(spec.training.grad_accum, 2);
  EXPECT_EQ(spec.training.recompute, Recompute::kFull);
  const auto& d = spec.defaults_applied;
  EXPECT_FALSE(has(d, "training.grad_accum=1")) << fmt::format("{}", fmt::join(d, "; "));
  EXPECT_FALSE(has(d, "training.recompute=none"));
  EXPECT_TRUE(has(d, "training.flash_attention=true"));
}

// A machine names its measured tables: an experiment that gives only its own device table still
// gets the machine's collectives (named), the same as writing them out; no roofline unless asked.
TEST(NewUser, TheMachinesCollectivesComeWithItsOwnDeviceTable) {
  const std::string body =
      "hardware: !include {0}/configs/hardware/dgx-a100.yaml\n"
      "model: !include {0}/configs/models/gpt3-1.3b.yaml\n"
      "training: {{micro_batch: 4, seq: 2048}}\n"
      "strategy: {{kind: data_parallel, dp: 8, zero_stage: 3}}\n"
      "calibration:\n  device: !include {0}/configs/calibration/a100-80gb.yaml\n";
  const ExperimentSpec own = load_experiment(experiment("own-device.yaml", body), {});
  EXPECT_TRUE(has(own.defaults_applied, "calibration.collectives=the machine's table"));
  EXPECT_FALSE(own.collectives.roofline_collectives);
  const ExperimentSpec both = load_experiment(
      experiment("both.yaml", body + "  collectives: !include {0}/configs/calibration/dgx-a100-nccl.yaml\n"), {});
  EXPECT_FALSE(has(both.defaults_applied, "calibration.collectives=the machine's table"));
  EXPECT_EQ(run_experiment(own).iteration_time.ps, run_experiment(both).iteration_time.ps);
}

TEST(NewUser, ALongContextModelNeedsTrainingSeq) {
  const std::string head =
      "hardware: !include {0}/configs/hardware/dgx-h100.yaml\n"
      "model: !include {0}/tests/data/real-inputs/hf/llama-3.2-3b-instruct.config.json\n"
      "strategy: {{kind: data_parallel, dp: 1}}\n";
  // 131,072 tokens of context: not taken silently.
  const std::string error = load_error(experiment("long.yaml", head + "training: {{micro_batch: 1}}\n"));
  EXPECT_NE(error.find("training.seq: missing required key (the sequence length to train at: the model's context is "
                       "131072 tokens, longer than 8192"),
            std::string::npos)
      << error;
  const ExperimentSpec spec =
      load_experiment(experiment("long-seq.yaml", head + "training: {{micro_batch: 1, seq: 4096}}\n"), {});
  EXPECT_EQ(spec.model.seq, 4096);
  EXPECT_EQ(spec.model.context, 131072);
}

TEST(NewUser, LearnedPositionsEndAtTheContext) {
  const std::string head =
      "hardware: !include {0}/configs/hardware/dgx-h100.yaml\n"
      "model: !include {0}/configs/models/hf/gpt2.config.json\n"
      "strategy: {{kind: data_parallel, dp: 1}}\n";
  const std::string error = load_error(experiment("gpt2.yaml", head + "training: {{micro_batch: 1, seq: 2048}}\n"));
  EXPECT_NE(error.find("training.seq: 2048 tokens, but the model's learned positions end at 1024"), std::string::npos)
      << error;
  // A shorter sequence keeps the model's 1,024 position embeddings (124,439,808 parameters).
  const ExperimentSpec spec =
      load_experiment(experiment("gpt2-short.yaml", head + "training: {{micro_batch: 1, seq: 512}}\n"), {});
  EXPECT_EQ(spec.model.seq, 512);
  EXPECT_EQ(count_parameters(spec.model).total, 124'439'808);
}

TEST(NewUser, TheDefaultsFileAgreesWithTheConstantsThatMirrorIt) {
  EXPECT_EQ(defaults::integer("deepspeed.reduce_bucket_size"), deepspeed_defaults::kReduceBucketSize);
  EXPECT_EQ(defaults::integer("deepspeed.sub_group_size"), deepspeed_defaults::kSubGroupSize);
  EXPECT_EQ(defaults::integer("deepspeed.stage3_param_persistence_threshold"),
            DataParallelSpec::kDeepSpeedPersistenceThreshold);
  EXPECT_FALSE(defaults::source("deepspeed.reduce_bucket_size").empty());
  EXPECT_THROW((void)defaults::text("no.such.default"), std::logic_error);
}

// The table compiled in (apps/defaults_table, at build time) is configs/defaults.yaml: walked here
// as it was read at start before, every mapping with a `value:` is one default, named by its path,
// with the same value and source.
void expect_compiled_in(const YAML::Node& node, const std::string& path, std::size_t& seen) {
  if (!node.IsMap()) return;
  if (node["value"]) {
    ++seen;
    EXPECT_EQ(defaults::text(path), node["value"].Scalar()) << path;
    EXPECT_EQ(defaults::source(path), node["source"] ? node["source"].Scalar() : std::string()) << path;
    return;
  }
  for (const auto& kv : node)
    expect_compiled_in(kv.second, path.empty() ? kv.first.Scalar() : path + "." + kv.first.Scalar(), seen);
}

TEST(NewUser, TheDefaultsCompiledInAreTheDefaultsFile) {
  const YAML::Node root = YAML::LoadFile(std::string(OFFSIM_SOURCE_DIR) + "/configs/defaults.yaml");
  std::size_t seen = 0;
  expect_compiled_in(root, "", seen);
  EXPECT_GT(seen, 50u);
  EXPECT_EQ(defaults::deepspeed_version(), root["deepspeed"]["version"].Scalar());
  std::vector<std::string> runtimes;
  for (const auto& kv : root["deepspeed_runtimes"]) runtimes.push_back(kv.first.Scalar());
  EXPECT_EQ(defaults::deepspeed_runtimes(), runtimes);
}

TEST(NewUser, DeepSpeedDefaultsAreNamedForTheRuntimeAndStage) {
  const fs::path dir = testing::scratch_folder("offsim-new-user");
  std::ofstream(dir / "z1.json")
      << R"({"bf16": {"enabled": true}, "zero_optimization": {"stage": 1, "stage3_param_persitance_threshold": 10}})";
  const ExperimentSpec spec = load_experiment(
      experiment("z1.yaml",
                 "hardware: !include {0}/configs/hardware/dgx-h100.yaml\n"
                 "model: !include {0}/configs/models/gpt3-1.3b.yaml\ntraining: {{micro_batch: 1}}\n"
                 "strategy: {{kind: deepspeed, dp: 2, runtime: deepspeed-0.16, config: !include z1.json}}\n"),
      {});
  std::string warnings;
  for (const auto& w : spec.warnings) warnings += w.str() + "\n";
  EXPECT_NE(warnings.find("DeepSpeed 0.16 defaults applied: reduce_bucket_size=5e+08, overlap_comm=false"),
            std::string::npos)
      << warnings;
  EXPECT_EQ(warnings.find("0.13"), std::string::npos) << warnings;
  EXPECT_EQ(warnings.find("stage3_param_persistence_threshold="), std::string::npos) << warnings;
  EXPECT_NE(warnings.find("zero_optimization.stage3_param_persitance_threshold: not a DeepSpeed ZeRO key (did you "
                          "mean 'stage3_param_persistence_threshold'?"),
            std::string::npos)
      << warnings;
  EXPECT_TRUE(has(spec.defaults_applied, "strategy.config.overlap_comm=false"));
}

// A data-parallel run that names Megatron-DeepSpeed runs its code's attention: without flash
// (its --use-flash-attn flags are store_true) and with Megatron's fused scale-mask-softmax (on
// unless --no-masked-softmax-fusion), both named among the defaults; a user's key still wins.
TEST(NewUser, MegatronDeepSpeedUnderZeroTakesItsAttentionDefaults) {
  const std::string head =
      "hardware: !include {0}/configs/hardware/dgx-h100.yaml\n"
      "model: !include {0}/configs/models/gpt3-1.3b.yaml\nstrategy: {{kind: data_parallel, dp: 2, zero_stage: 3}}\n";
  const ExperimentSpec spec = load_experiment(
      experiment("mds.yaml", head + "training: {{micro_batch: 1, framework: deepspeed-megatron}}\n"), {});
  EXPECT_FALSE(spec.training.flash_attention);
  EXPECT_TRUE(spec.training.fused_softmax);
  EXPECT_TRUE(
      has(spec.defaults_applied, "training.flash_attention=false (Megatron-DeepSpeed's --use-flash-attn default)"));
  EXPECT_TRUE(has(spec.defaults_applied, "training.fused_softmax=true (Megatron-LM's masked_softmax_fusion)"));
  const ExperimentSpec flash = load_experiment(
      experiment("mds-flash.yaml",
                 head + "training: {{micro_batch: 1, framework: deepspeed-megatron, flash_attention: true}}\n"),
      {});
  EXPECT_TRUE(flash.training.flash_attention);
  EXPECT_FALSE(flash.training.fused_softmax);
  const ExperimentSpec plain = load_experiment(experiment("plain.yaml", head + "training: {{micro_batch: 1}}\n"), {});
  EXPECT_TRUE(plain.training.flash_attention);  // no framework named: PyTorch's SDPA default
  EXPECT_FALSE(plain.training.fused_softmax);
}

TEST(NewUser, MegatronKeysLeftOutTakeMegatronsDefaults) {
  const ExperimentSpec spec =
      load_experiment(experiment("megatron.yaml",
                                 "hardware: !include {0}/configs/hardware/dgx-h100.yaml\n"
                                 "model: !include {0}/configs/models/gpt3-1.3b.yaml\ntraining: {{micro_batch: 1}}\n"
                                 "strategy: {{kind: megatron, dp: 2}}\n"),
                      {});
  const auto& mg = std::get<MegatronSpec>(spec.strategy);
  EXPECT_EQ(mg.tp, 1);
  EXPECT_EQ(mg.pp, 1);
  EXPECT_EQ(mg.dp, 2);
  EXPECT_EQ(mg.virtual_stages, 1);
  EXPECT_FALSE(mg.sequence_parallel);
  EXPECT_EQ(mg.zero_stage, 0);
  for (const char* d :
       {"strategy.tp=1 (Megatron-LM's default)", "strategy.pp=1 (Megatron-LM's default)",
        "strategy.schedule=1f1b (Megatron-LM's default)", "strategy.sequence_parallel=false (Megatron-LM's default)",
        "strategy.zero_stage=0 (Megatron-LM's default)"}) {
    EXPECT_TRUE(has(spec.defaults_applied, d)) << d;
  }
}

TEST(NewUser, DeepSpeedsEstimatorsAsItsSourceComputesThem) {
  // 1e9 parameters, largest layer 1e8, 8 GPUs on each of 2 nodes (16 GPUs), buffer factor 1.5.
  DeepSpeedEstimatorInput in;
  in.total_params = 1'000'000'000;
  in.largest_layer_params = 100'000'000;
  in.gpus_per_node = 8;
  in.nodes = 2;
  // ZeRO-2 without offload: GPU 4 P + 16 P / 16 = 5e9; CPU P x 4 x 8 x 1.5 = 48e9.
  in.partitioned = ZeroPolicy::partitioning_of_stage(2);
  auto e = deepspeed_model_states_estimate(in);
  EXPECT_DOUBLE_EQ(e.gpu_bytes, 5e9);
  EXPECT_DOUBLE_EQ(e.cpu_bytes, 48e9);
  // ZeRO-2 with offload: GPU 2 P; CPU P x max(4 x 16, 16) x 1.5 = 96e9.
  in.cpu_offload = true;
  e = deepspeed_model_states_estimate(in);
  EXPECT_DOUBLE_EQ(e.gpu_bytes, 2e9);
  EXPECT_DOUBLE_EQ(e.cpu_bytes, 96e9);
  // ZeRO-3 without offload, zero_init: GPU 4 L + 18 P / 16 = 0.4e9 + 1.125e9; CPU L x 4 x 8 x 1.5.
  in.partitioned = ZeroPolicy::partitioning_of_stage(3);
  in.cpu_offload = false;
  e = deepspeed_model_states_estimate(in);
  EXPECT_DOUBLE_EQ(e.gpu_bytes, 1.525e9);
  EXPECT_DOUBLE_EQ(e.cpu_bytes, 4.8e9);
  // ZeRO-3 offloading optimizer and parameters: GPU 4 L; CPU P x 18 / 2 nodes x 1.5 = 13.5e9.
  in.cpu_offload = true;
  in.cpu_offload_params = true;
  e = deepspeed_model_states_estimate(in);
  EXPECT_DOUBLE_EQ(e.gpu_bytes, 0.4e9);
  EXPECT_DOUBLE_EQ(e.cpu_bytes, 13.5e9);
  // ZeRO-3 offloading the optimizer only: GPU 4 L + 2 P / 16; CPU P x 16 / 2 x 1.5 = 12e9.
  in.cpu_offload_params = false;
  e = deepspeed_model_states_estimate(in);
  EXPECT_DOUBLE_EQ(e.gpu_bytes, 0.525e9);
  EXPECT_DOUBLE_EQ(e.cpu_bytes, 12e9);
}

}  // namespace
}  // namespace offsim::models
