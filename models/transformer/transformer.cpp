#include "models/transformer/transformer.hpp"

#include "models/transformer/framework.hpp"

#include <fmt/format.h>
#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace offsim::models {

namespace {
// Weights of one MLP of width w: GeLU has up (h x w) and down (w x h); SwiGLU (and GeGLU) has gate
// and up (h x w each) and down.
std::int64_t mlp_parameters(const ModelSpec& m, std::int64_t w) {
  if (w == 0) return 0;
  const std::int64_t h = m.hidden;
  const std::int64_t bias = m.linear_bias ? 1 : 0;
  return m.ffn_kind == FfnKind::kGelu ? 2 * h * w + bias * (w + h) : 3 * h * w + bias * (2 * w + h);
}

// Forward FLOPs of one MLP of width w on t tokens.
double mlp_flops(const ModelSpec& m, double t, std::int64_t w) {
  const double matrices = m.ffn_kind == FfnKind::kGelu ? 2.0 : 3.0;
  return 2.0 * t * matrices * static_cast<double>(m.hidden) * static_cast<double>(w);
}

// Bytes one token keeps for the backward of an MLP of width w (Korthikanti's MLP terms less its
// input and dropout mask): GeLU keeps its input and the down projection's input (2 x 2w);
// SwiGLU keeps the gate and up outputs and their product (3 x 2w).
double mlp_stored_bytes_per_token(const ModelSpec& m, std::int64_t w) {
  return (m.ffn_kind == FfnKind::kGelu ? 4.0 : 6.0) * static_cast<double>(w);
}
}  // namespace

std::int64_t tokens_per_expert(const ModelSpec& m, std::int64_t tokens) {
  if (!m.moe()) return tokens;
  return (tokens * m.experts_per_token + m.experts - 1) / m.experts;
}

std::int64_t busiest_expert_tokens(const ModelSpec& m, std::int64_t tokens) {
  const std::int64_t mean = tokens_per_expert(m, tokens);
  if (!m.moe() || m.routing_imbalance <= 1.0) return mean;
  return static_cast<std::int64_t>(std::ceil(static_cast<double>(mean) * m.routing_imbalance));
}

std::int64_t busiest_rank_dispatch_elements(const ModelSpec& m, std::int64_t tokens, std::int64_t ep) {
  // The rank's experts receive its mean share, and the busiest expert (on the busiest rank) its
  // excess over the mean: tokens x k x h x (1 + (imbalance - 1) / (experts / ep)).
  const double local = static_cast<double>(std::max<std::int64_t>(m.experts / std::max<std::int64_t>(ep, 1), 1));
  const double excess = m.routing_imbalance > 1.0 ? (m.routing_imbalance - 1.0) / local : 0.0;
  return static_cast<std::int64_t>(
      std::ceil(static_cast<double>(tokens * m.experts_per_token * m.hidden) * (1.0 + excess)));
}

