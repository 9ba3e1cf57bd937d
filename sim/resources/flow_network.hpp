#pragma once
// Flow-level network model: bandwidth shared max-min fairly among the flows that cross each
// constraint, computed by progressive filling (as SimGrid's LMM solver does for its default
// model).
//
// The model. A constraint l has capacity C_l (bytes/s). It stands for one direction of a link
// (a full-duplex link is two constraints), or for any shared bandwidth resource that traffic
// crosses, such as a host's DDR: a host-to-device copy then crosses [ddr, cpu->gpu link].
// A flow f crosses the constraints of its route and may carry its own bound B_f (e.g. a copy
// engine's limit). The rates r_f are the max-min fair allocation:
//     for all l:  sum_{f crosses l} r_f <= C_l,      for all f:  r_f <= B_f,
// and no r_f can grow without lowering an r_g <= r_f. Progressive filling computes it: raise
// every unfixed flow's rate together; when a constraint saturates (its remaining capacity over
// its unfixed flows is the smallest "fair share"), or a flow reaches its bound, fix those flows;
// repeat until every flow is fixed.
//
// A flow first waits its latency (no bytes move), then joins the sharing. Rates are recomputed
// once per instant at which flows join or leave; between such instants every rate is constant,
// so the next completion time is exact up to the 1 ps rounding rule of units.hpp.
//
// Flows are advanced lazily: a moving flow keeps (its bytes left at t0, t0, its rate, its finish)
// and is stepped to now only when a reshare gives it a different rate; then its finish is worked
// out again from the bytes left. A flow whose rate a change leaves alone keeps its finish, and a
// fixed-rate flow's start or end touches no shared flow. Constraints credit their busy time, peak
// and fixed-rate bytes when their aggregate rate changes (and at sync_stats()); a shared flow's
// bytes are credited to its constraints when it is stepped and when it ends. Completions come
// from a min-heap of (finish, flow): no per-change scan of the moving flows.
//
// Only the connected component of the flows and constraints that a change touches is recomputed
// (flows joined when they share a constraint, on their routes or in their accounting): a flow's
// max-min rate depends on its component alone, and progressive filling restricted to a component
// takes that component's steps in the same order as the whole network's run does, so the rates
// are the same to the last bit (docs/adr/0013-radix-event-queue-and-component-reshare.md). A flow
// alone on its links is a component of one: its reshare is a look at its route.
//
// A flow that starts on links nobody else uses or is accounted on (a pipeline transfer between two
// stages, mostly) is "solo": it skips the per-constraint lists and the component search. Each of
// its constraints only names it (Constraint::solo); its rate is worked out at the same flush, by the
// same formula and comparisons as a component of one flow (alone_share), its completion goes
// through the same heap, and its constraints' aggregate rates are set at the same instants to the
// same sums. The first flow that joins one of its constraints makes it an ordinary flow again
// (promote: linked into the lists, its constraints marked changed), so the reshare that follows is
// the one the lists would have given; the rates, completions and statistics are the same to the
// bit. Only while no timeline or credit is recorded (then every flow takes the lists).
//
// A flow that crosses no constraint and has a bound (an analytic collective, whose rate was worked
// out beforehand) shares nothing: its rate is its bound from start to end. It never triggers a
// reshare; its completion is scheduled once, and the constraints it is accounted on see its rate
// added while it moves.
#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "sim/core/simulator.hpp"
#include "sim/core/units.hpp"

namespace offsim::sim {

struct ConstraintId {
  std::uint32_t index = 0;
  auto operator<=>(const ConstraintId&) const = default;
};
struct FlowId {
  std::uint32_t index = 0;
  auto operator<=>(const FlowId&) const = default;
};

struct FlowSpec {
  std::vector<ConstraintId> route;  // constraints crossed, in order
  Bytes bytes{0};
  TimePs latency{0};                    // before the first byte moves
  std::optional<Bandwidth> rate_bound;  // per-flow cap, e.g. a copy engine
};

/// One (time, aggregate rate) point of a constraint's activity; the rate holds until the next.
struct RateSample {
  TimePs time;
  double bytes_per_s;
};

struct ConstraintStats {
  double bytes_carried = 0.0;
  TimePs busy_time{0};               // time with at least one flow moving bytes across it
  double peak_bytes_per_s = 0.0;     // highest aggregate rate held for a non-zero time
  std::vector<RateSample> timeline;  // only when recording is on; 0 B/s before the first sample
  // Every amount added to bytes_carried, in order (only when credit recording is on): what a
  // replay of the same traffic adds again to reproduce bytes_carried to the bit (a floating-point
  // sum depends on its order). models/strategies/phases/collective_replay.hpp uses it.
  std::vector<double> credits;
};

class FlowNetwork {
 public:
  using Completion = Callback;

