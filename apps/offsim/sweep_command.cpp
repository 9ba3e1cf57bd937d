// `offsim sweep`: run every point of a sweep file, locally on threads (and across MPI ranks when
// built with OFFSIM_WITH_MPI and launched under mpirun), with a progress line and --resume.
#include <fmt/format.h>

#include "apps/offsim/commands.hpp"
#include "apps/offsim/heap.hpp"
#include "apps/offsim/progress.hpp"
#include "models/sweep.hpp"
#include "sim/config/config_reader.hpp"

namespace offsim::app {

namespace {

int sweep_or_throw(const SweepCliOptions& options);

}  // namespace

int sweep_command(const SweepCliOptions& options) {
  return runtime_errors_are_bad_input([&] { return sweep_or_throw(options); });
}

namespace {

int sweep_or_throw(const SweepCliOptions& options) {
  models::Sweep sweep = models::load_sweep(options.file);
  if (options.fidelity == "analytic") {
    sweep.collective_fidelity = models::Fidelity::kAnalytic;
  } else if (options.fidelity == "flow") {
    sweep.collective_fidelity = models::Fidelity::kFlow;
  }
  if (options.out.empty()) {
    if (options.best.empty()) throw std::runtime_error("give --out FILE (and --best METRIC to rank it)");
  } else if (!options.best_only) {
    if (run_distributed_sweep(sweep, options).has_value()) {
      // MPI: rank 0 wrote the file and prints; the others stay quiet.
      return 0;
    }
    models::SweepOptions run;
    run.out = options.out;
    run.jobs = options.jobs;
    run.resume = options.resume;
    Progress progress("sweep", options.resume ? models::finished_rows(sweep, options.out).size() : 0);
    run.progress = [&](std::size_t done, std::size_t total) { progress(done, total); };
    run.on_worker_start = back_thread_heap_with_huge_pages;
    const auto summary = models::run_sweep(sweep, run);
    fmt::print("sweep {}: {} points ({} run now, {} already in the file) -> {}\n", sweep.name, summary.points,
               summary.ran, summary.skipped, options.out);
  }
  if (!options.best.empty()) fmt::print("{}", models::best_points(options.out, options.best, options.top, options.tie));
  return 0;
}

}  // namespace

}  // namespace offsim::app
