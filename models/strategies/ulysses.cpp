#include "models/strategies/ulysses.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <vector>

#include "models/strategies/context_parallel.hpp"
#include "models/strategies/phases/steps.hpp"

namespace offsim::models {

namespace {

// The model whose attention core is that of one Ulysses rank over the whole sequence: the full
// model split sp ways as tensor parallelism splits the heads. Its MLP widths are made to divide by
// sp and its experts dropped: only the attention core's kernel times are taken from it.
ModelSpec attention_core_model(const ModelSpec& m, int sp) {
  ModelSpec core = m;
  core.kv_heads = ulysses_kv_heads(m, sp);
  core.experts = core.experts_per_token = core.shared_ffn = core.dense_layers = 0;
  core.dense_ffn = 0;
  core.ffn = std::max<std::int64_t>(sp, m.ffn - m.ffn % sp);
  return core;
}

// The share of the layer's non-attention GEMM FLOPs that runs before the attention core (the
// projections producing q, k and v): where the layer's other kernels are split around it.
double before_attention_fraction(const ModelSpec& m, std::int64_t micro_batch) {
  double before = 0.0, all = 0.0;
  bool core_seen = false;
  for (const auto& g : layer_gemms(m, micro_batch, 1, 1)) {
    if (g.attention_core) {
      core_seen = true;
      continue;
    }
    all += g.flops();
    if (!core_seen) before += g.flops();
  }
  return all > 0.0 ? before / all : 0.0;
}

}  // namespace

std::int64_t ulysses_kv_heads(const ModelSpec& m, int sp) {
  return m.kv_heads < sp && m.kv_heads > 0 && sp % m.kv_heads == 0 ? sp : m.kv_heads;
}

std::string ulysses_unfit(const ModelSpec& m, int sp) {
  std::vector<std::string> uneven;
  if (m.heads % sp != 0) uneven.push_back(fmt::format("heads ({})", m.heads));
  if (ulysses_kv_heads(m, sp) % sp != 0) uneven.push_back(fmt::format("kv_heads ({}, nor sp by them)", m.kv_heads));
  if (m.seq % sp != 0) uneven.push_back(fmt::format("the sequence ({})", m.seq));
  if (uneven.empty()) return {};
  return fmt::format("Ulysses over {} ranks splits the attention heads and the sequence: {} must divide by it", sp,
                     fmt::join(uneven, ", "));
}

std::array<std::int64_t, 4> ulysses_exchange_elements(const ModelSpec& m, std::int64_t micro_batch, int sp) {
  const std::int64_t tokens = micro_batch * (m.seq / sp);
  const std::int64_t kv = ulysses_kv_heads(m, sp);
  return {tokens * m.q_width(), tokens * kv * m.head_dim(), tokens * kv * m.value_dim(),
          tokens * m.heads * m.value_dim()};
}

UlyssesShare::UlyssesShare(const IterationInputs& full, int sp)
    : full_(full),
      sp_(sp),
      model_([&] {
        ModelSpec share = context_parallel_share(full.model, sp);
        if (share.context <= 0) share.context = full.model.seq;  // learned positions: the model's count
        return share;
      }()),
      share_{model_, full.training, full.topology, full.costs, full.collectives, full.host, full.link_statistics},
      plan_{{Band{"sp", 1, sp}}, StageAlgorithm::kAllToAll, {}} {
  if (sp_ > 1) before_attention_ = before_attention_fraction(model_, full.training.micro_batch);
}

KernelTimes UlyssesShare::kernel_times(std::int64_t params_on_rank, std::int64_t tp, bool sequence_parallel,
                                       std::int64_t ep) const {
  KernelTimes k = models::kernel_times(inputs(), params_on_rank, tp, sequence_parallel, ep);
  if (sp_ == 1) return k;
  // The attention core over all s tokens with heads / sp in place of that of s / sp tokens.
  const ModelSpec core_model = attention_core_model(full_.model, sp_);
  const IterationInputs core_in{core_model,        full_.training, full_.topology,       full_.costs,
                                full_.collectives, full_.host,     full_.link_statistics};
  const KernelTimes core = models::kernel_times(core_in, params_on_rank, sp_);
  k.layer_fwd = k.layer_fwd - k.attention_fwd + core.attention_fwd;
  k.layer_bwd = k.layer_bwd - k.attention_bwd + core.attention_bwd;
  k.attention_fwd = core.attention_fwd;
  k.attention_bwd = core.attention_bwd;
  return k;
}

LayerTimes UlyssesShare::layer_times(const KernelTimes& k) const {
  return LayerTimes{k.layer_fwd,     k.layer_bwd,     k.experts_fwd,    k.experts_bwd,
                    k.attention_fwd, k.attention_bwd, before_attention_};
}

LayerCompute::Parallelism UlyssesShare::parallelism(int tp, int ep, const CollectivePlan& tp_plan,
                                                    const CollectivePlan& dispatch_plan,
                                                    std::int64_t activation_elements,
                                                    std::int64_t dispatch_elements) const {
  LayerCompute::Parallelism p{tp, ep, tp_plan, dispatch_plan, activation_elements, dispatch_elements};
  if (sp_ > 1) {
    p.sp = sp_;
    p.sp_plan = &plan_;
    p.sp_elements = ulysses_exchange_elements(full_.model, full_.training.micro_batch, sp_);
  }
  return p;
}

sim::Bytes UlyssesShare::stored_activations(std::int64_t tp, bool sequence_parallel) const {
  const TrainingSpec& t = full_.training;
  const sim::Bytes stored = stored_activations_on_tp_rank(model_, t, tp, sequence_parallel);
  if (sp_ == 1 || t.flash_attention) return stored;
  // Without flash attention the s x s terms (5 a s^2 b per layer, Korthikanti) are those of heads
  // / sp over s tokens: sp times the s / sp tokens' 5 a (s/sp)^2 b.
  TrainingSpec flash = t;
  flash.flash_attention = true;
  const sim::Bytes linear = stored_activations_on_tp_rank(model_, flash, tp, sequence_parallel);
  return sim::Bytes{linear.count + (stored.count - linear.count) * sp_};
}

LayerWork UlyssesShare::layer_forward() const {
  const TrainingSpec& t = full_.training;
  LayerWork w = models::layer_forward(inputs().model, t.micro_batch, t.flash_attention);
  if (sp_ > 1)
    w.attention = models::layer_forward(full_.model, t.micro_batch, t.flash_attention).attention * (1.0 / sp_);
  return w;
}

void UlyssesShare::finish(BuiltIteration& out, int ranks) const {
  if (sp_ == 1) return;
  const TrainingSpec& t = full_.training;
  set_work_figures(out, full_, static_cast<double>(t.micro_batch * t.grad_accum), ranks / sp_, sp_);
  out.approximations.push_back(fmt::format(
      "Ulysses sequence parallelism (sp = {}, the ds_config's sequence_parallel size): groups of {} consecutive "
      "ranks, each with s/sp tokens of the group's sequences outside attention; per layer the q, k and v "
      "all-to-alls (three, one after another) before the attention core, which runs over all s tokens with heads/sp, "
      "and the context's all-to-all after it, in backward the same four on the gradients in reverse order (and again "
      "in the recomputed forward with full recomputation), each sending (sp-1)/sp of the rank's b x s/sp x width "
      "bf16 buffer, costed as an all-to-all reduce-scatter of that buffer, on the critical path (no overlap with the "
      "layer's compute); the layer's other kernels split around the attention by the GEMM FLOPs before it; the "
      "all-to-all buffers and layouts' copies not counted; ZeRO over all dp x sp = {} ranks",
      sp_, sp_, ranks));
}

}  // namespace offsim::models