  /// `statistics` false: no constraint statistics are kept (every ConstraintStats stays empty;
  /// rates and completions are the same), for runs whose link activity nobody reads. Recording
  /// timelines or credits keeps them.
  explicit FlowNetwork(Simulator& simulator, bool record_timelines = false, bool record_credits = false,
                       bool statistics = true)
      : sim_(simulator),
        record_timelines_(record_timelines),
        record_credits_(record_credits),
        statistics_(statistics || record_timelines || record_credits) {}
  FlowNetwork(const FlowNetwork&) = delete;
  FlowNetwork& operator=(const FlowNetwork&) = delete;

  /// Adds a constraint of positive capacity; throws std::invalid_argument otherwise, naming it. The
  /// network keeps no name: the platform has them (a run's network is made afresh for every point
  /// of a search, and copying a name per link was a malloc each).
  ConstraintId add_constraint(std::string_view name, Bandwidth capacity);
  /// What add_constraint checks of a constraint: throws std::invalid_argument, naming it, unless
  /// its capacity is positive (for a run that adds only some of its platform's: RouteClasses).
  static void check_capacity(std::string_view name, Bandwidth capacity);
  /// Room for `count` constraints, added next (the executor adds a platform's at once).
  void reserve_constraints(std::size_t count) { constraints_.reserve(count); }

  /// Starts a flow now. `on_complete` runs from an event when its last byte has arrived.
  /// `accounted`: constraints credited with the flow's bytes and rate in their statistics without
  /// sharing their capacity with it (one listed twice is credited twice): an analytic transfer
  /// that stands for flows whose rate was worked out beforehand still shows on their links.
  FlowId start_flow(FlowSpec spec, Completion on_complete, std::vector<ConstraintId> accounted = {});
  /// start_flow on a route held by the caller for as long as the flow lives (the executor's: a
  /// task graph's transfer, the graph held for the whole run), read in place rather than copied
  /// into the flow (a malloc and a copy per transfer: 70 k in a tp 8 search, issue 35). The same
  /// flow otherwise.
  FlowId start_flow_on(std::span<const ConstraintId> route, Bytes bytes, TimePs latency,
                       std::optional<Bandwidth> rate_bound, Completion on_complete,
                       std::span<const ConstraintId> accounted);

  /// Whether start_fixed_rate can run a transfer of this shape: a fixed-rate flow (no route, a
  /// positive rate bound, bytes, no latency) whose accounted constraints keep no statistics (it
  /// has none, or the network keeps none). Such a flow shares nothing and nobody reads its books.
  [[nodiscard]] bool runs_untracked(bool routed, Bytes bytes, TimePs latency,
                                    const std::optional<Bandwidth>& rate_bound, bool accounted) const {
    return !routed && rate_bound && rate_bound->bytes_per_s > 0.0 && bytes.count > 0 && latency.ps == 0 &&
           (!accounted || !statistics_);
  }
  /// Starts a transfer runs_untracked accepts: `on_complete` runs when start_flow would run it
  /// (the same time, from an event scheduled at the same point), but no Flow is kept: the Flow
  /// each held (route and accounted lists copied, a FlowStore entry for the run's length) was about 5%
  /// of a sweep point's CPU (issue 35; a search point's transfers are mostly routed, unchanged).
  void start_fixed_rate(Bytes bytes, Bandwidth rate, Completion on_complete);
  /// Whether start_delay can run a transfer of this shape: nothing to move (no bytes), no route
  /// and no bound to check, and no accounted constraint that keeps statistics (a replayed
  /// operation, a host-side delay). It only waits its latency.
  [[nodiscard]] bool runs_as_delay(bool routed, Bytes bytes, const std::optional<Bandwidth>& rate_bound,
                                   bool accounted) const {
    return !routed && bytes.count == 0 && !rate_bound && (!accounted || !statistics_);
  }
  /// Starts a transfer runs_as_delay accepts: `on_complete` runs when start_flow would run it
  /// (after the latency, from an event scheduled at the same point), but no Flow is kept (a search
  /// point's replayed operations are a fifth of its tasks, issue 35).
  void start_delay(TimePs latency, Completion on_complete);

  [[nodiscard]] std::size_t constraint_count() const { return constraints_.size(); }
  /// Whether the constraints' statistics are kept (asked for, or timelines or credits recorded).
  [[nodiscard]] bool keeps_statistics() const { return statistics_; }
  [[nodiscard]] Bandwidth capacity(ConstraintId c) const { return Bandwidth{constraints_[c.index].capacity}; }
  [[nodiscard]] const ConstraintStats& stats(ConstraintId c) const { return constraints_[c.index].stats; }
  /// Current rate of a flow (0 while in its latency phase or after it finished).
  [[nodiscard]] double rate(FlowId f);
  [[nodiscard]] std::size_t active_flow_count() const { return active_.size(); }
  /// Brings the byte and busy-time counters up to now(); call before reading stats at the end.
  void sync_stats();

