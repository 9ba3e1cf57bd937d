// offsim search (models/search.hpp): the space it enumerates, what it prunes before simulating,
// and the Pareto front it reports.
#include <gtest/gtest.h>

#include <filesystem>

#include "models/search.hpp"

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
  //     (dp 1, mb 1 or 2), for ZeRO 0-1: (1 + 2 + 2) x 2 = 10.
  // Skipped: the micro-batch 2 on dp 2 (data_parallel tp 1 x 4 stages, megatron tp1 pp1 x 2) and
  // tp 2 x pp 2 (4 GPUs) for megatron (2 micro-batches x 2 stages): 6 + 4 = 10.
  const ExperimentSpec base = load_experiment(kTiny, {});
  SearchSpace space;
  space.micro_batches = {1, 2};
  space.tp = {1, 2};
  SearchPlan plan = plan_search(base, space, {});
  EXPECT_EQ(plan.global_batch, 2);
  EXPECT_EQ(plan.simulated.size() + plan.pruned.size(), 22u);
  EXPECT_EQ(plan.invalid, 10u);
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
  const auto results = read_search_results(plan, run.out, limits);
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
