#include "models/transformer/model_parser.hpp"

#include <fmt/format.h>

namespace offsim::models {

std::optional<ModelSpec> parse_model(const sim::config::Node& node) {
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
