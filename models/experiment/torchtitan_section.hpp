#pragma once
// training.framework: torchtitan under kind: data_parallel: the strategy keys torchtitan's FSDP2
// runs take (models/strategies/phases/fsdp2.hpp), with torchtitan's defaults (configs/defaults.yaml,
// torchtitan:) named in the report, and DeepSpeed's keys refused at their location.
#include <string>
#include <vector>

#include "models/strategies/strategy.hpp"
#include "sim/config/config_reader.hpp"

namespace offsim::models::detail {

/// Whether the experiment's training.framework (in the file or set by an override) is torchtitan:
/// read before the strategy, whose keys and defaults depend on it. `root` reads the experiment.
[[nodiscard]] bool names_torchtitan(sim::config::MapReader& root);

/// torchtitan's data parallelism, read after dp, tp and zero_stage (`stage`, given or torchtitan's
/// default 3): zero_stage must be 3 (FSDP2; its DDP and HSDP replicas are not modelled), and
/// reshard_after_forward, gradient_reduce_dtype and sequence_parallel (with tp > 1) take
/// torchtitan's defaults; DeepSpeed's keys are errors. Sets dp.fsdp2.
void read_torchtitan_fsdp(const sim::config::Node& node, sim::config::MapReader& r,
                          const sim::config::Located<int>& stage, DataParallelSpec& dp,
                          std::vector<std::string>& defaults_applied);

/// training under torchtitan: recompute must be named (torchtitan's default, selective AC on
/// every second block, is not expressible per layer; an error at the training section), and
/// `defaults` (the training defaults' report lines) says where the attention default comes from.
void check_torchtitan_training(const sim::config::Node& training, std::vector<std::string>& defaults);

/// A torchtitan default's report line: "strategy.<key>=<value> (torchtitan 820504e's default)".
[[nodiscard]] std::string torchtitan_default(const std::string& key, const std::string& value);

}  // namespace offsim::models::detail
