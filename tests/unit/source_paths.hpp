#pragma once
// Tests read the repository's files by absolute path (OFFSIM_SOURCE_DIR) and never change their
// working directory; what they compare names files as a user in the source directory sees them.
#include <unistd.h>

#include <filesystem>
#include <string>

namespace offsim::testing {

/// `text` with the source directory's prefix ("<OFFSIM_SOURCE_DIR>/") taken out of every path.
inline std::string relative_to_source(std::string text) {
  const std::string prefix = std::string(OFFSIM_SOURCE_DIR) + "/";
  for (auto at = text.find(prefix); at != std::string::npos; at = text.find(prefix, at)) text.erase(at, prefix.size());
  return text;
}

/// The absolute path of `relative`, a path inside the source directory.
inline std::string in_source(const std::string& relative) {
  return std::string(OFFSIM_SOURCE_DIR) + "/" + relative;
}

/// A scratch folder `<temp>/<name>-<pid>`, created: one per test process, since ctest runs every
/// test case as its own process, two at a time, and two of them writing the same file in a shared
/// folder made one read it half written.
inline std::filesystem::path scratch_folder(const std::string& name) {
  const auto dir = std::filesystem::temp_directory_path() / (name + "-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  return dir;
}

}  // namespace offsim::testing
