// Megatron 3D parallelism (models/strategies/megatron.cpp): the pipeline bubble of the 1F1B and
// interleaved schedules against their closed forms, and agreement with the data-parallel builder
// where the two describe the same run.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>

#include <fmt/format.h>

#include "models/experiment.hpp"
#include "tests/unit/source_paths.hpp"

namespace offsim::models {
namespace {

namespace fs = std::filesystem;

// GPT-3 175B (96 layers) on one Frontier node: stages of 24 layers make the embedding and head a
// small imbalance (the head is about a third of a layer), and the point-to-point activations
// (50 MB over Infinity Fabric, ~1 ms) are small next to a stage's compute (~1 s per micro-batch).
std::string experiment(const std::string& name, const std::string& strategy, int micro_batches) {
  const fs::path dir = testing::scratch_folder("offsim-megatron-test");
  const fs::path file = dir / (name + ".yaml");
  std::ofstream(file) << fmt::format(
      "name: {0}\n"
      "hardware: !include {1}/configs/hardware/frontier-node.yaml\n"
      "calibration:\n"
      "  device: !include {1}/configs/calibration/mi250x-gcd.yaml\n"
      "  collectives: !include {1}/configs/calibration/frontier-rccl.yaml\n"
      "model: !include {1}/configs/models/gpt3-175b.yaml\n"
      "training: {{micro_batch: 1, grad_accum: {2}, precision: bf16, recompute: full, flash_attention: true}}\n"
      "strategy:\n{3}",
      name, OFFSIM_SOURCE_DIR, micro_batches, strategy);
  return file.string();
}

double seconds(const std::string& file) {
  return run_experiment(load_experiment(file, {})).iteration_time.seconds();
}

std::string megatron(int pp, const std::string& schedule) {
  return fmt::format("  kind: megatron\n  tp: 1\n  pp: {}\n  dp: 1\n{}  sequence_parallel: false\n  zero_stage: 0\n",
                     pp, schedule);
}

TEST(Megatron, OneFOneBBubbleFollowsTheClosedForm) {
  // With m micro-batches of per-stage time t = T1 / (p m) (T1: the whole model on one GCD), 1F1B
  // takes (m + p - 1) t: the bubble is (p - 1) / (m + p - 1) of the iteration (Narayanan et al.,
  // SC21). The optimizer (Adam on 1/p of the parameters) is outside the pipeline on both sides.
  const int m = 8;
  const int p = 4;
  const ExperimentResult one =
      run_experiment(load_experiment(experiment("pp1", megatron(1, "  schedule: 1f1b\n"), m), {}));
  const ExperimentResult four =
      run_experiment(load_experiment(experiment("pp4", megatron(p, "  schedule: 1f1b\n"), m), {}));
  const auto phase = [](const ExperimentResult& r, const char* name) {
    double t = 0.0;
    for (const auto& ph : r.phases) {
      if (ph.phase == name) t += ph.time.seconds();
    }
    return t;
  };
  const double pipeline_one = one.iteration_time.seconds() - phase(one, "optimizer");
  const double pipeline_four = four.iteration_time.seconds() - phase(four, "optimizer");
  EXPECT_NEAR(pipeline_four / (pipeline_one / p * (m + p - 1) / m), 1.0, 0.03);
  EXPECT_NEAR(phase(four, "pipeline_bubble") / pipeline_four, (p - 1.0) / (m + p - 1.0), 0.02);
  EXPECT_NEAR(phase(one, "pipeline_bubble"), 0.0, 1e-9);
}

TEST(Megatron, InterleavingDividesTheBubbleByTheVirtualStages) {
  // Interleaved with v chunks per rank: (p - 1) t / v of bubble, t = T1 / (p m):
  // pipeline = T1 / p x (1 + (p - 1) / (v m)) (Narayanan et al., SC21, section 2.2).
  const int m = 8;
  const int p = 4;
  const int v = 2;
  const double one = seconds(experiment("i1", megatron(1, "  schedule: 1f1b\n"), m));
  const double interleaved =
      seconds(experiment("i4", megatron(p, fmt::format("  schedule: interleaved\n  virtual_stages: {}\n", v)), m));
  const double plain = seconds(experiment("p4", megatron(p, "  schedule: 1f1b\n"), m));
  EXPECT_NEAR(interleaved / (one / p * (1.0 + (p - 1.0) / (v * m))), 1.0, 0.03);
  EXPECT_LT(interleaved, plain);
}

TEST(Megatron, OneStageOneRankIsTheDataParallelIteration) {
  // tp = pp = dp = 1 is the same run as data parallelism over one rank (ZeRO-0) with the same
  // optimizer, DeepSpeed's (BF16_Optimizer, the default at ZeRO-0): same kernels, the same passes
  // over the fp32 gradient buffer and Adam, nothing to communicate.
  const double mg = seconds(experiment("single", megatron(1, "  schedule: 1f1b\n  optimizer: deepspeed\n"), 2));
  const double dp = seconds(experiment("dp1",
                                       "  kind: data_parallel\n  zero_stage: 0\n  dp: 1\n"
                                       "  reduce_bucket_elements: 500000000\n  overlap_comm: true\n",
                                       2));
  EXPECT_NEAR(mg, dp, 1e-9 * dp);
}

TEST(Megatron, DataParallelismReducesTheFp32MainGradients) {
  // tp = pp = 1, dp = 2 on two GCDs of one node, ZeRO-0. Megatron keeps and reduces the gradients
  // of bf16 training in fp32 (main_grad): the states are 2 + 4 + 12 = 18 B per parameter, and the
  // only GPU-GPU traffic is the all-reduce of the 4P bytes of gradients, which over 2 ranks puts
  // 2 x 4P on the links (as data_parallel_test's ZeroStages counts an all-reduce).
  const ExperimentResult r = run_experiment(load_experiment(
      experiment("dp2-fp32-gradients",
                 "  kind: megatron\n  tp: 1\n  pp: 1\n  dp: 2\n  schedule: 1f1b\n  sequence_parallel: false\n"
                 "  zero_stage: 0\n",
                 1),
      {}));
  const std::int64_t states = r.model_states_per_device.count;
  ASSERT_EQ(states % 18, 0);
  const double P = static_cast<double>(states / 18);
  double gpu_gpu = 0;
  for (const auto& l : r.links) {
    if (l.link_class == "gpu-gpu") gpu_gpu += l.bytes;
  }
  EXPECT_NEAR(gpu_gpu, 2 * 4 * P, 1e-9 * P);
}

TEST(Megatron, TheDataParallelOptimizerSetsStatesAndTraffic) {
  // tp = pp = 1, dp = 2 on two GCDs, P parameters per rank. Per rank: states, and the bytes the
  // gradient reduction and the parameter all-gather put on the GPU-GPU links (over 2 ranks an
  // all-reduce of S bytes puts 2S there, a reduce-scatter or an all-gather S):
  //   Megatron, zero 1 (distributed optimizer): 2P + 4P + 12P/2 = 12P; fp32 RS 4P + AG 2P = 6P
  //   DeepSpeed, zero 0 (BF16_Optimizer by default): 2P + 6P + 6P = 14P; fp32 AR 8P + AG 2P = 10P
  //   DeepSpeed, zero 1 (bf16 accumulation by default): 2P + 2P + 6P = 10P; RS 2P + AG 2P = 4P
  //   DeepSpeed, zero 1, grad_accum_dtype fp32 (BF16_Optimizer): 14P; 10P
  //   Megatron, zero 1, grad_accum_dtype bf16 (16-bit main_grad, fp16 training's default):
  //                                                          2P + 2P + 6P = 10P; RS 2P + AG 2P = 4P
  const auto run = [](const std::string& name, int zero, const std::string& optimizer) {
    return run_experiment(
        load_experiment(experiment(name,
                                   fmt::format("  kind: megatron\n  tp: 1\n  pp: 1\n  dp: 2\n  schedule: 1f1b\n"
                                               "  sequence_parallel: false\n  zero_stage: {}\n{}",
                                               zero, optimizer),
                                   1),
                        {}));
  };
  const auto gpu_gpu = [](const ExperimentResult& r) {
    double bytes = 0;
    for (const auto& l : r.links) {
      if (l.link_class == "gpu-gpu") bytes += l.bytes;
    }
    return bytes;
  };
  const ExperimentResult megatron = run("optimizer-megatron", 1, "");
  const double P = static_cast<double>(megatron.model_states_per_device.count) / 12;
  EXPECT_NEAR(gpu_gpu(megatron), 6 * P, 1e-9 * P);
  const ExperimentResult bf16_optimizer = run("optimizer-ds0", 0, "  optimizer: deepspeed\n");
  EXPECT_DOUBLE_EQ(static_cast<double>(bf16_optimizer.model_states_per_device.count), 14 * P);
  EXPECT_NEAR(gpu_gpu(bf16_optimizer), 10 * P, 1e-9 * P);
  const ExperimentResult zero1 = run("optimizer-ds1", 1, "  optimizer: deepspeed\n");
  EXPECT_DOUBLE_EQ(static_cast<double>(zero1.model_states_per_device.count), 10 * P);
  EXPECT_NEAR(gpu_gpu(zero1), 4 * P, 1e-9 * P);
  const ExperimentResult zero1_fp32 =
      run("optimizer-ds1-fp32", 1, "  optimizer: deepspeed\n  grad_accum_dtype: fp32\n");
  EXPECT_DOUBLE_EQ(static_cast<double>(zero1_fp32.model_states_per_device.count), 14 * P);
  EXPECT_NEAR(gpu_gpu(zero1_fp32), 10 * P, 1e-9 * P);
  const ExperimentResult megatron16 = run("optimizer-megatron-16bit", 1, "  grad_accum_dtype: bf16\n");
  EXPECT_DOUBLE_EQ(static_cast<double>(megatron16.model_states_per_device.count), 10 * P);
  EXPECT_NEAR(gpu_gpu(megatron16), 4 * P, 1e-9 * P);
}

TEST(Megatron, FsdpUnderThePipelineShardsGradientsAndReducesOnce) {
  // pp 2 x dp 4 on one Frontier node, m = 4 micro-batches. P: the parameters of a stage-0 rank,
  // q = ceil(P / 4) its share over the 4 ranks of its data-parallel group. Per rank:
  //   zero 1 (Megatron's distributed optimizer): states 2P + 4P (fp32 main_grad) + 12q;
  //   zero 2 (FSDP2 under the pipeline schedule): states 2P + 4q (fp32 gradient shard) + 12q, and
  //     a whole fp32 buffer of 4P from the rank's first backward until the reduce-scatter after
  //     its last: as 1F1B holds its most micro-batches again after the first backward, the peak is
  //     4q above zero 1's;
  //   both: per iteration and per stage one reduce-scatter of the fp32 gradients and one
  //     all-gather of the bf16 parameters (not one per micro-batch): the same bytes on the links.
  const auto spec = [](int zero) {
    return fmt::format(
        "  kind: megatron\n  tp: 1\n  pp: 2\n  dp: 4\n  schedule: 1f1b\n  sequence_parallel: false\n"
        "  zero_stage: {}\n",
        zero);
  };
  const auto gpu_gpu = [](const ExperimentResult& r) {
    double bytes = 0;
    for (const auto& l : r.links) {
      if (l.link_class == "gpu-gpu") bytes += l.bytes;
    }
    return bytes;
  };
  const ExperimentSpec one = load_experiment(experiment("fsdp-zero1", spec(1), 4), {});
  const ExperimentSpec two = load_experiment(experiment("fsdp-zero2", spec(2), 4), {});
  const std::string graph = dump_task_graph(two, false);
  // The task graph's bytes of rank 0's bf16 parameters (2P) and of its whole gradient buffer (4P).
  const auto bytes_of = [&](const std::string& task) {
    const std::size_t at = graph.find("bytes=", graph.find(" " + task + " "));
    return std::stoll(graph.substr(at + 6));
  };
  const std::int64_t P = bytes_of("r0.alloc.parameters") / 2;
  const std::int64_t q = (P + 3) / 4;
  EXPECT_EQ(bytes_of("r0.B0.mb0.alloc.gradients"), 4 * P);
  // One reduce-scatter and one all-gather per stage (two sizes of rank), named dp.<what>.<P>.
  const auto collectives = [&](const std::string& what) {
    std::set<std::string> names;
    for (std::size_t at = graph.find(" dp." + what + "."); at != std::string::npos;
         at = graph.find(" dp." + what + ".", at + 1)) {
      const std::size_t size = at + 5 + what.size();
      names.insert(graph.substr(size, graph.find('.', size) - size));
    }
    return names.size();
  };
  EXPECT_EQ(collectives("gradients"), 2U);
  EXPECT_EQ(collectives("parameters"), 2U);
  const ExperimentResult r1 = run_experiment(one);
  const ExperimentResult r2 = run_experiment(two);
  EXPECT_EQ(r1.model_states_per_device.count, 6 * P + 12 * q);
  EXPECT_EQ(r2.model_states_per_device.count, 2 * P + 16 * q);
  EXPECT_EQ(r2.peak_bytes("hbm") - r1.peak_bytes("hbm"), 4 * q);
  EXPECT_DOUBLE_EQ(gpu_gpu(r2), gpu_gpu(r1));
  // Interleaved (v = 2): rank 0's first backward is its last chunk's (virtual stage 2), which
  // allocates the whole buffer of both chunks (the same P: 24 + 24 layers and the embedding).
  const std::string interleaved = dump_task_graph(
      load_experiment(experiment("fsdp-interleaved",
                                 "  kind: megatron\n  tp: 1\n  pp: 2\n  dp: 4\n  schedule: interleaved\n"
                                 "  virtual_stages: 2\n  sequence_parallel: false\n  zero_stage: 2\n",
                                 4),
                      {}),
      false);
  const std::size_t first = interleaved.find(" r0.B2.mb0.alloc.gradients ");
  ASSERT_NE(first, std::string::npos);
  EXPECT_EQ(std::stoll(interleaved.substr(interleaved.find("bytes=", first) + 6)), 4 * P);
  EXPECT_EQ(interleaved.find(" r0.B0.mb0.alloc.gradients "), std::string::npos);
}

TEST(Megatron, TensorParallelismAddsItsAllReduces) {
  // tp = 8 on one node: each layer's compute shrinks about 8x and four all-reduces of b s h bf16
  // per layer and micro-batch appear (forward two, backward four with full recomputation):
  // the iteration is longer than 1/8 of one GCD's, shorter than one GCD's.
  const std::string tp8 =
      "  kind: megatron\n  tp: 8\n  pp: 1\n  dp: 1\n  schedule: 1f1b\n  sequence_parallel: true\n  zero_stage: 0\n";
  const ExperimentResult r = run_experiment(load_experiment(experiment("tp8", tp8, 1), {}));
  const double one = seconds(experiment("tp1", megatron(1, "  schedule: 1f1b\n"), 1));
  EXPECT_GT(r.iteration_time.seconds(), one / 8);
  EXPECT_LT(r.iteration_time.seconds(), one / 2);
  bool moved = false;
  for (const auto& l : r.links) moved = moved || (l.link_class == "gpu-gpu" && l.bytes > 0);
  EXPECT_TRUE(moved);
}

}  // namespace
}  // namespace offsim::models

