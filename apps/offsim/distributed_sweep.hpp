#pragma once
// The interface between offsim and its MPI module (liboffsim_mpi.so, built with OFFSIM_WITH_MPI).
//
// Why a module: Open MPI is 8 of the 17 shared libraries offsim would otherwise load at every
// start, about 7 ms of a process that answers a 90-point sweep in under 100 ms (ADR 0010). offsim
// loads the module with dlopen only when it runs under an MPI launcher. The module holds the MPI
// calls alone; reading and running the points stays in offsim, passed in as hooks, so the module
// links only MPI and fmt (nothing of offsim's own libraries is linked twice).
#include <cstddef>
#include <functional>
#include <string>
#include <vector>

namespace offsim::models {
struct Sweep;
}

namespace offsim::app {

struct SweepCliOptions;

struct DistributedSweepHooks {
  /// The rows already in the output file (for --resume; rank 0 only).
  std::function<std::vector<std::string>()> finished_rows;
  /// Writes the output file with these rows in point order (rank 0 only).
  std::function<void(const std::vector<std::string>&)> write_sorted;
  /// Runs the sweep point at this index (into Sweep::points) and returns its CSV row. Each rank
  /// keeps its parsed files and tables between calls.
  std::function<std::string(std::size_t)> run_point;
  /// Rank 0's progress after each round (points done, points in all); the caller's Progress
  /// ("sweep: ..." or "search: ...", a tenth of the points at a time off a terminal).
  std::function<void(std::size_t, std::size_t)> progress;
  /// Optional: rank 0's closing line (points run now, ranks); without it the module prints the
  /// sweep's ("sweep NAME: N points (... on R ranks) -> OUT").
  std::function<void(std::size_t, int)> report;
};

/// The module's one entry point: runs the sweep across the launcher's ranks (rank 0 appending each
/// round's rows to the output file, then writing it sorted) and returns this process's rank; -1
/// when there is a single rank (the caller then runs the sweep on threads). Errors throw (on rank
/// 0; the other ranks return).
using DistributedSweepEntry = int(const models::Sweep& sweep, const SweepCliOptions& options,
                                  const DistributedSweepHooks& hooks);
inline constexpr const char* kDistributedSweepSymbol = "offsim_run_distributed_sweep";

}  // namespace offsim::app
