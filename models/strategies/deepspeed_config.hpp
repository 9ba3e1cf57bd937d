#pragma once
// A DeepSpeed ds_config.json standing in for the strategy section (docs/strategies.md):
//
//   strategy:
//     kind: deepspeed
//     config: !include ../strategies/ds/zero3-offload.json
//     dp: 4
//     devices_per_node: [...]
//     runtime: deepspeed-0.13                 # whose offload mechanics to simulate
//     qwz: !include ../strategies/zeropp-qwz-int8.yaml   # needed when zero_quantized_weights
//     qgz: !include ../strategies/zeropp-qgz-int4.yaml   # needed when zero_quantized_gradients
//
// Every key offsim maps becomes the matching data_parallel setting; keys DeepSpeed leaves to its
// defaults take DeepSpeed 0.13.3's (runtime/zero/config.py, deepspeed-offload.md section 4), each
// named in a warning; keys offsim does not model are listed in a warning, never dropped silently.
#include <cstdint>
#include <optional>

#include "models/strategies/partitioning_parser.hpp"
#include "models/strategies/strategy.hpp"
#include "sim/config/config_reader.hpp"

namespace offsim::models {

/// DeepSpeed 0.13.3 defaults (runtime/zero/config.py, offload_config.py; deepspeed-offload.md
/// section 4): for the keys a ds_config leaves out, and the strategies `offsim search` builds.
namespace deepspeed_defaults {
inline constexpr std::int64_t kReduceBucketSize = 500'000'000;  // elements
inline constexpr std::int64_t kSubGroupSize = 1'000'000'000;    // elements
}  // namespace deepspeed_defaults

struct DeepSpeedImport {
  DataParallelSpec strategy;
  std::optional<std::int64_t> micro_batch;  // train_micro_batch_size_per_gpu
  std::optional<std::int64_t> grad_accum;   // gradient_accumulation_steps
  // Sizes given as "auto", resolved once the model is known the way the Hugging Face Trainer does
  // (transformers integrations/deepspeed.py, trainer_config_finalize): reduce_bucket_size =
  // hidden^2, stage3_param_persistence_threshold = 10 x hidden. Batch keys given as "auto" take the
  // experiment's training section.
  bool auto_reduce_bucket = false;
  bool auto_persistence_threshold = false;
  // Where the config gives Ulysses' degree (strategy.sp > 1), for the checks against the model.
  sim::config::Location sp_at;
  std::string sp_path;
  std::vector<std::string> defaults;  // DeepSpeed defaults taken for keys left out ("overlap_comm=false")
};

/// Resolves the "auto" sizes of an imported config for a model of `hidden` (see DeepSpeedImport).
void resolve_deepspeed_auto(const DeepSpeedImport& imported, std::int64_t hidden, DataParallelSpec& strategy);

/// `node`: the ds_config mapping. `devices` already parsed; `levels` for ZeRO++ groups.
[[nodiscard]] std::optional<DeepSpeedImport> import_deepspeed_config(
    const sim::config::Node& node, const std::vector<std::string>& devices, const LevelSizes& levels,
    std::optional<Quantization> qwz, std::optional<Quantization> qgz, Runtime runtime, int tp = 1);

}  // namespace offsim::models
