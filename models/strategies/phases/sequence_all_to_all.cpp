// One layer under Ulysses sequence parallelism (layer_compute.hpp states the model): its compute
// pieces around the all-to-alls of q, k, v and the attention's context.
#include <fmt/compile.h>
#include <fmt/format.h>

#include <cmath>
#include <vector>

#include "models/strategies/phases/layer_compute.hpp"

namespace offsim::models {

using sim::TaskId;
using sim::TimePs;

namespace {

// A step of the layer: a compute piece, or (exchange >= 0) the all-to-all of buffer `exchange`
// (0 q, 1 k, 2 v, 3 the context; in backward the same buffers' gradients).
struct Step {
  TimePs compute{0};
  int exchange = -1;
};
constexpr int kQuery = 0, kKey = 1, kValue = 2, kContext = 3;
constexpr const char* kExchangeNames[] = {"q", "k", "v", "context"};

// The part of `t` before the attention (the projections feeding it), rounded to the picosecond.
TimePs before(TimePs t, double fraction) {
  return TimePs{static_cast<std::int64_t>(std::llround(static_cast<double>(t.ps) * fraction))};
}

}  // namespace

LayerTasks LayerCompute::sequence_parallel(const std::string& name, const char* phase, bool forward, sim::Flops flops,
                                           std::vector<std::vector<TaskId>> deps) {
  const int sims = ranks_.size();
  const double fraction = times_.before_attention;
  std::vector<Step> steps;
  // Forward: the rest of the layer split at the attention, the core between the exchanges.
  const TimePs rest_forward = times_.forward - times_.attention_forward;
  const auto forward_steps = [&] {
    const TimePs pre = before(rest_forward, fraction);
    steps.insert(steps.end(), {{pre, -1},
                               {TimePs{0}, kQuery},
                               {TimePs{0}, kKey},
                               {TimePs{0}, kValue},
                               {times_.attention_forward, -1},
                               {TimePs{0}, kContext},
                               {rest_forward - pre, -1}});
  };
  if (forward) {
    forward_steps();
  } else {
    // Backward (attention_backward includes the attention's recomputed forward under selective
    // or full recomputation); with full recomputation the layer's forward runs again first.
    TimePs rest = times_.backward - times_.attention_backward;
    TimePs core = times_.attention_backward;
    if (recompute_ == Recompute::kFull) {
      forward_steps();
      rest = rest - rest_forward;
      core = core - times_.attention_forward;
    }
    const TimePs pre = before(rest, fraction);
    steps.insert(steps.end(), {{rest - pre, -1},
                               {TimePs{0}, kContext},
                               {core, -1},
                               {TimePs{0}, kQuery},
                               {TimePs{0}, kKey},
                               {TimePs{0}, kValue},
                               {pre, -1}});
  }
  const TimePs total = forward ? times_.forward : times_.backward;
  LayerTasks t{std::vector<TaskId>(sims), std::vector<TaskId>(sims), std::vector<TaskId>(sims)};
  bool started = false;
  for (std::size_t i = 0; i < steps.size(); ++i) {
    const Step& step = steps[i];
    if (step.exchange >= 0) {
      const auto e = static_cast<std::size_t>(step.exchange);
      t.end = comm_.add(CollectiveKind::kReduceScatter,
                        fmt::format(FMT_COMPILE("sp_all_to_all.{}.{}.{}"), name, i, kExchangeNames[e]),
                        parallel_.sp_elements[e], *parallel_.sp_plan, started ? RankDeps(t.end) : RankDeps(deps));
      if (!started) deps = ranks_.per_rank(t.end);
      continue;
    }
    const double share = total.ps > 0 ? static_cast<double>(step.compute.ps) / static_cast<double>(total.ps) : 0.0;
    for (int r = 0; r < sims; ++r) {
      t.last_compute[r] =
          ranks_.compute(r, fmt::format(FMT_COMPILE("{}.{}"), name, i), phase, step.compute, flops * share, "layer",
                         started ? std::vector<TaskId>{t.end[r]} : std::move(deps[r]));
      if (!started) t.first[r] = t.last_compute[r];
      t.end[r] = t.last_compute[r];
    }
    started = true;
  }
  return t;
}

}  // namespace offsim::models