namespace offsim::models {
namespace {

// GPT-3 1.3B with Megatron on two Frontier nodes: tp x pp ranks per replica, 2 replicas with
// ZeRO-1 across them, `micro_batches` per replica; `extra` adds strategy keys (the schedule).
std::string two_node_megatron(const std::string& name, int tp, int pp, int micro_batches, const std::string& extra) {
  const fs::path file = testing::scratch_folder("offsim-megatron-test") / (name + ".yaml");
  std::ofstream(file) << fmt::format(
      "name: {0}\n"
      "hardware: !include {1}/configs/hardware/frontier.yaml\n"
      "set: [\"hardware.nodes=2\"]\n"
      "calibration:\n"
      "  device: !include {1}/configs/calibration/mi250x-gcd.yaml\n"
      "  collectives: !include {1}/configs/calibration/frontier-rccl-multinode.yaml\n"
      "model: !include {1}/configs/models/gpt3-1.3b.yaml\n"
      "training: {{micro_batch: 1, grad_accum: {4}, precision: bf16, recompute: full, flash_attention: true}}\n"
      "strategy:\n"
      "  kind: megatron\n  tp: {2}\n  pp: {3}\n  dp: 2\n  sequence_parallel: false\n"
      "  zero_stage: 1\n  devices_per_node: [gcd0, gcd1, gcd3, gcd2, gcd4, gcd5, gcd7, gcd6]\n{5}",
      name, OFFSIM_SOURCE_DIR, tp, pp, micro_batches, extra);
  return file.string();
}

TEST(Megatron, OneReplicaStandsForAll) {
  // tp 4 x pp 2 = one node per replica, 2 replicas (ZeRO-1 across them): simulating replica 0
  // with the other's traffic mirrored gives the time of simulating both.
  const auto write = [](const std::string& name, const std::string& extra) {
    return two_node_megatron(name, 4, 2, 4, "  schedule: 1f1b\n" + extra);
  };
  const ExperimentResult one = run_experiment(load_experiment(write("replica", ""), {}));
  const ExperimentResult all = run_experiment(load_experiment(write("replicas", "  simulate: all_ranks\n"), {}));
  EXPECT_EQ(one.simulated_ranks, 8u);
  EXPECT_EQ(all.simulated_ranks, 16u);
  EXPECT_NEAR(one.iteration_time.seconds(), all.iteration_time.seconds(), 1e-9 * all.iteration_time.seconds());
}

TEST(Megatron, TensorParallelClassesMatchEveryRank) {
  // With analytic collectives, TP rank 0 of each group stands for its group (megatron.cpp,
  // tensor_parallel_classes): against simulating all 16 ranks, the iteration, every phase, the
  // bytes on every link class (of the simulated replica's node) and its peak rate agree. Cases: stages sharing a node
  // (point-to-point over Infinity Fabric), stages across the two nodes (point-to-point through NICs two TP ranks
  // share), and one stage per node with the DP traffic of all eight TP ranks on the NICs.
  struct Case {
    const char* name;
    int tp, pp;
    std::size_t simulated;
  };
  const std::string analytic = "  schedule: 1f1b\n  collectives: {fidelity: analytic, channels: 4}\n";
  for (const Case& c :
       {Case{"classes-tp4-pp2", 4, 2, 2}, Case{"classes-tp2-pp4", 2, 4, 4}, Case{"classes-tp8-pp1", 8, 1, 1}}) {
    SCOPED_TRACE(c.name);
    const ExperimentResult classes =
        run_experiment(load_experiment(two_node_megatron(c.name, c.tp, c.pp, 4, analytic), {}));
    const ExperimentResult every = run_experiment(load_experiment(
        two_node_megatron(std::string(c.name) + "-all", c.tp, c.pp, 4, analytic + "  simulate: all_ranks\n"), {}));
    EXPECT_EQ(classes.simulated_ranks, c.simulated);
    EXPECT_EQ(every.simulated_ranks, 16u);
    const double t = every.iteration_time.seconds();
    EXPECT_NEAR(classes.iteration_time.seconds(), t, 1e-9 * t);
    ASSERT_EQ(classes.phases.size(), every.phases.size());
    for (std::size_t i = 0; i < every.phases.size(); ++i) {
      EXPECT_EQ(classes.phases[i].phase, every.phases[i].phase);
      EXPECT_NEAR(classes.phases[i].time.seconds(), every.phases[i].time.seconds(), 1e-9 * t);
    }
    ASSERT_EQ(classes.links.size(), every.links.size());
    for (std::size_t i = 0; i < every.links.size(); ++i) {
      SCOPED_TRACE(every.links[i].link_class);
      EXPECT_EQ(classes.links[i].link_class, every.links[i].link_class);
      // Link bytes are those of the links simulated: one of the two replicas' nodes (rank symmetry).
      const double simulated_share = static_cast<double>(c.simulated * c.tp) / 16.0;
      EXPECT_NEAR(classes.links[i].bytes, every.links[i].bytes * simulated_share, 1e-9 * every.links[i].bytes);
      EXPECT_NEAR(classes.links[i].peak_bytes_per_s, every.links[i].peak_bytes_per_s,
                  1e-9 * every.links[i].peak_bytes_per_s);
    }
  }
}

TEST(Megatron, SteadyStateExtrapolationEqualsEveryMicroBatch) {
  // Past the warm-up a schedule repeats every pp micro-batches, so with m > 3 pp the iteration is
  // simulated at pp and 2 pp micro-batches and extrapolated (models/experiment/run.cpp). Against
  // simulating all m: 1F1B with m not a multiple of pp, and interleaved, both with flow-level
  // collectives crossing two nodes (TP inside a node, ZeRO-1 across replicas).
  struct Case {
    const char* name;
    int tp, pp, m;
    const char* schedule;
  };
  for (const Case& c : {Case{"steady-1f1b", 4, 2, 9, "  schedule: 1f1b\n"},
                        Case{"steady-interleaved", 2, 4, 16, "  schedule: interleaved\n  virtual_stages: 2\n"}}) {
    SCOPED_TRACE(c.name);
    const ExperimentResult steady =
        run_experiment(load_experiment(two_node_megatron(c.name, c.tp, c.pp, c.m, c.schedule), {}));
    const ExperimentResult every =
        run_experiment(load_experiment(two_node_megatron(std::string(c.name) + "-all", c.tp, c.pp, c.m,
                                                         std::string(c.schedule) + "  simulate_micro_batches: all\n"),
                                       {}));
    const double t = every.iteration_time.seconds();
    EXPECT_LT(steady.tasks, every.tasks);
    EXPECT_NEAR(steady.iteration_time.seconds(), t, 1e-9 * t);
    EXPECT_NEAR(steady.tflops_per_device, every.tflops_per_device, 1e-9 * every.tflops_per_device);
    EXPECT_NEAR(steady.tokens_per_s, every.tokens_per_s, 1e-9 * every.tokens_per_s);
    ASSERT_EQ(steady.phases.size(), every.phases.size());
    for (std::size_t i = 0; i < every.phases.size(); ++i) {
      EXPECT_EQ(steady.phases[i].phase, every.phases[i].phase);
      EXPECT_NEAR(steady.phases[i].time.seconds(), every.phases[i].time.seconds(), 1e-9 * t) << every.phases[i].phase;
    }
    ASSERT_EQ(steady.links.size(), every.links.size());
    for (std::size_t i = 0; i < every.links.size(); ++i) {
      EXPECT_NEAR(steady.links[i].bytes, every.links[i].bytes, 1e-9 * every.links[i].bytes + 1.0);
      EXPECT_NEAR(steady.links[i].busiest_link_busy.seconds(), every.links[i].busiest_link_busy.seconds(), 1e-9 * t);
    }
    ASSERT_EQ(steady.memory.size(), every.memory.size());
    for (std::size_t i = 0; i < every.memory.size(); ++i) EXPECT_EQ(steady.memory[i].peak, every.memory[i].peak);
  }
}

}  // namespace
}  // namespace offsim::models

