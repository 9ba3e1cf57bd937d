#include "models/transformer/model_parser.hpp"

#include <fmt/format.h>

#include <algorithm>

namespace offsim::models {

namespace {

// A Hugging Face config.json (`model: !include llama.config.json`): the keys offsim maps, by
// model_type; every other key is listed in one warning, never silently dropped.
std::optional<ModelSpec> parse_hf_model(const sim::config::Node& node) {
  auto& ctx = node.context();
  const std::size_t errors_before = ctx.error_count();
  sim::config::MapReader r(node);
  const std::string type = r.choice("model_type", {"llama", "mistral", "gpt_neox", "gpt2"}).value;
  ModelSpec m;
  const auto positive = [&](std::string_view key) {
    const auto v = r.required<std::int64_t>(key);
    if (v.valid && v.value <= 0)
      ctx.error(v.loc, node.child_path(key), fmt::format("expected a positive integer, got {}", v.value));
    return v.value;
  };
  const bool gpt2 = type == "gpt2";
  m.name = r.optional<std::string>("_name_or_path", type).value;
  m.layers = positive(gpt2 ? "n_layer" : "num_hidden_layers");
  m.hidden = positive(gpt2 ? "n_embd" : "hidden_size");
  m.heads = positive(gpt2 ? "n_head" : "num_attention_heads");
  m.vocab = positive("vocab_size");
  m.seq = positive(gpt2 ? "n_positions" : "max_position_embeddings");
  if (type == "llama" || type == "mistral") {
    // transformers' LlamaConfig defaults: num_key_value_heads = num_attention_heads,
    // tie_word_embeddings false, attention_bias false.
    m.kv_heads = r.optional<std::int64_t>("num_key_value_heads", m.heads).value;
    m.ffn = positive("intermediate_size");
    (void)r.choice("hidden_act", {"silu"});
    m.ffn_kind = FfnKind::kSwiglu;
    m.norm = NormKind::kRmsNorm;
    m.position = PositionKind::kRope;
    m.tied_embeddings = r.optional<bool>("tie_word_embeddings", false).value;
    m.linear_bias = r.optional<bool>("attention_bias", false).value;
    m.dropout = r.optional<double>("attention_dropout", 0.0).value > 0.0;
  } else if (type == "gpt_neox") {
    // GPTNeoXConfig: rotary on rotary_pct of each head, LayerNorm, biases, untied by default.
    m.kv_heads = m.heads;
    m.ffn = positive("intermediate_size");
    m.ffn_kind = FfnKind::kGelu;
    m.norm = NormKind::kLayerNorm;
    m.position = PositionKind::kRope;
    m.tied_embeddings = r.optional<bool>("tie_word_embeddings", false).value;
    m.linear_bias = true;
    // GPTNeoXConfig defaults: hidden_dropout 0.0, attention_dropout 0.0.
    m.dropout = r.optional<double>("hidden_dropout", 0.0).value > 0.0 ||
                r.optional<double>("attention_dropout", 0.0).value > 0.0;
  } else {
    // GPT2Config: n_inner null means 4 x n_embd; learned positions; tied embeddings.
    m.kv_heads = m.heads;
    std::int64_t inner = 4 * m.hidden;
    if (auto c = r.child("n_inner"); c && !c->is_null()) inner = c->as<std::int64_t>().value_or(inner);
    m.ffn = inner;
    m.ffn_kind = FfnKind::kGelu;
    m.norm = NormKind::kLayerNorm;
    m.position = PositionKind::kLearned;
    m.tied_embeddings = r.optional<bool>("tie_word_embeddings", true).value;
    m.linear_bias = true;
    // GPT2Config defaults: resid_pdrop 0.1, attn_pdrop 0.1.
    m.dropout = r.optional<double>("resid_pdrop", 0.1).value > 0.0 || r.optional<double>("attn_pdrop", 0.1).value > 0.0;
  }
  const std::vector<std::string> ignored = r.take_unread_keys();
  if (!ignored.empty()) {
    ctx.warning(node.location(), node.path(),
                fmt::format("Hugging Face config keys offsim does not model, ignored: {}", fmt::join(ignored, ", ")));
  }
  if (m.hidden > 0 && m.heads > 0 && m.hidden % m.heads != 0) {
    ctx.error(node.location(), node.path(),
              fmt::format("hidden ({}) is not a multiple of heads ({})", m.hidden, m.heads));
  }
  if (ctx.error_count() != errors_before) return std::nullopt;
  return m;
}

}  // namespace

std::optional<ModelSpec> parse_model(const sim::config::Node& node) {
  if (node.is_map() && node.yaml()["model_type"]) return parse_hf_model(node);
  auto& ctx = node.context();
  const std::size_t errors_before = ctx.error_count();
  sim::config::MapReader r(node);
  ModelSpec m;
  m.name = r.required<std::string>("name").value;
  const auto positive = [&](std::string_view key) {
    const auto v = r.required<std::int64_t>(key);
    if (v.valid && v.value <= 0)
      ctx.error(v.loc, node.child_path(key), fmt::format("expected a positive integer, got {}", v.value));
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
  if (heads.valid && m.heads > 0 && m.hidden % m.heads != 0) {
    ctx.error(heads.loc, node.child_path("heads"),
              fmt::format("hidden ({}) must be a multiple of heads ({})", m.hidden, m.heads));
  }
  if (kv_heads.valid && m.kv_heads > 0 && m.heads % m.kv_heads != 0) {
    ctx.error(kv_heads.loc, node.child_path("kv_heads"),
              fmt::format("heads ({}) must be a multiple of kv_heads ({})", m.heads, m.kv_heads));
  }
  if (ctx.error_count() != errors_before) return std::nullopt;
  return m;
}

}  // namespace offsim::models
