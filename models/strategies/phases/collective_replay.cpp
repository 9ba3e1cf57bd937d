#include "models/strategies/phases/collective_replay.hpp"

#include <algorithm>
#include <map>
#include <span>
#include <variant>

#include "models/transformer/phases.hpp"

namespace offsim::models {

std::optional<CollectiveReplays::Recording> CollectiveReplays::record(const Build& build, std::size_t members,
                                                                      int owner) {
  // The collective alone, every member starting at time 0.
  sim::TaskGraph scratch;
  std::vector<std::vector<sim::TaskId>> starts(members);
  for (std::size_t i = 0; i < members; ++i) {
    starts[i] = {scratch.add("replay.start", phase::kCommunication, sim::BarrierTask{})};
  }
  const std::vector<sim::TaskId> last = build(scratch, starts);
  std::vector<sim::ConstraintId> used;
  for (const sim::Task& t : scratch.tasks()) {
    if (const auto* x = std::get_if<sim::TransferTask>(&t.body)) {
      used.insert(used.end(), x->route.begin(), x->route.end());
      used.insert(used.end(), x->accounted.begin(), x->accounted.end());
    } else if (!std::holds_alternative<sim::BarrierTask>(t.body)) {
      return std::nullopt;  // a kernel or memory task: precondition 3
    }
  }
  std::sort(used.begin(), used.end());
  used.erase(std::unique(used.begin(), used.end()), used.end());
  const sim::RunResult run = sim::execute(platform_, scratch, sim::ExecOptions{.record_link_credits = true});
  Recording rec;
  for (const sim::TaskId t : last) rec.durations.push_back(run.tasks[t.index].end);
  ReplayedCollectives::Group group;
  group.owner = owner;
  for (const sim::ConstraintId c : used) {
    const sim::ConstraintStats& stats = run.constraints[c.index].stats;
    group.links.push_back({c, stats.credits, stats.busy_time, stats.peak_bytes_per_s});
  }
  rec.group = result_.groups.size();
  result_.groups.push_back(std::move(group));
  return rec;
}

std::optional<std::vector<sim::TaskId>> CollectiveReplays::add(int key, RankTimeline& timeline,
                                                               const std::vector<int>& members, const std::string& name,
                                                               const std::vector<std::vector<sim::TaskId>>& deps,
                                                               const Build& build, std::optional<int> owner) {
  if (!enabled_) return std::nullopt;
  auto it = recordings_.find(key);
  if (it == recordings_.end()) it = recordings_.emplace(key, record(build, members.size(), owner.value_or(key))).first;
  if (!it->second || it->second->durations.size() != members.size()) return std::nullopt;
  const Recording& rec = *it->second;
  sim::TaskGraph& g = timeline.graph();
  std::vector<sim::TaskId> last(members.size());
  for (std::size_t i = 0; i < members.size(); ++i) {
    last[i] = g.add(timeline.task_name(members[i], name + ".replay"), phase::kCommunication,
                    sim::TransferTask{{}, sim::Bytes{0}, rec.durations[i], {}, {}}, deps[i]);
  }
  result_.groups[rec.group].instances.push_back(last);
  return last;
}

ReplayedCollectives CollectiveReplays::take() {
  recordings_.clear();
  ReplayedCollectives out = std::move(result_);
  result_ = {};
  // A recorded collective never replayed adds nothing.
  std::erase_if(out.groups, [](const ReplayedCollectives::Group& g) { return g.instances.empty(); });
  return out;
}

bool replay_links_exclusive(const ReplayedCollectives& replayed, const sim::TaskGraph& graph) {
  std::vector<int> held;  // by constraint index: 1 + the owner of the recorded collectives using it, 0: none
  for (const auto& group : replayed.groups) {
    for (const auto& link : group.links) {
      const std::size_t c = link.constraint.index;
      if (held.size() <= c) held.resize(c + 1, 0);
      if (held[c] != 0 && held[c] != group.owner + 1) return false;  // two owners on one constraint
      held[c] = group.owner + 1;
    }
  }
  const auto touches = [&](std::span<const sim::ConstraintId> list) {
    return std::any_of(list.begin(), list.end(),
                       [&](sim::ConstraintId c) { return c.index < held.size() && held[c.index] != 0; });
  };
  return std::none_of(graph.tasks().begin(), graph.tasks().end(), [&](const sim::Task& t) {
    const auto* x = std::get_if<sim::TransferTask>(&t.body);
    return x && (touches(x->route) || touches(x->accounted));
  });
}

bool replays_held(const ReplayedCollectives& replayed, const sim::RunResult& run) {
  // Per owner, the latest end of the replays of the groups seen so far (in recording order).
  std::map<int, sim::TimePs> ended;
  for (const auto& group : replayed.groups) {
    const auto before = ended.find(group.owner);
    sim::TimePs last{0};
    for (const auto& members : group.instances) {
      const sim::TimePs start = run.tasks[members.front().index].start;
      for (const sim::TaskId t : members) {
        if (run.tasks[t.index].start != start) return false;
        last = std::max(last, run.tasks[t.index].end);
      }
      // An owner's later-recorded shape starts after its earlier ones' replays ended.
      if (before != ended.end() && start < before->second) return false;
    }
    ended[group.owner] = std::max(before != ended.end() ? before->second : sim::TimePs{0}, last);
  }
  return true;
}

void add_replayed_statistics(const ReplayedCollectives& replayed, sim::RunResult& run) {
  for (const auto& group : replayed.groups) {
    const auto times = static_cast<std::int64_t>(group.instances.size());
    for (const auto& link : group.links) {
      sim::ConstraintStats& stats = run.constraints[link.constraint.index].stats;
      // Replay after replay, the amounts in the order the full run adds them (a sum of doubles
      // depends on its order).
      for (std::int64_t k = 0; k < times; ++k) {
        for (const double bytes : link.credits) stats.bytes_carried += bytes;
      }
      stats.busy_time += sim::TimePs{link.busy.ps * times};
      stats.peak_bytes_per_s = std::max(stats.peak_bytes_per_s, link.peak);
    }
  }
}

}  // namespace offsim::models
