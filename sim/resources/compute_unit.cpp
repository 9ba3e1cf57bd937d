#include "sim/resources/compute_unit.hpp"

#include <fmt/format.h>
#include <stdexcept>

namespace offsim::sim {

ComputeUnit::ComputeUnit(Simulator& simulator, std::string name, int lanes)
    : sim_(&simulator), name_(std::move(name)), lanes_(lanes), free_lanes_(lanes) {
  if (lanes < 1) throw std::invalid_argument(fmt::format("compute unit '{}' needs at least one lane", name_));
}

void ComputeUnit::submit(TimePs duration, std::int64_t priority, std::uint64_t order,
                         std::function<void(TimePs)> on_start, Done on_done) {
  queue_.insert(Pending{priority, order, duration, std::move(on_start), std::move(on_done)});
  dispatch();
}

void ComputeUnit::dispatch() {
  while (free_lanes_ > 0 && !queue_.empty()) {
    auto node = queue_.extract(queue_.begin());
    Pending& task = node.value();
    --free_lanes_;
    ++tasks_run_;
    busy_ += task.duration;
    if (task.on_start) task.on_start(sim_->now());
    sim_->schedule_after(task.duration, EventPhase::kCompletion, [this, done = std::move(task.on_done)] {
      ++free_lanes_;
      if (done) done();
      dispatch();
    });
  }
}

}  // namespace offsim::sim
