// Max-min fair sharing, in the style of SimGrid's maxmin tests: each test states the equations
// of the expected allocation first, then asserts them.
//
// Completion times carry the 1 ps round-up of units.hpp and floating-point rates, so times are
// compared within kTick (a few picoseconds), far below any modelled effect.
#include <gtest/gtest.h>

#include <cstdlib>
#include <vector>

#include "sim/resources/flow_network.hpp"

namespace offsim::sim {
namespace {

constexpr std::int64_t kTick = 4;  // ps
constexpr double GB = 1e9;

TimePs seconds(double s) {
  return seconds_to_time(s);
}

// |actual - expected| <= kTick picoseconds.
void expect_time(TimePs actual, TimePs expected) {
  EXPECT_LE(std::llabs(actual.ps - expected.ps), kTick)
      << "actual " << actual.ps << " ps, expected " << expected.ps << " ps";
}

struct Finish {
  std::vector<TimePs> at;
};

FlowId start(FlowNetwork& net, Simulator& sim, Finish& finish, std::size_t slot, FlowSpec spec) {
  if (finish.at.size() <= slot) finish.at.resize(slot + 1);
  return net.start_flow(std::move(spec), [&sim, &finish, slot] { finish.at[slot] = sim.now(); });
}

TEST(FlowNetwork, OneFlowTakesLatencyPlusBytesOverBandwidth) {
  // t = L + B / C = 1 us + 1e9 B / 1e9 B/s = 1.000001 s
  Simulator sim;
  FlowNetwork net(sim);
  const auto link = net.add_constraint("link", Bandwidth{1 * GB});
  Finish f;
  start(net, sim, f, 0, {{link}, Bytes{1'000'000'000}, parse_time("1 us"), {}});
  sim.run();
  expect_time(f.at[0], seconds(1.000001));
}

TEST(FlowNetwork, AccountedConstraintsCountTheFlowWithoutSharingWithIt) {
  // A bound flow of 2 GB at 1 GB/s accounted on `seen` twice (it stands for two flows over it),
  // and an ordinary 4 GB flow over `seen` (4 GB/s): the ordinary one keeps the whole 4 GB/s and
  // ends at 1 s; the bound one ends at 2 s. `seen` carried 4 GB + 2 x 2 GB = 8 GB and was busy 2 s.
  Simulator sim;
  FlowNetwork net(sim);
  const auto seen = net.add_constraint("seen", Bandwidth{4 * GB});
  Finish f;
  if (f.at.size() < 2) f.at.resize(2);
  const auto bound = net.start_flow(FlowSpec{{}, Bytes{2'000'000'000}, TimePs{0}, Bandwidth{1 * GB}},
                                    [&] { f.at[0] = sim.now(); }, {seen, seen});
  const auto plain = start(net, sim, f, 1, {{seen}, Bytes{4'000'000'000}, TimePs{0}, {}});
  EXPECT_DOUBLE_EQ(net.rate(plain), 4 * GB);
  EXPECT_DOUBLE_EQ(net.rate(bound), 1 * GB);
  sim.run();
  net.sync_stats();
  expect_time(f.at[0], seconds(2.0));
  expect_time(f.at[1], seconds(1.0));
  EXPECT_NEAR(net.stats(seen).bytes_carried, 8e9, 1.0);
  expect_time(net.stats(seen).busy_time, seconds(2.0));
}

TEST(FlowNetwork, EqualFlowsOnOneLinkGetAnEqualShare) {
  // N = 4 flows of 10 GB on C = 40 GB/s: r_i = C / N = 10 GB/s, all end at 10 GB / 10 GB/s = 1 s.
  Simulator sim;
  FlowNetwork net(sim);
  const auto link = net.add_constraint("link", Bandwidth{40 * GB});
  Finish f;
  std::vector<FlowId> ids;
  for (std::size_t i = 0; i < 4; ++i)
    ids.push_back(start(net, sim, f, i, {{link}, Bytes{10'000'000'000}, TimePs{0}, {}}));
  for (const auto id : ids) EXPECT_DOUBLE_EQ(net.rate(id), 10 * GB);
  sim.run();
  for (std::size_t i = 0; i < 4; ++i) expect_time(f.at[i], seconds(1.0));
}

TEST(FlowNetwork, ABottleneckElsewhereFreesCapacity) {
  // Flow A crosses L1 (10 GB/s) and L2 (4 GB/s); flow B crosses L1 only.
  // Fair shares: L1 10/2 = 5, L2 4/1 = 4 -> L2 saturates first: r_A = 4.
  // L1 keeps 10 - 4 = 6 for B alone: r_B = 6.
  Simulator sim;
  FlowNetwork net(sim);
  const auto l1 = net.add_constraint("l1", Bandwidth{10 * GB});
  const auto l2 = net.add_constraint("l2", Bandwidth{4 * GB});
  Finish f;
  const auto a = start(net, sim, f, 0, {{l1, l2}, Bytes{4'000'000'000}, TimePs{0}, {}});
  const auto b = start(net, sim, f, 1, {{l1}, Bytes{6'000'000'000}, TimePs{0}, {}});
  EXPECT_DOUBLE_EQ(net.rate(a), 4 * GB);
  EXPECT_DOUBLE_EQ(net.rate(b), 6 * GB);
  sim.run();
  // Both move their bytes in exactly 1 s at those rates.
  expect_time(f.at[0], seconds(1.0));
  expect_time(f.at[1], seconds(1.0));
}

TEST(FlowNetwork, ABoundedFlowLeavesTheRestToOthers) {
  // Two flows on C = 10 GB/s, one bounded at B = 2 GB/s: r_bounded = 2, r_other = 10 - 2 = 8.
  Simulator sim;
  FlowNetwork net(sim);
  const auto link = net.add_constraint("link", Bandwidth{10 * GB});
  Finish f;
  const auto bounded = start(net, sim, f, 0, {{link}, Bytes{2'000'000'000}, TimePs{0}, Bandwidth{2 * GB}});
  const auto other = start(net, sim, f, 1, {{link}, Bytes{8'000'000'000}, TimePs{0}, {}});
  EXPECT_DOUBLE_EQ(net.rate(bounded), 2 * GB);
  EXPECT_DOUBLE_EQ(net.rate(other), 8 * GB);
  sim.run();
  expect_time(f.at[0], seconds(1.0));
  expect_time(f.at[1], seconds(1.0));
}

TEST(FlowNetwork, FlowsCrossingSharedDdrAndTheirOwnLink) {
  // 8 host-to-device copies, each crossing DDR (205 GB/s, shared) and its own 36 GB/s link.
  // DDR share 205 / 8 = 25.625 < 36, so every copy runs at 25.625 GB/s: DDR, not the link, binds.
  // A ninth flow on a link that does not cross DDR keeps its full 36 GB/s.
  Simulator sim;
  FlowNetwork net(sim);
  const auto ddr = net.add_constraint("ddr", Bandwidth{205 * GB});
  Finish f;
  std::vector<FlowId> copies;
  for (std::size_t i = 0; i < 8; ++i) {
    const auto link = net.add_constraint("cpu->gpu", Bandwidth{36 * GB});
    copies.push_back(start(net, sim, f, i, {{ddr, link}, Bytes{25'625'000'000}, TimePs{0}, {}}));
  }
  const auto peer = net.add_constraint("gpu->gpu", Bandwidth{36 * GB});
  const auto alone = start(net, sim, f, 8, {{peer}, Bytes{36'000'000'000}, TimePs{0}, {}});
  for (const auto id : copies) EXPECT_DOUBLE_EQ(net.rate(id), 205 * GB / 8);
  EXPECT_DOUBLE_EQ(net.rate(alone), 36 * GB);
  sim.run();
  for (std::size_t i = 0; i < 9; ++i) expect_time(f.at[i], seconds(1.0));
}

TEST(FlowNetwork, AFinishingFlowReleasesItsShare) {
  // A (10 GB) and B (20 GB) share C = 10 GB/s: 5 GB/s each until A ends at 10 / 5 = 2 s.
  // B then has 20 - 10 = 10 GB left at the full 10 GB/s: t_B = 2 + 1 = 3 s.
  Simulator sim;
  FlowNetwork net(sim);
  const auto link = net.add_constraint("link", Bandwidth{10 * GB});
  Finish f;
  start(net, sim, f, 0, {{link}, Bytes{10'000'000'000}, TimePs{0}, {}});
  start(net, sim, f, 1, {{link}, Bytes{20'000'000'000}, TimePs{0}, {}});
  sim.run();
  expect_time(f.at[0], seconds(2.0));
  expect_time(f.at[1], seconds(3.0));
}

TEST(FlowNetwork, NoBandwidthIsUsedDuringTheLatencyPhase) {
  // A: 15 GB, no latency. B: 10 GB, latency 1 s. C = 10 GB/s.
  // [0, 1]: A alone at 10 -> 10 GB moved, 5 left.  [1, 2]: 5 GB/s each -> A done at 2 s, B has 5 left.
  // [2, 2.5]: B alone at 10 -> done at 2.5 s.
  Simulator sim;
  FlowNetwork net(sim);
  const auto link = net.add_constraint("link", Bandwidth{10 * GB});
  Finish f;
  start(net, sim, f, 0, {{link}, Bytes{15'000'000'000}, TimePs{0}, {}});
  start(net, sim, f, 1, {{link}, Bytes{10'000'000'000}, parse_time("1 s"), {}});
  sim.run();
  expect_time(f.at[0], seconds(2.0));
  expect_time(f.at[1], seconds(2.5));
  // The link carried all 25 GB and was busy for the whole 2.5 s.
  net.sync_stats();
  EXPECT_NEAR(net.stats(link).bytes_carried, 25e9, 1.0);
  expect_time(net.stats(link).busy_time, seconds(2.5));
  EXPECT_DOUBLE_EQ(net.stats(link).peak_bytes_per_s, 10 * GB);
}

TEST(FlowNetwork, AFlowOnTheCallersRouteRunsAsOneOnItsOwnCopy) {
  // start_flow_on reads a route the caller keeps for the flow's life (the executor's task graph)
  // instead of copying it; the flow is the one start_flow makes. The latency-phase case above with
  // its second flow started that way: the same finishes (2 s and 2.5 s) and the same 25 GB over
  // the link; and a third flow, over a route listing the link twice, is held to half its capacity
  // (5 GB/s alone, 5 GB in 1 s after 2.5 s) and credits the link per listing.
  Simulator sim;
  FlowNetwork net(sim);
  const auto link = net.add_constraint("link", Bandwidth{10 * GB});
  Finish f;
  f.at.resize(3);
  const std::vector<ConstraintId> once{link};
  const std::vector<ConstraintId> twice{link, link};
  start(net, sim, f, 0, {{link}, Bytes{15'000'000'000}, TimePs{0}, {}});
  (void)net.start_flow_on(once, Bytes{10'000'000'000}, parse_time("1 s"), std::nullopt, [&] { f.at[1] = sim.now(); },
                          {});
  sim.schedule_at(seconds(2.5), EventPhase::kCompletion, [&] {
    (void)net.start_flow_on(twice, Bytes{5'000'000'000}, TimePs{0}, std::nullopt, [&] { f.at[2] = sim.now(); }, {});
  });
  sim.run();
  expect_time(f.at[0], seconds(2.0));
  expect_time(f.at[1], seconds(2.5));
  expect_time(f.at[2], seconds(3.5));
  net.sync_stats();
  EXPECT_NEAR(net.stats(link).bytes_carried, 25e9 + 2 * 5e9, 1.0);  // the third flow counted per listing
}

TEST(FlowNetwork, AnEmptyFlowCompletesAfterItsLatency) {
  Simulator sim;
  FlowNetwork net(sim);
  const auto link = net.add_constraint("link", Bandwidth{1 * GB});
  Finish f;
  start(net, sim, f, 0, {{link}, Bytes{0}, parse_time("3 us"), {}});
  sim.run();
  EXPECT_EQ(f.at[0].ps, parse_time("3 us").ps);
}

TEST(FlowNetwork, RecordsTheRateTimelineOfEachConstraint) {
  // Same scenario as AFinishingFlowReleasesItsShare: the link runs at 10 GB/s from 0 to 3 s.
  Simulator sim;
  FlowNetwork net(sim, /*record_timelines=*/true);
  const auto link = net.add_constraint("link", Bandwidth{10 * GB});
  const auto idle = net.add_constraint("idle", Bandwidth{10 * GB});
  Finish f;
  start(net, sim, f, 0, {{link}, Bytes{10'000'000'000}, TimePs{0}, {}});
  start(net, sim, f, 1, {{link}, Bytes{20'000'000'000}, TimePs{0}, {}});
  sim.run();
  const auto& tl = net.stats(link).timeline;
  ASSERT_EQ(tl.size(), 2u);
  EXPECT_EQ(tl[0].time.ps, 0);
  EXPECT_DOUBLE_EQ(tl[0].bytes_per_s, 10 * GB);
  expect_time(tl[1].time, seconds(3.0));
  EXPECT_DOUBLE_EQ(tl[1].bytes_per_s, 0.0);
  EXPECT_TRUE(net.stats(idle).timeline.size() <= 1);
}

// What a run of the solo scenario leaves: every flow's finish and every constraint's statistics.
struct SoloOutcome {
  std::vector<TimePs> finish;
  std::vector<double> bytes;
  std::vector<std::int64_t> busy_ps;
  std::vector<double> peak;
  std::size_t events = 0;
};

// Flows that start alone (solo), flows that join them before and after they are rated, a flow
// that takes freed links at the instant another leaves them, a bounded solo flow and a fixed-rate
// flow accounted on a solo flow's link. Recording timelines turns solo flows off (every flow goes
// through the per-constraint lists), so the two runs compare the solo path with the lists'.
SoloOutcome run_solo_scenario(bool record_timelines, bool statistics = true) {
  Simulator sim;
  FlowNetwork net(sim, record_timelines, /*record_credits=*/false, statistics);
  const auto a = net.add_constraint("a", Bandwidth{4 * GB});
  const auto b = net.add_constraint("b", Bandwidth{6 * GB});
  const auto c = net.add_constraint("c", Bandwidth{3 * GB});
  const auto d = net.add_constraint("d", Bandwidth{5 * GB});
  const auto e = net.add_constraint("e", Bandwidth{7 * GB});
  Finish f;
  f.at.resize(8);
  // t = 0: F0 over a and b twice (alone: min(4, 6 / 2) = 3 GB/s), F1 alone on c, then F2 joins b
  // before the flush rates F0.
  start(net, sim, f, 0, {{a, b, b}, Bytes{3'000'000'000}, TimePs{0}, {}});
  start(net, sim, f, 1, {{c}, Bytes{3'000'000'000}, TimePs{0}, {}});
  start(net, sim, f, 2, {{b}, Bytes{1'000'000'000}, TimePs{0}, {}});
  // t = 0.5 s: F3 joins F1 (rated at 0) on c; when F3 ends, F4 takes c and d at that instant (it
  // claims d alone first, then finds F1 listed on c: the claim on d is given back).
  sim.schedule_at(seconds(0.5), EventPhase::kStart, [&] {
    net.start_flow(FlowSpec{{c, d}, Bytes{1'000'000'000}, TimePs{0}, {}}, [&] {
      f.at[3] = sim.now();
      start(net, sim, f, 4, {{d, c}, Bytes{2'000'000'000}, TimePs{0}, {}});
    });
  });
  // A bounded solo flow (2 GB/s under e's 7 GB/s), and a fixed-rate flow accounted on e.
  start(net, sim, f, 5, {{e}, Bytes{4'000'000'000}, parse_time("1 us"), Bandwidth{2 * GB}});
  net.start_flow(FlowSpec{{}, Bytes{1'000'000'000}, TimePs{0}, Bandwidth{1 * GB}}, [&] { f.at[6] = sim.now(); }, {e});
  // A flow with latency that lands on a, alone again once F0 has gone.
  start(net, sim, f, 7, {{a}, Bytes{1'000'000'000}, parse_time("2 s"), {}});
  SoloOutcome out;
  sim.run();
  out.events = sim.events_processed();
  net.sync_stats();
  out.finish = f.at;
  for (const auto id : {a, b, c, d, e}) {
    out.bytes.push_back(net.stats(id).bytes_carried);
    out.busy_ps.push_back(net.stats(id).busy_time.ps);
    out.peak.push_back(net.stats(id).peak_bytes_per_s);
  }
  return out;
}

TEST(FlowNetwork, SoloFlowsRunAsTheListsRunThemToTheBit) {
  const SoloOutcome solo = run_solo_scenario(false);
  const SoloOutcome lists = run_solo_scenario(true);
  // The bounded solo flow: 1 us + 4 GB / 2 GB/s = 2.000001 s; F7: 2 s + 1 GB / 4 GB/s (a alone).
  expect_time(solo.finish[5], seconds(2.000001));
  expect_time(solo.finish[7], seconds(2.25));
  // The fixed-rate flow: 1 GB / 1 GB/s = 1 s; e carried its 1 GB and F5's 4 GB.
  expect_time(solo.finish[6], seconds(1.0));
  EXPECT_NEAR(solo.bytes[4], 5e9, 1.0);
  EXPECT_EQ(solo.events, lists.events);
  for (std::size_t i = 0; i < solo.finish.size(); ++i) {
    EXPECT_GT(solo.finish[i].ps, 0) << "flow " << i;
    EXPECT_EQ(solo.finish[i].ps, lists.finish[i].ps) << "flow " << i;
  }
  for (std::size_t i = 0; i < solo.bytes.size(); ++i) {
    EXPECT_EQ(solo.bytes[i], lists.bytes[i]) << "constraint " << i;
    EXPECT_EQ(solo.busy_ps[i], lists.busy_ps[i]) << "constraint " << i;
    EXPECT_EQ(solo.peak[i], lists.peak[i]) << "constraint " << i;
  }
}

TEST(FlowNetwork, WithoutStatisticsTheFlowsRunTheSameAndNoLinkActivityIsKept) {
  const SoloOutcome kept = run_solo_scenario(false);
  const SoloOutcome none = run_solo_scenario(false, /*statistics=*/false);
  EXPECT_EQ(kept.events, none.events);
  for (std::size_t i = 0; i < kept.finish.size(); ++i) EXPECT_EQ(kept.finish[i].ps, none.finish[i].ps) << "flow " << i;
  for (std::size_t i = 0; i < none.bytes.size(); ++i) {
    EXPECT_GT(kept.bytes[i], 0.0) << "constraint " << i;
    EXPECT_EQ(none.bytes[i], 0.0) << "constraint " << i;
    EXPECT_EQ(none.busy_ps[i], 0) << "constraint " << i;
    EXPECT_EQ(none.peak[i], 0.0) << "constraint " << i;
  }
}

TEST(FlowNetwork, RejectsZeroCapacity) {
  Simulator sim;
  FlowNetwork net(sim);
  EXPECT_THROW(net.add_constraint("dead", Bandwidth{0.0}), std::invalid_argument);
}

}  // namespace
}  // namespace offsim::sim
