// Two mechanisms of Megatron-LM's own pipeline against closed forms: the tied word embedding's
// gradient all-reduce between the first and last stage (phases/tied_embedding.hpp) and the
// scatter/gather of pipeline tensors over the TP group (phases/pipeline_tensors.hpp), each under
// analytic and flow-level collectives.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "models/experiment.hpp"
#include "models/strategies/phases/megatron_schedule.hpp"
#include "models/strategies/phases/pipeline_tensors.hpp"
#include "models/strategies/phases/sequence_parallel_grads.hpp"
#include "models/strategies/phases/tied_embedding.hpp"
#include "models/transformer/transformer.hpp"
#include "tests/unit/source_paths.hpp"

namespace offsim::models {
namespace {

namespace fs = std::filesystem;

// tiny-gpt (2 layers, h 64, V 128, s 32, micro-batch 1) on `gpus` synthetic GPUs joined pairwise
// by 10 GB/s links without latency: with 2 GPUs one link; with 4, TP pairs (gpu0-gpu1, gpu2-gpu3)
// and stage links (gpu0-gpu2, gpu1-gpu3), so that rank t of stage 0 talks to rank t of stage 1 on
// a link of its own. One micro-batch: every transfer and collective lies on the critical path.
std::string tiny(const std::string& name, int gpus, const std::string& strategy, const std::string& fidelity,
                 const std::string& training = "") {
  const fs::path dir = testing::scratch_folder("offsim-megatron-edges-test");
  std::string links = "  - {between: [gpu0, gpu1], bandwidth: \"10 GB/s\", latency: \"0 s\", class: gpu-gpu}\n";
  if (gpus == 4) {
    links +=
        "  - {between: [gpu2, gpu3], bandwidth: \"10 GB/s\", latency: \"0 s\", class: gpu-gpu}\n"
        "  - {between: [gpu0, gpu2], bandwidth: \"10 GB/s\", latency: \"0 s\", class: gpu-gpu}\n"
        "  - {between: [gpu1, gpu3], bandwidth: \"10 GB/s\", latency: \"0 s\", class: gpu-gpu}\n";
  }
  std::ofstream(dir / fmt::format("machine{}.yaml", gpus)) << fmt::format(
      "name: gpus-10gbs\nsource: \"synthetic, for tests\"\ndevices:\n"
      "  - {{name: gpu, count: {}, kind: gpu, device_kind: test-gpu, memory: {{kind: hbm, capacity: "
      "\"1 GB\", bandwidth: \"100 GB/s\"}}}}\nlinks:\n{}",
      gpus, links);
  const fs::path file = dir / (name + ".yaml");
  std::ofstream(file) << fmt::format(
      "name: {0}\n"
      "hardware: !include machine{2}.yaml\n"
      "calibration:\n"
      "  device: !include {1}/tests/data/test-gpu-costs.yaml\n"
      "  collectives: !include {1}/tests/data/test-collectives.yaml\n"
      "model: !include {1}/tests/data/tiny-gpt.yaml\n"
      "training: {{micro_batch: 1, grad_accum: 1, precision: bf16, recompute: none, flash_attention: false{5}}}\n"
      "strategy: {{kind: megatron, dp: 1, schedule: 1f1b, zero_stage: 0, collectives: {{fidelity: {3}}}, {4}}}\n",
      name, OFFSIM_SOURCE_DIR, gpus, fidelity, strategy, training);
  return file.string();
}

double phase_seconds(const ExperimentResult& r, const char* name) {
  double t = 0.0;
  for (const auto& ph : r.phases) {
    if (ph.phase == name) t += ph.time.seconds();
  }
  return t;
}

TEST(MegatronPipelineEdges, TheExchangeFollowsMegatronsVersions) {
  // b s h = 2048 elements, 4096 B whole. Megatron-Core: whole from every TP rank; with sequence
  // parallelism the s / tp slice (2048 B at tp 2), no gather; Megatron-LM 2021-02 .. 2023-03: 1/tp
  // and a gather; DeepSpeed's engine: 1/tp, its own gathers; tp 1: whole, nothing to gather.
  const auto check = [](PipelineTensorExchange e, std::int64_t bytes, bool gathered) {
    EXPECT_EQ(e.bytes_per_rank.count, bytes);
    EXPECT_EQ(e.gathered, gathered);
  };
  check(pipeline_tensor_exchange(2048, 2, false, false, false), 4096, false);
  check(pipeline_tensor_exchange(2048, 2, true, false, false), 2048, false);
  check(pipeline_tensor_exchange(2048, 2, false, true, false), 2048, true);
  check(pipeline_tensor_exchange(2048, 2, true, true, false), 2048, false);
  check(pipeline_tensor_exchange(2048, 2, false, false, true), 2048, false);
  check(pipeline_tensor_exchange(2048, 1, false, true, false), 4096, false);
}

TEST(MegatronPipelineEdges, TiedEmbeddingGradientsAreAllReducedAfterTheReduction) {
  // tp 1, pp 2, dp 1 on two GPUs: no data-parallel reduction, so rank 0's gradient-reduction phase
  // is the embedding group's all-reduce alone, after rank 0's last backward (the last operation of
  // 1F1B): a two-rank ring, two exchanges of half the gradient, both directions of the link at once:
  //   t = 2 x (V h x g / 2) / B = V h g / B, V h = 128 x 64, B = 10 GB/s,
  //   g = 4 (Megatron's fp32 main_grad for bf16 training): 3.2768 us; g = 2 (grad_accum_dtype bf16): 1.6384 us.
  // Untied (tiny-gpt's own setting) or one stage: none. Analytic and flow-level agree (the same flows).
  for (const char* fidelity : {"analytic", "flow"}) {
    SCOPED_TRACE(fidelity);
    const std::string pp2 = "tp: 1, pp: 2, sequence_parallel: false";
    const auto tied = [&](const std::string& name, const std::string& strategy, std::vector<std::string> set) {
      set.emplace_back("model.tied_embeddings=true");
      return run_experiment(load_experiment(tiny(name + fidelity, 2, strategy, fidelity), set));
    };
    const double vh = 128.0 * 64.0;
    const auto fp32 = tied("tied-fp32-", pp2, {});
    EXPECT_NEAR(phase_seconds(fp32, "gradient_reduction"), vh * 4 / 10e9, 1e-12);
    bool noted = false;  // the report says how it is costed
    for (const auto& a : fp32.approximations) noted = noted || a.starts_with("tied embeddings:");
    EXPECT_TRUE(noted);
    EXPECT_NEAR(phase_seconds(tied("tied-bf16-", pp2 + ", grad_accum_dtype: bf16", {}), "gradient_reduction"),
                vh * 2 / 10e9, 1e-12);
    const auto untied = run_experiment(load_experiment(tiny(std::string("untied-") + fidelity, 2, pp2, fidelity), {}));
    EXPECT_NEAR(phase_seconds(untied, "gradient_reduction"), 0.0, 1e-15);
    const auto one_stage = tied("tied-pp1-", "tp: 1, pp: 1, sequence_parallel: false", {});
    EXPECT_NEAR(phase_seconds(one_stage, "gradient_reduction"), 0.0, 1e-15);
  }
}

TEST(MegatronPipelineEdges, TiedEmbeddingGradientIsSplitOverTheTensorParallelGroup) {
  // tp 2, pp 2 on four GPUs: each TP rank's pair (0 with 2, 1 with 3) has a link of its own and
  // all-reduces ceil(V / 2) x h fp32: t = 64 x 64 x 4 / 10 GB/s = 1.6384 us. With sequence
  // parallelism Megatron-Core's finalize_model_grads first all-reduces the norms' and row-parallel
  // biases' gradients over the TP pair (phases/sequence_parallel_grads.hpp): stage 0 holds one
  // layer, 6 h = 384 fp32 elements = 1536 B, a reduce-scatter and an all-gather of
  // tests/data/test-collectives.yaml: n = 10 us + 768 B / 1 GB/s + 20 us + 768 B / 0.5 GB/s =
  // 32.304 us. The last stage finished its backward (and its own all-reduce) earlier, so rank 0's
  // gradient_reduction is n + t.
  for (const char* fidelity : {"analytic", "flow"}) {
    SCOPED_TRACE(fidelity);
    const auto r = run_experiment(
        load_experiment(tiny(std::string("tied-tp2-") + fidelity, 4, "tp: 2, pp: 2, sequence_parallel: true", fidelity),
                        {"model.tied_embeddings=true"}));
    EXPECT_NEAR(phase_seconds(r, "gradient_reduction"), 30e-6 + 768 / 1e9 + 768 / 0.5e9 + 64.0 * 64.0 * 4 / 10e9,
                1e-12);
  }
}

TEST(MegatronPipelineEdges, ScatterGatherHalvesTheTransferAndAddsAGather) {
  // tp 2, pp 2, one micro-batch, no sequence parallelism. The critical path holds two pipeline
  // transfers (activations to stage 1, their gradient back). Whole tensors (Megatron-Core):
  //   T = X + 2 c_whole, c_whole = 4096 B / 10 GB/s = 0.4096 us.
  // Scatter/gather (Megatron-LM of 2021): half on each TP rank's own link, then the receiver's
  // all-gather of the 4096 B tensor over its TP pair, costed from the two-rank all-gather of
  // tests/data/test-collectives.yaml (step latency alpha = 20 us, bus bandwidth 0.5 GB/s):
  //   G = alpha + (1/2) 4096 B / 0.5 GB/s = 24.096 us, and T' = X + 2 (c_half + G), c_half = 0.2048 us:
  //   T' - T = 2 (0.2048 + 24.096 - 0.4096) us = 47.7824 us.
  for (const char* fidelity : {"analytic", "flow"}) {
    SCOPED_TRACE(fidelity);
    const std::string base = "tp: 2, pp: 2, sequence_parallel: false";
    const auto whole = run_experiment(load_experiment(tiny(std::string("whole-") + fidelity, 4, base, fidelity), {}));
    const auto split = run_experiment(load_experiment(
        tiny(std::string("split-") + fidelity, 4, base + ", scatter_gather_tensors_in_pipeline: true", fidelity), {}));
    const double g = 20e-6 + 0.5 * 4096 / 0.5e9;
    EXPECT_NEAR(split.iteration_time.seconds() - whole.iteration_time.seconds(), 2 * (2048 / 10e9 + g - 4096 / 10e9),
                1e-11);
    // With sequence parallelism the tensor is already split: the flag changes nothing.
    const std::string sp = "tp: 2, pp: 2, sequence_parallel: true";
    const auto sp_off = run_experiment(load_experiment(tiny(std::string("sp-") + fidelity, 4, sp, fidelity), {}));
    const auto sp_on = run_experiment(load_experiment(
        tiny(std::string("sp-sg-") + fidelity, 4, sp + ", scatter_gather_tensors_in_pipeline: true", fidelity), {}));
    EXPECT_EQ(sp_on.iteration_time.ps, sp_off.iteration_time.ps);
  }
}

TEST(MegatronPipelineEdges, TheWholeTensorDefaultIsNamedWhereItMatters) {
  // Left out with tp > 1, pp > 1 and no sequence parallelism, Megatron-Core's whole tensors are
  // named among the defaults applied; with sequence parallelism the key changes nothing and is not.
  const auto named = [](const ExperimentSpec& spec) {
    bool found = false;
    for (const auto& d : spec.defaults_applied)
      found = found || d.starts_with("strategy.scatter_gather_tensors_in_pipeline=false");
    return found;
  };
  EXPECT_TRUE(named(load_experiment(tiny("named", 4, "tp: 2, pp: 2, sequence_parallel: false", "analytic"), {})));
  EXPECT_FALSE(named(load_experiment(tiny("unnamed", 4, "tp: 2, pp: 2, sequence_parallel: true", "analytic"), {})));
}

TEST(MegatronPipelineEdges, DeepSpeedMegatronsOwnScheduleSendsWholeTensorsByDefault) {
  // Megatron-DeepSpeed at the version the shipped experiments name trains through Megatron-Core's
  // p2p_communication (no split, no gather) although its arguments.py keeps
  // --no-scatter-gather-tensors-in-pipeline (default true): left out under training.framework:
  // deepspeed-megatron with Megatron's own schedule, the key is false and named as
  // Megatron-DeepSpeed's; written, it is taken as written; under DeepSpeed's engine it is not named.
  const auto named = [](const ExperimentSpec& spec, const char* start) {
    int found = 0;
    for (const auto& d : spec.defaults_applied) found += d.starts_with(start) ? 1 : 0;
    return found;
  };
  const std::string ds = ", framework: deepspeed-megatron";
  const auto mine = load_experiment(
      tiny("ds-own", 4, "tp: 2, pp: 2, sequence_parallel: false, pipeline_engine: megatron", "analytic", ds), {});
  EXPECT_FALSE(std::get<MegatronSpec>(mine.strategy).scatter_gather_tensors_in_pipeline);
  EXPECT_EQ(named(mine, "strategy.scatter_gather_tensors_in_pipeline=false (Megatron-DeepSpeed's"), 1);
  EXPECT_EQ(named(mine, "strategy.scatter_gather_tensors_in_pipeline="), 1);
  const auto written = load_experiment(
      tiny(
          "ds-own-sg", 4,
          "tp: 2, pp: 2, sequence_parallel: false, pipeline_engine: megatron, scatter_gather_tensors_in_pipeline: true",
          "analytic", ds),
      {});
  EXPECT_TRUE(std::get<MegatronSpec>(written.strategy).scatter_gather_tensors_in_pipeline);
  EXPECT_EQ(named(written, "strategy.scatter_gather_tensors_in_pipeline="), 0);
  const auto engine =
      load_experiment(tiny("ds-engine", 4, "tp: 2, pp: 2, sequence_parallel: false", "analytic", ds), {});
  EXPECT_EQ(std::get<MegatronSpec>(engine.strategy).pipeline_engine, MegatronSpec::PipelineEngine::kDeepSpeed);
  EXPECT_EQ(named(engine, "strategy.scatter_gather_tensors_in_pipeline="), 0);
}

TEST(MegatronPipelineEdges, SequenceParallelNormGradientsAreAllReducedOverTheTensorParallelGroup) {
  // Megatron-Core's finalize_model_grads -> _allreduce_layernorm_grads (phases/
  // sequence_parallel_grads.hpp). tiny-gpt: 2 layers, h 64, LayerNorm (weight and bias), biases on
  // every projection, untied. Per layer 2 norms x 2 h + 2 h row-parallel biases = 6 h = 384
  // elements, and the final norm 2 h = 128: E = 2 x 384 + 128 = 896 fp32 elements = 3584 B on each
  // rank (tp 2, pp 1, dp 1: no data-parallel reduction, so rank 0's gradient_reduction phase is the
  // all-reduce alone). The all-reduce is a reduce-scatter then an all-gather over the TP pair
  // (tests/data/test-collectives.yaml: alpha 10 us and 1 GB/s, alpha 20 us and 0.5 GB/s):
  //   T = 10 us + (1/2) 3584 B / 1 GB/s + 20 us + (1/2) 3584 B / 0.5 GB/s = 35.376 us.
  EXPECT_EQ(sequence_parallel_gradient_elements(
                load_experiment(tiny("sp-norms", 2, "tp: 2, sequence_parallel: true", "analytic"), {}).model, 2, true,
                2, true),
            896);
  for (const char* fidelity : {"analytic", "flow"}) {
    SCOPED_TRACE(fidelity);
    const auto sp = run_experiment(
        load_experiment(tiny(std::string("sp-grads-") + fidelity, 2, "tp: 2, sequence_parallel: true", fidelity), {}));
    EXPECT_NEAR(phase_seconds(sp, "gradient_reduction"), 30e-6 + 0.5 * 3584 / 1e9 + 0.5 * 3584 / 0.5e9, 1e-11);
    // Without sequence parallelism (and no Q/K norms) every TP rank sees every token: no all-reduce.
    const auto plain = run_experiment(
        load_experiment(tiny(std::string("no-sp-") + fidelity, 2, "tp: 2, sequence_parallel: false", fidelity), {}));
    EXPECT_EQ(phase_seconds(plain, "gradient_reduction"), 0.0);
  }
}

TEST(MegatronPipelineEdges, GradientsAccumulatedOutsideTheGemmCostTheirBytes) {
  // tiny-gpt on one rank (tp 1, pp 1, dp 1), 4 micro-batches, P parameters; the test GPU streams
  // 100 GB/s at efficiency 1 (tests/data/test-gpu-costs.yaml). transformer/precision.hpp:
  // - Megatron-LM's gradient_accumulation_fusion (the default): nothing beyond the GEMMs;
  // - fusion off, fp32 main_grad: the DDP hook's main_grad.add_(grad) every micro-batch,
  //   10 B x P x 4 / 100 GB/s;
  // - fusion off, 16-bit gradients: autograd's in-place add from the second micro-batch on,
  //   6 B x P x 3 / 100 GB/s;
  // - DeepSpeed's ZeRO-1 optimizer (16-bit gradients in param.grad): autograd's, 6 B x P x 3.
  const std::vector<std::string> four{"training.grad_accum=4"};
  const auto run = [&](const std::string& name, const std::string& strategy, const std::string& training = "") {
    return run_experiment(load_experiment(tiny(name, 2, "tp: 1, pp: 1, " + strategy, "analytic", training), four));
  };
  const ExperimentSpec spec = load_experiment(tiny("accum-spec", 2, "tp: 1, pp: 1", "analytic"), four);
  const double p = static_cast<double>(count_parameters(spec.model).total);
  EXPECT_FALSE(spec.defaults_applied.empty());
  const double fused = run("accum-fused", "sequence_parallel: false").iteration_time.seconds();
  EXPECT_NEAR(run("accum-fp32", "gradient_accumulation_fusion: false").iteration_time.seconds() - fused,
              10 * p * 4 / 100e9, 1e-12);
  const double fused16 = run("accum-fused16", "grad_accum_dtype: bf16").iteration_time.seconds();
  EXPECT_NEAR(
      run("accum-16", "grad_accum_dtype: bf16, gradient_accumulation_fusion: false").iteration_time.seconds() - fused16,
      6 * p * 3 / 100e9, 1e-12);
  // Under training.framework: deepspeed-megatron Megatron's optimizer takes Megatron-DeepSpeed's
  // default (the fused path commented out), named among the defaults applied.
  const ExperimentSpec ds =
      load_experiment(tiny("accum-ds", 2, "tp: 1, pp: 1", "analytic", ", framework: deepspeed-megatron"), four);
  EXPECT_FALSE(std::get<MegatronSpec>(ds.strategy).gradient_accumulation_fusion);
  int named = 0;
  for (const auto& d : ds.defaults_applied)
    named += d.starts_with("strategy.gradient_accumulation_fusion=false (Megatron-DeepSpeed's") ? 1 : 0;
  EXPECT_EQ(named, 1);
  EXPECT_NEAR(run_experiment(ds).iteration_time.seconds() - fused, 10 * p * 4 / 100e9, 1e-12);
  // DeepSpeed's ZeRO-1 optimizer: its optimizer phase against one micro-batch's (no addition).
  const auto zero1 = [&](const std::string& name, const std::string& grad_accum) {
    return phase_seconds(
        run_experiment(load_experiment(tiny(name, 2, "tp: 1, pp: 1, optimizer: deepspeed", "analytic"),
                                       {"strategy.zero_stage=1", "training.grad_accum=" + grad_accum})),
        "optimizer");
  };
  EXPECT_NEAR(zero1("accum-zero1-4", "4") - zero1("accum-zero1-1", "1"), 6 * p * 3 / 100e9, 1e-12);
  // FSDP2 under the pipeline (zero_stage 2, pp 2; rank 0 holds stage 0: one layer, the embeddings):
  // the first no-sync micro-batch's bf16 gradients cast into the fp32 buffer (6 B), the three
  // later ones added (10 B each): 36 B x P0 at 4 micro-batches; nothing at one (reduce-scattered
  // as it comes).
  const ParameterCounts c = count_parameters(spec.model);
  const double p0 = static_cast<double>(c.per_layer + c.embedding + c.position);
  const auto fsdp = [&](const std::string& name, const std::string& grad_accum) {
    return phase_seconds(
        run_experiment(load_experiment(tiny(name, 2, "tp: 1, pp: 2", "analytic"),
                                       {"strategy.zero_stage=2", "training.grad_accum=" + grad_accum})),
        "optimizer");
  };
  EXPECT_NEAR(fsdp("accum-fsdp-4", "4") - fsdp("accum-fsdp-1", "1"), 36 * p0 / 100e9, 1e-12);
}

// Megatron's per-rank order (phases/megatron_schedule.hpp), written out by hand from
// schedules.py's rules. F/B: forward/backward; (chunk, micro-batch).
std::string order(const std::vector<PipelineOp>& ops) {
  std::string out;
  for (const auto& op : ops) out += fmt::format("{}{}.{} ", op.forward ? 'F' : 'B', op.chunk, op.micro_batch);
  return out;
}

TEST(MegatronSchedule, OneForwardOneBackwardAfterPpMinusStageMinusOneWarmUpForwards) {
  // pp 4, m 6: stage 0 warms up with 3 forwards, alternates F/B until the 6th forward, then
  // drains 3 backwards; the last stage (no warm-up) alternates from the start.
  EXPECT_EQ(order(megatron_schedule(4, 0, 1, 6)), "F0.0 F0.1 F0.2 F0.3 B0.0 F0.4 B0.1 F0.5 B0.2 B0.3 B0.4 B0.5 ");
  EXPECT_EQ(order(megatron_schedule(4, 3, 1, 6)), "F0.0 B0.0 F0.1 B0.1 F0.2 B0.2 F0.3 B0.3 F0.4 B0.4 F0.5 B0.5 ");
  // Fewer micro-batches than the warm-up: every forward, then every backward.
  EXPECT_EQ(order(megatron_schedule(4, 0, 1, 2)), "F0.0 F0.1 B0.0 B0.1 ");
}

TEST(MegatronSchedule, InterleavedGroupsOfPpMicroBatchesGoThroughTheChunksInTurn) {
  // pp 2, v 2, m 4, stage 0: warm-up (2 - 0 - 1) x 2 + (2 - 1) x 2 = 4 forwards. Forward k runs
  // chunk (k / 2) mod 2 on micro-batch (k / 4) x 2 + k mod 2; backward k the chunk 1 - that.
  EXPECT_EQ(order(megatron_schedule(2, 0, 2, 4)),
            "F0.0 F0.1 F1.0 F1.1 F0.2 B1.0 F0.3 B1.1 F1.2 B0.0 F1.3 B0.1 B1.2 B1.3 B0.2 B0.3 ");
  // The last stage warms up with (v - 1) x pp = 2 forwards only.
  EXPECT_EQ(order(megatron_schedule(2, 1, 2, 4)),
            "F0.0 F0.1 F1.0 B1.0 F1.1 B1.1 F0.2 B0.0 F0.3 B0.1 F1.2 B1.2 F1.3 B1.3 B0.2 B0.3 ");
}

}  // namespace
}  // namespace offsim::models
