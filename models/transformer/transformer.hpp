#pragma once
// Decoder-only transformer shapes, exact parameter counts, and per-layer work.
//
// FLOPs count a multiply-add as 2. Attention core FLOPs count the full s x s score matrix (no
// causal halving), as Megatron-LM's reported TFLOPs do, so figures compare with published ones.
#include <algorithm>
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "models/transformer/framework.hpp"
#include "sim/core/units.hpp"

namespace offsim::models {

enum class FfnKind { kGelu, kSwiglu };
enum class NormKind { kLayerNorm, kRmsNorm };
enum class PositionKind { kLearned, kRope };
enum class Recompute { kNone, kSelective, kFull };
/// The MLP's activation function as the framework writes it: one PyTorch kernel (F.gelu, exact or
/// tanh-approximated, ReLU, SiLU), or Hugging Face's gelu_new / gelu_fast (GPT-2, Phi), a Python
/// formula that runs as a chain of eager kernels (configs/frameworks/hf-transformers.yaml).
enum class Activation { kGelu, kGeluNew };

/// What runs between the attention's two batched products (Q K^T, then P V) when the scores are
/// materialised, or flash attention, which never writes them out.
enum class AttentionKernels {
  /// PyTorch eager: the scale, the causal mask fill and the softmax each read and write all
  /// s x s scores (then dropout, when the model has it).
  kUnfused,
  /// Megatron's fused scale-mask-softmax (fused_kernels/scaled_upper_triang_masked_softmax.h):
  /// one kernel per direction that loads only the unmasked lower triangle of each row and writes
  /// the whole row (then dropout, when the model has it).
  kFusedSoftmax,
  /// Flash attention: scale, mask, softmax and dropout inside the attention kernel.
  kFlash,
};

struct ModelSpec {
  std::string name;
  std::int64_t layers = 0;
  std::int64_t hidden = 0;
  std::int64_t heads = 0;
  std::int64_t kv_heads = 0;  // = heads without grouped-query attention
  std::int64_t ffn = 0;       // intermediate size (per branch for SwiGLU)
  std::int64_t vocab = 0;     // padded vocabulary
  std::int64_t seq = 0;       // the sequence length trained (training.seq; the model's context by default)
  std::int64_t context = 0;   // positions the model has (max_position_embeddings, n_positions); 0: seq
  FfnKind ffn_kind = FfnKind::kGelu;
  NormKind norm = NormKind::kLayerNorm;
  PositionKind position = PositionKind::kLearned;
  bool tied_embeddings = false;
  bool linear_bias = true;
  bool dropout = false;  // dropout after attention, on its probabilities and after the MLP (GPT-2/3)
  // A Hugging Face config.json's dropout keys, each > 0 (`dropout` above is any of them): on the
  // hidden state after attention and after the MLP (resid_pdrop, hidden_dropout), on the attention
  // probabilities (attn_pdrop, attention_dropout), after the embedding (embd_pdrop). Read by the
  // hf-transformers framework's kernels; an offsim model's `dropout` sets the first two.
  bool hidden_dropout = false;
  bool attention_dropout = false;
  bool embedding_dropout = false;
  Activation activation = Activation::kGelu;
  bool hf_config = false;     // read from a Hugging Face config.json (training.framework's default)
  std::string hf_model_type;  // its model_type ("llama", "gpt2", ...); empty for an offsim model file
  bool qkv_bias = false;  // biases on the Q, K and V projections only (Qwen2); linear_bias puts one on every projection
  // Attention and MLP side by side on one shared norm (GPT-J, Phi-2, Falcon-7B): one norm per
  // layer instead of two.
  bool parallel_block = false;
  bool head_bias = false;      // a bias on the output projection (Phi-2)
  std::int64_t head_size = 0;  // width of one attention head; 0 = hidden / heads (Gemma-7B: 256 with hidden 3,072)
  // The share of each head's dimensions rotary positions rotate (GPT-NeoX's rotary_pct 0.25, Phi's
  // partial_rotary_factor 0.5); 1 for Llama-style models.
  double rotary_fraction = 1.0;
  // Mixture of experts (Mixtral, Qwen2-MoE, DeepSeek-MoE): every layer's MLP is `experts` experts of
  // width `ffn` of which each token runs `experts_per_token`, chosen by a router (hidden x experts),
  // plus, when shared_ffn > 0, an MLP of that width every token runs (the "shared experts").
  std::int64_t experts = 0;  // 0: a dense MLP of width ffn
  std::int64_t experts_per_token = 0;
  std::int64_t shared_ffn = 0;
  // RMSNorm over each head of Q and of K before rotary positions (Qwen3's q_norm and k_norm): one
  // weight of head_dim each per layer.
  bool qk_norm = false;
  // A norm after the attention and after the MLP besides the norms before them (Gemma-2's
  // post_attention_layernorm and post_feedforward_layernorm): four norms per layer.
  bool post_norms = false;
  // Soft-capping, cap x tanh(x / cap): of the output logits (Gemma-2's final_logit_softcapping),
  // and of the attention scores (attn_logit_softcapping; inside flash attention's kernel, a kernel
  // of its own over the scores otherwise).
  bool logit_softcap = false;
  bool attention_softcap = false;
  // Sliding-window attention: `sliding_window_layers` of the layers attend to the last
  // `sliding_window` positions only (Gemma-2: every other layer, 4,096). 0: every layer global.
  std::int64_t sliding_window = 0;
  std::int64_t sliding_window_layers = 0;
  // Multi-head latent attention (DeepSeek-V2/V3, modeling_deepseek.py DeepseekV3Attention): keys and
  // values from a compressed latent of kv_lora_rank (kv_a_proj_with_mqa: hidden -> kv_lora_rank +
  // qk_rope_dim, a norm, kv_b_proj: kv_lora_rank -> heads x (qk_nope_dim + v_head_dim)), queries
  // through a latent of q_lora_rank (q_a_proj, a norm, q_b_proj; 0: one q_proj), each head's
  // query and key qk_nope_dim + qk_rope_dim wide (rotary positions on the rope part only), values
  // v_head_dim wide. kv_lora_rank 0: ordinary attention.
  std::int64_t q_lora_rank = 0;
  std::int64_t kv_lora_rank = 0;
  std::int64_t qk_nope_dim = 0;
  std::int64_t qk_rope_dim = 0;
  std::int64_t v_head_dim = 0;
  // A mixture of experts whose first `dense_layers` layers have a dense MLP of width dense_ffn
  // (DeepSeek's first_k_dense_replace and intermediate_size); the other layers are MoE.
  std::int64_t dense_layers = 0;
  std::int64_t dense_ffn = 0;
  bool router_bias = false;  // a bias per expert in the router (DeepSeek-V3's e_score_correction_bias)
  // Tokens of the busiest expert over the mean (max / mean tokens per expert), >= 1: the slowest
  // expert's work and the all-to-all's largest message. 1: even routing.
  double routing_imbalance = 1.0;

