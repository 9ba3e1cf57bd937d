#include <gtest/gtest.h>

#include "models/transformer/transformer.hpp"

namespace offsim::models {
namespace {

// Llama-2-style models of the offload study (Maurya et al.): SwiGLU, RMSNorm, RoPE, no biases,
// untied embeddings, vocabulary 50,304. P = L(2h^2 + 2h kv d_head + 3h f + 2h) + 2Vh + h.
ModelSpec llama_style(std::int64_t layers, std::int64_t hidden, std::int64_t heads, std::int64_t kv_heads,
                      std::int64_t ffn) {
  ModelSpec m;
  m.name = "llama-style";
  m.layers = layers;
  m.hidden = hidden;
  m.heads = heads;
  m.kv_heads = kv_heads;
  m.ffn = ffn;
  m.vocab = 50304;
  m.seq = 2048;
  m.ffn_kind = FfnKind::kSwiglu;
  m.norm = NormKind::kRmsNorm;
  m.position = PositionKind::kRope;
  m.tied_embeddings = false;
  m.linear_bias = false;
  return m;
}

ModelSpec gpt3_xl() {
  ModelSpec m;
  m.name = "gpt3-1.3b";
  m.layers = 24;
  m.hidden = 2048;
  m.heads = 16;
  m.kv_heads = 16;
  m.ffn = 8192;
  m.vocab = 50304;
  m.seq = 2048;
  m.ffn_kind = FfnKind::kGelu;
  m.norm = NormKind::kLayerNorm;
  m.position = PositionKind::kLearned;
  m.tied_embeddings = true;
  m.linear_bias = true;
  return m;
}

TEST(ParameterCounts, MatchTheLoggedCountOfTheOffloadStudy13B) {
  // DeepSpeed logged "number of parameters 11197895680" for this configuration.
  EXPECT_EQ(count_parameters(llama_style(40, 5120, 40, 4, 13632)).total, 11'197'895'680);
}

TEST(ParameterCounts, MatchTheOffloadStudyTable) {
  // seed-studies.md a.1, actual parameter counts in billions (2 decimals).
  const auto billions = [](const ModelSpec& m) { return static_cast<double>(count_parameters(m).total) / 1e9; };
  EXPECT_NEAR(billions(llama_style(32, 4096, 32, 4, 10880)), 5.90, 0.005);
  EXPECT_NEAR(billions(llama_style(60, 6656, 52, 4, 17728)), 27.64, 0.005);
  EXPECT_NEAR(billions(llama_style(80, 8192, 64, 4, 21824)), 55.14, 0.005);
  EXPECT_NEAR(billions(llama_style(32, 4096, 32, 4, 11008)), 5.95, 0.005);
  EXPECT_NEAR(billions(llama_style(72, 3072, 32, 4, 11008)), 9.14, 0.005);
  EXPECT_NEAR(billions(llama_style(40, 5120, 40, 4, 13824)), 11.32, 0.005);
  EXPECT_NEAR(billions(llama_style(64, 4096, 256, 16, 16384)), 15.58, 0.005);
}

TEST(ParameterCounts, GptWithBiasesAndTiedEmbeddings) {
  // Per layer 12h^2 + 13h (QKV+O 4h^2 + 4h biases, MLP 8h^2 + 5h biases, 2 LayerNorms 4h);
  // plus V h (tied embedding/head) + s h (learned positions) + 2h (final LayerNorm).
  const ModelSpec m = gpt3_xl();
  const std::int64_t h = 2048;
  const auto c = count_parameters(m);
  EXPECT_EQ(c.per_layer, 12 * h * h + 13 * h);
  EXPECT_EQ(c.total, 24 * (12 * h * h + 13 * h) + 50304 * h + 2048 * h + 2 * h);
  EXPECT_EQ(c.total, 1'315'819'520);
  EXPECT_EQ(c.output_head, 0);
}

TEST(LayerWork, MegatronFlopsForAStandardGptLayer) {
  // Megatron-LM (Narayanan et al. 2021): forward FLOPs per layer = 24 b s h^2 + 4 b s^2 h.
  const ModelSpec m = gpt3_xl();
  const double b = 2, s = 2048, h = 2048;
  const LayerWork w = layer_forward(m, 2, false);
  EXPECT_DOUBLE_EQ(w.gemm.count, 24 * b * s * h * h);
  EXPECT_DOUBLE_EQ(w.attention.count, 4 * b * s * s * h);
  EXPECT_DOUBLE_EQ(head_forward_flops(m, 2).count, 2 * b * s * h * 50304);
  EXPECT_DOUBLE_EQ(model_flops_per_sequence(m).count, 3 * (24 * (24 * s * h * h + 4 * s * s * h) + 2 * s * h * 50304));
}

TEST(Activations, KorthikantiFormulaForAStandardGptLayer) {
  // Korthikanti et al.: s b h (34 + 5 a s / h) bytes without recomputation; 34 s b h when the
  // s x s terms are not stored (selective recomputation or flash attention); 2 s b h with full.
  const ModelSpec m = gpt3_xl();
  const double s = 2048, b = 4, h = 2048, a = 16;
  EXPECT_EQ(stored_activation_bytes(m, 4, Recompute::kNone, false).count,
            static_cast<std::int64_t>(s * b * h * (34 + 5 * a * s / h)));
  EXPECT_EQ(stored_activation_bytes(m, 4, Recompute::kSelective, false).count,
            static_cast<std::int64_t>(34 * s * b * h));
  EXPECT_EQ(stored_activation_bytes(m, 4, Recompute::kNone, true).count, static_cast<std::int64_t>(34 * s * b * h));
  EXPECT_EQ(stored_activation_bytes(m, 4, Recompute::kFull, false).count, static_cast<std::int64_t>(2 * s * b * h));
}

TEST(Activations, GroupedQueryAttentionStoresNarrowerKeysAndValues) {
  // With kv width w < h the K and V stashes shrink from 2 x 2sbh to 2 x 2sbw; SwiGLU keeps 6sbf.
  const ModelSpec m = llama_style(40, 5120, 40, 4, 13632);
  const double s = 2048, b = 1, h = 5120, w = 4 * 128, f = 13632;
  const double expected = s * b * (2 * h + 2 * h + 4 * w + 2 * h + h) + s * b * (2 * h + 6 * f + h) + 4 * s * b * h;
  EXPECT_EQ(stored_activation_bytes(m, 1, Recompute::kNone, true).count, static_cast<std::int64_t>(expected));
}

}  // namespace
}  // namespace offsim::models
