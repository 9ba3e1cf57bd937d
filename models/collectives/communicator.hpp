#pragma once
// Collectives over ranks placed on the machine: hierarchical stages, ring or all-to-all per stage,
// optional quantization, in two fidelities, over all ranks or one representative node.
//
// Stages. A collective runs as a sequence of stages, each over one band of the rank hierarchy: a
// band (lo, hi) groups the ranks that differ only in their rank digits between lo and hi, i.e.
// subgroups of g = hi/lo ranks with stride lo (band (1, 2): the two ranks of a pair; (2, 8): the
// four pairs of a node, same position in the pair; (8, G): the nodes). A flat collective over G
// ranks is the single band (1, G). For S the buffer in bf16 bytes:
//   all-gather:     stage j receives (g_j - 1) x H bytes into every rank, where H is what a rank
//                   holds before it (S / G at the start), and then holds g_j x H;
//   reduce-scatter: stage j sends (g_j - 1)/g_j x H, where H starts at S, then holds H / g_j;
//   all-reduce:     the reduce-scatter stages, then the all-gather stages in reverse order.
// Either order of bands moves the same bytes; which links carry them differs, which is the point.
//
// Algorithms per stage. Ring: a bidirectional ring over the subgroup (half the buffer each way),
// g - 1 steps of H/(2g)... bytes per direction, each step waiting the calibrated per-step latency,
// each direction capped at half the calibrated bus bandwidth (so an uncontended flat ring
// reproduces t = (g-1) alpha + (g-1)/g x S / busbw, its calibration). All-to-all: every rank sends
// its share to every peer directly in one step (DeepSpeed's qgZ). Tree (all-reduce only): a
// pipelined binary tree, the whole buffer up and down every edge at once (add_tree_stage).
//
// Quantization (ZeRO++ qwZ, qgZ): a quantized stage moves q bytes per element instead of 2 plus
// one scale per group of elements; the quantize and dequantize(-reduce) kernels are charged as
// HBM traffic at the device's achieved memory bandwidth, on the communication side (they do not
// delay compute kernels: an approximation, stated in every report).
//
// Fidelity. `flow`: every step is a set of flows on the machine's routes, contending with all
// other traffic. `analytic`: each stage is one interval per rank, alpha-beta with the bandwidth
// the stage's own flows would get on an otherwise idle machine (each constraint split evenly
// among the stage's flows that cross it). On an uncontended stage both give the same time.
//
// Rank symmetry. When ranks are laid out node-major with the same local order in every node,
// every node does the same work on equivalent links, so only the ranks of one representative node
// are simulated. A flow from a simulated rank to a rank of another node k takes its real route out
// of the representative node and through the network, and then the links inside node k are
// replaced by their counterparts inside the representative node: by symmetry, the representative
// node receives exactly that traffic from its own predecessor. Shared links (NICs, host memory,
// the network) therefore still see all the traffic that crosses them.
#include <array>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "models/collectives/plan.hpp"
#include "models/collectives/stage_flow_cache.hpp"
#include "models/cost/cost_model.hpp"
#include "models/platform/machine_resources.hpp"
#include "models/platform/rank_layout.hpp"

namespace offsim::models {

/// What each simulated rank waits for before a collective (or one of its stages), viewed and not
/// copied: a list per rank, or one task per rank (`{t}` each, without making those lists: issue 35).
/// The viewed vector must outlive the call it is passed to.
class RankDeps {
 public:
  RankDeps(const std::vector<std::vector<sim::TaskId>>& lists)  // NOLINT(google-explicit-constructor)
      : lists_(&lists) {}
  RankDeps(const std::vector<sim::TaskId>& one_each) : one_each_(&one_each) {}  // NOLINT(google-explicit-constructor)
  [[nodiscard]] std::span<const sim::TaskId> operator[](int s) const {
    const auto i = static_cast<std::size_t>(s);
    return lists_ != nullptr ? std::span<const sim::TaskId>((*lists_)[i])
                             : std::span<const sim::TaskId>(&(*one_each_)[i], 1);
  }

