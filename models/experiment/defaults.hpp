#pragma once
// The values offsim takes for keys an experiment leaves out (configs/defaults.yaml, compiled in):
// each with its source, so that a default is data, not a constant in C++.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "models/strategies/phases/parameter_gather.hpp"

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
/// The releases `deepspeed_runtimes:` holds stage-3 defaults for ("deepspeed-0.3", ...), in file order.
[[nodiscard]] const std::vector<std::string>& deepspeed_runtimes();
/// A stage-3 host launch table compiled in, by the name a `deepspeed_runtimes.*.zero3_host` default
/// gives ("deepspeed-0.3-zero3-host": configs/calibration/deepspeed-0.3-zero3-host.yaml). An unknown
/// name is a programming error (std::logic_error).
[[nodiscard]] const FetchHostCost& zero3_host_table(std::string_view name);

}  // namespace offsim::models::defaults
