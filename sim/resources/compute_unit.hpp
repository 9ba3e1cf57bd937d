#pragma once
// A compute unit executes timed tasks on `lanes` parallel lanes: a GPU stream is one lane, a CPU
// pool of 32 worker threads is 32. A task waits in a queue ordered by (priority, order) until a
// lane is free, then holds it for its duration. Busy time is lane-seconds, so utilisation is
// busy_time / (lanes * elapsed).
#include <cstdint>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include "sim/core/simulator.hpp"
#include "sim/core/units.hpp"

namespace offsim::sim {

class ComputeUnit {
 public:
  using Done = std::function<void()>;

  ComputeUnit(Simulator& simulator, std::string name, int lanes);
  ComputeUnit(const ComputeUnit&) = delete;
  ComputeUnit& operator=(const ComputeUnit&) = delete;
  ComputeUnit(ComputeUnit&&) = default;

  /// Queues a task; `on_start(start_time)` runs when it gets a lane, `on_done` when it ends.
  void submit(TimePs duration, std::int64_t priority, std::uint64_t order, std::function<void(TimePs)> on_start,
              Done on_done);

  [[nodiscard]] const std::string& name() const { return name_; }
  [[nodiscard]] int lanes() const { return lanes_; }
  [[nodiscard]] TimePs busy_time() const { return busy_; }
  [[nodiscard]] std::uint64_t tasks_run() const { return tasks_run_; }
  [[nodiscard]] std::size_t queued() const { return queue_.size(); }

 private:
  struct Pending {
    std::int64_t priority;
    std::uint64_t order;
    TimePs duration;
    std::function<void(TimePs)> on_start;
    Done on_done;
    bool operator<(const Pending& o) const { return priority != o.priority ? priority < o.priority : order < o.order; }
  };
  void dispatch();

  Simulator* sim_;
  std::string name_;
  int lanes_;
  int free_lanes_;
  std::multiset<Pending> queue_;
  TimePs busy_{0};
  std::uint64_t tasks_run_ = 0;
};

}  // namespace offsim::sim
