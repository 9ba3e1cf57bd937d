#pragma once
// Megatron's per-rank order of pipeline operations (megatron/core/pipeline_parallel/schedules.py,
// forward_backward_pipelining_without_interleaving and _with_interleaving):
// - 1F1B (v = 1): stage s of pp runs min(pp - s - 1, m) warm-up forwards, then alternates one
//   forward and one backward until every forward ran, then the cool-down backwards.
// - Interleaved (v > 1 model chunks per rank, m a multiple of pp): min((pp - s - 1) x 2 +
//   (v - 1) x pp, m v) warm-up forwards, then one forward one backward, then the rest of the
//   backwards. The k-th forward runs chunk (k / pp) mod v on micro-batch (k / (pp v)) pp + k mod pp:
//   groups of pp micro-batches go through the chunks in turn; backwards visit the chunks in reverse.
#include <compare>
#include <vector>

namespace offsim::models {

struct PipelineOp {
  bool forward = true;
  int chunk = 0;  // the rank's model chunk (0 .. v - 1); its virtual stage is chunk x pp + stage
  int micro_batch = 0;
  auto operator<=>(const PipelineOp&) const = default;
};

/// The operations of pipeline stage `stage` (0 .. pp - 1) with v chunks per rank and m
/// micro-batches, in the order the rank runs them: 2 m v operations.
[[nodiscard]] std::vector<PipelineOp> megatron_schedule(int pp, int stage, int v, int m);

}  // namespace offsim::models
