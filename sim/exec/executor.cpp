#include "sim/exec/executor.hpp"

#include <fmt/format.h>
#include <algorithm>
#include <functional>
#include <optional>
#include <span>
#include <utility>
#include <vector>

#include "sim/core/errors.hpp"
#include "sim/core/simulator.hpp"
#include "sim/exec/route_classes.hpp"
#include "sim/resources/compute_unit.hpp"

namespace offsim::sim {

namespace {

constexpr std::size_t kDeadlockTasksShown = 10;

class Run {
 public:
  Run(const Platform& platform, const TaskGraph& graph, const ExecOptions& options)
      : platform_(platform),
        graph_(graph),
        network_(sim_, options.record_link_timelines, options.record_link_credits, options.link_statistics) {
    units_.reserve(platform.units.size());
    for (const auto& u : platform.units) units_.emplace_back(sim_, u.name, u.lanes);
    add_constraints();
    for (const auto& p : platform.pools) pools_.emplace_back(p.name, p.kind, p.capacity);
    const std::size_t n = graph.size();
    records_.resize(n);
    waiting_on_.resize(n);
    done_.assign(n, false);
    // Dependents in one array (compressed rows, in task order), not one vector per task.
    dependents_begin_.assign(n + 1, 0);
    for (const auto& t : graph.tasks()) {
      waiting_on_[t.id.index] = static_cast<std::uint32_t>(graph.deps(t).size());
      for (const auto d : graph.deps(t)) ++dependents_begin_[d.index + 1];
    }
    for (std::size_t i = 0; i < n; ++i) dependents_begin_[i + 1] += dependents_begin_[i];
    dependents_.resize(dependents_begin_[n]);
    // Filled in task order with each row's begin as its cursor (no copy of the offsets): a row's
    // cursor ends where the next row begins, so the offsets are then shifted back by one row.
    for (const auto& t : graph.tasks()) {
      for (const auto d : graph.deps(t)) dependents_[dependents_begin_[d.index]++] = t.id.index;
    }
    for (std::size_t i = n; i > 0; --i) dependents_begin_[i] = dependents_begin_[i - 1];
    dependents_begin_[0] = 0;
  }

  // Every constraint of the platform; or, for a run that keeps no link statistics, one per class
  // of alike constraints (route_classes.hpp: the same rates from fewer constraints per route).
  void add_constraints() {
    if (network_.keeps_statistics()) {
      network_.reserve_constraints(platform_.constraints.size());
      for (const auto& c : platform_.constraints) network_.add_constraint(c.name, c.capacity);
      return;
    }
    for (const auto& c : platform_.constraints) FlowNetwork::check_capacity(c.name, c.capacity);
    classes_.emplace(platform_, graph_);
    network_.reserve_constraints(classes_->capacities().size());
    for (std::size_t k = 0; k < classes_->capacities().size(); ++k) {
      network_.add_constraint(platform_.constraints[classes_->representatives()[k]].name,
                              Bandwidth{classes_->capacities()[k]});
    }
  }

  // A transfer's accounting over the classes: those of its constraints that some route crosses
  // (accounting moves only statistics, which such a run does not keep; the classes keep which
  // flows touch which constraints as the platform's did).
  std::span<const ConstraintId> accounted_over_classes(const TransferTask& x) {
    accounted_scratch_.clear();
    for (const auto c : x.accounted) {
      const std::uint32_t k = classes_->class_of(c);
      if (k != RouteClasses::kNone) accounted_scratch_.push_back(ConstraintId{k});
    }
    return accounted_scratch_;
  }

  RunResult go() {
    for (const auto& t : graph_.tasks()) {
      if (waiting_on_[t.id.index] == 0) make_ready(t.id.index);
    }
    drain();
    sim_.run();
    if (finished_ != graph_.size()) report_deadlock();
    network_.sync_stats();
    return collect();
  }

 private:
  void drain() {
    while (!ready_.empty()) {
      std::pop_heap(ready_.begin(), ready_.end(), std::greater<>{});
      const std::uint32_t id = ready_.back().second;
      ready_.pop_back();
      start(id);
    }
  }

