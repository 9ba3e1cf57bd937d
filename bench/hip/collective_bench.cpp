// RCCL / NCCL collectives by size and rank count, for offsim's collective tables (ring fits and the
// measured bus bandwidth by size, docs/collectives.md).
//
// all_gather, reduce_scatter and all_reduce of bf16 buffers of S = 1 MiB .. --max-bytes (factors
// of 2), S being the all-gather output / reduce-scatter input / all-reduce buffer (the nccl-tests
// convention of bench/data/frontier-rccl-collectives.csv). Two modes:
//   - one process driving every visible GPU (ncclCommInitAll): one node;
//   - built with -DOFFSIM_BENCH_MPI, one process per GPU across nodes (ncclCommInitRank with the id
//     broadcast over MPI); rank 0 prints.
// Each size: 2 warm-up calls, then repetitions until about 0.2 s (at least 5); the row holds the
// mean wall time per collective, all ranks synchronised.
//
//   collective_bench [--max-bytes N] [--device-kind NAME] [--host NAME]
// Output: the CSV of bench_csv.hpp (benchmark=<collective>, ranks, bytes=S, time_s).
#include <chrono>
#include <cstdlib>
#include <string>
#include <vector>

#include "bench_csv.hpp"
#include "gpu_portability.hpp"

#if defined(__HIPCC__) || defined(__HIP_PLATFORM_AMD__) || defined(OFFSIM_USE_HIP)
#include <rccl/rccl.h>
#else
#include <nccl.h>
#endif
#ifdef OFFSIM_BENCH_MPI
#include <mpi.h>
#endif

#define NCCL_CHECK(call)                                                                                          \
  do {                                                                                                            \
    const ncclResult_t nccl_status = (call);                                                                      \
    if (nccl_status != ncclSuccess) {                                                                             \
      std::fprintf(stderr, "%s:%d: %s failed: %s\n", __FILE__, __LINE__, #call, ncclGetErrorString(nccl_status)); \
      std::exit(1);                                                                                               \
    }                                                                                                             \
  } while (0)

namespace {

struct Options {
  long long max_bytes = 1LL << 30;
  std::string device_kind = "unknown";
  std::string host = "unknown";
};

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--max-bytes" && i + 1 < argc) {
      o.max_bytes = std::atoll(argv[++i]);
    } else if (a == "--device-kind" && i + 1 < argc) {
      o.device_kind = argv[++i];
    } else if (a == "--host" && i + 1 < argc) {
      o.host = argv[++i];
    } else {
      std::fprintf(stderr, "usage: collective_bench [--max-bytes N] [--device-kind NAME] [--host NAME]\n");
      std::exit(2);
    }
  }
  return o;
}

// The GPUs this process drives: one communicator, buffers and stream each.
struct Local {
  int device = 0;
  ncclComm_t comm{};
  gpuStream_t stream{};
  void* send = nullptr;
  void* recv = nullptr;
};

void launch(const std::string& op, std::vector<Local>& locals, long long elements, int ranks) {
  NCCL_CHECK(ncclGroupStart());
  for (auto& l : locals) {
    const auto per_rank = static_cast<std::size_t>(elements / ranks);
    if (op == "all_gather") {
      NCCL_CHECK(ncclAllGather(l.send, l.recv, per_rank, ncclBfloat16, l.comm, l.stream));
    } else if (op == "reduce_scatter") {
      NCCL_CHECK(ncclReduceScatter(l.send, l.recv, per_rank, ncclBfloat16, ncclSum, l.comm, l.stream));
    } else {
      NCCL_CHECK(
          ncclAllReduce(l.send, l.recv, static_cast<std::size_t>(elements), ncclBfloat16, ncclSum, l.comm, l.stream));
    }
  }
  NCCL_CHECK(ncclGroupEnd());
}

