#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "sim/core/errors.hpp"
#include "sim/core/simulator.hpp"

namespace offsim::sim {
namespace {

TEST(Simulator, OrdersByTimeThenPhaseThenInsertion) {
  Simulator sim;
  std::vector<std::string> order;
  sim.schedule_at(TimePs{10}, EventPhase::kStart, [&] { order.push_back("t10-start-a"); });
  sim.schedule_at(TimePs{10}, EventPhase::kCompletion, [&] { order.push_back("t10-completion"); });
  sim.schedule_at(TimePs{5}, EventPhase::kStart, [&] { order.push_back("t5"); });
  sim.schedule_at(TimePs{10}, EventPhase::kStart, [&] { order.push_back("t10-start-b"); });
  sim.run();
  EXPECT_EQ(order, (std::vector<std::string>{"t5", "t10-completion", "t10-start-a", "t10-start-b"}));
  EXPECT_EQ(sim.now().ps, 10);
  EXPECT_EQ(sim.events_processed(), 4u);
}

TEST(Simulator, EventsMayScheduleEventsAtTheSameTime) {
  Simulator sim;
  int fired = 0;
  sim.schedule_at(TimePs{7}, EventPhase::kStart,
                  [&] { sim.schedule_after(TimePs{0}, EventPhase::kStart, [&] { ++fired; }); });
  sim.run();
  EXPECT_EQ(fired, 1);
  EXPECT_EQ(sim.now().ps, 7);
}

TEST(Simulator, TimeNeverGoesBackwards) {
  Simulator sim;
  sim.schedule_at(TimePs{100}, EventPhase::kStart, [&] { sim.schedule_at(TimePs{50}, EventPhase::kStart, [] {}); });
  EXPECT_THROW(sim.run(), SimulationError);
}

TEST(Simulator, TwoSimulationsDoNotInterfere) {
  Simulator a;
  Simulator b;
  int in_a = 0;
  int in_b = 0;
  a.schedule_at(TimePs{3}, EventPhase::kStart, [&] { ++in_a; });
  b.schedule_at(TimePs{9}, EventPhase::kStart, [&] { ++in_b; });
  b.schedule_at(TimePs{11}, EventPhase::kStart, [&] { ++in_b; });
  a.run();
  EXPECT_EQ(a.now().ps, 3);
  EXPECT_EQ(b.now().ps, 0);
  EXPECT_EQ(b.pending_events(), 2u);
  b.run();
  EXPECT_EQ(in_a, 1);
  EXPECT_EQ(in_b, 2);
  EXPECT_EQ(b.now().ps, 11);
}

// A simulator destroyed with events still queued (a run that threw, or one never run) destroys
// each of their callbacks once: events in buckets of several digits (times 2^8 to 2^40 ps apart),
// in a bucket used, emptied and used again, and in the current time's FIFO. Each callback holds a
// copy of `token`; after the simulator is gone, only the test's own copy is left.
TEST(Simulator, QueuedEventsCallbacksAreDestroyedWithTheSimulator) {
  const auto token = std::make_shared<int>(0);
  {
    Simulator sim;
    std::int64_t ran = 0;
    sim.schedule_at(TimePs{300}, EventPhase::kStart, [&ran, token] { ++ran; });
    sim.run();  // the bucket of 300 emptied; now = 300
    EXPECT_EQ(ran, 1);
    for (const std::int64_t at : {300LL, 301LL, 600LL, 300LL + (1LL << 20), 300LL + (1LL << 40)}) {
      sim.schedule_at(TimePs{at}, EventPhase::kCompletion, [&ran, token] { ++ran; });
    }
    sim.schedule_at(TimePs{301}, EventPhase::kStart, [&ran, token] { ++ran; });  // the 301 bucket again
    EXPECT_EQ(token.use_count(), 7);
    EXPECT_EQ(sim.pending_events(), 6u);
  }
  EXPECT_EQ(token.use_count(), 1);
}

// The queue against its definition: events come out by (time, phase, insertion). 60,000 events
// (many blocks per bucket, times spanning 40 bits, many equal times, both phases at one time) are
// run by the Simulator and by a reference ordered set; each event schedules up to two more from a
// fixed pseudo-random sequence, so both runs see the same schedule calls in the same order.
TEST(Simulator, OrderEqualsTheTimePhaseInsertionOrder) {
  struct Event {
    std::int64_t at;
    int phase;
    std::uint64_t id;
  };
  // Deterministic choices from an event's id: delays of 0 (same time), a few ps, or up to 2^40 ps.
  const auto children = [](std::uint64_t id, std::int64_t now, std::uint64_t& next_id) {
    std::vector<Event> out;
    std::uint64_t h = id * 0x9E3779B97F4A7C15ULL + 1;
    const auto draw = [&h] {
      h ^= h >> 29;
      h *= 0xBF58476D1CE4E5B9ULL;
      h ^= h >> 32;
      return h;
    };
    const int n = next_id < 60'000 ? static_cast<int>(draw() % 3) : 0;
    for (int k = 0; k < n; ++k) {
      const std::uint64_t r = draw();
      const std::int64_t delay = r % 4 == 0   ? 0
                                 : r % 4 == 1 ? static_cast<std::int64_t>(r >> 40) % 8
                                              : static_cast<std::int64_t>((r >> 8) % (std::uint64_t{1} << 40));
      out.push_back({now + delay, static_cast<int>((r >> 3) & 1), next_id++});
    }
    return out;
  };
  std::vector<Event> first;
  std::uint64_t ids = 0;
  for (int i = 0; i < 2'000; ++i) {
    first.push_back({static_cast<std::int64_t>((static_cast<std::uint64_t>(i) * 7919) % 5000), i % 2, ids++});
  }

  std::vector<std::uint64_t> expected;
  {
    std::uint64_t next_id = ids;
    std::uint64_t seq = 0;
    std::set<std::tuple<std::int64_t, int, std::uint64_t, std::uint64_t>> queue;  // time, phase, insertion, id
    for (const Event& e : first) queue.emplace(e.at, e.phase, seq++, e.id);
    while (!queue.empty()) {
      const auto [at, phase, s, id] = *queue.begin();
      queue.erase(queue.begin());
      expected.push_back(id);
      for (const Event& c : children(id, at, next_id)) queue.emplace(c.at, c.phase, seq++, c.id);
    }
  }

  std::vector<std::uint64_t> got;
  {
    Simulator sim;
    std::uint64_t next_id = ids;
    std::function<void(const Event&)> schedule = [&](const Event& e) {
      sim.schedule_at(TimePs{e.at}, e.phase == 0 ? EventPhase::kCompletion : EventPhase::kStart, [&, id = e.id] {
        got.push_back(id);
        for (const Event& c : children(id, sim.now().ps, next_id)) schedule(c);
      });
    };
    for (const Event& e : first) schedule(e);
    sim.run();
    EXPECT_EQ(sim.pending_events(), 0u);
  }
  ASSERT_GT(expected.size(), 50'000u);
  EXPECT_EQ(got, expected);
}

}  // namespace
}  // namespace offsim::sim
