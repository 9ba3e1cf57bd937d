#pragma once
// An experiment: a machine, its calibration, a model, training settings and a strategy, read
// from one YAML file (with !include), run as one simulated training iteration, and reported.
#include <condition_variable>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "models/cost/cost_model.hpp"
#include "models/strategies/strategy.hpp"
#include "models/transformer/transformer.hpp"
#include "sim/config/config_reader.hpp"
#include "sim/exec/executor.hpp"
#include "sim/report/atomic_file.hpp"
#include "topologies/topology_parser.hpp"

namespace offsim::models {

/// Optional `cost:` section: what an iteration costs in node-hours, energy and money, and what a
/// token budget takes. Each number carries its source in the YAML.
struct CostSpec {
  std::optional<double> price_per_node_hour;  // in `currency`
  std::string currency;
  std::optional<double> power_per_node_w;  // average draw of one node while training
  std::optional<double> token_budget;      // tokens to train on, for time-to-train
};

struct ExperimentSpec {
  std::string name;
  std::string file;
  // The machine, read-only and shared: the points of a sweep or search that read the same machine
  // hold one copy (ReadCache), where each copied its devices, links and names (issue 35).
  std::shared_ptr<const topo::NodeTopology> hardware = std::make_shared<const topo::NodeTopology>();
  DeviceCosts device;
  MeasuredCosts collectives;
  MeasuredCosts host;  // optional `calibration.host` table (CPU Adam rates)
  ModelSpec model;     // model.seq: the sequence length trained (training.seq); model.context: the model's
  TrainingSpec training;
  StrategySpec strategy;
  sim::config::Location strategy_kind_at;  // where strategy.kind is given (for errors after loading)
  std::optional<CostSpec> cost;
  std::vector<std::pair<std::string, std::string>> effective;  // key path -> value, after overrides
  /// Values taken for keys the experiment left out that move the result ("training.seq=2048 (the
  /// model's context)"), printed in the report and summary.json (configs/defaults.yaml).
  std::vector<std::string> defaults_applied;
  std::vector<sim::config::Diagnostic> warnings;
};

struct TrainingFromStrategy;  // models/experiment/sections.hpp
struct TrainingRead;

/// Machines, calibration tables, models, strategies and training sections already read, shared by
/// the points of a sweep (thread-safe): a GEMM table of thousands of rows or a machine of hundreds
/// of nodes is read once, not once per point, and a strategy once per set of its overrides. An
/// entry is named by its file and place in the configuration and holds the value read under one
/// set of overrides (those that reach into it, `set:` and --set; for a strategy or a training
/// section, also what its reader takes from outside it): a point with other overrides there reads
/// afresh and its value is kept beside the others within the bounds below (memory grows with the
/// files a sweep names, not with its points). A value is kept only when it was read without
/// errors and every override under it was applied; its warnings and the key paths read inside it
/// (for suggestions) come back with it. What a hit skips is the record of every scalar read
/// (ExperimentSpec::effective) inside it, which a sweep does not write.
class ReadCache {
 public:
  /// A strategy as read, with what it says of the training: read under the same overrides against
  /// the same machine and model (each named by its place and overrides) and torchtitan's flag, it
  /// is the same, which a sweep's points over training keys share.
  struct StrategyRead {
    StrategySpec strategy;
    std::shared_ptr<const TrainingFromStrategy> training;  // without its inputs (model, torchtitan)
  };
  /// A training section as read, with what parse_training says besides it.
  struct TrainingSectionRead {
    TrainingSpec training;
    std::shared_ptr<const TrainingRead> read;
  };
  struct Entry {
    std::variant<DeviceCosts, MeasuredCosts, std::shared_ptr<const topo::NodeTopology>, ModelSpec, StrategyRead,
                 TrainingSectionRead>
        value;
    std::vector<sim::config::Diagnostic> warnings;
    std::shared_ptr<const std::vector<std::string>> known_paths;  // read inside it (Context::known_paths_under)
  };
  /// How much a place may hold, in machine elements (devices and links; a table counts as one):
  /// its values are kept, most recently used first, while together they stay within this or the
  /// single newest value. A sweep over a few machine sizes keeps each (its points alternate
  /// between them), while a sweep that reaches the full Frontier (0.68 M elements) holds that one
  /// machine alone, so the cache's memory stays within what the largest point uses.
  static constexpr std::size_t kElementsPerPlace = std::size_t{1} << 17;
  /// At most this many values per place (tables differ by their overrides only).
  static constexpr std::size_t kValuesPerPlace = 16;

