#include "models/transformer/model_parser.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <string>

namespace offsim::models {

namespace {

// The largest values a model may give, far above any published model (GPT-1T: 128 layers, hidden
// 25,600; DeepSeek-V3: 256 experts; Gemma: vocabulary 256,000): a larger value is refused at its
// key, so that nothing computed from them leaves offsim's 64-bit integers (docs/fuzzing.md).
constexpr std::int64_t kMaxLayers = std::int64_t{1} << 12;   // 4,096
constexpr std::int64_t kMaxWidth = std::int64_t{1} << 20;    // hidden, ffn, head_dim: 1,048,576
constexpr std::int64_t kMaxHeads = std::int64_t{1} << 16;    // heads, kv_heads: 65,536
constexpr std::int64_t kMaxExperts = std::int64_t{1} << 12;  // experts (routed, per token, shared)
constexpr std::int64_t kMaxTokens = std::int64_t{1} << 24;   // vocabulary, sequence: 16,777,216
constexpr double kMaxParameters = 1e15;                      // 1,000 x GPT-1T

// The limit of a shape key, offsim's or a Hugging Face config's.
std::int64_t max_value(std::string_view key) {
  for (const std::string_view k : {"layers", "num_hidden_layers", "n_layer"}) {
    if (key == k) return kMaxLayers;
  }
  for (const std::string_view k :
       {"heads", "kv_heads", "num_attention_heads", "num_key_value_heads", "num_kv_heads", "n_head"}) {
    if (key == k) return kMaxHeads;
  }
  for (const std::string_view k : {"experts", "experts_per_token", "num_local_experts", "num_experts",
                                   "num_experts_per_tok", "n_routed_experts", "n_shared_experts"}) {
    if (key == k) return kMaxExperts;
  }
  for (const std::string_view k : {"vocab", "seq", "vocab_size", "max_position_embeddings", "n_positions"}) {
    if (key == k) return kMaxTokens;
  }
  return kMaxWidth;  // hidden, ffn, shared_ffn, head_dim and their Hugging Face names
}

// Records an error at `loc` when `value` is above the limit of `key`.
void check_max(sim::config::Context& ctx, const sim::config::Location& loc, const std::string& path,
               std::string_view key, std::int64_t value) {
  if (value > max_value(key)) {
    ctx.error(loc, path, fmt::format("expected at most {} (offsim's limit), got {}", max_value(key), value));
  }
}

// The parameters of a model whose every value is within its limit, estimated in floating point
// (its matrices) before count_parameters adds them up in 64-bit integers.
double approximate_parameters(const ModelSpec& m) {
  const double h = static_cast<double>(m.hidden);
  const double head = m.head_size > 0 ? static_cast<double>(m.head_size) : h / static_cast<double>(m.heads);
  const double q = static_cast<double>(m.heads) * head;
  const double kv = static_cast<double>(m.kv_heads) * head;
  const double experts = static_cast<double>(std::max<std::int64_t>(m.experts, 1));
  const double mlp = 3.0 * h * (experts * static_cast<double>(m.ffn) + static_cast<double>(m.shared_ffn)) + h * experts;
  return static_cast<double>(m.layers) * (2.0 * h * q + 2.0 * h * kv + mlp) +
         (2.0 * static_cast<double>(m.vocab) + static_cast<double>(m.seq)) * h;
}

// The key path of a model's own messages: "model" in an experiment; the root of a model file
// (`offsim model`) has no path, and a message always names a key.
std::string model_path(const sim::config::Node& node) {
  return node.path().empty() ? std::string("model") : node.path();
}

// Records an error when the model has more parameters than offsim counts.
void check_parameters(const ModelSpec& m, const sim::config::Node& node) {
  const double parameters = approximate_parameters(m);
  if (parameters > kMaxParameters) {
    node.context().error(
        node.location(), model_path(node),
        fmt::format("about {:.3g} parameters, more than offsim models ({:.0e})", parameters, kMaxParameters));
  }
}

// A Hugging Face config.json (`model: !include llama.config.json`): the keys offsim maps, by
// model_type, with transformers' defaults for the keys a config leaves out (each family's
// Config class); every other key is listed in one warning, never silently dropped. Families
// whose shape offsim cannot express are refused with the reason, located at the key that says so.
class HfConfigReader {
 public:
  explicit HfConfigReader(const sim::config::Node& node) : node_(node), ctx_(node.context()), r_(node) {}