namespace offsim::models {
namespace {

TEST(Megatron, UnevenStagesFollowTheSlowestStage) {
  // 96 layers over pp 4 with 12 on the first and the last stage: the middle stages take 36. In
  // 1F1B the steady state runs at the slowest stage's pace. With u the forward + backward of one
  // layer for one micro-batch and the even pipeline's (m + p - 1) x 24 u: a middle stage is busy
  // 36 m u and waits at least the first stage's 12 u around it (a lower bound, 36 m + 12), and no
  // 1F1B schedule takes longer than every micro-batch through all stages plus (m - 1) slowest
  // stages (96 + (m - 1) x 36). The embedding and head (a third of a layer) are the tolerance.
  const int m = 8;
  const std::string even = megatron(4, "  schedule: 1f1b\n");
  const std::string uneven = megatron(4, "  schedule: 1f1b\n  first_stage_layers: 12\n  last_stage_layers: 12\n");
  const ExperimentResult e = run_experiment(load_experiment(experiment("even4", even, m), {}));
  const ExperimentResult u = run_experiment(load_experiment(experiment("uneven4", uneven, m), {}));
  const auto pipeline = [](const ExperimentResult& r) {
    return r.phase_seconds("forward") + r.phase_seconds("backward") + r.phase_seconds("pipeline_bubble");
  };
  const double even_u = (m + 4 - 1) * 24.0;
  EXPECT_GT(pipeline(u) / pipeline(e), (36.0 * m + 12.0) / even_u - 0.02);
  EXPECT_LT(pipeline(u) / pipeline(e), (96.0 + (m - 1) * 36.0) / even_u + 0.02);
  // Parameters of stage 0 (the reported model states): 12 layers and the embedding instead of 24.
  const ParameterCounts p = count_parameters(load_experiment(experiment("even4", even, m), {}).model);
  const double ratio = static_cast<double>(12 * p.per_layer + p.embedding + p.position) /
                       static_cast<double>(24 * p.per_layer + p.embedding + p.position);
  EXPECT_NEAR(
      static_cast<double>(u.model_states_per_device.count) / static_cast<double>(e.model_states_per_device.count),
      ratio, 1e-6);
}

// Megatron-LM fuses scale, mask and softmax unless told not to (--no-masked-softmax-fusion): a
// megatron strategy without flash attention takes the fused softmax by default and names it;
// training.fused_softmax: false opts out; a data_parallel run keeps PyTorch's separate kernels.
TEST(Megatron, FusedSoftmaxIsTheDefaultWithoutFlashAttention) {
  const std::string pp2 = std::string(OFFSIM_SOURCE_DIR) + "/tests/data/tiny-megatron-pp2.yaml";
  const ExperimentSpec fused = load_experiment(pp2, {});
  EXPECT_TRUE(fused.training.fused_softmax);
  EXPECT_NE(std::find(fused.defaults_applied.begin(), fused.defaults_applied.end(),
                      "training.fused_softmax=true (Megatron-LM's masked_softmax_fusion)"),
            fused.defaults_applied.end());
  const ExperimentSpec separate = load_experiment(pp2, {"training.fused_softmax=false"});
  EXPECT_FALSE(separate.training.fused_softmax);
  // The fused kernel reads and writes the scores once (the separate kernels several times).
  EXPECT_LT(run_experiment(fused).iteration_time.ps, run_experiment(separate).iteration_time.ps);
  const ExperimentSpec flash = load_experiment(pp2, {"training.flash_attention=true"});
  EXPECT_FALSE(flash.training.fused_softmax);
  const ExperimentSpec dp =
      load_experiment(std::string(OFFSIM_SOURCE_DIR) + "/tests/data/tiny-dp2.yaml", {"training.flash_attention=false"});
  EXPECT_FALSE(dp.training.fused_softmax);
}

}  // namespace
}  // namespace offsim::models