  [[nodiscard]] bool mla() const { return kv_lora_rank > 0; }
  [[nodiscard]] std::int64_t head_dim() const {
    if (mla()) return qk_nope_dim + qk_rope_dim;
    return head_size > 0 ? head_size : hidden / heads;
  }
  /// Width of one head's values (MLA: v_head_dim; otherwise the head width).
  [[nodiscard]] std::int64_t value_dim() const { return mla() ? v_head_dim : head_dim(); }
  [[nodiscard]] std::int64_t moe_layers() const { return moe() ? layers - dense_layers : 0; }
  [[nodiscard]] std::int64_t q_width() const { return heads * head_dim(); }  // = hidden unless head_size says otherwise
  [[nodiscard]] std::int64_t kv_width() const { return kv_heads * head_dim(); }
  [[nodiscard]] bool moe() const { return experts > 0; }
  [[nodiscard]] int norms_per_layer() const { return (parallel_block ? 1 : 2) + (post_norms ? 2 : 0); }
  /// The keys a query attends to, averaged over the layers (FLOPs are linear in it): seq for
  /// global attention, min(window, seq) on the sliding-window layers. Full s x s convention.
  [[nodiscard]] std::int64_t attention_span() const {
    if (sliding_window <= 0 || sliding_window_layers <= 0 || layers <= 0) return seq;
    const std::int64_t local = std::min(sliding_window, seq);
    return (seq * (layers - sliding_window_layers) + local * sliding_window_layers + layers - 1) / layers;
  }
};

struct ParameterCounts {
  std::int64_t per_layer = 0;
  std::int64_t layers = 0;  // per_layer x layers
  std::int64_t embedding = 0;
  std::int64_t position = 0;
  std::int64_t final_norm = 0;
  std::int64_t output_head = 0;  // 0 when tied to the embedding
  std::int64_t total = 0;
  std::int64_t active = 0;             // parameters one token runs through: total less the experts it is not routed to
  std::int64_t experts_per_layer = 0;  // of per_layer: the weights of all routed experts (0 when dense)
};

[[nodiscard]] ParameterCounts count_parameters(const ModelSpec& m);

/// Forward work of one transformer layer on `micro_batch` sequences of m.seq tokens.
struct LayerWork {
  sim::Flops gemm{};          // QKV, attention output, MLP projections
  sim::Flops attention{};     // QK^T and attention-times-V
  sim::Bytes activations{0};  // bytes the layer keeps for backward without recomputation
};

[[nodiscard]] LayerWork layer_forward(const ModelSpec& m, std::int64_t micro_batch, bool flash_attention);

/// One non-GEMM kernel of a layer on one tensor-parallel rank, as PyTorch's eager kernels run it
/// (no fusion across operations): the HBM bytes it reads and writes forward and backward, for
/// bf16 tensors (1-byte dropout masks). `kernel` names its efficiency class in the calibration
/// table (layernorm, activation, attention_scale, attention_softmax, dropout, residual_add,
/// bias_grad); bench/torch/transformer_bench.py measures each class with these byte counts.
/// The kernel classes ElementwiseKernel::kernel takes (what a calibration table's
/// memory_bound.kernels may name).
inline constexpr std::array<const char*, 7> kElementwiseKernelClasses{
    "layernorm", "activation", "attention_scale", "attention_softmax", "dropout", "residual_add", "bias_grad"};

struct ElementwiseKernel {
  const char* kernel = "";
  double forward_bytes = 0.0;
  double backward_bytes = 0.0;
  bool attention_core = false;  // part of the s x s attention (recomputed by selective recompute)
  bool expert = false;          // runs on an expert's routed tokens (between the all-to-alls of expert parallelism)
  int forward_ops = 1;          // eager operators its forward runs (each dispatched by the host; 0 without forward)
};

/// The layer's non-GEMM kernels. Without sequence parallelism the norms, dropouts and residual
/// adds run on the whole hidden state on every tensor-parallel rank; with it (Korthikanti et al.)
/// each rank runs them on 1/tp of the sequence. The attention heads and the MLP activation are
/// split by `tp` either way. `attention` says which kernels turn the scores into probabilities;
/// flash attention fuses them into its kernel (costed with the attention GEMMs).
/// With expert parallelism over `ep` ranks a rank runs experts / ep experts, each on the tokens
/// routed to it from all ep ranks.
[[nodiscard]] std::vector<ElementwiseKernel> layer_elementwise_kernels(const ModelSpec& m, std::int64_t micro_batch,
                                                                       std::int64_t tp, AttentionKernels attention,
                                                                       bool sequence_parallel = false,
                                                                       std::int64_t ep = 1,
                                                                       Framework framework = Framework::kPyTorch);

/// One matrix multiplication of the forward pass: `batch` independent (M x K) . (K x N) products
/// on one tensor-parallel rank. Backward runs two GEMMs of the same size per forward GEMM (the
/// input gradient and the weight gradient; attention's batched products likewise).
struct GemmShape {
  std::string name;
  std::int64_t m = 0;
  std::int64_t n = 0;
  std::int64_t k = 0;
  std::int64_t batch = 1;
  bool attention_core = false;  // Q K^T or softmax . V (fused away by flash attention)
  bool expert = false;          // a routed expert's projection (one weight matrix per expert in batch)
  bool bias = false;            // the projection has a bias (per output column)
  /// The weights and biases of a projection of layer_gemms(m, micro_batch, 1): one matrix per
  /// expert for the experts' GEMMs, none for the attention core.
  [[nodiscard]] std::int64_t parameters() const { return attention_core ? 0 : batch * (n * k + (bias ? n : 0)); }
  [[nodiscard]] double flops() const {
    return 2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k) * static_cast<double>(batch);
  }
};

