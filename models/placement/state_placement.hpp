#pragma once
// Where one rank's model states live: the bytes of each state (parameters, gradients, optimizer
// states, and the buffers that come with them) in each memory tier (GPU HBM, host DRAM, NVMe),
// for ZeRO stages 0-3, optimizer offload to the CPU or NVMe (with Twin-Flow's GPU share),
// ZeRO-Infinity parameter offload and hpZ's secondary partition. One formula, used by the
// strategies both for their setup allocations and for the reported model states per device.
//
// The function is free of any strategy: the caller states what the rank holds and how it is
// sharded, and the bytes per element of each precision (kBf16MixedPrecision for the strategies).
#include <cstdint>

#include "models/transformer/precision.hpp"

namespace offsim::models {

// Bytes per element of each state.
struct StatePrecision {
  std::int64_t working = 0;    // parameters, the gradients reduced on the GPU, their buffers (bf16)
  std::int64_t fp32 = 0;       // the gradients the optimizer reads under offload, NVMe swap buffers
  std::int64_t optimizer = 0;  // per updated parameter: fp32 master, Adam m and v
};

// bf16 mixed precision with Adam, as every strategy trains (transformer/precision.hpp).
inline constexpr StatePrecision kBf16MixedPrecision{kBf16Bytes, kFp32Bytes, kOptimizerStateBytesPerParam};

// How a rank keeps its gradients at stages 0-1 without optimizer offload: the frameworks that
// train in bf16 accumulate them in fp32 buffers of the whole (unsharded) model.
enum class GradientBuffers {
  // The working-precision gradients only, w P: DeepSpeed's ZeRO-1 optimizer, whose gradient
  // accumulation dtype defaults to the model's (runtime/engine.py get_data_types), and 16-bit
  // accumulation without ZeRO (FP16_Optimizer, PyTorch DDP).
  kWorking,
  // An fp32 buffer of every gradient, f P, that the backward accumulates into directly: Megatron's
  // main_grad (arguments.py forces accumulate_allreduce_grads_in_fp32 for bf16; the wgrad GEMMs
  // and the grad hooks add into it and free the bf16 .grad).
  kFp32,
  // Both, f P + w P: DeepSpeed's BF16_Optimizer (bf16 without ZeRO), which creates an fp32 flat
  // gradient buffer of the whole model (bf16_optimizer.py, "create fp32 gradients") and keeps the
  // bf16 .grad tensors that the backward wrote until the next backward clears them.
  kFp32AndWorking,
};

// Which states ZeRO partitions over the shard group (strategies/phases/zero_policy.hpp works it
// out from the stage and the framework): stage 1 the optimizer states, stage 2 the gradients too,
// stage 3 the parameters too.
struct ZeroPartitioning {
  bool optimizer = false;
  bool gradients = false;
  bool parameters = false;
};

// What one rank holds and how ZeRO shards it.
struct StateCounts {
  // The parameters the rank holds whole before sharding (P: all of its tensor-parallel share, or
  // of its pipeline stage; with expert parallelism, its own experts only).
  std::int64_t held = 0;
  // The parameters ZeRO shards over `shard_ranks` (P_model); a rank's share is their ceil 1/shard.
  std::int64_t sharded = 0;
  ZeroPartitioning partitioned;
  int shard_ranks = 1;
  // Stages 0-1 without optimizer offload: the gradient buffers (see GradientBuffers).
  GradientBuffers gradient_buffers = GradientBuffers::kWorking;
  // Stage 3: parameters kept whole on every rank (DeepSpeed's param_persistence_threshold).
  std::int64_t persistent = 0;
  // Stages 2-3: the gradient reduce bucket, in elements (capped at `held`).
  std::int64_t reduce_bucket_elements = 0;
  // Stages 2-3: the gradient partition in fp32 rather than the working precision (FSDP2's sharded
  // gradients take the dtype of its sharded fp32 parameters).
  bool fp32_gradient_partition = false;
  // Stage 3: the parameter shard is fp32 and is the optimizer's master copy (FSDP2's sharded
  // parameters; the bf16 copies exist only while gathered): the shard counts f bytes under
  // parameters and the optimizer states o - f (Adam's m and v) per updated parameter.
  bool parameter_shard_is_master = false;
  // Optimizer offload: the updated parameters whose optimizer step runs on the CPU (Twin-Flow's
  // host subgroups; the rest stay on the GPU), their states on the NVMe instead of host memory
  // (ZeRO-Infinity) through host swap buffers of `swap_buffer_elements` in all.
  bool optimizer_offload = false;
  std::int64_t offloaded_elements = 0;
  bool nvme = false;
  std::int64_t swap_buffer_elements = 0;
  // ZeRO-Infinity parameter offload: the rank's parameters in host memory.
  bool parameter_offload = false;
  // hpZ: the elements of the secondary parameter partition the rank keeps.
  std::int64_t secondary_elements = 0;
};

// Bytes in each memory tier.
struct TierBytes {
  std::int64_t gpu = 0;
  std::int64_t host = 0;
  std::int64_t nvme = 0;
  [[nodiscard]] std::int64_t total() const { return gpu + host + nvme; }
};

struct StatePlacement {
  std::int64_t parameter_elements = 0;  // the rank's parameters (stage 3: its partition and the persistent ones)
  std::int64_t updated_elements = 0;    // the parameters whose optimizer states the rank holds and updates
  TierBytes parameters;                 // bf16
  TierBytes gradients;                  // bf16 or fp32 (gradient_buffers) on the GPU; fp32 with offload
  TierBytes optimizer;                  // fp32 master, m, v
  TierBytes secondary;                  // hpZ secondary partition (bf16)
  // Buffers, not model states: the GPU reduce bucket (stages 2-3), the host's bf16 buffer of the
  // rank's gradient partition (stage 3 offload) and the pinned NVMe swap buffers.
  TierBytes reduce_bucket;
  TierBytes gradient_buffer;
  TierBytes swap_buffers;
  // The model states in GPU memory: parameters, gradients, optimizer states and the secondary
  // partition (the reported model states per device; buffers excluded).
  [[nodiscard]] std::int64_t gpu_model_states() const {
    return parameters.gpu + gradients.gpu + optimizer.gpu + secondary.gpu;
  }
};

// The parameters whose optimizer states a rank holds and updates: all it holds when the optimizer
// is replicated, its 1/shard_ranks share of the sharded ones when it is partitioned.
[[nodiscard]] std::int64_t updated_parameters(const ZeroPartitioning& partitioned, std::int64_t held,
                                              std::int64_t sharded, int shard_ranks);

// The bytes of each of one rank's states in each tier.
[[nodiscard]] StatePlacement place_model_states(const StateCounts& counts, const StatePrecision& precision);

}  // namespace offsim::models