namespace offsim::models {
namespace {

TEST(Megatron, DeepSpeedsPipelineEngineIsNamedFirstAsUnmeasured) {
  // Megatron-DeepSpeed with PP > 1 runs DeepSpeed's pipeline engine (deepspeed_pipeline.hpp), whose
  // per-micro-batch host costs no source measures: the report's first approximation says so.
  // Megatron's own optimizer, or no pipeline, does not.
  const auto notes = [](const std::string& name, int pp, const std::string& optimizer) {
    return run_experiment(load_experiment(experiment(name, megatron(pp, "  schedule: 1f1b\n" + optimizer), 4), {}))
        .approximations;
  };
  const auto engine = notes("ds-pp2", 2, "  optimizer: deepspeed\n");
  ASSERT_FALSE(engine.empty());
  EXPECT_TRUE(
      engine[0].starts_with("largest uncertainty of Megatron-DeepSpeed's pipeline, not measured: "
                            "DeepSpeed's pipeline engine"))
      << engine[0];
  const auto mentions_engine = [](const std::vector<std::string>& v) {
    return std::any_of(v.begin(), v.end(),
                       [](const std::string& a) { return a.find("DeepSpeed's pipeline engine") != std::string::npos; });
  };
  EXPECT_FALSE(mentions_engine(notes("megatron-pp2", 2, "")));
  EXPECT_FALSE(mentions_engine(notes("ds-pp1", 1, "  optimizer: deepspeed\n")));
}

}  // namespace
}  // namespace offsim::models

