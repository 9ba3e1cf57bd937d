// offsim search (models/search.hpp): the space it enumerates, what it prunes before simulating,
// and the Pareto front it reports.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "models/search.hpp"
#include "models/strategies/layer_kernels.hpp"

namespace offsim::models {
namespace {

namespace fs = std::filesystem;
const std::string kTiny = std::string(OFFSIM_SOURCE_DIR) + "/tests/data/tiny-dp2.yaml";

TEST(Search, EnumeratesTheStrategiesThatDivideAndPrunesByModelStates) {
  // Tiny GPT (2 layers, 4 heads, P = 118,528) on the 2-GPU test node (no CPU: no offload), global
  // batch 2 sequences (the base: micro-batch 1 x 2 ranks), micro-batches {1, 2}:
  //   data_parallel: tp 1 (dp 2: micro-batch 1 only, ga 1) and tp 2 (dp 1: micro-batch 1, ga 2 or
  //     2, ga 1) for ZeRO 0-3: (1 + 2) x 4 = 12;
  //   megatron, pp in {1, 2}: tp 1 pp 1 (dp 2, mb 1), tp 1 pp 2 (dp 1, mb 1 or 2), tp 2 pp 1
  //     (dp 1, mb 1 or 2), for ZeRO 0-1: (1 + 2 + 2) x 2 = 10, and ZeRO-2 (FSDP2 under the
  //     pipeline) at pp 2 only: 2.
  // Skipped: the micro-batch 2 on dp 2 (data_parallel tp 1 x 4 stages, megatron tp1 pp1 x 2) and
  // tp 2 x pp 2 (4 GPUs) for megatron (2 micro-batches x ZeRO 0-2): 6 + 6 = 12.
  const ExperimentSpec base = load_experiment(kTiny, {});
  SearchSpace space;
  space.micro_batches = {1, 2};
  space.tp = {1, 2};
  SearchPlan plan = plan_search(base, space, {});
  EXPECT_EQ(plan.global_batch, 2);
  EXPECT_EQ(plan.simulated.size() + plan.pruned.size(), 24u);
  EXPECT_EQ(plan.invalid, 12u);
  EXPECT_TRUE(plan.pruned.empty());  // 16 B x P is 1.9 MB, the GPU holds 1 GB
  // A 1 MB limit: ZeRO-0 replicates 16 P = 1,896,448 B (pruned); ZeRO-3 over 2 ranks keeps 8 P.
  SearchLimits limits;
  limits.max_hbm_bytes = 1'000'000;
  plan = plan_search(base, space, limits);
  for (const auto& c : plan.pruned) EXPECT_GT(c.state_bytes_lower_bound, 1'000'000) << c.label();
  for (const auto& c : plan.simulated) EXPECT_LE(c.state_bytes_lower_bound, 1'000'000) << c.label();
  const auto is = [](const SearchCandidate& c, const char* kind, int tp, int zero) {
    return c.kind == kind && c.tp == tp && c.pp == 1 && c.zero_stage == zero;
  };
  EXPECT_TRUE(
      std::any_of(plan.pruned.begin(), plan.pruned.end(), [&](const auto& c) { return is(c, "data_parallel", 1, 0); }));
  EXPECT_TRUE(std::any_of(plan.simulated.begin(), plan.simulated.end(),
                          [&](const auto& c) { return is(c, "data_parallel", 1, 3); }));
  // Every simulated point runs: the sweep builds each from the base by its overrides.
  const fs::path dir = fs::temp_directory_path() / "offsim-search-test";
  fs::remove_all(dir);
  fs::create_directories(dir);
  SweepOptions run;
  run.out = dir / "search.csv";
  (void)run_sweep(search_sweep(kTiny, plan), run);
  std::ifstream csv(run.out);
  const auto results = read_search_results(plan, csv, run.out.string(), limits);
  ASSERT_EQ(results.size(), plan.simulated.size());
  for (const auto& r : results) EXPECT_EQ(r.status, "ok") << r.candidate.label() << ": " << r.reason;
  // Each point carries its iteration time's 80% interval, and the report says which of the
  // front's intervals overlap the fastest's.
  for (const auto& r : results) {
    EXPECT_GT(r.iteration_low_s, 0.0) << r.candidate.label();
    EXPECT_LE(r.iteration_low_s, r.iteration_high_s) << r.candidate.label();
  }
  auto all_fit = results;  // (the report's front, as if every point fit under the HBM limit)
  for (auto& r : all_fit) r.within_limits = true;
  const std::string text = search_report(plan, all_fit, limits);
  EXPECT_NE(text.find("80% interval"), std::string::npos) << text;
  EXPECT_TRUE(text.find("overlaps the fastest's 80% interval") != std::string::npos ||
              text.find("overlap the fastest's 80% interval") != std::string::npos)
      << text;
}

TEST(Search, MegatronZeroTwoIsSearchedOnlyWithPipelinesAndPrunedByItsWholeFp32Buffer) {
  // GPT-3 175B on 1,024 A100 (the scale experiment), megatron tp 8, micro-batch 1, pp in {1, 8}.
  // ZeRO-2 under Megatron is FSDP2 under the pipeline schedule: searched at pp 8, never at pp 1.
  // A rank of the fullest stage holds P = ceil((96 / pp x L + E) / 8) parameters (L a layer's, E the
  // larger of the embedding with positions and the final norm with the head); over g = dp =
  // 1024 / (8 pp) replicas, q = ceil(P / g), Megatron's defaults (fp32 main_grad and reduce) give:
  //   zero 0: 2P (bf16 parameters) + 4P (fp32 main_grad) + 12P (fp32 master, m, v) = 18P;
  //   zero 1: 2P + 4P + 12q (the distributed optimizer's share)                    = 6P + 12q;
  //   zero 2: 2P + 4q (fp32 gradient shard) + 12q + 4P (the whole fp32 buffer,
  //           held from the first backward to the one reduce-scatter)                = 6P + 16q.
  const ExperimentSpec base =
      load_experiment(std::string(OFFSIM_SOURCE_DIR) + "/configs/experiments/scale/gpt3-175b-a100-1024.yaml", {});
  SearchSpace space;
  space.kinds = {"megatron"};
  space.tp = {8};
  space.pp = {1, 8};
  space.micro_batches = {1};
  const SearchPlan plan = plan_search(base, space, {});
  std::vector<SearchCandidate> all = plan.simulated;
  all.insert(all.end(), plan.pruned.begin(), plan.pruned.end());
  ASSERT_EQ(all.size(), 5u);  // pp 1 at zero 0-1, pp 8 at zero 0-2
  const ParameterCounts params = count_parameters(base.model);
  const std::int64_t edge = std::max(params.embedding + params.position, params.final_norm + params.output_head);
  int stage2 = 0;
  for (const SearchCandidate& c : all) {
    ASSERT_TRUE(c.pp == 1 || c.pp == 8) << c.label();
    if (c.pp == 1) {
      EXPECT_NE(c.zero_stage, 2) << c.label();
      continue;
    }
    EXPECT_EQ(c.dp, 16) << c.label();
    const std::int64_t p = (96 / 8 * params.per_layer + edge + 7) / 8;
    const std::int64_t q = (p + 15) / 16;
    const std::int64_t expected = c.zero_stage == 0 ? 18 * p : c.zero_stage == 1 ? 6 * p + 12 * q : 6 * p + 16 * q;
    EXPECT_EQ(c.state_bytes_lower_bound, expected) << c.label();
    if (c.zero_stage == 2) {
      ++stage2;
      // The point runs FSDP2 under the 1F1B schedule with Megatron's optimizer.
      EXPECT_NE(c.overrides.front().find("kind: megatron, tp: 8, pp: 8, dp: 16, schedule: 1f1b"), std::string::npos);
      EXPECT_NE(c.overrides.front().find("zero_stage: 2"), std::string::npos) << c.overrides.front();
    }
  }
  EXPECT_EQ(stage2, 1);
  // Asked for stage 2 alone, a pp 1 space has nothing to run.
  space.pp = {1};
  space.zero_stages = {2};
  const SearchPlan none = plan_search(base, space, {});
  EXPECT_TRUE(none.simulated.empty());
  EXPECT_TRUE(none.pruned.empty());
}

TEST(Search, TorchtitanDataParallelPointsAreFsdp2WithTorchtitansKeysOnly) {
  // Llama 3 70B on 256 H100 with training.framework: torchtitan: its data parallelism is FSDP2,
  // modelled at ZeRO-3 without offload, whose reader refuses DeepSpeed's keys (reduce bucket,
  // overlap_comm, persistence threshold, offload, runtime). The search writes zero_stage, dp, tp
  // and leaves the rest to torchtitan's defaults. A rank's FSDP2 states are all partitioned over
  // dp: q = ceil(P / dp) of its tp share P; the fp32 parameter shard is the master (FSDP2's
  // mixed precision casts it to bf16 when gathering), so 4q + Adam's m and v 8q + the fp32
  // gradient shard 4q = 16q.
  const std::string file =
      std::string(OFFSIM_SOURCE_DIR) + "/configs/experiments/llama3-70b-torchtitan-fsdp32-tp8-h100.yaml";
  const ExperimentSpec base = load_experiment(file, {});
  SearchSpace space;
  space.kinds = {"data_parallel"};
  space.tp = {8};
  space.micro_batches = {16};
  const SearchPlan plan = plan_search(base, space, {});
  std::vector<SearchCandidate> all = plan.simulated;
  all.insert(all.end(), plan.pruned.begin(), plan.pruned.end());
  ASSERT_EQ(all.size(), 1u);  // ZeRO-3 alone, no offload
  const SearchCandidate& c = all.front();
  EXPECT_EQ(c.zero_stage, 3);
  EXPECT_FALSE(c.offload);
  EXPECT_EQ(c.overrides.front().find("reduce_bucket"), std::string::npos) << c.overrides.front();
  EXPECT_EQ(c.overrides.front().find("overlap_comm"), std::string::npos) << c.overrides.front();
  EXPECT_EQ(c.overrides.front().find("persistence"), std::string::npos) << c.overrides.front();
  const std::int64_t p = tensor_parallel_share(count_parameters(base.model), 8).total;
  EXPECT_EQ(c.state_bytes_lower_bound, 16 * ((p + 31) / 32));
  // Asked for ZeRO 0-2 or offload, a torchtitan base has no data-parallel point to run.
  space.zero_stages = {0, 1, 2};
  EXPECT_TRUE(plan_search(base, space, {}).simulated.empty());
  // The point runs (the reader takes it) and its simulated model states are at least the bound.
  const ExperimentSpec point = load_experiment(file, c.overrides);
  const ExperimentResult r = run_experiment(point, RunExperimentOptions{.link_statistics = false});
  EXPECT_GE(r.model_states_per_device.count, c.state_bytes_lower_bound);
}

TEST(Search, TheParetoFrontKeepsOnlyUndominatedPointsFastestFirst) {
  // (tokens/s, cost per M tokens, peak HBM): A (100, 2, 50) and B (80, 1, 60) trade throughput
  // for cost; C (90, 2.5, 40) is slower than A but lighter; D (70, 3, 70) is dominated by all;
  // E is faster than all but out of the limits.
  const auto result = [](double tokens, double cost, std::int64_t hbm, bool within) {
    SearchResult r;
    r.tokens_per_s = tokens;
    r.cost_per_million_tokens = cost;
    r.hbm_peak_bytes = hbm;
    r.within_limits = within;
    return r;
  };
  const std::vector<SearchResult> results{result(100, 2, 50, true), result(80, 1, 60, true), result(90, 2.5, 40, true),
                                          result(70, 3, 70, true), result(200, 0.5, 10, false)};
  EXPECT_EQ(pareto_front(results), (std::vector<std::size_t>{0, 2, 1}));
}

}  // namespace
}  // namespace offsim::models
