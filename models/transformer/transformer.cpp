#include "models/transformer/transformer.hpp"

#include <fmt/format.h>
#include <stdexcept>

namespace offsim::models {

ParameterCounts count_parameters(const ModelSpec& m) {
  const std::int64_t h = m.hidden;
  const std::int64_t kv = m.kv_width();
  const std::int64_t bias = m.linear_bias ? 1 : 0;
  const std::int64_t norm_params = m.norm == NormKind::kLayerNorm ? 2 * h : h;  // weight (+ bias)
  // Attention: Q and O are h x h, K and V are h x kv (grouped-query attention shares K/V heads).
  const std::int64_t attention = 2 * h * h + 2 * h * kv + bias * (h + 2 * kv + h);
  // MLP: GeLU has up (h x f) and down (f x h); SwiGLU has gate and up (h x f each) and down.
  const std::int64_t mlp =
      m.ffn_kind == FfnKind::kGelu ? 2 * h * m.ffn + bias * (m.ffn + h) : 3 * h * m.ffn + bias * (2 * m.ffn + h);
  ParameterCounts c;
  c.per_layer = attention + mlp + 2 * norm_params;
  c.layers = c.per_layer * m.layers;
  c.embedding = m.vocab * h;
  c.position = m.position == PositionKind::kLearned ? m.seq * h : 0;
  c.final_norm = norm_params;
  c.output_head = m.tied_embeddings ? 0 : m.vocab * h;
  c.total = c.layers + c.embedding + c.position + c.final_norm + c.output_head;
  return c;
}

LayerWork layer_forward(const ModelSpec& m, std::int64_t micro_batch, bool flash_attention) {
  const double t = static_cast<double>(micro_batch * m.seq);  // tokens
  const double h = static_cast<double>(m.hidden);
  const double kv = static_cast<double>(m.kv_width());
  const double f = static_cast<double>(m.ffn);
  const double s = static_cast<double>(m.seq);
  const double b = static_cast<double>(micro_batch);
  LayerWork w;
  const double qkv = 2.0 * t * h * (h + 2.0 * kv);
  const double out_proj = 2.0 * t * h * h;
  const double mlp = m.ffn_kind == FfnKind::kGelu ? 2.0 * t * 2.0 * h * f : 2.0 * t * 3.0 * h * f;
  w.gemm = sim::Flops{qkv + out_proj + mlp};
  w.attention = sim::Flops{4.0 * b * s * s * h};
  w.activations = stored_activation_bytes(m, micro_batch, Recompute::kNone, flash_attention);
  return w;
}

std::vector<GemmShape> layer_gemms(const ModelSpec& m, std::int64_t micro_batch, std::int64_t tp) {
  if (tp < 1 || m.heads % tp != 0 || m.kv_heads % tp != 0 || m.ffn % tp != 0) {
    throw std::invalid_argument(fmt::format("model {}: heads ({}), kv_heads ({}) and ffn ({}) must divide by tp ({})",
                                            m.name, m.heads, m.kv_heads, m.ffn, tp));
  }
  const std::int64_t tokens = micro_batch * m.seq;
  const std::int64_t h = m.hidden;
  const std::int64_t up = m.ffn_kind == FfnKind::kSwiglu ? 2 * m.ffn : m.ffn;  // gate and up fused
  return {
      {"qkv", tokens, (h + 2 * m.kv_width()) / tp, h, 1},
      {"attention_scores", m.seq, m.seq, m.head_dim(), micro_batch * m.heads / tp, true},  // Q K^T per head
      {"attention_values", m.seq, m.head_dim(), m.seq, micro_batch * m.heads / tp, true},  // softmax . V
      {"attention_out", tokens, h, h / tp, 1},
      {"mlp_up", tokens, up / tp, h, 1},
      {"mlp_down", tokens, h, m.ffn / tp, 1},
  };
}

std::vector<ElementwiseKernel> layer_elementwise_kernels(const ModelSpec& m, std::int64_t micro_batch, std::int64_t tp,
                                                         bool flash_attention, bool sequence_parallel) {
  const double t = static_cast<double>(micro_batch * m.seq);  // tokens
  // Hidden-state elements a rank's norms, dropouts and residual adds touch: all of them, or its
  // 1/tp of the sequence under sequence parallelism.
  const double e = t * static_cast<double>(m.hidden) / (sequence_parallel ? static_cast<double>(tp) : 1.0);
  const double f = t * static_cast<double>(m.ffn / tp);  // MLP elements on this rank
  const double scores =
      static_cast<double>(micro_batch * (m.heads / tp)) * static_cast<double>(m.seq) * static_cast<double>(m.seq);
  std::vector<ElementwiseKernel> k;
  // Norms: read x, write y; backward reads x and dy, writes dx (2 B each).
  k.push_back({"layernorm", 4.0 * e, 6.0 * e});
  k.push_back({"layernorm", 4.0 * e, 6.0 * e});
  if (m.position == PositionKind::kRope) {
    // Rotary embedding of Q and K: read and write each, both directions.
    const double qk = t * static_cast<double>((m.hidden + m.kv_width()) / tp);
    k.push_back({"activation", 4.0 * qk, 4.0 * qk});
  }
  if (!flash_attention) {
    // Scores / sqrt(d) (read, write), then mask fill and softmax (read, write each) and, with
    // dropout, the dropout of the probabilities (read, write, 1 B mask); backward alike.
    k.push_back({"attention_scale", 4.0 * scores, 4.0 * scores, true});
    const double softmax = m.dropout ? 13.0 : 8.0;
    k.push_back({"attention_softmax", softmax * scores, softmax * scores, true});
  }
  if (m.dropout) {
    // After the attention projection and after the MLP: read x, write y and a 1 B mask; backward
    // reads dy and the mask, writes dx.
    k.push_back({"dropout", 5.0 * e, 5.0 * e});
    k.push_back({"dropout", 5.0 * e, 5.0 * e});
  }
  // Residual adds: read two, write one. Backward hands dy to both inputs (no kernel); where the
  // residual and the branch gradients meet they are summed: one add of the same size.
  k.push_back({"residual_add", 6.0 * e, 6.0 * e});
  k.push_back({"residual_add", 6.0 * e, 6.0 * e});
  if (m.ffn_kind == FfnKind::kGelu) {
    k.push_back({"activation", 4.0 * f, 6.0 * f});  // y = gelu(x); dx = dy * gelu'(x)
  } else {
    k.push_back({"activation", 6.0 * f, 10.0 * f});  // y = silu(g) * u; dg, du from dy, g, u
  }
  if (m.linear_bias) {
    // Bias gradients: a column sum of each biased GEMM's output gradient (read once).
    const double outputs = t * static_cast<double>((m.hidden + 2 * m.kv_width()) / tp) + e +
                           (m.ffn_kind == FfnKind::kSwiglu ? 2.0 : 1.0) * f + e;
    k.push_back({"bias_grad", 0.0, 2.0 * outputs});
  }
  return k;
}

GemmShape head_gemm(const ModelSpec& m, std::int64_t micro_batch, std::int64_t tp) {
  return {"logits", micro_batch * m.seq, (m.vocab + tp - 1) / tp, m.hidden, 1};
}

sim::Flops head_forward_flops(const ModelSpec& m, std::int64_t micro_batch) {
  return sim::Flops{2.0 * static_cast<double>(micro_batch * m.seq) * static_cast<double>(m.hidden) *
                    static_cast<double>(m.vocab)};
}

sim::Bytes stored_activation_bytes(const ModelSpec& m, std::int64_t micro_batch, Recompute policy,
                                   bool flash_attention) {
  // Korthikanti et al. count, per layer, for 16-bit values and 1-byte dropout masks:
  //   attention block 11sbh + 5as^2b,  MLP 19sbh,  two norms 4sbh   ->  sbh(34 + 5as/h).
  // Term by term (s = seq, b = micro-batch, h = hidden, a = heads, kv = K/V width, f = ffn):
  //   attention: input 2sbh, Q 2sbh, K 2sb*kv, V 2sb*kv, output-projection input 2sbh,
  //              dropout mask sbh; scores 2as^2b, softmax 2as^2b, its dropout mask as^2b
  //              (with kv = h this is 11sbh + 5as^2b);
  //   MLP (GeLU): input 2sbh, GeLU input 2sbf, down-projection input 2sbf, dropout mask sbh
  //              (with f = 4h this is 19sbh); SwiGLU keeps gate and up outputs and their product:
  //              input 2sbh, 3 x 2sbf, dropout mask sbh;
  //   norms: 2 x 2sbh.
  // Flash attention recomputes the s x s terms in backward, so they are not stored; selective
  // recomputation (Korthikanti) drops them too. Full recomputation keeps only the layer input.
  const double s = static_cast<double>(m.seq);
  const double b = static_cast<double>(micro_batch);
  const double h = static_cast<double>(m.hidden);
  const double a = static_cast<double>(m.heads);
  const double kv = static_cast<double>(m.kv_width());
  const double f = static_cast<double>(m.ffn);
  if (policy == Recompute::kFull) return sim::Bytes{static_cast<std::int64_t>(2.0 * s * b * h)};
  const double attention_linear = s * b * (2.0 * h + 2.0 * h + 4.0 * kv + 2.0 * h + h);
  const double attention_quadratic = 5.0 * a * s * s * b;
  const double mlp = m.ffn_kind == FfnKind::kGelu ? s * b * (2.0 * h + 4.0 * f + h) : s * b * (2.0 * h + 6.0 * f + h);
  const double norms = 4.0 * s * b * h;
  double total = attention_linear + mlp + norms;
  if (!flash_attention && policy == Recompute::kNone) total += attention_quadratic;
  return sim::Bytes{static_cast<std::int64_t>(total)};
}

sim::Flops model_flops_per_sequence(const ModelSpec& m) {
  const LayerWork w = layer_forward(m, 1, false);
  const double forward =
      static_cast<double>(m.layers) * (w.gemm.count + w.attention.count) + head_forward_flops(m, 1).count;
  return sim::Flops{3.0 * forward};
}

sim::Flops hardware_flops_per_sequence(const ModelSpec& m, Recompute policy) {
  const LayerWork w = layer_forward(m, 1, false);
  const double layers = static_cast<double>(m.layers);
  double recomputed = 0.0;
  if (policy == Recompute::kFull) recomputed = layers * (w.gemm.count + w.attention.count);
  if (policy == Recompute::kSelective) recomputed = layers * w.attention.count;
  return model_flops_per_sequence(m) + sim::Flops{recomputed};
}

}  // namespace offsim::models
