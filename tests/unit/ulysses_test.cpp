// DeepSpeed-Ulysses sequence parallelism (models/strategies/ulysses.hpp) read from a ds_config:
// closed-form bytes and time of its all-to-alls on the synthetic two-GPU machine of
// data_parallel_test.cpp (tests/data/tiny-dp2.yaml: tiny GPT L=2, h=64, a=4, kv 4, f=256, V=128,
// s=32, b=1; GEMMs at 10 TFLOP/s x 0.5, memory-bound kernels at 100 GB/s, one 1 GB/s
// full-duplex link; reduce-scatter steps 10 us at 1 GB/s, all-gather 20 us at 0.5 GB/s), and the
// located errors.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "models/experiment.hpp"
#include "models/strategies/ulysses.hpp"
#include "tests/unit/source_paths.hpp"
#include "tests/unit/tiny_dp2_closed_form.hpp"

namespace offsim::models {
namespace {

namespace fs = std::filesystem;

using namespace testing::tiny_dp2;  // s, h, a, V, L, P, the rates, ps, gemm_ps, gemm_bwd_ps

// One rank's compute with sp ranks per sequence (data_parallel_test.cpp's compute_ps at sp = 1):
// every GEMM and kernel outside the attention core over t = s / sp tokens; the attention core
// (scores s x s x d and values s x d x s, the scale and mask + softmax kernels over S elements)
// over all s tokens with a / sp heads: S = (a / sp) s^2. e = t h, f = t 4h.
std::int64_t compute_ps(int sp) {
  const double t = s / sp, ac = a / sp;
  const double e = t * h, f = t * 4 * h, S = ac * s * s;
  const std::int64_t gemms_fwd = gemm_ps(t, 192, 64) + gemm_ps(s, s, 16, ac) + gemm_ps(s, 16, s, ac) +
                                 gemm_ps(t, 64, 64) + gemm_ps(t, 256, 64) + gemm_ps(t, 64, 256);
  const std::int64_t gemms_bwd = gemm_bwd_ps(t, 192, 64) + gemm_bwd_ps(s, s, 16, ac) + gemm_bwd_ps(s, 16, s, ac) +
                                 gemm_bwd_ps(t, 64, 64) + gemm_bwd_ps(t, 256, 64) + gemm_bwd_ps(t, 64, 256);
  const std::int64_t kernels_fwd = 2 * ps(4 * e, kMemRate) + ps(4 * S, kMemRate) + ps(8 * S, kMemRate) +
                                   2 * ps(6 * e, kMemRate) + ps(4 * f, kMemRate);
  const std::int64_t kernels_bwd = 2 * ps(6 * e, kMemRate) + ps(4 * S, kMemRate) + ps(8 * S, kMemRate) +
                                   2 * ps(6 * e, kMemRate) + ps(6 * f, kMemRate) +
                                   ps(2 * (t * 3 * h + e + f + e), kMemRate);
  const double logits = t * V * 6;
  const std::int64_t fwd =
      ps(t * h * 2, kMemRate) + 2 * (gemms_fwd + kernels_fwd) + gemm_ps(t, 128, 64) + ps(logits, kMemRate);
  const std::int64_t bwd =
      gemm_bwd_ps(t, 128, 64) + ps(logits, kMemRate) + 2 * (gemms_bwd + kernels_bwd) + ps(t * h * 4, kMemRate);
  return fwd + bwd;
}

// The tiny GPT on the two-GPU node as `kind: deepspeed` (ZeRO-0, bf16 gradients, one bucket,
// overlap_comm off: as tiny-dp2.yaml), with `sequence_parallel` given as `ulysses`.
ExperimentResult run_ds(const std::string& ulysses, const std::string& model = "tiny-gpt.yaml",
                        const std::string& fidelity = "flow") {
  const fs::path dir = testing::scratch_folder("offsim-ulysses");
  const std::string data = std::string(OFFSIM_SOURCE_DIR) + "/tests/data";
  std::ofstream(dir / "e.yaml") << fmt::format(
      "name: ulysses\nhardware: !include {0}/two-gpu-node.yaml\n"
      "calibration:\n  device: !include {0}/test-gpu-costs.yaml\n  collectives: !include {0}/test-collectives.yaml\n"
      "model: !include {0}/{2}\n"
      "training: {{micro_batch: 1, grad_accum: 1, precision: bf16, recompute: none, flash_attention: false}}\n"
      "strategy:\n  kind: deepspeed\n  dp: 2\n  runtime: deepspeed-0.13\n  collectives: {{fidelity: {3}}}\n  config:\n"
      "    bf16: {{enabled: true}}\n    zero_optimization: {{stage: 0, reduce_bucket_size: 1000000000}}\n"
      "    data_types: {{grad_accum_dtype: bf16}}\n{1}",
      data, ulysses, model, fidelity);
  return run_experiment(load_experiment(dir / "e.yaml", {}));
}

double gpu_link_bytes(const ExperimentResult& r) {
  for (const auto& l : r.links) {
    if (l.link_class == "gpu-gpu") return l.bytes;
  }
  ADD_FAILURE() << "no gpu-gpu link class";
  return 0.0;
}

TEST(Ulysses, AllToAllBytesAndTimeFollowTheClosedForm) {
  // Each layer exchanges q, k, v before the attention and its context after it, in forward and
  // (their gradients) in backward: 8 all-to-alls per layer. Each rank's buffer is
  //   b x s/sp x width = 1 x 16 x 64 = 1,024 elements (q, k, v and context all h wide here),
  // of which it sends (sp - 1) / sp, in bf16:
  //   bytes per all-to-all per rank = (sp - 1)/sp x b x s/sp x width x 2 B = 1/2 x 16 x 64 x 2 = 1,024 B
  // (DeepSpeed-Ulysses, arXiv 2309.14509 section 3.2: 4Nh/P per link for a layer's four, N = b s).
  // On the link, both ranks: 2 ranks x 2 layers x 8 x 1,024 B = 32,768 B more than without.
  const ExperimentResult sp1 = run_ds("");
  const ExperimentResult sp2 = run_ds("    sequence_parallel_size: 2\n");
  EXPECT_EQ(ulysses_exchange_elements(
                load_experiment(std::string(OFFSIM_SOURCE_DIR) + "/tests/data/tiny-dp2.yaml", {}).model, 1, 2),
            (std::array<std::int64_t, 4>{1024, 1024, 1024, 1024}));
  EXPECT_NEAR(gpu_link_bytes(sp2) - gpu_link_bytes(sp1), 2 * L * 8 * 1024, 1.0);
  // Time: each all-to-all is one step (a flow each way, 1 GB/s per direction of the duplex link)
  // after the reduce-scatter fit's 10 us step latency:
  //   t_a2a = 10 us + 1,024 B / 1 GB/s = 11.024 us
  // and everything runs on one critical path (ZeRO-0, overlap_comm off):
  //   iteration = compute(sp) + L x 8 x t_a2a + t_allreduce + t_adam
  //   t_allreduce = (10 us + (2P/4) / 0.5 GB/s) + (20 us + (2P/4) / 0.25 GB/s), t_adam = 40 B x P / 100 GB/s
  const std::int64_t a2a = sim::parse_time("10 us").ps + ps(1024, 1e9);
  const std::int64_t allreduce =
      sim::parse_time("10 us").ps + ps(2 * P / 4, 0.5e9) + sim::parse_time("20 us").ps + ps(2 * P / 4, 0.25e9);
  const std::int64_t adam = ps(40 * P, kMemRate);
  EXPECT_LE(std::llabs(sp1.iteration_time.ps - (compute_ps(1) + allreduce + adam)), 4);
  EXPECT_LE(std::llabs(sp2.iteration_time.ps - (compute_ps(2) + 2 * 8 * a2a + allreduce + adam)), 40);
  // The analytic fidelity gives the same uncontended all-to-alls.
  const ExperimentResult analytic = run_ds("    sequence_parallel_size: 2\n", "tiny-gpt.yaml", "analytic");
  EXPECT_LE(std::llabs(analytic.iteration_time.ps - sp2.iteration_time.ps), 40);
  EXPECT_NEAR(gpu_link_bytes(analytic), gpu_link_bytes(sp2), 1.0);
  // Memory (data_parallel_test.cpp's peak at sp 1): the states 16 B x P, and per layer the stored
  // activations of t = s/sp = 16 tokens, 34 t h, with the s x s terms of a/sp heads over s tokens,
  // 5 (a/sp) s^2 (no flash attention); the logits and the loss workspace of t tokens, t V x (6 + 4):
  //   16 P + L (34 x 16 x 64 + 5 x 2 x 32^2) + 16 x 128 x 10
  EXPECT_EQ(sp2.memory[0].peak.count,
            static_cast<std::int64_t>(16 * P + L * (34 * (s / 2) * h + 5 * (a / 2) * s * s) + (s / 2) * V * (6 + 4)));
  // The work figures: sp 2 makes one data-parallel replica of 2 devices, s tokens per iteration
  // (sp 1: 2 replicas, 2 s tokens).
  EXPECT_NEAR(sp2.tokens_per_s * sp2.iteration_time.seconds(), s, 1e-9);
  EXPECT_NEAR(sp1.tokens_per_s * sp1.iteration_time.seconds(), 2 * s, 1e-9);
}

TEST(Ulysses, FewerKeyValueHeadsThanRanksAreRepeatedAsAlstDoes) {
  // Llama 3 70B's 8 KV heads over sp 16: each repeated twice (kv_replication_factor 2) so that every
  // rank gets one; k and v then carry 16 heads of 128, q 64 heads of 128.
  ModelSpec m;
  m.hidden = 8192;
  m.heads = 64;
  m.kv_heads = 8;
  m.seq = 32768;
  EXPECT_EQ(ulysses_kv_heads(m, 16), 16);
  EXPECT_EQ(ulysses_kv_heads(m, 8), 8);
  EXPECT_TRUE(ulysses_unfit(m, 16).empty());
  EXPECT_EQ(ulysses_exchange_elements(m, 1, 16),
            (std::array<std::int64_t, 4>{2048LL * 8192, 2048LL * 16 * 128, 2048LL * 16 * 128, 2048LL * 8192}));
  m.kv_heads = 3;  // neither divides the other
  m.heads = 48;
  EXPECT_NE(ulysses_unfit(m, 16).find("sequence: kv_heads (3, nor sp by them) must divide by it"), std::string::npos);
}

TEST(Ulysses, HeadsAndSequenceMustDivideBySp) {
  // sp 2 over the tiny GPT's 4 heads works; over a model of 1 head it is refused at the key.
  try {
    (void)run_ds("    sequence_parallel: {enabled: true, size: 2}\n", "tiny-gpt-1-head.yaml");
    ADD_FAILURE() << "1 head over sp 2 ran";
  } catch (const sim::config::ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("strategy.config.sequence_parallel.size: Ulysses over 2 ranks splits the "
                                         "attention heads and the sequence: heads (1) must divide by it"),
              std::string::npos)
        << e.what();
  }
  try {
    (void)run_ds("    sequence_parallel_size: 3\n");
    ADD_FAILURE() << "sp 3 over 2 ranks ran";
  } catch (const sim::config::ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("strategy.config.sequence_parallel_size: Ulysses over 3 ranks must divide the "
                                         "2 ranks"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace offsim::models
