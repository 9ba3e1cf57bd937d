// Megatron's per-rank pipeline order (megatron_schedule.hpp).
#include "models/strategies/phases/megatron_schedule.hpp"

#include <algorithm>

namespace offsim::models {

std::vector<PipelineOp> megatron_schedule(int pp, int stage, int v, int m) {
  const int total = m * v;
  const auto chunk_of = [&](int k, bool forward) {
    const int c = (k / pp) % v;
    return forward ? c : v - 1 - c;
  };
  const auto micro_batch_of = [&](int k) { return (k / (pp * v)) * pp + k % pp; };
  int warmup = 0;
  if (v == 1) {
    warmup = std::min(pp - stage - 1, m);
  } else {
    warmup = std::min((pp - stage - 1) * 2 + (v - 1) * pp, total);
  }
  std::vector<PipelineOp> ops;
  ops.reserve(static_cast<std::size_t>(2 * total));
  int f = 0;
  int b = 0;
  const auto forward = [&] {
    ops.push_back({true, v == 1 ? 0 : chunk_of(f, true), v == 1 ? f : micro_batch_of(f)});
    ++f;
  };
  const auto backward = [&] {
    ops.push_back({false, v == 1 ? 0 : chunk_of(b, false), v == 1 ? b : micro_batch_of(b)});
    ++b;
  };
  for (int i = 0; i < warmup; ++i) forward();
  while (f < total) {
    forward();
    backward();
  }
  while (b < total) backward();
  return ops;
}

}  // namespace offsim::models
