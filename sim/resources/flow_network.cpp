#include "sim/resources/flow_network.hpp"

#include <fmt/format.h>
#include <algorithm>
#include <limits>
#include <stdexcept>

#include "sim/core/errors.hpp"

namespace offsim::sim {

namespace {
// Two fair shares closer than this relative gap saturate in the same round of progressive
// filling; it only guards against round-off between mathematically equal shares.
constexpr double kShareTieTolerance = 1e-12;
}  // namespace

ConstraintId FlowNetwork::add_constraint(std::string name, Bandwidth capacity) {
  if (!(capacity.bytes_per_s > 0.0)) {
    throw std::invalid_argument(
        fmt::format("constraint '{}' needs a positive capacity, got {} B/s", name, capacity.bytes_per_s));
  }
  constraints_.push_back(Constraint{std::move(name), capacity.bytes_per_s, {}});
  return ConstraintId{static_cast<std::uint32_t>(constraints_.size() - 1)};
}

FlowId FlowNetwork::start_flow(FlowSpec spec, Completion on_complete) {
  for (const auto c : spec.route) {
    if (c.index >= constraints_.size()) throw std::invalid_argument("flow route names an unknown constraint");
  }
  if (spec.route.empty() && spec.bytes.count > 0 && !spec.rate_bound) {
    throw std::invalid_argument("a flow with bytes needs a route or a rate bound");
  }
  if (spec.rate_bound && !(spec.rate_bound->bytes_per_s > 0.0)) {
    throw std::invalid_argument("a flow's rate bound must be positive");
  }
  const FlowId id{static_cast<std::uint32_t>(flows_.size())};
  Flow flow;
  flow.remaining_bytes = spec.bytes.as_double();
  flow.spec = std::move(spec);
  flow.on_complete = std::move(on_complete);
  const TimePs latency = flow.spec.latency;
  const bool empty = flow.spec.bytes.count == 0;
  flows_.push_back(std::move(flow));
  if (empty) {
    // Nothing to share: the flow completes when its latency has elapsed.
    sim_.schedule_after(latency, EventPhase::kCompletion, [this, id] {
      auto done = std::move(flows_[id.index].on_complete);
      if (done) done();
    });
  } else if (latency.ps > 0) {
    sim_.schedule_after(latency, EventPhase::kCompletion, [this, id] { activate(id); });
  } else {
    activate(id);
  }
  return id;
}

void FlowNetwork::activate(FlowId f) {
  advance_to(sim_.now());
  active_.push_back(f.index);
  // Ids grow monotonically but latency phases differ, so keep the active list sorted by id.
  std::sort(active_.begin(), active_.end());
  reshare();
  schedule_next_completion();
}

void FlowNetwork::advance_to(TimePs now) {
  const TimePs dt = now - last_update_;
  if (dt.ps > 0 && !active_.empty()) {
    const double dt_s = dt.seconds();
    for (const auto id : active_) {
      Flow& flow = flows_[id];
      const double moved = std::min(flow.remaining_bytes, flow.rate * dt_s);
      flow.remaining_bytes = std::max(0.0, flow.remaining_bytes - flow.rate * dt_s);
      for (const auto c : flow.spec.route) constraints_[c.index].stats.bytes_carried += moved;
    }
    // Statistics count the rates that held over [last_update_, now): transient rates seen while
    // several flows join at one instant last no time and are not peaks.
    for (auto& c : constraints_) {
      if (c.current_rate > 0.0) {
        c.stats.busy_time += dt;
        c.stats.peak_bytes_per_s = std::max(c.stats.peak_bytes_per_s, c.current_rate);
      }
    }
  }
  last_update_ = now;
}

void FlowNetwork::reshare() {
  for (auto& c : constraints_) {
    c.remaining = c.capacity;
    c.unfixed = 0;
  }
  for (const auto id : active_) {
    Flow& flow = flows_[id];
    flow.fixed = false;
    flow.rate = 0.0;
    for (const auto c : flow.spec.route) ++constraints_[c.index].unfixed;
  }
  std::size_t unfixed_flows = active_.size();
  while (unfixed_flows > 0) {
    // The next level at which something saturates: a constraint's fair share or a flow's bound.
    double level = std::numeric_limits<double>::infinity();
    for (const auto& c : constraints_) {
      if (c.unfixed > 0) level = std::min(level, c.remaining / c.unfixed);
    }
    for (const auto id : active_) {
      const Flow& flow = flows_[id];
      if (!flow.fixed && flow.spec.rate_bound) level = std::min(level, flow.spec.rate_bound->bytes_per_s);
    }
    const double threshold = level * (1.0 + kShareTieTolerance);
    // Fix every flow that crosses a saturated constraint or has reached its bound. The scan reads
    // one state; the fixed flows are charged to their constraints afterwards.
    newly_fixed_.clear();
    for (const auto id : active_) {
      Flow& flow = flows_[id];
      if (flow.fixed) continue;
      bool saturated = flow.spec.rate_bound && flow.spec.rate_bound->bytes_per_s <= threshold;
      for (const auto c : flow.spec.route) {
        const Constraint& con = constraints_[c.index];
        if (con.remaining / con.unfixed <= threshold) saturated = true;
      }
      if (saturated) newly_fixed_.push_back(id);
    }
    if (newly_fixed_.empty()) throw SimulationError("progressive filling made no progress (non-finite share)");
    for (const auto id : newly_fixed_) {
      Flow& flow = flows_[id];
      flow.fixed = true;
      flow.rate = level;
      for (const auto c : flow.spec.route) {
        Constraint& con = constraints_[c.index];
        con.remaining = std::max(0.0, con.remaining - level);
        --con.unfixed;
      }
    }
    unfixed_flows -= newly_fixed_.size();
  }
  // Aggregate rates per constraint, for statistics and timelines.
  for (auto& c : constraints_) c.remaining = 0.0;
  for (const auto id : active_) {
    for (const auto c : flows_[id].spec.route) constraints_[c.index].remaining += flows_[id].rate;
  }
  for (auto& c : constraints_) {
    const double rate = c.remaining;
    if (record_timelines_ && (c.stats.timeline.empty() || c.stats.timeline.back().bytes_per_s != rate)) {
      if (!c.stats.timeline.empty() && c.stats.timeline.back().time == sim_.now()) {
        c.stats.timeline.back().bytes_per_s = rate;
      } else {
        c.stats.timeline.push_back(RateSample{sim_.now(), rate});
      }
    }
    c.current_rate = rate;
  }
}

void FlowNetwork::schedule_next_completion() {
  ++generation_;
  if (active_.empty()) return;
  TimePs next = TimePs::max();
  for (const auto id : active_) {
    Flow& flow = flows_[id];
    if (!(flow.rate > 0.0)) {
      throw SimulationError(
          fmt::format("flow {} has no bandwidth: every constraint on its route is saturated by zero capacity", id));
    }
    flow.finish = sim_.now() + duration_of(flow.remaining_bytes, flow.rate);
    next = std::min(next, flow.finish);
  }
  const std::uint64_t generation = generation_;
  sim_.schedule_at(next, EventPhase::kCompletion, [this, generation] { on_completion_event(generation); });
}

void FlowNetwork::on_completion_event(std::uint64_t generation) {
  if (generation != generation_) return;  // superseded by a later reshare
  advance_to(sim_.now());
  std::vector<std::uint32_t> finished;
  std::erase_if(active_, [&](std::uint32_t id) {
    if (flows_[id].finish > sim_.now()) return false;
    flows_[id].remaining_bytes = 0.0;
    flows_[id].rate = 0.0;
    finished.push_back(id);
    return true;
  });
  reshare();
  schedule_next_completion();
  for (const auto id : finished) {
    auto done = std::move(flows_[id].on_complete);
    if (done) done();
  }
}

}  // namespace offsim::sim