 private:
  const std::vector<std::vector<sim::TaskId>>* lists_ = nullptr;
  const std::vector<sim::TaskId>* one_each_ = nullptr;
};

class Communicator {
 public:
  /// `machine`: the iteration's resources, as they are now. When others share them
  /// (SharedMachine::shared_version: read-only), the stages' flows are looked up in, and kept for
  /// the next points in, the stage flow cache (stage_flow_cache.hpp) while a scope is live.
  Communicator(sim::TaskGraph& graph, const SharedMachine& machine, const topo::Topology& topology,
               const RankLayout& layout, const MeasuredCosts& measured, const CostModel& costs,
               CollectiveOptions options, std::vector<std::string>& notes);

  /// Adds one collective of a buffer of `elements` bf16 elements (all-gather output, reduce-scatter
  /// input). `deps[s]`: what simulated rank s waits for first (per rank a list, or one task). Returns,
  /// per simulated rank, the task that ends when the rank holds its result.
  /// `participants` (per simulated rank; empty: all) restricts the collective to some ranks (with
  /// their subgroups); the others pass through at their dependencies.
  std::vector<sim::TaskId> add(CollectiveKind kind, const std::string& name, std::int64_t elements,
                               const CollectivePlan& plan, RankDeps deps, const std::vector<bool>& participants = {});

  /// The flat plan over the first `ranks` ranks: one ring, no quantization.
  [[nodiscard]] static CollectivePlan flat(int ranks);