ParameterCounts count_parameters(const ModelSpec& m) {
  const std::int64_t h = m.hidden;
  const std::int64_t q = m.q_width();
  const std::int64_t kv = m.kv_width();
  const std::int64_t norm_params = m.norm == NormKind::kLayerNorm ? 2 * h : h;  // weight (+ bias)
  // Attention: Q is h x q, O is q x h (q = h unless the heads are wider), K and V are h x kv
  // (grouped-query attention shares K/V heads). Biases on all four, or on Q, K, V only (Qwen2).
  const std::int64_t qkv_bias = m.linear_bias || m.qkv_bias ? q + 2 * kv : 0;
  std::int64_t attention = 2 * h * q + 2 * h * kv + qkv_bias + (m.linear_bias ? h : 0);
  if (m.mla()) {
    // DeepseekV3Attention: q_a_proj (h x q_lora_rank), q_a_layernorm, q_b_proj (q_lora_rank x
    // heads x (nope + rope)), or one q_proj; kv_a_proj_with_mqa (h x (kv_lora_rank + rope)),
    // kv_a_layernorm, kv_b_proj (kv_lora_rank x heads x (nope + v)); o_proj (heads x v x h).
    const std::int64_t qd = m.head_dim();
    const std::int64_t query =
        m.q_lora_rank > 0 ? h * m.q_lora_rank + m.q_lora_rank + m.q_lora_rank * m.heads * qd : h * m.heads * qd;
    attention = query + h * (m.kv_lora_rank + m.qk_rope_dim) + m.kv_lora_rank +
                m.kv_lora_rank * m.heads * (m.qk_nope_dim + m.v_head_dim) + m.heads * m.v_head_dim * h;
  }
  // MLP: dense, or the experts, the router (h x experts, no bias unless router_bias) and the shared MLP.
  const std::int64_t expert = mlp_parameters(m, m.ffn);
  const std::int64_t mlp =
      m.moe() ? m.experts * expert + h * m.experts + (m.router_bias ? m.experts : 0) + mlp_parameters(m, m.shared_ffn)
              : expert;
  ParameterCounts c;
  const std::int64_t qk_norms = m.qk_norm ? 2 * m.head_dim() : 0;  // one RMSNorm weight over head_dim each
  const std::int64_t common = attention + m.norms_per_layer() * norm_params + qk_norms;
  // The first dense_layers layers of a mixture of experts have a dense MLP (DeepSeek); per_layer
  // is then the mean over the layers, rounded.
  const std::int64_t dense = m.moe() ? m.dense_layers : 0;
  c.layers = (common + mlp) * (m.layers - dense) + (common + mlp_parameters(m, m.dense_ffn)) * dense;
  c.per_layer = dense == 0 || m.layers == 0 ? common + mlp : (c.layers + m.layers / 2) / m.layers;
  c.embedding = m.vocab * h;
  c.position = m.position == PositionKind::kLearned ? (m.context > 0 ? m.context : m.seq) * h : 0;
  c.final_norm = norm_params;
  c.output_head = (m.tied_embeddings ? 0 : m.vocab * h) + (m.head_bias ? m.vocab : 0);
  c.total = c.layers + c.embedding + c.position + c.final_norm + c.output_head;
  c.active = c.total - (m.moe() ? (m.experts - m.experts_per_token) * expert * m.moe_layers() : 0);
  c.experts_per_layer = m.moe() && m.layers > 0 ? m.experts * expert * m.moe_layers() / m.layers : 0;
  return c;
}

LayerWork layer_forward(const ModelSpec& m, std::int64_t micro_batch, bool flash_attention) {
  const double t = static_cast<double>(micro_batch * m.seq);  // tokens
  const double h = static_cast<double>(m.hidden);
  const double q = static_cast<double>(m.q_width());
  const double kv = static_cast<double>(m.kv_width());
  const double s = static_cast<double>(m.seq);
  const double b = static_cast<double>(micro_batch);
  LayerWork w;
  double qkv = 2.0 * t * h * (q + 2.0 * kv);
  double out_proj = 2.0 * t * q * h;
  if (m.mla()) {
    // The attention projections of multi-head latent attention, as layer_gemms lists them.
    qkv = 0.0;
    out_proj = 0.0;
    for (const auto& g : layer_gemms(m, micro_batch, 1)) {
      if (g.name == "attention_out") out_proj += g.flops();
      if (g.name == "q" || g.name == "q_down" || g.name == "q_up" || g.name == "kv_down" || g.name == "kv_up") {
        qkv += g.flops();
      }
    }
  }
  // Every token runs experts_per_token experts (exactly: uneven routing moves work between
  // experts, not in total), the router and the shared MLP; the first dense_layers layers of a
  // mixture of experts a dense MLP (the mean over the layers).
  double mlp = m.moe() ? static_cast<double>(m.experts_per_token) * mlp_flops(m, t, m.ffn) +
                             2.0 * t * h * static_cast<double>(m.experts) + mlp_flops(m, t, m.shared_ffn)
                       : mlp_flops(m, t, m.ffn);
  if (m.moe() && m.dense_layers > 0 && m.layers > 0) {
    const double L = static_cast<double>(m.layers), dense = static_cast<double>(m.dense_layers);
    mlp = (mlp * (L - dense) + mlp_flops(m, t, m.dense_ffn) * dense) / L;
  }
  w.gemm = sim::Flops{qkv + out_proj + mlp};
  // Q K^T over the query/key width, softmax . V over the value width.
  const double values = static_cast<double>(m.heads * m.value_dim());
  w.attention = sim::Flops{2.0 * b * s * static_cast<double>(m.attention_span()) * (q + values)};
  w.activations = stored_activation_bytes(m, micro_batch, Recompute::kNone, flash_attention);
  return w;
}

