#include "models/collectives/stage_flow_cache.hpp"

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

namespace offsim::models {

namespace {

// A 64-bit digest of the layout's ranks (FNV-1a over their devices and simulated indices),
// compared first: the keys of different groups then differ at once, and their vectors are compared
// only when the digests agree. (The mirrors, a number per device of the machine, are left out: they
// follow from the devices on one topology, and are compared in full after the rest.)
std::uint64_t digest(const RankLayout& l) {
  constexpr std::uint64_t kOffset = 14695981039346656037ULL;  // FNV-1a's 64-bit parameters
  constexpr std::uint64_t kPrime = 1099511628211ULL;
  std::uint64_t h = kOffset;
  const auto mix = [&](std::uint64_t v) { h = (h ^ v) * kPrime; };
  mix(static_cast<std::uint64_t>(l.class_size));
  mix(l.symmetric ? 1 : 0);
  for (const auto d : l.devices) mix(d);
  for (const auto r : l.simulated) mix(static_cast<std::uint64_t>(r));
  return h;
}

// The parts of a key, the same for a Key and a KeyView (so that a lookup copies nothing).
struct Parts {
  std::uint64_t digest;
  const void* machine;
  const void* topology;
  int algorithm, lo, hi, channels;
  const std::vector<bool>& participants;
  const RankLayout& layout;
};
// A key with its layout's digest.
template <typename K>
struct Digested {
  const K& key;
  std::uint64_t digest;
};
struct HeldKey {
  stage_flow_cache::Key key;
  std::uint64_t digest;
};
Parts parts(const Digested<stage_flow_cache::KeyView>& k) {
  return {k.digest, k.key.machine,  k.key.topology,      k.key.algorithm, k.key.lo,
          k.key.hi, k.key.channels, *k.key.participants, *k.key.layout};
}
Parts parts(const HeldKey& k) {
  return {k.digest, k.key.machine.get(), k.key.topology.get(), k.key.algorithm, k.key.lo,
          k.key.hi, k.key.channels,      k.key.participants,   k.key.layout};
}

// -1, 0 or 1 as a is before, equal to or after b; equal vectors (the usual case once the digests
// agree) compared as a whole (a memcmp) rather than element by element.
template <typename T>
int compare(const T& a, const T& b) {
  if (a == b) return 0;
  return a < b ? -1 : 1;
}

// Two layouts' vectors in order (devices, simulated ranks, their indices, then the mirrors, which
// count only under rank symmetry: shareable); their class size and symmetry are the callers'.
int compare_layout_vectors(const RankLayout& a, const RankLayout& b) {
  if (const int c = compare(a.devices, b.devices); c != 0) return c;
  if (const int c = compare(a.simulated, b.simulated); c != 0) return c;
  if (const int c = compare(a.simulated_index, b.simulated_index); c != 0) return c;
  return a.symmetric ? compare(a.mirror_of, b.mirror_of) : 0;
}

// Keys in the order of their digests, then their small fields, then the layout's vectors.
struct KeyLess {
  using is_transparent = void;
  template <typename A, typename B>
  bool operator()(const A& a, const B& b) const {
    const Parts x = parts(a);
    const Parts y = parts(b);
    const auto small = [](const Parts& p) {
      return std::make_tuple(p.digest, p.machine, p.topology, p.algorithm, p.lo, p.hi, p.channels, p.layout.class_size,
                             p.layout.symmetric);
    };
    if (const int c = compare(small(x), small(y)); c != 0) return c < 0;
    if (const int c = compare(x.participants, y.participants); c != 0) return c < 0;
    return compare_layout_vectors(x.layout, y.layout) < 0;
  }
};

// Analytic keys by their fields, the flows by address (held: unique while the entry lives).
auto analytic_fields(const stage_flow_cache::AnalyticKey& k) {
  return std::make_tuple(k.flows.get(), k.bus_bandwidth_bits, k.step_latency_ps, k.ring, k.bytes_per_flow, k.steps,
                         k.link_statistics);
}
struct AnalyticKeyLess {
  bool operator()(const stage_flow_cache::AnalyticKey& a, const stage_flow_cache::AnalyticKey& b) const {
    return analytic_fields(a) < analytic_fields(b);
  }
};

// A kept context (stage_flow_cache::Context): its parts copied, its value held.
struct HeldContext {
  std::shared_ptr<const void> machine;
  std::shared_ptr<const void> topology;
  RankLayout layout;
  std::map<std::string, std::vector<CollectiveFit>> collectives;
  bool roofline = false;
  CollectiveOptions options;
  std::shared_ptr<void> value;
};

// Equal layouts as KeyLess compares them.
bool same_layout(const RankLayout& a, const RankLayout& b) {
  return a.class_size == b.class_size && a.symmetric == b.symmetric && compare_layout_vectors(a, b) == 0;
}

bool same_context(const HeldContext& held, const stage_flow_cache::Context& c) {
  return held.machine == c.machine && held.topology == c.topology && held.options == c.options &&
         held.roofline == c.measured->roofline_collectives && same_layout(held.layout, *c.layout) &&
         held.collectives == c.measured->collectives;
}

struct Cache {
  std::mutex mutex;
  int scopes = 0;
  std::map<HeldKey, std::shared_ptr<const StageFlows>, KeyLess> entries;
  std::map<stage_flow_cache::AnalyticKey, std::shared_ptr<const AnalyticStage>, AnalyticKeyLess> analytic;
  std::map<std::uint64_t, std::vector<HeldContext>> contexts;  // by their layout's digest
  std::size_t context_count = 0;
};

Cache& cache() {
  static Cache c;
  return c;
}

}  // namespace

StageFlowCacheScope::StageFlowCacheScope() {
  Cache& c = cache();
  const std::lock_guard lock(c.mutex);
  ++c.scopes;
}

StageFlowCacheScope::~StageFlowCacheScope() {
  Cache& c = cache();
  const std::lock_guard lock(c.mutex);
  if (--c.scopes == 0) {
    c.analytic.clear();  // (first: its keys hold flows)
    c.entries.clear();
    c.contexts.clear();
    c.context_count = 0;
  }
}

namespace stage_flow_cache {

bool active() {
  Cache& c = cache();
  const std::lock_guard lock(c.mutex);
  return c.scopes > 0;
}

bool shareable(const RankLayout& layout) {
  return layout.devices.size() + (layout.symmetric ? layout.mirror_of.size() : 0) <= kMaxLayoutEntries;
}

std::shared_ptr<const StageFlows> find(const KeyView& key) {
  Cache& c = cache();
  const std::lock_guard lock(c.mutex);
  if (c.scopes == 0) return nullptr;
  const auto it = c.entries.find(Digested<KeyView>{key, digest(*key.layout)});
  return it == c.entries.end() ? nullptr : it->second;
}

std::shared_ptr<const StageFlows> insert(Key key, StageFlows flows) {
  auto value = std::make_shared<const StageFlows>(std::move(flows));
  Cache& c = cache();
  const std::lock_guard lock(c.mutex);
  if (c.scopes == 0 || c.entries.size() >= kMaxEntries) return value;
  const std::uint64_t layout_digest = digest(key.layout);
  return c.entries.try_emplace(HeldKey{std::move(key), layout_digest}, value).first->second;
}

std::size_t size() {
  Cache& c = cache();
  const std::lock_guard lock(c.mutex);
  return c.entries.size();
}

std::shared_ptr<const AnalyticStage> find_analytic(const AnalyticKey& key) {
  Cache& c = cache();
  const std::lock_guard lock(c.mutex);
  if (c.scopes == 0) return nullptr;
  const auto it = c.analytic.find(key);
  return it == c.analytic.end() ? nullptr : it->second;
}

std::shared_ptr<const AnalyticStage> insert_analytic(AnalyticKey key, AnalyticStage stage) {
  auto value = std::make_shared<const AnalyticStage>(std::move(stage));
  Cache& c = cache();
  const std::lock_guard lock(c.mutex);
  if (c.scopes == 0 || c.analytic.size() >= kMaxEntries) return value;
  return c.analytic.try_emplace(std::move(key), value).first->second;
}

std::size_t analytic_size() {
  Cache& c = cache();
  const std::lock_guard lock(c.mutex);
  return c.analytic.size();
}

std::shared_ptr<void> context_value(const Context& context, const std::function<std::shared_ptr<void>()>& make) {
  if (!shareable(*context.layout)) return nullptr;
  const std::uint64_t layout_digest = digest(*context.layout);  // (outside the lock)
  Cache& c = cache();
  const std::lock_guard lock(c.mutex);
  if (c.scopes == 0) return nullptr;
  auto& alike = c.contexts[layout_digest];
  for (const auto& held : alike) {
    if (same_context(held, context)) return held.value;
  }
  std::shared_ptr<void> value = make();
  if (c.context_count < kMaxContexts) {
    alike.push_back(HeldContext{context.machine, context.topology, *context.layout, context.measured->collectives,
                                context.measured->roofline_collectives, context.options, value});
    ++c.context_count;
  }
  return value;
}

std::size_t context_count() {
  Cache& c = cache();
  const std::lock_guard lock(c.mutex);
  return c.context_count;
}

}  // namespace stage_flow_cache

}  // namespace offsim::models