  std::optional<ModelSpec> read() {
    const std::size_t errors_before = ctx_.error_count();
    const auto type = r_.required<std::string>("model_type");
    if (!type.valid) return std::nullopt;
    m_.name = r_.optional<std::string>("_name_or_path", type.value).value;
    m_.hf_model_type = type.value;
    const std::string& t = type.value;
    if (t == "llama" || t == "mistral" || t == "mixtral" || t == "qwen2" || t == "qwen2_moe" || t == "qwen3" ||
        t == "qwen3_moe" || t == "gemma" || t == "gemma2" || t == "phi3" || t == "deepseek") {
      read_llama_family(t);
    } else if (t == "gpt_neox") {
      read_gpt_neox();
    } else if (t == "gpt2") {
      read_gpt2();
    } else if (t == "falcon") {
      read_falcon();
    } else if (t == "opt") {
      read_opt();
    } else if (t == "phi") {
      read_phi();
    } else if (t == "deepseek_v2" || t == "deepseek_v3") {
      read_deepseek_mla(t);
    } else {
      refuse(type.loc, "model_type",
             fmt::format(
                 "'{}' is not a model family offsim reads; it reads llama, mistral, mixtral, qwen2, qwen2_moe, "
                 "qwen3, qwen3_moe, gemma, gemma2, phi, phi3, falcon, opt, gpt_neox, gpt2, deepseek, deepseek_v2 and "
                 "deepseek_v3; write the shape as an offsim model instead (docs/models.md)",
                 t));
    }
    // A checkpoint stored in FP8 (DeepSeek-V3's quantization_config, quant_method fp8) says how its
    // weights are saved, not how they train: the experiment's training.precision decides that.
    if (auto q = r_.child("quantization_config"); q && q->is_map()) {
      sim::config::MapReader qr(*q);
      const auto method = qr.optional<std::string>("quant_method", std::string{});
      ctx_.warning(method.valid ? method.loc : q->location(), q->child_path("quant_method"),
                   fmt::format("the checkpoint's weights are stored quantized ({}); offsim trains the model in "
                               "training.precision (bf16, or fp8 for Transformer Engine's FP8 GEMMs)",
                               method.value.empty() ? std::string{"no quant_method"} : method.value));
      (void)qr.take_unread_keys();
    }
    const std::vector<std::string> ignored = r_.take_unread_keys();
    if (!ignored.empty() && ctx_.error_count() == errors_before) {
      ctx_.warning(
          node_.location(), model_path(node_),
          fmt::format("Hugging Face config keys offsim does not model, ignored: {}", fmt::join(ignored, ", ")));
    }
    if (ctx_.error_count() == errors_before && m_.head_size == 0 && m_.heads > 0 && m_.hidden % m_.heads != 0) {
      ctx_.error(
          node_.location(), model_path(node_),
          fmt::format("hidden ({}) is not a multiple of heads ({}) and no head_dim is given", m_.hidden, m_.heads));
    }
    if (ctx_.error_count() == errors_before && m_.heads > 0 && m_.kv_heads > 0 && m_.heads % m_.kv_heads != 0) {
      ctx_.error(node_.location(), model_path(node_),
                 fmt::format("heads ({}) is not a multiple of key/value heads ({})", m_.heads, m_.kv_heads));
    }
    if (ctx_.error_count() == errors_before && m_.heads > 0) check_parameters(m_, node_);
    if (ctx_.error_count() != errors_before) return std::nullopt;
    return m_;
  }

