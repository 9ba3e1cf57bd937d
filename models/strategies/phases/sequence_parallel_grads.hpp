#pragma once
// Megatron-Core's all-reduce of the gradients of the parameters every tensor-parallel rank holds
// whole while each sees only part of the activations (read at NVIDIA/Megatron-LM core_v0.12.0):
// distributed/finalize_model_grads.py finalize_model_grads, after finish_grad_sync (the
// data-parallel reduction) and before _allreduce_embedding_grads, runs _allreduce_layernorm_grads:
// when the TP group has more than one rank and config.sequence_parallel or config.qk_layernorm,
// every parameter with the attribute `sequence_parallel` set, or whose name holds q_layernorm or
// k_layernorm, has its main_grad flattened into one buffer (_flatten_dense_tensors), all-reduced
// over the tensor-parallel group, and copied back. The attribute is set to config.sequence_parallel
// on
// - each norm's weight and bias (fusions/fused_layer_norm.py FusedLayerNorm; Transformer Engine's
//   norms inside TELayerNormColumnParallelLinear mark theirs alike): the layer's norms and the
//   final norm on the last stage;
// - the bias of each row-parallel projection (tensor_parallel/layers.py RowParallelLinear;
//   extensions/transformer_engine.py TERowParallelLinear): the attention output projection's
//   and the MLP's down projection's, where the model has biases.
// Q's and K's per-head norms (qk_layernorm, head_dim elements each) join whether or not sequence
// parallelism is on. MoE routers' weights (moe/router.py) are marked too: not counted here (the
// megatron strategy's MoE layers are costed as a mean of dense and sparse layers).
// The buffer is in the gradients' dtype (fp32 main_grad unless they are kept in 16 bits).
#include <cstdint>

#include "models/transformer/transformer.hpp"

namespace offsim::models {

/// The elements of the coalesced buffer on one rank holding `layers` layers of `m` (and the final
/// norm when `final_norm`), as _allreduce_layernorm_grads gathers it; 0 where it does not run
/// (tp 1, or neither sequence parallelism nor per-head Q/K norms). Per layer, with h the hidden
/// width, n the norms of a layer and d the head width:
///   sequence parallelism: n h (2 n h for LayerNorm's weight and bias) + 2 h (row-parallel biases);
///   Q/K norms:            2 d;
/// plus h (2 h for LayerNorm) for the final norm under sequence parallelism.
[[nodiscard]] std::int64_t sequence_parallel_gradient_elements(const ModelSpec& m, int tp, bool sequence_parallel,
                                                               std::int64_t layers, bool final_norm);

}  // namespace offsim::models
