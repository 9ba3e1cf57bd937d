#include "models/strategies/layer_kernels.hpp"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

namespace offsim::models {

using sim::Bytes;
using sim::TimePs;

namespace {
// The two gradient GEMMs of a forward GEMM C (m x n) = A (m x k) . B (k x n): the input gradient
// dA = dC . B^T (m x k x n) and the weight gradient dB = A^T . dC (k x n x m).
TimePs gradient_gemms_time(const CostModel& c, const GemmShape& g) {
  GemmShape input_grad = g, weight_grad = g;
  input_grad.n = g.k;
  input_grad.k = g.n;
  weight_grad.m = g.k;
  weight_grad.k = g.m;
  return c.gemm_time(input_grad) + c.gemm_time(weight_grad);
}
}  // namespace

bool runs_in_fp8(const GemmShape& g) {
  return !g.attention_core && g.name != "moe_router";
}

namespace {
// One projection under FP8: its three GEMMs at the FP8 rate (forward E4M3 x E4M3, the two
// gradient GEMMs with the E5M2 output gradient: Hopper's FP8 tensor cores run both formats at one
// rate, and the measured table is E4M3's; on the H100, E4M3 x E5M2 took 0.996 of E4M3 x E4M3's time
// over 80 shapes, bench/data/h100-sxm-gemm-fp8-e5m2.csv), the casts of its input (forward) and of its output
// gradient (backward), the weight's cast once per iteration (over `micro_batches`), and, under
// delayed scaling, the amax history's update (read and written once per forward and backward by
// one fused kernel for all tensors, so its bytes are costed without a launch floor here).
struct Fp8LayerGemm {
  TimePs forward{0}, backward{0}, casts_forward{0}, casts_backward{0};
};
Fp8LayerGemm fp8_gemm_times(const CostModel& c, const Fp8Training& f, const GemmShape& g, std::int64_t micro_batches) {
  Fp8LayerGemm out;
  GemmShape input_grad = g, weight_grad = g;
  input_grad.n = g.k;
  input_grad.k = g.n;
  weight_grad.m = g.k;
  weight_grad.k = g.m;
  out.forward = c.fp8_gemm_time(g);
  out.backward = c.fp8_gemm_time(input_grad) + c.fp8_gemm_time(weight_grad);
  const double per_element = fp8_cast_bytes_per_element(f.recipe);
  const double batch = static_cast<double>(g.batch);
  const auto bytes = [](double b) { return Bytes{static_cast<std::int64_t>(b)}; };
  const double input = batch * static_cast<double>(g.m) * static_cast<double>(g.k);
  const double grad_output = batch * static_cast<double>(g.m) * static_cast<double>(g.n);
  const double weight = batch * static_cast<double>(g.n) * static_cast<double>(g.k);
  out.casts_forward = c.memory_bound_time(bytes(per_element * input));
  out.casts_backward = c.memory_bound_time(bytes(per_element * grad_output), {}, true);
  const TimePs weight_cast = c.memory_bound_time(bytes(per_element * weight));
  out.casts_forward += TimePs{weight_cast.ps / std::max<std::int64_t>(micro_batches, 1)};
  if (f.recipe == Fp8Recipe::kDelayed) {
    // The history rolled (read and written) for every slot of the GEMM.
    const double history = 2.0 * static_cast<double>(f.amax_history) * kFp32Bytes * batch;
    const double rate = c.device().memory_bandwidth.bytes_per_s * c.device().memory_efficiency.value_or(1.0);
    out.casts_forward += sim::duration_of(history * kFp8ForwardSlotsPerGemm, rate);
    out.casts_backward += sim::duration_of(history * kFp8BackwardSlotsPerGemm, rate);
  }
  return out;
}
}  // namespace

sim::Bytes fp8_state_bytes(const ModelSpec& m, const Fp8Training& f, std::int64_t tp, std::int64_t ep,
                           std::int64_t layers) {
  std::int64_t weights = 0, gemms = 0;
  for (const auto& g : layer_gemms(m, 1, tp, ep)) {
    if (!runs_in_fp8(g)) continue;
    weights += g.batch * g.n * g.k;
    gemms += g.batch;
  }
  return Bytes{layers * (weights * kFp8WeightCopyBytesPerParam + gemms * fp8_scaling_bytes_per_gemm(f))};
}

std::string fp8_approximation(const Fp8Training& f, bool userbuffers) {
  return fmt::format(
      "FP8 ({}, Transformer Engine under Megatron-Core): the projections' GEMMs at the device's measured FP8 E4M3 "
      "rate by shape, the gradient GEMMs with E5M2 operands at that rate (as measured on the H100); attention cores, "
      "the output "
      "layer and MoE routers in bf16; each GEMM's input and output gradient cast (cast-transpose{}) and each "
      "weight's cast once per iteration costed by their bytes{}; the FP8 weight copies (weight and transpose) and "
      "the scaling state ({}) in memory, the projections' inputs kept for backward in FP8 (1 B); not modelled: "
      "the amax all-reduce across ranks, the casts TE fuses into the norms{}",
      fp8_recipe_name(f.recipe), f.recipe == Fp8Recipe::kCurrent ? " after an amax pass" : "",
      f.recipe == Fp8Recipe::kDelayed ? ", the amax history's update by its bytes" : "",
      f.recipe == Fp8Recipe::kDelayed ? fmt::format("amax history of {} entries", f.amax_history)
                                      : std::string{"scales only"},
      userbuffers ? ""
                  : ", FP8 all-gathers under sequence parallelism, the userbuffers overlap of tensor-parallel "
                    "communication with the GEMMs");
}

// Flash attention's backward runs 5 matrix products where its forward runs 2 (Dao 2023,
// FlashAttention-2, section 3.1.2: it recomputes the scores): 2.5 times the forward's FLOPs.
constexpr double kFlashBackwardOverForward = 2.5;

namespace {
// The layer's GEMM times on one rank, summed by where they run.
struct LayerGemmTimes {
  TimePs forward{0}, backward{0};
  TimePs attention_core{0};                // forward Q K^T and softmax . V (or flash attention's core)
  TimePs fp8_forward{0}, fp8_backward{0};  // FP8 casts and their amax bookkeeping
};

// Step 1: the layer's GEMMs by shape on one rank of the tensor-parallel group (Megatron's
// column/row split). Backward runs the two gradient GEMMs of each forward one, each with its own
// shape; flash attention's fused backward core costs kFlashBackwardOverForward forward cores.
// Under FP8 (Transformer Engine, fp8.hpp) the projections add their cast kernels, their amax
// bookkeeping, and each weight's cast once per iteration spread over its micro-batches. Adds the
// attention's and the experts' shares to `k`.
LayerGemmTimes layer_gemm_times(const CostModel& c, const TrainingSpec& t, const ModelSpec& m, std::int64_t tp,
                                std::int64_t ep, KernelTimes& k) {
  LayerGemmTimes out;
  const auto& measured_flash = c.device().flash_attention;
  for (const auto& g : layer_gemms(m, t.micro_batch, tp, ep)) {
    if (t.fp8 && runs_in_fp8(g)) {
      const Fp8LayerGemm f = fp8_gemm_times(c, *t.fp8, g, t.grad_accum);
      out.forward += f.forward;
      out.backward += f.backward;
      out.fp8_forward += f.casts_forward;
      out.fp8_backward += f.casts_backward;
      if (g.expert) {
        k.experts_fwd += f.forward + f.casts_forward;
        k.experts_bwd += f.backward + f.casts_backward;
      }
      continue;
    }
    const bool fused = g.attention_core && t.flash_attention;
    // Hugging Face's sdpa attention at the device's measured SDPA rates. The generic pytorch
    // framework keeps the GEMM-grid cost (its validation group, bench/torch/transformer_bench.py,
    // and llm-foundry's runs came out further off with the SDPA table: docs/models.md).
    // torchtitan's SDPA puts the FlashAttention backend first on the H100
    // (torchtitan/models/attention.py, ScaledDotProductAttention._init_backend).
    const bool torchtitan = t.framework == Framework::kTorchtitan;
    const bool torch_sdpa = t.framework == Framework::kHfTransformers || torchtitan;
    // With dropout on the probabilities the run takes FlashAttention's backend (the kernel
    // PyTorch's default pick, cuDNN's, is measured without dropout only).
    const bool prob_dropout = t.framework == Framework::kHfTransformers ? m.attention_dropout : m.dropout;
    if (const auto sdpa = fused && torch_sdpa && !m.mla()
                              ? c.sdpa_rates(prob_dropout || torchtitan ? "flash_attention" : "default", m.head_dim(),
                                             m.seq, m.kv_heads < m.heads)
                              : std::nullopt) {
      // PyTorch's scaled_dot_product_attention at its measured rates (the backend it picks by
      // default): one kernel for Q K^T and P V, the causal FLOPs of Q K^T's shape (2 b h s span d)
      // forward, 2.5 x those backward.
      if (g.name != "attention_scores") continue;
      const double flops = g.flops();
      const TimePs fwd = sim::duration_of(flops, sdpa->first, "FLOP");
      const TimePs bwd = sim::duration_of(kFlashBackwardOverForward * flops, sdpa->second, "FLOP");
      out.forward += fwd;
      out.attention_core += fwd;
      out.backward += bwd;
      k.attention_bwd += bwd;
      continue;
    }
    if (fused && measured_flash) {
      // The device's measured flash-attention kernels: forward FLOPs at the forward efficiency,
      // 2.5 x those FLOPs at the backward efficiency (FlashAttention-2's own count).
      const double peak = c.device().peak_matrix_bf16.flops_per_s;
      const double flops = g.flops();
      const TimePs fwd = sim::duration_of(flops, peak * measured_flash->forward, "FLOP");
      out.forward += fwd;
      out.attention_core += fwd;
      const TimePs bwd = sim::duration_of(kFlashBackwardOverForward * flops, peak * measured_flash->backward, "FLOP");
      out.backward += bwd;
      k.attention_bwd += bwd;
      continue;
    }
    const TimePs d = c.gemm_time(g, fused);
    out.forward += d;
    if (g.attention_core) out.attention_core += d;
    if (fused) {
      const TimePs bwd{std::llround(kFlashBackwardOverForward * static_cast<double>(d.ps))};
      out.backward += bwd;
      k.attention_bwd += bwd;
      continue;
    }
    const TimePs b = gradient_gemms_time(c, g);
    out.backward += b;
    if (g.attention_core) k.attention_bwd += b;
    if (g.expert) {
      k.experts_fwd += d;
      k.experts_bwd += b;
    }
  }
  return out;
}

// The layer's non-GEMM kernel times on one rank.
struct LayerElementwiseTimes {
  TimePs forward{0}, backward{0};
  TimePs attention{0};  // forward kernels of the s x s attention (recomputed by selective recompute)
};

// Step 2: the non-GEMM kernels one by one (transformer.hpp, layer_elementwise_kernels): each
// streams its bytes at the device's measured efficiency for its kind, never faster than a kernel
// launch. Adds the attention's and the experts' shares to `k`.
LayerElementwiseTimes layer_elementwise_times(const CostModel& c, const TrainingSpec& t, const ModelSpec& m,
                                              std::int64_t tp, bool sequence_parallel, std::int64_t ep,
                                              KernelTimes& k) {
  LayerElementwiseTimes out;
  for (const auto& kernel :
       layer_elementwise_kernels(m, t.micro_batch, tp, t.attention_kernels(), sequence_parallel, ep, t.framework)) {
    if (kernel.forward_bytes > 0.0) {
      const TimePs d = c.memory_bound_time(Bytes{static_cast<std::int64_t>(kernel.forward_bytes)}, kernel.kernel);
      out.forward += d;
      if (kernel.attention_core) out.attention += d;
      if (kernel.expert) k.experts_fwd += d;
    }
    if (kernel.backward_bytes > 0.0) {
      const TimePs d =
          c.memory_bound_time(Bytes{static_cast<std::int64_t>(kernel.backward_bytes)}, kernel.kernel, true);
      out.backward += d;
      if (kernel.attention_core) k.attention_bwd += d;
      if (kernel.expert) k.experts_bwd += d;
    }
  }
  return out;
}

// Step 3: the layer's forward and backward from its GEMMs and other kernels, backward including
// what the recomputation policy runs again (the whole forward, or selective recompute's attention).
void combine_layer_times(const TrainingSpec& t, const LayerGemmTimes& gemms, const LayerElementwiseTimes& elementwise,
                         KernelTimes& k) {
  const TimePs layer_fwd = gemms.forward + elementwise.forward + gemms.fp8_forward;
  const TimePs elementwise_bwd = elementwise.backward + gemms.fp8_backward;
  TimePs recompute{0};
  if (t.recompute == Recompute::kFull) recompute = layer_fwd;
  if (t.recompute == Recompute::kSelective) recompute = gemms.attention_core + elementwise.attention;
  k.layer_fwd = layer_fwd;
  k.attention_fwd = gemms.attention_core + elementwise.attention;
  if (t.recompute != Recompute::kNone) k.attention_bwd += k.attention_fwd;
  k.layer_bwd = recompute + gemms.backward + elementwise_bwd;
}

// Step 4: the output layer (logits GEMM, the logits' traffic and any soft-capping), the
// embedding's lookup and its gradient, and the optimizer step over the rank's parameters.
void head_embedding_and_adam_times(const CostModel& c, const TrainingSpec& t, const ModelSpec& m,
                                   std::int64_t params_on_rank, std::int64_t tp, KernelTimes& k) {
  const std::int64_t tokens = t.micro_batch * m.seq;
  const GemmShape head = head_gemm(m, t.micro_batch, tp);
  const Bytes logits{tokens * ((m.vocab + tp - 1) / tp) * kLogitBytesPerElement};
  k.head_fwd = c.gemm_time(head);
  k.head_bwd = gradient_gemms_time(c, head);
  const FrameworkProfile& f = framework_profile(t.framework);
  if (const ModuleChain* loss = f.chain("loss")) {
    // The framework's loss kernels one by one over the logits (Hugging Face: upcast to fp32, then
    // log-softmax and NLL; backward their gradients and the cast back).
    const double n = static_cast<double>(tokens * ((m.vocab + tp - 1) / tp));
    const auto cost = [&](const std::vector<ChainKernel>& chain, bool backward) {
      TimePs sum{0};
      for (const auto& kernel : chain) {
        const double bytes = kernel.bytes > 0.0 ? kernel.bytes * n : 8.0 * static_cast<double>(tokens);
        sum += c.memory_bound_time(Bytes{static_cast<std::int64_t>(bytes)}, kernel.kernel_class, backward);
      }
      return sum;
    };
    k.head_fwd += cost(loss->forward, false);
    k.head_bwd += cost(loss->backward, true);
  } else {
    k.head_fwd += c.memory_bound_time(logits);
    k.head_bwd += c.memory_bound_time(logits);
  }
  if (m.logit_softcap) {
    // cap x tanh(logits / cap) as Hugging Face's Gemma2ForCausalLM runs it: divide, tanh, multiply,
    // each reading and writing the bf16 logits (4 B an element); backward alike.
    const Bytes pass{tokens * ((m.vocab + tp - 1) / tp) * 2 * kBf16Bytes};
    for (int i = 0; i < 3; ++i) {
      k.head_fwd += c.memory_bound_time(pass, "activation");
      k.head_bwd += c.memory_bound_time(pass, "activation", true);
    }
  }
  k.embed_fwd = c.memory_bound_time(Bytes{tokens * m.hidden * kBf16Bytes});
  k.embed_bwd = c.memory_bound_time(Bytes{tokens * m.hidden * kBf16Bytes * 2});
  if (const ModuleChain* drop = f.chain("embedding_dropout"); drop && m.embedding_dropout) {
    const double e = static_cast<double>(tokens * m.hidden);
    for (const auto& kernel : drop->forward) {
      k.embed_fwd += c.memory_bound_time(Bytes{static_cast<std::int64_t>(kernel.bytes * e)}, kernel.kernel_class);
    }
    for (const auto& kernel : drop->backward) {
      k.embed_bwd += c.memory_bound_time(Bytes{static_cast<std::int64_t>(kernel.bytes * e)}, kernel.kernel_class, true);
    }
  }
  k.adam = c.memory_bound_time(Bytes{params_on_rank * kAdamTrafficBytesPerParam});
}

KernelTimes uniform_kernel_times(const IterationInputs& in, const ModelSpec& m, std::int64_t params_on_rank,
                                 std::int64_t tp, bool sequence_parallel, std::int64_t ep) {
  const auto& t = in.training;
  const auto& c = in.costs;
  KernelTimes k;
  const LayerGemmTimes gemms = layer_gemm_times(c, t, m, tp, ep, k);
  const LayerElementwiseTimes elementwise = layer_elementwise_times(c, t, m, tp, sequence_parallel, ep, k);
  combine_layer_times(t, gemms, elementwise, k);
  head_embedding_and_adam_times(c, t, m, params_on_rank, tp, k);
  return k;
}
}  // namespace

KernelTimes kernel_times(const IterationInputs& in, std::int64_t params_on_rank, std::int64_t tp,
                         bool sequence_parallel, std::int64_t ep) {
  const ModelSpec& m = in.model;
  KernelTimes k = uniform_kernel_times(in, m, params_on_rank, tp, sequence_parallel, ep);
  if (!m.moe() || m.dense_layers <= 0 || m.layers <= 0) return k;
  // A mixture of experts whose first layers are dense (DeepSeek): every layer's times are the
  // mean over the layers of a dense layer's (dense_ffn, no experts) and a sparse layer's, so the
  // layers of a rank add up to the model's work (the dense layers sit on the first pipeline
  // stage in truth: an approximation with pipelining).
  ModelSpec dense = m;
  dense.experts = dense.experts_per_token = dense.shared_ffn = dense.dense_layers = 0;
  dense.ffn = m.dense_ffn;
  const KernelTimes d = uniform_kernel_times(in, dense, params_on_rank, tp, sequence_parallel, ep);
  const auto mean = [&](TimePs sparse, TimePs dense_time) {
    const double L = static_cast<double>(m.layers), n = static_cast<double>(m.dense_layers);
    return TimePs{
        std::llround((static_cast<double>(sparse.ps) * (L - n) + static_cast<double>(dense_time.ps) * n) / L)};
  };
  k.layer_fwd = mean(k.layer_fwd, d.layer_fwd);
  k.layer_bwd = mean(k.layer_bwd, d.layer_bwd);
  k.experts_fwd = mean(k.experts_fwd, TimePs{0});
  k.experts_bwd = mean(k.experts_bwd, TimePs{0});
  return k;
}

std::string bf16_optimizer_approximation() {
  return "optimizer: DeepSpeed's BF16_Optimizer (fp32 gradient accumulation at ZeRO stage 0-1): fp32 gradient "
         "all-reduce after the backward whatever overlap_comm says (engine.py: allreduce_gradients after the "
         "optimizer's backward), master weights and Adam states partitioned over the data-parallel group, bf16 "
         "parameters all-gathered after the step; its passes over the fp32 gradient buffer costed by their bytes "
         "(adding each "
         "micro-batch's bf16 gradients 18 B, the gradient norm and the zeroing 8 B per parameter); the scaling of "
         "gradient clipping is not";
}

std::string non_gemm_kernels_approximation(const TrainingSpec& t) {
  const char* attention = "";
  switch (t.attention_kernels()) {
    case AttentionKernels::kUnfused:
      attention = "attention scale, mask, softmax and dropout as PyTorch's separate kernels over all scores";
      break;
    case AttentionKernels::kFusedSoftmax:
      attention =
          "attention scale, mask and softmax as Megatron's fused kernel (loads the unmasked half of the scores, "
          "writes all; at the PyTorch softmax's measured efficiency), dropout apart";
      break;
    case AttentionKernels::kFlash:
      attention = "attention scale, mask, softmax and dropout inside flash attention";
      break;
  }
  if (t.framework == Framework::kHfTransformers) {
    return fmt::format(
        "non-GEMM layer kernels are Hugging Face transformers' eager kernels one by one, each costed by its HBM "
        "bytes at its class's efficiency measured on the H100 (configs/frameworks/hf-transformers.yaml: RMSNorm "
        "in fp32 as 8 kernels forward and 14 backward, rotary embedding as mul/neg/cat/mul/add, gelu_new as 8 "
        "kernels, SwiGLU as silu then mul, dropouts from the config's keys, the attention output's copy, the loss "
        "on logits upcast to fp32; {}); attention by the device's measured SDPA rates where its table has them "
        "(FlashAttention's with dropout on the probabilities, PyTorch's default pick otherwise), measured at 16k "
        "tokens per call (the host's per-operator dispatch: its own line); repeat_kv copies for GQA and the rotary "
        "cos/sin "
        "computation are not costed",
        attention);
  }
  if (t.framework == Framework::kTorchtitan) {
    return fmt::format(
        "non-GEMM layer kernels as torch.compile fuses torchtitan's blocks (its published runs compile): the "
        "generic list (norms, activation, residual adds; {}), each costed by its HBM bytes, one kernel per norm; "
        "attention by the device's measured SDPA rates of the FlashAttention backend where its table has them "
        "(torchtitan/models/attention.py puts it first); eager torchtitan's separate RMSNorm, rotary and SwiGLU "
        "kernels are not costed",
        attention);
  }
  return fmt::format(
      "non-GEMM layer kernels are PyTorch's eager kernels (norms, activation, dropouts, residual adds, bias "
      "gradients; {}), each costed by its HBM bytes; a norm is one kernel (PyTorch's layer_norm, apex's fused "
      "RMSNorm), not the several of an eager RMSNorm; Megatron's bias-dropout-add fusion would move fewer bytes; "
      "without sequence parallelism norms and dropouts run whole on every tensor-parallel rank",
      attention);
}

ParameterCounts tensor_parallel_share(const ParameterCounts& all, std::int64_t tp) {
  if (tp == 1) return all;
  const auto share = [&](std::int64_t n) { return (n + tp - 1) / tp; };
  ParameterCounts c;
  c.per_layer = share(all.per_layer);
  // The layer count (per_layer is the mean of mixed dense and MoE layers: rounded division).
  c.layers = c.per_layer * (all.per_layer > 0 ? (all.layers + all.per_layer / 2) / all.per_layer : 0);
  c.embedding = share(all.embedding);
  c.position = share(all.position);
  c.final_norm = share(all.final_norm);
  c.output_head = share(all.output_head);
  c.total = c.layers + c.embedding + c.position + c.final_norm + c.output_head;
  c.active = share(all.active);
  c.experts_per_layer = share(all.experts_per_layer);
  return c;
}

namespace {
// Bytes per layer that FP8 saves on the activations kept for backward: Transformer Engine keeps
// each projection's input for the weight gradient in FP8 (linear.py _Linear.forward saves
// inputmat_t, layernorm_linear.py and layernorm_mlp.py their FP8 ln_out and fc2 input), 1 B where
// bf16 keeps 2 B: the QKV input (h), the attention projection's input (q), the MLP's input (h)
// and its down projection's input (f; each routed expert's for a mixture of experts, and the
// shared MLP's). Full recomputation keeps none of them.
double fp8_activation_saving(const ModelSpec& m, const TrainingSpec& t) {
  if (!t.fp8 || t.recompute == Recompute::kFull) return 0.0;
  const double tokens = static_cast<double>(t.micro_batch * m.seq);
  const double h = static_cast<double>(m.hidden);
  const double mlp = m.moe() ? static_cast<double>(m.experts_per_token) * (h + static_cast<double>(m.ffn)) +
                                   (m.shared_ffn > 0 ? static_cast<double>(m.shared_ffn) : 0.0)
                             : h + static_cast<double>(m.ffn);
  return tokens * (h + static_cast<double>(m.q_width()) + mlp) * static_cast<double>(kBf16Bytes - kFp8Bytes);
}
}  // namespace

sim::Bytes stored_activations_on_tp_rank(const ModelSpec& m, const TrainingSpec& t, std::int64_t tp,
                                         bool sequence_parallel) {
  const Bytes bf16 = stored_activation_bytes(m, t.micro_batch, t.recompute, t.flash_attention);
  // Under FP8 the projections' inputs are kept in 1 B (split by tp like the rest: an approximation
  // without sequence parallelism, where the QKV and MLP inputs stay whole).
  const Bytes stored{bf16.count - static_cast<std::int64_t>(fp8_activation_saving(m, t))};
  if (tp == 1) return stored;
  if (sequence_parallel) return Bytes{stored.count / tp};
  if (t.recompute == Recompute::kFull) return stored;
  return Bytes{
      static_cast<std::int64_t>(static_cast<double>(stored.count) * (10.0 + 24.0 / static_cast<double>(tp)) / 34.0)};
}

}  // namespace offsim::models
