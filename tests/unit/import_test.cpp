// Inputs people already have: Hugging Face config.json models and DeepSpeed ds_config.json
// strategies give the same runs as the hand-written YAML (models/strategies/deepspeed_config.hpp,
// models/transformer/model_parser.cpp).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include <fmt/format.h>

#include "models/experiment.hpp"
#include "models/transformer/model_parser.hpp"
#include "sim/config/config_reader.hpp"

namespace offsim::models {
namespace {

namespace fs = std::filesystem;
const std::string kRoot = OFFSIM_SOURCE_DIR;

ModelSpec hf_model(const std::string& file, std::vector<sim::config::Diagnostic>* warnings) {
  sim::config::Context ctx;
  const auto root = ctx.load_root(kRoot + "/configs/models/hf/" + file);
  auto m = parse_model(root);
  ctx.finish();
  if (warnings) *warnings = ctx.warnings();
  return *m;
}

TEST(HuggingFace, ConfigsGiveTheExactParameterCounts) {
  // Published counts: Llama 2 7B 6,738,415,616 (the llama2-7b.yaml pin), GPT-NeoX-20B
  // 20,554,567,680 (Black et al., Table 1), GPT-2 124,439,808 (tied embeddings, learned positions).
  std::vector<sim::config::Diagnostic> warnings;
  EXPECT_EQ(count_parameters(hf_model("llama-2-7b-hf.config.json", &warnings)).total, 6'738'415'616);
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].message.find("ignored: architectures, bos_token_id, eos_token_id, initializer_range, "
                                     "pretraining_tp, rms_norm_eps, rope_scaling, torch_dtype"),
            std::string::npos)
      << warnings[0].message;
  EXPECT_EQ(count_parameters(hf_model("gpt-neox-20b.config.json", nullptr)).total, 20'554'567'680);
  const ModelSpec gpt2 = hf_model("gpt2.config.json", nullptr);
  EXPECT_EQ(count_parameters(gpt2).total, 124'439'808);
  EXPECT_EQ(gpt2.ffn, 4 * 768);  // n_inner: null
  EXPECT_TRUE(gpt2.tied_embeddings);
}

TEST(DeepSpeedConfig, GivesTheRunOfTheEquivalentYaml) {
  // The offload study's printed ds_config against the hand-written experiment of the same run.
  const double from_ds =
      run_experiment(load_experiment(kRoot + "/configs/experiments/llama-13b-offload-polaris-dsconfig.yaml", {}))
          .iteration_time.seconds();
  const double from_yaml =
      run_experiment(load_experiment(kRoot + "/configs/experiments/llama-13b-offload-polaris.yaml", {}))
          .iteration_time.seconds();
  EXPECT_NEAR(from_ds, from_yaml, 1e-12 * from_yaml);
}

TEST(DeepSpeedConfig, ZeroPlusPlusKeysBuildTheZeroPlusPlusPartitioning) {
  // zero_quantized_weights, zero_hpz_partition_size 8 and zero_quantized_gradients on 16 GCDs:
  // the same iteration as the partitioning written out (neox20b-frontier-zeropp.yaml's scheme).
  const fs::path dir = fs::temp_directory_path() / "offsim-import-test";
  fs::create_directories(dir);
  const std::string head = fmt::format(
      "hardware: !include {0}/configs/hardware/frontier.yaml\n"
      "set: [\"hardware.nodes=2\"]\n"
      "calibration:\n"
      "  device: !include {0}/configs/calibration/mi250x-gcd.yaml\n"
      "  collectives: !include {0}/configs/calibration/frontier-rccl-multinode.yaml\n"
      "model: !include {0}/configs/models/gpt3-1.3b.yaml\n"
      "training: {{micro_batch: 4, grad_accum: 1, precision: bf16, recompute: full, flash_attention: true}}\n",
      kRoot);
  std::ofstream(dir / "ds.yaml") << "name: ds\n"
                                 << head
                                 << fmt::format(
                                        "strategy:\n  kind: deepspeed\n"
                                        "  config: !include {0}/configs/strategies/ds/zeropp-frontier.json\n"
                                        "  dp: 16\n  runtime: deepspeed-0.13\n"
                                        "  qwz: !include {0}/configs/strategies/zeropp-qwz-int8.yaml\n"
                                        "  qgz: !include {0}/configs/strategies/zeropp-qgz-int4.yaml\n",
                                        kRoot);
  std::ofstream(dir / "yaml.yaml")
      << "name: yaml\n"
      << head
      << fmt::format(
             "strategy:\n  kind: data_parallel\n  zero_stage: 3\n  dp: 16\n"
             "  reduce_bucket_elements: 500000000\n  overlap_comm: true\n"
             "  param_persistence_threshold: 100000\n"
             "  partitioning:\n"
             "    parameters: {{over: cluster, quantization: !include "
             "{0}/configs/strategies/zeropp-qwz-int8.yaml}}\n"
             "    secondary_parameters: {{over: node}}\n"
             "    gradients: {{over: cluster, reduce: [node, cluster], algorithm: all_to_all, "
             "quantization: !include {0}/configs/strategies/zeropp-qgz-int4.yaml}}\n"
             "    optimizer: {{over: cluster}}\n",
             kRoot);
  const ExperimentSpec ds = load_experiment(dir / "ds.yaml", {});
  const double a = run_experiment(ds).iteration_time.seconds();
  const double b = run_experiment(load_experiment(dir / "yaml.yaml", {})).iteration_time.seconds();
  EXPECT_NEAR(a, b, 1e-12 * b);
  // DeepSpeed's default for overlap_comm at stage 3 is named, and the ignored keys are listed.
  std::string warnings;
  for (const auto& w : ds.warnings) warnings += w.str() + "\n";
  EXPECT_NE(warnings.find("DeepSpeed 0.13 defaults applied: overlap_comm=true"), std::string::npos) << warnings;
  EXPECT_NE(warnings.find("ignored: gradient_clipping, optimizer"), std::string::npos) << warnings;
}

TEST(DeepSpeedConfig, BatchArithmeticDerivesTheMissingStepCountOrSaysWhy) {
  // DeepSpeed: train_batch_size = micro-batch x accumulation x ranks. 256 with micro-batch 8 on 4
  // GPUs is 8 accumulation steps (adopted over the training section's 1, with a warning); 250 does
  // not divide by 8 x 4.
  const fs::path dir = fs::temp_directory_path() / "offsim-import-batch";
  fs::create_directories(dir);
  const auto experiment = [&](int total) {
    std::ofstream(dir / "ds.json") << fmt::format(
        "{{\"train_batch_size\": {}, \"train_micro_batch_size_per_gpu\": 8, \"bf16\": {{\"enabled\": true}}, "
        "\"zero_optimization\": {{\"stage\": 1}}}}\n",
        total);
    std::ofstream(dir / "e.yaml") << fmt::format(
        "name: batch\nhardware: !include {0}/configs/hardware/polaris-node.yaml\n"
        "calibration:\n  device: !include {0}/configs/calibration/a100-40gb.yaml\n"
        "  collectives: !include {0}/configs/calibration/polaris-nccl.yaml\n"
        "model: !include {0}/configs/models/gpt3-1.3b.yaml\n"
        "training: {{micro_batch: 8, grad_accum: 1, precision: bf16, recompute: full, flash_attention: true}}\n"
        "strategy:\n  kind: deepspeed\n  config: !include ds.json\n  dp: 4\n  runtime: deepspeed-0.13\n",
        kRoot);
    return dir / "e.yaml";
  };
  const ExperimentSpec spec = load_experiment(experiment(256), {});
  EXPECT_EQ(spec.training.micro_batch, 8);
  EXPECT_EQ(spec.training.grad_accum, 8);
  try {
    (void)load_experiment(experiment(250), {});
    FAIL() << "expected an error";
  } catch (const sim::config::ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("ds.json:1:"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("train_batch_size 250 is not a multiple of 8 x 4 ranks"), std::string::npos)
        << e.what();
  }
}

TEST(DeepSpeedConfig, GradientAccumulationDtypePicksTheOptimizer) {
  // DeepSpeed's optimizer wrapper by precision, stage and data_types.grad_accum_dtype (engine.py):
  // per GPU of 4, P parameters,
  //   bf16, no ZeRO (accumulation fp32 by default): BF16_Optimizer   2P + (4 + 2)P + 12P/4 = 11P
  //   fp16, no ZeRO: FP16_Optimizer, optimizer replicated            2P + 2P + 12P        = 16P
  //   bf16, ZeRO-1 (accumulation bf16 by default)                    2P + 2P + 12P/4      =  7P
  //   bf16, ZeRO-1, grad_accum_dtype fp32: BF16_Optimizer                                    11P
  //   bf16, ZeRO-2, grad_accum_dtype fp32: not modelled, ignored with a warning          2P + 2P/4 + 12P/4
  const fs::path dir = fs::temp_directory_path() / "offsim-import-accumulation";
  fs::create_directories(dir);
  const auto load = [&](const std::string& precision, const std::string& rest) {
    std::ofstream(dir / "ds.json") << fmt::format(
        "{{\"train_micro_batch_size_per_gpu\": 1, \"{}\": {{\"enabled\": true}}{}}}\n", precision, rest);
    std::ofstream(dir / "e.yaml") << fmt::format(
        "name: accumulation\nhardware: !include {0}/configs/hardware/polaris-node.yaml\n"
        "calibration:\n  device: !include {0}/configs/calibration/a100-40gb.yaml\n"
        "  collectives: !include {0}/configs/calibration/polaris-nccl.yaml\n"
        "model: !include {0}/configs/models/gpt3-1.3b.yaml\n"
        "training: {{micro_batch: 1, grad_accum: 1, precision: bf16, recompute: full, flash_attention: true}}\n"
        "strategy:\n  kind: deepspeed\n  config: !include ds.json\n  dp: 4\n  runtime: deepspeed-0.13\n",
        kRoot);
    return load_experiment(dir / "e.yaml", {});
  };
  const auto states = [&](const std::string& precision, const std::string& rest) {
    return static_cast<double>(run_experiment(load(precision, rest)).model_states_per_device.count);
  };
  const double replicated = states("fp16", "");
  const double P = replicated / 16;
  EXPECT_DOUBLE_EQ(states("bf16", ""), 11 * P);
  EXPECT_DOUBLE_EQ(states("bf16", ", \"zero_optimization\": {\"stage\": 1}"), 7 * P);
  EXPECT_DOUBLE_EQ(
      states("bf16", ", \"zero_optimization\": {\"stage\": 1}, \"data_types\": {\"grad_accum_dtype\": \"fp32\"}"),
      11 * P);
  const ExperimentSpec stage2 =
      load("bf16", ", \"zero_optimization\": {\"stage\": 2}, \"data_types\": {\"grad_accum_dtype\": \"fp32\"}");
  std::string warnings;
  for (const auto& w : stage2.warnings) warnings += w.str() + "\n";
  EXPECT_NE(warnings.find("data_types.grad_accum_dtype=fp32 (fp32 accumulation is modelled at stages 0-1 only)"),
            std::string::npos)
      << warnings;
  EXPECT_DOUBLE_EQ(static_cast<double>(run_experiment(stage2).model_states_per_device.count),
                   2 * P + 2 * P / 4 + 12 * P / 4);
  // communication_data_type fp32 at stage 2: the reduce-scatter carries 4 B per gradient instead of
  // 2, the parameter all-gather still 2: GPU-GPU bytes in the ratio (4 + 2) / (2 + 2) = 1.5. At
  // stage 1 it is not modelled, and the warning says so.
  const auto gpu_gpu = [](const ExperimentResult& r) {
    double bytes = 0;
    for (const auto& l : r.links) {
      if (l.link_class == "gpu-gpu") bytes += l.bytes;
    }
    return bytes;
  };
  const double bf16_reduce = gpu_gpu(run_experiment(load("bf16", ", \"zero_optimization\": {\"stage\": 2}")));
  const double fp32_reduce = gpu_gpu(
      run_experiment(load("bf16", ", \"zero_optimization\": {\"stage\": 2}, \"communication_data_type\": \"fp32\"")));
  EXPECT_NEAR(fp32_reduce / bf16_reduce, 1.5, 1e-9);
  const ExperimentSpec stage1 =
      load("bf16", ", \"zero_optimization\": {\"stage\": 1}, \"communication_data_type\": \"fp32\"");
  warnings.clear();
  for (const auto& w : stage1.warnings) warnings += w.str() + "\n";
  EXPECT_NE(warnings.find("communication_data_type=fp32 (modelled at stages 2-3 without optimizer offload only)"),
            std::string::npos)
      << warnings;
}

TEST(DeepSpeedConfig, LegacyCpuOffloadAndOffloadParamAreRead) {
  // The offload study's 13B ds_config with its offload_optimizer written the legacy way
  // (cpu_offload: true, cpu_offload_use_pin_memory: true) runs the same iteration, as do both
  // other 16-bit spellings of the precision; adding
  // offload_param {device: cpu} runs what the YAML strategy's offload_param runs.
  const fs::path dir = fs::temp_directory_path() / "offsim-import-legacy";
  fs::create_directories(dir);
  const auto run = [&](const std::string& offload_keys, const std::string& precision = "bf16") {
    std::ofstream(dir / "ds.json") << fmt::format(
        "{{\"train_batch_size\": 1, \"train_micro_batch_size_per_gpu\": 1, \"{}\": {{\"enabled\": true}},\n"
        " \"zero_optimization\": {{\"stage\": 3, \"reduce_bucket_size\": 500000000, \"overlap_comm\": true,\n"
        "  \"sub_group_size\": 100000000, \"stage3_param_persistence_threshold\": 100000, {}}}}}\n",
        precision, offload_keys);
    std::ofstream(dir / "e.yaml") << fmt::format(
        "name: legacy\nhardware: !include {0}/configs/hardware/polaris-node.yaml\n"
        "calibration:\n  device: !include {0}/configs/calibration/a100-40gb.yaml\n"
        "  host: !include {0}/configs/calibration/polaris-host.yaml\n"
        "model: !include {0}/configs/models/llama-offload-13b.yaml\n"
        "training: {{micro_batch: 1, grad_accum: 1, precision: bf16, recompute: full, flash_attention: false, "
        "fused_softmax: true}}\n"
        "strategy:\n  kind: deepspeed\n  config: !include ds.json\n  dp: 1\n  runtime: deepspeed-0.13\n",
        kRoot);
    return run_experiment(load_experiment(dir / "e.yaml", {})).iteration_time.seconds();
  };
  const double modern = run("\"offload_optimizer\": {\"device\": \"cpu\", \"pin_memory\": true}");
  const double legacy = run("\"cpu_offload\": true, \"cpu_offload_use_pin_memory\": true");
  EXPECT_EQ(legacy, modern);
  // bf16's older spelling, and fp16 (its loss scaling is not timed), give the same iteration.
  const std::string optimizer_offload = "\"offload_optimizer\": {\"device\": \"cpu\", \"pin_memory\": true}";
  EXPECT_EQ(run(optimizer_offload, "bfloat16"), modern);
  EXPECT_EQ(run(optimizer_offload, "fp16"), modern);
  const double with_params =
      run("\"offload_optimizer\": {\"device\": \"cpu\", \"pin_memory\": true}, "
          "\"offload_param\": {\"device\": \"cpu\", \"pin_memory\": true}");
  const double yaml =
      run_experiment(load_experiment(kRoot + "/configs/experiments/llama-13b-offload-polaris.yaml",
                                     {"strategy.offload_param.device=cpu", "strategy.offload_param.pin_memory=true"}))
          .iteration_time.seconds();
  EXPECT_EQ(with_params, yaml);
}

TEST(DeepSpeedConfig, AutoValuesAreFilledAsTheHuggingFaceTrainerDoes) {
  // An HF-style ds_config ("auto" batch sizes, precision, bucket and threshold) on GPT-3 XL (hidden
  // 2048): micro-batch and accumulation from the training section, reduce_bucket_size = 2048^2,
  // stage3_param_persistence_threshold = 10 x 2048; the same iteration as those values written out.
  const fs::path dir = fs::temp_directory_path() / "offsim-import-auto";
  fs::create_directories(dir);
  const auto experiment = [&](const std::string& name, const std::string& json) {
    std::ofstream(dir / (name + ".json")) << json;
    std::ofstream(dir / (name + ".yaml")) << fmt::format(
        "name: {1}\nhardware: !include {0}/configs/hardware/frontier-node.yaml\n"
        "calibration:\n  device: !include {0}/configs/calibration/mi250x-gcd.yaml\n"
        "  collectives: !include {0}/configs/calibration/frontier-rccl.yaml\n"
        "model: !include {0}/configs/models/gpt3-1.3b.yaml\n"
        "training: {{micro_batch: 2, grad_accum: 3, precision: bf16, recompute: full, flash_attention: true}}\n"
        "strategy:\n  kind: deepspeed\n  config: !include {1}.json\n  dp: 8\n  runtime: deepspeed-0.13\n",
        kRoot, name);
    return load_experiment(dir / (name + ".yaml"), {});
  };
  const ExperimentSpec automatic =
      experiment("auto",
                 "{\"train_batch_size\": \"auto\", \"train_micro_batch_size_per_gpu\": \"auto\", "
                 "\"gradient_accumulation_steps\": \"auto\", \"bf16\": {\"enabled\": \"auto\"}, "
                 "\"zero_optimization\": {\"stage\": 3, \"overlap_comm\": true, \"reduce_bucket_size\": \"auto\", "
                 "\"stage3_prefetch_bucket_size\": \"auto\", \"stage3_param_persistence_threshold\": \"auto\"}}\n");
  EXPECT_EQ(automatic.training.micro_batch, 2);
  EXPECT_EQ(automatic.training.grad_accum, 3);
  const auto& dp = std::get<DataParallelSpec>(automatic.strategy);
  EXPECT_EQ(dp.reduce_bucket_elements, 2048 * 2048);
  EXPECT_EQ(dp.param_persistence_threshold, 20480);
  const ExperimentSpec explicit_values = experiment(
      "explicit",
      "{\"train_batch_size\": 48, \"train_micro_batch_size_per_gpu\": 2, \"gradient_accumulation_steps\": 3, "
      "\"bf16\": {\"enabled\": true}, \"zero_optimization\": {\"stage\": 3, \"overlap_comm\": true, "
      "\"reduce_bucket_size\": 4194304, \"stage3_param_persistence_threshold\": 20480}}\n");
  EXPECT_EQ(run_experiment(automatic).iteration_time, run_experiment(explicit_values).iteration_time);
}

}  // namespace
}  // namespace offsim::models
