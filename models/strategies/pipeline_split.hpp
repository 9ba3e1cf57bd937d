#pragma once
// How Megatron-Core splits a decoder's layers over the pipeline: pp stages, each with v virtual
// chunks (virtual stage vs = c x pp + s holds chunk c of stage s; layers are numbered in virtual
// stage order). The rules are Megatron-Core's (megatron/core/transformer/transformer_block.py,
// get_num_layers_to_build; transformer_layer.py, get_transformer_layer_offset):
// - even: layers / (pp x v) per chunk;
// - decoder_first/last_pipeline_num_layers (first_stage_layers / last_stage_layers): the first
//   (last) stage holds that many layers over its v chunks, the other stages split the rest
//   evenly, and every stage's count splits evenly over its v chunks;
// - account_for_embedding/loss_in_pipeline_split: the embedding (loss) counts as one layer of the
//   even split, so chunk 0 of stage 0 (chunk v-1 of the last stage) builds one layer fewer.
// Where Megatron-Core asserts that a count divides, offsim gives the remainder one layer each to
// the middle virtual stages and says so (PipelineSplit::note): an extension, not Megatron's rule.
#include <cstdint>
#include <string>
#include <vector>

#include "models/strategies/strategy.hpp"

namespace offsim::models {

struct PipelineSplit {
  std::vector<std::int64_t> layers;  // per virtual stage vs = c x pp + s
  std::string note;                  // empty when Megatron-Core would split so too
  int pp = 1;
  int v = 1;
  [[nodiscard]] std::int64_t of_virtual(int vs) const { return layers[static_cast<std::size_t>(vs)]; }
  /// All layers of pipeline stage s (its v chunks).
  [[nodiscard]] std::int64_t of_stage(int s) const;
  [[nodiscard]] bool even() const;
};

/// The split of `layers` for the spec's pp, virtual_stages, first/last_stage_layers and
/// account_for_*; std::invalid_argument naming the key when none exists (first + last layers
/// over the total, first/last with pp 1, first/last together with account_for_*).
[[nodiscard]] PipelineSplit split_pipeline_layers(std::int64_t layers, const MegatronSpec& spec);

}  // namespace offsim::models
