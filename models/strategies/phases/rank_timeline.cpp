#include "models/strategies/phases/rank_timeline.hpp"

#include <fmt/compile.h>
#include <fmt/format.h>

#include "models/transformer/phases.hpp"

namespace offsim::models {

int RankTimeline::add_rank(int rank, std::uint32_t unit, std::uint32_t pool) {
  slots_.push_back({rank, unit, pool, fmt::format(FMT_COMPILE("r{}"), rank)});
  return size() - 1;
}

std::string RankTimeline::task_name(int r, std::string_view name) const {
  if (!graph_.keeps_names()) return {};  // a graph without names (sim::ScopedUnnamedTasks)
  return fmt::format(FMT_COMPILE("{}.{}"), slot(r).prefix, name);
}

sim::TaskId RankTimeline::compute(int r, std::string_view name, const char* phase, sim::TimePs duration,
                                  sim::Flops flops, const char* kernel, TaskIds deps, sim::Bytes bytes) {
  return graph_.add(task_name(r, name), phase, sim::ComputeTask{slot(r).unit, duration, flops, bytes, kernel},
                    deps.span());
}

sim::TaskId RankTimeline::alloc(int r, std::string_view name, const char* phase, const char* tenant, sim::Bytes bytes,
                                TaskIds deps) {
  return graph_.add(task_name(r, name), phase, sim::AllocTask{slot(r).pool, tenant, bytes}, deps.span());
}

sim::TaskId RankTimeline::release(int r, std::string_view name, const char* phase, const char* tenant, sim::Bytes bytes,
                                  TaskIds deps) {
  return graph_.add(task_name(r, name), phase, sim::FreeTask{slot(r).pool, tenant, bytes}, deps.span());
}

sim::TaskId RankTimeline::barrier(int r, std::string_view name, const char* phase, TaskIds deps) {
  return graph_.add(task_name(r, name), phase, sim::BarrierTask{}, deps.span());
}

std::vector<std::vector<sim::TaskId>> RankTimeline::per_rank(const std::vector<sim::TaskId>& tasks) const {
  std::vector<std::vector<sim::TaskId>> deps(tasks.size());
  for (std::size_t r = 0; r < tasks.size(); ++r) deps[r] = {tasks[r]};
  return deps;
}

sim::TaskId HostThreads::work(int r, std::string_view name, sim::TimePs duration, std::vector<sim::TaskId> deps) {
  auto& last = last_[static_cast<std::size_t>(r)];
  if (last) deps.push_back(*last);
  last = ranks_.graph().add(ranks_.task_name(r, name), phase::kCommunication,
                            sim::TransferTask{{}, sim::Bytes{0}, duration, std::nullopt, {}}, std::move(deps));
  return *last;
}

}  // namespace offsim::models
