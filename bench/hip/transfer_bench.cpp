// Host<->device and device<->device copy bandwidth, for offsim's copy cost tables.
//
// For every visible GPU: H2D and D2H from pinned and pageable host memory; for every ordered pair
// of GPUs with peer access: device-to-device copies. Sizes from 4 KiB to --max-bytes (default
// 4 GiB) by factors of 4. Each size: 2 warm-up copies, then repetitions until about 0.2 s or 100
// copies (at least 3), timed with GPU events; the row holds the mean time per copy.
//
// Builds with hipcc (AMD or NVIDIA) or nvcc through gpu_portability.hpp. Output: the CSV of
// bench_csv.hpp on stdout.   transfer_bench [--max-bytes N] [--device-kind NAME] [--host NAME] [--no-peer]
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "bench_csv.hpp"
#include "gpu_portability.hpp"

namespace {

struct Options {
  long long max_bytes = 4LL << 30;
  std::string device_kind = "unknown";
  std::string host = "unknown";
  bool peer = true;
};

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--max-bytes" && i + 1 < argc)
      o.max_bytes = std::atoll(argv[++i]);
    else if (a == "--device-kind" && i + 1 < argc)
      o.device_kind = argv[++i];
    else if (a == "--host" && i + 1 < argc)
      o.host = argv[++i];
    else if (a == "--no-peer")
      o.peer = false;
    else {
      std::fprintf(stderr, "usage: %s [--max-bytes N] [--device-kind NAME] [--host NAME] [--no-peer]\n", argv[0]);
      std::exit(2);
    }
  }
  return o;
}

// Mean seconds per copy of `bytes` issued by `copy` on `stream`.
template <class Copy>
double time_copies(gpuStream_t stream, long long bytes, Copy copy) {
  constexpr int kWarmup = 2;
  constexpr double kTargetSeconds = 0.2;
  for (int i = 0; i < kWarmup; ++i) copy();
  GPU_CHECK(gpuStreamSynchronize(stream));
  gpuEvent_t start, stop;
  GPU_CHECK(gpuEventCreate(&start));
  GPU_CHECK(gpuEventCreate(&stop));
  // One timed copy sizes the repetition count.
  GPU_CHECK(gpuEventRecord(start, stream));
  copy();
  GPU_CHECK(gpuEventRecord(stop, stream));
  GPU_CHECK(gpuEventSynchronize(stop));
  float ms = 0.0f;
  GPU_CHECK(gpuEventElapsedTime(&ms, start, stop));
  const int reps = std::clamp(static_cast<int>(kTargetSeconds / std::max(1e-6, ms * 1e-3)), 3, 100);
  GPU_CHECK(gpuEventRecord(start, stream));
  for (int i = 0; i < reps; ++i) copy();
  GPU_CHECK(gpuEventRecord(stop, stream));
  GPU_CHECK(gpuEventSynchronize(stop));
  GPU_CHECK(gpuEventElapsedTime(&ms, start, stop));
  GPU_CHECK(gpuEventDestroy(start));
  GPU_CHECK(gpuEventDestroy(stop));
  (void)bytes;
  return ms * 1e-3 / reps;
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  int devices = 0;
  if (gpuGetDeviceCount(&devices) != gpuSuccess || devices == 0) {
    std::fprintf(stderr, "transfer_bench: no %s device visible\n", GPU_API_NAME);
    return 1;
  }
  std::vector<long long> sizes;
  for (long long b = 4096; b <= o.max_bytes; b *= 4) sizes.push_back(b);
  const long long largest = sizes.back();
  offsim::bench::print_header(stdout);

  void* pinned = nullptr;
  GPU_CHECK(gpuHostAlloc(&pinned, static_cast<size_t>(largest)));
  std::vector<char> pageable(static_cast<size_t>(largest));
  std::memset(pinned, 1, static_cast<size_t>(largest));

  std::vector<void*> buffers(devices);
  std::vector<gpuStream_t> streams(devices);
  for (int d = 0; d < devices; ++d) {
    GPU_CHECK(gpuSetDevice(d));
    GPU_CHECK(gpuMalloc(&buffers[d], static_cast<size_t>(largest)));
    GPU_CHECK(gpuMemset(buffers[d], 0, static_cast<size_t>(largest)));
    GPU_CHECK(gpuStreamCreate(&streams[d]));
  }
  for (int d = 0; d < devices; ++d) {
    GPU_CHECK(gpuSetDevice(d));
    const std::string gpu = "gpu" + std::to_string(d);
    for (const long long bytes : sizes) {
      for (const bool is_pinned : {true, false}) {
        void* host = is_pinned ? pinned : static_cast<void*>(pageable.data());
        const double h2d = time_copies(streams[d], bytes, [&] {
          GPU_CHECK(gpuMemcpyAsync(buffers[d], host, static_cast<size_t>(bytes), gpuMemcpyHostToDevice, streams[d]));
        });
        offsim::bench::print_row(stdout, {"h2d", o.device_kind, o.host, "host", gpu, is_pinned ? "pinned" : "pageable",
                                          "", "", "", "", "", "", bytes, 0, h2d});
        const double d2h = time_copies(streams[d], bytes, [&] {
          GPU_CHECK(gpuMemcpyAsync(host, buffers[d], static_cast<size_t>(bytes), gpuMemcpyDeviceToHost, streams[d]));
        });
        offsim::bench::print_row(stdout, {"d2h", o.device_kind, o.host, gpu, "host", is_pinned ? "pinned" : "pageable",
                                          "", "", "", "", "", "", bytes, 0, d2h});
      }
    }
  }
  if (o.peer) {
    for (int a = 0; a < devices; ++a) {
      for (int b = 0; b < devices; ++b) {
        if (a == b) continue;
        int can = 0;
        GPU_CHECK(gpuDeviceCanAccessPeer(&can, a, b));
        if (!can) continue;
        GPU_CHECK(gpuSetDevice(a));
        const gpuError_t enabled = gpuDeviceEnablePeerAccess(b, 0);
        (void)enabled;  // already enabled is fine
        for (const long long bytes : sizes) {
          const double t = time_copies(streams[a], bytes, [&] {
            GPU_CHECK(gpuMemcpyPeerAsync(buffers[b], b, buffers[a], a, static_cast<size_t>(bytes), streams[a]));
          });
          offsim::bench::print_row(stdout, {"peer", o.device_kind, o.host, "gpu" + std::to_string(a),
                                            "gpu" + std::to_string(b), "device", "", "", "", "", "", "", bytes, 0, t});
        }
      }
    }
  }
  for (int d = 0; d < devices; ++d) {
    GPU_CHECK(gpuSetDevice(d));
    GPU_CHECK(gpuStreamDestroy(streams[d]));
    GPU_CHECK(gpuFree(buffers[d]));
  }
  GPU_CHECK(gpuFreeHost(pinned));
  return 0;
}
