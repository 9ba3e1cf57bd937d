#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <string_view>

#include <fmt/format.h>

#include "models/transformer/model_parser.hpp"
#include "models/transformer/transformer.hpp"
#include "sim/config/config_reader.hpp"

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

TEST(ElementwiseKernels, GptLayerBytesByKernelWithAndWithoutSequenceParallelism) {
  // GPT-3 XL with dropout, micro-batch 1, tp 2, eager attention. Tokens t = 2048, hidden elements
  // e = t h = 4,194,304; MLP elements f = t ffn / tp = 8,388,608; scores S = (a / tp) s^2 =
  // 8 x 2048^2 = 33,554,432.
  ModelSpec m = gpt3_xl();
  m.dropout = true;
  const double e = 2048.0 * 2048.0, f = 2048.0 * 8192.0 / 2.0, S = 8.0 * 2048.0 * 2048.0;
  const auto sum = [](const std::vector<ElementwiseKernel>& k, const char* name, bool backward) {
    double bytes = 0.0;
    for (const auto& x : k)
      if (std::string_view(x.kernel) == name) bytes += backward ? x.backward_bytes : x.forward_bytes;
    return bytes;
  };
  const auto plain = layer_elementwise_kernels(m, 1, 2, AttentionKernels::kUnfused);
  EXPECT_DOUBLE_EQ(sum(plain, "layernorm", false), 2 * 4 * e);  // two norms: read x, write y
  EXPECT_DOUBLE_EQ(sum(plain, "layernorm", true), 2 * 6 * e);   // read x and dy, write dx
  EXPECT_DOUBLE_EQ(sum(plain, "dropout", false), 2 * 5 * e);    // read, write, 1 B mask
  EXPECT_DOUBLE_EQ(sum(plain, "residual_add", true), 2 * 6 * e);
  EXPECT_DOUBLE_EQ(sum(plain, "activation", false), 4 * f);          // GeLU
  EXPECT_DOUBLE_EQ(sum(plain, "attention_scale", false), 4 * S);     // scores / sqrt(d)
  EXPECT_DOUBLE_EQ(sum(plain, "attention_softmax", false), 13 * S);  // mask, softmax, dropout
  // Bias gradients: 2 B x (qkv 3h/tp + proj h + fc1 ffn/tp + fc2 h) per token, backward only.
  EXPECT_DOUBLE_EQ(sum(plain, "bias_grad", true), 2.0 * 2048.0 * (3.0 * 2048.0 / 2.0 + 2048.0 + 4096.0 + 2048.0));
  // Sequence parallelism splits the norms, dropouts and residual adds by tp, nothing else.
  const auto sp = layer_elementwise_kernels(m, 1, 2, AttentionKernels::kUnfused, true);
  EXPECT_DOUBLE_EQ(sum(sp, "layernorm", false), sum(plain, "layernorm", false) / 2);
  EXPECT_DOUBLE_EQ(sum(sp, "dropout", true), sum(plain, "dropout", true) / 2);
  EXPECT_DOUBLE_EQ(sum(sp, "attention_softmax", false), sum(plain, "attention_softmax", false));
  // Megatron's fused softmax: row i loads its i + 1 unmasked scores, (s + 1) / 2s of the s x s on
  // average, and writes all of them: 2 B x 2049/4096 + 2 B per score forward; backward loads the
  // gradient and the probabilities of the same entries, 4 B x 2049/4096 + 2 B. No separate
  // scale kernel (baddbmm's alpha); the probabilities' dropout is its own kernel.
  const auto fused = layer_elementwise_kernels(m, 1, 2, AttentionKernels::kFusedSoftmax);
  const double loaded = 2049.0 / 4096.0;
  EXPECT_DOUBLE_EQ(sum(fused, "attention_scale", false), 0.0);
  EXPECT_DOUBLE_EQ(sum(fused, "attention_softmax", false), (2 * loaded + 2) * S);
  EXPECT_DOUBLE_EQ(sum(fused, "attention_softmax", true), (4 * loaded + 2) * S);
  EXPECT_DOUBLE_EQ(sum(fused, "dropout", false), 2 * 5 * e + 5 * S);
  EXPECT_DOUBLE_EQ(sum(fused, "layernorm", false), sum(plain, "layernorm", false));
  // Flash attention fuses the score kernels away.
  EXPECT_DOUBLE_EQ(sum(layer_elementwise_kernels(m, 1, 2, AttentionKernels::kFlash), "attention_softmax", false), 0.0);
}