 private:
  std::int64_t positive(std::string_view key) {
    const auto v = r_.required<std::int64_t>(key);
    if (v.valid && v.value <= 0) error_at(v.loc, key, fmt::format("expected a positive integer, got {}", v.value));
    if (v.valid) check_max(ctx_, v.loc, node_.child_path(key), key, v.value);
    // Out of range is 0 (not read), so that nothing computed from it overflows.
    return v.valid && v.value <= max_value(key) ? v.value : 0;
  }
  // An optional count that may also be written as null (transformers' "use the default").
  std::int64_t positive_or(std::string_view key, std::int64_t fallback) {
    const auto c = r_.child(key);
    if (!c || c->is_null()) return fallback;
    const auto v = c->as<std::int64_t>();
    if (!v) return fallback;
    if (*v <= 0) error_at(c->location(), key, fmt::format("expected a positive integer, got {}", *v));
    check_max(ctx_, c->location(), node_.child_path(key), key, *v);
    return *v <= max_value(key) ? *v : 0;
  }
  double number_or(std::string_view key, double fallback) {
    const auto c = r_.child(key);
    if (!c || c->is_null()) return fallback;
    return c->as<double>().value_or(fallback);
  }
  // A share in (0, 1]: `fallback` when absent, an error naming the key when outside.
  double fraction_or(std::string_view key, double fallback) {
    const auto c = r_.child(key);
    if (!c || c->is_null()) return fallback;
    const auto v = c->as<double>();
    if (!v) return fallback;
    return sim::config::check_fraction(ctx_, c->location(), node_.child_path(key), *v) ? *v : fallback;
  }
  bool flag_or(std::string_view key, bool fallback) { return r_.optional<bool>(key, fallback).value; }
  void error_at(const sim::config::Location& loc, std::string_view key, std::string message) {
    ctx_.error(loc, node_.child_path(key), std::move(message));
  }
  void refuse(const sim::config::Location& loc, std::string_view key, std::string why) {
    error_at(loc, key, fmt::format("not expressible in offsim: {}", why));
  }
  // A key whose value offsim requires to be `expected` (a layer layout it cannot express otherwise).
  template <class T>
  void require_value(std::string_view key, T expected, std::string_view why) {
    const auto c = r_.child(key);
    if (!c || c->is_null()) return;
    const auto v = c->as<T>();
    if (v && *v != expected) refuse(c->location(), key, fmt::format("{} = {}: {}", key, *v, why));
  }
  void choice(std::string_view key, const std::vector<std::string>& choices, const std::string& fallback) {
    (void)r_.choice(key, choices, fallback);
  }
  // An activation key of the GeLU families: gelu_new and gelu_fast run as transformers' Python
  // formulas (NewGELUActivation, FastGELUActivation: chains of eager kernels); gelu (nn.functional.gelu),
  // gelu_pytorch_tanh and relu as one PyTorch kernel each.
  void gelu_activation(std::string_view key, const std::string& fallback) {
    const auto act = r_.choice(key, {"gelu_new", "gelu", "gelu_fast", "gelu_pytorch_tanh", "relu"}, fallback);
    m_.activation = act.value == "gelu_new" || act.value == "gelu_fast" ? Activation::kGeluNew : Activation::kGelu;
  }
  // The dropout keys, each with its family's default (0 when the family has no such key): on the
  // hidden state (twice a layer), on the attention probabilities, after the embedding.
  void dropouts(double hidden, double attention, double embedding) {
    m_.hidden_dropout = hidden > 0.0;
    m_.attention_dropout = attention > 0.0;
    m_.embedding_dropout = embedding > 0.0;
    m_.dropout = m_.hidden_dropout || m_.attention_dropout || m_.embedding_dropout;
  }

  // The sizes every family has, under its own key names.
  void read_sizes(std::string_view layers, std::string_view hidden, std::string_view heads) {
    m_.layers = positive(layers);
    m_.hidden = positive(hidden);
    m_.heads = positive(heads);
    m_.vocab = positive("vocab_size");
  }

