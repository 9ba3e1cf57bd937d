#pragma once
// How Megatron's own schedules pass a pipeline tensor (a micro-batch's b x s x h activations
// forward, their gradients backward) between neighbouring stages, by Megatron-LM version
// (MegatronSpec::scatter_gather_tensors_in_pipeline):
// - Megatron-LM from 72e4230b (2021-02-16, "Turn scatter-gather optimization on by default") to the
//   move of the pipeline into Megatron-Core (3c92fa93, 2023-03-23), read at v2.5 (e269e200,
//   2021-08-10, the SC21 code line): megatron/p2p_communication.py _communicate, with
//   args.scatter_gather_tensors_in_pipeline (default True: --no-scatter-gather-tensors-in-pipeline
//   turns it off, arguments.py) and, from 2022, not args.sequence_parallel: each TP rank sends
//   mpu.split_tensor_into_1d_equal_chunks of the tensor (1/tp of it, the same TP rank of the
//   neighbour receiving it), and the receiver rebuilds it with mpu.gather_split_1d_tensor, an
//   all-gather over the TP group, after the transfer (batch_isend_irecv, torch.cuda.synchronize)
//   and before the operation uses it.
// - Megatron-Core's pipeline_parallel/p2p_communication.py (3c92fa93 on, Megatron-LM 23.04 to
//   today; the flag was left unused until #4140 removed it, 2026-04): the whole tensor from every
//   TP rank, no gather.
// - With sequence parallelism (either version) the tensor between stages is already the TP rank's
//   s / tp slice of the sequence (schedules.py get_tensor_shapes: seq_length // tp): 1/tp sent,
//   no gather.
// DeepSpeed's pipeline engine partitions and gathers by its own rules (deepspeed_pipeline.hpp).
#include <cstdint>
#include <string>
#include <vector>

#include "models/collectives/communicator.hpp"
#include "sim/core/units.hpp"
#include "sim/exec/task_graph.hpp"

namespace offsim::models {

/// What one TP rank sends of a pipeline tensor of `elements` bf16 elements, and whether the
/// receiver all-gathers it over the TP group before use.
struct PipelineTensorExchange {
  sim::Bytes bytes_per_rank;
  bool gathered = false;
};

/// The exchange of Megatron's schedules (above): split over tp with sequence parallelism or the
/// scatter/gather (gathered only by the latter), whole otherwise. `partitioned_by_engine`:
/// DeepSpeed's pipeline engine, which sends 1/tp and gathers itself (gather_partitioned).
[[nodiscard]] PipelineTensorExchange pipeline_tensor_exchange(std::int64_t elements, int tp, bool sequence_parallel,
                                                              bool scatter_gather, bool partitioned_by_engine);

/// The receiver's gather_split_1d_tensor: an all-gather of `elements` over the TP group after the
/// operation's entry (`at`: each member's task, which the received transfer precedes) when it
/// received a tensor: a forward after the first virtual stage, a backward before the last.
/// Returns each member's task after it (`at` itself when nothing is received).
[[nodiscard]] std::vector<sim::TaskId> gather_received_tensor(Communicator& tp_group, const std::string& name,
                                                              bool forward, int vs, int last_virtual,
                                                              std::int64_t elements, const CollectivePlan& plan,
                                                              std::vector<sim::TaskId> at);

}  // namespace offsim::models
