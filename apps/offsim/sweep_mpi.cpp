// offsim's MPI module (liboffsim_mpi.so, CMake option OFFSIM_WITH_MPI; apps/offsim/distributed_sweep.hpp
// says why it is a module). Points are dealt round-robin, the costliest first
// (SweepPoint::relative_work, as the threads of a local run take them); after each round every rank
// sends its row to rank 0, which appends and flushes them, so an interrupted run resumes like a local
// one; rank 0 writes the sorted file at the end, identical to a local run's.
#include <fmt/format.h>
#include <mpi.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <stdexcept>

#include "apps/offsim/commands.hpp"
#include "apps/offsim/distributed_sweep.hpp"
#include "models/sweep.hpp"

namespace offsim::app {

namespace {

// Gathers one string per rank at rank 0.
std::vector<std::string> gather_strings(const std::string& mine, int size) {
  const int length = static_cast<int>(mine.size());
  std::vector<int> lengths(static_cast<std::size_t>(size));
  MPI_Gather(&length, 1, MPI_INT, lengths.data(), 1, MPI_INT, 0, MPI_COMM_WORLD);
  std::vector<int> offsets(static_cast<std::size_t>(size), 0);
  int total = 0;
  for (int r = 0; r < size; ++r) {
    offsets[static_cast<std::size_t>(r)] = total;
    total += lengths[static_cast<std::size_t>(r)];
  }
  std::string all(static_cast<std::size_t>(total), '\0');
  MPI_Gatherv(mine.data(), length, MPI_CHAR, all.data(), lengths.data(), offsets.data(), MPI_CHAR, 0, MPI_COMM_WORLD);
  std::vector<std::string> out;
  for (int r = 0; r < size; ++r) {
    out.push_back(all.substr(static_cast<std::size_t>(offsets[static_cast<std::size_t>(r)]),
                             static_cast<std::size_t>(lengths[static_cast<std::size_t>(r)])));
  }
  return out;
}

}  // namespace

}  // namespace offsim::app

// The entry point offsim finds with dlsym (kDistributedSweepSymbol); offsim calls it only under a
// launcher (Open MPI's mpirun, or a PMI/PMIx one such as srun).
extern "C" int offsim_run_distributed_sweep(const offsim::models::Sweep& sweep,
                                            const offsim::app::SweepCliOptions& options,
                                            const offsim::app::DistributedSweepHooks& hooks) {
  using namespace offsim::app;
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (initialized == 0) MPI_Init(nullptr, nullptr);
  int size = 1;
  int rank = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (size == 1) {
    MPI_Finalize();
    return -1;
  }
  // Rank 0 decides what is left to run and tells the others (as a list of point indices).
  std::vector<std::string> rows;
  std::vector<int> todo;
  int failed = 0;
  std::string failure;
  if (rank == 0) {
    try {
      if (!options.resume && std::filesystem::exists(options.out)) {
        throw std::runtime_error(
            fmt::format("{} exists: pass --resume to continue it, or choose another --out", options.out));
      }
      rows = hooks.finished_rows();
      std::vector<bool> done(sweep.points.size(), false);
      for (const auto& r : rows) done[std::stoull(r.substr(0, r.find(',')))] = true;
      for (const auto& p : sweep.points) {
        if (!done[p.index]) todo.push_back(static_cast<int>(p.index));
      }
      // A round ends when its slowest point does: in point order, a search's round put a 32-stage
      // pipeline beside a 2-stage one (twenty times shorter) and the other ranks waited. By cost,
      // a round's points are alike. (A stable sort: points of equal or unknown cost keep their order.)
      std::stable_sort(todo.begin(), todo.end(), [&](int a, int b) {
        return sweep.points[static_cast<std::size_t>(a)].relative_work >
               sweep.points[static_cast<std::size_t>(b)].relative_work;
      });
      hooks.write_sorted(rows);
    } catch (const std::exception& e) {
      failed = 1;
      failure = e.what();
    }
  }
  MPI_Bcast(&failed, 1, MPI_INT, 0, MPI_COMM_WORLD);
  if (failed != 0) {
    MPI_Finalize();
    if (rank == 0) throw std::runtime_error(failure);
    return rank;
  }
  int count = static_cast<int>(todo.size());
  MPI_Bcast(&count, 1, MPI_INT, 0, MPI_COMM_WORLD);
  todo.resize(static_cast<std::size_t>(count));
  MPI_Bcast(todo.data(), count, MPI_INT, 0, MPI_COMM_WORLD);

  std::ofstream append;
  if (rank == 0) append.open(options.out, std::ios::binary | std::ios::app);
  const int rounds = (count + size - 1) / size;
  for (int round = 0; round < rounds; ++round) {
    const int i = round * size + rank;
    std::string row;
    if (i < count) row = hooks.run_point(static_cast<std::size_t>(todo[static_cast<std::size_t>(i)]));
    const auto gathered = gather_strings(row, size);
    if (rank == 0) {
      for (const auto& r : gathered) {
        if (r.empty()) continue;
        append << r;
        rows.push_back(r);
      }
      append.flush();
      if (hooks.progress) hooks.progress(rows.size(), sweep.points.size());
    }
  }
  if (rank == 0) {
    append.close();
    hooks.write_sorted(rows);
    if (hooks.report) {
      hooks.report(static_cast<std::size_t>(count), size);
    } else {
      fmt::print("sweep {}: {} points ({} run now on {} ranks) -> {}\n", sweep.name, sweep.points.size(), count, size,
                 options.out);
    }
  }
  MPI_Finalize();
  return rank;
}
