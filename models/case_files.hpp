#pragma once
// The case files `offsim validate` and `offsim check` read: every .yaml file under a folder (its
// subfolders too), in path order, or the one file named.
#include <algorithm>
#include <filesystem>
#include <vector>

namespace offsim::models {

inline std::vector<std::filesystem::path> case_files(const std::filesystem::path& folder_or_file) {
  if (std::filesystem::is_regular_file(folder_or_file)) return {folder_or_file};
  std::vector<std::filesystem::path> files;
  for (const auto& e : std::filesystem::recursive_directory_iterator(folder_or_file)) {
    if (e.path().extension() == ".yaml") files.push_back(e.path());
  }
  std::sort(files.begin(), files.end());
  return files;
}

}  // namespace offsim::models
