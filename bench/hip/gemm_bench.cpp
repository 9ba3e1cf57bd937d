// bf16 GEMM throughput by shape, for offsim's GEMM efficiency tables (offsim calibrate --peak).
//
// C (m x n) = A (m x k) . B (k x n), bf16 in and out, fp32 accumulation: hipBLAS on ROCm
// (hipblasGemmEx, HIP_R_16BF, HIPBLAS_COMPUTE_32F) or cuBLAS on CUDA (cublasGemmEx, CUDA_R_16BF,
// CUBLAS_COMPUTE_32F), the library calls PyTorch uses for these layers. Shapes: the square sizes
// 256..16384 and, with --shapes "m,n,k;m,n,k", any list (offsim model FILE --tp T prints a model's
// GEMM shapes). Each shape: 3 warm-up runs, then repetitions until about --min-ms milliseconds
// (default 200, at least 5 runs), timed with GPU events; the row holds the mean time per GEMM.
// Operands are filled with pseudo-random values in [-1, 1): all-zero operands run measurably
// faster on recent GPUs (less switching power, higher sustained clocks), which real training
// data does not.
//
//   gemm_bench [--device-kind NAME] [--host NAME] [--shapes "m,n,k;..."] [--min-ms MS]
// Output: the CSV of bench_csv.hpp on stdout (benchmark=gemm, m, n, k, dtype=bf16, time_s).
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include "bench_csv.hpp"
#include "gpu_portability.hpp"

