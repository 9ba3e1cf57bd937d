#pragma once
#include <fmt/format.h>

#include <cstdint>
#include <filesystem>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "apps/offsim/distributed_sweep.hpp"
#include "apps/offsim/exit_codes.hpp"
#include "sim/config/config_reader.hpp"
#include "sim/core/errors.hpp"
#include "sim/report/atomic_file.hpp"

namespace offsim::app {

// Exit codes (apps/offsim/exit_codes.hpp): 0 success (1: a check or validation bound failed),
// 2 bad input, 3 the simulation could not be done on this machine (out of memory, an output that
// cannot be written, a simulation beyond offsim's limits), 70 an internal error: a bug in offsim.

struct RunOptions {
  std::string config;
  std::vector<std::string> overrides;
  std::string out_dir;  // empty: no files
  bool all_ranks = false;
  bool all_micro_batches = false;
  std::string trace = "auto";   // with out_dir: auto, full or compact
  std::size_t trace_limit = 0;  // events; 0: models::kDefaultTraceEventLimit
};

struct EstimateOptions {
  std::string ds_config;
  std::string model;
  std::string machine = "dgx-h100";
  int gpus = 1;
  std::int64_t seq = 0;  // 0: the model's context (up to 8,192 tokens)
  std::vector<std::string> overrides;
};

struct GraphOptions {
  std::string config;
  std::vector<std::string> overrides;
  bool dot = false;
};

struct TopoOptions {
  std::string file;
  std::vector<std::string> overrides;
  int nodes = 0;  // 0: as in the file
  bool json = false;
  std::string dot_file;
  std::vector<std::string> route;  // two device names, or empty
};

struct ModelOptions {
  std::string file;
  std::vector<std::string> overrides;
  bool json = false;
  std::int64_t micro_batch = 1;
  std::int64_t tp = 1;
};

struct CalibrateCliOptions {
  std::vector<std::string> files;
  std::string device_kind;
  std::string out;
  std::vector<std::string> filters;
  std::string peak;
  std::string pinned_bandwidth;
  bool reduce_scatter_from_all_reduce = false;
  std::string command_line;
};

struct SweepCliOptions {
  std::string file;
  std::string out;
  int jobs = 1;
  bool resume = false;
  std::string best;  // rank the finished points by this column
  std::size_t top = 5;
  bool best_only = false;             // --best on an existing file without running
  std::string fidelity = "analytic";  // analytic, flow, or experiment (as each file says)
  // --best: points this close to the best (a fraction) are tied. Default: the mean |error| over
  // the bounded validation rows (docs/validation.md, 4.8% on 2026-11-23), rounded up.
  double tie = 0.05;
};

struct SearchCliOptions {
  std::string experiment;
  std::string out;  // folder: search.csv (every simulated point) and pareto.csv
  int jobs = 1;
  bool resume = false;
  std::string max_hbm;  // a size ("64 GB"); empty: the device's capacity
  int gpus = 0;         // 0: the base experiment's ranks
  int max_nodes = 0;    // 0: no node range
  std::int64_t global_batch = 0;
  double price_per_gpu_hour = 0.0;
  std::vector<std::string> kinds, overrides;
  std::vector<int> tp, pp, zero_stages;
  std::vector<std::int64_t> micro_batches;
  std::string offload;  // "", "none", "cpu", "both"
};

/// Runs `command`; a std::runtime_error from it (an existing output without --resume, a results
/// file of another sweep or search) is the user's input: printed, exit 2. Configuration errors
/// go on to main, which prints them located.
template <class Command>
int runtime_errors_are_bad_input(Command&& command) {
  try {
    return command();
  } catch (const sim::config::ConfigError&) {
    throw;
  } catch (const sim::SimulationLimit&) {
    throw;  // exit 3, not bad input
  } catch (const sim::report::OutputError&) {
    throw;  // an output that cannot be written: exit 3
  } catch (const std::filesystem::filesystem_error&) {
    throw;  // a folder that cannot be made: exit 3
  } catch (const std::runtime_error& e) {
    fmt::print(stderr, "error: {}\n", e.what());
    return kExitBadInput;
  }
}

int run_command(const RunOptions& options);
int search_command(const SearchCliOptions& options);
int sweep_command(const SweepCliOptions& options);
int validate_command(const std::string& dir, bool json, const std::string& residuals_out);
int check_command(const std::string& dir, bool update);
int diff_command(const std::string& a, const std::string& b);
int calibrate_command(const CalibrateCliOptions& options);
int model_command(const ModelOptions& options);
int topo_command(const TopoOptions& options);
int graph_command(const GraphOptions& options);
/// `what`: machines, devices, calibrations, models or strategies; empty: all of them.
int list_command(const std::string& what);
int estimate_command(const EstimateOptions& options);

}  // namespace offsim::app

namespace offsim::models {
struct Sweep;
}

namespace offsim::app {
/// Under mpirun (built with OFFSIM_WITH_MPI, more than one rank): runs the sweep across ranks,
/// rank 0 appending each round's rows and writing the merged file; returns this process's rank.
/// nullopt when not distributed. `hooks`: members left empty take the sweep's own (the rows of
/// options.out, the sorted file written there, the point simulated; distributed_sweep.hpp).
std::optional<int> run_distributed_sweep(const models::Sweep& sweep, const SweepCliOptions& options,
                                         DistributedSweepHooks hooks = {});

}  // namespace offsim::app