  void read_llama_family(const std::string& t) {
    read_sizes("num_hidden_layers", "hidden_size", "num_attention_heads");
    m_.seq = positive("max_position_embeddings");
    // LlamaConfig and its kin: num_key_value_heads defaults to num_attention_heads; head_dim
    // (newer configs; Gemma's is 256 by default) to hidden / heads.
    m_.kv_heads = positive_or("num_key_value_heads", m_.heads);
    // Qwen3Config and Qwen3MoeConfig: head_dim 128 by default.
    const bool qwen3 = t == "qwen3" || t == "qwen3_moe";
    m_.head_size = positive_or("head_dim", t == "gemma" || t == "gemma2" ? 256 : (qwen3 ? 128 : 0));
    if (m_.head_size > 0 && m_.heads > 0 && m_.head_size * m_.heads == m_.hidden) m_.head_size = 0;
    m_.ffn_kind = FfnKind::kSwiglu;  // gated MLPs: SwiGLU, or GeGLU for Gemma (same shapes and kernels)
    m_.norm = NormKind::kRmsNorm;
    m_.position = PositionKind::kRope;
    const bool gemma = t == "gemma" || t == "gemma2";
    if (gemma) {
      choice("hidden_act", {"gelu", "gelu_pytorch_tanh"}, "gelu_pytorch_tanh");
      choice("hidden_activation", {"gelu", "gelu_pytorch_tanh"}, "gelu_pytorch_tanh");
    } else {
      choice("hidden_act", {"silu"}, "silu");
    }
    m_.tied_embeddings = flag_or("tie_word_embeddings", gemma);
    m_.qkv_bias = t == "qwen2" || t == "qwen2_moe";  // Qwen2Attention: bias on q/k/v, none on o_proj
    m_.qk_norm = qwen3;                              // Qwen3Attention: q_norm and k_norm, RMSNorm over head_dim
    if (qwen3) {
      // Qwen3's sliding window is off unless use_sliding_window (Qwen3Config).
      require_value<bool>("use_sliding_window", false,
                          "sliding-window attention on Qwen3's upper layers is not modelled (max_window_layers)");
      (void)r_.child("sliding_window");
      (void)r_.child("max_window_layers");
    }
    if (t == "gemma2") {
      // Gemma2DecoderLayer: input, post-attention, pre-feedforward and post-feedforward RMSNorms;
      // Gemma2Config's defaults: final_logit_softcapping 30.0, attn_logit_softcapping 50.0,
      // sliding_window 4096 on every other layer (is_sliding = not layer_idx % 2: the even ones).
      m_.post_norms = true;
      m_.logit_softcap = number_or("final_logit_softcapping", 30.0) > 0.0;
      m_.attention_softcap = number_or("attn_logit_softcapping", 50.0) > 0.0;
      m_.sliding_window = positive_or("sliding_window", 4096);
      m_.sliding_window_layers = (m_.layers + 1) / 2;
      (void)r_.child("query_pre_attn_scalar");  // the scores' scale: no cost of its own
      (void)r_.child("cache_implementation");
    }
    m_.linear_bias = flag_or("attention_bias", false);
    dropouts(0.0, number_or("attention_dropout", 0.0), 0.0);
    if (t == "mixtral") {
      m_.ffn = positive("intermediate_size");
      m_.experts = positive("num_local_experts");
      m_.experts_per_token = positive("num_experts_per_tok");
    } else if (t == "qwen3_moe") {
      // Qwen3MoeConfig: every layer sparse (decoder_sparse_step 1, mlp_only_layers empty), no
      // shared experts; intermediate_size is the width of dense layers there are none of.
      (void)r_.optional<std::int64_t>("intermediate_size", 0);
      m_.ffn = positive("moe_intermediate_size");
      m_.experts = positive("num_experts");
      m_.experts_per_token = positive("num_experts_per_tok");
      require_value<std::int64_t>("decoder_sparse_step", 1,
                                  "dense and sparse layers alternate; offsim models layers of one shape");
      if (auto c = r_.child("mlp_only_layers"); c && c->is_sequence() && !c->items().empty()) {
        refuse(c->location(), "mlp_only_layers", "some layers dense, others sparse: offsim models layers of one shape");
      }
    } else if (t == "qwen2_moe") {
      // Qwen2MoeConfig: every layer sparse when decoder_sparse_step is 1 and mlp_only_layers empty;
      // intermediate_size is then the width of dense layers there are none of.
      (void)r_.optional<std::int64_t>("intermediate_size", 0);
      m_.ffn = positive("moe_intermediate_size");
      m_.experts = positive("num_experts");
      m_.experts_per_token = positive("num_experts_per_tok");
      m_.shared_ffn = positive_or("shared_expert_intermediate_size", 0);
      require_value<std::int64_t>("decoder_sparse_step", 1,
                                  "dense and sparse layers alternate; offsim models layers of one shape");
      if (auto c = r_.child("mlp_only_layers"); c && c->is_sequence() && !c->items().empty()) {
        refuse(c->location(), "mlp_only_layers", "some layers dense, others sparse: offsim models layers of one shape");
      }
    } else if (t == "deepseek") {
      // DeepSeek-MoE (deepseek-moe-16b): read_deepseek_moe.
      read_deepseek_moe();
    } else {
      m_.ffn = positive("intermediate_size");
    }
    if (m_.moe() && m_.experts_per_token > m_.experts) {
      error_at(node_.location(), "num_experts_per_tok",
               fmt::format("{} experts per token out of {}", m_.experts_per_token, m_.experts));
    }
  }

