// Memory-bound kernel throughput and kernel launch cost, for offsim's memory-bound efficiency
// and per-kernel overhead (the non-GEMM kernels of a transformer layer and the optimizer).
//
// Each kernel streams bf16 (or, for Adam, fp32) vectors of 2^16 .. 2^--max-log2 elements through
// HBM once; the row's `bytes` counts what the kernel must read and write, so bytes / time is the
// achieved bandwidth and its ratio to the data-sheet HBM rate is the memory-bound efficiency:
//   mem_copy       y = x                                   4 B per element (bf16 read + write)
//   mem_add        z = x + y (residual add)                6 B
//   mem_gelu       y = gelu_tanh(x)                        4 B
//   mem_layernorm  y = (x - mean) / std per row of `m`     4 B (one block per row, two passes in
//                  elements (the model's hidden size)          registers/cache: HBM once)
//   mem_softmax    y = softmax(x) per row of `m` elements  4 B (attention scores without flash)
//   mem_adam       AdamW step on fp32 p, g, m, v           28 B (read 16, write 12)
//   launch         an empty kernel, launched back to back: time_s is the time per launch
// Each size: 2 warm-up runs, then repetitions until about --min-ms milliseconds (at least 5),
// timed with GPU events; the row holds the mean time per kernel. Builds with hipcc or nvcc through
// gpu_portability.hpp. Output: the CSV of bench_csv.hpp on stdout.
//
//   membound_bench [--device-kind NAME] [--host NAME] [--max-log2 N] [--min-ms MS]
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <string>

#include "bench_csv.hpp"
#include "gpu_portability.hpp"

namespace {

using bf16 = unsigned short;

#if defined(__HIPCC__) || defined(__HIP_PLATFORM_AMD__) || defined(OFFSIM_USE_HIP)
constexpr int kWarp = 64;  // AMD wavefront
__device__ float shuffle_xor(float v, int offset) {
  return __shfl_xor(v, offset);
}
#else
constexpr int kWarp = 32;
__device__ float shuffle_xor(float v, int offset) {
  return __shfl_xor_sync(0xffffffffu, v, offset);
}
#endif

__device__ float load(const bf16* p, long long i) {
  return __uint_as_float(static_cast<unsigned>(p[i]) << 16);
}
__device__ void store(bf16* p, long long i, float v) {
  p[i] = static_cast<bf16>(__float_as_uint(v) >> 16);
}

#define GRID_STRIDE(i, count)                                                                    \
  for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i < (count); \
       i += static_cast<long long>(gridDim.x) * blockDim.x)

// Elementwise kernels move 16 B per thread and access (8 bf16 or 4 fp32), as framework kernels
// do: 2-byte accesses leave too few bytes in flight to fill HBM (on an H100 a 2-byte copy reached
// 1.46 TB/s of 3.35). Counts are multiples of 8 here.
struct Pack8 {
  float v[8];
};
__device__ Pack8 unpack(uint4 raw) {
  Pack8 p;
  const unsigned w[4] = {raw.x, raw.y, raw.z, raw.w};
  for (int j = 0; j < 4; ++j) {
    p.v[2 * j] = __uint_as_float(w[j] << 16);
    p.v[2 * j + 1] = __uint_as_float(w[j] & 0xFFFF0000u);
  }
  return p;
}
__device__ uint4 pack(const Pack8& p) {
  unsigned w[4];
  for (int j = 0; j < 4; ++j) {
    w[j] = (__float_as_uint(p.v[2 * j]) >> 16) | (__float_as_uint(p.v[2 * j + 1]) & 0xFFFF0000u);
  }
  return make_uint4(w[0], w[1], w[2], w[3]);
}

__global__ void copy_kernel(const uint4* x, uint4* y, long long packs) {
  GRID_STRIDE(i, packs) y[i] = x[i];
}
__global__ void add_kernel(const uint4* x, const uint4* y, uint4* z, long long packs) {
  GRID_STRIDE(i, packs) {
    Pack8 a = unpack(x[i]);
    const Pack8 b = unpack(y[i]);
    for (int j = 0; j < 8; ++j) a.v[j] += b.v[j];
    z[i] = pack(a);
  }
}
__global__ void gelu_kernel(const uint4* x, uint4* y, long long packs) {
  GRID_STRIDE(i, packs) {
    Pack8 a = unpack(x[i]);
    for (int j = 0; j < 8; ++j) {
      const float v = a.v[j];
      a.v[j] = 0.5f * v * (1.0f + tanhf(0.7978845608f * (v + 0.044715f * v * v * v)));
    }
    y[i] = pack(a);
  }
}
__global__ void adam_kernel(float4* p, const float4* g, float4* m, float4* v, long long packs) {
  // AdamW with lr 1e-4, betas (0.9, 0.999), eps 1e-8, weight decay 0.01, bias corrections folded.
  GRID_STRIDE(i, packs) {
    float4 pi = p[i], gi = g[i], mi = m[i], vi = v[i];
    float* pp = &pi.x;
    float* gg = &gi.x;
    float* mm = &mi.x;
    float* vv = &vi.x;
    for (int j = 0; j < 4; ++j) {
      mm[j] = 0.9f * mm[j] + 0.1f * gg[j];
      vv[j] = 0.999f * vv[j] + 0.001f * gg[j] * gg[j];
      pp[j] = pp[j] * (1.0f - 1e-6f) - 1e-4f * mm[j] / (sqrtf(vv[j]) + 1e-8f);
    }
    p[i] = pi;
    m[i] = mi;
    v[i] = vi;
  }
}