/// The forward GEMMs of one layer on one rank of a Megatron tensor-parallel group of `tp`: QKV and
/// the MLP up-projections are split by columns (N / tp), the attention output and MLP down
/// projections by rows (K / tp), attention heads are divided among ranks. Throws
/// std::invalid_argument when heads, KV heads or the FFN width do not divide by tp.
/// A mixture-of-experts MLP is the router (replicated on every tp rank) and one GEMM pair per
/// expert (batch = experts) on the tokens routed to it, assuming the router spreads tokens
/// evenly: ceil(tokens x experts_per_token / experts) each (real routing is uneven; the slowest
/// expert sets the pace, so this is a lower bound on the time).
/// Expert parallelism over `ep` ranks: the rank's experts / ep experts (batch), each on the tokens
/// routed to it from the ep ranks' micro-batches, ceil(ep x tokens x experts_per_token / experts).
/// The widths tensor parallelism splits that `tp` does not divide, as "heads (40)": Megatron splits
/// heads, key/value heads and the MLP widths evenly over the tensor-parallel ranks. Empty: it splits.
[[nodiscard]] std::vector<std::string> widths_not_dividing(const ModelSpec& m, int tp);

[[nodiscard]] std::vector<GemmShape> layer_gemms(const ModelSpec& m, std::int64_t micro_batch, std::int64_t tp,
                                                 std::int64_t ep = 1);
