#pragma once
#include <filesystem>
#include <string_view>

namespace offsim::sim::report {

/// Writes `content` to `path` atomically: into a temporary file in the same directory, flushed,
/// then renamed over the target. A reader sees the old file or the new one, never a partial one.
/// Throws std::runtime_error naming the path on failure.
void write_file_atomically(const std::filesystem::path& path, std::string_view content);

}  // namespace offsim::sim::report