constexpr int kRowThreads = 256;

// One block per row: a block-wide sum, then the normalised row (the second read hits the cache
// for rows up to tens of KiB, as fused layer-norm kernels arrange).
__device__ float block_sum(float value, float* scratch) {
  for (int offset = kWarp / 2; offset > 0; offset /= 2) value += shuffle_xor(value, offset);
  const int warp = threadIdx.x / kWarp;
  if (threadIdx.x % kWarp == 0) scratch[warp] = value;
  __syncthreads();
  float total = 0.0f;
  for (int w = 0; w < kRowThreads / kWarp; ++w) total += scratch[w];
  __syncthreads();
  return total;
}
__device__ float block_max(float value, float* scratch) {
  for (int offset = kWarp / 2; offset > 0; offset /= 2) value = fmaxf(value, shuffle_xor(value, offset));
  const int warp = threadIdx.x / kWarp;
  if (threadIdx.x % kWarp == 0) scratch[warp] = value;
  __syncthreads();
  float total = scratch[0];
  for (int w = 1; w < kRowThreads / kWarp; ++w) total = fmaxf(total, scratch[w]);
  __syncthreads();
  return total;
}

__global__ void layernorm_kernel(const bf16* x, bf16* y, int width) {
  __shared__ float scratch[kRowThreads / kWarp];
  const long long row = static_cast<long long>(blockIdx.x) * width;
  float sum = 0.0f, sq = 0.0f;
  for (int c = threadIdx.x; c < width; c += kRowThreads) {
    const float v = load(x, row + c);
    sum += v;
    sq += v * v;
  }
  const float mean = block_sum(sum, scratch) / width;
  const float var = block_sum(sq, scratch) / width - mean * mean;
  const float inv = rsqrtf(var + 1e-5f);
  for (int c = threadIdx.x; c < width; c += kRowThreads) store(y, row + c, (load(x, row + c) - mean) * inv);
}

__global__ void softmax_kernel(const bf16* x, bf16* y, int width) {
  __shared__ float scratch[kRowThreads / kWarp];
  const long long row = static_cast<long long>(blockIdx.x) * width;
  float mx = -INFINITY;
  for (int c = threadIdx.x; c < width; c += kRowThreads) mx = fmaxf(mx, load(x, row + c));
  mx = block_max(mx, scratch);
  float sum = 0.0f;
  for (int c = threadIdx.x; c < width; c += kRowThreads) sum += __expf(load(x, row + c) - mx);
  const float inv = 1.0f / block_sum(sum, scratch);
  for (int c = threadIdx.x; c < width; c += kRowThreads) store(y, row + c, __expf(load(x, row + c) - mx) * inv);
}

__global__ void empty_kernel() {}

struct Options {
  std::string device_kind = "unknown";
  std::string host = "unknown";
  int max_log2 = 29;
  float min_ms = 50.0f;
};

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--device-kind" && i + 1 < argc) {
      o.device_kind = argv[++i];
    } else if (a == "--host" && i + 1 < argc) {
      o.host = argv[++i];
    } else if (a == "--max-log2" && i + 1 < argc) {
      o.max_log2 = std::atoi(argv[++i]);
    } else if (a == "--min-ms" && i + 1 < argc) {
      o.min_ms = static_cast<float>(std::atof(argv[++i]));
    } else {
      std::fprintf(stderr, "usage: membound_bench [--device-kind NAME] [--host NAME] [--max-log2 N] [--min-ms MS]\n");
      std::exit(2);
    }
  }
  if (o.max_log2 < 16 || o.max_log2 > 32) {
    std::fprintf(stderr, "membound_bench: --max-log2 must be in 16..32\n");
    std::exit(2);
  }
  return o;
}