namespace offsim::models {
namespace {

// GPT-3 1.3B (24 layers) on one Frontier node, tp 2 x dp 2 with Megatron's distributed optimizer
// (zero_stage 1): the TP pairs inside an MI250X package, the DP pairs across packages. `extra`
// adds the overlap keys.
std::string overlapped_ddp(const std::string& name, const std::string& extra, int pp = 1) {
  const fs::path file = testing::scratch_folder("offsim-megatron-test") / (name + ".yaml");
  std::ofstream(file) << fmt::format(
      "name: {0}\n"
      "hardware: !include {1}/configs/hardware/frontier-node.yaml\n"
      "calibration:\n"
      "  device: !include {1}/configs/calibration/mi250x-gcd.yaml\n"
      "  collectives: !include {1}/configs/calibration/frontier-rccl.yaml\n"
      "model: !include {1}/configs/models/gpt3-1.3b.yaml\n"
      "training: {{micro_batch: 1, grad_accum: 2, precision: bf16, recompute: full, flash_attention: true}}\n"
      "strategy:\n"
      "  kind: megatron\n  tp: 2\n  pp: {3}\n  dp: 2\n  sequence_parallel: false\n"
      "  zero_stage: 1\n{2}",
      name, OFFSIM_SOURCE_DIR, extra, pp);
  return file.string();
}

double phase_seconds_of(const ExperimentResult& r, const char* name) {
  double t = 0.0;
  for (const auto& ph : r.phases) {
    if (ph.phase == name) t += ph.time.seconds();
  }
  return t;
}

TEST(Megatron, OverlappedDistributedOptimizerHidesAllButTheEdgeBuckets) {
  // Megatron-Core's overlapped DDP (phases/pipeline_data_parallel.hpp). Without overlap the
  // iteration is T = m (F + B) + R + A + G: the gradients' reduce-scatter R after the last
  // backward, Adam A, the parameters' all-gather G after it.
  // (1) One bucket (bucket_size above the rank's P parameters): its reduction can only start when
  //     its last gradient exists, after the last backward, and the first forward waits for the
  //     whole gather: T is unchanged.
  // (2) One bucket per layer (bucket_size 1; the first pipeline stage's first chunk is bucketed):
  //     each layer's reduce-scatter runs under the backward of the layers before it, each layer's
  //     gather under the forward of the layers after it, as long as a layer's collective is shorter
  //     than its compute (here a layer's fp32 reduce-scatter over Infinity Fabric takes less than
  //     its backward with recomputation). Exposed stay the last bucket's reduction and the first
  //     bucket's gather: the first layer's parameters with the embedding's, a share
  //     f = (L_0 + E) / P of the rank's, so with collectives linear in their bytes
  //     T' = T - (1 - f) (R + G).
  const ExperimentResult plain = run_experiment(load_experiment(overlapped_ddp("ddp-plain", ""), {}));
  const std::string both = "  overlap_grad_reduce: true\n  overlap_param_gather: true\n";
  const ExperimentResult one_bucket =
      run_experiment(load_experiment(overlapped_ddp("ddp-one-bucket", both + "  bucket_size: 100000000000\n"), {}));
  const ExperimentResult per_layer =
      run_experiment(load_experiment(overlapped_ddp("ddp-per-layer", both + "  bucket_size: 1\n"), {}));
  const double t = plain.iteration_time.seconds();
  EXPECT_NEAR(one_bucket.iteration_time.seconds(), t, 1e-9 * t);

  const double R = phase_seconds_of(plain, "gradient_reduction");
  const double G = phase_seconds_of(plain, "parameter_allgather");
  ASSERT_GT(R, 0.0);
  ASSERT_GT(G, 0.0);
  // GPT-3 1.3B: h 2048, 24 layers, vocabulary 50,257, 2,048 positions; per TP rank a layer's
  // 12 h^2 + 13 h parameters and the embedding's (V + s) h over tp 2.
  const double h = 2048;
  const double layer = (12 * h * h + 13 * h) / 2;
  const double embedding = (50257 + 2048) * h / 2;
  const double P = static_cast<double>(plain.model_states_per_device.count) / 12;  // 2 + 4 + 12/2 B each
  const double f = (layer + embedding) / P;
  const double expected = t - (1 - f) * (R + G);
  EXPECT_NEAR(per_layer.iteration_time.seconds(), expected, 0.1 * f * (R + G));
  // The exposed reduction is the last bucket's; no all-gather is left after the step.
  EXPECT_NEAR(phase_seconds_of(per_layer, "gradient_reduction"), f * R, 0.1 * f * R);
  EXPECT_EQ(phase_seconds_of(per_layer, "parameter_allgather"), 0.0);
}

TEST(Megatron, UnalignedParameterGathersWaitForEachStagesFirstForward) {
  // tp 2 x pp 2 x dp 2 on the node's 8 GCDs, m = 2, one bucket per stage. 1F1B's critical path
  // is G_0, F(s0), F(s1), B(s1), F(s1), B(s1), B(s0), then the step on stage 0 (its reduction, Adam, and
  // without overlap its gather G_0).
  // (1) align_param_gather: both stages gather at the iteration's start; stage 1's gather is hidden
  //     under stage 0's first forward, stage 0's moves from the end to the start: T = T_plain.
  // (2) Unaligned (Megatron-Core's default): stage 1 issues its gather only in its first forward's
  //     pre-hook, on the critical path: T grows by stage 1's gather G_1 (its DP pairs cross other
  //     Infinity Fabric links than stage 0's, so G_1 is not G_0 scaled; bounded here by G_0 scaled
  //     by the stages' parameters, stage 1 holding fewer: 12 layers and the final norm against 12
  //     layers and the tied embedding).
  const std::string overlap =
      "  overlap_grad_reduce: true\n  overlap_param_gather: true\n  bucket_size: 100000000000\n";
  const ExperimentResult plain = run_experiment(load_experiment(overlapped_ddp("ddp-pp2-plain", "", 2), {}));
  const ExperimentResult aligned = run_experiment(
      load_experiment(overlapped_ddp("ddp-pp2-aligned", overlap + "  align_param_gather: true\n", 2), {}));
  const ExperimentResult unaligned =
      run_experiment(load_experiment(overlapped_ddp("ddp-pp2-unaligned", overlap, 2), {}));
  const double t = plain.iteration_time.seconds();
  EXPECT_NEAR(aligned.iteration_time.seconds(), t, 1e-9 * t);
  // Stage 0's gather moved into its first forward.
  EXPECT_NEAR(phase_seconds_of(aligned, "forward") - phase_seconds_of(plain, "forward"),
              phase_seconds_of(plain, "parameter_allgather"), 1e-9 * t);
  const double h = 2048;
  const double layer = 12 * h * h + 13 * h;
  const double p0 = 12 * layer + (50257 + 2048) * h;
  const double p1 = 12 * layer + 2 * h;
  const double g1_bound = phase_seconds_of(plain, "parameter_allgather") * p1 / p0;
  const double grown = unaligned.iteration_time.seconds() - t;
  EXPECT_GT(grown, 0.25 * g1_bound);
  EXPECT_LE(grown, g1_bound);
}

TEST(Megatron, OverlapWithAChunkWithoutLayers) {
  // tp 2 x pp 2 x dp 2, interleaved over 2 chunks with first_stage_layers 1: stage 0's second chunk
  // holds no layer (its gradients are one empty piece). Overlapping only hides communication: the
  // iteration is no longer than without, and the gradients still all reach the optimizer (the
  // same bytes on the links).
  const std::string split = "  schedule: interleaved\n  virtual_stages: 2\n  first_stage_layers: 1\n";
  const std::string overlap = "  overlap_grad_reduce: true\n  overlap_param_gather: true\n  align_param_gather: true\n";
  const ExperimentResult plain = run_experiment(load_experiment(overlapped_ddp("ddp-empty-chunk", split, 2), {}));
  const ExperimentResult overlapped =
      run_experiment(load_experiment(overlapped_ddp("ddp-empty-chunk-overlap", split + overlap, 2), {}));
  EXPECT_LE(overlapped.iteration_time.seconds(), plain.iteration_time.seconds());
  ASSERT_EQ(overlapped.links.size(), plain.links.size());
  for (std::size_t i = 0; i < plain.links.size(); ++i) {
    EXPECT_NEAR(overlapped.links[i].bytes, plain.links[i].bytes, 1e-6 * plain.links[i].bytes + 1.0);
  }
}

}  // namespace
}  // namespace offsim::models
