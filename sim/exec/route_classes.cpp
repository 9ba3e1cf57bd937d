#include "sim/exec/route_classes.hpp"

#include <algorithm>
#include <array>
#include <bit>
#include <cstddef>
#include <cstring>
#include <numeric>
#include <type_traits>
#include <variant>

namespace offsim::sim {

namespace {

// FNV-1a (64-bit; the parameters are FNV's), fed one number at a time.
class Fnv1a {
 public:
  void add(std::uint64_t v) {
    h_ ^= v;
    h_ *= kPrime;
  }
  [[nodiscard]] std::uint64_t value() const { return h_; }

 private:
  static constexpr std::uint64_t kPrime = 1099511628211ULL;
  std::uint64_t h_ = 14695981039346656037ULL;  // the offset basis
};

// A route's hash: every constraint. Met once per distinct list (tasks that share one are known by
// its address first).
std::uint64_t route_hash(std::span<const ConstraintId> route) {
  Fnv1a h;
  for (const auto c : route) h.add(c.index);
  return h.value();
}

// A constraint's signature's hash: every entry.
std::uint64_t signature_hash_of(std::span<const std::uint32_t> signature) {
  Fnv1a h;
  for (const auto r : signature) h.add(r);
  return h.value();
}

// Two routes of the same length hold the same constraints in the same order.
bool same_constraints(std::span<const ConstraintId> a, std::span<const ConstraintId> b) {
  static_assert(sizeof(ConstraintId) == sizeof(std::uint32_t) && std::is_trivially_copyable_v<ConstraintId>);
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size_bytes()) == 0;
}

// The classes this thread worked out last, with what they were worked out from: the platform's
// capacities and the distinct routes as met. The classes follow from those alone, so a run that
// meets the same ones, bit for bit, takes them (a sweep point's two simulations, the steady
// state's, route the same transfers over the same machine, and so do points on one layout).
struct Classified {
  std::vector<std::uint64_t> capacity_bits;  // per platform constraint
  std::vector<ConstraintId> routes;          // over the platform's constraints
  std::vector<std::uint32_t> begin;
  RouteClasses::Classes classes;
};
constexpr std::size_t kClassifiedKept = 4;
std::vector<Classified>& classified() {
  thread_local std::vector<Classified> kept;
  return kept;
}

bool same_capacities(const Platform& platform, const std::vector<std::uint64_t>& bits) {
  if (platform.constraints.size() != bits.size()) return false;
  for (std::size_t c = 0; c < bits.size(); ++c) {
    if (std::bit_cast<std::uint64_t>(platform.constraints[c].capacity.bytes_per_s) != bits[c]) return false;
  }
  return true;
}

}  // namespace

RouteClasses::RouteClasses(const Platform& platform, const TaskGraph& graph) {
  const auto& tasks = graph.tasks();
  route_of_task_.assign(tasks.size(), kNone);
  // Open hashing over the distinct routes: a power-of-two bucket array of chains.
  std::vector<std::uint64_t> hashes;
  std::vector<std::uint32_t> next_same_hash;
  std::vector<std::uint32_t> buckets(64, kNone);
  // Tasks that share a route's list (sim::Route's copies) are known by its address first: a
  // direct-mapped table of the last list seen in each slot, the content hashed only on a miss.
  constexpr std::size_t kKnownLists = 256;
  std::array<std::pair<const void*, std::uint32_t>, kKnownLists> known_lists{};
  for (std::size_t i = 0; i < tasks.size(); ++i) {
    const auto* x = std::get_if<TransferTask>(&tasks[i].body);
    if (x == nullptr || x->route.empty()) continue;
    const void* list = x->route.identity();
    auto& known = known_lists[(reinterpret_cast<std::uintptr_t>(list) / alignof(std::max_align_t)) % kKnownLists];
    if (known.first != list) known = {list, intern(x->route, hashes, next_same_hash, buckets)};
    route_of_task_[i] = known.second;
  }
  if (routes_.empty()) return;  // no routed transfer (a data-parallel sweep point's): no class
  if (take_known_classes(platform)) return;
  find_classes(platform);
  rewrite_routes();
  keep_classes(platform);
}

bool RouteClasses::take_known_classes(const Platform& platform) {
  for (const auto& k : classified()) {
    if (k.routes == routes_ && k.begin == begin_ && same_capacities(platform, k.capacity_bits)) {
      classes_ = k.classes;
      return true;
    }
  }
  return false;
}

void RouteClasses::keep_classes(const Platform& platform) const {
  Classified made{{}, routes_, begin_, classes_};
  made.capacity_bits.reserve(platform.constraints.size());
  for (const auto& c : platform.constraints) {
    made.capacity_bits.push_back(std::bit_cast<std::uint64_t>(c.capacity.bytes_per_s));
  }
  auto& kept = classified();
  if (kept.size() == kClassifiedKept) kept.erase(kept.begin());
  kept.push_back(std::move(made));
}

