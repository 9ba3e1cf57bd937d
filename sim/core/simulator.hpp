#pragma once
// The event loop. Events are ordered totally by (time, phase, sequence number): equal times are
// broken by the caller's phase (lower first), then by insertion order, so a run is reproducible
// bit for bit. Time is an integer picosecond clock and may never go backwards.
#include <cstdint>
#include <functional>
#include <vector>

#include "sim/core/units.hpp"

namespace offsim::sim {

/// Phases order same-time events. Completions run before new work is started, so a resource
/// freed at time t is visible to work that becomes ready at t.
enum class EventPhase : int {
  kCompletion = 0,
  kStart = 1,
};

class Simulator {
 public:
  using Callback = std::function<void()>;

  Simulator() = default;
  Simulator(const Simulator&) = delete;
  Simulator& operator=(const Simulator&) = delete;

  /// Schedules `callback` at absolute time `at`. Throws SimulationError if `at` < now().
  void schedule_at(TimePs at, EventPhase phase, Callback callback);
  void schedule_after(TimePs delay, EventPhase phase, Callback callback) {
    schedule_at(now_ + delay, phase, std::move(callback));
  }

  /// Runs until no event is left.
  void run();

  [[nodiscard]] TimePs now() const { return now_; }
  [[nodiscard]] std::uint64_t events_processed() const { return processed_; }
  [[nodiscard]] std::size_t pending_events() const { return heap_.size(); }

 private:
  struct Event {
    TimePs time;
    EventPhase phase;
    std::uint64_t seq;
    Callback callback;
  };
  // Min-heap comparator: true when a comes after b.
  struct Later {
    bool operator()(const Event& a, const Event& b) const {
      if (a.time != b.time) return a.time > b.time;
      if (a.phase != b.phase) return a.phase > b.phase;
      return a.seq > b.seq;
    }
  };

  std::vector<Event> heap_;
  TimePs now_{0};
  std::uint64_t next_seq_ = 0;
  std::uint64_t processed_ = 0;
};

}  // namespace offsim::sim
