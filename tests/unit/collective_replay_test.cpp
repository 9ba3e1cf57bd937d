// Replayed flow-level collectives (models/strategies/phases/collective_replay.hpp): where the
// preconditions hold, an iteration with its TP all-reduces replayed gives every figure of the full
// simulation to the bit (iteration, phases, memory peaks, every link's bytes, busy time and peak
// rate) with far fewer tasks; where they fail, the full simulation runs. The checks themselves on
// small graphs and runs.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include <fmt/format.h>

#include "models/experiment.hpp"
#include "models/strategies/phases/collective_replay.hpp"
#include "tests/unit/source_paths.hpp"

namespace offsim::models {
namespace {

namespace fs = std::filesystem;

// GPT-3 1.3B with Megatron on DGX A100 nodes, flow-level collectives (the default).
std::string dgx_megatron(const std::string& name, int nodes, int tp, int pp, int dp, int micro_batches) {
  const fs::path file = testing::scratch_folder("offsim-collective-replay-test") / (name + ".yaml");
  std::ofstream(file) << fmt::format(
      "name: {0}\n"
      "hardware: !include {1}/configs/hardware/dgx-a100.yaml\n"
      "set: [\"hardware.nodes={2}\"]\n"
      "calibration:\n"
      "  device: !include {1}/configs/calibration/a100-80gb.yaml\n"
      "  collectives: !include {1}/configs/calibration/dgx-a100-nccl.yaml\n"
      "model: !include {1}/configs/models/gpt3-1.3b.yaml\n"
      "training: {{micro_batch: 1, grad_accum: {6}, precision: bf16, recompute: full, flash_attention: true}}\n"
      "strategy:\n"
      "  kind: megatron\n  tp: {3}\n  pp: {4}\n  dp: {5}\n  schedule: 1f1b\n  sequence_parallel: true\n"
      "  zero_stage: 1\n"
      "  devices_per_node: [gpu0, gpu1, gpu2, gpu3, gpu4, gpu5, gpu6, gpu7]\n",
      name, OFFSIM_SOURCE_DIR, nodes, tp, pp, dp, micro_batches);
  return file.string();
}

// Every figure of the two runs, exactly (the replay claims bit-identity, not closeness).
void expect_same_figures(const ExperimentResult& a, const ExperimentResult& b) {
  EXPECT_EQ(a.iteration_time, b.iteration_time);
  ASSERT_EQ(a.phases.size(), b.phases.size());
  for (std::size_t i = 0; i < a.phases.size(); ++i) {
    EXPECT_EQ(a.phases[i].phase, b.phases[i].phase);
    EXPECT_EQ(a.phases[i].time, b.phases[i].time) << a.phases[i].phase;
  }
  ASSERT_EQ(a.memory.size(), b.memory.size());
  for (std::size_t i = 0; i < a.memory.size(); ++i) {
    EXPECT_EQ(a.memory[i].peak, b.memory[i].peak);
    EXPECT_EQ(a.memory[i].fullest_pool, b.memory[i].fullest_pool);
  }
  ASSERT_EQ(a.link_stats.size(), b.link_stats.size());
  for (std::size_t i = 0; i < a.link_stats.size(); ++i) {
    SCOPED_TRACE(a.link_stats[i].name);
    EXPECT_EQ(a.link_stats[i].bytes, b.link_stats[i].bytes);
    EXPECT_EQ(a.link_stats[i].busy, b.link_stats[i].busy);
    EXPECT_EQ(a.link_stats[i].peak_bytes_per_s, b.link_stats[i].peak_bytes_per_s);
  }
  ASSERT_EQ(a.rank0_phases.size(), b.rank0_phases.size());
  for (std::size_t i = 0; i < a.rank0_phases.size(); ++i) {
    EXPECT_EQ(a.rank0_phases[i].begin, b.rank0_phases[i].begin);
    EXPECT_EQ(a.rank0_phases[i].end, b.rank0_phases[i].end);
  }
  EXPECT_EQ(a.tokens_per_s, b.tokens_per_s);
  EXPECT_EQ(a.mfu, b.mfu);
}

TEST(CollectiveReplay, TensorParallelAllReducesOnTheirOwnLinksReplayToTheBit) {
  // tp 8 inside each node (the ring on the NVSwitch links), pp 2 across two nodes (point-to-point
  // through PCIe and InfiniBand), dp 2 mirrored: each TP group's links carry its all-reduces only
  // and its members start every all-reduce together, so the replay holds.
  const ExperimentSpec spec = load_experiment(dgx_megatron("replay-tp8-pp2", 4, 8, 2, 2, 4), {});
  const ExperimentResult replayed = run_experiment(spec);
  const ExperimentResult full = run_experiment(spec, RunExperimentOptions{.replay_collectives = false});
  expect_same_figures(replayed, full);
  // Each all-reduce is 8 delays instead of its ring's 14 steps x 16 flows and barriers.
  EXPECT_LT(replayed.tasks * 5, full.tasks);
}

TEST(CollectiveReplay, MembersThatDoNotStartTogetherFallBackToTheFullSimulation) {
  // tp 16 over two nodes, pp 1, dp 1: the rings' links are their own (precondition 1 holds), but
  // a ring across two nodes is not symmetric: its members end an all-reduce at different instants
  // (those whose neighbour is across the InfiniBand link later), so the next all-reduce's members
  // do not start together. The run sees it (precondition 2) and simulates the iteration in full:
  // the same tasks and figures as without replays.
  const ExperimentSpec spec = load_experiment(dgx_megatron("replay-tp16", 2, 16, 1, 1, 1), {});
  const ExperimentResult replayed = run_experiment(spec);
  const ExperimentResult full = run_experiment(spec, RunExperimentOptions{.replay_collectives = false});
  EXPECT_EQ(replayed.tasks, full.tasks);
  expect_same_figures(replayed, full);
}

TEST(CollectiveReplay, SharedLinksFallBackToTheFullSimulation) {
  // tp 2 x pp 4 on one node: the point-to-point transfers between stages cross the same NVSwitch
  // links as the TP rings, so no replay is exact: the iteration is built in full (the same tasks).
  const ExperimentSpec spec = load_experiment(dgx_megatron("replay-tp2-pp4", 1, 2, 4, 1, 4), {});
  const ExperimentResult replayed = run_experiment(spec);
  const ExperimentResult full = run_experiment(spec, RunExperimentOptions{.replay_collectives = false});
  EXPECT_EQ(replayed.tasks, full.tasks);
  expect_same_figures(replayed, full);
}

TEST(CollectiveReplay, LinksMustBeTheReplaysAlone) {
  sim::TaskGraph g;
  ReplayedCollectives r;
  r.groups.push_back({{{sim::ConstraintId{1}, {}, sim::TimePs{0}, 0.0}}, {}});
  (void)g.add("other", "x", sim::TransferTask{{sim::ConstraintId{0}, sim::ConstraintId{2}}, sim::Bytes{1}, {}, {}, {}});
  EXPECT_TRUE(replay_links_exclusive(r, g));
  (void)g.add("accounted", "x", sim::TransferTask{{}, sim::Bytes{1}, {}, sim::Bandwidth{1.0}, {sim::ConstraintId{1}}});
  EXPECT_FALSE(replay_links_exclusive(r, g));  // an analytic transfer credited on the link
  sim::TaskGraph h;
  r.groups.push_back({{{sim::ConstraintId{1}, {}, sim::TimePs{0}, 0.0}}, {}, 1});
  EXPECT_FALSE(replay_links_exclusive(r, h));  // two owners' groups on one link
  r.groups.back().owner = 0;
  EXPECT_TRUE(replay_links_exclusive(r, h));  // two shapes of one owner (replays_held orders them)
}

TEST(CollectiveReplay, AnOwnersShapesMustNotOverlap) {
  // One owner, two recorded shapes on the same link (a TP group's layer all-reduce, then its norm
  // gradients' after the schedule): exact only when every replay of the later-recorded shape
  // starts after every replay of the earlier one ended.
  ReplayedCollectives r;
  r.groups.push_back({{{sim::ConstraintId{0}, {0.1}, sim::TimePs{5}, 3.0}}, {{sim::TaskId{0}}, {sim::TaskId{1}}}, 7});
  r.groups.push_back({{{sim::ConstraintId{0}, {0.3}, sim::TimePs{2}, 1.0}}, {{sim::TaskId{2}}}, 7});
  sim::RunResult run;
  const auto record = [](std::int64_t start, std::int64_t end) {
    return sim::TaskRecord{sim::TimePs{start}, sim::TimePs{start}, sim::TimePs{end}};
  };
  run.tasks = {record(10, 15), record(30, 35), record(35, 37)};
  run.constraints.resize(1);
  EXPECT_TRUE(replays_held(r, run));
  add_replayed_statistics(r, run);
  EXPECT_EQ(run.constraints[0].stats.bytes_carried, 0.1 + 0.1 + 0.3);  // the full run's order
  EXPECT_EQ(run.constraints[0].stats.busy_time, sim::TimePs{12});
  run.tasks[2] = record(34, 36);  // starts before the earlier shape's last replay ended
  EXPECT_FALSE(replays_held(r, run));
  r.groups[1].owner = 8;  // another owner's replays are not ordered against these
  EXPECT_TRUE(replays_held(r, run));
}

TEST(CollectiveReplay, MembersMustStartTogetherAndStatisticsAddPerReplay) {
  ReplayedCollectives r;
  r.groups.push_back({{{sim::ConstraintId{0}, {0.1, 0.2}, sim::TimePs{5}, 3.0}},
                      {{sim::TaskId{0}, sim::TaskId{1}}, {sim::TaskId{2}, sim::TaskId{3}}}});
  sim::RunResult run;
  const auto record = [](std::int64_t start, std::int64_t end) {
    return sim::TaskRecord{sim::TimePs{start}, sim::TimePs{start}, sim::TimePs{end}};
  };
  run.tasks = {record(10, 20), record(10, 20), record(30, 40), record(30, 40)};
  run.constraints.resize(1);
  EXPECT_TRUE(replays_held(r, run));
  add_replayed_statistics(r, run);
  // Two replays: ((((0 + 0.1) + 0.2) + 0.1) + 0.2), in that order.
  EXPECT_EQ(run.constraints[0].stats.bytes_carried, 0.1 + 0.2 + 0.1 + 0.2);
  EXPECT_EQ(run.constraints[0].stats.busy_time, sim::TimePs{10});
  EXPECT_EQ(run.constraints[0].stats.peak_bytes_per_s, 3.0);
  run.tasks[3].start = sim::TimePs{31};  // the second replay's members one picosecond apart
  EXPECT_FALSE(replays_held(r, run));
}

}  // namespace
}  // namespace offsim::models
