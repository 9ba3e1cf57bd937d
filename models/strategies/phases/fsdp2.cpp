#include "models/strategies/phases/fsdp2.hpp"

#include <fmt/compile.h>
#include <fmt/format.h>

#include <algorithm>

namespace offsim::models {

const char* reshard_after_forward_name(ReshardAfterForward r) {
  switch (r) {
    case ReshardAfterForward::kAlways:
      return "always";
    case ReshardAfterForward::kNever:
      return "never";
    case ReshardAfterForward::kDefault:
      break;
  }
  return "default";
}

std::vector<Module> fsdp2_units(const ModelSpec& m, const ParameterCounts& params, std::int64_t experts_per_layer,
                                int ep, ReshardAfterForward policy) {
  // One gather per unit: the threshold 0 shards every part, and the parts are summed into one.
  const auto unit = [](std::string name, std::int64_t dense, std::int64_t experts, bool reshard) {
    Module mod = make_module(std::move(name), {dense, experts}, 0, {false, true});
    mod.reshard_after_forward = reshard;
    return mod;
  };
  std::vector<Module> units;
  units.push_back(unit("embedding", params.embedding + params.position, 0, false));
  for (std::int64_t l = 0; l < m.layers; ++l) {
    const bool reshard =
        policy == ReshardAfterForward::kAlways || (policy == ReshardAfterForward::kDefault && l < m.layers - 1);
    // Without expert parallelism the experts are gathered with the rest of the block.
    const std::int64_t experts = ep > 1 ? experts_per_layer : 0;
    units.push_back(unit(fmt::format(FMT_COMPILE("layer{}"), l), params.per_layer - experts, experts, reshard));
  }
  units.push_back(
      unit("head", params.final_norm + (m.tied_embeddings ? params.embedding : params.output_head), 0, false));
  return units;
}

std::int64_t fsdp2_reduce_buffer_elements(const std::vector<Module>& units, bool fp32) {
  std::int64_t largest = 0;
  for (const auto& u : units) largest = std::max(largest, u.gathered());
  return fp32 ? 2 * largest : largest;
}

std::vector<std::string> fsdp2_approximations(ReshardAfterForward policy, int tp, int shard_ranks) {
  std::vector<std::string> notes;
  notes.push_back(fmt::format(
      "FSDP2 (fully_shard per block and on the root, torchtitan's apply_fsdp) over {} dp_shard ranks{}: one "
      "all-gather per unit, the next unit's issued one unit ahead of the compute with at most two units gathered "
      "(FSDP2's implicit prefetch), reshard_after_forward {} (the root unit, embedding and head, kept from its "
      "forward to its backward; gathered here just before each rather than together before the embedding); one "
      "reduce-scatter per unit after its backward, every micro-batch; the all-gather's copy-in/copy-out and the "
      "reduce-scatter's fp32 cast kernels and the hooks' host time are not modelled",
      shard_ranks, tp > 1 ? fmt::format(" of each tensor rank (gathering 1/{} of each unit)", tp) : "",
      reshard_after_forward_name(policy)));
  return notes;
}

}  // namespace offsim::models
