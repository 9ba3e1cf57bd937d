#include <gtest/gtest.h>

#include <string>
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

}  // namespace
}  // namespace offsim::sim
