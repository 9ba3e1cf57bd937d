#pragma once
// Constraints merged into classes for a run that keeps no link statistics (issue 35).
//
// The model. Without statistics a run needs from its constraints only the max-min fair rates
// they give the flows (flow_network.hpp). Call two constraints alike when every route of the
// graph lists them the same number of times (their "signatures", the list of (route, times
// listed), are equal). Alike constraints always carry the same flows with the same listings, so at
// every step of progressive filling their fair shares are (remaining capacity) / (the same count),
// and the remaining capacities are the same capacities less the same rates in the same order: the
// one of least capacity always has the least share (subtraction and division are monotone in
// floating point), and it saturates first, fixing every flow of the class at its share. The others
// never bind. A class is therefore one constraint of its members' least capacity, listed by each
// route as many times as the route lists any one member, and its place in the order of
// constraints (which breaks ties between equal shares, ShareEntry) is that member's: the member
// of least capacity, the lowest-numbered among equals. The rates are the same doubles. (One
// corner is not covered: a member of larger capacity whose remaining capacity rounds to exactly
// the least one's, while another class ties with both; the lists' order would then take the
// larger member's place. Both fix the same flows at the same level unless that third class ties
// exactly, which the byte-identity checks of docs/search.md have not met.)
//
// What it saves: a pipeline transfer of a TP group of 8 crosses the union of its members' routes,
// 48 constraints, that no other route crosses: one class. Starting, claiming, checking and ending
// each such flow walked all 48 (about a fifth of a Megatron search's instructions).
//
// A graph's transfers repeat a few routes many times (a pipeline transfer of every micro-batch
// between the same two stages): routes are matched by their list's address (a sim::Route's copies
// share one list), and else by content.
#include <cstdint>
#include <limits>
#include <span>
#include <vector>

#include "sim/exec/task_graph.hpp"

namespace offsim::sim {

class RouteClasses {
 public:
  static constexpr std::uint32_t kNone = std::numeric_limits<std::uint32_t>::max();

  /// The classes of `platform`'s constraints under `graph`'s transfer routes (the graph is valid
  /// for the platform: TaskGraph::validate).
  RouteClasses(const Platform& platform, const TaskGraph& graph);

  /// Per class, in order of the place each takes (see the header): its capacity and the platform
  /// constraint that stands for it.
  [[nodiscard]] const std::vector<double>& capacities() const { return classes_.capacities; }
  [[nodiscard]] const std::vector<std::uint32_t>& representatives() const { return classes_.representatives; }
  /// Task `task`'s route over the classes (empty for a task without one).
  [[nodiscard]] std::span<const ConstraintId> route_of(std::uint32_t task) const;
  /// The class of platform constraint `c`, kNone when no route crosses it.
  [[nodiscard]] std::uint32_t class_of(ConstraintId c) const {
    return c.index < classes_.class_of.size() ? classes_.class_of[c.index] : kNone;
  }

  /// What the classes are: they follow from the platform's capacities and the distinct routes
  /// alone, so that a run meeting the same ones takes them as they were worked out (the last few
  /// of a thread are kept: route_classes.cpp).
  struct Classes {
    std::vector<ConstraintId> routes;  // distinct route i over the classes: routes[begin[i], begin[i + 1])
    std::vector<std::uint32_t> begin{0};
    std::vector<std::uint32_t> class_of;  // per platform constraint (empty: no route at all)
    std::vector<double> capacities;
    std::vector<std::uint32_t> representatives;
  };

 private:
  // Each distinct route once, over the platform's constraints: route i is
  // routes_[begin_[i], begin_[i + 1]).
  std::vector<ConstraintId> routes_;
  std::vector<std::uint32_t> begin_{0};
  std::vector<std::uint32_t> route_of_task_;  // distinct route index per task, kNone without one
  Classes classes_;

  // The distinct route index of `route`, added when new.
  std::uint32_t intern(std::span<const ConstraintId> route, std::vector<std::uint64_t>& hashes,
                       std::vector<std::uint32_t>& next_same_hash, std::vector<std::uint32_t>& buckets);
  void find_classes(const Platform& platform);
  void rewrite_routes();
  // The classes of the same capacities and routes, from the last few this thread worked out
  // (classified() in route_classes.cpp), if it has them; keep_classes adds these.
  bool take_known_classes(const Platform& platform);
  void keep_classes(const Platform& platform) const;
};

}  // namespace offsim::sim
