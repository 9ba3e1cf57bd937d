#pragma once
// A collective stage's flows shared by the points of a sweep or search (issue 35).
//
// A Communicator builds the flows of each kind of stage it runs (ring or all-to-all over a band of
// its layout: who sends to whom, over which constraints) once, and prices every stage of that kind
// from them. Each point of a sweep or search builds its communicators afresh, so every point built
// the same flows again: a tenth of the shipped sweep's instructions (its ZeRO-3 gathers over up to
// 384 GCDs) and 4% of the Megatron tp 8 search's (one TP group per pipeline stage). While a
// StageFlowCacheScope lives, a communicator on shared, read-only machine resources
// (SharedMachine::shared_version) looks the flows up here first and keeps what it built.
//
// The key is everything the flows depend on: the machine resources (the shared version's identity,
// held so that no other resources take its address), the topology (Topology::identity()), the
// whole rank layout (devices, simulated ranks and their classes, mirrors), the stage's algorithm,
// band and channels and who takes part. A value is the one the first point built, so a point gets
// the same flows whether it found them or not. Layouts of more than kMaxLayoutEntries devices and
// mirrors are not shared (the key copies and compares them whole).
//
// The analytic stages priced over those flows are kept too (find_analytic), and a communicator's
// whole context (Context: machine, topology, layout, measured collectives, options) names the
// stages its communicators priced, so that the next communicator of an equal context takes a
// stage without working out its shape again (Communicator::priced_stage).
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "models/collectives/plan.hpp"
#include "models/cost/cost_model.hpp"
#include "models/platform/rank_layout.hpp"
#include "sim/exec/task_graph.hpp"

namespace offsim::models {

/// One flow of a collective stage: from a simulated rank to the one standing for the receiver.
struct CollectiveFlow {
  int from;          // simulated index
  int to;            // simulated index standing for the receiver
  sim::Route route;  // shared by every step's task on it (sim::Route)
  int rank;          // the sending rank (the simulated one or, with classes, a member it stands for)
};
/// A stage's flows: per channel and direction (ring) or one list (all-to-all).
using StageFlows = std::vector<std::vector<CollectiveFlow>>;
/// An analytic stage (Communicator::analytic_bodies): per simulated rank its one transfer, nullopt
/// for a rank not taking part.
using AnalyticStage = std::vector<std::optional<sim::TransferTask>>;

/// Turns the cache on while it lives (scopes nest; the entries are dropped with the outermost).
/// Thread-safe: a sweep's workers look up and insert under a lock held for the map only.
class StageFlowCacheScope {
 public:
  StageFlowCacheScope();
  ~StageFlowCacheScope();
  StageFlowCacheScope(const StageFlowCacheScope&) = delete;
  StageFlowCacheScope& operator=(const StageFlowCacheScope&) = delete;
};

namespace stage_flow_cache {

/// Layouts up to this many devices and mirrors together are shared: the Frontier partitioning
/// sweep's reach 48 nodes (about 2,000), a search's TP groups 8 devices; the full Frontier's (0.3 M
/// mirrors) would cost more to copy and compare than its flows cost to build.
inline constexpr std::size_t kMaxLayoutEntries = std::size_t{1} << 14;
/// At most this many stage kinds are kept (a search over 128 nodes' TP groups holds a few
/// hundred); past it, what is built is not kept (the results are the same either way).
inline constexpr std::size_t kMaxEntries = 4096;

/// The stage a communicator looks up (its own layout and participants, not copied).
struct KeyView {
  const void* machine;   // the shared resources
  const void* topology;  // Topology::identity()
  const RankLayout* layout;
  int algorithm;
  int lo;
  int hi;
  int channels;
  const std::vector<bool>* participants;
};
/// What the cache keeps: the view's values, the machine and topology held (so that no other takes
/// their address while the entry lives).
struct Key {
  std::shared_ptr<const void> machine;
  std::shared_ptr<const void> topology;
  RankLayout layout;
  int algorithm = 0;
  int lo = 0;
  int hi = 0;
  int channels = 0;
  std::vector<bool> participants;
};

/// Whether a scope is live (else find finds nothing and insert keeps nothing).
[[nodiscard]] bool active();
/// Whether a layout is small enough to share (kMaxLayoutEntries). A layout's mirrors count only
/// under rank symmetry: without it nothing reads them (they are every device's own).
[[nodiscard]] bool shareable(const RankLayout& layout);
/// The flows held for `key`; null when none are (or no scope is live).
[[nodiscard]] std::shared_ptr<const StageFlows> find(const KeyView& key);
/// Keeps `flows` under `key` (when a scope is live and there is room) and returns what is held
/// there: `flows` itself unless another worker inserted the same first.
std::shared_ptr<const StageFlows> insert(Key key, StageFlows flows);
/// The stage kinds held (tests).
[[nodiscard]] std::size_t size();

/// What an analytic stage over flows the cache gave out depends on besides them: the flows stand
/// for the machine (its capacities), the layout, the band and who takes part (their key); the rest
/// is the fit (bus bandwidth, compared bit for bit, and step latency), the algorithm, the bytes
/// per flow and step, the steps and whether links keep statistics. The key holds the flows, so no
/// other takes their address while the entry lives.
struct AnalyticKey {
  std::shared_ptr<const StageFlows> flows;
  std::uint64_t bus_bandwidth_bits = 0;
  std::int64_t step_latency_ps = 0;
  bool ring = false;
  std::int64_t bytes_per_flow = 0;
  int steps = 0;
  bool link_statistics = false;
};
/// The analytic stage held for `key`; null when none is (or no scope is live).
[[nodiscard]] std::shared_ptr<const AnalyticStage> find_analytic(const AnalyticKey& key);
/// Keeps `stage` under `key` (when a scope is live and there is room) and returns what is held
/// there: `stage` itself unless another worker inserted the same first.
std::shared_ptr<const AnalyticStage> insert_analytic(AnalyticKey key, AnalyticStage stage);
/// The analytic stages held (tests).
[[nodiscard]] std::size_t analytic_size();

/// What a communicator's analytic stages depend on besides each stage's own key (its band, plan,
/// bytes per peer, collective and participants: Communicator::AnalyticKey): the machine resources
/// and the topology (held, as in Key), the whole layout, the measured collectives (their fits and
/// the roofline flag: Communicator::fit reads nothing else of the table) and the collective
/// options. Communicators of equal contexts price every stage alike, so they share what they
/// priced: a search's points on one layout, and a point's two builds of the steady state.
struct Context {
  std::shared_ptr<const void> machine;
  std::shared_ptr<const void> topology;
  const RankLayout* layout = nullptr;       // copied when kept
  const MeasuredCosts* measured = nullptr;  // its collectives and roofline flag copied when kept
  CollectiveOptions options;
};
/// At most this many contexts are kept (a search over 128 nodes holds a few hundred TP groups and
/// data-parallel layouts); past it, a new context's communicators share nothing.
inline constexpr std::size_t kMaxContexts = 1024;
/// The value the communicators of `context` share (the communicator's own type, opaque here): the
/// one kept for an equal context, else make()'s, kept when there is room. Null when no scope is
/// live or the layout is too large to share (shareable).
[[nodiscard]] std::shared_ptr<void> context_value(const Context& context,
                                                  const std::function<std::shared_ptr<void>()>& make);
/// The contexts held (tests).
[[nodiscard]] std::size_t context_count();

}  // namespace stage_flow_cache

}  // namespace offsim::models
