// The analytic fidelity: a stage's flows priced once (each link shared evenly by the flows crossing
// it) and emitted as one transfer per simulated rank, with the links it would have crossed.
#include <fmt/compile.h>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <vector>

#include "models/collectives/communicator.hpp"
#include "models/transformer/phases.hpp"

namespace offsim::models {

using sim::Bytes;
using sim::TaskId;
using sim::TimePs;
using sim::TransferTask;

Communicator::AnalyticStage Communicator::analytic_bodies(const CollectiveFit& f, const Band& band, bool ring,
                                                          std::int64_t bytes_per_flow, int steps,
                                                          const std::vector<std::vector<Flow>>& flows) {
  // Each constraint split evenly among the stage's flows that cross it; a flow's rate is its
  // tightest share (and, for rings, half the calibrated bus bandwidth); a subgroup moves at the
  // pace of its slowest flow.
  // Counts and rates in flat arrays indexed by constraint and by rank (the members of this stage
  // only are touched, and reset after): the same sums and minimums as maps keyed on them, without a
  // tree node per constraint and subgroup.
  // The arrays are the thread's, kept from call to call and communicator to communicator (all
  // zero, all NaN between calls): zero-filling them for each communicator, a few thousand
  // constraints and ranks each, was as much as their use in a search (issue 35).
  thread_local std::vector<int> crossing;                             // by constraint
  thread_local std::vector<double> subgroup_rate;                     // by the subgroup's first rank
  constexpr double kNone = std::numeric_limits<double>::quiet_NaN();  // no flow of the subgroup yet
  const auto& constraints = machine_.platform.constraints;
  const int sims = layout_.simulated_ranks();
  // Everything allocated before the arrays are written: nothing throws until they are clean again.
  std::vector<double> rate_of(sims, std::numeric_limits<double>::infinity());
  if (crossing.size() < constraints.size()) crossing.resize(constraints.size(), 0);
  if (subgroup_rate.size() < static_cast<std::size_t>(layout_.ranks())) subgroup_rate.resize(layout_.ranks(), kNone);
  for (const auto& direction : flows) {
    for (const Flow& fl : direction) {
      for (const auto c : fl.route) ++crossing[c.index];
    }
  }
  // With rank classes, a simulated rank's flows are those of every member it stands for, and it
  // moves at the pace of the slowest of their subgroups (exact when the members are symmetric).
  const auto subgroup = [&](int r) { return static_cast<std::size_t>(r - r % band.hi + r % band.lo); };
  for (const auto& direction : flows) {
    for (const Flow& fl : direction) {
      double rate = ring ? f.bus_bandwidth.bytes_per_s * 0.5 : std::numeric_limits<double>::infinity();
      for (const auto c : fl.route) {
        rate = std::min(rate, constraints[c.index].capacity.bytes_per_s / crossing[c.index]);
      }
      double& held = subgroup_rate[subgroup(fl.rank)];
      held = std::isnan(held) ? rate : std::min(held, rate);
    }
  }
  for (const auto& direction : flows) {
    for (const Flow& fl : direction) rate_of[fl.from] = std::min(rate_of[fl.from], subgroup_rate[subgroup(fl.rank)]);
  }
  for (const auto& direction : flows) {
    for (const Flow& fl : direction) {
      subgroup_rate[subgroup(fl.rank)] = kNone;
      for (const auto c : fl.route) crossing[c.index] = 0;
    }
  }
  // Every link a rank's flows cross is credited with their bytes and rate (once per flow), so the
  // report's link activity matches what the flows would have carried (unless it reports none).
  std::vector<std::vector<sim::ConstraintId>> links_of(sims);
  for (const auto& direction : flows) {
    if (!options_.link_statistics) break;
    for (const Flow& fl : direction)
      links_of[fl.from].insert(links_of[fl.from].end(), fl.route.begin(), fl.route.end());
  }
  // Sorted, so that the engine credits each link once for all the flows crossing it.
  for (auto& links : links_of) std::sort(links.begin(), links.end());
  AnalyticStage stage(sims);
  for (int s = 0; s < sims; ++s) {
    if (!active(s)) continue;
    stage[s] = TransferTask{{},
                            Bytes{bytes_per_flow * steps},
                            TimePs{f.step_latency.ps * steps},
                            sim::Bandwidth{rate_of[s]},
                            std::move(links_of[s])};
  }
  return stage;
}

std::vector<TaskId> Communicator::emit_analytic(const std::string& name, const AnalyticStage& stage, RankDeps first) {
  const int sims = layout_.simulated_ranks();
  std::vector<TaskId> done = task_list(sims);
  for (int s = 0; s < sims; ++s) {
    done[s] = stage[s] ? graph_.add(rank_task_name(name, ".analytic", s), phase::kCommunication, *stage[s], first[s])
                       : pass_through(name, s, first[s]);
  }
  return done;
}

}  // namespace offsim::models
