// Host CPU Adam and cast throughput, for offsim's host cost table.
//
// The arithmetic is DeepSpeed's CPU Adam (csrc/includes/cpu_adam.h, Step_1 / Step_AVX at v0.13.3),
// AdamW mode, on fp32 parameters, gradients, momentum and variance: per element it reads p, g, m, v
// (16 B) and writes p, m, v (12 B). The loop is written so that the compiler vectorises it
// (AVX2 or AVX-512 with -march=native) and OpenMP spreads it over the threads, as DeepSpeed does.
// Memory is touched first by the threads that use it, so pages land on their NUMA domains.
//
//   cpu_adam_bench [--elements N] [--threads T[,T...]] [--steps S] [--host NAME]
// Output: the CSV of bench_csv.hpp, per thread count one row of each benchmark:
//   cpu_adam      bytes = 28 x elements
//   cpu_upcast    bf16 -> fp32 (DeepSpeed 0.13's blocking gradient copy converts on the CPU), 6 x elements
//   cpu_downcast  fp32 -> bf16, round to nearest even (the parameter copy-back), 6 x elements
#include <omp.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include "bench_csv.hpp"

namespace {

struct Options {
  long long elements = 100'000'000;  // DeepSpeed's default sub_group_size
  std::vector<int> threads;
  int steps = 5;
  std::string host = "unknown";
};

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--elements" && i + 1 < argc) {
      o.elements = std::atoll(argv[++i]);
    } else if (a == "--steps" && i + 1 < argc) {
      o.steps = std::atoi(argv[++i]);
    } else if (a == "--host" && i + 1 < argc) {
      o.host = argv[++i];
    } else if (a == "--threads" && i + 1 < argc) {
      std::stringstream list(argv[++i]);
      for (std::string t; std::getline(list, t, ',');) o.threads.push_back(std::atoi(t.c_str()));
    } else {
      std::fprintf(stderr, "usage: %s [--elements N] [--threads T[,T...]] [--steps S] [--host NAME]\n", argv[0]);
      std::exit(2);
    }
  }
  if (o.elements < 1 || o.steps < 1) {
    std::fprintf(stderr, "cpu_adam_bench: --elements and --steps must be positive\n");
    std::exit(2);
  }
  if (o.threads.empty()) o.threads.push_back(omp_get_max_threads());
  return o;
}

// DeepSpeed defaults (DeepSpeedCPUAdam): lr 1e-3, betas (0.9, 0.999), eps 1e-8, weight decay 0,
// adamw_mode true. The values do not change the work, only the numbers.
void adam_step(float* p, const float* g, float* m, float* v, long long n, int step) {
  const float lr = 1e-3f, beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f, weight_decay = 0.0f;
  const float bias_correction1 = 1.0f - std::pow(beta1, static_cast<float>(step));
  const float bias_correction2 = 1.0f / std::sqrt(1.0f - std::pow(beta2, static_cast<float>(step)));
  const float step_size = -lr / bias_correction1;
  const float w_decay = -lr * weight_decay;
#pragma omp parallel for simd schedule(static)
  for (long long i = 0; i < n; ++i) {
    const float grad = g[i];
    float param = p[i];
    const float momentum = m[i] * beta1 + grad * (1.0f - beta1);
    const float variance = v[i] * beta2 + grad * grad * (1.0f - beta2);
    const float update = momentum / (std::sqrt(variance) * bias_correction2 + eps);
    param += w_decay * param;
    p[i] = update * step_size + param;
    m[i] = momentum;
    v[i] = variance;
  }
}

// bf16 is the upper half of an fp32.
void upcast(const std::uint16_t* in, float* out, long long n) {
#pragma omp parallel for simd schedule(static)
  for (long long i = 0; i < n; ++i) {
    const std::uint32_t bits = static_cast<std::uint32_t>(in[i]) << 16;
    float f;
    std::memcpy(&f, &bits, sizeof f);
    out[i] = f;
  }
}

void downcast(const float* in, std::uint16_t* out, long long n) {
#pragma omp parallel for simd schedule(static)
  for (long long i = 0; i < n; ++i) {
    std::uint32_t bits;
    std::memcpy(&bits, &in[i], sizeof bits);
    bits += 0x7FFFu + ((bits >> 16) & 1u);  // round to nearest even
    out[i] = static_cast<std::uint16_t>(bits >> 16);
  }
}

template <class Work>
double seconds_per_run(int steps, Work work) {
  work();  // warm-up
  const auto start = std::chrono::steady_clock::now();
  for (int s = 0; s < steps; ++s) work();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / steps;
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  const auto n = static_cast<std::size_t>(o.elements);
  std::vector<float> p(n), g(n), m(n), v(n);
#pragma omp parallel for schedule(static)
  for (long long i = 0; i < o.elements; ++i) {
    p[i] = 1.0f;
    g[i] = 1e-3f * static_cast<float>(i % 1000);
    m[i] = 0.0f;
    v[i] = 0.0f;
  }
  std::vector<std::uint16_t> half(n);
  offsim::bench::print_header(stdout);
  const auto print = [&](const char* benchmark, const char* dtype, int threads, long long bytes_per_element,
                         double seconds) {
    offsim::bench::Row row;
    row.benchmark = benchmark;
    row.device_kind = "host";
    row.host = o.host;
    row.memory = "pageable";
    row.dtype = dtype;
    row.threads = std::to_string(threads);
    row.elements = o.elements;
    row.bytes = bytes_per_element * o.elements;
    row.time_s = seconds;
    offsim::bench::print_row(stdout, row);
  };
  for (const int threads : o.threads) {
    omp_set_num_threads(threads);
    int step = 1;
    // Adam reads p, g, m, v and writes p, m, v (4 B each); a cast reads 4 + writes 2 B or the reverse.
    print("cpu_adam", "fp32", threads, 28,
          seconds_per_run(o.steps, [&] { adam_step(p.data(), g.data(), m.data(), v.data(), o.elements, ++step); }));
    print("cpu_downcast", "fp32->bf16", threads, 6,
          seconds_per_run(o.steps, [&] { downcast(p.data(), half.data(), o.elements); }));
    print("cpu_upcast", "bf16->fp32", threads, 6,
          seconds_per_run(o.steps, [&] { upcast(half.data(), g.data(), o.elements); }));
  }
  // A checksum keeps the compiler from dropping the work.
  double sum = 0.0;
  for (std::size_t i = 0; i < n; i += n / 16 + 1) sum += p[i];
  std::fprintf(stderr, "cpu_adam_bench: checksum %.6f\n", sum);
  return 0;
}
