#pragma once
// The values offsim takes for keys an experiment leaves out (configs/defaults.yaml, compiled in):
// each with its source, so that a default is data, not a constant in C++.
#include <cstdint>
#include <string>
#include <string_view>

namespace offsim::models::defaults {

/// The `value:` of the default at `path` ("training.grad_accum", "deepspeed.reduce_bucket_size").
/// A path the file does not hold is a programming error (std::logic_error).
[[nodiscard]] const std::string& text(std::string_view path);
[[nodiscard]] std::int64_t integer(std::string_view path);
[[nodiscard]] bool flag(std::string_view path);
/// The default's `source:` note.
[[nodiscard]] const std::string& source(std::string_view path);
/// The DeepSpeed release the `deepspeed:` defaults are read from ("0.16").
[[nodiscard]] const std::string& deepspeed_version();

}  // namespace offsim::models::defaults
