// `offsim sweep` and `offsim search` under an MPI launcher: loads offsim's MPI module and hands it the sweep
// (apps/offsim/distributed_sweep.hpp says why MPI lives in a module, ADR 0010 how it is found).
#include <dlfcn.h>
#include <fmt/format.h>

#include <cstdlib>
#include <filesystem>
#include <optional>
#include <stdexcept>

#include "apps/offsim/commands.hpp"
#include "apps/offsim/distributed_sweep.hpp"
#include "apps/offsim/progress.hpp"
#include "models/strategies/layout_cache.hpp"
#include "models/sweep.hpp"

namespace offsim::app {

namespace {

bool under_mpi_launcher() {
  // Open MPI's mpirun, or a PMI/PMIx launcher such as srun: a plain `offsim sweep` never starts MPI.
  return std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr || std::getenv("PMI_SIZE") != nullptr ||
         std::getenv("PMIX_RANK") != nullptr;
}

#ifdef OFFSIM_MPI_MODULE
// The module lies next to the executable (the build writes both into build/).
DistributedSweepEntry* load_mpi_module() {
  std::error_code ec;
  const std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  const std::filesystem::path module = exe.parent_path() / OFFSIM_MPI_MODULE;
  void* handle = ec ? nullptr : dlopen(module.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* error = ec ? nullptr : dlerror();
    const std::string why = ec ? ec.message() : (error != nullptr ? error : "unknown reason");
    throw std::runtime_error(fmt::format(
        "offsim runs under an MPI launcher, but its MPI module {} cannot be loaded ({}); it is built next to "
        "offsim with -DOFFSIM_WITH_MPI=ON",
        module.string(), why));
  }
  auto* entry = reinterpret_cast<DistributedSweepEntry*>(dlsym(handle, kDistributedSweepSymbol));
  if (entry == nullptr) {
    throw std::runtime_error(fmt::format("offsim's MPI module {} has no {}: it is from another offsim build",
                                         module.string(), kDistributedSweepSymbol));
  }
  return entry;  // the module stays loaded until the process ends (MPI_Finalize runs in it)
}
#endif

}  // namespace

std::optional<int> run_distributed_sweep(const models::Sweep& sweep, const SweepCliOptions& options,
                                         DistributedSweepHooks hooks) {
  if (!under_mpi_launcher()) return std::nullopt;
#ifndef OFFSIM_MPI_MODULE
  (void)sweep;
  (void)options;
  (void)hooks;
  return std::nullopt;  // built without MPI: each process runs the sweep on its own threads
#else
  DistributedSweepEntry* entry = load_mpi_module();
  const sim::config::ScopedFileCache files;  // this rank parses the experiments' YAML once
  models::ReadCache reads;                   // and their machines, tables, models, strategies, training
  const models::LayoutCacheScope layouts;    // and the rank layouts of its points (layout_cache.hpp)
  if (!hooks.finished_rows) hooks.finished_rows = [&] { return models::finished_rows(sweep, options.out); };
  if (!hooks.write_sorted) {
    hooks.write_sorted = [&](const std::vector<std::string>& rows) { models::write_sorted(sweep, options.out, rows); };
  }
  if (!hooks.run_point) {
    hooks.run_point = [&](std::size_t point) { return models::run_sweep_point(sweep, sweep.points.at(point), &reads); };
  }
  std::optional<Progress> progress;  // rank 0's "sweep: N/M points done" unless the caller has its own
  if (!hooks.progress) {
    progress.emplace("sweep", 0);
    hooks.progress = [&](std::size_t done, std::size_t total) { (*progress)(done, total); };
  }
  const int rank = entry(sweep, options, hooks);
  if (rank < 0) return std::nullopt;
  return rank;
#endif
}

}  // namespace offsim::app