// Mean seconds per call of `launch` (2 warm-ups, then repetitions until min_ms, at least 5).
template <class Launch>
double time_kernel(float min_ms, Launch launch) {
  for (int i = 0; i < 2; ++i) launch();
  GPU_CHECK(gpuDeviceSynchronize());
  gpuEvent_t start, stop;
  GPU_CHECK(gpuEventCreate(&start));
  GPU_CHECK(gpuEventCreate(&stop));
  int reps = 0;
  float total_ms = 0.0f;
  while (reps < 5 || (total_ms < min_ms && reps < 10000)) {
    GPU_CHECK(gpuEventRecord(start, nullptr));
    launch();
    GPU_CHECK(gpuEventRecord(stop, nullptr));
    GPU_CHECK(gpuEventSynchronize(stop));
    float ms = 0.0f;
    GPU_CHECK(gpuEventElapsedTime(&ms, start, stop));
    total_ms += ms;
    ++reps;
  }
  GPU_CHECK(gpuEventDestroy(start));
  GPU_CHECK(gpuEventDestroy(stop));
  return static_cast<double>(total_ms) / 1e3 / reps;
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  GPU_CHECK(gpuSetDevice(0));
  const long long max_elements = 1LL << o.max_log2;
  void *a = nullptr, *b = nullptr, *c = nullptr, *d = nullptr;
  // Four fp32 vectors of max_elements / 2 (Adam) hold three bf16 vectors of max_elements.
  const std::size_t buffer = static_cast<std::size_t>(max_elements) * 2;
  for (void** p : {&a, &b, &c, &d}) {
    GPU_CHECK(gpuMalloc(p, buffer));
    GPU_CHECK(gpuMemset(*p, 0, buffer));
  }
  const auto x = static_cast<bf16*>(a);
  const auto y = static_cast<bf16*>(b);
  offsim::bench::print_header(stdout);
  const auto emit = [&](const char* benchmark, long long elements, long long bytes, const std::string& width,
                        double seconds) {
    offsim::bench::Row row;
    row.benchmark = benchmark;
    row.device_kind = o.device_kind;
    row.host = o.host;
    row.memory = "device";
    row.m = width;
    row.dtype = std::string(benchmark) == "mem_adam" ? "fp32" : "bf16";
    row.bytes = bytes;
    row.elements = elements;
    row.time_s = seconds;
    offsim::bench::print_row(stdout, row);
  };
  const int threads = 256;
  const auto blocks = [&](long long n) {
    return static_cast<int>(std::min<long long>((n + threads - 1) / threads, 65535LL * 8));
  };
  const auto x8 = static_cast<const uint4*>(a);
  const auto y8 = static_cast<uint4*>(b);
  const auto z8 = static_cast<uint4*>(c);
  for (long long n = 1LL << 16; n <= max_elements; n *= 4) {
    const long long packs = n / 8;
    emit("mem_copy", n, 4 * n, "",
         time_kernel(o.min_ms, [&] { copy_kernel<<<blocks(packs), threads>>>(x8, y8, packs); }));
    emit("mem_add", n, 6 * n, "",
         time_kernel(o.min_ms, [&] { add_kernel<<<blocks(packs), threads>>>(x8, y8, z8, packs); }));
    emit("mem_gelu", n, 4 * n, "",
         time_kernel(o.min_ms, [&] { gelu_kernel<<<blocks(packs), threads>>>(x8, y8, packs); }));
    for (const int width : {1024, 4096, 8192}) {
      if (n % width != 0) continue;
      const int rows = static_cast<int>(n / width);
      emit("mem_layernorm", n, 4 * n, std::to_string(width),
           time_kernel(o.min_ms, [&] { layernorm_kernel<<<rows, kRowThreads>>>(x, y, width); }));
    }
    for (const int width : {1024, 2048, 4096}) {
      if (n % width != 0) continue;
      const int rows = static_cast<int>(n / width);
      emit("mem_softmax", n, 4 * n, std::to_string(width),
           time_kernel(o.min_ms, [&] { softmax_kernel<<<rows, kRowThreads>>>(x, y, width); }));
    }
    const long long adam_n = n / 2;  // fp32: four vectors of n / 2 fit the buffers
    emit("mem_adam", adam_n, 28 * adam_n, "", time_kernel(o.min_ms, [&] {
           adam_kernel<<<blocks(adam_n / 4), threads>>>(static_cast<float4*>(a), static_cast<const float4*>(b),
                                                        static_cast<float4*>(c), static_cast<float4*>(d), adam_n / 4);
         }));
  }
  // Launch cost: 1000 empty kernels back to back, per launch (the GPU-side gap between kernels a
  // training step's chain of small kernels pays when the CPU keeps ahead).
  constexpr int kLaunches = 1000;
  const double per_batch = time_kernel(o.min_ms, [&] {
    for (int i = 0; i < kLaunches; ++i) empty_kernel<<<1, 32>>>();
  });
  emit("launch", kLaunches, 0, "", per_batch / kLaunches);
  for (void* p : {a, b, c, d}) GPU_CHECK(gpuFree(p));
  return 0;
}
