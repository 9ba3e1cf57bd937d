#include "models/strategies/phases/layer_compute.hpp"

#include <fmt/compile.h>
#include <fmt/format.h>

#include <optional>

#include "models/transformer/phases.hpp"

namespace offsim::models {

using sim::TaskId;
using sim::TimePs;

LayerCompute::LayerCompute(RankTimeline& ranks, Communicator& comm, LayerTimes times, Recompute recompute,
                           Parallelism parallel)
    : ranks_(ranks), comm_(comm), times_(times), recompute_(recompute), parallel_(parallel) {}

LayerTasks LayerCompute::expert_parallel(const std::string& name, const char* phase, bool forward, sim::Flops flops,
                                         std::vector<std::vector<TaskId>> deps) {
  const int sims = ranks_.size();
  // Compute pieces between the collectives: an all-to-all (dispatch or combine) or, with tp > 1,
  // the tensor-parallel all-reduce after the attention and after the experts' row-parallel
  // down-projection (Megatron-Core's experts split over the tensor-parallel group).
  enum class Kind { kCompute, kAllToAll, kTp };
  struct Step {
    Kind kind;
    TimePs time{0};
  };
  const bool tp = parallel_.tp > 1;
  std::vector<Step> steps;
  const auto add_rest = [&](TimePs rest) {
    if (!tp) {
      steps.push_back({Kind::kCompute, rest});
      return;
    }
    // The attention's all-reduce halfway through the rest (attention, router), as run() splits.
    const TimePs half{rest.ps / 2};
    steps.insert(steps.end(), {{Kind::kCompute, half}, {Kind::kTp}, {Kind::kCompute, TimePs{rest.ps - half.ps}}});
  };
  const auto forward_steps = [&] {
    add_rest(TimePs{times_.forward.ps - times_.experts_forward.ps});
    steps.push_back({Kind::kAllToAll});
    steps.push_back({Kind::kCompute, times_.experts_forward});
    if (tp) steps.push_back({Kind::kTp});
    steps.push_back({Kind::kAllToAll});
  };
  if (forward) {
    forward_steps();
  } else {
    std::int64_t rest = times_.backward.ps - times_.experts_backward.ps;
    if (recompute_ == Recompute::kFull) {
      forward_steps();
      rest -= times_.forward.ps;
    }
    steps.push_back({Kind::kAllToAll});
    if (tp) steps.push_back({Kind::kTp});
    steps.push_back({Kind::kCompute, times_.experts_backward});
    steps.push_back({Kind::kAllToAll});
    add_rest(TimePs{rest});
  }
  const TimePs total = forward ? times_.forward : times_.backward;
  LayerTasks t{std::vector<TaskId>(sims), std::vector<TaskId>(sims), std::vector<TaskId>(sims)};
  bool started = false;
  for (std::size_t i = 0; i < steps.size(); ++i) {
    if (steps[i].kind != Kind::kCompute) {
      const bool a2a = steps[i].kind == Kind::kAllToAll;
      t.end = comm_.add(a2a ? CollectiveKind::kReduceScatter : CollectiveKind::kAllReduce,
                        fmt::format(FMT_COMPILE("{}.{}.{}"), a2a ? "all_to_all" : "tp", name, i),
                        a2a ? parallel_.dispatch_elements : parallel_.activation_elements,
                        a2a ? parallel_.dispatch_plan : parallel_.tp_plan, started ? RankDeps(t.end) : RankDeps(deps));
      if (!started) deps = ranks_.per_rank(t.end);
      continue;
    }
    const TimePs time = steps[i].time;
    for (int r = 0; r < sims; ++r) {
      const double share = total.ps > 0 ? static_cast<double>(time.ps) / static_cast<double>(total.ps) : 0.0;
      t.last_compute[r] = ranks_.compute(r, fmt::format(FMT_COMPILE("{}.{}"), name, i), phase, time, flops * share,
                                         "layer", started ? std::vector<TaskId>{t.end[r]} : std::move(deps[r]));
      if (!started) t.first[r] = t.last_compute[r];
      t.end[r] = t.last_compute[r];
    }
    started = true;
  }
  return t;
}

LayerTasks LayerCompute::run(const std::string& name, const char* phase, bool forward, sim::Flops flops,
                             std::vector<std::vector<TaskId>> deps) {
  if (parallel_.ep > 1) return expert_parallel(name, phase, forward, flops, std::move(deps));
  if (parallel_.sp > 1) return sequence_parallel(name, phase, forward, flops, std::move(deps));
  const int sims = ranks_.size();
  const TimePs duration = forward ? times_.forward : times_.backward;
  const int tp = parallel_.tp;
  LayerTasks t{std::vector<TaskId>(sims), std::vector<TaskId>(sims), std::vector<TaskId>(sims)};
  if (tp == 1) {
    for (int r = 0; r < sims; ++r) {
      t.first[r] = t.last_compute[r] = t.end[r] =
          ranks_.compute(r, name, phase, duration, flops, "layer", std::move(deps[r]));
    }
    return t;
  }
  const int reductions = forward ? 2 : (recompute_ == Recompute::kFull ? 4 : 2);
  const TimePs piece{duration.ps / reductions};
  for (int part_index = 0; part_index < reductions; ++part_index) {
    for (int r = 0; r < sims; ++r) {
      t.last_compute[r] = ranks_.compute(r, fmt::format(FMT_COMPILE("{}.{}"), name, part_index), phase, piece,
                                         flops * (1.0 / reductions), "layer",
                                         part_index == 0 ? std::move(deps[r]) : std::vector<TaskId>{t.end[r]});
      if (part_index == 0) t.first[r] = t.last_compute[r];
    }
    t.end = comm_.add(CollectiveKind::kAllReduce, fmt::format(FMT_COMPILE("tp.{}.{}"), name, part_index),
                      parallel_.activation_elements, parallel_.tp_plan, t.last_compute);
  }
  return t;
}

std::vector<sim::TaskId> tp_reduction(Communicator& comm, RankTimeline& timeline, const std::vector<int>& members,
                                      const std::string& name, std::optional<sim::TimePs> overlap_extra,
                                      std::int64_t elements, const CollectivePlan& plan,
                                      const std::vector<std::vector<sim::TaskId>>& deps) {
  if (!overlap_extra) return comm.add(CollectiveKind::kAllReduce, name, elements, plan, deps);
  std::vector<sim::TaskId> at(members.size());
  for (std::size_t i = 0; i < members.size(); ++i) {
    at[i] = overlap_extra->ps > 0
                ? timeline.compute(members[i], name, phase::kCommunication, *overlap_extra, {}, "gemm", deps[i])
                : deps[i].front();
  }
  return at;
}

}  // namespace offsim::models
