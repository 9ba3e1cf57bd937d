#include "sim/resources/flow_network.hpp"

#include <fmt/format.h>
#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>

#include "sim/core/errors.hpp"

namespace offsim::sim {

namespace {
// Two fair shares closer than this relative gap saturate in the same round of progressive
// filling; it only guards against round-off between mathematically equal shares.
constexpr double kShareTieTolerance = 1e-12;
}  // namespace

void FlowNetwork::check_capacity(std::string_view name, Bandwidth capacity) {
  if (!(capacity.bytes_per_s > 0.0)) {
    throw std::invalid_argument(
        fmt::format("constraint '{}' needs a positive capacity, got {} B/s", name, capacity.bytes_per_s));
  }
}

ConstraintId FlowNetwork::add_constraint(std::string_view name, Bandwidth capacity) {
  check_capacity(name, capacity);
  Constraint c;
  c.capacity = capacity.bytes_per_s;
  constraints_.push_back(std::move(c));
  return ConstraintId{static_cast<std::uint32_t>(constraints_.size() - 1)};
}

FlowId FlowNetwork::start_flow(FlowSpec spec, Completion on_complete, std::vector<ConstraintId> accounted) {
  Flow flow;
  flow.route = spec.route;
  flow.bytes = spec.bytes;
  flow.latency = spec.latency;
  flow.rate_bound = spec.rate_bound;
  flow.accounted = std::move(accounted);
  flow.on_complete = std::move(on_complete);
  check(flow);
  // The network keeps the route until the flow completes (the vector's buffer, which the flow's
  // span names, stays where it is when the vector moves).
  if (!spec.route.empty()) owned_routes_.emplace(static_cast<std::uint32_t>(flows_.size()), std::move(spec.route));
  return start(std::move(flow));
}

FlowId FlowNetwork::start_flow_on(std::span<const ConstraintId> route, Bytes bytes, TimePs latency,
                                  std::optional<Bandwidth> rate_bound, Completion on_complete,
                                  std::span<const ConstraintId> accounted) {
  Flow flow;
  flow.route = route;
  flow.bytes = bytes;
  flow.latency = latency;
  flow.rate_bound = rate_bound;
  flow.accounted.assign(accounted.begin(), accounted.end());
  flow.on_complete = std::move(on_complete);
  check(flow);
  return start(std::move(flow));
}

void FlowNetwork::check(const Flow& flow) const {
  std::uint32_t highest = 0;  // (a reduction the compiler vectorises, then one comparison)
  for (const auto c : flow.route) highest = std::max(highest, c.index);
  if (!flow.route.empty() && highest >= constraints_.size()) {
    throw std::invalid_argument("flow route names an unknown constraint");
  }
  for (const auto c : flow.accounted) {
    if (c.index >= constraints_.size()) throw std::invalid_argument("flow accounting names an unknown constraint");
  }
  if (flow.route.empty() && flow.bytes.count > 0 && !flow.rate_bound) {
    throw std::invalid_argument("a flow with bytes needs a route or a rate bound");
  }
  if (flow.rate_bound && !(flow.rate_bound->bytes_per_s > 0.0)) {
    throw std::invalid_argument("a flow's rate bound must be positive");
  }
}

FlowId FlowNetwork::start(Flow&& flow) {
  const FlowId id{static_cast<std::uint32_t>(flows_.size())};
  flow.remaining_bytes = flow.bytes.as_double();
  const TimePs latency = flow.latency;
  const bool empty = flow.bytes.count == 0;
  const bool fixed_rate = flow.route.empty() && flow.rate_bound.has_value();
  flows_.push_back(std::move(flow));
  if (empty) {
    // Nothing to share: the flow completes when its latency has elapsed.
    sim_.schedule_after(latency, EventPhase::kCompletion, [this, id] {
      release_route(flows_[id.index], id.index);
      auto done = std::move(flows_[id.index].on_complete);
      if (done) done();
    });
  } else if (fixed_rate) {
    if (latency.ps > 0) {
      sim_.schedule_after(latency, EventPhase::kCompletion, [this, id] { start_fixed(id); });
    } else {
      start_fixed(id);
    }
  } else if (latency.ps > 0) {
    sim_.schedule_after(latency, EventPhase::kCompletion, [this, id] { activate(id); });
  } else {
    activate(id);
  }
  return id;
}

void FlowNetwork::release_route(Flow& flow, std::uint32_t id) {
  flow.route = {};
  if (!owned_routes_.empty()) owned_routes_.erase(id);
}

void FlowNetwork::start_fixed_rate(Bytes bytes, Bandwidth rate, Completion on_complete) {
  // start_fixed's finish, from the same double of bytes; finish_fixed adds nothing to books that
  // are not kept.
  sim_.schedule_at(sim_.now() + duration_of(bytes.as_double(), rate.bytes_per_s), EventPhase::kCompletion,
                   std::move(on_complete));
}

void FlowNetwork::start_delay(TimePs latency, Completion on_complete) {
  // start()'s empty flow, without the record: the same event, at the same time and phase.
  sim_.schedule_after(latency, EventPhase::kCompletion, std::move(on_complete));
}

void FlowNetwork::activate(FlowId f) {
  Flow& flow = flows_[f.index];
  flow.t0 = sim_.now();
  flow.rate = 0.0;
  flow.active_at = static_cast<std::uint32_t>(active_.size());
  active_.push_back(f.index);
  if (!try_solo(f.index)) link_flow(f.index);
  invalidate();
}

bool FlowNetwork::try_solo(std::uint32_t id) {
  Flow& flow = flows_[id];
  if (record_timelines_ || record_credits_ || !flow.accounted.empty() || flow.route.empty()) return false;
  // One pass that claims each constraint (a route may list one more than once: it is then this
  // flow's already), and gives back what it claimed at the first one in use: a free constraint
  // holds no solo flow and no listing, as promote and unlink_flow leave it.
  // The same pass finds alone_share's constraint level: a constraint's capacity over its listings
  // so far only falls as they grow, so the lowest over every step is the lowest over the final
  // counts, the same doubles divided and compared.
  const auto& route = flow.route;
  double level = std::numeric_limits<double>::infinity();
  for (std::size_t i = 0; i < route.size(); ++i) {
    Constraint& con = constraints_[route[i].index];
    if (!con.users.empty() || (con.solo != kNoFlow && con.solo != id)) {
      for (std::size_t j = 0; j < i; ++j) {
        constraints_[route[j].index].solo = kNoFlow;
        constraints_[route[j].index].solo_listings = 0;
      }
      return false;
    }
    con.solo = id;
    ++con.solo_listings;
    level = std::min(level, con.capacity / con.solo_listings);
  }
  flow.solo_level = level;
  flow.solo = true;
  solo_started_.push_back(id);  // rated at the flush, as the lists' reshare would rate it
  return true;
}

void FlowNetwork::promote(std::uint32_t id) {
  Flow& flow = flows_[id];
  for (const auto c : flow.route) {
    constraints_[c.index].solo = kNoFlow;
    constraints_[c.index].solo_listings = 0;
  }
  flow.solo = false;  // (still in solo_started_ if not rated yet: the reshare rates it in its component)
  link_flow(id);
}

void FlowNetwork::remove_active(Flow& flow) {
  const std::uint32_t at = flow.active_at;
  active_[at] = active_.back();
  flows_[active_[at]].active_at = at;
  active_.pop_back();
}

namespace {
void insert_sorted(std::vector<std::uint32_t>& list, std::uint32_t id) {
  list.insert(std::upper_bound(list.begin(), list.end(), id), id);
}
void erase_one(std::vector<std::uint32_t>& list, std::uint32_t id) {
  const auto at = std::lower_bound(list.begin(), list.end(), id);
  if (at != list.end() && *at == id) list.erase(at);
}
}  // namespace

void FlowNetwork::link_flow(std::uint32_t id) {
  const Flow& flow = flows_[id];
  // A solo flow on one of its constraints is no longer alone: it joins the lists first.
  for (const auto c : flow.route) {
    if (const std::uint32_t solo = constraints_[c.index].solo; solo != kNoFlow) promote(solo);
  }
  for (const auto c : flow.accounted) {
    if (const std::uint32_t solo = constraints_[c.index].solo; solo != kNoFlow) promote(solo);
  }
  for (const auto c : flow.route) {
    insert_sorted(constraints_[c.index].flows, id);
    insert_sorted(constraints_[c.index].users, id);
  }
  for (const auto c : flow.accounted) insert_sorted(constraints_[c.index].users, id);
  mark_changed(flow);
}

void FlowNetwork::unlink_flow(std::uint32_t id) {
  Flow& flow = flows_[id];
  if (flow.solo) {  // it was in no list: its constraints are free again
    for (const auto c : flow.route) {
      constraints_[c.index].solo = kNoFlow;
      constraints_[c.index].solo_listings = 0;
    }
    flow.solo = false;
    if (statistics_) mark_changed(flow);  // their aggregate rates drop to what is left (no flow)
    return;
  }
  for (const auto c : flow.route) {
    erase_one(constraints_[c.index].flows, id);
    erase_one(constraints_[c.index].users, id);
  }
  for (const auto c : flow.accounted) erase_one(constraints_[c.index].users, id);
  mark_changed(flow);
}

void FlowNetwork::mark_changed(const Flow& flow) {
  for (const auto c : flow.route) changed_.push_back(c.index);
  for (const auto c : flow.accounted) changed_.push_back(c.index);
}

void FlowNetwork::start_fixed(FlowId f) {
  Flow& flow = flows_[f.index];
  flow.rate = flow.rate_bound->bytes_per_s;
  flow.finish = sim_.now() + duration_of(flow.remaining_bytes, flow.rate);
  if (statistics_) add_fixed_rate(flow.accounted, flow.rate, true);
  sim_.schedule_at(flow.finish, EventPhase::kCompletion, [this, f] { finish_fixed(f); });
}

void FlowNetwork::finish_fixed(FlowId f) {
  Flow& flow = flows_[f.index];
  // Its constraints were credited its rate over its duration, which rounds up to whole
  // picoseconds: the remainder (a fraction of a picosecond's worth) makes their bytes exact.
  if (statistics_) {
    const double credited = flow.rate * duration_of(flow.remaining_bytes, flow.rate).seconds();
    for_each_run(flow.accounted, [&](std::uint32_t index, std::uint32_t times) {
      add_bytes(constraints_[index].stats, times * (flow.remaining_bytes - credited));
    });
    add_fixed_rate(flow.accounted, flow.rate, false);
  }
  flow.remaining_bytes = 0.0;
  flow.rate = 0.0;
  std::vector<ConstraintId>().swap(flow.accounted);
  auto done = std::move(flow.on_complete);
  if (done) done();
}

void FlowNetwork::add_fixed_rate(const std::vector<ConstraintId>& accounted, double rate, bool starting) {
  // A constraint listed k times (k flows of a class crossing it) takes the rate k times; its
  // aggregate rate is then updated once per run of equal entries (analytic transfers list theirs
  // sorted, so that is once per constraint).
  for_each_run(accounted, [&](std::uint32_t index, std::uint32_t times) {
    Constraint& con = constraints_[index];
    credit(con);
    if (starting) {
      con.fixed_flows += times;
      con.fixed_rate += times * rate;
    } else {
      con.fixed_flows -= times;
      con.fixed_rate = con.fixed_flows == 0 ? 0.0 : con.fixed_rate - times * rate;  // no round-off left when idle
    }
    set_current_rate(index, con.shared_rate + con.fixed_rate);
  });
}

void FlowNetwork::credit(Constraint& c) {
  // Statistics count the rates that held over [since, now): transient rates seen while several
  // flows join at one instant last no time and are not peaks. Fixed-rate flows are credited by
  // their aggregate rate (their completion events end them exactly on time).
  const TimePs now = sim_.now();
  const TimePs dt = now - c.since;
  if (dt.ps > 0 && c.current_rate > 0.0) {
    c.stats.busy_time += dt;
    if (c.fixed_rate != 0.0) add_bytes(c.stats, c.fixed_rate * dt.seconds());
    c.stats.peak_bytes_per_s = std::max(c.stats.peak_bytes_per_s, c.current_rate);
  }
  c.since = now;
}

void FlowNetwork::step(Flow& flow) {
  const TimePs dt = sim_.now() - flow.t0;
  flow.t0 = sim_.now();
  if (dt.ps <= 0) return;
  const double dt_s = dt.seconds();
  const double moved = std::min(flow.remaining_bytes, flow.rate * dt_s);
  flow.remaining_bytes = std::max(0.0, flow.remaining_bytes - flow.rate * dt_s);
  if (!statistics_) return;
  for (const auto c : flow.route) add_bytes(constraints_[c.index].stats, moved);
  for (const auto c : flow.accounted) add_bytes(constraints_[c.index].stats, moved);
}

void FlowNetwork::sync_stats() {
  if (!statistics_) return;
  for (const auto id : active_) step(flows_[id]);
  for (auto& c : constraints_) credit(c);
}

void FlowNetwork::set_current_rate(std::uint32_t index, double rate) {
  Constraint& c = constraints_[index];
  credit(c);
  if (record_timelines_ && (c.stats.timeline.empty() || c.stats.timeline.back().bytes_per_s != rate)) {
    if (!c.stats.timeline.empty() && c.stats.timeline.back().time == sim_.now()) {
      c.stats.timeline.back().bytes_per_s = rate;
    } else {
      c.stats.timeline.push_back(RateSample{sim_.now(), rate});
    }
  }
  c.current_rate = rate;
}

void FlowNetwork::invalidate() {
  // Rates are recomputed once per instant, however many flows join or leave at it: the first
  // change schedules a flush at the current time, later ones at the same instant ride along.
  ++generation_;  // completion events computed from the old rates are void
  rates_stale_ = true;
  if (flush_pending_) return;
  flush_pending_ = true;
  sim_.schedule_at(sim_.now(), EventPhase::kCompletion, [this] { flush(); });
}

void FlowNetwork::flush() {
  flush_pending_ = false;
  if (rates_stale_) reshare_changed();
  schedule_next_completion();
}

double FlowNetwork::rate(FlowId f) {
  if (rates_stale_) reshare_changed();
  return flows_[f.index].rate;
}

void FlowNetwork::reshare() {
  for (const auto id : active_) mark_changed(flows_[id]);
  reshare_changed();
}

void FlowNetwork::reshare_changed() {
  rates_stale_ = false;
  // The components to recompute: every constraint and flow reachable from a changed constraint
  // through the flows that cross or are accounted on it. Flows outside them keep their rates, and
  // so do the aggregate rates of constraints outside them.
  ++search_epoch_;
  touched_.clear();
  component_.clear();
  const auto reach = [this](std::uint32_t index) {
    Constraint& c = constraints_[index];
    if (c.seen == search_epoch_) return;
    c.seen = search_epoch_;
    touched_.push_back(index);
  };
  for (const auto index : changed_) reach(index);
  changed_.clear();
  for (std::size_t next = 0; next < touched_.size(); ++next) {
    for (const auto id : constraints_[touched_[next]].users) {
      Flow& flow = flows_[id];
      if (flow.seen == search_epoch_) continue;
      flow.seen = search_epoch_;
      component_.push_back(id);
      for (const auto c : flow.route) reach(c.index);
      for (const auto c : flow.accounted) reach(c.index);
    }
  }
  // A flow alone in its component (one that moves alone on its links), or none (flows that left
  // links nobody else uses), needs no progressive filling.
  if (component_.size() <= 1) {
    fill_alone();
  } else {
    // The same orders as a reshare of the whole network: constraints and flows by ascending id.
    std::sort(touched_.begin(), touched_.end());
    std::sort(component_.begin(), component_.end());
    fill_component();
  }

  // A flow whose rate changed is stepped to now at its old rate, and its finish worked out again
  // from the bytes it has left; the others keep theirs.
  const TimePs now = sim_.now();
  for (const auto id : component_) {
    Flow& flow = flows_[id];
    if (!(flow.share > 0.0)) {
      throw SimulationError(
          fmt::format("flow {} has no bandwidth: every constraint on its route is saturated by zero capacity", id));
    }
    if (flow.share == flow.rate) continue;
    step(flow);
    flow.rate = flow.share;
    flow.finish = now + duration_of(flow.remaining_bytes, flow.rate);
    ++flow.version;
    pending_.push_back(Pending{flow.finish, id, flow.version});
    std::push_heap(pending_.begin(), pending_.end(), Pending::Later{});
  }
  rate_solo_flows();
  if (!statistics_) return;
  // Aggregate rates per constraint, for statistics and timelines: each flow's rate added once per
  // listing, flows by ascending id (the order of a whole-network sum). A solo flow is the only
  // flow of its constraints.
  for (const auto index : touched_) {
    Constraint& c = constraints_[index];
    double sum = 0.0;
    for (const auto id : c.users) sum += flows_[id].rate;
    for (std::uint32_t k = 0; k < c.solo_listings; ++k) sum += flows_[c.solo].rate;
    c.shared_rate = sum;
    set_current_rate(index, c.shared_rate + c.fixed_rate);
  }
}

template <typename Listings>
double FlowNetwork::alone_share(const Flow& flow, Listings&& listings) const {
  // Progressive filling with one flow takes one step: the lowest of its bound and its
  // constraints' fair shares (capacity over the times its route lists them), compared as
  // fill_component() compares them, so the rate is the same double.
  double constraint_level = std::numeric_limits<double>::infinity();
  for (const auto c : flow.route) {
    const Constraint& con = constraints_[c.index];
    const std::uint32_t unfixed = listings(con);
    constraint_level = std::min(constraint_level, con.capacity / unfixed);
  }
  return bounded_share(flow, constraint_level);
}

double FlowNetwork::bounded_share(const Flow& flow, double constraint_level) const {
  const double bound_level = flow.rate_bound ? flow.rate_bound->bytes_per_s : std::numeric_limits<double>::infinity();
  if (!std::isfinite(constraint_level) && !std::isfinite(bound_level)) {
    throw SimulationError("progressive filling made no progress (a flow with neither route nor bound)");
  }
  return bound_level <= constraint_level * (1.0 + kShareTieTolerance) ? bound_level : constraint_level;
}

void FlowNetwork::fill_alone() {
  if (component_.empty()) return;
  Flow& flow = flows_[component_.front()];
  flow.share = alone_share(flow, [](const Constraint& con) { return static_cast<std::uint32_t>(con.flows.size()); });
}

void FlowNetwork::rate_solo_flows() {
  // As reshare_changed() rates a component of one flow that starts: stepped (no time has passed),
  // its rate, its finish from the bytes it has, a heap entry; its constraints join those whose
  // aggregate rate is set next.
  const TimePs now = sim_.now();
  for (const auto id : solo_started_) {
    Flow& flow = flows_[id];
    if (!flow.solo) continue;  // promoted: rated in its component
    // alone_share with the solo listings, its constraint level found by try_solo.
    const double share = bounded_share(flow, flow.solo_level);
    if (!(share > 0.0)) {
      throw SimulationError(
          fmt::format("flow {} has no bandwidth: every constraint on its route is saturated by zero capacity", id));
    }
    if (share != flow.rate) {
      step(flow);
      flow.rate = share;
      flow.finish = now + duration_of(flow.remaining_bytes, flow.rate);
      ++flow.version;
      pending_.push_back(Pending{flow.finish, id, flow.version});
      std::push_heap(pending_.begin(), pending_.end(), Pending::Later{});
    }
    for (const auto c : flow.route) {
      if (!statistics_) break;
      Constraint& con = constraints_[c.index];
      if (con.seen == search_epoch_) continue;
      con.seen = search_epoch_;
      touched_.push_back(c.index);
    }
  }
  solo_started_.clear();
}

void FlowNetwork::fill_component() {
  // Progressive filling driven by a min-heap of constraint fair shares (remaining / unfixed) and
  // the bounded flows sorted by bound: each step saturates the constraint with the smallest share,
  // or fixes the flow with the smallest bound, whichever level is lower. Cost
  // O(sum of route lengths x log constraints) of the component instead of one pass over all flows
  // per level.
  for (const auto index : touched_) {
    Constraint& c = constraints_[index];
    c.remaining = c.capacity;
    c.unfixed = static_cast<std::uint32_t>(c.flows.size());
    c.version = 0;
  }
  bounded_.clear();
  for (const auto id : component_) {
    Flow& flow = flows_[id];
    flow.fixed = false;
    flow.share = 0.0;
    if (flow.rate_bound) bounded_.push_back(id);
  }
  std::stable_sort(bounded_.begin(), bounded_.end(), [this](std::uint32_t a, std::uint32_t b) {
    return flows_[a].rate_bound->bytes_per_s < flows_[b].rate_bound->bytes_per_s;
  });
  share_heap_.clear();
  const auto push_share = [this](std::uint32_t c) {
    Constraint& con = constraints_[c];
    ++con.version;
    if (con.unfixed == 0) return;
    share_heap_.push_back(ShareEntry{con.remaining / con.unfixed, c, con.version});
    std::push_heap(share_heap_.begin(), share_heap_.end(), ShareEntry::Later{});
  };
  for (const auto index : touched_) push_share(index);

  const auto fix = [this, &push_share](std::uint32_t id, double rate) {
    Flow& flow = flows_[id];
    flow.fixed = true;
    flow.share = rate;
    for (const auto c : flow.route) {
      Constraint& con = constraints_[c.index];
      con.remaining = std::max(0.0, con.remaining - rate);
      --con.unfixed;
      push_share(c.index);
    }
  };

  std::size_t unfixed_flows = component_.size();
  std::size_t next_bounded = 0;
  while (unfixed_flows > 0) {
    // Drop heap entries made stale by later updates of their constraint.
    while (!share_heap_.empty() &&
           share_heap_.front().version != constraints_[share_heap_.front().constraint].version) {
      std::pop_heap(share_heap_.begin(), share_heap_.end(), ShareEntry::Later{});
      share_heap_.pop_back();
    }
    while (next_bounded < bounded_.size() && flows_[bounded_[next_bounded]].fixed) ++next_bounded;
    const double constraint_level =
        share_heap_.empty() ? std::numeric_limits<double>::infinity() : share_heap_.front().share;
    const double bound_level = next_bounded < bounded_.size() ? flows_[bounded_[next_bounded]].rate_bound->bytes_per_s
                                                              : std::numeric_limits<double>::infinity();
    if (!std::isfinite(constraint_level) && !std::isfinite(bound_level)) {
      throw SimulationError("progressive filling made no progress (a flow with neither route nor bound)");
    }
    if (bound_level <= constraint_level * (1.0 + kShareTieTolerance)) {
      fix(bounded_[next_bounded++], bound_level);
      --unfixed_flows;
      continue;
    }
    const std::uint32_t saturated = share_heap_.front().constraint;
    std::pop_heap(share_heap_.begin(), share_heap_.end(), ShareEntry::Later{});
    share_heap_.pop_back();
    // Every unfixed flow crossing the saturated constraint gets the level (ids ascending).
    for (const auto id : constraints_[saturated].flows) {
      if (flows_[id].fixed) continue;
      fix(id, constraint_level);
      --unfixed_flows;
    }
  }
}

void FlowNetwork::schedule_next_completion() {
  // Drop the entries of flows whose finish moved since (a later entry holds the new one).
  while (!pending_.empty() && pending_.front().version != flows_[pending_.front().id].version) {
    std::pop_heap(pending_.begin(), pending_.end(), Pending::Later{});
    pending_.pop_back();
  }
  if (pending_.empty()) return;
  const std::uint64_t generation = generation_;
  sim_.schedule_at(pending_.front().finish, EventPhase::kCompletion,
                   [this, generation] { on_completion_event(generation); });
}

void FlowNetwork::on_completion_event(std::uint64_t generation) {
  if (generation != generation_) return;  // superseded by a later change
  const TimePs now = sim_.now();
  ended_.clear();
  while (!pending_.empty() && pending_.front().finish <= now) {
    const Pending p = pending_.front();
    std::pop_heap(pending_.begin(), pending_.end(), Pending::Later{});
    pending_.pop_back();
    Flow& flow = flows_[p.id];
    if (p.version != flow.version) continue;
    ++flow.version;  // no entry of it is current any more
    step(flow);
    flow.remaining_bytes = 0.0;
    flow.rate = 0.0;
    remove_active(flow);
    ended_.push_back(p.id);
  }
  // Flows that end at one instant leave, and then complete, by ascending id.
  std::sort(ended_.begin(), ended_.end());
  std::vector<std::uint32_t> finished;
  finished.swap(ended_);
  for (const auto id : finished) unlink_flow(id);
  invalidate();
  for (const auto id : finished) {
    // A finished flow keeps its record, not its route lists: a run of a million transfers would
    // otherwise hold every one until the end.
    Flow& flow = flows_[id];
    release_route(flow, id);
    std::vector<ConstraintId>().swap(flow.accounted);
    auto done = std::move(flow.on_complete);
    if (done) done();
  }
  finished.clear();
  if (ended_.capacity() < finished.capacity()) ended_.swap(finished);
}

}  // namespace offsim::sim
