#pragma once
// `offsim model`: a model's parameter counts and per-layer work, as text or JSON.
#include <string>

#include "models/transformer/transformer.hpp"

namespace offsim::models {

struct ModelReportOptions {
  std::int64_t micro_batch = 1;
  std::int64_t tp = 1;
};

[[nodiscard]] std::string model_json(const ModelSpec& m, const ModelReportOptions& o);
[[nodiscard]] std::string model_text(const ModelSpec& m, const ModelReportOptions& o);

}  // namespace offsim::models