TEST(ElementwiseKernels, GatedActivationIsSiluThenProductAsEagerPyTorchRunsIt) {
  // y = silu(g) * u over f = tokens x ffn / tp elements. Forward: silu reads g and writes s
  // (2 + 2 B), the product reads s and u and writes y (2 + 2 + 2 B): 10 B. Backward: du = dy * s and
  // ds = dy * u (6 B each), dg = silu'(g) * ds reads ds and g and writes dg (6 B): 18 B.
  const ModelSpec m = llama_style(32, 4096, 32, 4, 11008);
  const double f = 2048.0 * 11008.0 / 2.0;
  double fwd = 0.0, bwd = 0.0;
  for (const auto& k : layer_elementwise_kernels(m, 1, 2, AttentionKernels::kFlash)) {
    if (std::string_view(k.kernel) != "activation") continue;
    fwd += k.forward_bytes;
    bwd += k.backward_bytes;
  }
  // Eager rotary embedding shares the activation class: 20 B per element of this rank's Q and K
  // each way (x * cos + cat(-x2, x1) * sin: five kernels).
  const double rotary = 20.0 * 2048.0 * (4096.0 / 2.0 + 4.0 * 128.0 / 2.0);
  EXPECT_DOUBLE_EQ(fwd, 10.0 * f + rotary);
  EXPECT_DOUBLE_EQ(bwd, 18.0 * f + rotary);
}

