// Golden task graphs: the text dump (`offsim graph`) of tiny experiments, one per strategy and
// mechanism, compared line by line with tests/golden/graphs/NAME.graph. A builder refactoring
// must keep them byte-identical; a change of the model changes them on purpose: re-record with
// OFFSIM_UPDATE_GOLDEN=1, read the diff and explain it in the commit message.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <variant>
#include <vector>

#include "models/experiment.hpp"

namespace offsim::models {
namespace {

namespace fs = std::filesystem;

struct GraphCase {
  std::string name;                    // tests/golden/graphs/NAME.graph
  std::string experiment;              // under tests/data/
  std::vector<std::string> overrides;  // --set key=value
};

const std::vector<GraphCase>& cases() {
  static const std::vector<GraphCase> all{
      {"dp2-zero0", "tiny-dp2.yaml", {}},
      {"dp2-zero1", "tiny-dp2.yaml", {"strategy.zero_stage=1"}},
      {"dp2-zero2-overlap-two-buckets",
       "tiny-dp2.yaml",
       {"strategy.zero_stage=2", "strategy.overlap_comm=true", "strategy.reduce_bucket_elements=60000"}},
      {"dp2-zero3", "tiny-dp2.yaml", {"strategy.zero_stage=3"}},
      {"dp2-zero3-blocking-fetch", "tiny-dp2.yaml", {"strategy.zero_stage=3", "strategy.zero3_fetch=blocking"}},
      {"dp2-zero3-ga2", "tiny-dp2.yaml", {"strategy.zero_stage=3", "training.grad_accum=2"}},
      {"tp2", "tiny-dp2.yaml", {"strategy.tp=2", "strategy.dp=1"}},
      {"offload-cpu", "tiny-offload.yaml", {}},
      {"offload-param", "tiny-offload-param.yaml", {}},
      {"moe-ep2", "tiny-moe-dp2.yaml", {"strategy.ep=2"}},
      {"megatron-pp2-1f1b", "tiny-megatron-pp2.yaml", {}},
      {"megatron-pp2-uneven", "tiny-megatron-pp2.yaml", {"model.layers=3"}},
      {"megatron-cp2", "tiny-megatron-pp2.yaml", {"strategy.pp=1", "strategy.cp=2", "training.flash_attention=true"}},
      {"collective-allgather", "tiny-allgather.yaml", {}},
  };
  return all;
}

std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST(GoldenGraphs, TinyExperimentsBuildTheirRecordedTaskGraphs) {
  const fs::path source(OFFSIM_SOURCE_DIR);
  const bool update = std::getenv("OFFSIM_UPDATE_GOLDEN") != nullptr;
  for (const auto& c : cases()) {
    SCOPED_TRACE(c.name);
    const std::string graph =
        dump_task_graph(load_experiment(source / "tests/data" / c.experiment, c.overrides), false);
    const fs::path golden = source / "tests/golden/graphs" / (c.name + ".graph");
    if (update) {
      fs::create_directories(golden.parent_path());
      std::ofstream(golden, std::ios::binary) << graph;
      continue;
    }
    ASSERT_TRUE(fs::exists(golden)) << golden << " is missing: record it with OFFSIM_UPDATE_GOLDEN=1";
    const std::string expected = read_file(golden);
    if (graph == expected) continue;
    // Point at the first line that differs rather than printing two whole graphs.
    std::istringstream got(graph), want(expected);
    std::string g, w;
    for (int line = 1;; ++line) {
      const bool more_got = static_cast<bool>(std::getline(got, g));
      const bool more_want = static_cast<bool>(std::getline(want, w));
      if (!more_got && !more_want) break;
      if (g != w || more_got != more_want) {
        ADD_FAILURE() << golden << ":" << line << " differs\n  golden: " << (more_want ? w : "<end>")
                      << "\n  built:  " << (more_got ? g : "<end>");
        break;
      }
    }
  }
}

TEST(GoldenGraphs, EveryStrategyKindHasAGoldenGraph) {
  // Every alternative of StrategySpec (data_parallel, collective, megatron; `deepspeed` reads into
  // data_parallel) and every ZeRO stage of data_parallel builds at least one golden graph, read
  // from the cases' loaded specs: a new strategy kind fails here until it has a case.
  const fs::path source(OFFSIM_SOURCE_DIR);
  std::vector<bool> kinds(std::variant_size_v<StrategySpec>, false);
  int zero_stages_seen = 0;
  for (const auto& c : cases()) {
    const ExperimentSpec spec = load_experiment(source / "tests/data" / c.experiment, c.overrides);
    kinds[spec.strategy.index()] = true;
    if (const auto* dp = std::get_if<DataParallelSpec>(&spec.strategy)) zero_stages_seen |= 1 << dp->zero_stage;
  }
  for (std::size_t k = 0; k < kinds.size(); ++k) EXPECT_TRUE(kinds[k]) << "StrategySpec alternative " << k;
  EXPECT_TRUE(kinds[StrategySpec(MegatronSpec{}).index()]);  // the pipeline schedules
  EXPECT_EQ(zero_stages_seen, 0b1111);
}

}  // namespace
}  // namespace offsim::models
