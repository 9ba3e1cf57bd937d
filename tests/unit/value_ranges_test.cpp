// The native experiment reader and the ds_config reader take the same values of each key they
// share, from one definition (models/strategies/value_ranges.hpp; issue 32: a ds_config offload
// ratio of -1 crashed the simulator while the native key refused it). Each value is set with --set
// on the same run written both ways (configs/experiments/llama-13b-offload-polaris*.yaml), and the
// two readers must both accept it or both refuse it at its key.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <limits>
#include <string>
#include <variant>
#include <vector>

#include "models/experiment.hpp"
#include "sim/config/value_range.hpp"
#include "tests/unit/source_paths.hpp"

namespace offsim::models {
namespace {

// The error message when loading `file` with `set` fails, or "" when it loads.
std::string load_error(const std::string& file, const std::string& set) {
  try {
    (void)load_experiment(testing::in_source(file), {set});
  } catch (const sim::config::ConfigError& e) {
    return e.what();
  }
  return "";
}

struct SharedKey {
  std::string native, ds;
  std::vector<std::string> values;
};

TEST(ValueRanges, NativeAndDeepSpeedReadersAgreeOnEverySharedKey) {
  const std::string native = "configs/experiments/llama-13b-offload-polaris.yaml";
  const std::string ds = "configs/experiments/llama-13b-offload-polaris-dsconfig.yaml";
  // Integer keys get integers only: a ds_config writes sizes as JSON numbers (5e8), the native
  // YAML as integers, a difference of notation, not of range.
  const std::vector<std::string> reals{"-1e308", "-1", "-0.5", "0", "1e-9", "0.5", "1", "1.5", "2", "1e6", ".nan"};
  const std::vector<std::string> sizes{
      "-1", "0", "1", "100000000", "1000000000000000", "1000000000000001", "9000000000000000000"};
  const std::vector<SharedKey> keys{
      {"strategy.offload_optimizer.ratio", "zero_optimization.offload_optimizer.ratio", reals},
      {"strategy.offload_optimizer.sub_group_size", "zero_optimization.sub_group_size", sizes},
      {"strategy.reduce_bucket_elements", "zero_optimization.reduce_bucket_size", sizes},
      {"strategy.param_persistence_threshold", "zero_optimization.stage3_param_persistence_threshold", sizes},
      {"strategy.zero_stage", "zero_optimization.stage", {"-1", "3", "4", "2147483647"}},
  };
  int refused = 0;
  for (const auto& key : keys) {
    for (const auto& v : key.values) {
      SCOPED_TRACE(fmt::format("{} / {} = {}", key.native, key.ds, v));
      const std::string a = load_error(native, fmt::format("{}={}", key.native, v));
      const std::string b = load_error(ds, fmt::format("strategy.config.{}={}", key.ds, v));
      EXPECT_EQ(a.empty(), b.empty()) << "native: " << a << "\nds_config: " << b;
      if (!a.empty()) {
        ++refused;
        EXPECT_NE(a.find(key.native + ": "), std::string::npos) << a;
        EXPECT_NE(b.find(key.ds + ": "), std::string::npos) << b;
      }
    }
  }
  EXPECT_GE(refused, 20);  // the test exercises refusals, not only values both take
}

// A strategy the builders refuse (a defence behind the readers) is bad input located at the
// strategy, not an unlocated exit 2.
TEST(ValueRanges, WhatTheBuildersRefuseIsLocatedAtTheStrategy) {
  ExperimentSpec spec = load_experiment(testing::in_source("tests/data/tiny-dp2.yaml"), {});
  std::get<DataParallelSpec>(spec.strategy).zero_stage = 7;  // past the readers, as no file can set it
  try {
    (void)run_experiment(spec);
    ADD_FAILURE() << "expected a configuration error";
  } catch (const sim::config::ConfigError& e) {
    EXPECT_EQ(testing::relative_to_source(e.what()),
              "tests/data/tiny-dp2.yaml:9:9: strategy: zero_stage: expected 0 to 3 (ZeRO's stages), got 7");
  }
}

// The messages name the range and why its bounds.
TEST(ValueRanges, MessagesSayTheRangeAndItsReason) {
  const sim::config::ValueRange<double> share{0, 1, false, "DeepSpeed's range"};
  EXPECT_EQ(share.expected(), "expected 0 to 1 (DeepSpeed's range)");
  const sim::config::ValueRange<double> size{1, 1e15, false, ""};
  EXPECT_EQ(size.expected(), "expected 1 to 1e+15");
  const sim::config::ValueRange<int> open{0, 3, true, "x"};
  EXPECT_EQ(open.expected(), "expected more than 0 and at most 3 (x)");
  EXPECT_FALSE(share.contains(std::numeric_limits<double>::quiet_NaN()));
  EXPECT_TRUE(share.contains(0.0));
  EXPECT_FALSE(open.contains(0));
  EXPECT_TRUE(open.contains(3));
}

}  // namespace
}  // namespace offsim::models
