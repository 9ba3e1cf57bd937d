#pragma once
// A compute unit executes timed tasks on `lanes` parallel lanes: a GPU stream is one lane, a CPU
// pool of 32 worker threads is 32. A task waits in a queue ordered by (priority, order) until a
// lane is free, then holds it for its duration. Busy time is lane-seconds, so utilisation is
// busy_time / (lanes * elapsed).
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "sim/core/simulator.hpp"
#include "sim/core/units.hpp"

namespace offsim::sim {

class ComputeUnit {
 public:
  using Done = Callback;

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
    std::uint64_t seq;  // submission count: equal (priority, order) keep their submission order
    TimePs duration;
    std::function<void(TimePs)> on_start;
    Done on_done;
    // Min-heap order on (priority, order, seq): total, as the multiset it replaces was.
    struct Later {
      bool operator()(const Pending& a, const Pending& b) const {
        if (a.priority != b.priority) return a.priority > b.priority;
        if (a.order != b.order) return a.order > b.order;
        return a.seq > b.seq;
      }
    };
  };
  void dispatch();
  void finish(std::uint32_t slot);

  Simulator* sim_;
  std::string name_;
  int lanes_;
  int free_lanes_;
  std::vector<Pending> queue_;  // min-heap
  // Completions of the tasks holding lanes, in slots reused through a free list: the event that
  // ends a task names its slot, so it needs no closure of its own.
  std::vector<Done> running_;
  std::vector<std::uint32_t> free_running_;
  std::uint64_t submitted_ = 0;
  TimePs busy_{0};
  std::uint64_t tasks_run_ = 0;
};

}  // namespace offsim::sim
