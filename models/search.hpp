#pragma once
// `offsim search`: the fastest (or cheapest per token) way to train a model on a machine under
// limits (docs/search.md).
//
// From a base experiment (machine, calibration, model, training), the search enumerates
// strategies: data parallelism with ZeRO 0-3 and CPU optimizer offload, with tensor parallelism
// or, for a mixture of experts, expert parallelism;
// Megatron 3D parallelism (1F1B) with tensor, pipeline and data parallelism and ZeRO 0-1; over
// micro-batch sizes, at a fixed global batch (sequences per iteration), on a fixed GPU count or on
// 1, 2, 4, ... nodes up to a maximum. Points whose model states alone (parameters, gradients and
// optimizer states on one GPU: a lower bound on its memory) exceed the HBM limit are pruned
// before anything is simulated; the others run as the points of a sweep (models/sweep.hpp: threads,
// resumable CSV, analytic collectives) and those within the limits form the result. The Pareto
// front is over throughput (higher is better), cost per token and peak HBM (lower is better).
#include <cstdint>
#include <filesystem>
#include <iosfwd>
#include <optional>
#include <string>
#include <vector>

#include "models/experiment.hpp"
#include "models/sweep.hpp"

namespace offsim::models {

struct SearchLimits {
  std::optional<std::int64_t> max_hbm_bytes;  // per GPU; default: the device's capacity
  std::optional<int> gpus;                    // exactly this many GPUs; default: the base's ranks
  std::optional<int> max_nodes;               // instead of gpus: 1, 2, 4, ... nodes up to this
  std::optional<std::int64_t> global_batch;   // sequences per iteration; default: the base's
  double price_per_gpu_hour = 0.0;            // 0: costs are reported in GPU-hours
};

/// The space searched; empty lists take the defaults (docs/search.md).
struct SearchSpace {
  std::vector<std::string> kinds;           // data_parallel, megatron
  std::vector<int> tp;                      // default 1, 2, 4, 8 (up to the GPUs of a node)
  std::vector<int> pp;                      // default: divisors of the layer count
  std::vector<int> zero_stages;             // default 0-3 (data_parallel), 0-1 (megatron)
  std::vector<bool> offload;                // default: without, and with CPU optimizer offload (ZeRO 2-3)
  std::vector<std::int64_t> micro_batches;  // default 1, 2, 4, 8
};

/// One strategy of the search: its settings and the overrides that make it from the base.
struct SearchCandidate {
  std::string kind;
  int gpus = 0;
  int nodes = 0;
  int tp = 1, pp = 1, dp = 1, zero_stage = 0;
  int ep = 1;  // expert parallelism (mixture-of-experts models, data_parallel)
  bool offload = false;
  std::int64_t micro_batch = 1, grad_accum = 1;
  std::int64_t state_bytes_lower_bound = 0;  // model states on one GPU
  std::vector<std::string> overrides;
  [[nodiscard]] std::string label() const;
};

struct SearchPlan {
  std::vector<SearchCandidate> simulated;  // in point order
  std::vector<SearchCandidate> pruned;     // states alone exceed the HBM limit
  std::size_t invalid = 0;                 // shapes that do not divide (batch, heads, layers)
  std::int64_t max_hbm_bytes = 0;
  std::int64_t global_batch = 0;
};

/// Enumerates and prunes the space around a loaded base experiment. Throws std::invalid_argument
/// (a message for the user) when the limits cannot apply to the base (no nodes to vary, say).
[[nodiscard]] SearchPlan plan_search(const ExperimentSpec& base, const SearchSpace& space, const SearchLimits& limits);

/// The plan's simulated candidates as the points of a sweep over `base_file`.
[[nodiscard]] Sweep search_sweep(const std::filesystem::path& base_file, const SearchPlan& plan);

/// One simulated point, read back from the sweep CSV.
struct SearchResult {
  SearchCandidate candidate;
  std::string status;  // ok, infeasible, error
  double tokens_per_s = 0.0;
  double tflops_per_device = 0.0;
  double iteration_s = 0.0;
  std::int64_t hbm_peak_bytes = 0;
  double cost_per_million_tokens = 0.0;  // GPU-hours x price (or GPU-hours)
  // The iteration time's 80% interval (models/intervals.hpp); 0 when the CSV has none.
  double iteration_low_s = 0.0;
  double iteration_high_s = 0.0;
  std::string reason;
  bool within_limits = false;
};

/// Reads the sweep CSV of a finished search (rows by point index; `csv_name` for errors) and
/// applies the limits.
[[nodiscard]] std::vector<SearchResult> read_search_results(const SearchPlan& plan, std::istream& csv,
                                                            const std::string& csv_name, const SearchLimits& limits);

/// Indices (into `results`) of the Pareto front of the results within limits: no other point is at
/// least as good in throughput, cost per token and peak HBM and better in one. Sorted by
/// throughput, fastest first.
[[nodiscard]] std::vector<std::size_t> pareto_front(const std::vector<SearchResult>& results);

/// The report: counts, the fastest point and the Pareto front as a table.
[[nodiscard]] std::string search_report(const SearchPlan& plan, const std::vector<SearchResult>& results,
                                        const SearchLimits& limits);

}  // namespace offsim::models