 private:
  using Flow = CollectiveFlow;
  // The ranks simulated index s stands for inside the block: itself and its class's other members.
  [[nodiscard]] std::vector<int> class_of(int s) const;
  // The steps of one collective while add() builds it, per simulated rank: what its next step
  // waits for (first(): the collective's dependencies until a step ran, then that step's task) and
  // its latest step's task (done).
  struct Progress {
    int sims;        // simulated ranks
    RankDeps given;  // add()'s dependencies
    std::vector<sim::TaskId> done;
    bool advanced = false;  // some stage (or buffer task) ran: each rank's result is one task
    std::vector<std::vector<sim::TaskId>>* spare = nullptr;  // where the replaced list goes (task_list)
    [[nodiscard]] RankDeps first() const { return advanced ? RankDeps(done) : given; }
    // Every rank's next step waits for its task of the step just added (`stage_done`, which
    // becomes `done`: taken by value so that a stage's result moves in, not copied). The list it
    // replaces is kept for the next step's (task_list).
    void advance(std::vector<sim::TaskId> stage_done) {
      if (spare != nullptr && done.capacity() > 0) spare->push_back(std::move(done));
      done = std::move(stage_done);
      advanced = true;
    }
  };
  // A list of n tasks for a step's result, reusing one a step left (Progress::advance): a
  // collective's steps each made a list, an allocation per step (a ZeRO++ gather takes five).
  std::vector<sim::TaskId> task_list(int n);
  std::vector<std::vector<sim::TaskId>> spare_lists_;
  // The stages of a tree all-reduce, one per band of more than one rank (add_tree_stage).
  void add_tree_stages(const std::string& name, std::int64_t elements, const CollectivePlan& plan, Progress& progress);
  // Every rank allocates (or, `release`, frees) its quantized send and receive buffers of `bytes`.
  void add_quantization_buffers(const std::string& name, sim::Bytes bytes, bool release, Progress& progress);
  // Every rank runs one kernel of `bytes` of HBM traffic on its communication side (add_kernel).
  void add_kernels(const std::string& name, sim::Bytes bytes, Progress& progress);
  // The reduce-scatter stages over the plan's bands in order, each quantized (and dequantized and
  // reduced after its exchange) when the plan is. `held`: the elements each rank holds before the
  // first stage. Returns what each rank holds after the last (its share).
  std::int64_t add_reduce_scatter_stages(const std::string& name, std::int64_t held, const CollectivePlan& plan,
                                         Progress& progress);
  // The all-gather stages: an all-gather's over the bands in order, quantized once before the
  // first and dequantized once after the last when the plan is; an all-reduce's in reverse order
  // and in bf16. `held`: what each rank holds before them (an all-gather: `elements`, of which
  // each rank's share is taken here).
  void add_all_gather_stages(CollectiveKind kind, const std::string& name, std::int64_t held,
                             const CollectivePlan& plan, Progress& progress);
  // "<name>.done": per rank a barrier on its last step, the collective's result.
  std::vector<sim::TaskId> add_done_barriers(const std::string& name, const Progress& progress);
  // One stage of `kind` (reduce-scatter or all-gather) moving `per_peer` bf16 elements to each
  // peer (ring: per chunk). Returns per simulated rank the barrier of its completion.
  std::vector<sim::TaskId> add_stage(const std::string& name, const std::string& collective, const Band& band,
                                     const CollectivePlan& plan, std::int64_t per_peer, RankDeps first);
  std::vector<sim::TaskId> add_tree_stage(const std::string& name, const Band& band, std::int64_t bytes,
                                          RankDeps first);
  std::vector<sim::TaskId> add_one_step_flows(const std::string& name, sim::TimePs latency, std::int64_t bytes,
                                              const std::vector<Flow>& flows, RankDeps first);
  std::vector<sim::TaskId> add_ring_flows(const std::string& name, const CollectiveFit& fit, int g,
                                          std::int64_t chunk_bytes, const std::vector<std::vector<Flow>>& directions,
                                          RankDeps first);
  // Analytic stages: per simulated rank its one transfer (nullopt: not taking part), built by
  // analytic_bodies from the stage's flows and added to the graph by emit_analytic.
  using AnalyticStage = models::AnalyticStage;
  AnalyticStage analytic_bodies(const CollectiveFit& fit, const Band& band, bool ring, std::int64_t bytes_per_flow,
                                int steps, const std::vector<std::vector<Flow>>& flows);
  std::vector<sim::TaskId> emit_analytic(const std::string& name, const AnalyticStage& stage, RankDeps first);
  // What one stage moves: its fit (per-step latency and bandwidth cap), its flows (built once per
  // band and participants, stage_flows_), the bytes each flow moves per step and the steps (ring:
  // g - 1, each a chunk per channel and direction; all-to-all: one).
  struct StageShape {
    CollectiveFit fit;
    std::shared_ptr<const StageFlows> flows;
    bool ring;
    std::int64_t bytes_per_flow;
    int steps;
    bool shared;  // the flows came from the stage flow cache
  };
  // The analytic stage of `st` over `band`: found in the stage flow cache when its flows came from
  // there (another point priced it), else built by analytic_bodies (and kept there).
  std::shared_ptr<const AnalyticStage> analytic_stage(const StageShape& st, const Band& band);
  StageShape stage_shape(const std::string& collective, const Band& band, const CollectivePlan& plan,
                         std::int64_t per_peer);
  // Analytic stages built so far, by what determines them: the band (lo, hi), the plan's algorithm
  // and quantization (bits, group elements, scale bytes) and the elements per peer, then the
  // collective and who takes part. Looked up through a view (AnalyticKeyView), numbers first: a
  // TP all-reduce finds its two stages for every layer piece, and copying the key (a string and a
  // participants vector, an allocation) and comparing the collectives first was a third of that.
  using AnalyticNumbers = std::array<std::int64_t, 7>;
  struct AnalyticKey {
    AnalyticNumbers numbers;
    std::string collective;
    std::vector<bool> participants;
  };
  struct AnalyticKeyView {
    AnalyticNumbers numbers;
    std::string_view collective;
    const std::vector<bool>& participants;
  };
  struct AnalyticKeyLess {
    using is_transparent = void;
    template <typename A, typename B>
    bool operator()(const A& a, const B& b) const {
      // The numbers in one pass to their first difference (!= then < walked them twice).
      for (std::size_t i = 0; i < a.numbers.size(); ++i) {
        if (a.numbers[i] != b.numbers[i]) return a.numbers[i] < b.numbers[i];
      }
      const std::string_view ca(a.collective), cb(b.collective);
      if (ca != cb) return ca < cb;
      return a.participants < b.participants;
    }
  };
  std::map<AnalyticKey, std::shared_ptr<const AnalyticStage>, AnalyticKeyLess> analytic_stages_;
  // The analytic stage of `key`: taken from the communicators of the same context
  // (stage_flow_cache::Context) when one priced it, else priced here (stage_shape, analytic_stage)
  // and handed to them.
  std::shared_ptr<const AnalyticStage> priced_stage(const AnalyticKeyView& key, const Band& band,
                                                    const CollectivePlan& plan, std::int64_t per_peer);
  // What the communicators of one context priced (stage_flow_cache::context_value), with the notes
  // each stage's pricing gave (fit's): a communicator taking a stage gives them again, so that its
  // iteration says what it would have said pricing the stage itself.
  struct SharedStage {
    std::shared_ptr<const AnalyticStage> stage;
    std::vector<std::string> notes;
  };
  struct SharedStages {
    std::mutex mutex;
    std::map<AnalyticKey, SharedStage, AnalyticKeyLess> stages;
  };
  // At most this many stages a context (a sweep of ever-different buffer sizes would grow it).
  static constexpr std::size_t kSharedStagesPerContext = 4096;
  // This communicator's context's stages: looked up at its first analytic stage; null when it
  // shares nothing (shares_flows).
  SharedStages* shared_stages();
  std::shared_ptr<SharedStages> shared_stages_;
  bool shared_stages_looked_up_ = false;
  // Adds a note to the iteration's unless it holds it; every note also goes to note_log_ while set.
  void note_once(const std::string& note);
  std::vector<std::string>* note_log_ = nullptr;
  // A stage's flows by (algorithm, band lo, band hi, participants): the same for every buffer size.
  std::map<std::tuple<int, int, int, std::vector<bool>>, std::shared_ptr<const StageFlows>> stage_flows_;
  // The flows of a stage of `algorithm` over `band` with active_ taking part: built by `build`, or
  // the ones the stage flow cache holds for the same machine, layout and stage.
  template <typename Build>
  const std::shared_ptr<const StageFlows>& flows_of(StageAlgorithm algorithm, const Band& band, int channels,
                                                    Build&& build);
  // Whether flows_of takes and keeps flows in the stage flow cache (shared machine resources and
  // topology, a layout small enough, a live scope).
  [[nodiscard]] bool shares_flows() const;
  std::shared_ptr<const MachineResources> shared_machine_;  // machine_ when others share it; else null
  [[nodiscard]] bool active(int s) const { return active_.empty() || active_[s]; }
  // Flows stepped one by one need every rank simulated: a class's members may cross links of
  // different speeds, which only the analytic form accounts for (its slowest member's pace).
  void require_single_rank_classes(const std::string& name) const;
  // Allocates (or releases) the quantized wire buffers of rank s on its GPU.
  sim::TaskId quantization_buffer(const std::string& name, int s, sim::Bytes bytes, bool release,
                                  std::span<const sim::TaskId> deps);
  // A rank outside the collective: a barrier on its dependencies.
  sim::TaskId pass_through(const std::string& name, int s, std::span<const sim::TaskId> deps);
  // A kernel on the communication side of rank s: HBM traffic of `bytes`, after `deps`.
  sim::TaskId add_kernel(const std::string& name, int s, sim::Bytes bytes, std::span<const sim::TaskId> deps);
  // "<name><part>.r<rank>": the name of simulated rank s's task, formatted into name_buffer_ (the
  // graph copies it at once), so that naming a collective's tasks allocates nothing.
  std::string_view rank_task_name(const std::string& name, std::string_view part, int s);
  std::string name_buffer_;
  // The ring order of `members` (one subgroup, band order) for one channel.
  [[nodiscard]] std::vector<int> channel_order(const std::vector<int>& members, int channel, int channels) const;
  // The constraints a flow from rank a to rank b crosses, with b's node mirrored.
  std::vector<sim::ConstraintId> route(int from_rank, int to_rank) const;
  // The fit for `collective` over g ranks. `spans_nodes`: whether the group leaves its node; a
  // group inside one node, where the table only measured groups across nodes, runs at the link
  // rates (like `roofline`), since the inter-node rate says nothing about NVLink or IF rings.
  CollectiveFit fit(const std::string& collective, int g, bool spans_nodes = true);
  // Ring orders and places per (band lo, band hi, channels): per channel, the members in ring
  // order and each member's index in it (add_stage).
  std::map<std::tuple<int, int, int>, std::vector<std::pair<std::vector<int>, std::vector<int>>>> ring_orders_;

  sim::TaskGraph& graph_;
  const MachineResources& machine_;
  const topo::Topology& topology_;
  const RankLayout& layout_;
  const MeasuredCosts& measured_;
  const CostModel& costs_;
  CollectiveOptions options_;
  std::vector<std::string>& notes_;
  std::vector<bool> active_;  // participants of the collective being added (empty: all)
  // Rank symmetry: per device of the representative block, the link that enters it from another
  // node (from its network switch), standing for the entry link into any mirrored node.
  // Made at the first use (entry_links), under rank symmetry only.
  mutable std::optional<std::map<std::size_t, std::size_t>> entry_link_into_;
  [[nodiscard]] const std::map<std::size_t, std::size_t>& entry_links() const;
};

}  // namespace offsim::models
