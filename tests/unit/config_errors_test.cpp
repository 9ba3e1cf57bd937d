// Golden error messages: every bad input under tests/config_errors/ must fail to load with exactly
// the text in its .expected file (NAME.yaml -> NAME.expected, NAME.config.json ->
// NAME.config.expected). Each folder is read as the command that takes such files reads it:
//   tests/config_errors/*.yaml            experiments (offsim run: models::load_experiment)
//   tests/config_errors/models/           models and Hugging Face config.json (offsim model)
//   tests/config_errors/machines/         machines (offsim topo: topo::parse_machine)
//   tests/config_errors/sweeps/           sweep files (offsim sweep: models::load_sweep)
// Every message must be located (file:line:col: key.path: ...). Paths in messages are relative to
// the source directory (the cases are read by absolute path and the prefix taken out). OFFSIM_UPDATE_GOLDEN=1 rewrites
// the .expected files (review the diff before committing).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <regex>
#include <sstream>

#include "models/experiment.hpp"
#include "models/sweep.hpp"
#include "models/transformer/model_parser.hpp"
#include "sim/config/config_reader.hpp"
#include "tests/unit/source_paths.hpp"
#include "topologies/topology_parser.hpp"

namespace offsim::models {
namespace {

namespace fs = std::filesystem;

std::string read_file(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The include policy as a user gets it, whatever the test process's environment (the unit tests
// run with OFFSIM_ALLOW_INCLUDE_OUTSIDE=1 for their temporary experiments).
class DefaultIncludePolicy {
 public:
  DefaultIncludePolicy() {
    if (const char* v = std::getenv(sim::config::kAllowIncludeOutsideEnv)) saved_ = v;
    ::unsetenv(sim::config::kAllowIncludeOutsideEnv);
  }
  ~DefaultIncludePolicy() {
    if (saved_) ::setenv(sim::config::kAllowIncludeOutsideEnv, saved_->c_str(), 1);
  }
  DefaultIncludePolicy(const DefaultIncludePolicy&) = delete;
  DefaultIncludePolicy& operator=(const DefaultIncludePolicy&) = delete;

 private:
  std::optional<std::string> saved_;
};

// Loads every case of `folder` (files ending in one of `extensions`, not its subfolders) with
// `load` and compares the error with the case's .expected file. Returns the number of cases.
std::size_t check_golden(const fs::path& folder, const std::vector<std::string>& extensions,
                         const std::function<void(const fs::path&)>& load) {
  const bool update = std::getenv("OFFSIM_UPDATE_GOLDEN") != nullptr;
  const DefaultIncludePolicy policy;
  std::vector<fs::path> cases;
  for (const auto& entry : fs::directory_iterator(fs::path(OFFSIM_SOURCE_DIR) / folder)) {
    if (!entry.is_regular_file()) continue;
    const std::string ext = entry.path().extension().string();
    if (std::find(extensions.begin(), extensions.end(), ext) != extensions.end()) cases.push_back(entry.path());
  }
  std::sort(cases.begin(), cases.end());
  // Every line names a file, its line and column, then the key: "f.yaml:12:3: a.b: why".
  const std::regex located(R"(^[^:\s]+:[0-9]+:[0-9]+: [^ ]+: .+)");
  for (const auto& file : cases) {
    SCOPED_TRACE(file.string());
    std::string message;
    try {
      load(file);
    } catch (const sim::config::ConfigError& e) {
      message = testing::relative_to_source(std::string(e.what()) + "\n");
    }
    EXPECT_FALSE(message.empty()) << "expected a configuration error";
    if (message.empty()) continue;
    std::istringstream lines(message);
    for (std::string line; std::getline(lines, line);) {
      EXPECT_TRUE(std::regex_match(line, located)) << "not located: " << line;
    }
    fs::path expected = file;
    expected.replace_extension(".expected");
    if (update) {
      std::ofstream(expected) << message;
      continue;
    }
    EXPECT_EQ(message, read_file(expected));
  }
  return cases.size();
}

TEST(ConfigErrors, GoldenMessages) {
  const std::size_t cases =
      check_golden("tests/config_errors", {".yaml"}, [](const fs::path& file) { (void)load_experiment(file, {}); });
  EXPECT_GE(cases, 37u);
}

TEST(ConfigErrors, GoldenMessagesThroughASweepsCaches) {
  // As a sweep's points read them: every case twice, all through one ReadCache and file cache, so
  // that what one case read without errors (a machine, a table, a model, a strategy, a training
  // section) is taken from the cache by the next ones. The messages must be the same.
  const sim::config::ScopedFileCache files;
  ReadCache cache;
  const std::size_t cases = check_golden("tests/config_errors", {".yaml"}, [&](const fs::path& file) {
    try {
      (void)load_experiment(file, {}, &cache);
    } catch (const sim::config::ConfigError&) {
    }
    (void)load_experiment(file, {}, &cache);
  });
  EXPECT_GE(cases, 37u);
  EXPECT_GT(cache.size(), 0u);
}

TEST(ConfigErrors, ADevicesPerNodeListReadAgainNamesTheSameDevicesOfItsOwnMachine) {
  // A worker expands a devices_per_node list it read without an error once per machine and list
  // (sections.cpp): a search's strategies list the same node GPUs on 128 nodes for every point.
  const sim::config::ScopedFileCache files;
  const fs::path job = fs::path(OFFSIM_SOURCE_DIR) / "configs/experiments/scale/gpt3-175b-a100-1024.yaml";
  const auto devices = [&](const std::vector<std::string>& overrides) {
    return std::get<MegatronSpec>(load_experiment(job, overrides).strategy).devices;
  };
  const std::vector<std::string> first = devices({});
  ASSERT_EQ(first.size(), 1024u);  // tp 8 x pp 8 x dp 16, node by node
  EXPECT_EQ(first.front(), "n0.gpu0");
  EXPECT_EQ(first[9], "n1.gpu1");
  EXPECT_EQ(first.back(), "n127.gpu7");
  EXPECT_EQ(devices({"strategy.zero_stage=0"}), first);  // another strategy, the same list: the same devices
  // Another machine (2 nodes), the same list: its own 16 devices, not the 1,024 of the first.
  const std::vector<std::string> two_nodes = devices({"hardware.nodes=2", "strategy.pp=2", "strategy.dp=1"});
  ASSERT_EQ(two_nodes.size(), 16u);
  EXPECT_EQ(two_nodes.back(), "n1.gpu7");
  // A list with an error is reported each time it is read.
  for (int time = 0; time < 2; ++time) {
    SCOPED_TRACE(time);
    try {
      (void)devices({"strategy.devices_per_node=[gpu0, gpu1, gpu2, gpu3, gpu4, gpu5, gpu6, gpu6]"});
      ADD_FAILURE() << "expected a configuration error";
    } catch (const sim::config::ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("device \"n0.gpu6\" is listed twice"), std::string::npos) << e.what();
    }
  }
}

TEST(ConfigErrors, GoldenModelMessages) {
  // As `offsim model` reads a model: an offsim model or a Hugging Face config.json.
  const std::size_t cases = check_golden("tests/config_errors/models", {".yaml", ".json"}, [](const fs::path& file) {
    sim::config::Context ctx;
    (void)parse_model(ctx.load_root(file));
    ctx.finish();
  });
  EXPECT_GE(cases, 11u);
}

TEST(ConfigErrors, GoldenMachineMessages) {
  // As `offsim topo` reads a machine.
  const std::size_t cases = check_golden("tests/config_errors/machines", {".yaml"}, [](const fs::path& file) {
    sim::config::Context ctx;
    (void)topo::parse_machine(ctx.load_root(file));
    ctx.finish();
  });
  EXPECT_GE(cases, 8u);
}

TEST(ConfigErrors, GoldenSweepMessages) {
  const std::size_t cases =
      check_golden("tests/config_errors/sweeps", {".yaml"}, [](const fs::path& file) { (void)load_sweep(file); });
  EXPECT_GE(cases, 5u);
}

}  // namespace
}  // namespace offsim::models
