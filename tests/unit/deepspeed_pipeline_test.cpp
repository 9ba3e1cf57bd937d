// DeepSpeed's pipeline engine (models/strategies/deepspeed_pipeline.hpp): TrainSchedule's
// instruction order, its blocking send/recv against closed forms derived by hand, and where it
// differs from Megatron's 1F1B through the whole builder.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "models/experiment.hpp"
#include "models/strategies/deepspeed_pipeline.hpp"
#include "sim/exec/executor.hpp"
#include "tests/unit/source_paths.hpp"

namespace offsim::models {
namespace {

using Kind = PipeInstruction::Kind;

TEST(DeepSpeedPipeline, InstructionsFollowTrainSchedule) {
  // schedule.py's TrainSchedule(micro_batches=2, stages=2) expanded by hand over its
  // 2 (m + p - 1) = 6 steps. Stage 0: forwards on even steps (micro-batch step / 2), backwards on
  // odd ones (micro-batch (step - 1) / 2 - 1); a backward step first receives the gradient, then
  // sends the previous step's forward output. Stage 1 (the last): forwards on odd steps, a forward
  // step first sends the previous step's input gradient, then receives the activation.
  const std::vector<PipeInstruction> stage0{{Kind::kForward, 0},  {Kind::kSendActivation, 0}, {Kind::kForward, 1},
                                            {Kind::kRecvGrad, 0}, {Kind::kSendActivation, 1}, {Kind::kBackward, 0},
                                            {Kind::kRecvGrad, 1}, {Kind::kBackward, 1}};
  const std::vector<PipeInstruction> stage1{
      {Kind::kRecvActivation, 0}, {Kind::kForward, 0}, {Kind::kBackward, 0}, {Kind::kSendGrad, 0},
      {Kind::kRecvActivation, 1}, {Kind::kForward, 1}, {Kind::kBackward, 1}, {Kind::kSendGrad, 1}};
  EXPECT_EQ(deepspeed_train_schedule(2, 0, 2), stage0);
  EXPECT_EQ(deepspeed_train_schedule(2, 1, 2), stage1);
}

TEST(DeepSpeedPipeline, ComputeOrderIsOneFOneBAndEverySendMeetsItsRecv) {
  // Stage s runs forward k at step 2k + s and backward k at step 2k + 2p - 1 - s: p - s forwards
  // before the first backward, then alternating, Megatron's 1F1B order. Each pair of neighbours
  // posts its sends and recvs of a direction in the same micro-batch order (no deadlock).
  for (int p = 2; p <= 4; ++p) {
    for (int m = 1; m <= 6; ++m) {
      std::vector<std::vector<PipeInstruction>> program(p);
      for (int s = 0; s < p; ++s) program[s] = deepspeed_train_schedule(p, s, m);
      for (int s = 0; s < p; ++s) {
        std::vector<PipeInstruction> compute;
        for (const auto& i : program[s])
          if (i.compute()) compute.push_back(i);
        std::vector<PipeInstruction> expected;
        int f = 0;
        int b = 0;
        for (; f < std::min(p - s, m); ++f) expected.push_back({Kind::kForward, f});
        while (b < m) {
          expected.push_back({Kind::kBackward, b++});
          if (f < m) expected.push_back({Kind::kForward, f++});
        }
        EXPECT_EQ(compute, expected) << "p " << p << " m " << m << " stage " << s;
      }
      for (int s = 0; s + 1 < p; ++s) {
        const auto of = [](const std::vector<PipeInstruction>& v, Kind k) {
          std::vector<int> mbs;
          for (const auto& i : v)
            if (i.kind == k) mbs.push_back(i.micro_batch);
          return mbs;
        };
        EXPECT_EQ(of(program[s], Kind::kSendActivation), of(program[s + 1], Kind::kRecvActivation));
        EXPECT_EQ(of(program[s + 1], Kind::kSendGrad), of(program[s], Kind::kRecvGrad));
        EXPECT_EQ(static_cast<int>(of(program[s], Kind::kSendActivation).size()), m);
      }
    }
  }
}

// p stages, one GPU each, links both ways between neighbours at 1e12 B/s; every forward F ps,
// every backward B ps, every transfer c ps (c bytes), run through the executor.
std::int64_t pipeline_ps(int p, int m, std::int64_t F, std::int64_t B, std::int64_t c) {
  sim::Platform platform;
  std::vector<std::uint32_t> unit;
  for (int s = 0; s < p; ++s) unit.push_back(platform.add_unit({fmt::format("gpu{}", s), 1}));
  std::vector<sim::ConstraintId> up, down;  // s -> s + 1, s + 1 -> s
  for (int s = 0; s + 1 < p; ++s) {
    up.push_back(platform.add_constraint({fmt::format("gpu{}->gpu{}", s, s + 1), sim::Bandwidth{1e12}, "gpu-gpu", "",
                                          fmt::format("gpu{}", s), fmt::format("gpu{}", s + 1)}));
    down.push_back(platform.add_constraint({fmt::format("gpu{}->gpu{}", s + 1, s), sim::Bandwidth{1e12}, "gpu-gpu", "",
                                            fmt::format("gpu{}", s + 1), fmt::format("gpu{}", s)}));
  }
  sim::TaskGraph g;
  BlockingPointToPoint p2p(g);
  for (int s = 0; s < p; ++s) {
    sim::TaskId previous = g.add(fmt::format("r{}.start", s), "setup", sim::BarrierTask{});
    for (const PipeInstruction& i : deepspeed_train_schedule(p, s, m)) {
      if (i.compute()) {
        previous =
            g.add(fmt::format("r{}.{}{}", s, i.forward() ? "F" : "B", i.micro_batch), "compute",
                  sim::ComputeTask{unit[s], sim::TimePs{i.forward() ? F : B}, {}, sim::Bytes{0}, "gemm"}, {previous});
        continue;
      }
      const int peer = i.with_next_stage() ? s + 1 : s - 1;
      const BlockingPointToPoint::Message message{i.carries_activation(), i.micro_batch, i.sends() ? s : peer,
                                                  i.sends() ? peer : s, i.sends() ? s : peer};
      previous = p2p.post(fmt::format("r{}", s), message, i.sends(), previous);
    }
  }
  p2p.connect(
      [&](const BlockingPointToPoint::Message& msg) {
        const auto link = msg.to > msg.from ? up[msg.from] : down[msg.to];
        return sim::TransferTask{{link}, sim::Bytes{c}, sim::TimePs{0}, {}, {}};
      },
      "communication");
  return sim::execute(platform, g).makespan.ps;
}

TEST(DeepSpeedPipeline, TwoStagesFollowTheClosedForm) {
  // p = 2 (F, B, c as in pipeline_ps, c < F <= B). Each step's transfers come before its compute
  // and both ranks wait for them (a rendezvous), a step's two transfers one after the other.
  //   step 0: stage 0 F(0)                                      -> stage 0 at F
  //   step 1: act 0 (c); stage 1 F(0)                            -> both at F + c, stage 1 at 2F + c
  //   step 2: stage 0 F(1) (to 2F + c); stage 1 B(0)             -> stage 1 at 2F + B + c
  //   step 2j + 1 (1 <= j <= m - 1): grad j - 1 then act j (2c), from the later rank (stage 1):
  //           then stage 0 B(j - 1), F(j + 1) and stage 1 F(j), B(j): both take F + B, so each such
  //           step starts F + B + 2c after the one before: (j + 1) F + j B + (2j - 1) c
  //   step 2m + 1: grad m - 1 (c) after stage 1's F(m - 1), B(m - 1); stage 0 B(m - 1)
  // iteration = (m + 1)(F + B) + 2 m c.
  const std::int64_t F = 1000, B = 3000, c = 250;
  for (int m = 1; m <= 6; ++m) EXPECT_EQ(pipeline_ps(2, m, F, B, c), (m + 1) * (F + B) + 2 * m * c) << m;
}

TEST(DeepSpeedPipeline, MiddleStagesPayFourTransfersPerMicroBatch) {
  // p = 3, m = 2 by hand (c <= F <= B), times of each rank's program:
  //   stage 0 F(0) [0, F]; act0 0->1 [F, F + c]; stage 1 F(0) to 2F + c; stage 0 F(1) to 2F + c
  //   act0 1->2 [2F + c, 2F + 2c]; stage 2 F(0), B(0) to 3F + B + 2c
  //   act1 0->1 [2F + 2c, 2F + 3c]; stage 1 F(1) to 3F + 3c
  //   grad0 2->1 [3F + B + 2c, +c]; act1 1->2 [+c, 3F + B + 4c]; stage 1 B(0) to 3F + 2B + 4c;
  //     stage 2 F(1), B(1) to 4F + 2B + 4c
  //   grad0 1->0 [3F + 2B + 4c, +c]; stage 0 B(0) to 3F + 3B + 5c
  //   grad1 2->1 [4F + 2B + 4c, +c]; stage 1 B(1) to 4F + 3B + 5c
  //   grad1 1->0 [4F + 3B + 5c, +c]; stage 0 B(1): iteration 4F + 4B + 6c.
  const std::int64_t F = 1000, B = 3000, c = 250;
  EXPECT_EQ(pipeline_ps(3, 2, F, B, c), 4 * (F + B) + 6 * c);
  // In the steady state a middle stage runs, per micro-batch, F, B and its four blocking transfers
  // (SendGrad, RecvActivation, RecvGrad, SendActivation) one after the other, and it is the
  // busiest rank: each micro-batch more adds F + B + 4c (p = 2: F + B + 2c, its ranks have one
  // neighbour). Megatron's 1F1B, whose transfers are data dependencies that overlap other work,
  // adds at most F + B + 2c.
  for (int p = 3; p <= 4; ++p) {
    for (int m = 2; m <= 5; ++m) {
      EXPECT_EQ(pipeline_ps(p, m + 1, F, B, c) - pipeline_ps(p, m, F, B, c), F + B + 4 * c) << p << " " << m;
    }
  }
}

// tiny-gpt's two layers on two stages, m = 2, on the synthetic two-GPU machine of tests/data with
// a 10 GB/s link (so that a transfer, 4096 B in 0.41 us, is shorter than a stage's forward, about
// 2.9 us: no two transfers of one direction overlap under either engine).
std::string tiny_pipeline(const std::string& name, const std::string& engine) {
  namespace fs = std::filesystem;
  const fs::path dir = testing::scratch_folder("offsim-ds-pipeline-test");
  const fs::path file = dir / (name + ".yaml");
  std::ofstream(dir / "machine.yaml")
      << "name: two-gpu-10gbs\nsource: \"synthetic, for tests\"\ndevices:\n"
         "  - {name: gpu, count: 2, kind: gpu, device_kind: test-gpu, memory: {kind: hbm, capacity: \"1 GB\", "
         "bandwidth: \"100 GB/s\"}}\n"
         "links:\n  - {between: [gpu0, gpu1], bandwidth: \"10 GB/s\", latency: \"0 s\", class: gpu-gpu}\n";
  std::ofstream(file) << fmt::format(
      "name: {0}\n"
      "hardware: !include machine.yaml\n"
      "calibration:\n"
      "  device: !include {1}/tests/data/test-gpu-costs.yaml\n"
      "  collectives: !include {1}/tests/data/test-collectives.yaml\n"
      "model: !include {1}/tests/data/tiny-gpt.yaml\n"
      "training: {{micro_batch: 1, grad_accum: 2, precision: bf16, recompute: none, flash_attention: false}}\n"
      "strategy: {{kind: megatron, tp: 1, pp: 2, dp: 1, schedule: 1f1b, sequence_parallel: false, zero_stage: 0, "
      "optimizer: deepspeed, pipeline_engine: {2}}}\n",
      name, OFFSIM_SOURCE_DIR, engine);
  return file.string();
}

TEST(DeepSpeedPipeline, DiffersFromMegatronsOneFOneBByItsSerialisedTransfers) {
  // p = 2, m = 2, stage times F0, B0 (embedding) and F1, B1 (the head), F1 + B1 >= F0, B0.
  // Megatron's 1F1B (a transfer starts when its producer ends, c each):
  //   F1(0) waits for act0 (F0 + c); B1(0) ends F0 + F1 + B1 + c; F1(1), B1(1) end F0 + 2(F1 + B1) + c;
  //   grad1 arrives c later and stage 0 runs B0(1): F0 + 2(F1 + B1) + B0 + 2c.
  // DeepSpeed's TrainSchedule: the step after B1(0) sends grad0 and then act1 (2c) before F1(1),
  //   and grad1 (c) after B1(1): F0 + 2(F1 + B1) + B0 + 4c.
  // The difference is 2c, c = 1 x 32 x 64 bf16 = 4096 B over the 10 GB/s link = 0.4096 us; the
  // optimizer step after the schedule is the same.
  const auto megatron = run_experiment(load_experiment(tiny_pipeline("megatron", "megatron"), {}));
  const auto deepspeed = run_experiment(load_experiment(tiny_pipeline("deepspeed", "deepspeed"), {}));
  const double c = 4096.0 / 10e9;
  EXPECT_NEAR(deepspeed.iteration_time.seconds() - megatron.iteration_time.seconds(), 2.0 * c, 1e-11);
  // With tied embeddings both engines all-reduce the embedding's gradient between the two stages
  // after the schedule (DeepSpeed's ReduceTiedGrads before its gradient reduction, Megatron's after
  // it; phases/tied_embedding.hpp): BF16_Optimizer's fp32 gradients, 128 x 64 x 4 B, as a two-rank
  // ring, two exchanges of half (16384 B, 1.6384 us each), in series with the rank that ends last
  // either way (dp = 1), so the difference stays 2c.
  const std::vector<std::string> tied{"model.tied_embeddings=true"};
  const auto megatron_tied = run_experiment(load_experiment(tiny_pipeline("megatron-tied", "megatron"), tied));
  const auto deepspeed_tied = run_experiment(load_experiment(tiny_pipeline("deepspeed-tied", "deepspeed"), tied));
  EXPECT_NEAR(deepspeed_tied.iteration_time.seconds() - megatron_tied.iteration_time.seconds(), 2.0 * c, 1e-11);
}

TEST(DeepSpeedPipeline, TheEngineIsTheDefaultUnderMegatronDeepSpeed) {
  // optimizer: deepspeed with pp > 1 takes DeepSpeed's engine, named among the defaults applied.
  namespace fs = std::filesystem;
  const std::string file = tiny_pipeline("default", "deepspeed");
  std::string text;
  {
    std::ifstream in(file);
    text.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  text.replace(text.find(", pipeline_engine: deepspeed"), std::string(", pipeline_engine: deepspeed").size(), "");
  std::ofstream(file) << text;
  const ExperimentSpec spec = load_experiment(file, {});
  EXPECT_EQ(std::get<MegatronSpec>(spec.strategy).pipeline_engine, MegatronSpec::PipelineEngine::kDeepSpeed);
  bool named = false;
  for (const auto& d : spec.defaults_applied) named = named || d.starts_with("strategy.pipeline_engine=deepspeed");
  EXPECT_TRUE(named);
  const ExperimentSpec own = load_experiment(file, {"strategy.optimizer=megatron"});
  EXPECT_EQ(std::get<MegatronSpec>(own.strategy).pipeline_engine, MegatronSpec::PipelineEngine::kMegatron);
  const ExperimentSpec framework =
      load_experiment(file, {"strategy.optimizer=megatron", "training.framework=deepspeed-megatron"});
  EXPECT_EQ(std::get<MegatronSpec>(framework.strategy).pipeline_engine, MegatronSpec::PipelineEngine::kDeepSpeed);
}

}  // namespace
}  // namespace offsim::models

namespace offsim::models {
namespace {

TEST(DeepSpeedPipeline, SteadyStateExtrapolationEqualsEveryMicroBatch) {
  // TrainSchedule adds the same work per micro-batch past the first (F + B + 2c at p = 2,
  // TwoStagesFollowTheClosedForm), so the run's extrapolation from 2 and 4 micro-batches to 9 is
  // the simulation of all 9.
  const std::string file = tiny_pipeline("steady", "deepspeed");
  const auto extrapolated = run_experiment(load_experiment(file, {"training.grad_accum=9"}));
  const auto every =
      run_experiment(load_experiment(file, {"training.grad_accum=9", "strategy.simulate_micro_batches=all"}));
  EXPECT_NEAR(extrapolated.iteration_time.seconds(), every.iteration_time.seconds(), 1e-11);
  bool noted = false;
  for (const auto& a : extrapolated.approximations) noted = noted || a.starts_with("pipeline steady state");
  EXPECT_TRUE(noted);
}

}  // namespace
}  // namespace offsim::models
