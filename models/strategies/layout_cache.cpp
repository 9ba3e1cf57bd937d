#include "models/strategies/layout_cache.hpp"

#include <algorithm>
#include <mutex>

namespace offsim::models {

namespace {

// A search's points share one machine and a few layouts (one per pipeline depth and tensor
// width): a handful of entries, the most recent first, bounds the memory to a few machines'.
constexpr std::size_t kEntries = 8;

struct Entry {
  std::shared_ptr<const void> machine;  // Topology::identity(), held so it cannot be reused
  std::vector<std::string> names;
  bool all_ranks = false;
  int block_ranks = 0;
  std::shared_ptr<const LaidOutRanks> value;
};

struct Cache {
  std::mutex mutex;
  int scopes = 0;
  std::vector<Entry> entries;  // most recently used first
};

Cache& cache() {
  static Cache c;
  return c;
}

bool matches(const Entry& e, const std::shared_ptr<const void>& machine, const std::vector<std::string>& names,
             bool all_ranks, int block_ranks) {
  return e.machine == machine && e.all_ranks == all_ranks && e.block_ranks == block_ranks && e.names == names;
}

}  // namespace

LayoutCacheScope::LayoutCacheScope() {
  Cache& c = cache();
  const std::lock_guard lock(c.mutex);
  ++c.scopes;
}

LayoutCacheScope::~LayoutCacheScope() {
  Cache& c = cache();
  const std::lock_guard lock(c.mutex);
  if (--c.scopes == 0) c.entries.clear();
}

namespace layout_cache {

std::shared_ptr<const LaidOutRanks> find(const topo::Topology& topology, const std::vector<std::string>& names,
                                         bool all_ranks, int block_ranks) {
  const std::shared_ptr<const void> machine = topology.identity();
  Cache& c = cache();
  const std::lock_guard lock(c.mutex);
  if (c.scopes == 0 || !machine) return nullptr;
  const auto it = std::find_if(c.entries.begin(), c.entries.end(),
                               [&](const Entry& e) { return matches(e, machine, names, all_ranks, block_ranks); });
  if (it == c.entries.end()) return nullptr;
  std::rotate(c.entries.begin(), it, it + 1);
  return c.entries.front().value;
}

void insert(const topo::Topology& topology, const std::vector<std::string>& names, bool all_ranks, int block_ranks,
            std::shared_ptr<const LaidOutRanks> value) {
  std::shared_ptr<const void> machine = topology.identity();
  Cache& c = cache();
  const std::lock_guard lock(c.mutex);
  if (c.scopes == 0 || !machine) return;
  if (std::any_of(c.entries.begin(), c.entries.end(),
                  [&](const Entry& e) { return matches(e, machine, names, all_ranks, block_ranks); }))
    return;  // another worker made it first (the same value)
  c.entries.insert(c.entries.begin(), Entry{std::move(machine), names, all_ranks, block_ranks, std::move(value)});
  if (c.entries.size() > kEntries) c.entries.pop_back();
}

std::size_t size() {
  Cache& c = cache();
  const std::lock_guard lock(c.mutex);
  return c.entries.size();
}

}  // namespace layout_cache

}  // namespace offsim::models
