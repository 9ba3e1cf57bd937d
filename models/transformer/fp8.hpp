#pragma once
// FP8 training as NVIDIA Transformer Engine runs it under Megatron-Core (`training.precision: fp8`):
// the recipes, and the bytes its casts and scaling bookkeeping move, each from TE's source.
//
// What runs in FP8 (TE 1.x, transformer_engine/pytorch/module/linear.py, _Linear.forward and
// backward; layernorm_linear.py and layernorm_mlp.py alike): the projections' GEMMs, forward E4M3
// x E4M3, the input gradient E5M2 (output gradient) x E4M3 (weight), the weight gradient E4M3
// (input) x E5M2; every GEMM writes bf16 (the weight gradient fp32 into main_grad). Attention's
// cores stay bf16 (TE's DotProductAttention runs FlashAttention / cuDNN in bf16 unless
// fp8_dpa), as do Megatron-Core's output layer and MoE router (plain torch GEMMs, not TE modules).
#include <cstdint>
#include <string>

#include "models/transformer/precision.hpp"
#include "sim/config/config_reader.hpp"

namespace offsim::models {

inline constexpr std::int64_t kFp8Bytes = 1;

/// How the FP8 scaling factors are chosen (transformer_engine/common/recipe/__init__.py).
enum class Fp8Recipe {
  /// DelayedScaling: each tensor's scale from the amax history of past iterations (TE's default,
  /// NeMo 24.07's recipes). The history lives on the GPU and is updated after each forward and
  /// backward by one fused kernel (fp8.py, FP8GlobalStateManager.reduce_and_update_fp8_tensors).
  kDelayed,
  /// Float8CurrentScaling (TE 2.x): each tensor's amax computed just before its cast, an extra
  /// read pass over the tensor (Megatron-Bridge's "FP8-CS" recipes). No history.
  kCurrent,
  /// MXFP8BlockScaling: E8M0 scales per 32 elements, on devices whose tensor cores take them
  /// (Blackwell); refused elsewhere.
  kMxfp8,
};

[[nodiscard]] constexpr const char* fp8_recipe_name(Fp8Recipe r) {
  switch (r) {
    case Fp8Recipe::kDelayed:
      return "delayed scaling";
    case Fp8Recipe::kCurrent:
      return "current scaling";
    case Fp8Recipe::kMxfp8:
      return "MXFP8 block scaling";
  }
  return "";
}

struct Fp8Training {
  Fp8Recipe recipe = Fp8Recipe::kDelayed;
  // DelayedScaling's amax_history_len: TE's default 1024 (recipe/__init__.py), which NeMo's GPT
  // configs keep (fp8_amax_history_len: 1024).
  std::int64_t amax_history = 1024;
  sim::config::Location at;         // where `precision: fp8` was written, for the checks against the device
  sim::config::Location recipe_at;  // where fp8_recipe was written (or `at` when left out)
};

// FP8 scaling state per GEMM (TE 1.x module/base.py, set_meta_tensor): forward 3 slots (input,
// weight, output), backward 2 (output gradient, input gradient).
inline constexpr std::int64_t kFp8ForwardSlotsPerGemm = 3;
inline constexpr std::int64_t kFp8BackwardSlotsPerGemm = 2;
// Each slot: an fp32 amax per history entry, an fp32 scale and an fp32 scale_inv.
[[nodiscard]] constexpr std::int64_t fp8_scaling_bytes_per_gemm(const Fp8Training& f) {
  const std::int64_t history = f.recipe == Fp8Recipe::kDelayed ? f.amax_history : 1;
  return (kFp8ForwardSlotsPerGemm + kFp8BackwardSlotsPerGemm) * (history + 2) * kFp32Bytes;
}

// The cast of a bf16 tensor that a GEMM reads in FP8, bytes per element:
//  - delayed scaling: TE's fused cast-transpose (fp8_cast_transpose_fused in linear.py forward for
//    the input, grad_output_preprocess in module/base.py for the output gradient) reads bf16 and
//    writes the FP8 tensor and its FP8 transpose (Hopper's FP8 GEMMs take only the TN layout, so
//    the weight gradient needs the transposes): 2 + 1 + 1 B.
//  - current scaling: an amax pass over the bf16 tensor first (2 B), then the same cast-transpose.
//  - MXFP8: row-wise and column-wise copies, each with one E8M0 scale byte per 32 elements.
inline constexpr std::int64_t kMxfp8BlockElements = 32;
[[nodiscard]] constexpr double fp8_cast_bytes_per_element(Fp8Recipe r) {
  constexpr double cast_transpose = kBf16Bytes + 2.0 * kFp8Bytes;
  switch (r) {
    case Fp8Recipe::kDelayed:
      return cast_transpose;
    case Fp8Recipe::kCurrent:
      return kBf16Bytes + cast_transpose;
    case Fp8Recipe::kMxfp8:
      return cast_transpose + 2.0 / static_cast<double>(kMxfp8BlockElements);
  }
  return cast_transpose;
}

// The weights' FP8 copies Megatron-Core keeps between micro-batches: TE casts each weight (and its
// transpose) once per iteration, on the first micro-batch (is_first_microbatch; linear.py
// update_fp8_weights), and caches both: 2 B per projection weight on the GPU, besides the bf16
// weight. The cast itself is a cast-transpose of the weight (fp8_cast_bytes_per_element).
inline constexpr std::int64_t kFp8WeightCopyBytesPerParam = 2 * kFp8Bytes;

}  // namespace offsim::models