  // DeepSeek's mixtures of experts (DeepseekMoE, V2, V3): routed experts of moe_intermediate_size,
  // n_shared_experts of the same width every token runs (one MLP of their summed width), the first
  // first_k_dense_replace layers dense of intermediate_size, then every layer sparse.
  void read_deepseek_moe() {
    m_.ffn = positive("moe_intermediate_size");
    m_.experts = positive("n_routed_experts");
    m_.experts_per_token = positive("num_experts_per_tok");
    m_.shared_ffn = positive_or("n_shared_experts", 0) * m_.ffn;
    const auto dense = r_.optional<std::int64_t>("first_k_dense_replace", 0);
    if (dense.valid && (dense.value < 0 || (m_.layers > 0 && dense.value >= m_.layers))) {
      error_at(
          dense.loc, "first_k_dense_replace",
          fmt::format("expected 0 to {} dense layers, got {}", std::max<std::int64_t>(m_.layers - 1, 0), dense.value));
    } else if (dense.valid) {
      m_.dense_layers = dense.value;
    }
    if (m_.dense_layers > 0) {
      m_.dense_ffn = positive("intermediate_size");
    } else {
      (void)r_.optional<std::int64_t>("intermediate_size", 0);
    }
    require_value<std::int64_t>("moe_layer_freq", 1,
                                "dense and sparse layers alternate; offsim models dense first layers, then sparse");
  }

  // DeepSeek-V2 and V3 (configuration_deepseek.py): multi-head latent attention (ModelSpec's
  // q_lora_rank ... v_head_dim), rotary positions on qk_rope_head_dim of each head's
  // qk_nope_head_dim + qk_rope_head_dim, RMSNorm, SwiGLU, no biases, untied embeddings; V3's
  // noaux_tc router keeps a bias per expert (e_score_correction_bias). The multi-token prediction
  // module (num_nextn_predict_layers) is not part of the model's published count and not modelled.
  void read_deepseek_mla(const std::string& t) {
    read_sizes("num_hidden_layers", "hidden_size", "num_attention_heads");
    m_.seq = positive("max_position_embeddings");
    m_.kv_heads = positive_or("num_key_value_heads", m_.heads);
    m_.q_lora_rank = positive_or("q_lora_rank", 0);
    m_.kv_lora_rank = positive("kv_lora_rank");
    m_.qk_nope_dim = positive("qk_nope_head_dim");
    m_.qk_rope_dim = positive("qk_rope_head_dim");
    m_.v_head_dim = positive("v_head_dim");
    if (m_.qk_nope_dim + m_.qk_rope_dim > 0) {
      m_.rotary_fraction = static_cast<double>(m_.qk_rope_dim) / static_cast<double>(m_.qk_nope_dim + m_.qk_rope_dim);
    }
    m_.ffn_kind = FfnKind::kSwiglu;
    m_.norm = NormKind::kRmsNorm;
    m_.position = PositionKind::kRope;
    choice("hidden_act", {"silu"}, "silu");
    m_.tied_embeddings = flag_or("tie_word_embeddings", false);
    m_.linear_bias = flag_or("attention_bias", false);
    dropouts(0.0, number_or("attention_dropout", 0.0), 0.0);
    read_deepseek_moe();
    const std::string topk =
        r_.optional<std::string>("topk_method", std::string{t == "deepseek_v3" ? "noaux_tc" : "greedy"}).value;
    m_.router_bias = topk == "noaux_tc";
    if (m_.moe() && m_.experts_per_token > m_.experts) {
      error_at(node_.location(), "num_experts_per_tok",
               fmt::format("{} experts per token out of {}", m_.experts_per_token, m_.experts));
    }
  }

  void read_gpt_neox() {
    // GPTNeoXConfig: rotary on rotary_pct of each head, LayerNorm, biases, untied by default.
    read_sizes("num_hidden_layers", "hidden_size", "num_attention_heads");
    m_.seq = positive("max_position_embeddings");
    m_.kv_heads = m_.heads;
    m_.ffn = positive("intermediate_size");
    m_.ffn_kind = FfnKind::kGelu;
    m_.norm = NormKind::kLayerNorm;
    m_.position = PositionKind::kRope;
    // rotary_pct (GPTNeoXConfig's default 0.25); newer transformers also write partial_rotary_factor.
    m_.rotary_fraction = fraction_or("rotary_pct", fraction_or("partial_rotary_factor", 0.25));
    m_.tied_embeddings = flag_or("tie_word_embeddings", false);
    m_.linear_bias = true;
    // GPTNeoXConfig defaults: hidden_dropout 0.0, attention_dropout 0.0.
    dropouts(number_or("hidden_dropout", 0.0), number_or("attention_dropout", 0.0), 0.0);
    gelu_activation("hidden_act", "gelu");  // GPTNeoXConfig's default
  }

