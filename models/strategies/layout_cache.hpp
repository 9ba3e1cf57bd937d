#pragma once
// Rank layouts and machine resources shared by the points of a search (lay_out_ranks).
//
// Every point of `offsim search` lays out the same 1,024 devices of the same machine: resolving
// their names, checking the layout's symmetry and mirrors (make_rank_layout) and making the engine
// resources of the simulated nodes (make_machine_resources, a name per unit, pool and constraint)
// cost about 0.6 ms a point, as much as its model. While a LayoutCacheScope lives, lay_out_ranks
// keeps what it made and gives the next point that asks for the same thing a copy of its devices
// and layout, and its machine resources shared (SharedMachine: copied only if the point adds one).
//
// The key is everything lay_out_ranks' result depends on: the machine (the identity of its sealed
// topology, Topology::identity(): copies of one sealed topology share it and cannot change, and
// the entry holds it so that no other machine can take its place), the device names in rank
// order, all_ranks and block_ranks. The `strategy` name only words an error, and an error is
// never cached. The entry is a copy of the first point's result, so a point gets the same devices,
// layout, note and resources whether it was cached or not (tests/unit/layout_cache_test.cpp).
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "models/collectives/stage_flow_cache.hpp"
#include "models/platform/machine_resources.hpp"
#include "models/platform/rank_layout.hpp"

namespace offsim::models {

/// What lay_out_ranks makes: the ranks' devices, their layout, its note and the machine's resources.
struct LaidOutRanks {
  std::vector<std::size_t> devices;
  RankLayout layout;
  std::string note;
  std::shared_ptr<const MachineResources> machine;
};

/// Turns the cache on for the whole process while it lives (one at a time; nested scopes share the
/// outer one's). Its entries are dropped with it. Thread-safe: a sweep's workers look up under a
/// lock held for the comparison only and copy outside it.
class LayoutCacheScope {
 public:
  LayoutCacheScope();
  ~LayoutCacheScope();
  LayoutCacheScope(const LayoutCacheScope&) = delete;
  LayoutCacheScope& operator=(const LayoutCacheScope&) = delete;

 private:
  // The points that share resources share their collectives' stage flows too, for as long.
  StageFlowCacheScope stage_flows_;
};

namespace layout_cache {
/// The entry for this key, or null (no scope, or not made yet).
[[nodiscard]] std::shared_ptr<const LaidOutRanks> find(const topo::Topology& topology,
                                                       const std::vector<std::string>& names, bool all_ranks,
                                                       int block_ranks);
/// Keeps `value` under its key (when a scope is live); the cache holds a few machines' layouts.
void insert(const topo::Topology& topology, const std::vector<std::string>& names, bool all_ranks, int block_ranks,
            std::shared_ptr<const LaidOutRanks> value);
/// The entries held (tests).
[[nodiscard]] std::size_t size();
}  // namespace layout_cache

}  // namespace offsim::models
