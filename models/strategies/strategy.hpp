#pragma once
// Training strategies turn (model, machine, costs, strategy) into the task graph of one training
// iteration. The set of strategies is closed: StrategySpec is a std::variant and
// build_iteration() visits it; `offsim list` prints the alternatives.
#include <cstdint>
#include <string>
#include <variant>
#include <vector>

#include "models/cost/cost_model.hpp"
#include "models/transformer/transformer.hpp"
#include "sim/exec/task_graph.hpp"
#include "topologies/topology.hpp"

namespace offsim::models {

struct TrainingSpec {
  std::int64_t micro_batch = 1;
  std::int64_t grad_accum = 1;
  Recompute recompute = Recompute::kNone;
  bool flash_attention = false;
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
};

struct DataParallelSpec {
  int zero_stage = 0;
  std::vector<std::string> devices;  // rank r runs on devices[r]; the ring follows this order
  std::int64_t reduce_bucket_elements = 0;
  bool overlap_comm = true;
  std::optional<OptimizerOffload> offload;  // stage 3 only
};

enum class CollectiveKind { kReduceScatter, kAllGather, kAllReduce };

/// One collective over the listed ranks, alone on the machine: the benchmark that calibration
/// data was measured with, for validating the collective model against it.
struct CollectiveSpec {
  CollectiveKind operation = CollectiveKind::kAllGather;
  sim::Bytes bytes{0};               // the buffer S (all-gather output, reduce-scatter input)
  std::vector<std::string> devices;  // rank r runs on devices[r]; the ring follows this order
};

using StrategySpec = std::variant<DataParallelSpec, CollectiveSpec>;

struct StrategyInfo {
  std::string kind;
  std::string description;
};
/// One line per strategy kind, for `offsim list`.
[[nodiscard]] std::vector<StrategyInfo> list_strategies();

/// The machine as engine resources: one compute unit per GPU (its stream) and per CPU (its
/// cores), one memory pool per device memory, one constraint per directed link and per memory
/// whose bandwidth transfers share.
struct MachineResources {
  sim::Platform platform;
  std::vector<std::optional<std::uint32_t>> unit_of_device;
  std::vector<std::optional<std::uint32_t>> pool_of_device;
  std::vector<std::optional<sim::ConstraintId>> memory_constraint_of_device;
  std::vector<sim::ConstraintId> constraint_of_link;

  /// Constraints a transfer from `src` to `dst` crosses: the source memory (if shared), the
  /// route's links, the destination memory (if shared).
  [[nodiscard]] std::vector<sim::ConstraintId> transfer_route(const topo::Topology& t, std::size_t src,
                                                              std::size_t dst) const;
};
[[nodiscard]] MachineResources make_machine_resources(const topo::Topology& topology);

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
  std::vector<PhaseSpan> spans;      // rank 0, in time order
  std::vector<std::size_t> devices;  // device index of each rank
  sim::Flops model_flops_per_device{};
  sim::Flops hardware_flops_per_device{};
  std::vector<std::string> approximations;
};

struct IterationInputs {
  const ModelSpec& model;
  const TrainingSpec& training;
  const topo::Topology& topology;
  const CostModel& costs;
  const MeasuredCosts& collectives;
  const MeasuredCosts& host;  // host-side costs (cpu_adam); may be empty
};

/// Builds the task graph of one iteration. Throws std::invalid_argument for a strategy the
/// machine cannot host (e.g. more ranks than GPUs); the parser reports those first with locations.
[[nodiscard]] BuiltIteration build_iteration(const IterationInputs& in, const StrategySpec& strategy);

[[nodiscard]] BuiltIteration build_data_parallel(const IterationInputs& in, const DataParallelSpec& spec);
[[nodiscard]] BuiltIteration build_collective(const IterationInputs& in, const CollectiveSpec& spec);

}  // namespace offsim::models
