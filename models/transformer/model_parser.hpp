#pragma once
#include <optional>

#include "models/transformer/transformer.hpp"
#include "sim/config/config_reader.hpp"

namespace offsim::models {

/// Reads a model file (configs/models/*.yaml). Every shape key is required: a model whose size
/// depends on a silent default is a model nobody can check. nullopt if errors were recorded.
[[nodiscard]] std::optional<ModelSpec> parse_model(const sim::config::Node& node);

}  // namespace offsim::models
