#pragma once
// Training strategies turn (model, machine, costs, strategy) into the task graph of one training
// iteration. The set of strategies is closed: StrategySpec is a std::variant and
// build_iteration() visits it; `offsim list` prints the alternatives.
#include <cstdint>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "models/collectives/plan.hpp"
#include "models/cost/cost_model.hpp"
#include "models/platform/machine_resources.hpp"
#include "models/transformer/fp8.hpp"
#include "models/transformer/transformer.hpp"
#include "sim/exec/task_graph.hpp"
#include "topologies/topology.hpp"

namespace offsim::models {

struct RankLayout;  // models/platform/rank_layout.hpp

struct TrainingSpec {
  std::int64_t micro_batch = 1;
  std::int64_t grad_accum = 1;
  Recompute recompute = Recompute::kNone;
  bool flash_attention = false;
  // Megatron's fused scale-mask-softmax in place of PyTorch's separate kernels (without flash
  // attention only; `fused_softmax:` in the experiment).
  bool fused_softmax = false;
  std::optional<Fp8Training> fp8;  // `precision: fp8` (Transformer Engine); nullopt: bf16
  [[nodiscard]] AttentionKernels attention_kernels() const {
    if (flash_attention) return AttentionKernels::kFlash;
    return fused_softmax ? AttentionKernels::kFusedSoftmax : AttentionKernels::kUnfused;
  }
};

/// Data parallelism with ZeRO stage 0-3 (models/strategies/data_parallel.cpp states the model):
/// every rank runs forward and backward on its micro-batches; gradients are reduced in buckets
/// (overlapping backward when overlap_comm); states are partitioned according to the stage.
/// The DeepSpeed release whose offload mechanics are simulated (deepspeed-offload.md section 2):
/// 0.13 copies each gradient partition to the host with a blocking copy and up-casts on the CPU;
/// 0.16.3 and later up-cast on the GPU and copy asynchronously.
enum class Runtime { kDeepSpeed013, kDeepSpeed016 };

/// ZeRO-3 optimizer offload to host memory (DeepSpeed `offload_optimizer: {device: cpu}`).
struct OptimizerOffload {
  bool pin_memory = true;
  double ratio = 1.0;  // Twin-Flow: the first ratio x subgroups update on the CPU, the rest on the GPU
  std::int64_t sub_group_size = 0;
  Runtime runtime = Runtime::kDeepSpeed013;
  // ZeRO-Infinity (`device: nvme`, stage 3): the host subgroups' fp32 states and gradients live on
  // the node's NVMe and are swapped through `buffer_count` pinned host buffers of the largest
  // subgroup; pipeline_read prefetches the next subgroup during CPU Adam, pipeline_write lets the
  // next subgroup start before the write-back ends (deepspeed-offload.md section 6).
  bool nvme = false;
  bool pipeline_read = false;
  bool pipeline_write = false;
  int buffer_count = 0;
};

/// Hierarchical partitioning of the ZeRO-3 states (docs/strategies.md): each state is sharded
/// over a group of consecutive ranks, and each collective runs in stages over hierarchy bands,
/// with its own algorithm and quantization. ZeRO-3 shards everything over all ranks with flat
/// rings; ZeRO++ adds int8 forward gathers (qwZ), a secondary weight partition inside the node
/// (hpZ) and int4 all-to-all gradient reduction in two hops (qgZ); MiCS shards over a node and
/// all-reduces gradients across the node replicas. The primary weights, gradients and optimizer
/// states share one group (each rank updates the shard it owns); only the secondary differs.
struct Partitioning {
  int shard_ranks = 0;              // the group the primary states are sharded over
  CollectivePlan parameter_gather;  // forward (and backward, without a secondary) all-gather
  int secondary_ranks = 0;          // hpZ secondary partition group; 0: none
  CollectivePlan secondary_gather;  // backward all-gather inside the secondary group
  CollectivePlan gradient_reduce;   // reduce-scatter inside the shard group
  CollectivePlan replica_reduce;    // all-reduce across shard groups (when shard_ranks < ranks)
};

struct DataParallelSpec {
  int zero_stage = 0;
  std::vector<std::string> devices;  // rank r runs on devices[r]; the ring follows this order
  // Tensor parallelism inside groups of `tp` consecutive ranks (Megatron-DeepSpeed's layers under
  // ZeRO): rank r = t + tp x d for tensor rank t of replica d; ZeRO works across the replicas.
  int tp = 1;
  bool sequence_parallel = false;
  // Expert parallelism (mixture-of-experts models): each MoE layer's experts spread over ep
  // consecutive ranks, tokens sent to them and back by all-to-all (DeepSpeed-MoE's ep_size).
  int ep = 1;
  std::int64_t reduce_bucket_elements = 0;
  bool overlap_comm = true;
  // Gradient accumulation in fp32 (DeepSpeed's data_types.grad_accum_dtype); nullopt: DeepSpeed's
  // default for bf16, fp32 at stage 0 and bf16 under ZeRO (layer_kernels.hpp). At stages 0-1 fp32
  // means DeepSpeed's BF16_Optimizer (layer_kernels.hpp, deepspeed_gradient_handling); stages 2-3 model bf16 only.
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
  // Stage 3: how a module's parameters are fetched.
  //  kPrefetch: on a gather stream of their own, one module ahead of the compute (DeepSpeed since
  //    its stage-3 overlap rework, PR #1453, merged late 2021).
  //  kBlocking: each all-gather waits for the device's queued work and the module waits for it, so
  //    gathers never overlap compute (DeepSpeed's first ZeRO-3 releases, March to late 2021: "the
  //    async version is not async at all, because each all_gather calls torch.cuda.synchronize()",
  //    PR #1188; prefetching skipped by an off-by-one trace, issue #1069).
  enum class Fetch { kPrefetch, kBlocking };
  Fetch zero3_fetch = Fetch::kPrefetch;
  // Stage 3: host time the framework spends launching each parameter's all-gather and each
  // gradient tensor's reduce-scatter, fixed + per_rank x (ranks of the collective), serialised on
  // the rank's host thread (`zero3_host`, a sourced table in configs/calibration/). DeepSpeed's
  // early stage 3 built one view per rank of each tensor, and PyTorch's list-based all_gather and
  // reduce_scatter copied each rank's part with its own copy kernel, so that work grows with the
  // group.
  struct HostLaunchCost {
    sim::TimePs fixed{0};
    sim::TimePs per_rank{0};
    [[nodiscard]] sim::TimePs at(std::int64_t ranks) const { return sim::TimePs{fixed.ps + per_rank.ps * ranks}; }
  };
  struct FetchHostCost {
    std::string name;
    HostLaunchCost all_gather;      // per parameter gathered
    HostLaunchCost reduce_scatter;  // per gradient tensor reduced
  };
  std::optional<FetchHostCost> zero3_host;
  std::optional<OptimizerOffload> offload;  // stages 2-3
  // ZeRO-Infinity parameter offload (`offload_param: {device: cpu}`, stage 3, with the optimizer
  // offloaded too): the bf16 parameter partition (and the hpZ secondary) live in host memory; each
  // gather first copies the rank's shard to the GPU; the updated parameters stay on the host.
  bool offload_param = false;
  bool param_pin_memory = true;
  std::optional<Partitioning> partitioning;  // stage 3 only; absent: everything over all ranks, flat
  CollectiveOptions collectives;
  bool all_ranks = false;  // simulate every rank even when one node could stand for all
};

/// One collective over the listed ranks, alone on the machine: the benchmark that calibration
/// data was measured with, for validating the collective model against it.
struct CollectiveSpec {
  CollectiveKind operation = CollectiveKind::kAllGather;
  sim::Bytes bytes{0};               // the buffer S (all-gather output, reduce-scatter input)
  std::vector<std::string> devices;  // rank r runs on devices[r]; the ring follows this order
  CollectivePlan plan;               // empty stages: one flat ring
  CollectiveOptions options;
  bool all_ranks = false;
};

/// Megatron-style 3D parallelism (models/strategies/megatron.cpp states the model): tensor
/// parallelism inside a group of `tp` consecutive ranks, a pipeline of `pp` stages (1F1B, or
/// interleaved with `virtual_stages` chunks per rank), `dp` replicas whose gradients are
/// all-reduced (zero_stage 0) or reduce-scattered with a distributed optimizer (zero_stage 1).
/// Rank r = t + tp x (s + pp x d) for tensor rank t, stage s, replica d.
struct MegatronSpec {
  int tp = 1;
  int pp = 1;
  int dp = 1;
  int virtual_stages = 1;  // > 1: the interleaved schedule
  bool sequence_parallel = false;
  int zero_stage = 0;
  // The data-parallel optimizer: Megatron-LM's (main_grad reduced in its dtype; at zero_stage 1 its
  // distributed optimizer), or DeepSpeed's under Megatron-DeepSpeed, chosen as DeepSpeed's engine
  // chooses it from zero_stage and the gradient accumulation dtype (layer_kernels.hpp,
  // deepspeed_gradient_handling). fp32_grad_accum, nullopt: the framework's default, fp32 for
  // Megatron's bf16 training (false: 16-bit main_grad, fp16 training's default or
  // --grad-reduce-in-bf16) and DeepSpeed's by stage.
  enum class Optimizer { kMegatron, kDeepSpeed };
  Optimizer optimizer = Optimizer::kMegatron;
  std::optional<bool> fp32_grad_accum;
  std::vector<std::string> devices;
  CollectiveOptions collectives;
  bool all_ranks = false;
  // `simulate_micro_batches: all`: every micro-batch of a long schedule is simulated instead of
  // the steady-state extrapolation (models/experiment/run.cpp, steady_state_plan).
  bool all_micro_batches = false;
};

using StrategySpec = std::variant<DataParallelSpec, CollectiveSpec, MegatronSpec>;

/// A time interval of the representative rank reported as `phase`: from the start of `first`
/// (or its end, when from_end) to the end of `last`. Spans of one phase add up.
struct PhaseSpan {
  std::string phase;
  sim::TaskId first;
  sim::TaskId last;
  bool from_end = false;
};

struct BuiltIteration {
  MachineResources machine;
  sim::TaskGraph graph;
  std::vector<PhaseSpan> spans;       // rank 0, in time order
  std::vector<std::size_t> devices;   // device index of each rank
  int simulated_ranks = 0;            // ranks simulated (fewer than devices under rank symmetry)
  double tokens_per_iteration = 0.0;  // of the whole job
  sim::Bytes model_states_per_device{0};
  sim::Flops model_flops_per_device{};
  sim::Flops hardware_flops_per_device{};
  std::vector<std::string> approximations;
};

/// Resolves the ranks' device names (each must be a GPU of the machine; std::invalid_argument
/// naming `strategy` otherwise) into `out.devices`, lays them out (make_rank_layout), records
/// the layout's note and the simulated rank count in `out`, and makes `out.machine`: the engine
/// resources of the simulated ranks' nodes (where every builder starts).
[[nodiscard]] RankLayout lay_out_ranks(BuiltIteration& out, const topo::Topology& topology,
                                       const std::vector<std::string>& names, const char* strategy, bool all_ranks,
                                       int block_ranks = 0);

struct IterationInputs {
  const ModelSpec& model;
  const TrainingSpec& training;
  const topo::Topology& topology;
  const CostModel& costs;
  const MeasuredCosts& collectives;
  const MeasuredCosts& host;    // host-side costs (cpu_adam); may be empty
  bool link_statistics = true;  // whether the run reports link activity (RunExperimentOptions::link_statistics)

  /// The strategy's collective options, with this run's link_statistics.
  [[nodiscard]] CollectiveOptions collective_options(CollectiveOptions options) const {
    options.link_statistics = link_statistics;
    return options;
  }
};

/// The CPU of `gpu`'s node fewest hops from it (the first declared among equals): the host of its
/// offload. Nullopt when the node has no CPU.
[[nodiscard]] std::optional<std::size_t> nearest_cpu(const topo::Topology& t, std::size_t gpu);

/// Builds the task graph of one iteration. Throws std::invalid_argument for a strategy the
/// machine cannot host (e.g. more ranks than GPUs); the parser reports those first with locations.
[[nodiscard]] BuiltIteration build_iteration(const IterationInputs& in, const StrategySpec& strategy);

[[nodiscard]] BuiltIteration build_data_parallel(const IterationInputs& in, const DataParallelSpec& spec);
[[nodiscard]] BuiltIteration build_collective(const IterationInputs& in, const CollectiveSpec& spec);
[[nodiscard]] BuiltIteration build_megatron(const IterationInputs& in, const MegatronSpec& spec);

}  // namespace offsim::models
