// Closed-form checks of FSDP2 x TP as torchtitan runs it (models/strategies/phases/fsdp2.hpp) on a
// synthetic four-GPU machine (tests/data/tiny-fsdp-tp.yaml): the tiny GPT (L = 2, h = 64, a = 4,
// f = 256, V = 128, s = 32, b = 1, untied, biases) with tp 2 inside the pairs (gpu0, gpu1) and
// (gpu2, gpu3) on "tp-link" links and FSDP over the dp = 2 dp_shard ranks of each tensor rank,
// (gpu0, gpu2) and (gpu1, gpu3), on "dp-link" links; every link 1 GB/s full duplex; all-gather
// ring steps 20 us at a 0.5 GB/s bus bandwidth (tests/data/test-collectives.yaml). Also expert
// parallelism inside the same tp x ep layout (tests/data/tiny-moe-tp-ep.yaml), and with optimizer
// offload (tests/data/tiny-moe-offload.yaml).
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <sstream>
#include <stdexcept>
#include <string>

#include "models/experiment.hpp"
#include "sim/config/config_reader.hpp"

namespace offsim::models {
namespace {

const std::string kTinyFsdpTp = std::string(OFFSIM_SOURCE_DIR) + "/tests/data/tiny-fsdp-tp.yaml";

// Each rank's tensor-parallel share (offsim splits every count by tp, docs/strategies.md):
//   a block   P_l = (12 h^2 + 13 h) / tp = 49,984 / 2 = 24,992
//   the root's embedding E = (V h + s h) / tp = (8,192 + 2,048) / 2 = 5,120
//   and head  H = (2 h + V h) / tp = (128 + 8,192) / 2 = 4,160
constexpr double kBlock = 24'992, kEmbedding = 5'120, kHead = 4'160;
constexpr double kTp = 2, kDp = 2, kBf16 = 2, kFp32 = 4;

double link_bytes(const ExperimentResult& r, const std::string& link_class) {
  for (const auto& l : r.links) {
    if (l.link_class == link_class) return l.bytes;
  }
  throw std::runtime_error(fmt::format("the run has no link class '{}'", link_class));
}

// Bytes one rank sends (and receives) in a ring all-gather of a unit whose whole parameter count
// is params_unit, over the dp_shard ranks of its tensor rank:
//   params_unit x w / (tp x dp) x (dp - 1),
// and in the ring reduce-scatter of its gradients in the reduce dtype r: the same with r for w.
double gathered_per_rank(double tp_share, double bytes) {
  const double params_unit = tp_share * kTp;
  return params_unit * bytes / (kTp * kDp) * (kDp - 1);
}

TEST(Fsdp2, GathersAndReduceScattersOverTheDpShardRanksOfEachTensorRank) {
  // torchtitan's default reshard_after_forward: forward gathers the root's embedding, both blocks
  // and the root's head; backward gathers block 0 only (the last block and the root are kept).
  // Every unit's gradients are reduce-scattered once in fp32. Each of the 4 ranks sends what it
  // gathers / reduces, all of it on the dp links:
  //   dp-link bytes = 4 x [sum over gathers of gathered_per_rank(n, 2) + sum over units of
  //                        gathered_per_rank(n, 4)]
  //                 = 4 x [(E + H + 3 P_l) + 2 (E + H + 2 P_l)] = 4 x (3E + 3H + 7P_l) = 811,136 B
  const ExperimentResult r = run_experiment(load_experiment(kTinyFsdpTp, {}));
  const double gathers =
      gathered_per_rank(kEmbedding, kBf16) + gathered_per_rank(kHead, kBf16) + 3 * gathered_per_rank(kBlock, kBf16);
  const double reductions =
      gathered_per_rank(kEmbedding, kFp32) + gathered_per_rank(kHead, kFp32) + 2 * gathered_per_rank(kBlock, kFp32);
  EXPECT_NEAR(link_bytes(r, "dp-link"), 4 * (gathers + reductions), 1.0);
  EXPECT_NEAR(link_bytes(r, "dp-link"), 811'136.0, 1.0);
  EXPECT_TRUE(r.feasible);
  // reshard_after_forward always: the last block is gathered again for its backward (+ 4 x P_l);
  // never: no backward gathers (- 4 x P_l); a bf16 reduce-scatter halves the reductions.
  const auto dp_bytes = [](const std::string& set) {
    return link_bytes(run_experiment(load_experiment(kTinyFsdpTp, {set})), "dp-link");
  };
  EXPECT_NEAR(dp_bytes("strategy.reshard_after_forward=always"), 811'136.0 + 4 * kBlock, 1.0);
  EXPECT_NEAR(dp_bytes("strategy.reshard_after_forward=never"), 811'136.0 - 4 * kBlock, 1.0);
  EXPECT_NEAR(dp_bytes("strategy.gradient_reduce_dtype=bf16"), 4 * (gathers + reductions / 2), 1.0);
}

TEST(Fsdp2, OneGatherPerBlockAtTheFixedLinkRate) {
  // One all-gather per FSDP unit (DeepSpeed's stage 3 gathers each projection apart): block 0's is
  // one ring step over the 2 ranks, a quarter of its 2 x P_l B buffer per direction and flow, so
  // on the 0.5 GB/s bus bandwidth (0.25 GB/s per direction) it takes
  //   20 us + (2 P_l / 4) B / 0.25 GB/s = 20 us + 12,496 B / 0.25 GB/s = 69.984 us.
  const ExperimentSpec spec = load_experiment(kTinyFsdpTp, {});
  std::istringstream graph(dump_task_graph(spec, false));
  int flows = 0;
  for (std::string line; std::getline(graph, line);) {
    if (line.find(" gather.mb0.fwd.layer0.") == std::string::npos || line.find(".cw0.r0 ") == std::string::npos)
      continue;
    EXPECT_EQ(std::stoll(line.substr(line.find("bytes=") + 6)), static_cast<long long>(kBf16 * kBlock / 4));
    ++flows;
  }
  EXPECT_EQ(flows, 1);
  const double seconds = 20e-6 + (kBf16 * kBlock / 4) / 0.25e9;
  EXPECT_NEAR(seconds, 69.984e-6, 1e-12);
}

TEST(Fsdp2, ShardsAreFp32AndTheTpCollectivesAreThoseOfTheLayers) {
  // Model states per rank: the rank's tensor-parallel share P = 2 P_l + E + H = 59,264 sharded
  // over 2 (29,632 each): the fp32 parameter shard (the master copy) 4 B, the fp32 gradient shard
  // 4 B, Adam's m and v 8 B: 16 B x 29,632.
  const ExperimentResult r = run_experiment(load_experiment(kTinyFsdpTp, {}));
  EXPECT_EQ(r.model_states_per_device.count, 16 * 29'632);
  // The TP collectives inside each layer are the data_parallel strategy's (sequence parallelism
  // on, torchtitan's apply_tp): the same bytes on the tp links as DeepSpeed's stage 3 with tp.
  const ExperimentResult deepspeed = run_experiment(
      load_experiment(kTinyFsdpTp, {"training.framework=pytorch", "strategy.zero_stage=3",
                                    "strategy.sequence_parallel=true", "strategy.param_persistence_threshold=0"}));
  EXPECT_NEAR(link_bytes(r, "tp-link"), link_bytes(deepspeed, "tp-link"), 1.0);
  EXPECT_GT(link_bytes(r, "tp-link"), 0.0);
}

TEST(Fsdp2, TorchtitansDefaultsAreNamed) {
  const ExperimentSpec spec = load_experiment(kTinyFsdpTp, {});
  const auto named = [&](const std::string& prefix) {
    for (const auto& d : spec.defaults_applied)
      if (d.starts_with(prefix) && d.find("torchtitan") != std::string::npos) return true;
    return false;
  };
  for (const char* key : {"strategy.zero_stage=3", "strategy.reshard_after_forward=default",
                          "strategy.gradient_reduce_dtype=fp32", "strategy.sequence_parallel=true"}) {
    EXPECT_TRUE(named(key)) << key;
  }
  // Other stages, DeepSpeed's keys and a left-out recompute are errors (tests/config_errors/torchtitan-*.yaml).
  EXPECT_THROW((void)load_experiment(kTinyFsdpTp, {"strategy.zero_stage=2"}), sim::config::ConfigError);
  EXPECT_THROW((void)load_experiment(kTinyFsdpTp, {"strategy.overlap_comm=true"}), sim::config::ConfigError);
}

TEST(ExpertParallelWithTp, TheAllToAllRunsOverTheReplicasOfEachTensorRank) {
  // The tiny mixture of experts (2 experts, 1 per token; tests/unit/data_parallel_test.cpp states
  // its counts: per layer 83,200 parameters of which 2 x 33,088 experts; P = 184,960) with tp 2,
  // ep 2, dp 2, ZeRO-0 with 16-bit gradients. Each rank holds its tensor share of everything and
  // of its one expert (Megatron-Core's expert tensor parallelism: the experts split over tp):
  //   non-expert (184,960 - 2 x 66,176) / 2 = 26,304, experts 2 x 66,176 / 2 / 2 = 33,088;
  //   model states 16 B x (26,304 + 33,088) = 950,272 B.
  // dp links (the ranks of one tensor rank): the non-expert gradients all-reduced over the 2
  // replicas (2 x 2 B x 26,304 per group, 2 groups); the expert's data-parallel group is the rank
  // alone. The all-to-alls of each expert-parallel group (s k h = 2,048 elements, 4,096 B on its
  // link per all-to-all, 2 groups), 2 in forward and 2 in backward per layer, 2 layers:
  //   dp-link = 2 x 4 x 26,304 + 2 layers x 4 x 2 groups x 4,096 = 210,432 + 65,536 = 275,968 B.
  // tp links: the attention's and the experts' all-reduces of s h = 2,048 activations (2 x 4,096 B
  // per all-reduce over 2 ranks), 2 in forward and 2 in backward per layer, 2 groups:
  //   tp-link = 2 x 4 x 2 x 8,192 = 131,072 B.
  const ExperimentResult r =
      run_experiment(load_experiment(std::string(OFFSIM_SOURCE_DIR) + "/tests/data/tiny-moe-tp-ep.yaml", {}));
  EXPECT_EQ(r.model_states_per_device.count, 950'272);
  EXPECT_NEAR(link_bytes(r, "dp-link"), 2 * 4 * 26'304 + 2 * 4 * 2 * 4'096, 1.0);
  EXPECT_NEAR(link_bytes(r, "tp-link"), 2 * 4 * 2 * 8'192, 1.0);
  EXPECT_TRUE(r.feasible);
}

TEST(ExpertParallelWithOffload, EachRanksExpertsGoToTheHostWithTheRest) {
  // The tiny mixture of experts (P = 184,960: 52,608 non-expert, 2 x 66,176 experts) with ep 2 on
  // the two-GPU offload node, ZeRO-2 with optimizer offload (DeepSpeed 0.16). Each rank holds the
  // non-expert parameters and its own expert (118,784) and updates U = 52,608 / 2 + 66,176 =
  // 92,480 of them: its half of the non-expert partition and the whole of its expert (the expert's
  // data-parallel group is the rank alone).
  //   host link: each reduced bucket up-cast and copied down in fp32 (4 B) and the updated bf16
  //              parameters back (2 B): 6 B x U per rank, 2 ranks = 1,109,760 B;
  //   host memory: 16 B x U per rank (fp32 master, m, v and gradient), 2 ranks = 2,959,360 B;
  //   GPU model states: the bf16 parameters it holds, 2 B x 118,784 = 237,568 B;
  //   gpu-gpu: the non-expert gradients' reduce-scatter and the updated parameters' all-gather
  //            (each 2 B x 52,608 on the link over 2 ranks) and the all-to-alls (2 layers x 4 x 4,096 B):
  //            105,216 + 105,216 + 32,768 = 243,200 B.
  const ExperimentResult r =
      run_experiment(load_experiment(std::string(OFFSIM_SOURCE_DIR) + "/tests/data/tiny-moe-offload.yaml", {}));
  EXPECT_NEAR(link_bytes(r, "cpu-gpu"), 2 * 6 * 92'480, 1e-6 * 92'480);
  EXPECT_EQ(r.peak_bytes("dram"), 2 * 16 * 92'480);
  EXPECT_EQ(r.model_states_per_device.count, 2 * 118'784);
  EXPECT_NEAR(link_bytes(r, "gpu-gpu"), 105'216 + 105'216 + 2 * 4 * 4'096, 1.0);
}

}  // namespace
}  // namespace offsim::models