  /// The entry at `place` read under `overrides` (Context::override_texts_under), after waiting
  /// while another thread reads that value; null when it is not held, and then the caller is to
  /// read it and call end_reading (also if the read fails). A sweep's workers start on
  /// neighbouring points at once, and each read the same tables side by side.
  [[nodiscard]] std::shared_ptr<const Entry> find_or_begin_reading(const std::string& place,
                                                                   const std::vector<std::string>& overrides);
  void end_reading(const std::string& place, const std::vector<std::string>& overrides);
  void insert(const std::string& place, std::vector<std::string> overrides, Entry entry);
  /// The values held, over all places.
  [[nodiscard]] std::size_t size() const;
  /// Drops the values read from `file`, which has changed (the fuzz harness rewrites its input
  /// file for every input; a sweep's files do not change while it runs).
  void forget(const std::string& file);

 private:
  struct Held {
    std::vector<std::string> overrides;
    std::shared_ptr<const Entry> entry;
    std::size_t elements = 1;
  };
  [[nodiscard]] std::shared_ptr<const Entry> find_locked(const std::string& place,
                                                         const std::vector<std::string>& overrides);
  mutable std::mutex mutex_;
  std::condition_variable read_ended_;
  std::map<std::string, std::vector<Held>> entries_;                    // per place, most recently used first
  std::set<std::pair<std::string, std::vector<std::string>>> reading_;  // (place, overrides) being read
};

struct StrategyInfo {
  std::string kind;
  std::string description;
};
/// One line per strategy kind, for `offsim list`: from the table that reads each kind
/// (experiment/sections.cpp), so the list and what `kind:` accepts are one.
[[nodiscard]] std::vector<StrategyInfo> list_strategies();

/// Reads and validates an experiment. Throws sim::config::ConfigError listing every problem.
/// `cache` (sweeps): machines, calibration tables, models, strategies and training sections read
/// once for all the experiments loaded with it (per set of the overrides that reach into each).
[[nodiscard]] ExperimentSpec load_experiment(const std::filesystem::path& file,
                                             const std::vector<std::string>& overrides, ReadCache* cache = nullptr);

struct MemoryKindSummary {
  std::string kind;  // "hbm", "dram", ...
  std::string fullest_pool;
  sim::Bytes peak{0};
  sim::Bytes capacity{0};
};

struct LinkClassSummary {
  std::string link_class;
  double bytes = 0.0;
  sim::TimePs busiest_link_busy{0};  // busy_fraction = busiest_link_busy / iteration time
  std::string busiest_link;
  double peak_bytes_per_s = 0.0;  // of the busiest single link
};

/// One link's (flow constraint's) traffic over the iteration.
struct LinkStat {
  std::string name;
  std::string link_class;
  double bytes = 0.0;
  sim::TimePs busy{0};
  double peak_bytes_per_s = 0.0;
};

struct PhaseTime {
  std::string phase;
  sim::TimePs time{0};
};

struct ExperimentResult {
  bool feasible = true;
  std::vector<std::string> infeasible_reasons;
  sim::TimePs iteration_time{0};
  std::vector<PhaseTime> phases;          // forward, backward, exposed_communication, optimizer
  double model_tflops_per_device = 0.0;   // model FLOPs (no recomputation) per second per device
  double tflops_per_device = 0.0;         // hardware FLOPs (with recomputation), as Megatron reports
  double tokens_per_s = 0.0;              // tokens of the whole job per second
  sim::Bytes model_states_per_device{0};  // parameters, gradients, optimizer states on one GPU
  double mfu = 0.0;
  std::vector<MemoryKindSummary> memory;
  std::vector<LinkClassSummary> links;  // per class, from link_stats
  std::vector<LinkStat> link_stats;     // every link
  std::size_t ranks = 0;
  std::size_t simulated_ranks = 0;
  std::size_t nodes = 0;  // nodes the ranks occupy
  std::size_t tasks = 0;
  std::uint64_t events = 0;
  std::vector<std::string> approximations;
  /// Seconds rank 0 spent in `phase` (0 when the strategy reports no such phase).
  [[nodiscard]] double phase_seconds(std::string_view phase) const;
  /// Peak bytes of the fullest pool of one memory kind ("hbm", "dram", ...); 0 when absent.
  [[nodiscard]] std::int64_t peak_bytes(std::string_view kind) const;
  std::string timeline_csv;  // filled when asked for (RunExperimentOptions) and not streamed
  std::string trace_json;
  /// The outputs over time (when asked for): full, or compact and what the compact form holds.
  struct Trace {
    bool compact = false;
    std::size_t full_events = 0;       // the events the full trace.json would hold, at most
    std::size_t limit = 0;             // the limit it was compared with (0: --trace compact)
    std::vector<std::size_t> ranks;    // the representative ranks whose detail it holds
    std::vector<std::string> devices;  // their devices, in the same order
    std::string note;                  // one sentence: what the compact trace holds
    /// Set when the representatives alone exceed the limit: the trace holds what begins before it.
    std::optional<double> window_end_s;
  } trace;