  void read_gpt2() {
    // GPT2Config: n_inner null means 4 x n_embd; learned positions; tied embeddings.
    read_sizes("n_layer", "n_embd", "n_head");
    m_.seq = positive("n_positions");
    m_.kv_heads = m_.heads;
    m_.ffn = positive_or("n_inner", 4 * m_.hidden);
    m_.ffn_kind = FfnKind::kGelu;
    m_.norm = NormKind::kLayerNorm;
    m_.position = PositionKind::kLearned;
    m_.tied_embeddings = flag_or("tie_word_embeddings", true);
    m_.linear_bias = true;
    // GPT2Config defaults: resid_pdrop 0.1, attn_pdrop 0.1, embd_pdrop 0.1, activation_function gelu_new.
    dropouts(number_or("resid_pdrop", 0.1), number_or("attn_pdrop", 0.1), number_or("embd_pdrop", 0.1));
    gelu_activation("activation_function", "gelu_new");
  }

  void read_falcon() {
    // FalconConfig: multi-query attention (one K/V head) unless new_decoder_architecture names
    // num_kv_heads; GeLU MLP of 4 x hidden (ffn_hidden_size in newer configs); LayerNorm; rotary
    // positions unless alibi; no biases; embeddings tied. Its parallel attention and MLP run the
    // same GEMMs and kernels as the sequential block, on one norm (Falcon-7B) or two (40B, 180B).
    read_sizes("num_hidden_layers", "hidden_size", "num_attention_heads");
    m_.seq = positive_or("max_position_embeddings", 2048);
    const bool new_arch = flag_or("new_decoder_architecture", false);
    const bool multi_query = flag_or("multi_query", true);
    m_.kv_heads = new_arch ? positive_or("num_kv_heads", m_.heads) : (multi_query ? 1 : m_.heads);
    if (!new_arch) (void)r_.child("num_kv_heads");
    m_.ffn = positive_or("ffn_hidden_size", 4 * m_.hidden);
    m_.ffn_kind = FfnKind::kGelu;
    m_.norm = NormKind::kLayerNorm;
    m_.position = PositionKind::kRope;
    if (const auto alibi = r_.optional<bool>("alibi", false); alibi.value) {
      refuse(alibi.loc, "alibi", "ALiBi position biases are not modelled (offsim has learned and rotary positions)");
    }
    // Falcon-7B's parallel block reads one norm; the new architecture (40B, 180B) has two.
    m_.parallel_block = flag_or("parallel_attn", true) && !new_arch;
    m_.tied_embeddings = flag_or("tie_word_embeddings", true);
    m_.linear_bias = flag_or("bias", false);
    dropouts(number_or("hidden_dropout", 0.0), number_or("attention_dropout", 0.0), 0.0);
  }

  void read_opt() {
    // OPTConfig: learned positions, LayerNorm, biases, ReLU MLP of ffn_dim (costed as the GeLU
    // MLP: same GEMMs, one elementwise kernel), tied embeddings, dropout 0.1.
    read_sizes("num_hidden_layers", "hidden_size", "num_attention_heads");
    m_.seq = positive("max_position_embeddings");
    m_.kv_heads = m_.heads;
    m_.ffn = positive("ffn_dim");
    choice("activation_function", {"relu", "gelu"}, "relu");
    if (const auto proj = r_.child("word_embed_proj_dim"); proj && !proj->is_null()) {
      if (const auto v = proj->as<std::int64_t>(); v && m_.hidden > 0 && *v != m_.hidden) {
        refuse(proj->location(), "word_embed_proj_dim",
               fmt::format("embeddings of width {} projected to hidden {} (OPT-350m) are not modelled", *v, m_.hidden));
      }
    }
    require_value<bool>("do_layer_norm_before", true, "post-norm layers are not modelled");
    m_.ffn_kind = FfnKind::kGelu;
    m_.norm = NormKind::kLayerNorm;
    m_.position = PositionKind::kLearned;
    m_.tied_embeddings = flag_or("tie_word_embeddings", true);
    m_.linear_bias = flag_or("enable_bias", true);
    // OPTDecoder: config.dropout after the embeddings and after attention and fc2.
    const double dropout = number_or("dropout", 0.1);
    dropouts(dropout, number_or("attention_dropout", 0.0), dropout);
  }

