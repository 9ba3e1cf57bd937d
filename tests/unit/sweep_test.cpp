// Sweeps: the grid, zipped axes, ranges and filters; resumption after an interruption; the final
// file independent of --jobs (models/sweep.hpp).
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include <fmt/format.h>

#include "models/experiment.hpp"
#include "models/figures.hpp"
#include "models/sweep.hpp"
#include "models/transformer/phases.hpp"
#include "sim/config/config_reader.hpp"
#include "sim/exec/task_graph.hpp"
#include "tests/unit/source_paths.hpp"

namespace offsim::models {
namespace {

namespace fs = std::filesystem;

fs::path scratch() {
  return testing::scratch_folder("offsim-sweep-test");
}

fs::path write(const std::string& name, const std::string& text) {
  const fs::path file = scratch() / name;
  std::ofstream(file) << text;
  return file;
}

std::string read(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// Eight points on the two-GPU test machine: ZeRO stage 0..3 x micro-batch 1..2.
fs::path tiny_sweep() {
  return write("tiny.yaml", fmt::format("name: tiny\n"
                                        "base: {}/tests/data/tiny-dp2.yaml\n"
                                        "axes:\n"
                                        "  - {{key: strategy.zero_stage, range: {{from: 0, to: 3, step: 1}}}}\n"
                                        "  - {{key: training.micro_batch, values: [1, 2]}}\n",
                                        OFFSIM_SOURCE_DIR));
}

TEST(Sweep, GridZipRangeAndFiltersMakeThePoints) {
  const fs::path file = write("grid.yaml",
                              "name: grid\n"
                              "base: x.yaml\n"
                              "axes:\n"
                              "  - {key: a, values: [p, q]}\n"
                              "  - zip:\n"
                              "      - {key: b, values: [1, 2, 3]}\n"
                              "      - {key: c, values: [10, 20, 30]}\n"
                              "  - {key: d, range: {from: 0.5, to: 1.5, step: 0.5}}\n"
                              "where: [\"d != 1\", \"b <= 2\"]\n");
  const Sweep s = load_sweep(file);
  EXPECT_EQ(s.keys, (std::vector<std::string>{"a", "b", "c", "d"}));
  // 2 x 3 x 3 = 18 grid points; b <= 2 keeps 2 of 3 zipped pairs, d != 1 keeps 2 of 3 values.
  ASSERT_EQ(s.points.size(), 8u);
  const auto values = [](const SweepPoint& p) {
    std::string out;
    for (const auto& [k, v] : p.values) out += k + "=" + v + " ";
    return out;
  };
  EXPECT_EQ(values(s.points.front()), "a=p b=1 c=10 d=0.5 ");
  EXPECT_EQ(values(s.points[1]), "a=p b=1 c=10 d=1.5 ");  // the last axis varies fastest
  EXPECT_EQ(values(s.points.back()), "a=q b=2 c=20 d=1.5 ");
  EXPECT_EQ(s.points.back().index, 7u);
}

TEST(Sweep, BadSweepsNameTheLocation) {
  const fs::path file = write("bad.yaml",
                              "name: bad\n"
                              "base: x.yaml\n"
                              "axes:\n"
                              "  - zip:\n"
                              "      - {key: b, values: [1, 2]}\n"
                              "      - {key: c, values: [1]}\n"
                              "where: [\"e = 1\"]\n");
  try {
    (void)load_sweep(file);
    FAIL() << "expected a ConfigError";
  } catch (const sim::config::ConfigError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("bad.yaml:6:9: axes.0.zip.1: zipped axes need the same number of values: b has 2, c has 1"),
              std::string::npos)
        << what;
    EXPECT_NE(what.find("bad.yaml:7:9: where.0: expected \"key OP value\""), std::string::npos) << what;
  }
}

TEST(Sweep, ThreadsAndResumptionGiveTheSameFile) {
  const Sweep s = load_sweep(tiny_sweep());
  ASSERT_EQ(s.points.size(), 8u);
  const fs::path one = scratch() / "one.csv";
  const fs::path two = scratch() / "two.csv";
  fs::remove(one);
  fs::remove(two);
  (void)run_sweep(s, {one, 1, false, {}, {}});
  std::atomic<int> workers_started{0};  // the hook runs in each thread the sweep starts
  (void)run_sweep(s, {two, 2, false, {}, [&] { ++workers_started; }});
  EXPECT_EQ(workers_started.load(), 1);
  const std::string expected = read(one);
  EXPECT_EQ(read(two), expected);
  // Every point ran: 8 rows after the header, all feasible on this machine.
  EXPECT_EQ(std::count(expected.begin(), expected.end(), '\n'), 9);
  EXPECT_EQ(expected.find(",error,"), std::string::npos) << expected;

  // An interruption: three rows in completion order and a torn fourth line.
  const std::string header = sweep_header(s);
  std::istringstream lines(expected.substr(header.size()));
  std::vector<std::string> rows;
  for (std::string line; std::getline(lines, line);) rows.push_back(line + "\n");
  std::ofstream(two, std::ios::binary | std::ios::trunc) << header << rows[5] << rows[0] << rows[2] << "3,1,";
  EXPECT_EQ(finished_rows(s, two).size(), 3u);
  EXPECT_THROW((void)run_sweep(s, {two, 2, false, {}, {}}), std::runtime_error);  // exists: needs --resume
  const SweepSummary summary = run_sweep(s, {two, 2, true, {}, {}});
  EXPECT_EQ(summary.skipped, 3u);
  EXPECT_EQ(summary.ran, 5u);
  EXPECT_EQ(read(two), expected);
}

// A caller's journal (the search's) is left in the order its rows finished, not rewritten sorted;
// sorted_csv of its rows is the file a plain sweep writes. The points are given a cost that rises
// with their index, so the costliest-first order is the reverse of the index order.
TEST(Sweep, AJournalKeepsTheOrderItsRowsFinishedIn) {
  Sweep s = load_sweep(tiny_sweep());
  for (auto& p : s.points) p.relative_work = static_cast<double>(p.index + 1);
  const fs::path plain = scratch() / "plain.csv";
  const fs::path journal = scratch() / "journal.csv";
  fs::remove(plain);
  fs::remove(journal);
  (void)run_sweep(s, {plain, 1, false, {}, {}});
  SweepOptions as_journal{journal, 1, false, {}, {}};
  as_journal.out_is_journal = true;
  (void)run_sweep(s, as_journal);
  const std::vector<std::string> rows = finished_rows(s, journal);
  ASSERT_EQ(rows.size(), 8u);
  EXPECT_TRUE(rows.front().starts_with("7,")) << rows.front();  // the costliest point first
  EXPECT_TRUE(rows.back().starts_with("0,")) << rows.back();
  EXPECT_EQ(sorted_csv(s, rows), read(plain));
  EXPECT_TRUE(finished_rows(s, plain).front().starts_with("0,"));  // the plain file was sorted
}

TEST(Sweep, AFidelityForEveryPointOverridesTheExperiments) {
  // The tiny machine's two-rank all-reduce is uncontended, so analytic and flow collectives give
  // the same iteration times (to rounding); the override reaches every point.
  Sweep s = load_sweep(tiny_sweep());
  ASSERT_FALSE(s.collective_fidelity);
  s.collective_fidelity = Fidelity::kAnalytic;
  Sweep flow = s;
  flow.collective_fidelity = Fidelity::kFlow;
  for (const auto& point : s.points) {
    const auto seconds = [](const std::string& row) {
      std::vector<std::string> fields;
      std::stringstream in(row);
      for (std::string f; std::getline(in, f, ',');) fields.push_back(f);
      return std::stod(fields.at(4));  // index, 2 axes, status, iteration_time_s
    };
    const std::string a = run_sweep_point(s, point);
    const std::string f = run_sweep_point(flow, point);
    EXPECT_NEAR(seconds(a), seconds(f), 1e-6 * seconds(f)) << a << f;
  }
  // Where the two differ (7B offload on 4 Polaris nodes: the gathers share the host links with the
  // offload copies), each point runs exactly what the experiment runs with that fidelity set.
  Sweep offload = load_sweep(
      write("offload.yaml", fmt::format("name: offload\nbase: {}/configs/experiments/llama-7b-offload-polaris.yaml\n"
                                        "axes:\n  - {{key: training.micro_batch, values: [4]}}\n",
                                        OFFSIM_SOURCE_DIR)));
  const auto iteration_of = [](const std::string& row) {
    std::vector<std::string> fields;
    std::stringstream in(row);
    for (std::string f; std::getline(in, f, ',');) fields.push_back(f);
    return std::stod(fields.at(3));  // index, 1 axis, status, iteration_time_s
  };
  std::vector<double> by_fidelity;
  for (const auto& [fidelity, name] : {std::pair{Fidelity::kAnalytic, "analytic"}, {Fidelity::kFlow, "flow"}}) {
    offload.collective_fidelity = fidelity;
    const double swept = iteration_of(run_sweep_point(offload, offload.points.at(0)));
    const double direct = run_experiment(load_experiment(offload.points.at(0).experiment,
                                                         {"training.micro_batch=4",
                                                          fmt::format("strategy.collectives.fidelity={}", name)}))
                              .iteration_time.seconds();
    EXPECT_NEAR(swept, direct, 1e-9 * direct) << name;
    by_fidelity.push_back(swept);
  }
  EXPECT_NE(by_fidelity[0], by_fidelity[1]);
}

TEST(Sweep, ResumingIntoAnotherSweepsFileIsRefused) {
  const Sweep s = load_sweep(tiny_sweep());
  const fs::path other = write("other.csv", "index,x,status\n0,1,ok\n");
  EXPECT_THROW((void)finished_rows(s, other), std::runtime_error);
}

TEST(Sweep, BestRanksFeasiblePointsByTheMetric) {
  const fs::path csv = write("best.csv",
                             "index,a,status,tflops_per_device,iteration_time_s,reason\n"
                             "0,x,ok,10,3,\n"
                             "1,y,infeasible,50,1,\"too big, by far\"\n"
                             "2,z,ok,30,2,\n");
  const std::string table = best_points(csv, "tflops_per_device", 5);
  EXPECT_LT(table.find("2      z"), table.find("0      x")) << table;
  EXPECT_EQ(table.find("  y"), std::string::npos) << table;  // infeasible points are not ranked
  const std::string by_time = best_points(csv, "iteration_time_s", 1);
  EXPECT_NE(by_time.find("smaller is better"), std::string::npos);
  EXPECT_NE(by_time.find("2      z"), std::string::npos) << by_time;
  // x is 66.67% behind z; with a 70% tie it is called tied, with 5% it is not.
  EXPECT_NE(table.find("-66.67%"), std::string::npos) << table;
  EXPECT_NE(best_points(csv, "tflops_per_device", 5, 0.7).find("1 more point lies within 70.0% of the best"),
            std::string::npos);
  EXPECT_EQ(best_points(csv, "tflops_per_device", 5, 0.05).find("tied"), std::string::npos);
}

// With the iteration time's 80% interval columns, --best gives each row's interval on the metric
// (a rate's is the time's inverted) and says which overlap the best's. z: 2 s in [1.8, 2.4] s, so
// 30 TFLOPS in [30 x 2 / 2.4, 30 x 2 / 1.8] = [25, 33.33]; x: 3 s in [2.7, 3.6] s, 10 TFLOPS in
// [8.333, 11.11] (apart from z's); w: 2.2 s in [1.98, 2.64] s, 27 TFLOPS in [22.5, 30] (overlaps).
TEST(Sweep, BestSaysWhichIntervalsOverlapTheBests) {
  const fs::path csv = write("best-interval.csv",
                             "index,a,status,tflops_per_device,iteration_time_s,iteration_time_low_s,"
                             "iteration_time_high_s,reason\n"
                             "0,x,ok,10,3,2.7,3.6,\n"
                             "1,w,ok,27,2.2,1.98,2.64,\n"
                             "2,z,ok,30,2,1.8,2.4,\n");
  const std::string table = best_points(csv, "tflops_per_device", 5);
  EXPECT_NE(table.find("25.00 to 33.33"), std::string::npos) << table;
  EXPECT_NE(table.find("22.50 to 30.00 (overlaps best)"), std::string::npos) << table;
  EXPECT_NE(table.find("8.333 to 11.11\n"), std::string::npos) << table;
  EXPECT_NE(table.find("overlaps those of 1 other point:"), std::string::npos) << table;
  const std::string by_time = best_points(csv, "iteration_time_s", 5);
  EXPECT_NE(by_time.find("1.800 to 2.400"), std::string::npos) << by_time;
  // Bytes have no interval.
  EXPECT_EQ(best_points(csv, "iteration_time_low_s", 5).find("80% interval"), std::string::npos);
}

TEST(Sweep, BestPrintsFiguresToFourSignificantDigits) {
  const fs::path csv = write("best-rounded.csv",
                             "index,a,status,tflops_per_device,iteration_time_s,tokens_per_s,reason\n"
                             "0,x,ok,120.76053557495153,0.30705487280,123456.7,\n");
  EXPECT_NE(best_points(csv, "tflops_per_device", 1).find(" 120.8 "), std::string::npos);
  EXPECT_EQ(best_points(csv, "tflops_per_device", 1).find("120.76"), std::string::npos);
  EXPECT_NE(best_points(csv, "iteration_time_s", 1).find(" 0.3071 "), std::string::npos);
  EXPECT_NE(best_points(csv, "tokens_per_s", 1).find(" 123457 "), std::string::npos);
}

TEST(Sweep, PointsRunWithoutLinkStatisticsInTheSameTime) {
  // A sweep's points leave out link activity (its rows hold none): the analytic collectives'
  // transfers are not credited to their links. That is statistics only: every time is the same
  // as a full run's, to the picosecond, and the result says nothing about links rather than zeros.
  const std::string experiment = fmt::format("{}/configs/experiments/neox20b-frontier-3level.yaml", OFFSIM_SOURCE_DIR);
  const ExperimentSpec spec = load_experiment(experiment, {"strategy.collectives.fidelity=analytic"});
  const ExperimentResult full = run_experiment(spec);
  const ExperimentResult lean = run_experiment(spec, RunExperimentOptions{.link_statistics = false});
  EXPECT_EQ(lean.iteration_time.ps, full.iteration_time.ps);
  ASSERT_EQ(lean.phases.size(), full.phases.size());
  for (std::size_t i = 0; i < full.phases.size(); ++i) EXPECT_EQ(lean.phases[i].time.ps, full.phases[i].time.ps);
  EXPECT_EQ(lean.tflops_per_device, full.tflops_per_device);
  EXPECT_EQ(lean.memory.size(), full.memory.size());
  EXPECT_FALSE(full.link_stats.empty());
  EXPECT_GT(full.links.size(), 0u);
  EXPECT_TRUE(lean.link_stats.empty());
  EXPECT_TRUE(lean.links.empty());
}

// Every headline figure, the iteration time, each phase's time, each pool's peak and the
// infeasibility reasons of `got` equal `want`'s, to the last digit.
void expect_same_results(const ExperimentResult& got, const ExperimentResult& want) {
  for (const Figure& f : headline_figures()) EXPECT_EQ(f.text(got), f.text(want)) << f.name;
  EXPECT_EQ(got.iteration_time.ps, want.iteration_time.ps);
  ASSERT_EQ(got.phases.size(), want.phases.size());
  for (std::size_t i = 0; i < want.phases.size(); ++i) {
    EXPECT_EQ(got.phases[i].phase, want.phases[i].phase);
    EXPECT_EQ(got.phases[i].time.ps, want.phases[i].time.ps);
  }
  ASSERT_EQ(got.memory.size(), want.memory.size());
  for (std::size_t i = 0; i < want.memory.size(); ++i) EXPECT_EQ(got.memory[i].peak.count, want.memory[i].peak.count);
  EXPECT_EQ(got.infeasible_reasons, want.infeasible_reasons);
}

TEST(Sweep, ReplayedMegatronOperationsGiveTheFullBuildsFigures) {
  // A sweep's Megatron point with analytic collectives and tensor-parallel classes builds the
  // first operation of each kind in full (its first layer, when its layers are alike), records
  // its chain's duration and replaces it by one task of that duration, as it prices the next ones
  // (phases/operation_replay.hpp); a run that reports
  // links is built in full. Every figure of the sweep row (iteration time, TFLOPS, MFU, tokens/s,
  // exposed communication, model states, HBM peak), every phase and every memory peak must be the
  // same to the bit, over pipelines of 2-16 stages, micro-batches 1-8, ZeRO 0 and 1, and the
  // steady-state extrapolation (whose second build replays the chains the first one recorded:
  // ReplayedChains); the replayed graphs must be smaller (the replay ran), and rank 0 keeps no
  // layer kernel of its own (its first operations were replaced too).
  const std::string experiment =
      fmt::format("{}/configs/experiments/scale/gpt3-175b-a100-1024.yaml", OFFSIM_SOURCE_DIR);
  const std::vector<std::vector<std::string>> points = {
      {"strategy.pp=2", "strategy.dp=64", "training.grad_accum=16", "strategy.zero_stage=0"},
      {"strategy.pp=4", "strategy.dp=32", "training.micro_batch=8", "training.grad_accum=4"},
      {"strategy.pp=8", "strategy.dp=16", "training.micro_batch=2", "training.grad_accum=32"},
      {"strategy.pp=16", "strategy.dp=8", "training.grad_accum=128", "training.recompute=selective"},
  };
  for (const auto& overrides : points) {
    SCOPED_TRACE(fmt::format("{}", fmt::join(overrides, " ")));
    const ExperimentSpec spec = load_experiment(experiment, overrides);
    const ExperimentResult full = run_experiment(spec);
    const ExperimentResult replayed = run_experiment(spec, RunExperimentOptions{.link_statistics = false});
    expect_same_results(replayed, full);
    EXPECT_LT(replayed.tasks, full.tasks);
    const auto layer_kernels = [](const ExperimentResult& r) {
      return std::count_if(r.rank0_compute.begin(), r.rank0_compute.end(),
                           [](const auto& c) { return c.phase == phase::kForward || c.phase == phase::kBackward; });
    };
    EXPECT_GT(layer_kernels(full), 0);
    EXPECT_EQ(layer_kernels(replayed), 0);
  }
}

TEST(Sweep, PointsWithoutRank0ViewsGiveTheSameFigures) {
  // A sweep's rows hold no rank 0 views (its compute intervals, memory timeline, host-link rates):
  // its points leave them out (RunExperimentOptions::rank0_views), as the steady state's shorter
  // run always does. Every figure must be the same, the views empty; with them, a ZeRO-Offload
  // run's rank 0 has compute, memory and both host links.
  for (const std::string name : {"scale/gpt3-175b-a100-1024.yaml", "llama-13b-offload-polaris.yaml"}) {
    SCOPED_TRACE(name);
    const ExperimentSpec spec = load_experiment(fmt::format("{}/configs/experiments/{}", OFFSIM_SOURCE_DIR, name), {});
    const ExperimentResult with = run_experiment(spec, RunExperimentOptions{.link_statistics = false});
    const ExperimentResult without =
        run_experiment(spec, RunExperimentOptions{.link_statistics = false, .rank0_views = false});
    expect_same_results(without, with);
    EXPECT_FALSE(with.rank0_compute.empty());
    EXPECT_FALSE(with.rank0_memory.empty());
    EXPECT_TRUE(without.rank0_compute.empty());
    EXPECT_TRUE(without.rank0_memory.empty());
    EXPECT_TRUE(without.rank0_h2d.empty() && without.rank0_d2h.empty());
    EXPECT_EQ(without.rank0_h2d_capacity, 0.0);
    EXPECT_EQ(without.rank0_d2h_capacity, 0.0);
    if (name.starts_with("llama")) {
      EXPECT_GT(with.rank0_h2d_capacity, 0.0);
      EXPECT_GT(with.rank0_d2h_capacity, 0.0);
    }
  }
}

TEST(Sweep, GraphsWithoutTaskNamesGiveTheSameFigures) {
  // A sweep builds its points' graphs without task names (sim::ScopedUnnamedTasks; names feed
  // only outputs and error messages). The graph's tasks, their order and every figure must be
  // the same as with names: data parallel (ZeRO-3, ZeRO++, 3-level), Megatron with the replayed
  // operations, ZeRO-Offload, flow fidelity.
  const std::vector<std::pair<std::string, std::vector<std::string>>> points = {
      {"neox20b-frontier-zero3.yaml", {"strategy.collectives.fidelity=analytic"}},
      {"neox20b-frontier-zeropp.yaml", {"strategy.collectives.fidelity=analytic", "training.micro_batch=2"}},
      {"neox20b-frontier-3level.yaml", {"strategy.collectives.fidelity=flow"}},
      {"scale/gpt3-175b-a100-1024.yaml", {"strategy.collectives.fidelity=analytic", "training.grad_accum=16"}},
      {"llama-13b-offload-polaris.yaml", {}},
  };
  for (const auto& [file, overrides] : points) {
    SCOPED_TRACE(file);
    const ExperimentSpec spec =
        load_experiment(fmt::format("{}/configs/experiments/{}", OFFSIM_SOURCE_DIR, file), overrides);
    const RunExperimentOptions options{.link_statistics = false};
    const ExperimentResult named = run_experiment(spec, options);
    const ExperimentResult unnamed = [&] {
      const sim::ScopedUnnamedTasks scope;
      return run_experiment(spec, options);
    }();
    expect_same_results(unnamed, named);
    EXPECT_EQ(unnamed.tasks, named.tasks);
    EXPECT_EQ(unnamed.events, named.events);
    EXPECT_EQ(unnamed.approximations, named.approximations);
  }
}

TEST(Sweep, UnnamedGraphsKeepEverythingButTheNames) {
  // Under ScopedUnnamedTasks a graph stores empty names and the same phases, bodies and
  // dependencies; the scope nests and restores; graphs made outside it keep their names.
  const auto build = [] {
    sim::TaskGraph g;
    const auto a = g.add("mb0.fwd.layer0.r0", "forward", sim::BarrierTask{});
    g.add("mb0.bwd.layer0.r0", "backward", sim::BarrierTask{}, {a}, 3);
    return g;
  };
  const sim::TaskGraph named = build();
  EXPECT_TRUE(named.keeps_names());
  EXPECT_EQ(named.name(named.task(sim::TaskId{1})), "mb0.bwd.layer0.r0");
  {
    const sim::ScopedUnnamedTasks outer;
    { const sim::ScopedUnnamedTasks inner; }
    const sim::TaskGraph unnamed = build();
    EXPECT_FALSE(unnamed.keeps_names());
    ASSERT_EQ(unnamed.size(), named.size());
    for (std::uint32_t i = 0; i < unnamed.size(); ++i) {
      const auto& u = unnamed.task(sim::TaskId{i});
      const auto& n = named.task(sim::TaskId{i});
      EXPECT_EQ(unnamed.name(u), "");
      EXPECT_EQ(unnamed.phase(u), named.phase(n));
      EXPECT_EQ(u.priority, n.priority);
      EXPECT_EQ(std::vector<sim::TaskId>(unnamed.deps(u).begin(), unnamed.deps(u).end()),
                std::vector<sim::TaskId>(named.deps(n).begin(), named.deps(n).end()));
    }
  }
  EXPECT_TRUE(build().keeps_names());
}

TEST(ReadCache, MachinesAndTablesReadOncePerSetOfOverrides) {
  // The points of a sweep share the machines, calibration tables, models, strategies and training
  // sections they read (load_experiment with a cache): the second load takes the cached values and
  // gives the same costs, machine, model, strategy and training;
  // an override inside a table reads it afresh with the override applied, kept beside the value
  // without it, which the next load without the override takes again.
  const std::string experiment = fmt::format("{}/configs/experiments/neox20b-frontier-zero3.yaml", OFFSIM_SOURCE_DIR);
  ReadCache cache;
  const ExperimentSpec first = load_experiment(experiment, {}, &cache);
  // The machine, the device table, the collectives table, the model, the strategy and the training.
  EXPECT_EQ(cache.size(), 6u);
  const ExperimentSpec second = load_experiment(experiment, {}, &cache);
  EXPECT_EQ(cache.size(), 6u);
  EXPECT_EQ(second.model.name, first.model.name);
  EXPECT_EQ(second.model.layers, first.model.layers);
  EXPECT_EQ(second.model.hidden, first.model.hidden);
  EXPECT_EQ(second.model.seq, first.model.seq);
  EXPECT_EQ(second.defaults_applied, first.defaults_applied);
  EXPECT_EQ(std::get<DataParallelSpec>(second.strategy).devices, std::get<DataParallelSpec>(first.strategy).devices);
  EXPECT_EQ(std::get<DataParallelSpec>(second.strategy).zero_stage, 3);
  EXPECT_EQ(second.strategy_kind_at.str(), first.strategy_kind_at.str());
  EXPECT_EQ(second.training.micro_batch, first.training.micro_batch);
  EXPECT_EQ(second.training.recompute, first.training.recompute);
  EXPECT_EQ(second.device.gemm_efficiency, first.device.gemm_efficiency);
  EXPECT_EQ(second.device.gemm_table.size(), first.device.gemm_table.size());
  EXPECT_EQ(second.collectives.collectives.size(), first.collectives.collectives.size());
  EXPECT_EQ(second.warnings.size(), first.warnings.size());
  EXPECT_EQ(second.hardware->nodes, 48);  // the file's `set: hardware.nodes=48`, applied and marked used
  EXPECT_EQ(second.hardware->topology.devices().size(), first.hardware->topology.devices().size());
  EXPECT_EQ(second.hardware->topology.links().size(), first.hardware->topology.links().size());
  const ExperimentSpec overridden = load_experiment(experiment, {"calibration.device.gemm.efficiency=0.5"}, &cache);
  EXPECT_EQ(overridden.device.gemm_efficiency, 0.5);
  EXPECT_EQ(cache.size(), 7u);  // the device table with and without the override
  const ExperimentSpec third = load_experiment(experiment, {}, &cache);
  EXPECT_EQ(third.device.gemm_efficiency, first.device.gemm_efficiency);
  EXPECT_NE(first.device.gemm_efficiency, 0.5);
  // Another node count is another machine, read afresh (--set wins over the file's set:).
  const ExperimentSpec smaller = load_experiment(experiment, {"hardware.nodes=2", "strategy.dp=16"}, &cache);
  EXPECT_EQ(smaller.hardware->nodes, 2);
  EXPECT_LT(smaller.hardware->topology.devices().size(), first.hardware->topology.devices().size());
  // Both machines, and the strategy on each: a sweep's points alternate between its sizes.
  EXPECT_EQ(cache.size(), 9u);
  EXPECT_EQ(std::get<DataParallelSpec>(smaller.strategy).devices.size(), 16u);
  // Another micro-batch is another training section, the same strategy.
  const ExperimentSpec batch =
      load_experiment(experiment, {"hardware.nodes=2", "strategy.dp=16", "training.micro_batch=1"}, &cache);
  EXPECT_EQ(batch.training.micro_batch, 1);
  EXPECT_EQ(cache.size(), 10u);
  // An override inside the model reads it afresh, kept beside the model without it, and the
  // strategy too (read against the model: its tp is checked against the heads).
  const ExperimentSpec deeper = load_experiment(experiment, {"model.layers=20"}, &cache);
  EXPECT_EQ(deeper.model.layers, 20);
  EXPECT_EQ(cache.size(), 12u);
  EXPECT_EQ(load_experiment(experiment, {}, &cache).model.layers, first.model.layers);
  EXPECT_EQ(cache.size(), 12u);
}

TEST(ReadCache, APlaceHoldsItsRecentValuesWithinItsBounds) {
  // Values are kept per place, most recently used first, at most kValuesPerPlace of them and
  // while their machine elements (devices and links) stay within kElementsPerPlace, except the
  // newest, which is always kept: memory follows the largest machine a sweep uses, not its points.
  const std::string experiment = fmt::format("{}/configs/experiments/neox20b-frontier-zero3.yaml", OFFSIM_SOURCE_DIR);
  ReadCache cache;
  // Frontier at 48 nodes is 3,457 elements (673 devices, 2,784 links): 16 sizes fit the budget.
  for (std::size_t nodes = 1; nodes <= ReadCache::kValuesPerPlace + 1; ++nodes) {
    (void)load_experiment(experiment,
                          {fmt::format("hardware.nodes={}", nodes), fmt::format("strategy.dp={}", 8 * nodes)}, &cache);
  }
  // 16 machines and 16 strategies (one per machine), the device and collectives tables, the model
  // and the training.
  EXPECT_EQ(cache.size(), 2 * ReadCache::kValuesPerPlace + 4);
  // 2,000 nodes are 144,256 elements (28,016 devices, 116,240 links), over the budget alone: the
  // place keeps that machine only.
  const ExperimentSpec large = load_experiment(experiment, {"hardware.nodes=2000", "strategy.dp=16000"}, &cache);
  ASSERT_GT(large.hardware->topology.devices().size() + large.hardware->topology.links().size(),
            ReadCache::kElementsPerPlace);
  EXPECT_EQ(cache.size(), ReadCache::kValuesPerPlace + 5);  // the strategies stay at 16
  // A small machine read after it joins it only while both fit: the large one is dropped.
  (void)load_experiment(experiment, {"hardware.nodes=2", "strategy.dp=16"}, &cache);
  EXPECT_EQ(cache.size(), ReadCache::kValuesPerPlace + 5);
  (void)load_experiment(experiment, {"hardware.nodes=3", "strategy.dp=24"}, &cache);
  EXPECT_EQ(cache.size(), ReadCache::kValuesPerPlace + 6);
}

TEST(ReadCache, AValueBeingReadIsWaitedForNotReadTwice) {
  // Thread one begins reading a value; thread two, asking for it meanwhile, waits and is given what
  // thread one read. A read that ends without a value (failed) lets the waiter read it itself.
  ReadCache cache;
  const std::string place = "machine.yaml\nhardware";
  const std::vector<std::string> overrides = {"hardware.nodes=2"};
  ASSERT_EQ(cache.find_or_begin_reading(place, overrides), nullptr);  // this thread reads it
  std::shared_ptr<const ReadCache::Entry> seen;
  std::thread second([&] { seen = cache.find_or_begin_reading(place, overrides); });
  // Most likely the second thread is waiting by now; if it is late, it finds the value inserted.
  // Either way it must not be told to read the value itself (null): that would fail below.
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  DeviceCosts costs;
  costs.device_kind = "read-once";
  cache.insert(place, overrides, {costs, {}, nullptr});
  cache.end_reading(place, overrides);
  second.join();
  ASSERT_NE(seen, nullptr);
  EXPECT_EQ(std::get<DeviceCosts>(seen->value).device_kind, "read-once");

  const std::vector<std::string> other = {"hardware.nodes=3"};
  ASSERT_EQ(cache.find_or_begin_reading(place, other), nullptr);
  std::shared_ptr<const ReadCache::Entry> after_failure = seen;
  std::thread third([&] {
    after_failure = cache.find_or_begin_reading(place, other);  // null: its turn to read
    cache.end_reading(place, other);
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  cache.end_reading(place, other);  // no value inserted
  third.join();
  EXPECT_EQ(after_failure, nullptr);
}

TEST(ReadCache, AFileThatChangedIsReadAfreshOnceForgotten) {
  // The fuzz harness rewrites its input file for every input: what was read from it is dropped
  // (forget), and the rewritten file's machine is the one read, while the included tables stay.
  const auto file = std::filesystem::temp_directory_path() / fmt::format("offsim-readcache-{}.yaml", ::getpid());
  const auto write = [&](const char* bandwidth) {
    std::ofstream(file) << fmt::format(
        "name: t\n"
        "hardware:\n"
        "  name: two\n"
        "  devices:\n"
        "    - {{name: gpu, count: 2, kind: gpu, device_kind: test-gpu, memory: {{kind: hbm, capacity: \"1 GB\", "
        "bandwidth: \"100 GB/s\"}}}}\n"
        "  links:\n"
        "    - {{between: [gpu0, gpu1], bandwidth: \"{}\", latency: \"0 s\", class: gpu-gpu}}\n"
        "calibration:\n"
        "  device: !include {}/tests/data/test-gpu-costs.yaml\n"
        "  collectives: !include {}/tests/data/test-collectives.yaml\n"
        "model: !include {}/tests/data/tiny-gpt.yaml\n"
        "training: {{micro_batch: 1, grad_accum: 1, precision: bf16, recompute: none, flash_attention: false}}\n"
        "strategy: {{kind: data_parallel, zero_stage: 0, dp: 2, reduce_bucket_elements: 1000000000, "
        "overlap_comm: false, param_persistence_threshold: 0}}\n",
        bandwidth, OFFSIM_SOURCE_DIR, OFFSIM_SOURCE_DIR, OFFSIM_SOURCE_DIR);
  };
  const auto link_rate = [](const ExperimentSpec& spec) { return spec.hardware->topology.links()[0].bandwidth; };
  ReadCache cache;
  write("1 GB/s");
  EXPECT_DOUBLE_EQ(link_rate(load_experiment(file, {}, &cache)).bytes_per_s, 1e9);
  // The machine, strategy and training (in the file), the device and collectives tables, the model.
  EXPECT_EQ(cache.size(), 6u);
  cache.forget(file.string());
  EXPECT_EQ(cache.size(), 3u);  // the included tables and model stay
  write("2 GB/s");
  EXPECT_DOUBLE_EQ(link_rate(load_experiment(file, {}, &cache)).bytes_per_s, 2e9);
  std::filesystem::remove(file);
}

TEST(ReadCache, ForgettingAFileForgetsWhatWasReadAgainstIt) {
  // A strategy kept under another file's place was read against the machine or model of the file
  // named in its key: when that file changes, the strategy goes too; another file's does not.
  ReadCache cache;
  const auto keep = [&](const std::string& place, const std::string& input) {
    ASSERT_EQ(cache.find_or_begin_reading(place, {input}), nullptr);
    cache.insert(place, {input}, {ReadCache::StrategyRead{}, {}, nullptr});
    cache.end_reading(place, {input});
  };
  keep("strategy.yaml\nstrategy", "\nmachine input.yaml\nhardware\n");
  keep("strategy.yaml\nstrategy", "\nmachine other.yaml\nhardware\n");
  keep("table.yaml\ncalibration.device", "\nnot megatron");
  keep("input.yaml\nhardware", "\nnot megatron");
  EXPECT_EQ(cache.size(), 4u);
  cache.forget("input.yaml");
  EXPECT_EQ(cache.size(), 2u);  // the other machine's strategy and the table stay
  EXPECT_NE(cache.find_or_begin_reading("strategy.yaml\nstrategy", {"\nmachine other.yaml\nhardware\n"}), nullptr);
  cache.forget("other.yaml");
  EXPECT_EQ(cache.size(), 1u);
}

// The message of the ConfigError that loading `experiment` with `overrides` throws.
std::string load_error(const std::string& experiment, const std::vector<std::string>& overrides, ReadCache* cache) {
  try {
    (void)load_experiment(experiment, overrides, cache);
  } catch (const sim::config::ConfigError& e) {
    return e.what();
  }
  return "no error";
}

TEST(ReadCache, AnUnknownOverrideGetsTheSameSuggestionWithACachedMachine) {
  // A cached machine notes the key paths it read again, so the suggestion for a mistyped key is
  // the same on every point of a sweep, the first (which reads the machine) and the next ones.
  const std::string experiment = fmt::format("{}/configs/experiments/neox20b-frontier-zero3.yaml", OFFSIM_SOURCE_DIR);
  const std::vector<std::string> typo{"hardwar.nodes=2"};
  const std::string direct = load_error(experiment, typo, nullptr);
  EXPECT_NE(direct.find("did you mean 'hardware.nodes'"), std::string::npos) << direct;
  ReadCache cache;
  (void)load_experiment(experiment, {}, &cache);  // caches the machine
  EXPECT_EQ(load_error(experiment, typo, &cache), direct);
  // A mistyped key inside the machine is not applied, so that machine is never cached.
  const std::vector<std::string> inside{"hardware.network.global_lnk.bandwidth=1 GB/s"};
  EXPECT_EQ(load_error(experiment, inside, &cache), load_error(experiment, inside, nullptr));
  EXPECT_EQ(load_error(experiment, inside, &cache), load_error(experiment, inside, nullptr));
  // The same for the model, which is cached too: a mistyped key in it, and a typo beside it.
  const std::vector<std::string> in_model{"model.layer=20"};
  const std::string model_direct = load_error(experiment, in_model, nullptr);
  EXPECT_NE(model_direct.find("did you mean 'model.layers'"), std::string::npos) << model_direct;
  EXPECT_EQ(load_error(experiment, in_model, &cache), model_direct);
  EXPECT_EQ(load_error(experiment, in_model, &cache), model_direct);
  const std::vector<std::string> bad_value{"model.layers=-1"};
  EXPECT_EQ(load_error(experiment, bad_value, &cache), load_error(experiment, bad_value, nullptr));
  EXPECT_EQ(load_error(experiment, bad_value, &cache), load_error(experiment, bad_value, nullptr));
}

TEST(ReadCache, AStrategyIsCheckedAgainstTheModelItIsReadWith) {
  // A cached strategy was read against one model (its tp checked against the heads): another model
  // (an override inside it) reads the strategy afresh, so the error is the one offsim run gives.
  const std::string experiment = fmt::format("{}/configs/experiments/gpt3-1.3b-dp8-frontier.yaml", OFFSIM_SOURCE_DIR);
  const std::vector<std::string> tp8{"strategy.tp=8", "strategy.dp=1"};
  ReadCache cache;
  EXPECT_EQ(std::get<DataParallelSpec>(load_experiment(experiment, tp8, &cache).strategy).tp, 8);
  std::vector<std::string> few_heads = tp8;
  few_heads.insert(few_heads.end(), {"model.heads=4", "model.kv_heads=4"});
  const std::string direct = load_error(experiment, few_heads, nullptr);
  EXPECT_NE(direct.find("the model does not split over tp = 8 ranks"), std::string::npos) << direct;
  EXPECT_EQ(load_error(experiment, few_heads, &cache), direct);
  EXPECT_EQ(load_error(experiment, few_heads, &cache), direct);
  EXPECT_EQ(std::get<DataParallelSpec>(load_experiment(experiment, tp8, &cache).strategy).tp, 8);
}

}  // namespace
}  // namespace offsim::models