  // Rank 0's view over time, for assertions on the timeline (validation claims).
  struct Interval {
    std::string phase;
    sim::TimePs begin;
    sim::TimePs end;
  };
  std::vector<Interval> rank0_phases;           // every reported span, in time order
  std::vector<Interval> rank0_compute;          // compute tasks on rank 0's GPU ("phase" = task phase)
  std::vector<sim::MemorySample> rank0_memory;  // rank 0's GPU memory timeline
  /// Rate timelines of rank 0's host links (only with outputs_over_time): H2D then D2H.
  std::vector<sim::RateSample> rank0_h2d;
  std::vector<sim::RateSample> rank0_d2h;
  double rank0_h2d_capacity = 0.0;
  double rank0_d2h_capacity = 0.0;
};

/// The size of the full outputs over time, in events counted by sim::report::full_trace_events,
/// above which `--trace auto` writes the compact trace (`offsim run --trace-limit`). The count is
/// an upper bound: the shipped experiments write 48-62 bytes of trace.json and timeline.csv per
/// counted event, so 4 M are about 240 MB (GPT-3 175B on 256 GCDs counts 2.9 M and stays full;
/// GPT-1T on 75,264 GCDs counts 8.5 M).
inline constexpr std::size_t kDefaultTraceEventLimit = 4'000'000;

enum class TraceMode { automatic, full, compact };

struct RunExperimentOptions {
  bool outputs_over_time = false;  // record link timelines; fill timeline_csv and trace_json
  /// With outputs_over_time: the full trace, the compact one, or (automatic) the compact one when
  /// the full one would hold more than trace_event_limit events (ExperimentResult::Trace).
  TraceMode trace = TraceMode::automatic;
  std::size_t trace_event_limit = kDefaultTraceEventLimit;
  /// With outputs_over_time: timeline.csv and trace.json are streamed into this set as they are
  /// produced (never held whole), instead of into timeline_csv and trace_json.
  sim::report::AtomicFileSet* outputs = nullptr;
  /// Link activity (link_stats, links): sweeps, whose rows hold none, leave it out and the
  /// result's link lists empty; the analytic transfers are then built without the links they
  /// stand for (CollectiveOptions::link_statistics). Times are the same either way.
  bool link_statistics = true;
  /// Rank 0's compute intervals, memory timeline and host-link rates (ExperimentResult::rank0_*):
  /// sweeps, whose rows hold none, leave them out (the lists empty, the capacities 0).
  bool rank0_views = true;
  /// Whether flow-level collectives that repeat may be simulated once and replayed, their
  /// preconditions checked with the full simulation as the fallback
  /// (models/strategies/phases/collective_replay.hpp). Every figure is the same either way; a run
  /// with outputs_over_time never replays (its link timelines and trace would differ).
  bool replay_collectives = true;
  /// Called with every graph the run simulates (two with the steady-state extrapolation) and its
  /// run, before the result is made of them: the simulating fuzz harness checks the simulator's
  /// invariants there (tests/fuzz/fuzz_simulate.cpp) instead of building and running it again.
  std::function<void(const sim::Platform&, const sim::TaskGraph&, const sim::RunResult&)> on_simulated{};
};

/// The effective configuration (every value read, after includes and overrides) as YAML.
[[nodiscard]] std::string resolved_config_yaml(const ExperimentSpec& spec);

/// What an iteration (and a token budget) costs; fields absent when the cost section lacks the input.
struct CostFigures {
  double node_hours_per_iteration = 0.0;
  std::optional<double> energy_kwh_per_iteration, price_per_iteration;
  std::optional<double> energy_kwh_per_million_tokens, price_per_million_tokens;
  std::optional<double> time_to_train_s, node_hours_to_train, energy_kwh_to_train, price_to_train;
};
[[nodiscard]] CostFigures cost_figures(const CostSpec& cost, const ExperimentResult& result);

/// Builds and simulates one iteration.
[[nodiscard]] ExperimentResult run_experiment(const ExperimentSpec& spec, const RunExperimentOptions& options = {});

/// The task graph of one iteration without running it, text or Graphviz DOT, handed to `sink` in
/// pieces (sim::TaskGraph::write_text): `offsim graph` streams it to its output.
void write_task_graph(const ExperimentSpec& spec, bool dot, const sim::TaskGraph::TextSink& sink);
/// The same as one string (tests and small graphs).
[[nodiscard]] std::string dump_task_graph(const ExperimentSpec& spec, bool dot);

struct Provenance {
  std::string version;
  std::string git_hash;
};

[[nodiscard]] std::string summary_json(const ExperimentSpec& spec, const ExperimentResult& result, const Provenance& p);
[[nodiscard]] std::string text_report(const ExperimentSpec& spec, const ExperimentResult& result);

}  // namespace offsim::models