void synchronize(std::vector<Local>& locals) {
  for (auto& l : locals) {
    GPU_CHECK(gpuSetDevice(l.device));
    GPU_CHECK(gpuStreamSynchronize(l.stream));
  }
#ifdef OFFSIM_BENCH_MPI
  MPI_Barrier(MPI_COMM_WORLD);
#endif
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  int ranks = 0;
  bool printer = true;
  std::vector<Local> locals;
#ifdef OFFSIM_BENCH_MPI
  MPI_Init(&argc, &argv);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  printer = rank == 0;
  int visible = 0;
  GPU_CHECK(gpuGetDeviceCount(&visible));
  ncclUniqueId id;
  if (rank == 0) NCCL_CHECK(ncclGetUniqueId(&id));
  MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD);
  locals.resize(1);
  locals[0].device = visible > 0 ? rank % visible : 0;  // with --gpus-per-task=1: the one it sees
  GPU_CHECK(gpuSetDevice(locals[0].device));
  NCCL_CHECK(ncclCommInitRank(&locals[0].comm, ranks, id, rank));
#else
  GPU_CHECK(gpuGetDeviceCount(&ranks));
  if (ranks < 2) {
    std::fprintf(stderr, "collective_bench: needs at least 2 GPUs in this process (found %d)\n", ranks);
    return 1;
  }
  locals.resize(static_cast<std::size_t>(ranks));
  std::vector<ncclComm_t> comms(static_cast<std::size_t>(ranks));
  std::vector<int> devices(static_cast<std::size_t>(ranks));
  for (int d = 0; d < ranks; ++d) devices[static_cast<std::size_t>(d)] = d;
  NCCL_CHECK(ncclCommInitAll(comms.data(), ranks, devices.data()));
  for (int d = 0; d < ranks; ++d) {
    locals[static_cast<std::size_t>(d)].device = d;
    locals[static_cast<std::size_t>(d)].comm = comms[static_cast<std::size_t>(d)];
  }
#endif
  for (auto& l : locals) {
    GPU_CHECK(gpuSetDevice(l.device));
    GPU_CHECK(gpuStreamCreate(&l.stream));
    GPU_CHECK(gpuMalloc(&l.send, static_cast<std::size_t>(o.max_bytes)));
    GPU_CHECK(gpuMalloc(&l.recv, static_cast<std::size_t>(o.max_bytes)));
    GPU_CHECK(gpuMemset(l.send, 0, static_cast<std::size_t>(o.max_bytes)));
  }
  if (printer) offsim::bench::print_header(stdout);
  for (const std::string op : {"all_gather", "reduce_scatter", "all_reduce"}) {
    for (long long bytes = 1LL << 20; bytes <= o.max_bytes; bytes *= 2) {
      const long long elements = bytes / 2;  // bf16
      if (elements % ranks != 0) continue;
      for (int i = 0; i < 2; ++i) launch(op, locals, elements, ranks);
      synchronize(locals);
      int reps = 0;
      double total = 0.0;
      while (reps < 5 || (total < 0.2 && reps < 1000)) {
        const auto t0 = std::chrono::steady_clock::now();
        launch(op, locals, elements, ranks);
        synchronize(locals);
        total += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        ++reps;
      }
      if (!printer) continue;
      offsim::bench::Row row;
      row.benchmark = op;
      row.device_kind = o.device_kind;
      row.host = o.host;
      row.memory = "device";
      row.ranks = std::to_string(ranks);
      row.dtype = "bf16";
      row.bytes = bytes;
      row.elements = elements;
      row.time_s = total / reps;
      offsim::bench::print_row(stdout, row);
    }
  }
  for (auto& l : locals) {
    GPU_CHECK(gpuSetDevice(l.device));
    GPU_CHECK(gpuFree(l.send));
    GPU_CHECK(gpuFree(l.recv));
    GPU_CHECK(gpuStreamDestroy(l.stream));
    NCCL_CHECK(ncclCommDestroy(l.comm));
  }
#ifdef OFFSIM_BENCH_MPI
  MPI_Finalize();
#endif
  return 0;
}
