// Transformer Engine's userbuffers TP overlap (models/strategies/tp_overlap.hpp): the closed forms
// of its split pipelines, one Llama 3 70B FP8 layer on H100 with NeMo's settings, and the
// iteration it changes.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "models/experiment.hpp"
#include "models/strategies/tp_overlap.hpp"
#include "tests/unit/source_paths.hpp"

namespace offsim::models {
namespace {

namespace fs = std::filesystem;
using sim::TimePs;

constexpr TimePs ps(std::int64_t n) {
  return TimePs{n};
}

TEST(TpOverlapClosedForm, RingExchangeAllGather) {
  // n chunks, GEMM chunk g', ring step c; chunk k arrives at k c and runs after chunk k - 1:
  //   e_0 = g', e_k = max(e_{k-1}, k c) + g'.
  //   g' >= c: total = n g' (the ring hides under the GEMM);
  //   c >= g': total = (n - 1) c + g' (the GEMM waits for every shard; the last chunk exposed).
  EXPECT_EQ(ring_all_gather_overlap(4, ps(10), ps(4), false), ps(40));
  EXPECT_EQ(ring_all_gather_overlap(4, ps(10), ps(15), false), ps(3 * 15 + 10));
  // aggregate: one step c brings the neighbour's shard, then n / 2 chunks of two shards (2 g'),
  // steps of 2 c: with 2 g' >= 2 c, total = c + (n / 2) 2 g'.
  EXPECT_EQ(ring_all_gather_overlap(4, ps(10), ps(4), true), ps(4 + 2 * 20));
  // tp 1 is one local chunk.
  EXPECT_EQ(ring_all_gather_overlap(1, ps(10), ps(99), false), ps(10));
}

TEST(TpOverlapClosedForm, PipelineReduceScatter) {
  // n GEMM chunks of g' back to back, chunk k's reduce-scatter r after chunk k and chunk k-1's:
  //   s_k = max((k + 1) g', s_{k-1}) + r.
  //   g' >= r: total = n g' + r (only the last chunk's reduce-scatter exposed);
  //   r >= g': total = g' + n r (only the first GEMM chunk exposed).
  EXPECT_EQ(pipeline_reduce_scatter_overlap(4, ps(10), ps(3)), ps(4 * 10 + 3));
  EXPECT_EQ(pipeline_reduce_scatter_overlap(4, ps(10), ps(12)), ps(10 + 4 * 12));
}

TEST(TpOverlapClosedForm, RingExchangeReduceScatter) {
  // tp GEMM chunks back to back; chunk k < n - 1 sent to its owner (c, sends chained) after it;
  // the last chunk is the rank's own; then the partials summed (reduce):
  //   c <= g': total = n g' + reduce;  c >= g': total = g' + (n - 1) c + reduce.
  EXPECT_EQ(ring_reduce_scatter_overlap(4, ps(10), ps(3), ps(5)), ps(4 * 10 + 5));
  EXPECT_EQ(ring_reduce_scatter_overlap(4, ps(10), ps(20), ps(5)), ps(10 + 3 * 20 + 5));
}

TEST(TpOverlapClosedForm, BulkOverlapLosesTheCommunicationsSms) {
  // The whole collective c beside the whole GEMM g, whose kernel holds num_sm of the SMs while c
  // runs: total = max(c, g + c num_sm / SMs). H100: 132 SMs; NeMo's qkv_wgrad takes 24.
  EXPECT_EQ(bulk_overlap(ps(100000), ps(50000), 24, 132), ps(100000 + 9091));  // 50000 x 24 / 132 = 9090.9
  EXPECT_EQ(bulk_overlap(ps(100000), ps(200000), 24, 132), ps(200000));        // 100000 + 36364 < 200000
}

std::string source(const std::string& relative) {
  return (fs::path(OFFSIM_SOURCE_DIR) / relative).string();
}

TEST(TpOverlapLayer, Llama3_70bFp8LayerOnH100WithNemosSettings) {
  // One Llama 3 70B layer (hidden 8192, 64 heads of which 8 KV, FFN 28672, sequence 8192) on a tp 4
  // rank of an H100 SXM in FP8 (current scaling), with NeMo's ub_cfg_h100_fp8_h8192_tp4_mbs1_seqlen8192.
  // The collectives alone, from the calibrated NCCL rings over 4 ranks
  // (configs/calibration/dgx-h100-nccl.yaml): forward 2 all-gathers of the normed input in FP8
  // (8192 x 8192 x 1 B = 67 MB) and 2 reduce-scatters of FP8 outputs (fp8_buf, 67 MB); backward 2
  // all-gathers of the output gradient and 2 of the normed input (FP8), 2 reduce-scatters of the
  // dgrad outputs in bf16 (134 MB). What the overlaps add beyond the GEMMs must be well under the
  // collectives they carry (the GEMMs hide them) and above zero (first and last chunks, and the
  // GEMMs slowed by the SMs the pipeline and bulk kernels hold).
  const ExperimentSpec spec = load_experiment(source("configs/experiments/llama3-70b-fp8cs-mbridge-h100.yaml"), {});
  const auto& mg = std::get<MegatronSpec>(spec.strategy);
  ASSERT_TRUE(mg.tp_comm_overlap.has_value());
  EXPECT_EQ(mg.tp_comm_overlap->proj_fprop.method, UbGemmConfig::Method::kPipeline);
  EXPECT_EQ(mg.tp_comm_overlap->proj_fprop.num_sm, 24);
  EXPECT_EQ(mg.tp_comm_overlap->qkv_wgrad.num_sm, 24);
  EXPECT_FALSE(mg.tp_comm_overlap->qkv_wgrad.set_sm_margin);
  const CostModel costs(spec.device);
  const IterationInputs in{spec.model, spec.training, spec.hardware->topology, costs, spec.collectives, spec.host};
  const TpOverlapTimes t = tp_overlap_times(in, 4, *mg.tp_comm_overlap);
  // Golden values of this build (tolerance 1%): the collectives alone, ~0.14 ms per FP8 all-gather
  // or reduce-scatter of 67 MB, 0.29 ms per bf16 reduce-scatter of 134 MB.
  const double fwd_coll = static_cast<double>(t.forward_collectives.ps) * 1e-9;  // ms
  const double bwd_coll = static_cast<double>(t.backward_collectives.ps) * 1e-9;
  const double fwd_extra = static_cast<double>(t.forward_extra.ps) * 1e-9;
  const double bwd_extra = static_cast<double>(t.backward_extra.ps) * 1e-9;
  RecordProperty("forward_collectives_ms", std::to_string(fwd_coll));
  RecordProperty("backward_collectives_ms", std::to_string(bwd_coll));
  RecordProperty("forward_extra_ms", std::to_string(fwd_extra));
  RecordProperty("backward_extra_ms", std::to_string(bwd_extra));
  EXPECT_GT(fwd_extra, 0.0);
  EXPECT_GT(bwd_extra, 0.0);
  EXPECT_LT(fwd_extra, 0.5 * fwd_coll);
  EXPECT_LT(bwd_extra, 0.5 * bwd_coll);
  // Recorded with the shipped tables: forward the ring all-gathers hide under QKV and FC1 (no
  // extra), the pipeline reduce-scatters add the SMs they hold (proj 24 of 132, fc2 16: the GEMMs
  // at 132/108 and 132/116 of their time) and their last chunk; backward the ring all-gathers
  // hide, the bulk ones add the SMs their kernels hold while they run.
  constexpr double kGoldenForwardCollectivesMs = 0.6643, kGoldenBackwardCollectivesMs = 1.2904,
                   kGoldenForwardExtraMs = 0.2568, kGoldenBackwardExtraMs = 0.0730;
  EXPECT_NEAR(fwd_coll, kGoldenForwardCollectivesMs, 0.01 * kGoldenForwardCollectivesMs);
  EXPECT_NEAR(bwd_coll, kGoldenBackwardCollectivesMs, 0.01 * kGoldenBackwardCollectivesMs);
  EXPECT_NEAR(fwd_extra, kGoldenForwardExtraMs, 0.01 * kGoldenForwardExtraMs);
  EXPECT_NEAR(bwd_extra, kGoldenBackwardExtraMs, 0.01 * kGoldenBackwardExtraMs);
}

// A Llama 3 70B FP8 experiment on DGX H100 nodes with `strategy` (no tp_comm_overlap_cfg: TE's defaults).
std::string llama_experiment(const std::string& name, const std::string& strategy) {
  const fs::path file = testing::scratch_folder("offsim-tp-overlap-test") / (name + ".yaml");
  std::ofstream(file) << fmt::format(
      "name: {0}\n"
      "hardware: !include {1}/configs/hardware/dgx-h100.yaml\n"
      "calibration:\n"
      "  device: !include {1}/configs/calibration/h100-sxm.yaml\n"
      "  collectives: !include {1}/configs/calibration/dgx-h100-nccl.yaml\n"
      "model: !include {1}/configs/models/llama3-70b.yaml\n"
      "training: {{micro_batch: 1, grad_accum: 2, precision: fp8, fp8_recipe: current, recompute: none, "
      "flash_attention: true}}\n"
      "strategy: {{kind: megatron, tp: 4, pp: 1, dp: 1, schedule: 1f1b, sequence_parallel: true, zero_stage: 1, "
      "collectives: {{fidelity: analytic}}, {2}}}\n",
      name, OFFSIM_SOURCE_DIR, strategy);
  return file.string();
}

TEST(TpOverlapConfig, DefaultsAreTransformerEnginesAndNeedSequenceParallelism) {
  // Without tp_comm_overlap_cfg: initialize_ub's defaults (ring exchange with 1 SM and no margin,
  // pipeline 16 SMs x 4 splits with the margin, bulk 16 SMs with the margin).
  const std::string file = llama_experiment("defaults", "tp_comm_overlap: true");
  const ExperimentSpec spec = load_experiment(file, {"model.layers=4"});
  const auto& ub = *std::get<MegatronSpec>(spec.strategy).tp_comm_overlap;
  EXPECT_EQ(ub.qkv_fprop.method, UbGemmConfig::Method::kRingExchange);
  EXPECT_EQ(ub.qkv_fprop.num_sm, 1);
  EXPECT_FALSE(ub.qkv_fprop.set_sm_margin);
  EXPECT_EQ(ub.fc2_fprop.method, UbGemmConfig::Method::kPipeline);
  EXPECT_EQ(ub.fc2_fprop.num_splits, 4);
  EXPECT_EQ(ub.fc2_fprop.num_sm, 16);
  EXPECT_TRUE(ub.fc2_fprop.set_sm_margin);
  EXPECT_EQ(ub.qkv_wgrad.method, UbGemmConfig::Method::kBulk);
  EXPECT_EQ(ub.qkv_wgrad.num_sm, 16);
  EXPECT_TRUE(ub.qkv_wgrad.set_sm_margin);
  EXPECT_THROW((void)load_experiment(file, {"strategy.sequence_parallel=false"}), std::exception);
}

TEST(TpOverlapIteration, OverlapShortensTheForwardButLeavesItsExposedPart) {
  // 4 layers on one stage (tp 4, pp 1), 2 micro-batches: with the overlap the forward phase on rank
  // 0 holds at least layers x micro-batches x forward_extra (what the overlaps leave exposed) and
  // is shorter than with every TP collective exposed, as is the iteration.
  const std::string file = llama_experiment("iteration", "tp_comm_overlap: true");
  const std::vector<std::string> shape{"model.layers=4", "hardware.nodes=1"};
  std::vector<std::string> off = shape;
  off.emplace_back("strategy.tp_comm_overlap=false");
  const ExperimentSpec spec = load_experiment(file, shape);
  const ExperimentResult with = run_experiment(spec);
  const ExperimentResult without = run_experiment(load_experiment(file, off));
  EXPECT_LT(with.iteration_time.ps, without.iteration_time.ps);
  const CostModel costs(spec.device);
  const IterationInputs in{spec.model, spec.training, spec.hardware->topology, costs, spec.collectives, spec.host};
  const auto& mg = std::get<MegatronSpec>(spec.strategy);
  const TpOverlapTimes t = tp_overlap_times(in, 4, *mg.tp_comm_overlap);
  const double extra = 4 * 2 * static_cast<double>(t.forward_extra.ps) * 1e-12;
  // The forward phase counts the exposed overlap tasks (phase communication inside the operation's span).
  EXPECT_GT(with.phase_seconds("forward"), extra);
  EXPECT_LT(with.phase_seconds("forward"), without.phase_seconds("forward"));
}

}  // namespace
}  // namespace offsim::models