TEST(ElementwiseKernels, PartialRotaryRotatesItsShareAndJoinsTheSlices) {
  // GPT-NeoX rotates 25% of each head: 20 B per rotated element, plus 4 B over the whole width to
  // join the rotated and passed-through slices (and split them back in backward).
  ModelSpec m = gpt3_xl();
  m.position = PositionKind::kRope;
  const auto rotary_bytes = [&](double fraction) {
    m.rotary_fraction = fraction;
    double bytes = 0.0;
    for (const auto& k : layer_elementwise_kernels(m, 1, 1, AttentionKernels::kFlash)) {
      if (std::string_view(k.kernel) == "activation") bytes += k.forward_bytes;
    }
    return bytes - 4.0 * 2048.0 * 8192.0;  // less the GeLU (read x, write y over 2048 x ffn 8192)
  };
  const double qk = 2048.0 * (2048.0 + 2048.0);  // Q and K of 2048 tokens, hidden 2048
  EXPECT_DOUBLE_EQ(rotary_bytes(1.0), 20.0 * qk);
  EXPECT_DOUBLE_EQ(rotary_bytes(0.25), (20.0 * 0.25 + 4.0) * qk);
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

namespace offsim::models {
namespace {

ModelSpec load_model(const std::string& name) {
  sim::config::Context ctx;
  auto m = parse_model(ctx.load_root(std::string(OFFSIM_SOURCE_DIR) + "/configs/models/" + name + ".yaml"));
  ctx.finish();
  return *m;
}

TEST(ShippedModels, ParameterCountsArePinned) {
  // Published totals where they exist (NeoX paper Table 1; released Llama 2 checkpoints; the
  // offload study's logged 11,197,895,680). GPT-3 175B and the 1T model by hand, GPT style:
  //   175B: 96 (12 h^2 + 13 h) + 50257 h + 2048 h + 2h, h = 12288
  //         = 173,961,510,912 + 617,558,016 + 25,165,824 + 24,576 = 174,604,259,328 ("175.0B")
  //   1T:   128 (12 h^2 + 13 h) + 50688 h + 2048 h + 2h, h = 25600
  //         = 1,006,675,558,400 + 1,297,612,800 + 52,428,800 + 51,200 = 1,008,025,651,200
  const std::vector<std::pair<std::string, std::int64_t>> pinned{
      {"gpt-neox-20b", 20'554'567'680}, {"llama2-7b", 6'738'415'616},          {"llama2-13b", 13'015'864'320},
      {"llama2-70b", 68'976'648'192},   {"llama-offload-13b", 11'197'895'680}, {"gpt3-1.3b", 1'315'819'520},
      {"gpt3-175b", 174'604'259'328},   {"gpt-1t", 1'008'025'651'200},
  };
  for (const auto& [name, count] : pinned) EXPECT_EQ(count_parameters(load_model(name)).total, count) << name;
  // The offload study's table (billions, 2 decimals).
  const std::vector<std::pair<std::string, double>> billions{
      {"llama-offload-7b", 5.90},        {"llama-offload-30b", 27.64},     {"llama-offload-70b", 55.14},
      {"llama-offload-bound-7b", 5.95},  {"llama-offload-bound-8b", 9.14}, {"llama-offload-bound-13b", 11.32},
      {"llama-offload-bound-20b", 15.58}};
  for (const auto& [name, b] : billions)
    EXPECT_NEAR(static_cast<double>(count_parameters(load_model(name)).total) / 1e9, b, 0.005) << name;
}

TEST(GemmShapes, AddUpToTheLayerFlopsAndSplitEvenlyUnderTensorParallelism) {
  for (const char* name : {"gpt3-1.3b", "llama2-70b", "llama-offload-bound-20b"}) {
    SCOPED_TRACE(name);
    const ModelSpec m = load_model(name);
    const LayerWork w = layer_forward(m, 2, false);
    double tp1 = 0.0;
    double tp4 = 0.0;
    for (const auto& g : layer_gemms(m, 2, 1)) tp1 += g.flops();
    for (const auto& g : layer_gemms(m, 2, 4)) tp4 += g.flops();
    EXPECT_DOUBLE_EQ(tp1, w.gemm.count + w.attention.count);
    EXPECT_DOUBLE_EQ(4.0 * tp4, tp1);
    EXPECT_DOUBLE_EQ(head_gemm(m, 2, 1).flops(), head_forward_flops(m, 2).count);
  }
  EXPECT_THROW((void)layer_gemms(load_model("llama2-70b"), 1, 16), std::invalid_argument);  // 8 KV heads
}

TEST(Flops, FullRecomputationMatchesMegatronsFormula) {
  // Narayanan et al. (SC21), FLOPs per sequence with full recomputation:
  //   96 s l h^2 (1 + s / (6h) + V / (16 l h))
  const ModelSpec m = load_model("gpt3-175b");
  const double s = 2048, l = 96, h = 12288, V = 50257;
  const double megatron = 96 * s * l * h * h * (1 + s / (6 * h) + V / (16 * l * h));
  EXPECT_NEAR(hardware_flops_per_sequence(m, Recompute::kFull).count / megatron, 1.0, 1e-12);
  EXPECT_EQ(hardware_flops_per_sequence(m, Recompute::kNone), model_flops_per_sequence(m));
}

TEST(GemmShapes, MegatronQkvAndMlpShapesOfLlama2_70bAtTp8) {
  // h = 8192, 64 heads of 128, 8 KV heads, f = 28672 (SwiGLU: gate and up fused), tp = 8:
  // QKV: N = (8192 + 2 x 8 x 128) / 8 = 1280; MLP up: N = 2 x 28672 / 8 = 7168; down: K = 3584.
  const auto g = layer_gemms(load_model("llama2-70b"), 1, 8);
  EXPECT_EQ(g[0].n, 1280);
  EXPECT_EQ(g[4].n, 7168);
  EXPECT_EQ(g[5].k, 3584);
  EXPECT_EQ(g[1].batch, 8);  // 64 heads / 8 ranks
}

// Mixtral 8x7B (mistralai/Mixtral-8x7B-v0.1 config.json): h 4096, 32 layers, 32 heads, 8 KV heads,
// experts of width 14,336, 8 experts, 2 per token, vocabulary 32,000, untied.
ModelSpec mixtral_8x7b() {
  ModelSpec m = llama_style(32, 4096, 32, 8, 14336);
  m.name = "mixtral-8x7b";
  m.vocab = 32000;
  m.seq = 4096;
  m.experts = 8;
  m.experts_per_token = 2;
  return m;
}

TEST(MixtureOfExperts, MixtralParameterCountsTotalAndActive) {
  // Per layer: attention 2h^2 + 2h kv = 41,943,040; experts 8 x 3hf = 1,409,286,144; router
  // 8h = 32,768; norms 2h = 8,192 -> 1,451,270,144. Total: 32 layers + 2Vh + h
  // = 46,440,644,608 + 262,144,000 + 4,096 = 46,702,792,704 (Mistral AI's "46.7B").
  // Active: less 6 unrouted experts x 3hf per layer = 12,879,925,248 ("12.9B").
  const ParameterCounts c = count_parameters(mixtral_8x7b());
  EXPECT_EQ(c.per_layer, 1'451'270'144);
  EXPECT_EQ(c.total, 46'702'792'704);
  EXPECT_EQ(c.active, 12'879'925'248);
  EXPECT_EQ(count_parameters(gpt3_xl()).active, count_parameters(gpt3_xl()).total);
}

TEST(MixtureOfExperts, ExpertGemmsCarryTheRoutedTokensAndAddUpToTheLayerFlops) {
  // Micro-batch 1 of 4,096 tokens, 2 of 8 experts each: 1,024 tokens per expert under even routing;
  // the router is tokens x experts x h. Model FLOPs count 2 experts per token, exactly.
  const ModelSpec m = mixtral_8x7b();
  const auto gemms = layer_gemms(m, 1, 2);
  ASSERT_EQ(gemms.size(), 7u);
  EXPECT_EQ(gemms[4].name, "moe_router");
  EXPECT_EQ(gemms[4].n, 8);
  EXPECT_EQ(gemms[5].m, 1024);
  EXPECT_EQ(gemms[5].batch, 8);
  EXPECT_EQ(gemms[5].n, 2 * 14336 / 2);  // gate and up, split by tp 2
  EXPECT_EQ(gemms[6].k, 14336 / 2);
  double tp1 = 0.0;
  for (const auto& g : layer_gemms(m, 1, 1)) tp1 += g.flops();
  const LayerWork w = layer_forward(m, 1, false);
  EXPECT_DOUBLE_EQ(tp1, w.gemm.count + w.attention.count);
  // Routed weights: one matrix per expert, so the layer's projections and norms add up.
  std::int64_t weights = 0;
  for (const auto& g : layer_gemms(m, 1, 1)) weights += g.parameters();
  EXPECT_EQ(weights + 2 * m.hidden, count_parameters(m).per_layer);
  // Uneven token counts round up per expert: 3 tokens x 2 / 8 experts -> 1 each.
  ModelSpec short_seq = m;
  short_seq.seq = 3;
  EXPECT_EQ(tokens_per_expert(short_seq, 3), 1);
}

TEST(MixtureOfExperts, StoredActivationsKeepEachRoutedCopy) {
  // Per token, MLP part: input 2h + mask h + router logits 4E + per routed expert (gathered input
  // 2h, output 2h, SwiGLU 6f): 3h + 32 + 2 (4h + 6f). Attention 2h + 2h + 4kv + 2h + h, norms 4h.
  const ModelSpec m = mixtral_8x7b();
  const double h = 4096, kv = 1024, f = 14336, sb = 4096;
  const double expected = sb * ((2 * h + 2 * h + 4 * kv + 2 * h + h) + (3 * h + 32 + 2 * (4 * h + 6 * f)) + 4 * h);
  EXPECT_EQ(stored_activation_bytes(m, 1, Recompute::kSelective, false).count, static_cast<std::int64_t>(expected));
}

TEST(WideHeads, GemmaStyleHeadsWiderThanHiddenOverHeads) {
  // Gemma-7B: h 3072, 16 heads of 256 (q width 4096), MHA, GeGLU f 24,576, vocabulary 256,000,
  // tied. Per layer: Q and O 2 x 3072 x 4096, K and V 2 x 3072 x 4096, MLP 3 x 3072 x 24576, two
  // RMSNorms -> 276,830,208; total 28 layers + Vh + h = 8,537,680,896 (Google's "8.54B").
  ModelSpec m = llama_style(28, 3072, 16, 16, 24576);
  m.head_size = 256;
  m.vocab = 256000;
  m.tied_embeddings = true;
  EXPECT_EQ(m.q_width(), 4096);
  EXPECT_EQ(count_parameters(m).per_layer, 276'830'208);
  EXPECT_EQ(count_parameters(m).total, 8'537'680'896);
  const auto g = layer_gemms(m, 1, 1);
  EXPECT_EQ(g[0].n, 3 * 4096);  // QKV
  EXPECT_EQ(g[3].k, 4096);      // attention output
}

}  // namespace
}  // namespace offsim::models

namespace offsim::models {
namespace {

// A Hugging Face config.json written to a temporary file and read as a model.
ModelSpec read_hf_text(const std::string& name, const std::string& json) {
  const std::string path = ::testing::TempDir() + name;
  {
    std::ofstream f(path);
    f << json;
  }
  sim::config::Context ctx;
  auto m = parse_model(ctx.load_root(path));
  EXPECT_FALSE(ctx.has_errors());
  EXPECT_TRUE(m.has_value());
  return m.value_or(ModelSpec{});
}

// The shape keys of google/gemma-2-2b's and google/gemma-2-9b's config.json (transformers 4.42
// Gemma2Config as published on the Hub; defaults for the soft-caps and sliding window). Published
// counts: 2,614,341,888 and 9,241,705,984 (4 RMSNorms per layer: the pre and post norms).
std::string gemma2(int layers, int hidden, int heads, int kv_heads, int ffn) {
  return fmt::format(R"({{"architectures": ["Gemma2ForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
  "attn_logit_softcapping": 50.0, "final_logit_softcapping": 30.0, "head_dim": 256,
  "hidden_act": "gelu_pytorch_tanh", "hidden_activation": "gelu_pytorch_tanh", "hidden_size": {},
  "intermediate_size": {}, "max_position_embeddings": 8192, "model_type": "gemma2", "num_attention_heads": {},
  "num_hidden_layers": {}, "num_key_value_heads": {}, "query_pre_attn_scalar": 256, "sliding_window": 4096,
  "vocab_size": 256000}})",
                     hidden, ffn, heads, layers, kv_heads);
}

TEST(HuggingFaceFamilies, Gemma2CountsItsPreAndPostNormsAndCostsItsSoftCapsAndWindows) {
  const ModelSpec g2 = read_hf_text("gemma-2-2b.json", gemma2(26, 2304, 8, 4, 9216));
  EXPECT_EQ(count_parameters(g2).total, 2'614'341'888);
  const ModelSpec g9 = read_hf_text("gemma-2-9b.json", gemma2(42, 3584, 16, 8, 14336));
  EXPECT_EQ(count_parameters(g9).total, 9'241'705'984);
  EXPECT_EQ(g9.norms_per_layer(), 4);
  EXPECT_TRUE(g9.logit_softcap);
  EXPECT_TRUE(g9.attention_softcap);
  // 21 of 42 layers see 4,096 keys of 8,192: attention FLOPs 3/4 of global attention's.
  EXPECT_EQ(g9.attention_span(), (8192 * 21 + 4096 * 21) / 42);
  ModelSpec global = g9;
  global.sliding_window = 0;
  EXPECT_DOUBLE_EQ(layer_forward(g9, 1, true).attention.count, 0.75 * layer_forward(global, 1, true).attention.count);
}

// Qwen3-30B-A3B's shape (its config.json: 48 layers, hidden 2048, 32 heads of 128, 4 KV heads, 128
// experts of 768, 8 per token, vocabulary 151,936, untied). Published (model card): 30.5 B
// parameters, 3.3 B activated, 29.9 B without the embeddings.
TEST(HuggingFaceFamilies, Qwen3MoeCountsItsQueryAndKeyNormsAndExperts) {
  const ModelSpec q = read_hf_text("qwen3-30b-a3b.json", R"({"architectures": ["Qwen3MoeForCausalLM"],
  "attention_bias": false, "decoder_sparse_step": 1, "head_dim": 128, "hidden_act": "silu", "hidden_size": 2048,
  "intermediate_size": 6144, "max_position_embeddings": 40960, "max_window_layers": 48, "mlp_only_layers": [],
  "model_type": "qwen3_moe", "moe_intermediate_size": 768, "num_attention_heads": 32, "num_experts": 128,
  "num_experts_per_tok": 8, "num_hidden_layers": 48, "num_key_value_heads": 4, "sliding_window": null,
  "tie_word_embeddings": false, "use_sliding_window": false, "vocab_size": 151936})");
  const ParameterCounts c = count_parameters(q);
  // Per layer: Q and O 2 x 2048 x 4096, K and V 2 x 2048 x 512, q/k norms 2 x 128, 128 experts of
  // 3 x 2048 x 768, the router 2048 x 128, two norms 2 x 2048: 623,120,640.
  EXPECT_EQ(c.per_layer, 623'120'640);
  EXPECT_EQ(c.total, 30'532'122'624);
  EXPECT_NEAR(static_cast<double>(c.total) / 1e9, 30.5, 0.05);
  EXPECT_EQ(c.active, 3'353'032'704);  // 3.35 B: the card's "3.3B activated", rounded down
  EXPECT_NEAR(static_cast<double>(c.active) / 1e9, 3.3, 0.06);
  EXPECT_NEAR(static_cast<double>(c.total - c.embedding - c.output_head) / 1e9, 29.9, 0.05);
  EXPECT_TRUE(q.qk_norm);
}

}  // namespace
}  // namespace offsim::models

namespace offsim::models {
namespace {

TEST(MixtureOfExperts, RoutingImbalanceGivesTheBusiestExpertItsOwnGemmAndTheAllToAllItsExcess) {
  // 8 experts, 2 per token, 1,024 tokens: the mean expert runs 1,024 x 2 / 8 = 256 tokens; with
  // routing_imbalance 1.5 the busiest runs 384, as a GEMM of its own; the other 7 the mean.
  ModelSpec m = llama_style(2, 64, 4, 4, 128);
  m.seq = 1024;
  m.experts = 8;
  m.experts_per_token = 2;
  m.routing_imbalance = 1.5;
  const auto gemms = layer_gemms(m, 1, 1);
  std::map<std::string, GemmShape> by_name;
  for (const auto& g : gemms) by_name[g.name] = g;
  EXPECT_EQ(by_name.at("expert_up").m, 256);
  EXPECT_EQ(by_name.at("expert_up").batch, 7);
  EXPECT_EQ(by_name.at("expert_up_busiest").m, 384);
  EXPECT_EQ(by_name.at("expert_down_busiest").batch, 1);
  // The all-to-all over ep = 4 (2 experts per rank): the busiest rank receives its even share
  // 1,024 x 2 x 64 plus its busiest expert's excess, (1.5 - 1) / 2 of it: 1.25 x 131,072.
  EXPECT_EQ(busiest_rank_dispatch_elements(m, 1024, 4), 163'840);
  // Even routing: one batched GEMM of all experts, the dispatch unchanged.
  m.routing_imbalance = 1.0;
  EXPECT_EQ(layer_gemms(m, 1, 1)[5].batch, 8);
  EXPECT_EQ(busiest_rank_dispatch_elements(m, 1024, 4), 131'072);
}

TEST(MultiHeadLatentAttention, ProjectionsThroughTheLatentsAndValueWidthAttention) {
  // DeepSeek-V3's attention at tp 2: q_a (whole) 7,168 -> 1,536, q_b 1,536 -> 128 x 192 / 2,
  // kv_a (whole) 7,168 -> 512 + 64, kv_b 512 -> 128 x (128 + 128) / 2, o 128 x 128 / 2 -> 7,168;
  // Q K^T over 192, P V over 128.
  ModelSpec m = llama_style(4, 7168, 128, 128, 2048);
  m.seq = 4096;
  m.q_lora_rank = 1536;
  m.kv_lora_rank = 512;
  m.qk_nope_dim = 128;
  m.qk_rope_dim = 64;
  m.v_head_dim = 128;
  const auto g = layer_gemms(m, 1, 2);
  ASSERT_GE(g.size(), 7U);
  EXPECT_EQ((std::vector<std::int64_t>{g[0].n, g[0].k}), (std::vector<std::int64_t>{1536, 7168}));
  EXPECT_EQ((std::vector<std::int64_t>{g[1].n, g[1].k}), (std::vector<std::int64_t>{128 * 192 / 2, 1536}));
  EXPECT_EQ((std::vector<std::int64_t>{g[2].n, g[2].k}), (std::vector<std::int64_t>{576, 7168}));
  EXPECT_EQ((std::vector<std::int64_t>{g[3].n, g[3].k}), (std::vector<std::int64_t>{128 * 256 / 2, 512}));
  EXPECT_EQ(g[4].k, 192);  // scores
  EXPECT_EQ(g[5].n, 128);  // values
  EXPECT_EQ((std::vector<std::int64_t>{g[6].n, g[6].k}), (std::vector<std::int64_t>{7168, 128 * 128 / 2}));
  // Attention FLOPs: 2 s^2 (128 x 192) + 2 s^2 (128 x 128) per sequence.
  EXPECT_DOUBLE_EQ(layer_forward(m, 1, true).attention.count, 2.0 * 4096.0 * 4096.0 * 128.0 * (192.0 + 128.0));
}

}  // namespace
}  // namespace offsim::models

namespace offsim::models {
namespace {

TEST(HuggingFaceFamilies, AnFp8CheckpointSaysTrainingPrecisionDecides) {
  // DeepSeek-V3's published config.json stores its weights in FP8 (quantization_config, quant_method
  // fp8): a warning at the key says the experiment's training.precision decides how it trains.
  const std::string path = ::testing::TempDir() + "fp8-checkpoint.json";
  std::ofstream(path) << R"({"model_type": "llama", "hidden_size": 64, "num_attention_heads": 4,
  "num_hidden_layers": 2, "intermediate_size": 128, "vocab_size": 100, "max_position_embeddings": 64,
  "quantization_config": {"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8"}})";
  sim::config::Context ctx;
  ASSERT_TRUE(parse_model(ctx.load_root(path)));
  ASSERT_EQ(ctx.warnings().size(), 1U);
  EXPECT_NE(ctx.warnings()[0].str().find("quantization_config.quant_method: the checkpoint's weights are stored "
                                         "quantized (fp8); offsim trains the model in training.precision"),
            std::string::npos)
      << ctx.warnings()[0].str();
}

}  // namespace
}  // namespace offsim::models
