#pragma once
#include <filesystem>
#include <stdexcept>
#include <string_view>

namespace offsim::sim::report {

/// An output that cannot be written (a folder that is a file, no space, no permission): the
/// environment, not the input (the CLI exits 3).
class OutputError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// Writes `content` to `path` atomically: into a temporary file in the same directory, flushed,
/// then renamed over the target. A reader sees the old file or the new one, never a partial one.
/// Throws OutputError naming the path on failure.
void write_file_atomically(const std::filesystem::path& path, std::string_view content);

}  // namespace offsim::sim::report
