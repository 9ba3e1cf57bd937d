#include <gtest/gtest.h>

#include <vector>

#include "sim/core/errors.hpp"
#include "sim/resources/compute_unit.hpp"
#include "sim/resources/memory_pool.hpp"

namespace offsim::sim {
namespace {

TEST(ComputeUnit, OneLaneRunsTasksBackToBackInPriorityOrder) {
  // Three 10 ps tasks submitted at t=0 on one lane: they run in (priority, order) order,
  // ending at 10, 20, 30 ps; busy time is 30 ps.
  Simulator sim;
  ComputeUnit unit(sim, "gpu0.stream", 1);
  std::vector<std::pair<int, std::int64_t>> ends;
  const auto submit = [&](int tag, std::int64_t priority, std::uint64_t order) {
    unit.submit(TimePs{10}, priority, order, {}, [&, tag] { ends.emplace_back(tag, sim.now().ps); });
  };
  sim.schedule_at(TimePs{0}, EventPhase::kStart, [&] {
    submit(1, 5, 0);  // starts at once: the lane is free
    submit(2, 9, 1);
    submit(3, 0, 2);  // higher priority than 2: runs second
  });
  sim.run();
  EXPECT_EQ(ends, (std::vector<std::pair<int, std::int64_t>>{{1, 10}, {3, 20}, {2, 30}}));
  EXPECT_EQ(unit.busy_time().ps, 30);
  EXPECT_EQ(unit.tasks_run(), 3u);
}

TEST(ComputeUnit, LanesRunInParallel) {
  // Four 10 ps tasks on two lanes end at 10, 10, 20, 20 ps; busy time is 40 lane-ps.
  Simulator sim;
  ComputeUnit unit(sim, "cpu", 2);
  std::vector<std::int64_t> ends;
  sim.schedule_at(TimePs{0}, EventPhase::kStart, [&] {
    for (std::uint64_t i = 0; i < 4; ++i) unit.submit(TimePs{10}, 0, i, {}, [&] { ends.push_back(sim.now().ps); });
  });
  sim.run();
  EXPECT_EQ(ends, (std::vector<std::int64_t>{10, 10, 20, 20}));
  EXPECT_EQ(unit.busy_time().ps, 40);
}

TEST(MemoryPool, TracksPeakTimelineAndTenants) {
  MemoryPool pool("gcd0.hbm", "hbm", Bytes{100});
  pool.reserve(TimePs{0}, "parameters", Bytes{40});
  pool.reserve(TimePs{5}, "activations", Bytes{30});
  pool.release(TimePs{9}, "activations", Bytes{30});
  EXPECT_EQ(pool.used().count, 40);
  EXPECT_EQ(pool.peak().count, 70);
  EXPECT_EQ(pool.peak_time().ps, 5);
  EXPECT_FALSE(pool.overflow().has_value());
  ASSERT_EQ(pool.timeline().size(), 3u);
  EXPECT_EQ(pool.timeline()[1].used.count, 70);
  EXPECT_EQ(pool.timeline()[2].time.ps, 9);
  EXPECT_EQ(pool.held_by("parameters").count, 40);
}

TEST(MemoryPool, OverflowIsAResultWithTheTopTenants) {
  MemoryPool pool("gcd0.hbm", "hbm", Bytes{100});
  pool.reserve(TimePs{0}, "parameters", Bytes{60});
  pool.reserve(TimePs{1}, "activations", Bytes{30});
  pool.reserve(TimePs{2}, "buckets", Bytes{25});  // 115: over by 15
  pool.release(TimePs{3}, "buckets", Bytes{25});
  pool.reserve(TimePs{4}, "buckets", Bytes{20});  // 110: a smaller overflow, not the worst
  ASSERT_TRUE(pool.overflow().has_value());
  const auto& o = *pool.overflow();
  EXPECT_EQ(o.time.ps, 2);
  EXPECT_EQ(o.used.count, 115);
  EXPECT_EQ(o.excess.count, 15);
  ASSERT_EQ(o.top_tenants.size(), 3u);
  EXPECT_EQ(o.top_tenants[0].tenant, "parameters");
  EXPECT_EQ(o.top_tenants[1].tenant, "activations");
  EXPECT_EQ(o.top_tenants[2].tenant, "buckets");
}

TEST(MemoryPool, ATenantIsItsNameHoweverGivenAndTiesAreListedByName) {
  // Tenants are interned names (sim::Tenant): the same text from two strings is one tenant. An
  // overflow lists the largest holders first and equal ones by name: 50 + 30 + 30 = 110 > 100.
  MemoryPool pool("gcd0.hbm", "hbm", Bytes{100});
  const std::string built = std::string("param") + "eters";
  pool.reserve(TimePs{0}, built, Bytes{50});
  pool.reserve(TimePs{1}, "zeta", Bytes{30});
  pool.reserve(TimePs{2}, "alpha", Bytes{30});
  pool.release(TimePs{3}, "parameters", Bytes{10});
  EXPECT_EQ(pool.held_by(std::string("parameters")).count, 40);
  ASSERT_TRUE(pool.overflow().has_value());
  const auto& top = pool.overflow()->top_tenants;
  ASSERT_EQ(top.size(), 3u);
  EXPECT_EQ(top[0].tenant, "parameters");
  EXPECT_EQ(top[1].tenant, "alpha");
  EXPECT_EQ(top[2].tenant, "zeta");
}

TEST(MemoryPool, ReleasingMoreThanHeldIsASimulationError) {
  MemoryPool pool("dram", "dram", Bytes{100});
  pool.reserve(TimePs{0}, "a", Bytes{10});
  EXPECT_THROW(pool.release(TimePs{1}, "a", Bytes{11}), SimulationError);
  EXPECT_THROW(pool.release(TimePs{1}, "b", Bytes{1}), SimulationError);
}

}  // namespace
}  // namespace offsim::sim
