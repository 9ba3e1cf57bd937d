#pragma once
// The closed-form pieces of the synthetic two-GPU machine tests/data/tiny-dp2.yaml, shared by the
// tests that derive its times by hand (data_parallel_test.cpp, ulysses_test.cpp): tiny GPT (L=2,
// h=64, a=4, f=256, V=128, s=32, b=1, untied, biases), GEMMs at 10 TFLOP/s x 0.5, memory-bound
// kernels at 100 GB/s. The values are those of the test files, not read from them, so that a
// change to a table shows as a failing test.
#include <algorithm>
#include <cstdint>

#include "sim/core/units.hpp"

namespace offsim::testing::tiny_dp2 {

inline constexpr double s = 32, h = 64, a = 4, V = 128, L = 2;
// Parameters: L x (12 h^2 + 13 h) + V h (embedding) + s h (positions) + 2 h (final norm) + V h (head).
inline constexpr double P = L * (12 * h * h + 13 * h) + V * h + s * h + 2 * h + V * h;  // 118,528
inline constexpr double kGemmRate = 10e12 * 0.5;
inline constexpr double kMemRate = 100e9;

inline std::int64_t ps(double amount, double rate) {
  return sim::duration_of(amount, rate).ps;
}

// One GEMM on the roofline: max(2 m n k b / gemm rate, 2 B x b (m k + k n + m n) / memory rate).
inline std::int64_t gemm_ps(double m, double n, double k, double batch = 1) {
  return std::max(ps(2 * m * n * k * batch, kGemmRate), ps(2 * batch * (m * k + k * n + m * n), kMemRate));
}

// Backward of a forward GEMM (m, n, k, batch): the input gradient m x k x n and the weight
// gradient k x n x m.
inline std::int64_t gemm_bwd_ps(double m, double n, double k, double batch = 1) {
  return gemm_ps(m, k, n, batch) + gemm_ps(k, n, m, batch);
}

}  // namespace offsim::testing::tiny_dp2