#if defined(__HIPCC__) || defined(__HIP_PLATFORM_AMD__) || defined(OFFSIM_USE_HIP)
#include <hipblas/hipblas.h>
using BlasHandle = hipblasHandle_t;
#define BLAS_OK HIPBLAS_STATUS_SUCCESS
inline int blas_create(BlasHandle* h) {
  return static_cast<int>(hipblasCreate(h));
}
inline int blas_destroy(BlasHandle h) {
  return static_cast<int>(hipblasDestroy(h));
}
inline int blas_set_stream(BlasHandle h, gpuStream_t s) {
  return static_cast<int>(hipblasSetStream(h, s));
}
inline int blas_gemm_bf16(BlasHandle h, int m, int n, int k, const void* a, const void* b, void* c) {
  const float alpha = 1.0f;
  const float beta = 0.0f;
  // Column-major: C^T = B^T . A^T gives row-major C = A . B without transposes.
  return static_cast<int>(hipblasGemmEx(h, HIPBLAS_OP_N, HIPBLAS_OP_N, n, m, k, &alpha, b, HIP_R_16BF, n, a, HIP_R_16BF,
                                        k, &beta, c, HIP_R_16BF, n, HIPBLAS_COMPUTE_32F, HIPBLAS_GEMM_DEFAULT));
}
#else
#include <cublas_v2.h>
using BlasHandle = cublasHandle_t;
#define BLAS_OK CUBLAS_STATUS_SUCCESS
inline int blas_create(BlasHandle* h) {
  return static_cast<int>(cublasCreate(h));
}
inline int blas_destroy(BlasHandle h) {
  return static_cast<int>(cublasDestroy(h));
}
inline int blas_set_stream(BlasHandle h, gpuStream_t s) {
  return static_cast<int>(cublasSetStream(h, s));
}
inline int blas_gemm_bf16(BlasHandle h, int m, int n, int k, const void* a, const void* b, void* c) {
  const float alpha = 1.0f;
  const float beta = 0.0f;
  // Column-major: C^T = B^T . A^T gives row-major C = A . B without transposes.
  return static_cast<int>(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, n, m, k, &alpha, b, CUDA_R_16BF, n, a, CUDA_R_16BF,
                                       k, &beta, c, CUDA_R_16BF, n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}
#endif

#define BLAS_CHECK(call)                                                                             \
  do {                                                                                               \
    const int blas_status = (call);                                                                  \
    if (blas_status != static_cast<int>(BLAS_OK)) {                                                  \
      std::fprintf(stderr, "%s:%d: %s failed: status %d\n", __FILE__, __LINE__, #call, blas_status); \
      std::exit(1);                                                                                  \
    }                                                                                                \
  } while (0)

namespace {

// bf16 bit patterns of pseudo-random values in [-1, 1) (a hash of the index: no RNG library).
__global__ void fill_random_bf16(unsigned short* data, long long count, unsigned seed) {
  for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<long long>(gridDim.x) * blockDim.x) {
    unsigned h = static_cast<unsigned>(i) * 2654435761u ^ seed;
    h ^= h >> 15;
    h *= 2246822519u;
    h ^= h >> 13;
    const float value = static_cast<float>(h & 0xFFFFFFu) / 8388608.0f - 1.0f;
    data[i] = static_cast<unsigned short>(__float_as_uint(value) >> 16);  // truncation to bf16
  }
}

void fill_random(void* data, long long count, unsigned seed) {
  fill_random_bf16<<<1024, 256>>>(static_cast<unsigned short*>(data), count, seed);
  GPU_CHECK(gpuDeviceSynchronize());
}

struct Shape {
  long long m, n, k;
};

struct Options {
  std::string device_kind = "unknown";
  std::string host = "unknown";
  std::vector<Shape> shapes;
  float min_ms = 200.0f;
};

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--device-kind" && i + 1 < argc) {
      o.device_kind = argv[++i];
    } else if (a == "--host" && i + 1 < argc) {
      o.host = argv[++i];
    } else if (a == "--shapes" && i + 1 < argc) {
      std::stringstream list(argv[++i]);
      std::string item;
      while (std::getline(list, item, ';')) {
        Shape s{};
        if (std::sscanf(item.c_str(), "%lld,%lld,%lld", &s.m, &s.n, &s.k) != 3 || s.m < 1 || s.n < 1 || s.k < 1) {
          std::fprintf(stderr, "gemm_bench: bad shape \"%s\" (expected m,n,k)\n", item.c_str());
          std::exit(2);
        }
        o.shapes.push_back(s);
      }
    } else if (a == "--min-ms" && i + 1 < argc) {
      o.min_ms = static_cast<float>(std::atof(argv[++i]));
    } else {
      std::fprintf(stderr,
                   "usage: gemm_bench [--device-kind NAME] [--host NAME] [--shapes \"m,n,k;...\"] [--min-ms MS]\n");
      std::exit(2);
    }
  }
  if (o.shapes.empty()) {
    for (long long s = 256; s <= 16384; s *= 2) o.shapes.push_back({s, s, s});
  }
  return o;
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  GPU_CHECK(gpuSetDevice(0));
  gpuStream_t stream;
  GPU_CHECK(gpuStreamCreate(&stream));
  BlasHandle blas;
  BLAS_CHECK(blas_create(&blas));
  BLAS_CHECK(blas_set_stream(blas, stream));
  gpuEvent_t start, stop;
  GPU_CHECK(gpuEventCreate(&start));
  GPU_CHECK(gpuEventCreate(&stop));
  offsim::bench::print_header(stdout);
  for (const Shape& s : o.shapes) {
    void* a = nullptr;
    void* b = nullptr;
    void* c = nullptr;
    const long long bf16 = 2;
    GPU_CHECK(gpuMalloc(&a, static_cast<std::size_t>(s.m * s.k * bf16)));
    GPU_CHECK(gpuMalloc(&b, static_cast<std::size_t>(s.k * s.n * bf16)));
    GPU_CHECK(gpuMalloc(&c, static_cast<std::size_t>(s.m * s.n * bf16)));
    fill_random(a, s.m * s.k, 1u);
    fill_random(b, s.k * s.n, 2u);
    const int m = static_cast<int>(s.m);
    const int n = static_cast<int>(s.n);
    const int k = static_cast<int>(s.k);
    for (int i = 0; i < 3; ++i) BLAS_CHECK(blas_gemm_bf16(blas, m, n, k, a, b, c));
    GPU_CHECK(gpuStreamSynchronize(stream));
    int reps = 0;
    float total_ms = 0.0f;
    while (reps < 5 || (total_ms < o.min_ms && reps < 1000)) {
      GPU_CHECK(gpuEventRecord(start, stream));
      BLAS_CHECK(blas_gemm_bf16(blas, m, n, k, a, b, c));
      GPU_CHECK(gpuEventRecord(stop, stream));
      GPU_CHECK(gpuEventSynchronize(stop));
      float ms = 0.0f;
      GPU_CHECK(gpuEventElapsedTime(&ms, start, stop));
      total_ms += ms;
      ++reps;
    }
    offsim::bench::Row row;
    row.benchmark = "gemm";
    row.device_kind = o.device_kind;
    row.host = o.host;
    row.memory = "device";
    row.m = std::to_string(s.m);
    row.n = std::to_string(s.n);
    row.k = std::to_string(s.k);
    row.dtype = "bf16";
    row.bytes = (s.m * s.k + s.k * s.n + s.m * s.n) * bf16;
    row.time_s = static_cast<double>(total_ms) / 1e3 / reps;
    offsim::bench::print_row(stdout, row);
    GPU_CHECK(gpuFree(a));
    GPU_CHECK(gpuFree(b));
    GPU_CHECK(gpuFree(c));
  }
  BLAS_CHECK(blas_destroy(blas));
  GPU_CHECK(gpuEventDestroy(start));
  GPU_CHECK(gpuEventDestroy(stop));
  GPU_CHECK(gpuStreamDestroy(stream));
  return 0;
}
