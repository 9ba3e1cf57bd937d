#pragma once
// Training strategies turn (model, machine, costs, strategy) into the task graph of one training
// iteration. The set of strategies is closed: StrategySpec is a std::variant, and
// strategy_registry.hpp holds one entry per alternative (its builder and what the call sites ask);
// `offsim list` prints the kinds.
#include <cstdint>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "models/collectives/plan.hpp"
#include "models/cost/cost_model.hpp"
#include "models/platform/machine_resources.hpp"
#include "models/strategies/device_names.hpp"
#include "models/strategies/phases/fsdp2.hpp"
#include "models/strategies/phases/host_offload.hpp"
#include "models/strategies/phases/iteration.hpp"
#include "models/strategies/phases/parameter_gather.hpp"
#include "models/strategies/tp_overlap.hpp"
#include "models/transformer/transformer.hpp"
#include "sim/exec/task_graph.hpp"
#include "topologies/topology.hpp"

namespace offsim::models {

struct RankLayout;  // models/platform/rank_layout.hpp
class ZeroPolicy;   // models/strategies/phases/zero_policy.hpp

/// Data parallelism with ZeRO stage 0-3 (models/strategies/data_parallel.cpp states the model):
/// every rank runs forward and backward on its micro-batches; gradients are reduced in buckets
/// (overlapping backward when overlap_comm); states are partitioned according to the stage.
struct DataParallelSpec {
  int zero_stage = 0;
  DeviceNames devices;  // rank r runs on devices[r]; the ring follows this order
  // Tensor parallelism inside groups of `tp` consecutive ranks (Megatron-DeepSpeed's layers under
  // ZeRO): rank r = t + tp x d for tensor rank t of replica d; ZeRO works across the replicas.
  int tp = 1;
  bool sequence_parallel = false;
  // Expert parallelism (mixture-of-experts models): each MoE layer's experts spread over ep
  // consecutive ranks, tokens sent to them and back by all-to-all (DeepSpeed-MoE's ep_size).
  int ep = 1;
  // Ulysses sequence parallelism (DeepSpeed's sequence_parallel_size; models/strategies/ulysses.hpp):
  // groups of sp consecutive ranks share each sequence, s / sp tokens per rank, the attention heads
  // split by all-to-alls; ZeRO works over all ranks. Read from a ds_config only.
  int sp = 1;
  std::int64_t reduce_bucket_elements = 0;
  bool overlap_comm = true;
  // Gradient accumulation in fp32 (DeepSpeed's data_types.grad_accum_dtype); nullopt: DeepSpeed's
  // default for bf16, fp32 at stage 0 and bf16 under ZeRO (layer_kernels.hpp). At stages 0-1 fp32
  // means DeepSpeed's BF16_Optimizer (phases/zero_policy.hpp, ZeroPolicy::deepspeed); stages 2-3 model bf16 only.
  std::optional<bool> fp32_grad_accum;
  // Stages 2-3: the gradients' reduce-scatter in fp32 (`gradient_reduce_dtype: fp32`: PyTorch FSDP's
  // MixedPrecision.reduce_dtype, DeepSpeed's communication_data_type), 4 B per element on the links
  // instead of 2.
  bool fp32_gradient_reduce = false;
  // Stage 3: parameters of submodules smaller than this stay whole on every rank and are never
  // gathered (DeepSpeed stage3_param_persistence_threshold; its default is 1e5).
  std::int64_t param_persistence_threshold = 0;
  /// DeepSpeed's default stage3_param_persistence_threshold (deepspeed/runtime/zero/config.py,
  /// and the ZeRO section of the DeepSpeed configuration docs): 100,000 parameters.
  static constexpr std::int64_t kDeepSpeedPersistenceThreshold = 100'000;
  // Stage 3: how a module's parameters are fetched, and the host cost of each collective launch
  // (phases/parameter_gather.hpp).
  using Fetch = ZeroFetch;
  using HostLaunchCost = models::HostLaunchCost;
  using FetchHostCost = models::FetchHostCost;
  Fetch zero3_fetch = Fetch::kPrefetch;
  std::optional<FetchHostCost> zero3_host;
  std::optional<OptimizerOffload> offload;  // stages 2-3
  // ZeRO-Infinity parameter offload (`offload_param: {device: cpu}`, stage 3, with the optimizer
  // offloaded too): the bf16 parameter partition (and the hpZ secondary) live in host memory; each
  // gather first copies the rank's shard to the GPU; the updated parameters stay on the host.
  bool offload_param = false;
  bool param_pin_memory = true;
  std::optional<Partitioning> partitioning;  // stage 3 only; absent: everything over all ranks, flat
  // Stage 3 as PyTorch's FSDP2 runs it (training.framework: torchtitan; phases/fsdp2.hpp), with its
  // reshard_after_forward policy, instead of DeepSpeed's stage 3: one gather and one reduce-scatter
  // per FSDP unit (the reduce-scatter in fp32 with fp32_gradient_reduce), fp32 parameter and
  // gradient shards; no persistence threshold, host launch costs, partitioning or offload.
  std::optional<ReshardAfterForward> fsdp2;
  CollectiveOptions collectives;
  bool all_ranks = false;  // simulate every rank even when one node could stand for all
};

/// One collective over the listed ranks, alone on the machine: the benchmark that calibration
/// data was measured with, for validating the collective model against it.
struct CollectiveSpec {
  CollectiveKind operation = CollectiveKind::kAllGather;
  sim::Bytes bytes{0};  // the buffer S (all-gather output, reduce-scatter input)
  DeviceNames devices;  // rank r runs on devices[r]; the ring follows this order
  CollectivePlan plan;  // empty stages: one flat ring
  CollectiveOptions options;
  bool all_ranks = false;
};

/// Megatron-style 3D parallelism (models/strategies/megatron.cpp states the model): tensor
/// parallelism inside a group of `tp` consecutive ranks, context parallelism over `cp` ranks
/// (ring attention, models/strategies/context_parallel.hpp), a pipeline of `pp` stages (1F1B, or
/// interleaved with `virtual_stages` chunks per rank), `dp` replicas whose gradients are
/// all-reduced (zero_stage 0) or reduce-scattered with a distributed optimizer (zero_stage 1), or
/// sharded as FSDP2 under the pipeline schedule (zero_stage 2), over the dp x cp ranks holding the
/// same weights.
/// Rank r = t + tp x (c + cp x (s + pp x d)) for tensor rank t, context rank c, stage s, replica d
/// (docs/adr/0012-context-parallel-rank-order.md).
struct MegatronSpec {
  int tp = 1;
  int pp = 1;
  int dp = 1;
  int cp = 1;              // context parallelism (Megatron-Core's context_parallel_size)
  int virtual_stages = 1;  // > 1: the interleaved schedule
  // Uneven pipeline splits (models/strategies/pipeline_split.hpp): the layers of the first and last
  // pipeline stage (Megatron-Core's decoder_first/last_pipeline_num_layers, over all the stage's
  // virtual chunks), and Megatron-Core's account_for_embedding/loss_in_pipeline_split (the
  // embedding and the loss each counted as one layer of the split).
  std::optional<std::int64_t> first_stage_layers;
  std::optional<std::int64_t> last_stage_layers;
  bool account_for_embedding_in_pipeline_split = false;
  bool account_for_loss_in_pipeline_split = false;
  bool sequence_parallel = false;
  // Megatron-LM's --scatter-gather-tensors-in-pipeline (phases/pipeline_tensors.hpp): each TP rank
  // sends 1/tp of a pipeline tensor and the receiver all-gathers it over the TP group (Megatron-LM
  // 2021-02 to 2023-03, default on there); off: the whole tensor (Megatron-Core's p2p, the default).
  bool scatter_gather_tensors_in_pipeline = false;
  int zero_stage = 0;
  // The data-parallel optimizer: Megatron-LM's (main_grad reduced in its dtype; at zero_stage 1 its
  // distributed optimizer), or DeepSpeed's under Megatron-DeepSpeed, chosen as DeepSpeed's engine
  // chooses it from zero_stage and the gradient accumulation dtype (layer_kernels.hpp,
  // ZeroPolicy::deepspeed). fp32_grad_accum, nullopt: the framework's default, fp32 for
  // Megatron's bf16 training (false: 16-bit main_grad, fp16 training's default or
  // --grad-reduce-in-bf16) and DeepSpeed's by stage.
  enum class Optimizer { kMegatron, kDeepSpeed };
  Optimizer optimizer = Optimizer::kMegatron;
  // The pipeline schedule's engine: Megatron's own (schedules.py: 1F1B or interleaved, transfers
  // as data dependencies) or DeepSpeed's PipelineEngine (Megatron-DeepSpeed with --deepspeed and
  // pp > 1; models/strategies/deepspeed_pipeline.hpp: TrainSchedule with blocking send/recv).
  // The readers resolve the default (DeepSpeed's with optimizer: deepspeed or training.framework:
  // deepspeed-megatron and pp > 1) and refuse the interleaved schedule under DeepSpeed's.
  enum class PipelineEngine { kMegatron, kDeepSpeed };
  PipelineEngine pipeline_engine = PipelineEngine::kMegatron;
  std::optional<bool> fp32_grad_accum;
  // Megatron-LM's --no-gradient-accumulation-fusion (default on since 83b1e42f, 2022-02): the
  // weight-gradient GEMM adds into main_grad. Off (Megatron-LM v2.5, Megatron-DeepSpeed, which
  // comments the fused path out): each micro-batch's gradients are added in a pass of their own
  // (transformer/precision.hpp). Read with Megatron's optimizer; DeepSpeed's owns param.grad.
  bool gradient_accumulation_fusion = true;
  // Megatron-Core's DistributedDataParallelConfig (phases/pipeline_data_parallel.hpp,
  // OverlappedDataParallel): the gradients reduced in buckets of bucket_size elements as the last
  // micro-batch's backward produces them, and (distributed optimizer) the updated parameters
  // gathered before the next forwards use them. Both off by default, as in Megatron-Core.
  bool overlap_grad_reduce = false;
  bool overlap_param_gather = false;
  bool align_param_gather = false;  // every chunk's gathers issued ahead (else at its first forward)
  std::int64_t bucket_size = 0;     // > 0 with overlap_grad_reduce (the readers apply Megatron-Core's default)
  // Transformer Engine's userbuffers overlap of the TP collectives with the GEMMs
  // (tp_comm_overlap, with sequence parallelism; models/strategies/tp_overlap.hpp). nullopt: off.
  std::optional<TpCommOverlap> tp_comm_overlap;
  DeviceNames devices;
  CollectiveOptions collectives;
  bool all_ranks = false;
  // `simulate_micro_batches: all`: every micro-batch of a long schedule is simulated instead of
  // the steady-state extrapolation (models/experiment/run.cpp, steady_state_plan).
  bool all_micro_batches = false;
};

using StrategySpec = std::variant<DataParallelSpec, CollectiveSpec, MegatronSpec>;

/// Resolves the ranks' device names (each must be a GPU of the machine; std::invalid_argument
/// naming `strategy` otherwise) into `out.devices`, lays them out (make_rank_layout), records
/// the layout's note and the simulated rank count in `out`, and makes `out.machine`: the engine
/// resources of the simulated ranks' nodes (where every builder starts).
[[nodiscard]] RankLayout lay_out_ranks(BuiltIteration& out, const topo::Topology& topology,
                                       const std::vector<std::string>& names, const char* strategy, bool all_ranks,
                                       int block_ranks = 0);

/// Builds the task graph of one iteration. Throws std::invalid_argument for a strategy the
/// machine cannot host (e.g. more ranks than GPUs); the parser reports those first with locations.
[[nodiscard]] BuiltIteration build_iteration(const IterationInputs& in, const StrategySpec& strategy);

/// The report notes every strategy shares: the cost model's, the kernels the layers leave out
/// (layer_kernels.hpp), and BF16_Optimizer's where it runs. The cost model's go first.
void add_common_approximations(BuiltIteration& out, const IterationInputs& in, const ZeroPolicy& policy);

[[nodiscard]] BuiltIteration build_data_parallel(const IterationInputs& in, const DataParallelSpec& spec);
[[nodiscard]] BuiltIteration build_collective(const IterationInputs& in, const CollectiveSpec& spec);
[[nodiscard]] BuiltIteration build_megatron(const IterationInputs& in, const MegatronSpec& spec);

}  // namespace offsim::models
