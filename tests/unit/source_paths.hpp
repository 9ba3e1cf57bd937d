#pragma once
// Tests read the repository's files by absolute path (OFFSIM_SOURCE_DIR) and never change their
// working directory; what they compare names files as a user in the source directory sees them.
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

}  // namespace offsim::testing