std::vector<std::string> widths_not_dividing(const ModelSpec& m, int tp) {
  std::vector<std::string> uneven;
  for (const auto& [what, n] : {std::pair{"heads", m.heads}, std::pair{"kv_heads", m.kv_heads}, std::pair{"ffn", m.ffn},
                                std::pair{"shared_ffn", m.shared_ffn}, std::pair{"dense_ffn", m.dense_ffn}}) {
    if (n % tp != 0) uneven.push_back(fmt::format("{} ({})", what, n));
  }
  return uneven;
}

std::vector<GemmShape> layer_gemms(const ModelSpec& m, std::int64_t micro_batch, std::int64_t tp, std::int64_t ep) {
  if (tp < 1 || m.heads % tp != 0 || m.kv_heads % tp != 0 || m.ffn % tp != 0 || m.shared_ffn % tp != 0 ||
      m.dense_ffn % tp != 0) {
    throw std::invalid_argument(
        fmt::format("model {}: heads ({}), kv_heads ({}), ffn ({}) and shared_ffn ({}) must divide by tp ({})", m.name,
                    m.heads, m.kv_heads, m.ffn, m.shared_ffn, tp));
  }
  const std::int64_t tokens = micro_batch * m.seq;
  const std::int64_t h = m.hidden;
  const std::int64_t q = m.q_width();
  const auto up = [&](std::int64_t w) { return m.ffn_kind == FfnKind::kSwiglu ? 2 * w : w; };  // gate and up fused
  std::vector<GemmShape> gemms;
  if (m.mla()) {
    // Multi-head latent attention: the down projections to the latents are not split by tensor
    // parallelism (Megatron-Core's MLA keeps linear_q_down_proj and linear_kv_down_proj whole), the
    // up projections split their heads.
    const std::int64_t qd = m.head_dim();
    if (m.q_lora_rank > 0) {
      gemms.push_back({"q_down", tokens, m.q_lora_rank, h, 1});
      gemms.push_back({"q_up", tokens, m.heads * qd / tp, m.q_lora_rank, 1});
    } else {
      gemms.push_back({"q", tokens, m.heads * qd / tp, h, 1});
    }
    gemms.push_back({"kv_down", tokens, m.kv_lora_rank + m.qk_rope_dim, h, 1});
    gemms.push_back({"kv_up", tokens, m.heads * (m.qk_nope_dim + m.v_head_dim) / tp, m.kv_lora_rank, 1});
  } else {
    gemms.push_back({"qkv", tokens, (q + 2 * m.kv_width()) / tp, h, 1, false, false, m.linear_bias || m.qkv_bias});
  }
  // Q K^T and softmax . V per head, over the keys each query attends to (sliding windows: fewer).
  gemms.push_back({"attention_scores", m.seq, m.attention_span(), m.head_dim(), micro_batch * m.heads / tp, true});
  gemms.push_back({"attention_values", m.seq, m.value_dim(), m.attention_span(), micro_batch * m.heads / tp, true});
  gemms.push_back({"attention_out", tokens, h, m.heads * m.value_dim() / tp, 1, false, false, m.linear_bias});
  if (!m.moe()) {
    gemms.push_back({"mlp_up", tokens, up(m.ffn) / tp, h, 1, false, false, m.linear_bias});
    gemms.push_back({"mlp_down", tokens, h, m.ffn / tp, 1, false, false, m.linear_bias});
    return gemms;
  }
  if (ep < 1 || m.experts % ep != 0) {
    throw std::invalid_argument(fmt::format("model {}: experts ({}) must divide by ep ({})", m.name, m.experts, ep));
  }
  const std::int64_t routed = tokens_per_expert(m, tokens * ep);
  gemms.push_back({"moe_router", tokens, m.experts, h, 1});  // no bias
  // Uneven routing (routing_imbalance > 1): the busiest expert sits on this rank (the slowest rank
  // sets the pace) and runs its tokens as a GEMM of its own; the rank's other experts the mean.
  const std::int64_t busiest = busiest_expert_tokens(m, tokens * ep);
  const std::int64_t even = busiest > routed ? m.experts / ep - 1 : m.experts / ep;
  if (even > 0) {
    gemms.push_back({"expert_up", routed, up(m.ffn) / tp, h, even, false, true, m.linear_bias});
    gemms.push_back({"expert_down", routed, h, m.ffn / tp, even, false, true, m.linear_bias});
  }
  if (busiest > routed) {
    gemms.push_back({"expert_up_busiest", busiest, up(m.ffn) / tp, h, 1, false, true, m.linear_bias});
    gemms.push_back({"expert_down_busiest", busiest, h, m.ffn / tp, 1, false, true, m.linear_bias});
  }
  if (m.shared_ffn > 0) {
    gemms.push_back({"shared_mlp_up", tokens, up(m.shared_ffn) / tp, h, 1, false, false, m.linear_bias});
    gemms.push_back({"shared_mlp_down", tokens, h, m.shared_ffn / tp, 1, false, false, m.linear_bias});
  }
  return gemms;
}

