// torchtitan's FSDP2 data parallelism under kind: data_parallel (torchtitan_section.hpp). Each
// default comes from configs/defaults.yaml's torchtitan section, which cites torchtitan's source.
#include "models/experiment/torchtitan_section.hpp"

#include <fmt/format.h>

#include <array>
#include <optional>

#include "models/experiment/defaults.hpp"
#include "models/strategies/phases/zero_policy.hpp"

namespace offsim::models::detail {

using sim::config::MapReader;
using sim::config::Node;

bool names_torchtitan(MapReader& root) {
  // An !include'd training section is not peeked (its include is read, and reported, once, by
  // read_training); load.cpp refuses torchtitan there.
  if (!root.node().is_map()) return false;
  const YAML::Node raw = root.node().yaml()["training"];
  if (!raw.IsDefined() || !raw.IsMap()) return false;
  const std::optional<Node> training = root.child("training");
  if (!training || !training->is_map()) return false;
  const YAML::Node found = training->yaml()["framework"];
  const auto framework = training->context().resolve(*training, "framework", found.IsDefined() ? &found : nullptr);
  return framework && framework->is_scalar() && framework->yaml().Scalar() == "torchtitan";
}

std::string torchtitan_default(const std::string& key, const std::string& value) {
  return fmt::format("strategy.{}={} (torchtitan {}'s default)", key, value, defaults::text("torchtitan.version"));
}

void read_torchtitan_fsdp(const Node& node, MapReader& r, const sim::config::Located<int>& stage, DataParallelSpec& dp,
                          std::vector<std::string>& defaults_applied) {
  auto& ctx = node.context();
  const auto partitioned = stage.valid ? ZeroPolicy::partitioning_if_valid(stage.value) : std::nullopt;
  if (stage.valid && !(partitioned && partitioned->parameters)) {
    ctx.error(stage.loc, node.child_path("zero_stage"),
              fmt::format("torchtitan's data parallelism is FSDP2 (zero_stage 3: data_parallel_shard_degree); its "
                          "DDP and HSDP replicas are not modelled, got {}",
                          stage.value));
  }
  // DeepSpeed's keys: FSDP2 has no bucket, persistence threshold, fetch mode, host table or
  // DeepSpeed offload (its CPUOffloadPolicy is not modelled).
  static constexpr std::array kDeepSpeedKeys{
      "reduce_bucket_elements",
      "overlap_comm",
      "grad_accum_dtype",
      "param_persistence_threshold",
      "zero3_fetch",
      "zero3_host",
      "runtime",
      "offload_optimizer",
      "offload_param",
      "partitioning",
  };
  for (const char* key : kDeepSpeedKeys) {
    if (const auto c = r.child(key)) {
      ctx.error(c->location(), node.child_path(key),
                "a DeepSpeed key: with training.framework: torchtitan the data parallelism is FSDP2 (one gather and "
                "one reduce-scatter per block; FSDP2's CPU offload is not modelled)");
    }
  }
  if (!r.has("reshard_after_forward")) {
    defaults_applied.push_back(
        torchtitan_default("reshard_after_forward", defaults::text("torchtitan.reshard_after_forward")));
  }
  const auto reshard = r.choice("reshard_after_forward", {"default", "always", "never"},
                                defaults::text("torchtitan.reshard_after_forward"));
  dp.fsdp2 = reshard.value == "always"  ? ReshardAfterForward::kAlways
             : reshard.value == "never" ? ReshardAfterForward::kNever
                                        : ReshardAfterForward::kDefault;
  if (!r.has("gradient_reduce_dtype")) {
    defaults_applied.push_back(
        torchtitan_default("gradient_reduce_dtype", defaults::text("torchtitan.gradient_reduce_dtype")));
  }
  dp.fp32_gradient_reduce =
      r.choice("gradient_reduce_dtype", {"fp32", "bf16"}, defaults::text("torchtitan.gradient_reduce_dtype")).value ==
      "fp32";
  if (dp.tp > 1 && !r.has("sequence_parallel")) {
    dp.sequence_parallel = defaults::flag("torchtitan.sequence_parallel");
    defaults_applied.push_back(torchtitan_default("sequence_parallel", defaults::text("torchtitan.sequence_parallel")));
  }
  dp.overlap_comm = true;  // FSDP2 reduce-scatters each block as soon as its backward is done
}

void check_torchtitan_training(const Node& training, std::vector<std::string>& defaults) {
  auto& ctx = training.context();
  const auto given = [&](const char* key) {
    return training.yaml()[key].IsDefined() || ctx.has_override_under(training.child_path(key));
  };
  if (!given("recompute")) {
    ctx.error(training.location(), training.child_path("recompute"),
              fmt::format("torchtitan's default activation checkpointing ({}, config_manager.py "
                          "ActivationCheckpoint) is not modelled; name training.recompute (none, selective or full; "
                          "torchtitan's mode = 'full' is full)",
                          defaults::text("torchtitan.recompute")));
  }
  if (!given("flash_attention")) {
    for (auto& d : defaults) {
      if (d.starts_with("training.flash_attention=")) {
        d = fmt::format(
            "training.flash_attention={} (torchtitan {}: PyTorch SDPA with the FlashAttention backend "
            "first, torchtitan/models/attention.py)",
            defaults::text("torchtitan.flash_attention"), defaults::text("torchtitan.version"));
      }
    }
  }
}

}  // namespace offsim::models::detail