/// The output projection (logits), vocabulary split by columns across tp ranks.
[[nodiscard]] GemmShape head_gemm(const ModelSpec& m, std::int64_t micro_batch, std::int64_t tp);

/// Forward FLOPs of the output projection to the vocabulary (logits).
[[nodiscard]] sim::Flops head_forward_flops(const ModelSpec& m, std::int64_t micro_batch);

/// Tokens each expert runs in a micro-batch of `tokens` under even routing (see layer_gemms).
[[nodiscard]] std::int64_t tokens_per_expert(const ModelSpec& m, std::int64_t tokens);
/// Tokens of the busiest expert: tokens_per_expert x routing_imbalance, rounded up.
[[nodiscard]] std::int64_t busiest_expert_tokens(const ModelSpec& m, std::int64_t tokens);
/// Elements the busiest rank of an expert-parallel group of `ep` receives in one all-to-all of a
/// micro-batch of `tokens` tokens per rank: its even share (tokens x experts_per_token x hidden)
/// plus its busiest expert's excess over the mean (routing_imbalance).
[[nodiscard]] std::int64_t busiest_rank_dispatch_elements(const ModelSpec& m, std::int64_t tokens, std::int64_t ep);

/// Bytes kept per layer between forward and backward, by recomputation policy, for 16-bit
/// activations. From Korthikanti et al., "Reducing Activation Recomputation in Large Transformer
/// Models" (MLSys 2023), section 4, generalised term by term to GQA and any FFN width (see .cpp).
[[nodiscard]] sim::Bytes stored_activation_bytes(const ModelSpec& m, std::int64_t micro_batch, Recompute policy,
                                                 bool flash_attention);

/// Model FLOPs of one training step on `tokens` tokens: forward + backward (= 2 x forward), no
/// recomputation. This is the numerator of TFLOPS per device and MFU.
[[nodiscard]] sim::Flops model_flops_per_sequence(const ModelSpec& m);

/// Hardware FLOPs of one sequence: model FLOPs plus the forward work recomputed in backward (every
/// layer's forward with full recomputation, the attention core with selective recomputation).
[[nodiscard]] sim::Flops hardware_flops_per_sequence(const ModelSpec& m, Recompute policy);

}  // namespace offsim::models
