// Golden error messages: every tests/config_errors/NAME.yaml must fail to load with exactly the
// text in NAME.expected. Paths in messages are relative to the source directory, where the test
// runs. OFFSIM_UPDATE_GOLDEN=1 rewrites the .expected files (review the diff before committing).
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "models/experiment.hpp"

namespace offsim::models {
namespace {

namespace fs = std::filesystem;

std::string read_file(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST(ConfigErrors, GoldenMessages) {
  fs::current_path(OFFSIM_SOURCE_DIR);
  const bool update = std::getenv("OFFSIM_UPDATE_GOLDEN") != nullptr;
  std::vector<fs::path> cases;
  for (const auto& entry : fs::directory_iterator("tests/config_errors")) {
    if (entry.path().extension() == ".yaml") cases.push_back(entry.path());
  }
  std::sort(cases.begin(), cases.end());
  ASSERT_GE(cases.size(), 5u);
  for (const auto& yaml : cases) {
    SCOPED_TRACE(yaml.string());
    std::string message;
    try {
      (void)load_experiment(yaml, {});
    } catch (const sim::config::ConfigError& e) {
      message = std::string(e.what()) + "\n";
    }
    ASSERT_FALSE(message.empty()) << "expected a configuration error";
    fs::path expected = yaml;
    expected.replace_extension(".expected");
    if (update) {
      std::ofstream(expected) << message;
      continue;
    }
    EXPECT_EQ(message, read_file(expected));
  }
}

}  // namespace
}  // namespace offsim::models