namespace {

// The sizes the layer's non-GEMM kernels run over on one rank, in elements.
struct ElementwiseSizes {
  double t;       // tokens
  double e;       // hidden-state elements a rank's norms, dropouts and residual adds touch
  double scores;  // attention scores of the rank's heads
  double q;       // the rank's query width
  double kv;      // the rank's key (or value) width
};

// A framework's chain of kernels (framework.hpp) on `elements` elements in `rows` rows: each
// kernel of it on its own, forward and backward; a kernel on one value per row (bytes 0 in the
// data) reads and writes a 4 B value per row.
void add_chain(const ModuleChain& chain, double elements, double rows, std::vector<ElementwiseKernel>& k,
               bool attention_core = false) {
  const auto bytes = [&](const ChainKernel& c) { return c.bytes > 0.0 ? c.bytes * elements : 8.0 * rows; };
  for (const auto& c : chain.forward) k.push_back({c.kernel_class.c_str(), bytes(c), 0.0, attention_core});
  for (const auto& c : chain.backward) k.push_back({c.kernel_class.c_str(), 0.0, bytes(c), attention_core});
}

// One norm over `elements` elements of `rows` rows: the framework's RMSNorm chain for an RMSNorm
// when it has one (Hugging Face's LlamaRMSNorm: fp32 eager kernels), else one fused norm kernel
// (PyTorch's layer_norm, apex's and Transformer Engine's norms): read x, write y; backward reads x
// and dy, writes dx (2 B each).
void add_norm(bool rms, const FrameworkProfile& f, double elements, double rows, std::vector<ElementwiseKernel>& k) {
  if (const ModuleChain* chain = rms ? f.chain("rmsnorm") : nullptr) {
    add_chain(*chain, elements, rows, k);
    return;
  }
  k.push_back({"layernorm", 4.0 * elements, 6.0 * elements});
}

// Step 1: the norms, per layer. With multi-head latent attention the latents' norms too, with QK
// norm Q's and K's.
void add_norm_kernels(const ModelSpec& m, const ElementwiseSizes& z, const FrameworkProfile& f,
                      std::vector<ElementwiseKernel>& k) {
  const bool rms = m.norm == NormKind::kRmsNorm;
  for (int n = 0; n < m.norms_per_layer(); ++n) add_norm(rms, f, z.e, z.e / static_cast<double>(m.hidden), k);
  if (m.mla()) {
    // The latents' RMSNorms (q_a_layernorm, kv_a_layernorm), whole on every rank.
    add_norm(true, f, z.t * static_cast<double>(m.q_lora_rank), z.t, k);
    add_norm(true, f, z.t * static_cast<double>(m.kv_lora_rank), z.t, k);
  }
  if (m.qk_norm) {
    // Q's and K's per-head RMSNorm (Qwen3): a norm kernel each over this rank's heads, not split
    // by sequence parallelism (it runs inside the attention block).
    const double d = static_cast<double>(m.head_dim());
    add_norm(true, f, z.t * z.q, z.t * z.q / d, k);
    add_norm(true, f, z.t * z.kv, z.t * z.kv / d, k);
  }
}

// Step 2: the rotary embedding of Q and K, for models with rotary positions.
void add_rotary_kernel(const ModelSpec& m, const ElementwiseSizes& z, const FrameworkProfile& f,
                       std::vector<ElementwiseKernel>& k) {
  if (m.position != PositionKind::kRope) return;
  const double qk = z.t * (z.q + z.kv);
  if (const ModuleChain* chain = f.chain("rotary")) {
    // The framework's chain on the rotated slice of Q and K; a partial rotation's split and join
    // as below.
    add_chain(*chain, m.rotary_fraction * qk, 0.0, k);
    if (m.rotary_fraction < 1.0) k.push_back({"activation", 4.0 * qk, 4.0 * qk});
    return;
  }
  // Rotary embedding of Q and K as eager PyTorch runs it (Hugging Face's and Megatron-DeepSpeed's
  // apply_rotary_pos_emb: x * cos + rotate_half(x) * sin, rotate_half = cat(-x2, x1), cos and sin
  // cached in x's dtype). Forward per element: x * cos (read, write: 4 B), the negated half
  // (2 B), the concatenation (4 B), the product with sin (4 B), the sum (read two, write one:
  // 6 B): 20 B. Backward: the two products (4 B each), the negated half (2 B), the halves
  // stacked back (4 B) and the two paths' gradients summed (6 B): 20 B. A fused rotary kernel
  // (Transformer Engine, flash-attn) reads and writes once: 4 B. With rotary positions on part
  // of each head (GPT-NeoX, Phi), the rotated slice costs the above and the slices are joined
  // again (read, write: 4 B over the whole width), and split back in backward alike.
  const double bytes = 20.0 * m.rotary_fraction * qk + (m.rotary_fraction < 1.0 ? 4.0 * qk : 0.0);
  k.push_back({"activation", bytes, bytes, false, false, 5});  // mul, neg, cat, mul, add
}

// Step 3: the kernels that turn the attention scores into probabilities, where the attention
// kernels leave them to run on their own (soft-capping, scaling, masking, softmax, dropout).
void add_attention_score_kernels(const ModelSpec& m, AttentionKernels attention, double scores, bool dropout,
                                 std::vector<ElementwiseKernel>& k) {
  if (m.attention_softcap && attention != AttentionKernels::kFlash) {
    // cap x tanh(scores / cap) as eager PyTorch runs it (Gemma2's eager attention: divide, tanh,
    // multiply): three passes over the scores, read and write each; backward alike.
    k.push_back({"attention_scale", 12.0 * scores, 12.0 * scores, true});
  }
  if (attention == AttentionKernels::kUnfused) {
    // Scores / sqrt(d) (read, write), then mask fill and softmax (read, write each) and, with
    // dropout, the dropout of the probabilities (read, write, 1 B mask); backward alike.
    k.push_back({"attention_scale", 4.0 * scores, 4.0 * scores, true});
    const double softmax = dropout ? 13.0 : 8.0;
    k.push_back({"attention_softmax", softmax * scores, softmax * scores, true, false, dropout ? 3 : 2});
  } else if (attention == AttentionKernels::kFusedSoftmax) {
    // Megatron's scaled_upper_triang_masked_softmax: row i of a head loads its i + 1 unmasked
    // scores and writes all s probabilities (zeros above the diagonal); the backward loads the
    // gradient and the saved probabilities of the same i + 1 entries and writes all s input
    // gradients. Over a row: (s + 1) / 2 loads per s scores. The scale rides on Q K^T (baddbmm's
    // alpha). It is a warp-per-row softmax like PyTorch's, so it runs at the softmax class's
    // efficiency. Dropout, when the model has it, stays a kernel of its own (read, write, 1 B mask).
    const double s = static_cast<double>(m.seq);
    const double unmasked = (s + 1.0) / (2.0 * s);  // fraction of a row the kernel loads
    k.push_back({"attention_softmax", (2.0 * unmasked + 2.0) * scores, (4.0 * unmasked + 2.0) * scores, true});
    if (dropout) k.push_back({"dropout", 5.0 * scores, 5.0 * scores, true});
  }
}

// Step 4: the dropouts and the residual adds on the hidden state, after attention and after the MLP.
void add_dropout_and_residual_kernels(bool dropout, double e, std::vector<ElementwiseKernel>& k) {
  if (dropout) {
    // After the attention projection and after the MLP: read x, write y and a 1 B mask; backward
    // reads dy and the mask, writes dx.
    k.push_back({"dropout", 5.0 * e, 5.0 * e});
    k.push_back({"dropout", 5.0 * e, 5.0 * e});
  }
  // Residual adds: read two, write one. Backward hands dy to both inputs (no kernel); where the
  // residual and the branch gradients meet they are summed: one add of the same size.
  k.push_back({"residual_add", 6.0 * e, 6.0 * e});
  k.push_back({"residual_add", 6.0 * e, 6.0 * e});
}

// The MLP activation on f elements of this rank, as eager PyTorch runs it. GeLU: y = gelu(x)
// (read x, write y), dx = dy * gelu'(x) (read dy and x, write dx). Gated (SwiGLU, GeGLU):
// s = silu(g) (read, write), then y = s * u (read two, write one): 10 B per element; backward
// du = dy * s and ds = dy * u (read two, write one each), then dg = silu'(g) * ds (read ds and
// g, write dg): 18 B. Megatron's fused gate/up projection adds the split's concatenation of dg
// and du in backward, not counted here.
ElementwiseKernel mlp_activation(const ModelSpec& m, double f) {
  if (m.ffn_kind == FfnKind::kGelu) return ElementwiseKernel{"activation", 4.0 * f, 6.0 * f};
  return ElementwiseKernel{"activation", 10.0 * f, 18.0 * f, false, false, 2};  // silu, mul
}

// Step 5 (mixture of experts): the router's softmax, and for each of the rank's experts its
// tokens' gather, activation and scatter-add, then the shared experts' activation. Returns the
// elements the MLP's GEMMs write on this rank (for bias gradients).
double add_expert_kernels(const ModelSpec& m, std::int64_t micro_batch, std::int64_t tp, std::int64_t ep,
                          const ElementwiseSizes& z, std::vector<ElementwiseKernel>& k) {
  // As eager PyTorch runs a mixture of experts (Hugging Face's Mixtral block): the router's
  // softmax and top-k over tokens x experts (fp32 logits), then expert by expert: gather its
  // tokens (index_select: read, write), its activation, and scale-and-add its output into the
  // layer output (index_add: read the output and the accumulator, write it). Backward scatters
  // the input gradients back the same way. Copies run at the device's plain copy efficiency.
  const double gated = m.ffn_kind == FfnKind::kSwiglu ? 2.0 : 1.0;
  const double router = z.t * static_cast<double>(m.experts);
  k.push_back({"attention_softmax", 8.0 * router, 8.0 * router});
  const double routed = static_cast<double>(tokens_per_expert(m, micro_batch * m.seq * ep));
  // The busiest expert (routing_imbalance) is one of this rank's: its kernels run its tokens.
  const double busiest = static_cast<double>(busiest_expert_tokens(m, micro_batch * m.seq * ep));
  const std::int64_t local_experts = m.experts / ep;
  double expert_tokens = 0.0;
  for (std::int64_t x = 0; x < local_experts; ++x) {
    const double rows = x == 0 ? busiest : routed;
    const double rows_hidden = rows * static_cast<double>(m.hidden);
    expert_tokens += rows;
    k.push_back({"", 4.0 * rows_hidden, 6.0 * rows_hidden, false, true});
    ElementwiseKernel act = mlp_activation(m, rows * static_cast<double>(m.ffn / tp));
    act.expert = true;
    k.push_back(act);
    k.push_back({"residual_add", 6.0 * rows_hidden, 6.0 * rows_hidden, false, true});
  }
  const double f = expert_tokens * static_cast<double>(m.ffn / tp);
  double mlp_outputs = gated * f + expert_tokens * static_cast<double>(m.hidden);
  if (m.shared_ffn > 0) {
    const double shared = z.t * static_cast<double>(m.shared_ffn / tp);
    k.push_back(mlp_activation(m, shared));
    mlp_outputs += gated * shared + z.e;
  }
  return mlp_outputs;
}

// Step 5: the MLP's activation (a dense MLP's, or the experts'). Returns the elements the MLP's
// GEMMs write on this rank (for bias gradients).
double add_mlp_kernels(const ModelSpec& m, std::int64_t micro_batch, std::int64_t tp, std::int64_t ep,
                       const ElementwiseSizes& z, const FrameworkProfile& fw, std::vector<ElementwiseKernel>& k) {
  if (m.moe()) return add_expert_kernels(m, micro_batch, tp, ep, z, k);
  const double gated = m.ffn_kind == FfnKind::kSwiglu ? 2.0 : 1.0;
  const double f = z.t * static_cast<double>(m.ffn / tp);
  const ModuleChain* gelu_new =
      m.ffn_kind == FfnKind::kGelu && m.activation == Activation::kGeluNew ? fw.chain("gelu_new") : nullptr;
  if (gelu_new) {
    add_chain(*gelu_new, f, z.t, k);  // transformers' NewGELUActivation: a chain of eager kernels
  } else {
    k.push_back(mlp_activation(m, f));
  }
  return gated * f + z.e;
}

// Step 6: the bias gradients, a column sum of each biased GEMM's output gradient (read once).
void add_bias_gradient_kernel(const ModelSpec& m, const ElementwiseSizes& z, double mlp_outputs,
                              std::vector<ElementwiseKernel>& k) {
  if (!m.linear_bias && !m.qkv_bias) return;
  double outputs = z.t * (z.q + 2.0 * z.kv);
  if (m.linear_bias) outputs += z.e + mlp_outputs;
  k.push_back({"bias_grad", 0.0, 2.0 * outputs});
}

}  // namespace

