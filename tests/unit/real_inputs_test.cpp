// Files users really have (issue 14): unmodified Hugging Face config.json and DeepSpeed ds_config
// files from public repositories (tests/data/real-inputs/SOURCES.md names each one's repository,
// path and commit). Each either loads, with the published parameter count where one exists, or
// is refused with a located message that says why.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <optional>
#include <string>

#include <fmt/format.h>

#include "models/experiment.hpp"
#include "models/transformer/model_parser.hpp"
#include "sim/config/config_reader.hpp"
#include "tests/unit/source_paths.hpp"

namespace offsim::models {
namespace {

namespace fs = std::filesystem;
const std::string kRoot = OFFSIM_SOURCE_DIR;
const std::string kInputs = kRoot + "/tests/data/real-inputs";

// What reading a file gives: the model, or the error text.
struct HfOutcome {
  std::optional<ModelSpec> model;
  std::string error;
};

HfOutcome read_hf(const std::string& file) {
  HfOutcome out;
  try {
    sim::config::Context ctx;
    auto m = parse_model(ctx.load_root(kInputs + "/hf/" + file));
    ctx.finish();
    out.model = m;
  } catch (const sim::config::ConfigError& e) {
    out.error = e.what();
  }
  return out;
}

TEST(RealHuggingFaceConfigs, LoadWithThePublishedParameterCounts) {
  // Published totals (model cards and the checkpoints' parameter counts): Llama 3 8B 8,030,261,248;
  // Llama 3.2 3B 3,212,749,824; Mistral 7B 7,241,732,096; Mixtral 8x7B 46,702,792,704; Qwen2.5
  // 0.5B 494,032,768; Gemma 2B 2,506,172,416; Phi-2 2,779,683,840 (one norm per layer, a biased
  // head); Phi-3-mini 3,821,079,552; Pythia-410M 405,334,016; GPT-2 124,439,808; GPT-2 XL
  // 1,557,611,200.
  const std::vector<std::pair<std::string, std::int64_t>> published{
      {"meta-llama-3-8b.config.json", 8'030'261'248},
      {"llama-3.2-3b-instruct.config.json", 3'212'749'824},
      {"mistral-7b-instruct-v0.2.config.json", 7'241'732'096},
      {"mixtral-8x7b-v0.1.config.json", 46'702'792'704},
      {"mixtral-8x7b-instruct-v0.1-sliding-window.config.json", 46'702'792'704},
      {"qwen2.5-0.5b-instruct.config.json", 494'032'768},
      {"gemma-2b.config.json", 2'506'172'416},
      {"phi-2.config.json", 2'779'683'840},
      {"phi3-mini-4k-slerp-merge.config.json", 3'821'079'552},
      {"pythia-410m-finetune.config.json", 405'334'016},
      {"gpt2.config.json", 124'439'808},
      {"gpt2-xl.config.json", 1'557'611'200},
      // Qwen3-8B: 8.2 B (8,190,735,360; 6.95 B without the embeddings), with its q/k norms.
      {"qwen3-8b.config.json", 8'190'735'360},
  };
  for (const auto& [file, count] : published) {
    SCOPED_TRACE(file);
    const HfOutcome o = read_hf(file);
    ASSERT_TRUE(o.model) << o.error;
    EXPECT_EQ(count_parameters(*o.model).total, count);
  }
  const HfOutcome mixtral = read_hf("mixtral-8x7b-v0.1.config.json");
  EXPECT_EQ(mixtral.model->experts, 8);
  EXPECT_EQ(mixtral.model->experts_per_token, 2);
  EXPECT_EQ(read_hf("gemma-2b.config.json").model->kv_heads, 1);  // multi-query
  // Partial rotary positions: Pythia's rotary_pct 0.25 (newer transformers write it twice, as
  // partial_rotary_factor too), Phi-2's partial_rotary_factor 0.4; Llama rotates whole heads.
  EXPECT_DOUBLE_EQ(read_hf("pythia-410m-finetune.config.json").model->rotary_fraction, 0.25);
  EXPECT_DOUBLE_EQ(read_hf("phi-2.config.json").model->rotary_fraction, 0.4);
  EXPECT_DOUBLE_EQ(read_hf("meta-llama-3-8b.config.json").model->rotary_fraction, 1.0);
}

// DeepSeek-V2 and V3: multi-head latent attention, dense first layers (first_k_dense_replace) then
// MoE layers with shared experts. Per layer (V3, h 7,168, 128 heads): q_a_proj 7,168 x 1,536, its
// norm 1,536, q_b_proj 1,536 x 128 x 192, kv_a_proj_with_mqa 7,168 x 576, its norm 512, kv_b_proj
// 512 x 128 x 256, o_proj 128 x 128 x 7,168: 187,107,328; 3 dense layers of MLP 3 x 7,168 x 18,432;
// 58 MoE layers of 256 + 1 experts of 3 x 7,168 x 2,048, the router 7,168 x 256 and its 256 biases;
// two norms per layer; embeddings and head 2 x 129,280 x 7,168; the final norm: 671,026,419,200
// (published: 671 B, the main model without its multi-token prediction module). V2 (h 5,120, 60
// layers, 1 dense of 12,288, 160 + 2 experts of 1,536, vocabulary 102,400, no router bias):
// 235,741,434,880 (published: 235.7 B, "236B").
TEST(RealHuggingFaceConfigs, DeepSeekLatentAttentionAndDenseFirstLayersMatchThePublishedCounts) {
  const HfOutcome v3 = read_hf("deepseek-v3.config.json");
  ASSERT_TRUE(v3.model) << v3.error;
  const ParameterCounts c3 = count_parameters(*v3.model);
  EXPECT_EQ(c3.total, 671'026'419'200);
  EXPECT_NEAR(static_cast<double>(c3.total) / 1e9, 671.0, 0.5);
  // Active: less 248 unrouted experts of 44,040,192 in each of the 58 MoE layers: 37.6 B
  // (published: 37 B activated).
  EXPECT_EQ(c3.active, 671'026'419'200 - 248LL * 44'040'192 * 58);
  EXPECT_EQ(v3.model->dense_layers, 3);
  EXPECT_EQ(v3.model->head_dim(), 192);
  EXPECT_EQ(v3.model->value_dim(), 128);
  EXPECT_TRUE(v3.model->router_bias);
  const HfOutcome v2 = read_hf("deepseek-v2-236b-with-extra-M-key.config.json");
  ASSERT_TRUE(v2.model) << v2.error;
  EXPECT_EQ(count_parameters(*v2.model).total, 235'741'434'880);
  EXPECT_NEAR(static_cast<double>(count_parameters(*v2.model).total) / 1e9, 235.7, 0.05);
  EXPECT_EQ(v2.model->shared_ffn, 2 * 1536);
  EXPECT_FALSE(v2.model->router_bias);
}

TEST(RealHuggingFaceConfigs, InexpressibleShapesAreRefusedWhereTheFileSaysSo) {
  const std::vector<std::pair<std::string, std::string>> refused{
      {"falcon-40b-refinedweb-legacy.config.json",
       "falcon-40b-refinedweb-legacy.config.json:19:17: model_type: not expressible in offsim: 'RefinedWeb' is not a "
       "model family offsim reads"},
      {"opt-1.3b-early-revision.config.json",
       "opt-1.3b-early-revision.config.json:1:1: hidden_size: missing required key"},
  };
  for (const auto& [file, message] : refused) {
    SCOPED_TRACE(file);
    const HfOutcome o = read_hf(file);
    EXPECT_FALSE(o.model);
    EXPECT_NE(o.error.find(message), std::string::npos) << o.error;
  }
  // The OPT file fails on its missing hidden_size alone (no error built on the missing value).
  EXPECT_EQ(read_hf("opt-1.3b-early-revision.config.json").error.find("word_embed_proj_dim"), std::string::npos);
}

// Runs a ds_config on one Frontier node (8 GCDs, its NVMe and DDR for offload) with a tiny GPT,
// the way `kind: deepspeed` takes it; returns the iteration time, or the error text.
struct DsOutcome {
  std::optional<double> seconds;
  std::int64_t micro_batch = 0;
  std::int64_t grad_accum = 0;
  std::string error;
  std::string warnings;
};

DsOutcome run_ds(const std::string& file, int dp = 8) {
  const fs::path dir = testing::scratch_folder("offsim-real-ds");  // one per test process (ctest -j)
  std::ofstream(dir / "e.yaml") << fmt::format(
      "name: real-ds\nhardware: !include {0}/configs/hardware/frontier-node.yaml\n"
      "calibration:\n  device: !include {0}/configs/calibration/mi250x-gcd.yaml\n"
      "  collectives: !include {0}/configs/calibration/frontier-rccl.yaml\n"
      "model: !include {0}/tests/data/tiny-gpt.yaml\n"
      "training: {{micro_batch: 2, grad_accum: 1, precision: bf16, recompute: full, flash_attention: false}}\n"
      "strategy:\n  kind: deepspeed\n  config: !include {1}/ds/{2}\n  dp: {3}\n  runtime: deepspeed-0.13\n",
      kRoot, kInputs, file, dp);
  DsOutcome out;
  try {
    const ExperimentSpec spec = load_experiment(dir / "e.yaml", {});
    out.micro_batch = spec.training.micro_batch;
    out.grad_accum = spec.training.grad_accum;
    for (const auto& w : spec.warnings) out.warnings += w.str() + "\n";
    const ExperimentResult r = run_experiment(spec);
    out.seconds = r.iteration_time.seconds();
  } catch (const sim::config::ConfigError& e) {
    out.error = e.what();
  }
  return out;
}

TEST(RealDeepSpeedConfigs, RunWithTheirBatchArithmetic) {
  // (file, micro-batch, accumulation steps): "auto" takes the training section's (2, 1); fixed
  // values are DeepSpeed's, train_batch_size = micro x accumulation x 8 ranks deriving the missing
  // one (bing_bert: 65,536 / (64 x 8) = 128; Megatron's ZeRO-2 script: 16 / (1 x 8) = 2 per GPU).
  const std::vector<std::tuple<std::string, std::int64_t, std::int64_t>> runs{
      {"hf-transformers-zero2-auto.json", 2, 1},                    // fp16 and bf16 "auto", CPU offload
      {"hf-transformers-zero3-auto.json", 2, 1},                    // fp16 "auto" alone, params offloaded
      {"hf-transformers-zero3-bfloat16-legacy.json", 2, 1},         // the older "bfloat16" spelling
      {"dsexamples-megatron-zero2-legacy-cpu-offload.json", 2, 1},  // legacy cpu_offload: true
      {"dsexamples-megatron-zero3-prefetch-live-params.json", 8, 1},
      {"dsexamples-autotuning-fp16-zero1.json", 2, 1},
      {"dsexamples-bingbert-bsz64k-lamb-fp16-nozero.json", 64, 128},  // no zero_optimization: stage 0
      {"deepspeed-tests-megatron-gpt2-zero2-micro8-gas3.json", 8, 3},
      {"llamafactory-ds-z0.json", 2, 1},
      {"llamafactory-ds-z3-offload.json", 2, 1},  // overlap_comm false with offload
      {"stanford-alpaca-zero3-offload-opt-param-bf16.json", 2, 1},
      {"chinese-mixtral-zero1-auto-activation-ckpt.json", 2, 1},
      // Issue 34's files: accelerate's four templates, LLaMA-Factory's z2 and z3 partial offload,
      // DeepSpeedExamples' Megatron ZeRO-3 (16 / 8 ranks = 2) and the ZeRO-3
      // release config (64 / 8 = 8, legacy cpu_offload and cpu_offload_params).
      {"accelerate-zero-stage1.json", 2, 1},
      {"accelerate-zero-stage2-offload.json", 2, 1},
      {"accelerate-zero-stage3.json", 2, 1},
      {"accelerate-zero-stage3-offload.json", 2, 1},
      {"llamafactory-ds-z2.json", 2, 1},
      {"llamafactory-ds-z3-partial-offload.json", 2, 1},
      {"dsexamples-megatron-zero3.json", 2, 1},
      {"dsexamples-megatron-zero3-release.json", 8, 1},
      // ALST: Ulysses over 4 of the 8 ranks (sequence_parallel.size), 2 data-parallel groups.
      {"llamafactory-ds-z3-alst.json", 2, 1},
  };
  for (const auto& [file, micro, accumulation] : runs) {
    SCOPED_TRACE(file);
    const DsOutcome o = run_ds(file);
    ASSERT_TRUE(o.seconds) << o.error;
    EXPECT_GT(*o.seconds, 0.0);
    EXPECT_EQ(o.micro_batch, micro);
    EXPECT_EQ(o.grad_accum, accumulation);
  }
}

TEST(RealDeepSpeedConfigs, LegacyAndMisspelledKeysAreReadOrNamed) {
  // The ZeRO-3 release config: DeepSpeed 0.3's cpu_offload_params offloads the parameters, and its
  // misspelled persistence threshold is named with the key meant.
  const DsOutcome release = run_ds("dsexamples-megatron-zero3-release.json");
  ASSERT_TRUE(release.seconds) << release.error;
  EXPECT_NE(release.warnings.find("cpu_offload_params (legacy) read as offload_param: {device: cpu, pin_memory: true}"),
            std::string::npos)
      << release.warnings;
  EXPECT_NE(release.warnings.find("stage3_param_persitance_threshold: not a DeepSpeed ZeRO key (did you mean "
                                  "'stage3_param_persistence_threshold'?"),
            std::string::npos)
      << release.warnings;
  // The ZeRO-Offload 10B config: 30 sequences = 2 x 3 steps x 5 ranks; its comm_overlap is no
  // DeepSpeed key (overlap_comm's default applies), and activation partitioning is named as what
  // the prediction does not follow.
  const DsOutcome offload = run_ds("dsexamples-megatron-zero-offload-10b.json", 5);
  ASSERT_TRUE(offload.seconds) << offload.error;
  EXPECT_EQ(offload.micro_batch, 2);
  EXPECT_EQ(offload.grad_accum, 3);
  EXPECT_NE(offload.warnings.find("comm_overlap: not a DeepSpeed ZeRO key (did you mean 'overlap_comm'?"),
            std::string::npos)
      << offload.warnings;
  EXPECT_NE(offload.warnings.find("the prediction does not follow them): zero_optimization.contiguous_gradients, "
                                  "activation_checkpointing"),
            std::string::npos)
      << offload.warnings;
}

TEST(RealDeepSpeedConfigs, AlstRunsUlyssesAndNamesWhatItDoesNotModel) {
  // LLaMA-Factory's ALST file: Ulysses over 4 of the 8 ranks runs (models/strategies/ulysses.hpp);
  // ALST's tiled compute and activation-checkpoint offload are named as not followed, and
  // DeepSpeed's fp32 gradient reduction under sequence parallelism is not modelled with offload.
  const DsOutcome alst = run_ds("llamafactory-ds-z3-alst.json");
  ASSERT_TRUE(alst.seconds) << alst.error;
  EXPECT_NE(alst.warnings.find("not model (the prediction does not follow them): sequence_parallel.tiling, "
                               "sequence_parallel.memory_optimizations"),
            std::string::npos)
      << alst.warnings;
  EXPECT_NE(alst.warnings.find("seq_parallel_comm_data_type=fp32 (modelled at stages 2-3 without optimizer offload "
                               "only)"),
            std::string::npos)
      << alst.warnings;
}

TEST(RealDeepSpeedConfigs, WhatOffsimCannotRunIsRefusedAtItsKey) {
  const std::vector<std::pair<std::string, std::string>> refused{
      {"dsexamples-megatron-zero3-infinity-nvme.json",
       "dsexamples-megatron-zero3-infinity-nvme.json:24:17: strategy.config.zero_optimization.offload_param.device: "
       "parameter offload to NVMe is not modelled (cpu is)"},
      {"fastchat-zero2-offload-optimizer-minimal.json",
       "fastchat-zero2-offload-optimizer-minimal.json:1:1: strategy.config: offsim models 16-bit mixed precision"},
      {"llamafactory-ds-z3-quantized-gradients.json",
       "llamafactory-ds-z3-quantized-gradients.json:9:24: strategy.config.zero_optimization: zero_quantized_gradients "
       "needs strategy.qgz (the int4 format)"},
      {"llamafactory-ds-z2-autotp.json",
       "llamafactory-ds-z2-autotp.json:30:20: strategy.config.tensor_parallel.autotp_size: AutoTP over 2 ranks: give "
       "strategy.tp: 2"},
      // No precision section: DeepSpeed trains in fp32 (issue 34's autotuning z3 file).
      {"dsexamples-autotuning-z3.json",
       "dsexamples-autotuning-z3.json:1:1: strategy.config: offsim models 16-bit mixed precision"},
      {"llamafactory-ds-z3-fp8.json",
       "llamafactory-ds-z3-fp8.json:17:10: strategy.config.fp8: FP8 training through DeepSpeed is not modelled"},
  };
  for (const auto& [file, message] : refused) {
    SCOPED_TRACE(file);
    const DsOutcome o = run_ds(file);
    EXPECT_FALSE(o.seconds);
    EXPECT_NE(o.error.find(message), std::string::npos) << o.error;
  }
}

}  // namespace
}  // namespace offsim::models