  void read_phi() {
    // PhiConfig (phi-1.5, phi-2): parallel attention and GeLU MLP (the sequential block's GEMMs
    // and kernels), LayerNorm, biases, rotary positions on part of each head, untied head.
    read_sizes("num_hidden_layers", "hidden_size", "num_attention_heads");
    m_.seq = positive("max_position_embeddings");
    m_.kv_heads = positive_or("num_key_value_heads", m_.heads);
    m_.ffn = positive("intermediate_size");
    gelu_activation("hidden_act", "gelu_new");
    m_.ffn_kind = FfnKind::kGelu;
    m_.norm = NormKind::kLayerNorm;
    m_.position = PositionKind::kRope;
    m_.rotary_fraction = fraction_or("partial_rotary_factor", 0.5);  // PhiConfig's default
    m_.tied_embeddings = flag_or("tie_word_embeddings", false);
    m_.linear_bias = true;
    m_.parallel_block = true;  // PhiDecoderLayer: one input_layernorm feeds attention and MLP
    m_.head_bias = true;       // PhiForCausalLM's lm_head has a bias
    // PhiConfig defaults: resid_pdrop 0.0, attention_dropout 0.0, embd_pdrop 0.0.
    dropouts(number_or("resid_pdrop", 0.0), number_or("attention_dropout", 0.0), number_or("embd_pdrop", 0.0));
  }

