#pragma once
// The ranges of the strategy and training values that more than one reader takes: the native
// experiment YAML (models/experiment/sections.cpp and its *_section.cpp readers), a DeepSpeed ds_config
// (models/strategies/deepspeed_config.cpp) and, through them, --set overrides, sweep points and
// search candidates. Each is defined here once, with where its bounds come from, and every reader
// checks its value against this definition (sim/config/value_range.hpp), so that none lets through
// what another refuses (issue 32).
#include <cstdint>
#include <optional>
#include <string>

#include "models/strategies/phases/zero_policy.hpp"
#include "sim/config/value_range.hpp"

namespace offsim::models::ranges {

using sim::config::ValueRange;

// Micro-batch size and micro-batches per iteration (training.micro_batch / grad_accum,
// train_micro_batch_size_per_gpu / gradient_accumulation_steps): 65,536 sequences is 30 times the
// GPT-3 175B global batch; products of two of them and the ranks stay in 64-bit integers.
inline constexpr ValueRange<std::int64_t> kBatch{1, std::int64_t{1} << 16, false, "offsim's limit"};

// Ranks of a strategy (tp x pp x dp) and the sizes of its parallel dimensions: 14 x Frontier's
// 75,264 GCDs. A larger product is refused before it overflows (docs/fuzzing.md).
inline constexpr std::int64_t kMaxRanks = std::int64_t{1} << 20;
inline constexpr ValueRange<std::int64_t> kParallelSize{1, kMaxRanks, false, "offsim's limit"};

// ZeRO's stages, as the policy that gives them a meaning defines them (phases/zero_policy.hpp).
inline constexpr ValueRange<int> kZeroStage = ZeroPolicy::kStages;

// Sizes in elements (reduce bucket, optimizer subgroup, stage-3 persistence threshold): at most
// 1e15, a million times DeepSpeed's defaults, so that sizes in bytes and products with the counts
// below stay in 64-bit integers. A bucket or a subgroup holds at least one element (a subgroup of 0
// made the offloaded update loop over no elements forever).
inline constexpr double kMaxElements = 1e15;
inline constexpr ValueRange<double> kReduceBucketElements{1, kMaxElements, false, "offsim's limit"};
inline constexpr ValueRange<double> kSubGroupElements{1, kMaxElements, false, "offsim's limit"};
inline constexpr ValueRange<double> kPersistenceThreshold{0, kMaxElements, false, "offsim's limit"};

// Twin-Flow's share of the optimizer subgroups updated on the CPU (offload_optimizer.ratio):
// DeepSpeed 0.13 offload_config.py declares it Field(1.0, ge=0.0, le=1.0). 1 updates every
// subgroup on the CPU; 0 none: every subgroup's states stay on the GPU (stage3.py's
// subgroup_to_device), as offsim simulates them.
inline constexpr ValueRange<double> kOffloadRatio{0, 1, false, "DeepSpeed's range"};

// ZeRO-Infinity's pinned host buffers (offload_optimizer.buffer_count; DeepSpeed's default is 4):
// at most 1,000, so that buffers x the largest subgroup (kMaxElements) stays in 64-bit integers.
inline constexpr ValueRange<int> kNvmeBufferCount{1, 1000, false, "offsim's limit"};

// Transformer Engine's userbuffers settings (strategy.tp_comm_overlap_cfg, a NeMo tp_overlap
// YAML): SMs given to a collective's kernel and the pipeline method's splits. At least one each
// (CommOverlapCore divides the GEMM by num_splits); at most 1,024, offsim's limit (a device has
// fewer SMs: tp_overlap.cpp checks num_sm against the device table's count when it builds).
inline constexpr ValueRange<int> kUbNumSm{1, 1024, false, "offsim's limit"};
inline constexpr ValueRange<int> kUbNumSplits{1, 1024, false, "offsim's limit"};

// Channels of a ring collective (strategy.collectives.channels, RCCL's and NCCL's parallel rings):
// at most NCCL's MAXCHANNELS, 64 (src/include/device.h; the RCCL device.h read here, of the HDP
// register era, has 32).
// Each channel adds two flows per rank and stage, so a count far past it (65,537) built millions
// of flows before the task limit could refuse them, and the process was killed for memory.
inline constexpr ValueRange<int> kCollectiveChannels{1, 64, false, "NCCL's MAXCHANNELS"};

/// Why an optimizer offload's Twin-Flow ratio cannot be simulated at `zero_stage` (with the
/// states on NVMe when `nvme`), or nullopt when it can: DeepSpeed splits the subgroups in stage3.py
/// only (stage_1_and_2.py updates the whole partition on the CPU), and offsim does not model
/// Twin-Flow with an NVMe tier.
[[nodiscard]] inline std::optional<std::string> twin_flow_problem(int zero_stage, bool nvme, double ratio) {
  if (ratio == 1.0) return std::nullopt;
  if (nvme) return "Twin-Flow with an NVMe tier is not modelled";
  const auto partitioned = ZeroPolicy::partitioning_if_valid(zero_stage);
  if (partitioned && partitioned->gradients && !partitioned->parameters) {
    return "Twin-Flow (ratio < 1) is a ZeRO-3 feature in DeepSpeed";
  }
  return std::nullopt;
}

// Why a parameter offload without an optimizer offload is refused (by every reader): offsim models
// parameter offload as ZeRO-Infinity runs it, on top of the optimizer's offload.
inline constexpr const char* kParamOffloadNeedsOptimizerOffload =
    "parameter offload is modelled together with offload_optimizer (as ZeRO-Infinity runs it)";

}  // namespace offsim::models::ranges
