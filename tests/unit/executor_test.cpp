#include <gtest/gtest.h>

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "sim/core/errors.hpp"
#include "sim/exec/executor.hpp"
#include "sim/exec/route_classes.hpp"

namespace offsim::sim {
namespace {

struct Fixture {
  Platform platform;
  std::uint32_t gpu0;
  std::uint32_t gpu1;
  ConstraintId link;
  std::uint32_t hbm;
  Fixture() {
    gpu0 = platform.add_unit({"gpu0", 1});
    gpu1 = platform.add_unit({"gpu1", 1});
    link = platform.add_constraint({"gpu0->gpu1", Bandwidth{1e12}, "gpu-gpu", "", "gpu0", "gpu1"});
    hbm = platform.add_pool({"gpu0.hbm", "hbm", Bytes{1000}});
  }
};

// A memory task's tenant is its name interned: equal names, however given and on whichever thread,
// are one copy; the text is the name's.
TEST(Tenant, EqualNamesAreOneCopyOnEveryThread) {
  const std::string built = std::string("gathered ") + "parameters (bf16)";
  const Tenant a("gathered parameters (bf16)");
  const Tenant b(built);
  const Tenant c{std::string_view(built)};
  EXPECT_EQ(&a.str(), &b.str());
  EXPECT_EQ(&a.str(), &c.str());
  EXPECT_EQ(a.str(), "gathered parameters (bf16)");
  EXPECT_TRUE(a == "gathered parameters (bf16)");
  EXPECT_FALSE(a == "activations");
  EXPECT_EQ(Tenant().str(), "");
  const std::string* elsewhere = nullptr;
  std::thread([&] { elsewhere = &Tenant(built).str(); }).join();
  EXPECT_EQ(elsewhere, &a.str());
}

TEST(Executor, RunsADataflowGraph) {
  // alloc -> compute (100 ps) on gpu0 -> transfer 1000 B at 1e12 B/s (1000 ps) + 50 ps latency
  //       -> compute (200 ps) on gpu1 -> free.   makespan = 100 + 50 + 1000 + 200 = 1350 ps.
  // An independent compute on gpu1 (300 ps) runs at t=0 and delays nothing: gpu1 is free at 300.
  Fixture f;
  TaskGraph g;
  const auto a = g.add("alloc", "setup", AllocTask{f.hbm, "x", Bytes{400}});
  const auto c0 = g.add("c0", "forward", ComputeTask{f.gpu0, TimePs{100}, {}, Bytes{0}, "gemm"}, {a});
  const auto x = g.add("send", "comm", TransferTask{{f.link}, Bytes{1000}, TimePs{50}, {}, {}}, {c0});
  const auto c1 = g.add("c1", "forward", ComputeTask{f.gpu1, TimePs{200}, {}, Bytes{0}, "gemm"}, {x});
  const auto side = g.add("side", "forward", ComputeTask{f.gpu1, TimePs{300}, {}, Bytes{0}, "gemm"});
  g.add("free", "end", FreeTask{f.hbm, "x", Bytes{400}}, {c1});
  const RunResult r = execute(f.platform, g);
  EXPECT_EQ(r.makespan.ps, 1350);
  EXPECT_EQ(r.tasks[c0.index].end.ps, 100);
  EXPECT_EQ(r.tasks[x.index].start.ps, 100);
  EXPECT_EQ(r.tasks[x.index].end.ps, 1150);
  EXPECT_EQ(r.tasks[c1.index].start.ps, 1150);
  EXPECT_EQ(r.tasks[side.index].end.ps, 300);
  EXPECT_EQ(r.units[f.gpu1].busy_time.ps, 500);
  EXPECT_EQ(r.pools[f.hbm].peak.count, 400);
  EXPECT_EQ(r.pools[f.hbm].timeline.back().used.count, 0);
  EXPECT_NEAR(r.constraints[f.link.index].stats.bytes_carried, 1000.0, 1e-6);
}

TEST(Executor, ADeadlockNamesWhatWasWaiting) {
  Fixture f;
  TaskGraph g;
  const auto start = g.add("start", "setup", BarrierTask{});
  const auto a = g.add("a", "x", BarrierTask{}, {start});
  const auto b = g.add("b", "x", BarrierTask{}, {start});
  g.add_dependency(a, b);
  g.add_dependency(b, a);  // a cycle: neither can ever run
  try {
    (void)execute(f.platform, g);
    FAIL() << "a cyclic graph must deadlock";
  } catch (const SimulationError& e) {
    EXPECT_STREQ(e.what(), "deadlock at t=0 ps: 2 of 3 tasks never finished:\n  'a' waits for b\n  'b' waits for a");
  }
}

TEST(Executor, InvalidReferencesAreReportedBeforeRunning) {
  Fixture f;
  TaskGraph g;
  g.add("bad", "x", ComputeTask{7, TimePs{1}, {}, Bytes{0}, "gemm"});
  g.add("worse", "x", AllocTask{9, "t", Bytes{1}});
  // Routes shared by several transfers (one list): a good one is checked once, a bad one is
  // reported for each transfer that takes it.
  const Route good{f.link};
  const Route bad{f.link, ConstraintId{5}};
  for (const auto& [name, route] : {std::pair{"fine", good}, {"wrong", bad}, {"fine too", good}, {"wrong too", bad}}) {
    g.add(name, "x", TransferTask{route, Bytes{10}, TimePs{0}, {}, {}});
  }
  try {
    (void)execute(f.platform, g);
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(
        e.what(),
        "invalid task graph:\n  task 0 'bad': unknown compute unit 7\n  task 1 'worse': unknown memory pool 9\n"
        "  task 3 'wrong': unknown constraint 5\n  task 5 'wrong too': unknown constraint 5");
  }
}

// A task's phase is its text, however it is given: from the same buffer holding other texts in
// turn (the same address), and texts of every length the lookup compares differently (3, 5, 8,
// 13 and 19 bytes), two of them differing only inside.
TEST(TaskGraph, APhaseIsItsTextWhateverAddressItComesFrom) {
  TaskGraph g;
  std::string buffer = "forward";
  const auto a = g.add("a", buffer, BarrierTask{});
  buffer = "backward";  // the same inline storage: the same address, another text
  const auto b = g.add("b", buffer, BarrierTask{});
  buffer = "forward";
  const auto c = g.add("c", buffer, BarrierTask{});
  EXPECT_EQ(g.phase(g.task(a)), "forward");
  EXPECT_EQ(g.phase(g.task(b)), "backward");
  EXPECT_EQ(g.phase(g.task(c)), "forward");
  EXPECT_EQ(g.task(a).phase, g.task(c).phase);
  const std::vector<std::string> texts{
      "end",  "setup", "pipeline", "communication", "communicatiXn", "nvme_gradient_flush", "nvme_gradient_flusX",
      "setup"};
  std::vector<TaskId> ids;
  for (const auto& t : texts) ids.push_back(g.add("t", t, BarrierTask{}));
  for (std::size_t i = 0; i < texts.size(); ++i) EXPECT_EQ(g.phase(g.task(ids[i])), texts[i]) << i;
  EXPECT_EQ(g.task(ids[1]).phase, g.task(ids[7]).phase);
  EXPECT_NE(g.task(ids[3]).phase, g.task(ids[4]).phase);
  EXPECT_NE(g.task(ids[5]).phase, g.task(ids[6]).phase);
}

TEST(TaskGraph, ARollBackLeavesTheGraphAsAtItsMark) {
  Fixture f;
  TaskGraph g;
  const auto a = g.add("a", "forward", ComputeTask{f.gpu0, TimePs{100}, Flops{}, Bytes{0}, "gemm"});
  const std::string before = g.to_text(f.platform);
  const TaskGraph::Mark mark = g.mark();
  const auto b = g.add("b", "a-new-phase", BarrierTask{}, {a});
  g.add("c", "forward", TransferTask{{f.link}, Bytes{1000}, TimePs{50}, Bandwidth{5e8}, {}}, {a, b});
  ASSERT_TRUE(g.roll_back(mark));
  EXPECT_EQ(g.size(), 1u);
  EXPECT_EQ(g.to_text(f.platform), before);
  // What is added next takes the removed tasks' places, and the removed phase is not found again.
  const auto d = g.add("d", "backward", BarrierTask{}, {a});
  EXPECT_EQ(d.index, 1u);
  EXPECT_EQ(g.phase(g.task(d)), "backward");
  EXPECT_EQ(g.to_text(f.platform), before + "1 d [backward] prio=0 deps=[0] barrier\n");
  // An edge added after the fact may have moved an earlier task's dependencies past a mark:
  // nothing is rolled back then.
  const TaskGraph::Mark second = g.mark();
  const auto e = g.add("e", "forward", BarrierTask{});
  g.add_dependency(d, e);
  EXPECT_FALSE(g.roll_back(second));
  EXPECT_EQ(g.size(), 3u);
  EXPECT_EQ(g.deps(g.task(d)).size(), 2u);
}

TEST(TaskGraph, DumpsAsTextAndDotWithoutRunning) {
  Fixture f;
  TaskGraph g;
  const auto c0 = g.add("c0", "forward", ComputeTask{f.gpu0, TimePs{100}, Flops{2e6}, Bytes{64}, "gemm"});
  g.add("send", "comm", TransferTask{{f.link}, Bytes{1000}, TimePs{50}, Bandwidth{5e8}, {}}, {c0}, 3);
  EXPECT_EQ(g.to_text(f.platform),
            "0 c0 [forward] prio=0 deps=[] compute unit=gpu0 kernel=gemm duration_ps=100 flops=2e+06 bytes=64\n"
            "1 send [comm] prio=3 deps=[0] transfer bytes=1000 latency_ps=50 route=[gpu0->gpu1] bound=5e+08B/s\n");
  const std::string dot = g.to_dot(f.platform);
  EXPECT_NE(dot.find("digraph tasks {"), std::string::npos);
  EXPECT_NE(dot.find("t0 -> t1;"), std::string::npos);
  EXPECT_NE(dot.find("t1 [label=\"send\\ncomm\", shape=cds"), std::string::npos);
}

TEST(TaskGraph, AGraphPastItsTaskLimitIsASimulationLimitNotAnOutOfMemoryKill) {
  // With a limit of 3 tasks the fourth add throws SimulationLimit (exit 3), naming the limit, the
  // memory it stands for (3 x 1000 B = 2.93 KiB) and what to simulate less of; the graph keeps its
  // 3 tasks. The default limit is this machine's available memory over 1000 B, at least 1 M tasks.
  TaskGraph g;
  g.set_task_limit(3);
  for (int i = 0; i < 3; ++i) g.add(fmt::format("b{}", i), "setup", BarrierTask{});
  try {
    g.add("b3", "setup", BarrierTask{});
    FAIL() << "expected SimulationLimit";
  } catch (const SimulationLimit& e) {
    const std::string expected =
        "the task graph grows past 3 tasks, about 2.93 KiB of memory to build and run (1000 B per task), more";
    EXPECT_EQ(std::string(e.what()).substr(0, expected.size()), expected);
  }
  EXPECT_EQ(g.size(), 3u);
  EXPECT_GE(default_task_limit(), std::size_t{1} << 20);
}

TEST(Executor, IsDeterministicAcrossRuns) {
  Fixture f;
  TaskGraph g;
  std::vector<TaskId> sends;
  for (int i = 0; i < 20; ++i) {
    sends.push_back(
        g.add(fmt::format("s{}", i), "comm", TransferTask{{f.link}, Bytes{1000 + 37 * i}, TimePs{i}, {}, {}}));
  }
  g.add("end", "end", BarrierTask{}, sends);
  const RunResult a = execute(f.platform, g);
  const RunResult b = execute(f.platform, g);
  ASSERT_EQ(a.tasks.size(), b.tasks.size());
  for (std::size_t i = 0; i < a.tasks.size(); ++i) EXPECT_EQ(a.tasks[i].end, b.tasks[i].end);
  EXPECT_EQ(a.makespan, b.makespan);
  // 20 flows share 1e12 B/s: the last byte cannot arrive before sum(bytes) / C.
  std::int64_t total = 0;
  for (int i = 0; i < 20; ++i) total += 1000 + 37 * i;
  EXPECT_GE(a.makespan.ps, total);
}

TEST(Executor, AnalyticTransfersEndAsTheTrackedFlowsEndedThemWithoutStatistics) {
  // A fixed-rate transfer (no route, a rate bound) lasts bytes / bound rounded up to the ps:
  // 1000 B at 3e11 B/s is 3333.3 ps -> 3334 ps. Without link statistics the executor starts such
  // a transfer outside the flow network's books (FlowNetwork::start_fixed_rate); with them it is
  // a tracked flow credited to its accounted link. Every task's times and the event count must be
  // the same either way, next to shared flows on that link, a latency and an empty transfer.
  Fixture f;
  TaskGraph g;
  const Bandwidth bound{3e11};
  const auto c0 = g.add("c0", "forward", ComputeTask{f.gpu0, TimePs{100}, {}, Bytes{0}, "gemm"});
  const auto rs = g.add("rs", "comm", TransferTask{{}, Bytes{1000}, TimePs{0}, bound, {f.link, f.link}}, {c0});
  const auto ag = g.add("ag", "comm", TransferTask{{}, Bytes{700}, TimePs{0}, bound, {f.link}}, {rs});
  const auto late = g.add("late", "comm", TransferTask{{}, Bytes{500}, TimePs{25}, bound, {f.link}}, {c0});
  const auto none = g.add("none", "comm", TransferTask{{}, Bytes{0}, TimePs{0}, bound, {f.link}}, {c0});
  const auto shared = g.add("shared", "comm", TransferTask{{f.link}, Bytes{4000}, TimePs{0}, {}, {}}, {c0});
  // A delay (a replayed operation's task) accounted on the link: a flow of its own while the link
  // keeps statistics, one event without a flow when it keeps none (FlowNetwork::start_delay).
  const auto wait = g.add("wait", "comm", TransferTask{{}, Bytes{0}, TimePs{40}, {}, {f.link}}, {c0});
  const auto c1 =
      g.add("c1", "forward", ComputeTask{f.gpu0, TimePs{200}, {}, Bytes{0}, "gemm"}, {ag, late, none, wait});
  g.add("end", "end", BarrierTask{}, {c1, shared});
  const RunResult tracked = execute(f.platform, g, ExecOptions{.link_statistics = true});
  const RunResult untracked = execute(f.platform, g, ExecOptions{.link_statistics = false});
  EXPECT_EQ(untracked.tasks[rs.index].end.ps, 100 + 3334);
  EXPECT_EQ(untracked.tasks[ag.index].end.ps, 100 + 3334 + 2334);  // 700 B: 2333.3 ps -> 2334
  EXPECT_EQ(untracked.makespan.ps, 100 + 3334 + 2334 + 200);
  EXPECT_EQ(untracked.tasks[wait.index].end.ps, 100 + 40);
  ASSERT_EQ(tracked.tasks.size(), untracked.tasks.size());
  for (std::size_t i = 0; i < tracked.tasks.size(); ++i) {
    EXPECT_EQ(tracked.tasks[i].ready, untracked.tasks[i].ready) << i;
    EXPECT_EQ(tracked.tasks[i].start, untracked.tasks[i].start) << i;
    EXPECT_EQ(tracked.tasks[i].end, untracked.tasks[i].end) << i;
  }
  EXPECT_EQ(tracked.events_processed, untracked.events_processed);
  EXPECT_EQ(tracked.makespan, untracked.makespan);
  // The tracked run credited the link with both transfers' bytes (rs twice: listed twice); the
  // untracked one lists no constraint at all (ExecOptions::link_statistics), its units and pools
  // as the tracked one.
  EXPECT_DOUBLE_EQ(tracked.constraints[f.link.index].stats.bytes_carried, 4000.0 + 2 * 1000 + 700 + 500);
  EXPECT_EQ(tracked.constraints.size(), f.platform.constraints.size());
  EXPECT_TRUE(untracked.constraints.empty());
  EXPECT_EQ(untracked.units.size(), tracked.units.size());
  EXPECT_EQ(untracked.pools.size(), tracked.pools.size());
}

// A route's copies share its list; a list given as a vector or braces is the route, in order.
TEST(Route, CopiesShareOneListInOrder) {
  const Route none;
  EXPECT_TRUE(none.empty());
  EXPECT_EQ(none.identity(), nullptr);
  EXPECT_TRUE(Route(std::vector<ConstraintId>{}).empty());
  const Route listed{ConstraintId{3}, ConstraintId{1}, ConstraintId{3}};
  const Route copy = listed;  // NOLINT(performance-unnecessary-copy-initialization): the copy is the point
  EXPECT_EQ(copy.identity(), listed.identity());
  ASSERT_EQ(copy.size(), 3u);
  EXPECT_EQ(copy[0].index, 3u);
  EXPECT_EQ(copy[1].index, 1u);
  EXPECT_EQ(copy.front().index, 3u);
  const Route made(std::vector<ConstraintId>{ConstraintId{3}, ConstraintId{1}, ConstraintId{3}});
  EXPECT_NE(made.identity(), listed.identity());
  EXPECT_TRUE(std::ranges::equal(made.view(), listed.view()));
}

// RouteClasses (route_classes.hpp) on six constraints and three routes, the equations first:
//   r1 = [A, B, D], r2 = [C, C, D], r3 = [E]; F is on no route.
//   Signatures (the routes listing each, once per listing): A [r1], B [r1], C [r2, r2],
//   D [r1, r2], E [r3]. Alike: {A, B}; the others alone. F: no class.
//   Representative of {A, B}: the least capacity, A (10 < 20). Classes in their representatives'
//   order: A (0), C (2), D (3), E (4) -> classes 0, 1, 2, 3 with capacities 10, 5, 7, 9.
//   r1 over the classes: A's place only (B is not the representative) and D's: [0, 2];
//   r2: C twice, D once: [1, 1, 2]; r3: [3]. Three tasks on r1 (two sharing one list, one with a
//   list of its own) share its one copy.
// A link of the tests below: a name and a capacity.
ConstraintSpec link_spec(std::string name, double capacity) {
  return {std::move(name), Bandwidth{capacity}, "gpu-gpu", "", "", ""};
}

TEST(RouteClasses, AlikeConstraintsAreOneClassOfTheLeastCapacityInTheRepresentativesOrder) {
  Platform p;
  const auto c = [&p](const char* name, double capacity) { return p.add_constraint(link_spec(name, capacity)); };
  const auto a = c("A", 10), b = c("B", 20), cc = c("C", 5), d = c("D", 7), e = c("E", 9), unused = c("F", 1);
  TaskGraph g;
  const Route r1{a, b, d};
  const auto t1 = g.add("t1", "comm", TransferTask{r1, Bytes{1}, TimePs{0}, {}, {}});
  const auto shared = g.add("shared", "comm", TransferTask{r1, Bytes{1}, TimePs{0}, {}, {}});
  const auto t2 = g.add("t2", "comm", TransferTask{{cc, cc, d}, Bytes{1}, TimePs{0}, {}, {}});
  const auto t3 = g.add("t3", "comm", TransferTask{{e}, Bytes{1}, TimePs{0}, {}, {}});
  const auto again = g.add("again", "comm", TransferTask{{a, b, d}, Bytes{1}, TimePs{0}, {}, {}});
  const auto none = g.add("none", "comm", BarrierTask{});
  const RouteClasses classes(p, g);
  EXPECT_EQ(classes.capacities(), (std::vector<double>{10, 5, 7, 9}));
  EXPECT_EQ(classes.representatives(), (std::vector<std::uint32_t>{a.index, cc.index, d.index, e.index}));
  const auto route = [&](TaskId t) {
    std::vector<std::uint32_t> out;
    for (const auto k : classes.route_of(t.index)) out.push_back(k.index);
    return out;
  };
  EXPECT_EQ(route(t1), (std::vector<std::uint32_t>{0, 2}));
  EXPECT_EQ(route(t2), (std::vector<std::uint32_t>{1, 1, 2}));
  EXPECT_EQ(route(t3), (std::vector<std::uint32_t>{3}));
  EXPECT_EQ(classes.route_of(again.index).data(), classes.route_of(t1.index).data());   // the same content
  EXPECT_EQ(classes.route_of(shared.index).data(), classes.route_of(t1.index).data());  // the same list
  EXPECT_TRUE(classes.route_of(none.index).empty());
  EXPECT_EQ(classes.class_of(b), 0U);
  EXPECT_EQ(classes.class_of(unused), RouteClasses::kNone);
}

// The classes follow from the capacities and the routes alone, so a thread keeps its last few and
// takes them for the same ones (a sweep point's two simulations): the same graph on the platform of
// the test above, twice, gives its classes each time; with B's capacity 5 instead of 20, B stands
// for {A, B} (5 < 10): classes B, C, D, E with capacities 5, 5, 7, 9, and r1 over them still [0, 2].
TEST(RouteClasses, ClassesWorkedOutBeforeAreTakenOnlyForTheSameCapacitiesAndRoutes) {
  const auto classes_of = [](double capacity_of_b) {
    Platform p;
    const auto c = [&p](const char* name, double capacity) { return p.add_constraint(link_spec(name, capacity)); };
    const auto a = c("A", 10), b = c("B", capacity_of_b), cc = c("C", 5), d = c("D", 7), e = c("E", 9);
    (void)c("F", 1);
    TaskGraph g;
    const auto t1 = g.add("t1", "comm", TransferTask{{a, b, d}, Bytes{1}, TimePs{0}, {}, {}});
    (void)g.add("t2", "comm", TransferTask{{cc, cc, d}, Bytes{1}, TimePs{0}, {}, {}});
    (void)g.add("t3", "comm", TransferTask{{e}, Bytes{1}, TimePs{0}, {}, {}});
    const RouteClasses classes(p, g);
    std::vector<std::uint32_t> r1;
    for (const auto k : classes.route_of(t1.index)) r1.push_back(k.index);
    return std::make_tuple(classes.capacities(), classes.representatives(), r1, classes.class_of(a));
  };
  using Figures =
      std::tuple<std::vector<double>, std::vector<std::uint32_t>, std::vector<std::uint32_t>, std::uint32_t>;
  const Figures first{{10, 5, 7, 9}, {0, 2, 3, 4}, {0, 2}, 0};
  const Figures narrower_b{{5, 5, 7, 9}, {1, 2, 3, 4}, {0, 2}, 0};
  EXPECT_EQ(classes_of(20), first);
  EXPECT_EQ(classes_of(20), first);      // taken from the thread's
  EXPECT_EQ(classes_of(5), narrower_b);  // another capacity: worked out again
  EXPECT_EQ(classes_of(20), first);
}

// Without link statistics the executor runs the flows over the classes; with them, over every
// constraint. The rates are the same doubles (route_classes.hpp), so every task's times must be:
// 60 transfers on routes drawn from twelve constraints of a few capacities (ties between classes
// included, some constraints listed twice), started at staggered times so that flows go solo,
// share, promote and leave in every order.
TEST(RouteClasses, ARunOverTheClassesGivesEveryTaskTheTimesOfARunOverEveryConstraint) {
  Platform p;
  std::vector<ConstraintId> links;
  constexpr std::array<double, 3> kCapacities{1e12, 2e12, 1e12};
  for (int i = 0; i < 12; ++i) {
    links.push_back(p.add_constraint(link_spec(fmt::format("l{}", i), kCapacities[i % 3])));
  }
  const auto gpu = p.add_unit({"gpu", 1});
  // A fixed choice of routes: pairs and triples of links, a link listed twice, wide routes that
  // make alike groups (l0..l3 only ever together).
  const std::vector<std::vector<int>> shapes{{0, 1, 2, 3},  {0, 1, 2, 3, 4}, {4, 5},   {5, 5, 6},    {6, 7, 8},
                                             {8, 9},        {9, 10, 11},     {10, 11}, {2, 3, 0, 1}, {7},
                                             {11, 4, 6, 9}, {1, 0, 3, 2, 8}};
  TaskGraph g;
  std::vector<TaskId> ends;
  for (int i = 0; i < 60; ++i) {
    std::vector<ConstraintId> route;
    for (const int l : shapes[(i * 7) % shapes.size()]) route.push_back(links[l]);
    const auto delay =
        g.add(fmt::format("d{}", i), "forward", ComputeTask{gpu, TimePs{(i * 37) % 500}, {}, Bytes{0}, "gemm"});
    ends.push_back(g.add(fmt::format("x{}", i), "comm",
                         TransferTask{std::move(route), Bytes{1000 + 113 * (i % 9)}, TimePs{i % 4}, {}, {}}, {delay}));
  }
  g.add("end", "end", BarrierTask{}, ends);
  const RunResult every = execute(p, g, ExecOptions{.link_statistics = true});
  const RunResult classes = execute(p, g, ExecOptions{.link_statistics = false});
  ASSERT_EQ(every.tasks.size(), classes.tasks.size());
  for (std::size_t i = 0; i < every.tasks.size(); ++i) {
    EXPECT_EQ(every.tasks[i].start, classes.tasks[i].start) << i;
    EXPECT_EQ(every.tasks[i].end, classes.tasks[i].end) << i;
  }
  EXPECT_EQ(every.events_processed, classes.events_processed);
  EXPECT_EQ(every.makespan, classes.makespan);
  // Some flows did share (the makespan is more than the longest one alone, 2017 B at 1e12 B/s).
  EXPECT_GT(every.makespan.ps, 500 + 3 + 2017);
}

// A constraint on no route is not in the run's network, but its capacity is still checked.
TEST(RouteClasses, AConstraintOnNoRouteIsStillCheckedWithoutStatistics) {
  Platform p;
  const auto link = p.add_constraint(link_spec("used", 1e12));
  p.add_constraint(link_spec("broken", 0));
  TaskGraph g;
  g.add("x", "comm", TransferTask{{link}, Bytes{10}, TimePs{0}, {}, {}});
  try {
    (void)execute(p, g, ExecOptions{.link_statistics = false});
    FAIL() << "expected an error";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "constraint 'broken' needs a positive capacity, got 0 B/s");
  }
}

}  // namespace
}  // namespace offsim::sim