  const sim::config::Node& node_;
  sim::config::Context& ctx_;
  sim::config::MapReader r_;
  ModelSpec m_;
};

}  // namespace

namespace {
// A Hugging Face config.json, marked as one (training.framework's default reads it).
std::optional<ModelSpec> read_hf_config(const sim::config::Node& node) {
  auto m = HfConfigReader(node).read();
  if (m) m->hf_config = true;
  return m;
}
}  // namespace

std::optional<ModelSpec> parse_model(const sim::config::Node& node) {
  if (node.is_map() && node.yaml()["model_type"]) return read_hf_config(node);
  auto& ctx = node.context();
  const std::size_t errors_before = ctx.error_count();
  sim::config::MapReader r(node);
  ModelSpec m;
  m.name = r.required<std::string>("name").value;
  const auto positive = [&](std::string_view key) {
    const auto v = r.required<std::int64_t>(key);
    if (v.valid && v.value <= 0)
      ctx.error(v.loc, node.child_path(key), fmt::format("expected a positive integer, got {}", v.value));
    if (v.valid) check_max(ctx, v.loc, node.child_path(key), key, v.value);
    return v;
  };
  m.layers = positive("layers").value;
  m.hidden = positive("hidden").value;
  const auto heads = positive("heads");
  m.heads = heads.value;
  const auto kv_heads = positive("kv_heads");
  m.kv_heads = kv_heads.value;
  m.ffn = positive("ffn").value;
  m.vocab = positive("vocab").value;
  m.seq = positive("seq").value;
  m.ffn_kind = r.choice("ffn_kind", {"gelu", "swiglu"}).value == "swiglu" ? FfnKind::kSwiglu : FfnKind::kGelu;
  m.norm = r.choice("norm", {"layernorm", "rmsnorm"}).value == "rmsnorm" ? NormKind::kRmsNorm : NormKind::kLayerNorm;
  m.position = r.choice("position", {"learned", "rope"}).value == "rope" ? PositionKind::kRope : PositionKind::kLearned;
  m.tied_embeddings = r.required<bool>("tied_embeddings").value;
  m.linear_bias = r.required<bool>("linear_bias").value;
  // Dropout kernels (after attention, on its probabilities, after the MLP), as GPT-2/3 and
  // Megatron-LM's GPT train with; Llama-style models train without. Default: none.
  m.dropout = r.optional<bool>("dropout", false).value;
  m.hidden_dropout = m.attention_dropout = m.dropout;
  m.qkv_bias = r.optional<bool>("qkv_bias", false).value;
  const auto head_dim = r.optional<std::int64_t>("head_dim", 0);
  if (head_dim.valid && head_dim.value < 0)
    ctx.error(head_dim.loc, node.child_path("head_dim"),
              fmt::format("expected a positive integer, got {}", head_dim.value));
  if (head_dim.valid) check_max(ctx, head_dim.loc, node.child_path("head_dim"), "head_dim", head_dim.value);
  m.head_size = std::max<std::int64_t>(head_dim.value, 0);
  const auto rotary = r.optional<double>("rotary_fraction", 1.0);
  if (rotary.valid && sim::config::check_fraction(ctx, rotary.loc, node.child_path("rotary_fraction"), rotary.value)) {
    if (rotary.value < 1.0 && m.position != PositionKind::kRope) {
      ctx.error(rotary.loc, node.child_path("rotary_fraction"), "applies to rotary positions: set position: rope");
    } else {
      m.rotary_fraction = rotary.value;
    }
  }
  if (auto moe = r.child("moe")) {
    // Mixture of experts: `experts` MLPs of width ffn, experts_per_token of them per token, and
    // optionally a shared MLP of width shared_ffn every token runs.
    sim::config::MapReader e(*moe);
    const auto count = [&](std::string_view key, bool required) {
      const auto v = required ? e.required<std::int64_t>(key) : e.optional<std::int64_t>(key, 0);
      if (v.valid && (v.value < 0 || (required && v.value == 0)))
        ctx.error(v.loc, moe->child_path(key), fmt::format("expected a positive integer, got {}", v.value));
      if (v.valid) check_max(ctx, v.loc, moe->child_path(key), key, v.value);
      return v;
    };
    m.experts = std::max<std::int64_t>(count("experts", true).value, 0);
    const auto per_token = count("experts_per_token", true);
    m.experts_per_token = per_token.value;
    m.shared_ffn = std::max<std::int64_t>(count("shared_ffn", false).value, 0);
    // The first dense_layers layers with a dense MLP of width dense_ffn (DeepSeek's
    // first_k_dense_replace), the rest mixtures of experts.
    const auto dense = count("dense_layers", false);
    m.dense_layers = std::max<std::int64_t>(dense.value, 0);
    const auto dense_ffn = count("dense_ffn", m.dense_layers > 0);
    m.dense_ffn = std::max<std::int64_t>(dense_ffn.value, 0);
    if (dense.valid && m.layers > 0 && m.dense_layers >= m.layers) {
      ctx.error(dense.loc, moe->child_path("dense_layers"),
                fmt::format("expected fewer than the {} layers (some must be mixtures of experts)", m.layers));
    }
    // Tokens of the busiest expert over the mean; 1 (even routing) unless a measurement says more.
    const auto imbalance = e.optional<double>("routing_imbalance", 1.0);
    constexpr double kMaxImbalance = 1024.0;
    if (imbalance.valid && !(imbalance.value >= 1.0 && imbalance.value <= kMaxImbalance)) {
      ctx.error(imbalance.loc, moe->child_path("routing_imbalance"),
                fmt::format("expected the busiest expert's tokens over the mean, 1 to {:g}, got {}", kMaxImbalance,
                            imbalance.value));
    } else {
      m.routing_imbalance = imbalance.value;
    }
    if (per_token.valid && m.experts > 0 && m.experts_per_token > m.experts) {
      ctx.error(per_token.loc, moe->child_path("experts_per_token"),
                fmt::format("{} experts per token out of {} experts", m.experts_per_token, m.experts));
    }
  }
  if (heads.valid && m.heads > 0 && m.head_size == 0 && m.hidden % m.heads != 0) {
    ctx.error(heads.loc, node.child_path("heads"),
              fmt::format("hidden ({}) must be a multiple of heads ({})", m.hidden, m.heads));
  }
  if (kv_heads.valid && m.kv_heads > 0 && m.heads % m.kv_heads != 0) {
    ctx.error(kv_heads.loc, node.child_path("kv_heads"),
              fmt::format("heads ({}) must be a multiple of kv_heads ({})", m.heads, m.kv_heads));
  }
  if (ctx.error_count() == errors_before) check_parameters(m, node);
  if (ctx.error_count() != errors_before) return std::nullopt;
  return m;
}

}  // namespace offsim::models