std::vector<ElementwiseKernel> layer_elementwise_kernels(const ModelSpec& m, std::int64_t micro_batch, std::int64_t tp,
                                                         AttentionKernels attention, bool sequence_parallel,
                                                         std::int64_t ep, Framework framework) {
  const double t = static_cast<double>(micro_batch * m.seq);  // tokens
  const ElementwiseSizes z{
      t,
      // Hidden-state elements a rank's norms, dropouts and residual adds touch: all of them, or its
      // 1/tp of the sequence under sequence parallelism.
      t * static_cast<double>(m.hidden) / (sequence_parallel ? static_cast<double>(tp) : 1.0),
      static_cast<double>(micro_batch * (m.heads / tp)) * static_cast<double>(m.seq) *
          static_cast<double>(m.attention_span()),
      static_cast<double>(m.q_width() / tp),
      static_cast<double>(m.kv_width() / tp),
  };
  const FrameworkProfile& f = framework_profile(framework);
  // Hugging Face configs name each dropout (framework hf-transformers); the generic kernels follow
  // the model's `dropout`.
  const bool hf = framework == Framework::kHfTransformers;
  std::vector<ElementwiseKernel> k;
  add_norm_kernels(m, z, f, k);
  add_rotary_kernel(m, z, f, k);
  add_attention_score_kernels(m, attention, z.scores, hf ? m.attention_dropout : m.dropout, k);
  if (const ModuleChain* copy = f.chain("attention_output")) add_chain(*copy, z.t * z.q, z.t, k);
  add_dropout_and_residual_kernels(hf ? m.hidden_dropout : m.dropout, z.e, k);
  const double mlp_outputs = add_mlp_kernels(m, micro_batch, tp, ep, z, f, k);
  add_bias_gradient_kernel(m, z, mlp_outputs, k);
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
  // Term by term (s = seq, b = micro-batch, h = hidden, a = heads, q = query width (h unless the
  // heads are wider), kv = K/V width, f = ffn):
  //   attention: input 2sbh, Q 2sb*q, K 2sb*kv, V 2sb*kv, output-projection input 2sb*q,
  //              dropout mask sbh; scores 2as^2b, softmax 2as^2b, its dropout mask as^2b
  //              (with q = kv = h this is 11sbh + 5as^2b);
  //   MLP (GeLU): input 2sbh, GeLU input 2sbf, down-projection input 2sbf, dropout mask sbh
  //              (with f = 4h this is 19sbh); SwiGLU keeps gate and up outputs and their product:
  //              input 2sbh, 3 x 2sbf, dropout mask sbh;
  //   mixture of experts, per token: the router's fp32 logits 4 x experts, and for each of its
  //              experts_per_token experts the gathered input 2h, that expert's MLP terms and
  //              its output 2h (the routing weight's gradient needs it); the shared MLP's terms;
  //   norms: 2 x 2sbh.
  // Flash attention recomputes the s x s terms in backward, so they are not stored; selective
  // recomputation (Korthikanti) drops them too. Full recomputation keeps only the layer input.
  const double s = static_cast<double>(m.seq);
  const double b = static_cast<double>(micro_batch);
  const double h = static_cast<double>(m.hidden);
  const double a = static_cast<double>(m.heads);
  const double q = static_cast<double>(m.q_width());
  const double kv = static_cast<double>(m.kv_width());
  if (policy == Recompute::kFull) return sim::Bytes{static_cast<std::int64_t>(2.0 * s * b * h)};
  const double attention_linear = s * b * (2.0 * h + 2.0 * q + 4.0 * kv + 2.0 * q + h);
  const double attention_quadratic = 5.0 * a * s * static_cast<double>(m.attention_span()) * b;
  double mlp_per_token = 2.0 * h + h;  // input, dropout mask
  if (!m.moe()) {
    mlp_per_token += mlp_stored_bytes_per_token(m, m.ffn);
  } else {
    mlp_per_token += 4.0 * static_cast<double>(m.experts) +
                     static_cast<double>(m.experts_per_token) * (4.0 * h + mlp_stored_bytes_per_token(m, m.ffn)) +
                     (m.shared_ffn > 0 ? mlp_stored_bytes_per_token(m, m.shared_ffn) : 0.0);
  }
  const double norms = 2.0 * m.norms_per_layer() * s * b * h;
  double total = attention_linear + s * b * mlp_per_token + norms;
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