  /// Recomputes the max-min fair rates of every active flow. Public so that benchmarks can time
  /// one whole reshare; the simulation itself recomputes only the components that changed.
  void reshare();

 private:
  static constexpr std::uint32_t kNoFlow = std::numeric_limits<std::uint32_t>::max();
  struct Constraint {
    double capacity;
    ConstraintStats stats;
    double current_rate = 0.0;  // aggregate rate since the last change (shared and fixed-rate flows)
    double shared_rate = 0.0;   // the part of it from shared flows, as the last reshare left it
    double fixed_rate = 0.0;    // the part of it from fixed-rate flows accounted on it
    std::uint32_t fixed_flows = 0;
    TimePs since{0};  // its statistics are credited up to this time
    // Active flows crossing it, one entry per time a route lists it, ascending ids.
    std::vector<std::uint32_t> flows;
    // Active flows crossing it or accounted on it, one entry per listing, ascending ids.
    std::vector<std::uint32_t> users;
    // scratch space of reshare()
    double remaining = 0.0;
    std::uint32_t unfixed = 0;
    std::uint32_t version = 0;
    std::uint32_t seen = 0;  // == search_epoch_: in the component being reshared
    // The solo flow alone on it (kNoFlow: none), and how many times its route lists it; while
    // there is one, `flows` and `users` are empty.
    std::uint32_t solo = kNoFlow;
    std::uint32_t solo_listings = 0;
  };
  struct ShareEntry {
    double share;
    std::uint32_t constraint;
    std::uint32_t version;
    // Min-heap order: smallest share first, ties by constraint id (deterministic).
    struct Later {
      bool operator()(const ShareEntry& a, const ShareEntry& b) const {
        return a.share != b.share ? a.share > b.share : a.constraint > b.constraint;
      }
    };
  };
  struct Flow {
    // The constraints it crosses: the caller's (start_flow_on) or owned_routes_'s (start_flow).
    std::span<const ConstraintId> route;
    Bytes bytes{0};
    TimePs latency{0};                    // before the first byte moves
    std::optional<Bandwidth> rate_bound;  // per-flow cap
    std::vector<ConstraintId> accounted;
    Completion on_complete;
    double remaining_bytes = 0.0;  // at t0
    double rate = 0.0;             // since t0
    double share = 0.0;            // scratch space of reshare(): the new rate
    TimePs t0{0};
    TimePs finish{0};
    std::uint32_t seen = 0;       // == search_epoch_: in the component being reshared
    std::uint32_t version = 0;    // of its entry in the completion heap
    std::uint32_t active_at = 0;  // its place in active_ while it moves
    // While solo: the lowest capacity over listings on its route, found as try_solo claimed it
    // (alone_share's constraint level; nothing else lists those constraints until it is promoted).
    double solo_level = 0.0;
    bool fixed = false;
    bool solo = false;  // moving alone, outside the per-constraint lists (see the header)
  };
  // A shared flow's finish, in the completion heap (stale when the flow's version moved on).
  struct Pending {
    TimePs finish;
    std::uint32_t id;
    std::uint32_t version;
    struct Later {
      bool operator()(const Pending& a, const Pending& b) const {
        return a.finish != b.finish ? a.finish > b.finish : a.id > b.id;
      }
    };
  };

  void activate(FlowId f);
  // A flow starting now on links no other flow crosses or is accounted on goes solo (true).
  bool try_solo(std::uint32_t id);
  // A solo flow joins the per-constraint lists (another flow is about to share a constraint).
  void promote(std::uint32_t id);
  // The rates of the flows that went solo since the last reshare (reshare_changed).
  void rate_solo_flows();
  // The rate of a flow alone in its component: the lowest of its bound and its constraints'
  // capacities over the times its route lists them (listings(constraint)).
  template <typename Listings>
  [[nodiscard]] double alone_share(const Flow& flow, Listings&& listings) const;
  // A finished flow's route let go (start_flow's copy freed).
  void release_route(Flow& flow, std::uint32_t id);
  // alone_share's last step: the flow's bound against `constraint_level`, the lowest capacity over
  // listings on its route.
  [[nodiscard]] double bounded_share(const Flow& flow, double constraint_level) const;
  // A fixed-rate flow starts (or stops) moving: its rate is added to (taken from) the constraints
  // it is accounted on.
  void start_fixed(FlowId f);
  void finish_fixed(FlowId f);
  void add_fixed_rate(const std::vector<ConstraintId>& accounted, double rate, bool starting);
  void set_current_rate(std::uint32_t index, double rate);
  // Adds `bytes` to a constraint's bytes_carried (and to its credit log when recording).
  void add_bytes(ConstraintStats& stats, double bytes) {
    stats.bytes_carried += bytes;
    if (record_credits_) stats.credits.push_back(bytes);
  }
  // Credits a constraint's statistics with its aggregate rate over [since, now).
  void credit(Constraint& c);
  // Steps a shared flow's bytes from t0 to now at its rate, crediting its constraints.
  void step(Flow& flow);
  // Calls f(constraint index, times) for each run of equal consecutive entries of `list`.
  template <typename F>
  static void for_each_run(const std::vector<ConstraintId>& list, F&& f) {
    for (std::size_t i = 0; i < list.size();) {
      std::size_t j = i + 1;
      while (j < list.size() && list[j] == list[i]) ++j;
      f(list[i].index, static_cast<std::uint32_t>(j - i));
      i = j;
    }
  }
  // A shared flow joins (leaves) the per-constraint lists; its constraints are marked changed.
  void link_flow(std::uint32_t id);
  void unlink_flow(std::uint32_t id);
  void mark_changed(const Flow& flow);
  // Recomputes the rates of the components that hold a changed constraint.
  void reshare_changed();
  // The new rates (Flow::share) of the component's flows: progressive filling, or its one step
  // when the component holds one flow or none.
  void fill_component();
  void fill_alone();
  void invalidate();
  void flush();
  void schedule_next_completion();
  void on_completion_event(std::uint64_t generation);

