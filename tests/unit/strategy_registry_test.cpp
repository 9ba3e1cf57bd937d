// The strategy registry (models/strategies/strategy_registry.hpp): one entry per StrategySpec
// alternative, each named as a kind the readers know, and the properties the call sites ask.
#include <gtest/gtest.h>

#include <algorithm>

#include "models/experiment.hpp"
#include "models/strategies/strategy_registry.hpp"

namespace offsim::models {
namespace {

TEST(StrategyRegistry, OneEntryPerAlternativeNamedAsAReaderKind) {
  const auto& registry = strategy_registry();
  ASSERT_EQ(registry.size(), std::variant_size_v<StrategySpec>);
  const auto readers = list_strategies();
  for (std::size_t i = 0; i < registry.size(); ++i) {
    SCOPED_TRACE(registry[i].name);
    EXPECT_TRUE(std::any_of(readers.begin(), readers.end(), [&](const auto& r) { return r.kind == registry[i].name; }));
  }
  EXPECT_STREQ(strategy_kind(StrategySpec{DataParallelSpec{}}).name, "data_parallel");
  EXPECT_STREQ(strategy_kind(StrategySpec{CollectiveSpec{}}).name, "collective");
  EXPECT_STREQ(strategy_kind(StrategySpec{MegatronSpec{}}).name, "megatron");
}

TEST(StrategyRegistry, PropertiesTheCallSitesAsk) {
  DataParallelSpec dp;
  dp.devices = {"a", "b", "c", "d"};
  dp.tp = 2;
  const StrategySpec data_parallel{dp};
  const auto& d = strategy_kind(data_parallel);
  EXPECT_TRUE(d.trains);
  EXPECT_FALSE(d.runs_transformer_engine);
  EXPECT_EQ(d.devices(data_parallel).size(), 4u);
  EXPECT_EQ(d.replicas(data_parallel), 2);  // 4 ranks over tp 2
  EXPECT_FALSE(d.steady_state_period(data_parallel));

  MegatronSpec mg;
  mg.pp = 4;
  mg.dp = 3;
  StrategySpec megatron{mg};
  const auto& m = strategy_kind(megatron);
  EXPECT_TRUE(m.trains);
  EXPECT_TRUE(m.runs_transformer_engine);
  EXPECT_EQ(m.replicas(megatron), 3);
  EXPECT_EQ(m.steady_state_period(megatron), 4);
  EXPECT_TRUE(m.simulate_all_micro_batches(megatron));
  EXPECT_FALSE(m.steady_state_period(megatron));  // every micro-batch simulated now

  StrategySpec collective{CollectiveSpec{}};
  const auto& c = strategy_kind(collective);
  EXPECT_FALSE(c.trains);
  EXPECT_EQ(c.replicas(collective), 1);
  EXPECT_FALSE(c.simulate_all_micro_batches(collective));
}

TEST(DeviceNames, CopiesShareTheListUntilOneChanges) {
  // A spec's copies share its names (the same vector, not equal ones); a push_back gives the
  // changed copy a list of its own and leaves the others as they were.
  MegatronSpec a;
  a.devices = std::vector<std::string>{"g0", "g1"};
  MegatronSpec b = a;
  EXPECT_EQ(&a.devices.list(), &b.devices.list());
  b.devices.push_back("g2");
  EXPECT_NE(&a.devices.list(), &b.devices.list());
  EXPECT_EQ(a.devices.list(), (std::vector<std::string>{"g0", "g1"}));
  EXPECT_EQ(b.devices.list(), (std::vector<std::string>{"g0", "g1", "g2"}));
  // The only owner appends in place; an empty list reads as empty and takes names.
  const std::vector<std::string>* before = &b.devices.list();
  b.devices.push_back("g3");
  EXPECT_EQ(&b.devices.list(), before);
  DeviceNames none;
  EXPECT_TRUE(none.empty());
  none.push_back("x");
  EXPECT_EQ(none.size(), 1u);
  EXPECT_EQ(none[0], "x");
}

}  // namespace
}  // namespace offsim::models