std::uint32_t RouteClasses::intern(std::span<const ConstraintId> route, std::vector<std::uint64_t>& hashes,
                                   std::vector<std::uint32_t>& next_same_hash, std::vector<std::uint32_t>& buckets) {
  const std::uint64_t h = route_hash(route);
  const auto same = [&](std::uint32_t r) {
    const std::span<const ConstraintId> known(routes_.data() + begin_[r], begin_[r + 1] - begin_[r]);
    return hashes[r] == h && same_constraints(known, route);
  };
  std::uint32_t& head = buckets[h & (buckets.size() - 1)];
  for (std::uint32_t r = head; r != kNone; r = next_same_hash[r]) {
    if (same(r)) return r;
  }
  const auto id = static_cast<std::uint32_t>(hashes.size());
  routes_.insert(routes_.end(), route.begin(), route.end());
  begin_.push_back(static_cast<std::uint32_t>(routes_.size()));
  hashes.push_back(h);
  next_same_hash.push_back(head);
  head = id;
  if (hashes.size() > buckets.size()) {  // keep chains short: twice the buckets, rehashed
    buckets.assign(buckets.size() * 2, kNone);
    for (std::uint32_t r = 0; r < hashes.size(); ++r) {
      std::uint32_t& b = buckets[hashes[r] & (buckets.size() - 1)];
      next_same_hash[r] = b;
      b = r;
    }
  }
  return id;
}

void RouteClasses::find_classes(const Platform& platform) {
  const std::size_t constraints = platform.constraints.size();
  const auto routes = static_cast<std::uint32_t>(begin_.size() - 1);
  // Each constraint's signature: the distinct routes that list it, once per listing, ascending
  // (compressed rows, filled route by route). Equal signatures: alike constraints.
  std::vector<std::uint32_t> row(constraints + 1, 0);
  for (const auto c : routes_) ++row[c.index + 1];
  std::partial_sum(row.begin(), row.end(), row.begin());
  std::vector<std::uint32_t> listings(routes_.size());
  std::vector<std::uint32_t> filled(row.begin(), row.end() - 1);
  for (std::uint32_t r = 0; r < routes; ++r) {
    for (std::uint32_t k = begin_[r]; k < begin_[r + 1]; ++k) listings[filled[routes_[k].index]++] = r;
  }
  const auto signature = [&](std::uint32_t c) {
    return std::span<const std::uint32_t>(listings.data() + row[c], row[c + 1] - row[c]);
  };
  // The classes, met in the order of constraints: each constraint joins the class of its
  // signature (found by the signature's hash in an open-addressed table, the signature itself
  // compared with the class's first member's), and a class's representative is its member of
  // least capacity, the first met among equals (the lowest-numbered). Sorting the constraints by
  // signature instead was most of this function's cost in a search.
  const auto capacity = [&](std::uint32_t c) { return platform.constraints[c].capacity.bytes_per_s; };
  std::vector<std::uint32_t> first_member;  // per class met
  std::vector<std::uint32_t> member_class(constraints, kNone);
  std::size_t slots = 64;
  while (slots < 2 * routes_.size()) slots *= 2;  // more slots than constraints on routes, twice over
  std::vector<std::pair<std::uint64_t, std::uint32_t>> table(slots, {0, kNone});  // (hash, class)
  for (std::uint32_t c = 0; c < constraints; ++c) {
    if (row[c + 1] == row[c]) continue;
    const auto mine = signature(c);
    const std::uint64_t h = signature_hash_of(mine);
    std::size_t at = h & (slots - 1);
    while (table[at].second != kNone &&
           (table[at].first != h || !std::ranges::equal(signature(first_member[table[at].second]), mine))) {
      at = (at + 1) & (slots - 1);
    }
    if (table[at].second == kNone) {
      table[at] = {h, static_cast<std::uint32_t>(first_member.size())};
      first_member.push_back(c);
      classes_.representatives.push_back(c);
    } else if (capacity(c) < capacity(classes_.representatives[table[at].second])) {
      classes_.representatives[table[at].second] = c;
    }
    member_class[c] = table[at].second;
  }
  // The classes take their representatives' places in the order of constraints.
  std::vector<std::uint32_t> order(classes_.representatives.size());
  std::iota(order.begin(), order.end(), 0U);
  std::sort(order.begin(), order.end(), [&](std::uint32_t a, std::uint32_t b) {
    return classes_.representatives[a] < classes_.representatives[b];
  });
  std::vector<std::uint32_t> place(order.size());
  std::vector<std::uint32_t> sorted(order.size());
  for (std::uint32_t k = 0; k < order.size(); ++k) {
    place[order[k]] = k;
    sorted[k] = classes_.representatives[order[k]];
  }
  classes_.representatives = std::move(sorted);
  classes_.class_of.assign(constraints, kNone);
  for (std::uint32_t c = 0; c < constraints; ++c) {
    if (member_class[c] != kNone) classes_.class_of[c] = place[member_class[c]];
  }
  classes_.capacities.reserve(classes_.representatives.size());
  for (const auto c : classes_.representatives) classes_.capacities.push_back(capacity(c));
}

void RouteClasses::rewrite_routes() {
  // A route lists its class as many times as it lists the representative (as many as any member).
  auto& rewritten = classes_.routes;
  rewritten.reserve(routes_.size());
  classes_.begin.reserve(begin_.size());
  for (std::size_t r = 0; r + 1 < begin_.size(); ++r) {
    for (std::uint32_t k = begin_[r]; k < begin_[r + 1]; ++k) {
      const std::uint32_t c = routes_[k].index;
      const std::uint32_t cls = classes_.class_of[c];
      if (classes_.representatives[cls] == c) rewritten.push_back(ConstraintId{cls});
    }
    classes_.begin.push_back(static_cast<std::uint32_t>(rewritten.size()));
  }
}

std::span<const ConstraintId> RouteClasses::route_of(std::uint32_t task) const {
  const std::uint32_t r = route_of_task_[task];
  if (r == kNone) return {};
  return {classes_.routes.data() + classes_.begin[r], classes_.begin[r + 1] - classes_.begin[r]};
}

}  // namespace offsim::sim
