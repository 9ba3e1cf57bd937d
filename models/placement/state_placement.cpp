// One rank's model states per memory tier (state_placement.hpp). With P the parameters a rank
// holds, P_model those ZeRO shards over g ranks, w / f / o the working (bf16), fp32 and optimizer
// (fp32 master + m + v) bytes per element, and U the updated parameters (P at stage 0, P_model / g
// otherwise), of which C update on the CPU under optimizer offload:
//   parameters   w P                  (stage 3: w (P_model - persistent) / g + w persistent);
//                on the host with parameter offload; FSDP2's fp32 shard that is the master copy:
//                f (P_model - persistent) / g, and the optimizer then (o - f) U
//   gradients    at stages 0-1 w P, f P or (f + w) P by the framework's gradient buffers;
//                w P_model / g at stages 2-3 (f P_model / g for an fp32 partition); with offload f (U - C) on the GPU
//                and f C on the host (on the NVMe with ZeRO-Infinity)
//   optimizer    o (U - C) on the GPU, o C on the host (or the NVMe)
//   secondary    w x the hpZ secondary elements, on the GPU
//   buffers      reduce bucket w min(bucket, P) on the GPU at stages 2-3; stage 3 offload: a bf16
//                host buffer of the gradient partition, w U; NVMe: f x the swap buffers' elements
// (x / g rounds up: a rank's share of a sharded tensor.)
#include "models/placement/state_placement.hpp"

#include <algorithm>

namespace offsim::models {

namespace {

std::int64_t share(std::int64_t n, int shard_ranks) {
  return (n + shard_ranks - 1) / shard_ranks;
}

// Bytes per gradient element at stages 0-1 without offload.
std::int64_t unsharded_gradient_bytes(GradientBuffers buffers, const StatePrecision& bytes) {
  switch (buffers) {
    case GradientBuffers::kWorking:
      return bytes.working;
    case GradientBuffers::kFp32:
      return bytes.fp32;
    case GradientBuffers::kFp32AndWorking:
      return bytes.fp32 + bytes.working;
  }
  return bytes.working;
}

}  // namespace

std::int64_t updated_parameters(const ZeroPartitioning& partitioned, std::int64_t held, std::int64_t sharded,
                                int shard_ranks) {
  return partitioned.optimizer ? share(sharded, shard_ranks) : held;
}

StatePlacement place_model_states(const StateCounts& c, const StatePrecision& bytes) {
  StatePlacement out;
  const ZeroPartitioning& partitioned = c.partitioned;
  out.parameter_elements =
      partitioned.parameters ? share(c.sharded - c.persistent, c.shard_ranks) + c.persistent : c.held;
  out.updated_elements = updated_parameters(partitioned, c.held, c.sharded, c.shard_ranks);
  const bool master_shard = c.parameter_shard_is_master && partitioned.parameters && !c.optimizer_offload;
  (c.parameter_offload ? out.parameters.host : out.parameters.gpu) =
      out.parameter_elements * (master_shard ? bytes.fp32 : bytes.working);

  // Optimizer offload: the GPU keeps the states of its own subgroups (fp32 master, m, v and fp32
  // gradients); the host (or the NVMe) keeps the rest.
  const std::int64_t offloaded = c.optimizer_offload ? c.offloaded_elements : 0;
  const std::int64_t gpu_updated = out.updated_elements - offloaded;
  out.gradients.gpu = c.optimizer_offload ? gpu_updated * bytes.fp32
                      : partitioned.gradients
                          ? share(c.sharded, c.shard_ranks) * (c.fp32_gradient_partition ? bytes.fp32 : bytes.working)
                          : c.held * unsharded_gradient_bytes(c.gradient_buffers, bytes);
  out.optimizer.gpu = gpu_updated * (master_shard ? bytes.optimizer - bytes.fp32 : bytes.optimizer);
  if (c.optimizer_offload) {
    (c.nvme ? out.optimizer.nvme : out.optimizer.host) = offloaded * bytes.optimizer;
    (c.nvme ? out.gradients.nvme : out.gradients.host) = offloaded * bytes.fp32;
    if (c.nvme) out.swap_buffers.host = c.swap_buffer_elements * bytes.fp32;
    if (partitioned.parameters) out.gradient_buffer.host = out.updated_elements * bytes.working;
  }
  if (partitioned.gradients) out.reduce_bucket.gpu = std::min(c.reduce_bucket_elements, c.held) * bytes.working;
  out.secondary.gpu = c.secondary_elements * bytes.working;
  return out;
}

}  // namespace offsim::models
