#include "sim/resources/compute_unit.hpp"

#include <fmt/format.h>
#include <algorithm>
#include <stdexcept>

namespace offsim::sim {

ComputeUnit::ComputeUnit(Simulator& simulator, std::string name, int lanes)
    : sim_(&simulator), name_(std::move(name)), lanes_(lanes), free_lanes_(lanes) {
  if (lanes < 1) throw std::invalid_argument(fmt::format("compute unit '{}' needs at least one lane", name_));
}

void ComputeUnit::submit(TimePs duration, std::int64_t priority, std::uint64_t order,
                         std::function<void(TimePs)> on_start, Done on_done) {
  queue_.push_back(Pending{priority, order, submitted_++, duration, std::move(on_start), std::move(on_done)});
  std::push_heap(queue_.begin(), queue_.end(), Pending::Later{});
  dispatch();
}

void ComputeUnit::dispatch() {
  while (free_lanes_ > 0 && !queue_.empty()) {
    std::pop_heap(queue_.begin(), queue_.end(), Pending::Later{});
    Pending task = std::move(queue_.back());
    queue_.pop_back();
    --free_lanes_;
    ++tasks_run_;
    busy_ += task.duration;
    if (task.on_start) task.on_start(sim_->now());
    std::uint32_t slot = 0;
    if (free_running_.empty()) {
      slot = static_cast<std::uint32_t>(running_.size());
      running_.push_back(std::move(task.on_done));
    } else {
      slot = free_running_.back();
      free_running_.pop_back();
      running_[slot] = std::move(task.on_done);
    }
    sim_->schedule_after(task.duration, EventPhase::kCompletion, [this, slot] { finish(slot); });
  }
}

void ComputeUnit::finish(std::uint32_t slot) {
  ++free_lanes_;
  Done done = std::move(running_[slot]);
  free_running_.push_back(slot);
  if (done) done();
  dispatch();
}

}  // namespace offsim::sim
