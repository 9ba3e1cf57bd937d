#include "models/strategies/pipeline_split.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <numeric>
#include <stdexcept>

namespace offsim::models {

std::int64_t PipelineSplit::of_stage(int s) const {
  std::int64_t n = 0;
  for (int c = 0; c < v; ++c) n += of_virtual(c * pp + s);
  return n;
}

bool PipelineSplit::even() const {
  return std::all_of(layers.begin(), layers.end(), [&](std::int64_t n) { return n == layers.front(); });
}

namespace {

// n layers over `count` parts: n / count each, the remainder one each to the parts in `order`
// (the middle ones first). Returns the number of parts that took one more.
std::int64_t share_out(std::int64_t n, const std::vector<int>& order, std::vector<std::int64_t>& parts) {
  const auto count = static_cast<std::int64_t>(order.size());
  const std::int64_t extra = n % count;
  for (std::size_t i = 0; i < order.size(); ++i) {
    parts[static_cast<std::size_t>(order[i])] = n / count + (static_cast<std::int64_t>(i) < extra ? 1 : 0);
  }
  return extra;
}

// The virtual stages 1, 2, ..., count - 1 and then 0: the remainder goes to the middle first.
std::vector<int> middle_first(int count) {
  std::vector<int> order(static_cast<std::size_t>(count));
  std::iota(order.begin(), order.end(), 1);
  order.back() = 0;
  return order;
}

}  // namespace

PipelineSplit split_pipeline_layers(std::int64_t layers, const MegatronSpec& spec) {
  PipelineSplit split;
  split.pp = std::max(1, spec.pp);
  split.v = std::max(1, spec.virtual_stages);
  const int pp = split.pp;
  const int v = split.v;
  const int chunks = pp * v;
  split.layers.assign(static_cast<std::size_t>(chunks), 0);
  const bool uneven_edges = spec.first_stage_layers || spec.last_stage_layers;
  if (!uneven_edges) {
    // Megatron-Core: (layers + embedding + loss) / (pp x v) per chunk, one fewer on the first
    // (last) virtual stage for the embedding (loss).
    const int embedding = spec.account_for_embedding_in_pipeline_split ? 1 : 0;
    const int loss = spec.account_for_loss_in_pipeline_split ? 1 : 0;
    const std::int64_t counted = layers + embedding + loss;
    if (counted < chunks) {  // a chunk without a layer: Megatron-Core refuses it, and so do we
      throw std::invalid_argument(
          counted < pp
              ? fmt::format("megatron: {} layers cannot fill pp = {} stages: each stage needs a layer", layers, pp)
              : fmt::format("megatron: {} layers cannot fill pp x virtual_stages = {} chunks: each chunk "
                            "needs a layer (at most {} virtual stages at pp {})",
                            layers, chunks, counted / pp, pp));
    }
    const std::int64_t extra = share_out(counted, middle_first(chunks), split.layers);
    split.layers.front() -= embedding;
    split.layers.back() -= loss;
    if (split.layers.front() < 0 || split.layers.back() < 0) {
      throw std::invalid_argument(
          fmt::format("megatron: {} layers leave no layer for the embedding's or the loss's virtual stage over pp x "
                      "virtual_stages = {} chunks (account_for_*_in_pipeline_split)",
                      layers, chunks));
    }
    if (extra > 0) {
      split.note = fmt::format(
          "pipeline split: {}{} layers do not divide into pp x virtual_stages = {} chunks (Megatron-Core refuses "
          "it); {} per chunk and one more on {}",
          layers, embedding + loss > 0 ? fmt::format(" (+{} for the embedding and loss)", embedding + loss) : "",
          chunks, counted / chunks,
          extra == 1 ? std::string("virtual stage 1") : fmt::format("virtual stages 1 to {}", extra));
    }
    return split;
  }
  if (spec.account_for_embedding_in_pipeline_split || spec.account_for_loss_in_pipeline_split) {
    throw std::invalid_argument(
        "megatron: first_stage_layers / last_stage_layers exclude account_for_*_in_pipeline_split (as in "
        "Megatron-Core)");
  }
  if (pp < 2) throw std::invalid_argument("megatron: first_stage_layers / last_stage_layers need pp >= 2");
  // Stage totals: the given edges, the rest evenly over the middle stages.
  std::vector<std::int64_t> stage(static_cast<std::size_t>(pp), 0);
  std::int64_t rest = layers;
  std::vector<int> middle;
  for (int s = 0; s < pp; ++s) {
    const bool first = s == 0 && spec.first_stage_layers;
    const bool last = s == pp - 1 && spec.last_stage_layers;
    if (first) stage.front() = *spec.first_stage_layers;
    if (last) stage.back() = *spec.last_stage_layers;
    if (first || last) {
      rest -= stage[static_cast<std::size_t>(s)];
    } else {
      middle.push_back(s);
    }
  }
  if (rest < 0 || (middle.empty() && rest != 0)) {
    throw std::invalid_argument(fmt::format(
        "megatron: first_stage_layers and last_stage_layers leave {} of the model's {} layers for {} other stages",
        rest, layers, middle.size()));
  }
  std::int64_t stage_extra = 0;
  if (!middle.empty()) stage_extra = share_out(rest, middle, stage);
  // Each stage's layers over its chunks, the remainder to chunks 1, 2, ... (virtual stage order).
  std::int64_t chunk_extra = 0;
  for (int s = 0; s < pp; ++s) {
    std::vector<std::int64_t> of_chunk(static_cast<std::size_t>(v), 0);
    chunk_extra += share_out(stage[static_cast<std::size_t>(s)], s == 0 ? middle_first(v) : [&] {
      std::vector<int> order(static_cast<std::size_t>(v));
      std::iota(order.begin(), order.end(), 0);
      return order;
    }(), of_chunk);
    for (int c = 0; c < v; ++c)
      split.layers[static_cast<std::size_t>(c * pp + s)] = of_chunk[static_cast<std::size_t>(c)];
  }
  if (stage_extra > 0 || chunk_extra > 0) {
    split.note = fmt::format(
        "pipeline split: the layers do not divide as Megatron-Core requires ({} of {} over the {} middle stages, "
        "each stage's over {} chunks); the remainder one layer each to the middle stages (and chunks) in order",
        rest, layers, middle.size(), v);
  }
  return split;
}

}  // namespace offsim::models