  void start(std::uint32_t id) {
    const Task& task = graph_.tasks()[id];
    records_[id].ready = sim_.now();
    records_[id].start = sim_.now();
    struct Starter {
      Run& run;
      std::uint32_t id;
      const Task& task;
      void operator()(const ComputeTask& c) const {
        run.units_[c.unit].submit(
            c.duration, task.priority, id, [r = &run, i = id](TimePs at) { r->records_[i].start = at; },
            [r = &run, i = id] { r->finish(i); });
      }
      void operator()(const TransferTask& x) const {
        if (run.network_.runs_untracked(!x.route.empty(), x.bytes, x.latency, x.rate_bound, !x.accounted.empty())) {
          run.network_.start_fixed_rate(x.bytes, *x.rate_bound, [r = &run, i = id] { r->finish(i); });
          return;
        }
        if (run.network_.runs_as_delay(!x.route.empty(), x.bytes, x.rate_bound, !x.accounted.empty())) {
          run.network_.start_delay(x.latency, [r = &run, i = id] { r->finish(i); });
          return;
        }
        // The graph (or the run's classes) outlive the flow: it reads the route in place.
        const bool classes = run.classes_.has_value();
        run.network_.start_flow_on(
            classes ? run.classes_->route_of(id) : std::span<const ConstraintId>(x.route), x.bytes, x.latency,
            x.rate_bound, [r = &run, i = id] { r->finish(i); },
            classes ? run.accounted_over_classes(x) : std::span<const ConstraintId>(x.accounted));
      }
      void operator()(const AllocTask& a) const {
        run.pools_[a.pool].reserve(run.sim_.now(), a.tenant, a.bytes);
        run.mark_done(id);
      }
      void operator()(const FreeTask& f) const {
        run.pools_[f.pool].release(run.sim_.now(), f.tenant, f.bytes);
        run.mark_done(id);
      }
      void operator()(const BarrierTask&) const { run.mark_done(id); }
    };
    std::visit(Starter{*this, id, task}, task.body);
  }

  // Tasks that finish from an event start their ready dependents at once.
  void finish(std::uint32_t id) {
    mark_done(id);
    drain();
  }

  // Instant tasks (alloc, free, barrier) call this inside drain(): their dependents join the
  // ready set and start there, in order.
  void mark_done(std::uint32_t id) {
    records_[id].end = sim_.now();
    done_[id] = true;
    ++finished_;
    for (std::size_t i = dependents_begin_[id]; i < dependents_begin_[id + 1]; ++i) {
      const std::uint32_t dep = dependents_[i];
      if (--waiting_on_[dep] == 0) make_ready(dep);
    }
  }

  // Ready tasks start lowest (priority, id) first: a min-heap of distinct pairs, so the order is
  // total and the same as a sorted set's.
  void make_ready(std::uint32_t id) {
    ready_.emplace_back(graph_.tasks()[id].priority, id);
    std::push_heap(ready_.begin(), ready_.end(), std::greater<>{});
  }

  [[noreturn]] void report_deadlock() const {
    std::vector<std::string> lines;
    std::size_t stuck = 0;
    for (const auto& t : graph_.tasks()) {
      if (done_[t.id.index]) continue;
      ++stuck;
      if (lines.size() >= kDeadlockTasksShown) continue;
      std::vector<std::string> waits;
      for (const auto d : graph_.deps(t)) {
        if (!done_[d.index]) waits.emplace_back(graph_.name(graph_.task(d)));
      }
      lines.push_back(waits.empty() ? fmt::format("'{}' started but never finished", graph_.name(t))
                                    : fmt::format("'{}' waits for {}", graph_.name(t), fmt::join(waits, ", ")));
    }
    throw SimulationError(fmt::format("deadlock at t={} ps: {} of {} tasks never finished:\n  {}", sim_.now().ps, stuck,
                                      graph_.size(), fmt::join(lines, "\n  ")));
  }

  RunResult collect() {
    RunResult r;
    r.makespan = sim_.now();
    r.events_processed = sim_.events_processed();
    r.tasks = std::move(records_);
    for (const auto& u : units_) r.units.push_back({u.name(), u.lanes(), u.busy_time(), u.tasks_run()});
    // A run that keeps no link statistics reports no constraint: copying each one's names for
    // nothing was about 4% of a search point (issue 35).
    for (std::size_t i = 0; network_.keeps_statistics() && i < platform_.constraints.size(); ++i) {
      const ConstraintId c{static_cast<std::uint32_t>(i)};
      const auto& spec = platform_.constraints[i];
      r.constraints.push_back({spec.name, spec.link_class, spec.group.empty() ? spec.link_class : spec.group, spec.from,
                               spec.to, network_.capacity(c), network_.stats(c)});
    }
    for (const auto& p : pools_) {
      r.pools.push_back({p.name(), p.kind(), p.capacity(), p.peak(), p.peak_time(), p.timeline(), p.overflow()});
    }
    return r;
  }

  const Platform& platform_;
  const TaskGraph& graph_;
  Simulator sim_;
  FlowNetwork network_;
  std::optional<RouteClasses> classes_;  // without link statistics: the network's constraints
  std::vector<ConstraintId> accounted_scratch_;
  std::vector<ComputeUnit> units_;
  std::vector<MemoryPool> pools_;
  std::vector<TaskRecord> records_;
  std::vector<std::uint32_t> waiting_on_;
  // Task i's dependents: [begin[i], begin[i + 1]) (32-bit, as the graph's dependency lists are).
  std::vector<std::uint32_t> dependents_begin_;
  std::vector<std::uint32_t> dependents_;
  std::vector<bool> done_;
  std::size_t finished_ = 0;
  std::vector<std::pair<std::int64_t, std::uint32_t>> ready_;  // min-heap
};

}  // namespace

RunResult execute(const Platform& platform, const TaskGraph& graph, const ExecOptions& options) {
  graph.validate(platform);
  Run run(platform, graph, options);
  return run.go();
}

}  // namespace offsim::sim
