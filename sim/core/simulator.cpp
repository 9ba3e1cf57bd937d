#include "sim/core/simulator.hpp"

#include <fmt/format.h>
#include <algorithm>

#include "sim/core/errors.hpp"

namespace offsim::sim {

void Simulator::schedule_at(TimePs at, EventPhase phase, Callback callback) {
  if (at < now_) {
    throw SimulationError(fmt::format(
        "event scheduled at {} ps, before the current time {} ps: time may not go backwards", at.ps, now_.ps));
  }
  heap_.push_back(Event{at, phase, next_seq_++, std::move(callback)});
  std::push_heap(heap_.begin(), heap_.end(), Later{});
}

void Simulator::run() {
  while (!heap_.empty()) {
    std::pop_heap(heap_.begin(), heap_.end(), Later{});
    Event event = std::move(heap_.back());
    heap_.pop_back();
    if (event.time < now_) throw SimulationError("event queue returned an event in the past");
    now_ = event.time;
    ++processed_;
    event.callback();
  }
}

}  // namespace offsim::sim