  Simulator& sim_;
  bool record_timelines_;
  bool record_credits_;
  bool statistics_;  // constraint statistics kept (credit, aggregate rates, bytes)
  std::vector<Constraint> constraints_;
  // Flows in blocks that never move, not a vector: flows are only appended, and a vector's
  // doubling held the old and the new buffer at once (28 MB at the peak of the full-Frontier
  // GPT-1T run, 2/3 of it spare). Not a std::deque either: libstdc++'s holds 512 bytes a block,
  // three flows, so a run allocated a block for every third flow (issue 35: 48 k of a tp 8
  // search's 1 M allocations).
  class FlowStore {
   public:
    static constexpr std::size_t kPerBlock = 64;
    FlowStore() = default;
    FlowStore(const FlowStore&) = delete;
    FlowStore& operator=(const FlowStore&) = delete;
    ~FlowStore() {
      for (std::size_t i = 0; i < size_; ++i) at(i).~Flow();
    }
    [[nodiscard]] std::size_t size() const { return size_; }
    Flow& operator[](std::size_t i) { return at(i); }
    const Flow& operator[](std::size_t i) const { return blocks_[i / kPerBlock][i % kPerBlock].flow; }
    void push_back(Flow&& flow) {
      if (size_ == blocks_.size() * kPerBlock) blocks_.push_back(std::make_unique<Slot[]>(kPerBlock));
      ::new (static_cast<void*>(&blocks_[size_ / kPerBlock][size_ % kPerBlock].flow)) Flow(std::move(flow));
      ++size_;
    }

   private:
    // Uninitialized room for one flow (constructed by push_back, destroyed by the store).
    union Slot {
      Slot() {}
      ~Slot() {}
      Flow flow;
    };
    Flow& at(std::size_t i) { return blocks_[i / kPerBlock][i % kPerBlock].flow; }
    std::vector<std::unique_ptr<Slot[]>> blocks_;
    std::size_t size_ = 0;
  };
  FlowStore flows_;
  // start_flow's routes, by flow, until it completes (start_flow_on's are the caller's).
  std::unordered_map<std::uint32_t, std::vector<ConstraintId>> owned_routes_;
  void check(const Flow& flow) const;  // the inputs start_flow and start_flow_on take, or throws
  FlowId start(Flow&& flow);           // start_flow and start_flow_on, once the flow holds its inputs
  std::vector<std::uint32_t> active_;  // ids of shared flows moving bytes, in no particular order
  void remove_active(Flow& flow);
  std::vector<Pending> pending_;             // min-heap of the moving shared flows' finishes
  std::vector<std::uint32_t> ended_;         // scratch space of on_completion_event()
  std::vector<std::uint32_t> changed_;       // constraints whose flows changed since the last reshare
  std::vector<std::uint32_t> solo_started_;  // flows gone solo since the last reshare, not rated yet
  std::vector<std::uint32_t> touched_;       // scratch space of reshare(): the component's constraints
  std::vector<std::uint32_t> component_;     // scratch space of reshare(): the component's flows
  std::uint32_t search_epoch_ = 0;
  std::vector<std::uint32_t> bounded_;  // scratch space of reshare()
  std::vector<ShareEntry> share_heap_;  // scratch space of reshare()
  std::uint64_t generation_ = 0;        // invalidates completion events scheduled before a change
  bool rates_stale_ = false;            // flows joined or left since the last reshare
  bool flush_pending_ = false;          // a flush event is scheduled at the current instant
};

}  // namespace offsim::sim
