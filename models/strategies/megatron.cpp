// Megatron-style 3D parallelism: tensor (TP), pipeline (PP) and data (DP) parallelism.
//
// Ranks: r = t + tp x (c + cp x (s + pp x d)) for tensor rank t, context rank c, pipeline stage s,
// replica d (ADR 0012), so a TP group is tp consecutive ranks (inside a node when tp divides the
// GPUs per node), a CP group the tp x cp ranks around it, and replica d is the block of
// tp x cp x pp ranks starting at d x tp x cp x pp. Under rank symmetry one replica is simulated
// and stands for all (its DP all-reduce flows are mirrored, docs/collectives.md).
//
// Model per rank:
// - Layers are split over pp x v virtual stages (v = virtual_stages) as Megatron-Core splits them
//   (pipeline_split.hpp: evenly, or with first/last_stage_layers, or counting the embedding and
//   loss as layers); rank stage s holds chunks c = 0..v-1, virtual stage c x pp + s, each with its
//   own layer count. The embedding is on virtual stage 0, the output head on the last.
// - Context parallelism (cp > 1, context_parallel.hpp): every rank works on s / cp tokens of each
//   sequence outside attention, and runs each layer's attention as cp ring steps with the KV
//   blocks passed around the CP group. Each GEMM is split Megatron-style over the TP group (layer_gemms with tp):
//   every layer's forward ends its attention and MLP blocks with an all-reduce of the activations
//   (b x s x h bf16) over the TP group, and so does backward (twice more with full recomputation,
//   which re-runs the forward). The layer's compute is split into two equal halves around them
//   (an approximation: the attention and MLP halves differ). Sequence parallelism replaces each
//   all-reduce with a reduce-scatter and an all-gather of the same total bytes, so it is costed as
//   the all-reduce; it divides the stored activations by tp.
//   With tp_comm_overlap (Transformer Engine's userbuffers, tp_overlap.hpp) there is no TP
//   collective task: each layer runs its kernels, then what its overlapped GEMM + collective pairs
//   add to them (exposed chunks, GEMMs slowed by the SMs the communication takes).
// - Stages exchange activations (forward) and their gradients (backward) point to point, from each
//   TP rank to the same TP rank of the next (previous) stage: b x s x h bf16 whole (Megatron-Core),
//   or 1/tp of it with sequence parallelism or with Megatron-LM's scatter/gather of pipeline tensors,
//   which the receiver all-gathers over its TP group (phases/pipeline_tensors.hpp).
// - Schedule, per rank, in Megatron's order: 1F1B (pp - s - 1 warm-up forwards, then one forward
//   one backward, then the cool-down backwards) or, with v > 1, the interleaved schedule
//   (warm-up (pp - s - 1) x 2 + (v - 1) x pp, micro-batches in groups of pp through the chunks).
//   An operation starts when the previous one on the rank ended and its input arrived
//   (phases/megatron_schedule.hpp).
// - After the last backward (Megatron's optimizer; `optimizer: deepspeed` takes DeepSpeed's, see
//   MegatronBuilder::policy): all-reduce of the rank's fp32 gradients (main_grad) over its DP
//   group (ZeRO-0) or a reduce-scatter, Adam on 1/dp of them, and an all-gather of the updated parameters (ZeRO-1,
//   Megatron's distributed optimizer). Adam on the GPU. With tied embeddings and pp > 1, between the
//   reduction and Adam, the word embedding's gradient all-reduce between the first and last stage
//   (phases/tied_embedding.hpp). With overlap_grad_reduce / overlap_param_gather, the reduction as
//   Megatron-Core's overlapped DDP instead (phases/pipeline_data_parallel.hpp, OverlappedDataParallel): each
//   bucket reduced once the last micro-batch's backward produced it, the parameters gathered before the
//   first micro-batch's forwards. At zero_stage 2, PyTorch's FSDP2 under the pipeline schedule
//   (phases/zero_policy.hpp, kFsdpUnderPipeline): the whole gradients accumulated in a buffer
//   allocated at the rank's first backward, reduce-scattered once after its last into an fp32
//   shard (the buffer then freed), Adam on the shard, the parameters all-gathered.
// - Memory: bf16 parameters and fp32 gradients (main_grad: Megatron accumulates and all-reduces
//   the gradients of bf16 training in fp32) of the rank's chunks, fp32 master + m + v (divided by
//   dp at ZeRO-1), stored activations of each in-flight micro-batch (allocated by its forward,
//   freed by its backward; Korthikanti's count with TP: /tp with sequence parallelism, otherwise
//   only the split part shrinks), and the logits on the last stage.
#include <fmt/compile.h>
#include <fmt/format.h>

#include <algorithm>
#include <deque>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <stdexcept>
#include <tuple>

#include "models/collectives/communicator.hpp"
#include "models/placement/state_placement.hpp"
#include "models/strategies/context_parallel.hpp"
#include "models/strategies/deepspeed_pipeline.hpp"
#include "models/strategies/layer_kernels.hpp"
#include "models/strategies/phases/collective_replay.hpp"
#include "models/strategies/phases/layer_compute.hpp"
#include "models/strategies/phases/megatron_schedule.hpp"
#include "models/strategies/phases/operation_replay.hpp"
#include "models/strategies/phases/pipeline_data_parallel.hpp"
#include "models/strategies/phases/pipeline_tensors.hpp"
#include "models/strategies/phases/rank_timeline.hpp"
#include "models/strategies/phases/sequence_parallel_grads.hpp"
#include "models/strategies/phases/steps.hpp"
#include "models/strategies/phases/tied_embedding.hpp"
#include "models/strategies/phases/zero_policy.hpp"
#include "models/strategies/pipeline_split.hpp"
#include "models/strategies/strategy.hpp"
#include "models/strategies/tp_overlap.hpp"
#include "models/transformer/phases.hpp"

namespace offsim::models {

namespace {

using sim::AllocTask;
using sim::BarrierTask;
using sim::Bytes;
using sim::ComputeTask;
using sim::TaskId;
using sim::TimePs;
using sim::TransferTask;

using Op = PipelineOp;

using OpKey = std::tuple<bool, int, int>;  // (forward, virtual stage, micro-batch)

// One task per operation of a simulated rank (its entry barrier, or its last task), by OpKey: a
// flat table in OpKey's order (backward before forward, then chunk, then micro-batch), so that
// walking it visits the operations as an ordered map of OpKey would, without a tree node per
// operation. A rank of stage s runs virtual stages c x pp + s only: its chunk c is vs / pp.
class OperationTasks {
 public:
  OperationTasks(int pp, int chunks, int micro_batches)
      : pp_(pp),
        chunks_(chunks),
        micro_batches_(micro_batches),
        tasks_(static_cast<std::size_t>(2 * chunks * micro_batches), kNone) {}
  TaskId& operator[](const OpKey& key) { return tasks_[slot(key)]; }
  [[nodiscard]] TaskId at(const OpKey& key) const {
    const TaskId t = tasks_[slot(key)];
    if (t == kNone) throw std::out_of_range("megatron: no such operation");
    return t;
  }
  // Calls f(key, task) for each operation set, in OpKey order; `stage` is the rank's.
  template <class F>
  void for_each(int stage, F&& f) const {
    for (std::size_t i = 0; i < tasks_.size(); ++i) {
      if (tasks_[i] == kNone) continue;
      const int mb = static_cast<int>(i % static_cast<std::size_t>(micro_batches_));
      const int chunk = static_cast<int>(i / static_cast<std::size_t>(micro_batches_)) % chunks_;
      const bool forward = i >= static_cast<std::size_t>(chunks_ * micro_batches_);
      f(OpKey{forward, chunk * pp_ + stage, mb}, tasks_[i]);
    }
  }

 private:
  static constexpr TaskId kNone{std::numeric_limits<std::uint32_t>::max()};
  [[nodiscard]] std::size_t slot(const OpKey& key) const {
    const auto [forward, vs, mb] = key;
    if (mb < 0 || mb >= micro_batches_ || vs / pp_ >= chunks_) throw std::out_of_range("megatron: no such operation");
    return static_cast<std::size_t>(((forward ? 1 : 0) * chunks_ + vs / pp_) * micro_batches_ + mb);
  }
  int pp_;
  int chunks_;
  int micro_batches_;
  std::vector<TaskId> tasks_;
};

// Tensor-parallel classes: with analytic collectives, the tp ranks of a TP group run the same
// kernels, and each one's all-reduce waits on nothing but its own work, so they move in lockstep;
// TP rank 0 can stand for its group (collapse_classes). Their pipeline transfers, which share NICs
// and links as flows, become one flow over the union of the members' routes (a link crossed by k
// members' transfers counted k times), which moves at the pace the slowest member would get.
// With context parallelism the tp x cp ranks of a stage run the same kernels and ring steps in
// lockstep too (the load-balanced chunks give each the same work); their class is the tp x cp block.
bool tensor_parallel_classes(const MegatronSpec& spec) {
  return spec.tp * spec.cp > 1 && !spec.all_ranks && spec.collectives.fidelity == Fidelity::kAnalytic;
}

RankLayout megatron_layout(BuiltIteration& out, const topo::Topology& topology, const MegatronSpec& spec) {
  const int group = spec.tp * spec.cp;
  RankLayout layout = lay_out_ranks(out, topology, spec.devices, "megatron", spec.all_ranks, group * spec.pp);
  if (tensor_parallel_classes(spec) && layout.simulated_ranks() % group == 0) {
    collapse_classes(layout, group);
    out.simulated_ranks = layout.simulated_ranks();
    if (spec.cp == 1) {
      out.approximations.push_back(fmt::format(
          "tensor-parallel classes: TP rank 0 of each group is simulated for its {} ranks (the same kernels in "
          "lockstep, analytic all-reduces at the pace of the group's slowest flow; pipeline transfers as one flow "
          "over the union of the members' routes, at the slowest member's pace); run with --all-ranks to simulate "
          "every rank",
          spec.tp));
    } else {
      out.approximations.push_back(fmt::format(
          "tensor- and context-parallel classes: rank 0 of each stage's tp x cp = {} ranks is simulated for them "
          "all (the same kernels and ring steps in lockstep, analytic all-reduces at the pace of the group's slowest "
          "flow; pipeline and ring transfers as one flow over the union of the members' routes, at the slowest "
          "member's pace); run with --all-ranks to simulate every rank",
          group));
    }
  }
  return layout;
}

// tp x cp x pp x dp, checked against the devices, the sequence and the micro-batches (the layer
// split checks itself, split_pipeline_layers).
int checked_ranks(const IterationInputs& in, const MegatronSpec& spec) {
  const auto& m = in.model;
  const int pp = spec.pp;
  const int v = spec.virtual_stages;
  const int ranks = spec.tp * spec.cp * pp * spec.dp;
  const int micro_batches = static_cast<int>(in.training.grad_accum);
  if (static_cast<int>(spec.devices.size()) != ranks) {
    throw std::invalid_argument(
        spec.cp > 1 ? fmt::format("megatron: tp x cp x pp x dp = {} ranks but {} devices", ranks, spec.devices.size())
                    : fmt::format("megatron: tp x pp x dp = {} ranks but {} devices", ranks, spec.devices.size()));
  }
  if (spec.cp > 1 && m.seq % (2 * spec.cp) != 0) {
    throw std::invalid_argument(fmt::format(
        "megatron: the sequence ({}) must split into 2 x cp = {} chunks (context parallelism)", m.seq, 2 * spec.cp));
  }
  if (spec.cp > 1 && !in.training.flash_attention) {
    throw std::invalid_argument(
        "megatron: context parallelism runs TransformerEngine's ring of flash attention "
        "blocks; it needs training.flash_attention: true");
  }
  if (v > 1 && micro_batches % pp != 0) {
    throw std::invalid_argument(
        fmt::format("megatron: the interleaved schedule needs micro-batches (grad_accum {}) divisible by pp ({})",
                    micro_batches, pp));
  }
  return ranks;
}

// A simulated rank: its place in the grid, its parameters and kernels (its GPU: its RankTimeline slot).
// One layer's forward work on a rank holding `local` (the rank's seq / cp tokens with context
// parallelism): the attention is over cp blocks of it (ring attention), the rest over its share.
[[nodiscard]] LayerWork context_parallel_layer_work(const ModelSpec& local, const TrainingSpec& train, int cp) {
  LayerWork work = layer_forward(local, train.micro_batch, train.flash_attention);
  work.attention = work.attention * static_cast<double>(cp);
  return work;
}

struct RankState {
  int rank = 0;
  int t = 0;
  int c = 0;  // context rank
  int stage = 0;
  std::size_t device = 0;
  std::int64_t params = 0;
  KernelTimes k;
};

// The gradient group as bands: dp ranks tp x pp apart; with cp > 1 the cp band (stride tp) and
// then the dp band (stride tp x cp x pp), in two stages (the bytes per rank of one flat ring over
// the dp x cp ranks, which the bands cannot name as one group).
[[nodiscard]] CollectivePlan gradient_group_plan(int tp, int cp, int pp, int ranks) {
  if (cp == 1) return {{Band{"dp", tp * pp, ranks}}, StageAlgorithm::kRing, {}};
  CollectivePlan plan{{Band{"cp", tp, tp * cp}}, StageAlgorithm::kRing, {}};
  if (ranks > tp * cp * pp) plan.stages.push_back(Band{"dp", tp * cp * pp, ranks});
  return plan;
}

// The constraints of the pipeline transfer from rank `from` to rank `to`; with tensor-parallel
// classes, those of every member's transfer (from + t to to + t) back to back, so that a link
// several of them cross is shared as by that many flows.
[[nodiscard]] std::vector<sim::ConstraintId> p2p_route(const MachineResources& machine, const topo::Topology& topology,
                                                       const std::vector<std::size_t>& devices, int class_size,
                                                       int from, int to) {
  std::vector<sim::ConstraintId> route;
  for (int t = 0; t < class_size; ++t) {
    machine.append_transfer_route(route, topology, devices[from + t], devices[to + t]);
    if (t == 0) route.reserve(route.size() * static_cast<std::size_t>(class_size));  // members' routes alike
  }
  return route;
}

// The routes of a build's pipeline transfers (p2p_route), worked out once per pair of ranks: every
// micro-batch's transfer between two stages crosses the same links, and the route depends on
// nothing else (the machine and the devices are fixed for the build).
class PipelineRoutes {
 public:
  PipelineRoutes(const MachineResources& machine, const topo::Topology& topology,
                 const std::vector<std::size_t>& devices, int class_size)
      : machine_(machine), topology_(topology), devices_(devices), class_size_(class_size) {}
  // One list per pair, which every transfer between them shares (sim::Route).
  [[nodiscard]] const sim::Route& operator()(int from, int to) {
    auto [it, inserted] = routes_.try_emplace({from, to});
    if (inserted) it->second = p2p_route(machine_, topology_, devices_, class_size_, from, to);
    return it->second;
  }

 private:
  const MachineResources& machine_;
  const topo::Topology& topology_;
  const std::vector<std::size_t>& devices_;
  int class_size_;
  std::map<std::pair<int, int>, sim::Route> routes_;
};

// The tied word embedding's gradient all-reduce (phases/tied_embedding.hpp: Megatron-LM's after the
// data-parallel reduction, DeepSpeed's ReduceTiedGrads before it) between each simulated first-stage
// rank and its last-stage counterpart, after `last`: V / tp x h per TP rank in the gradients' dtype.
void reduce_tied_embedding(const IterationInputs& in, BuiltIteration& out, RankTimeline& timeline,
                           const MegatronSpec& spec, int class_size, const ZeroPolicy& policy,
                           std::vector<TaskId>& last) {
  if (!in.model.tied_embeddings) return;
  const Bytes bytes =
      tied_embedding_gradient_bytes(in.model, spec.tp, policy.fp32_gradients() ? kFp32Bytes : kBf16Bytes);
  const auto route = [&](int from, int to) {
    return p2p_route(*out.machine, in.topology, out.devices, class_size, timeline.slot(from).rank,
                     timeline.slot(to).rank);
  };
  all_reduce_tied_gradients(timeline, embedding_group_pairs(timeline, spec.tp * spec.cp, spec.pp), bytes, route, last);
}

// The micro-batches' gradient additions outside the weight-gradient GEMMs, per parameter over the
// iteration (transformer/precision.hpp): none with Megatron's gradient_accumulation_fusion or
// under BF16_Optimizer (its own additions); Megatron's main_grad hook every micro-batch into an
// fp32 buffer; autograd's in-place add from the second micro-batch on for 16-bit gradients and
// under DeepSpeed's other optimizers, which own param.grad; under FSDP2 with the pipeline
// (zero_stage 2) its no-sync accumulation: the first micro-batch's gradients cast into the fp32
// buffer, the later ones added (with a bf16 reduce dtype, autograd's in-place add).
[[nodiscard]] std::int64_t unfused_accumulation_bytes_per_param(const ZeroPolicy& policy, const MegatronSpec& spec,
                                                                int micro_batches) {
  if (policy.bf16_optimizer()) return 0;
  const std::int64_t autograd =
      autograd_accumulation_bytes_per_param(policy.fp32_gradients() ? kFp32Bytes : kBf16Bytes) * (micro_batches - 1);
  if (policy.accumulates_whole_gradients()) {
    if (micro_batches < 2) return 0;  // one micro-batch: reduce-scattered as it comes
    return policy.fp32_gradients()
               ? kFsdp2UpcastBytesPerParam + kMainGradHookAccumulationBytesPerParam * (micro_batches - 1)
               : autograd;
  }
  if (spec.optimizer == MegatronSpec::Optimizer::kDeepSpeed) return autograd;
  if (spec.gradient_accumulation_fusion) return 0;
  return policy.fp32_gradients() ? kMainGradHookAccumulationBytesPerParam * micro_batches : autograd;
}

// Whether DeepSpeed's pipeline engine runs the pipeline (DeepSpeedPipelineBuilder).
[[nodiscard]] bool deepspeed_engine(const MegatronSpec& spec) {
  return spec.pipeline_engine == MegatronSpec::PipelineEngine::kDeepSpeed && spec.pp > 1;
}

// Megatron's tied embedding all-reduce after the data-parallel reduction (PipelineDataParallel's
// after_reduction); none under DeepSpeed's engine, which runs it before (point_to_point).
[[nodiscard]] std::function<void(std::vector<TaskId>&)> tied_embedding_after_reduction(
    const IterationInputs& in, BuiltIteration& out, RankTimeline& timeline, const MegatronSpec& spec, int class_size,
    const ZeroPolicy& policy) {
  if (deepspeed_engine(spec) || !in.model.tied_embeddings) return {};
  return [&in, &out, &timeline, &spec, class_size, &policy](std::vector<TaskId>& last) {
    reduce_tied_embedding(in, out, timeline, spec, class_size, policy, last);
  };
}

// How the schedules pass pipeline tensors (phases/pipeline_tensors.hpp): Megatron's by
// spec.scatter_gather_tensors_in_pipeline and sequence parallelism; DeepSpeed's engine splits them.
[[nodiscard]] PipelineTensorExchange megatron_exchange(const MegatronSpec& spec, std::int64_t elements) {
  return pipeline_tensor_exchange(elements, spec.tp, spec.sequence_parallel, spec.scatter_gather_tensors_in_pipeline,
                                  deepspeed_engine(spec));
}

// The embedding's and the head's work on the first and last virtual stages.
struct EdgeWork {
  TimePs time{0};
  sim::Flops flops{};
};
[[nodiscard]] EdgeWork edge_work(const KernelTimes& k, bool forward, int vs, int last_virtual, sim::Flops head_flops,
                                 int tp) {
  EdgeWork edge;
  if (forward) {
    if (vs == 0) edge.time = edge.time + k.embed_fwd;
    if (vs == last_virtual) {
      edge.time = edge.time + k.head_fwd;
      edge.flops = head_flops * (1.0 / tp);
    }
  } else {
    if (vs == 0) edge.time = edge.time + k.embed_bwd;
    if (vs == last_virtual) {
      edge.time = edge.time + k.head_bwd;
      edge.flops = head_flops * (2.0 / tp);
    }
  }
  return edge;
}

// Transformer Engine's userbuffers TP overlap (tp_overlap.hpp): what it adds to each layer, or
// nullopt when it is off.
std::optional<TpOverlapTimes> layer_overlaps(const IterationInputs& in, const MegatronSpec& spec) {
  if (!spec.tp_comm_overlap || spec.tp == 1) return std::nullopt;
  return tp_overlap_times(in, spec.tp, *spec.tp_comm_overlap);
}

// What the overlap adds to a layer's forward or backward in place of its TP all-reduce (nullopt:
// the all-reduce; phases/layer_compute.hpp's tp_reduction).
std::optional<TimePs> overlap_extra(const std::optional<TpOverlapTimes>& ub, bool forward) {
  if (!ub) return std::nullopt;
  return forward ? ub->forward_extra : ub->backward_extra;
}

// The name of a layer's TP all-reduce (or what replaces it); empty, and not formatted, when the
// graph keeps no names (a sweep's or search's point, where it was 2% of the search's instructions).
std::string tp_name(const sim::TaskGraph& g, int first, const std::string& tag, std::int64_t layer, int half) {
  return g.name_from([&] { return fmt::format(FMT_COMPILE("tp{}.{}.l{}.{}"), first, tag, layer, half); });
}

// About how many tasks a Megatron iteration adds: per simulated rank and micro-batch of each chunk,
// a forward and a backward operation (barrier, allocations, transfer in) and per layer its compute
// pieces, each with its TP all-reduce when tp > 1 (two analytic stages; flow-level ones add more,
// and the graph then grows past the reserve as it would without one), and with cp > 1 its ring.
// With replays (phases/operation_replay.hpp) an operation is one delay but for the first of each
// kind (simulated rank, direction, chunk), built in full before its replay replaces it.
[[nodiscard]] std::size_t estimated_tasks(const MegatronSpec& spec, std::int64_t layers, int sims, int micro_batches,
                                          bool full_recompute, bool replayed) {
  constexpr std::size_t kTasksPerOperationPair = 8;
  constexpr std::size_t kTasksPerAllReduce = 2;
  const std::size_t pieces = static_cast<std::size_t>(2 + (full_recompute ? 4 : 2));
  const std::size_t per_layer = spec.tp > 1 ? pieces * (1 + kTasksPerAllReduce) : 0;
  const std::size_t ring_tasks = spec.cp > 1 ? static_cast<std::size_t>(4 * spec.cp) : 0;
  const auto layers_per_chunk = static_cast<std::size_t>(layers / (spec.pp * spec.virtual_stages));
  const std::size_t per_operation_pair = kTasksPerOperationPair + layers_per_chunk * (per_layer + ring_tasks);
  const auto chunks = static_cast<std::size_t>(sims) * static_cast<std::size_t>(spec.virtual_stages);
  const auto pairs = chunks * static_cast<std::size_t>(micro_batches);
  if (!replayed) return pairs * per_operation_pair;
  return pairs * kTasksPerOperationPair + chunks * per_operation_pair;
}

// Megatron-Core's overlapped DDP (OverlappedDataParallel) of a rank of `stage` holding `params`:
// per chunk its backward pieces' gradient elements (one per layer, or the chunk when it runs as one
// kernel: tp = cp = 1), the embedding's in the first chunk's input end, the head's in the last
// chunk's output end, the rounding of the tensor-parallel share in the first chunk.
[[nodiscard]] OverlappedDataParallel::RankChunks ddp_chunks(const MegatronSpec& spec, const ModelSpec& m,
                                                            const ParameterCounts& params, const PipelineSplit& split,
                                                            int stage, std::int64_t held) {
  OverlappedDataParallel::RankChunks rc;
  rc.bucketed = stage == 0;  // training.py: bucketing only on pipeline rank 0, first chunk
  const int last_virtual = spec.pp * spec.virtual_stages - 1;
  const bool one_kernel = spec.tp == 1 && spec.cp == 1;
  std::int64_t total = 0;
  for (int c = 0; c < spec.virtual_stages; ++c) {
    const int vs = c * spec.pp + stage;
    const std::int64_t layers = split.of_virtual(vs);
    // A chunk without layers (an uneven split) is one piece: its edge's parameters, or none.
    std::vector<std::int64_t> pieces(
        static_cast<std::size_t>(one_kernel ? 1 : std::max<std::int64_t>(layers, 1)),
        params.per_layer / spec.tp * (one_kernel ? layers : std::min<std::int64_t>(layers, 1)));
    if (vs == 0) pieces.back() += (params.embedding + params.position) / spec.tp;
    if (vs == last_virtual)
      pieces.front() += (params.final_norm + (m.tied_embeddings ? 0 : params.output_head)) / spec.tp;
    for (const std::int64_t n : pieces) total += n;
    rc.pieces.push_back(std::move(pieces));
  }
  rc.pieces.front().back() += held - total;
  return rc;
}

// ddp_chunks of every simulated rank, in rank_state's order.
[[nodiscard]] std::vector<OverlappedDataParallel::RankChunks> ddp_rank_chunks(const MegatronSpec& spec,
                                                                              const ModelSpec& m,
                                                                              const ParameterCounts& params,
                                                                              const PipelineSplit& split,
                                                                              const std::vector<RankState>& ranks) {
  std::vector<OverlappedDataParallel::RankChunks> chunks;
  for (const RankState& rs : ranks) chunks.push_back(ddp_chunks(spec, m, params, split, rs.stage, rs.params));
  return chunks;
}

// One TP communicator per (replica, stage) group of simulated ranks: ranks outside a TP group
// never take part in its all-reduces.
struct TensorParallelGroups {
  std::deque<RankLayout> layouts;
  std::map<int, Communicator> comms;           // by the group's first rank
  std::map<int, const RankLayout*> layout_of;  // by the group's first rank
  // Replayed flow-level TP all-reduces (phases/collective_replay.hpp): every TP all-reduce of a
  // group moves the same buffer over the same ranks, so under flow fidelity it is simulated once
  // alone and replayed; the checks of its preconditions fall back to the full build.
  std::optional<CollectiveReplays> replays;
  [[nodiscard]] Communicator& at(int first) { return comms.at(first); }
  // A layer piece's TP all-reduce over the group from `first` (tp_reduction), replayed where it can be.
  // `key`: the replay's (one per group and shape; a layer piece's is `first`).
  std::vector<TaskId> all_reduce(int first, RankTimeline& timeline, const std::vector<int>& members,
                                 const std::string& name, std::optional<sim::TimePs> overlap_extra,
                                 std::int64_t elements, const CollectivePlan& plan,
                                 const std::vector<std::vector<TaskId>>& deps, BuiltIteration& out,
                                 const IterationInputs& in, const CollectiveOptions& options,
                                 std::optional<int> key = std::nullopt) {
    const auto build = [&](sim::TaskGraph& scratch, const std::vector<std::vector<TaskId>>& starts) {
      Communicator alone(scratch, out.machine, in.topology, *layout_of.at(first), in.collectives, in.costs, options,
                         out.approximations);
      return alone.add(CollectiveKind::kAllReduce, name, elements, plan, starts);
    };
    if (replays) {
      if (auto replayed = replays->add(key.value_or(first), timeline, members, name, deps, build, first))
        return *replayed;
    }
    return tp_reduction(at(first), timeline, members, name, overlap_extra, elements, plan, deps);
  }
  // The group of `tp` ranks from `first` (once).
  void add(int first, int tp, int class_size, BuiltIteration& out, const IterationInputs& in,
           const CollectiveOptions& options) {
    if (comms.contains(first)) return;
    std::vector<std::size_t> group;
    for (int t = 0; t < tp; ++t) group.push_back(out.devices[first + t]);
    layouts.push_back(make_rank_layout(in.topology, group, true, nullptr));
    if (class_size > 1) collapse_classes(layouts.back(), tp);
    layout_of[first] = &layouts.back();
    comms.emplace(std::piecewise_construct, std::forward_as_tuple(first),
                  std::forward_as_tuple(out.graph, out.machine, in.topology, layouts.back(), in.collectives, in.costs,
                                        options, out.approximations));
  }
};

// Before an operation (after its entry barriers `at`, which the received transfer precedes), with
// the scatter/gather of pipeline tensors: the received tensor's all-gather over TP group `first`
// (gather_split_1d_tensor, phases/pipeline_tensors.hpp).
void gather_received(const PipelineTensorExchange& exchange, TensorParallelGroups& tp_comms, int first,
                     const std::string& tag, bool forward, int vs, int last_virtual, std::int64_t elements,
                     const CollectivePlan& plan, std::vector<TaskId>& at) {
  if (!exchange.gathered) return;
  at = gather_received_tensor(tp_comms.at(first), fmt::format(FMT_COMPILE("tp{}.{}.gather"), first, tag), forward, vs,
                              last_virtual, elements, plan, at);
}

// The rank of TP rank t, context rank c of `stage` in `replica` (Megatron's order: tp fastest,
// then cp, pp, dp).
[[nodiscard]] int rank_of(const MegatronSpec& spec, int t, int c, int stage, int replica) {
  return t + spec.tp * (c + spec.cp * (stage + spec.pp * replica));
}

// What the report says of the pipeline (after the notes every strategy shares).
[[nodiscard]] std::vector<std::string> pipeline_approximations(const MegatronSpec& spec, const PipelineSplit& split) {
  std::vector<std::string> notes;
  if (spec.tp > 1 && !spec.tp_comm_overlap) {
    notes.emplace_back(
        "tensor parallelism: each layer's compute split in equal halves around its all-reduces; sequence "
        "parallelism costed as the all-reduce it replaces");
  }
  notes.emplace_back(
      spec.overlap_grad_reduce
          ? "pipeline: Megatron-Core's overlapped DDP (overlap_grad_reduce: buckets reduced as the last micro-batch's "
            "backward produces them, one layer's gradients at a time; overlap_param_gather: the previous step's "
            "parameters gathered at the iteration's start in forward order, each layer's first forward waiting for "
            "its bucket)"
          : "pipeline: gradients reduced after the last backward (no overlap with the cool-down)");
  if (spec.tp > 1 && spec.tp_comm_overlap) notes.push_back(tp_overlap_approximation(*spec.tp_comm_overlap));
  if (!split.note.empty()) notes.push_back(split.note);
  if (spec.cp > 1) notes.push_back(context_parallel_approximation(spec.cp));
  return notes;
}

// The pipeline's notes after the shared ones; with Megatron-DeepSpeed's --deepspeed and pp > 1
// (DeepSpeed's PipelineEngine) first of all the engine's unmeasured costs: with the device's
// unmeasured kernels, the largest uncertainty of such a run.
void add_pipeline_approximations(BuiltIteration& out, const MegatronSpec& spec, const PipelineSplit& split,
                                 const ZeroPolicy& policy, bool tied_embeddings) {
  for (auto& note : pipeline_approximations(spec, split)) out.approximations.push_back(std::move(note));
  if (tied_embeddings && spec.pp > 1 && !deepspeed_engine(spec))
    out.approximations.push_back(tied_embedding_approximation());
  if (policy.accumulates_whole_gradients()) {
    out.approximations.emplace_back(fsdp_under_pipeline_approximation());
  }
  if (spec.pipeline_engine == MegatronSpec::PipelineEngine::kDeepSpeed && spec.pp > 1) {
    out.approximations.insert(out.approximations.begin(), deepspeed_pipeline_approximation());
  }
}

[[nodiscard]] OverlappedDataParallel::Options ddp_options(const MegatronSpec& spec, int micro_batches) {
  return {spec.overlap_grad_reduce, spec.overlap_param_gather, spec.align_param_gather, spec.bucket_size,
          micro_batches};
}

// The parameters of a rank of `stage` (its share of its TP group's); the head is on `last_stage`.
[[nodiscard]] std::int64_t stage_parameters(const ParameterCounts& params, const PipelineSplit& split,
                                            const ModelSpec& m, int stage, int tp, int last_stage) {
  std::int64_t n = split.of_stage(stage) * params.per_layer;
  if (stage == 0) n += params.embedding + params.position;
  if (stage == last_stage) n += params.final_norm + (m.tied_embeddings ? 0 : params.output_head);
  return (n + tp - 1) / tp;
}

// The model states of a rank holding n parameters (models/placement): its parameters and
// gradients whole (FSDP2 under the pipeline: its fp32 gradient shard, the whole buffer allocated
// by the schedule, allocate_whole_gradients), its optimizer share (over the dp group where
// partitioned), all on the GPU.
[[nodiscard]] StatePlacement rank_model_states(std::int64_t n, const ZeroPolicy& policy, int dp) {
  StateCounts c;
  c.held = n;
  c.sharded = n;
  c.partitioned = policy.partitioned();
  c.shard_ranks = dp;
  c.gradient_buffers = policy.gradient_buffers();
  c.fp32_gradient_partition = policy.accumulates_whole_gradients();
  return place_model_states(c, kBf16MixedPrecision);
}

// The data-parallel optimizer (MegatronSpec::optimizer): Megatron-LM's (fp32 main_grad, its
// distributed optimizer at zero_stage 1, FSDP2 under the pipeline schedule at zero_stage 2) or
// DeepSpeed's engine.
[[nodiscard]] ZeroPolicy megatron_policy(const MegatronSpec& spec) {
  return spec.optimizer == MegatronSpec::Optimizer::kDeepSpeed
             ? ZeroPolicy::deepspeed(spec.zero_stage, spec.fp32_grad_accum, false)
             : ZeroPolicy::megatron(spec.zero_stage, spec.fp32_grad_accum);
}

// build_megatron in phases. The constructor checks the spec and works out the layout, the work
// and states of one rank, each simulated rank's place and the TP communicators; build() adds the
// iteration's tasks phase by phase: model states, each TP group's schedule of operations, the
// point-to-point transfers between stages, the DP gradient reduction, Adam and (ZeRO-1) the
// parameter all-gather.
class MegatronBuilder {
 public:
  MegatronBuilder(const IterationInputs& inputs, const MegatronSpec& strategy)
      : in(inputs),
        spec(strategy),
        out(),
        g(out.graph),
        timeline(out.graph),
        m(inputs.model),
        train(inputs.training),
        tp(strategy.tp),
        pp(strategy.pp),
        cp(strategy.cp),
        dp(strategy.dp * strategy.cp),
        v(strategy.virtual_stages),
        ranks(checked_ranks(inputs, strategy)),
        micro_batches(static_cast<int>(inputs.training.grad_accum)),
        layout(megatron_layout(out, inputs.topology, strategy)),
        sims(layout.simulated_ranks()),
        dp_comm(g, out.machine, inputs.topology, layout, inputs.collectives, inputs.costs,
                inputs.collective_options(strategy.collectives), out.approximations),
        rank_state(sims),
        entry(sims, OperationTasks(strategy.pp, strategy.virtual_stages, micro_batches)),
        exit(sims, OperationTasks(strategy.pp, strategy.virtual_stages, micro_batches)),
        dp_plan{gradient_group_plan(tp, cp, pp, ranks)} {
    if (train.recompute == Recompute::kFull) recomputed = w.gemm + w.attention;
    if (train.recompute == Recompute::kSelective) recomputed = w.attention;
    place_ranks();
    make_tp_communicators();
    if (cp > 1) {
      ring.emplace(timeline, *out.machine, in.topology, out.devices, RingAttention::Grid{tp, cp, layout.class_size},
                   spec.collectives.fidelity, in.link_statistics, ring_kv);
    }
    if (spec.overlap_grad_reduce) {
      ddp.emplace(timeline, dp_comm, policy, dp_plan, dp, ddp_rank_chunks(spec, m, params, split, rank_state),
                  ddp_options(spec, micro_batches));
    }
  }

  // The iteration's tasks, phase by phase.
  BuiltIteration build() {
    g.reserve(
        estimated_tasks(spec, m.layers, sims, micro_batches, train.recompute == Recompute::kFull, replays.enabled()));
    const std::vector<TaskId> ready = place_states();
    run_schedules(ready);
    if (ddp) ddp->gather(ready);
    point_to_point();
    (void)g.add("iteration.end", "end", BarrierTask{}, data_parallel_step());
    finish();
    if (tp_comms.replays) out.replayed = tp_comms.replays->take();
    return std::move(out);
  }
  virtual ~MegatronBuilder() = default;

 protected:  // (DeepSpeedPipelineBuilder runs its own schedule over these)
  const IterationInputs& in;
  const MegatronSpec& spec;
  BuiltIteration out;
  sim::TaskGraph& g;
  RankTimeline timeline;  // the simulated ranks' GPUs (place_ranks), in rank_state's order
  const ModelSpec& m;
  const TrainingSpec& train;
  const int tp;
  const int pp;
  const int cp;
  // The data-parallel group of the shared steps (gradient reduction, optimizer partition): the
  // dp x cp ranks holding the same weights (Megatron-Core's data-parallel group with context
  // parallelism); spec.dp replicas of the data.
  const int dp;
  const int v;
  const int ranks;
  const int micro_batches;
  const RankLayout layout;
  const int sims;
  Communicator dp_comm;

  // The data-parallel optimizer (megatron_policy; phases/zero_policy.hpp states each).
  const ZeroPolicy policy = megatron_policy(spec);

  // Work and states of one rank. With context parallelism the rank's share of the sequence (ml,
  // local_in: seq / cp tokens) sets everything but the attention, which is cp blocks of it.
  const ParameterCounts params = count_parameters(m);
  const PipelineSplit split = split_pipeline_layers(m.layers, spec);
  const int last_virtual = pp * v - 1;
  const ModelSpec ml = context_parallel_share(m, cp);
  const IterationInputs local_in{ml, train, in.topology, in.costs, in.collectives, in.host, in.link_statistics};
  const std::optional<TpOverlapTimes> ub = layer_overlaps(local_in, spec);  // userbuffers TP overlap
  const std::int64_t tokens = train.micro_batch * ml.seq;
  const std::int64_t activation_elements = tokens * m.hidden;
  const Bytes stored = stored_activations_on_tp_rank(ml, train, tp, spec.sequence_parallel);
  const Bytes logits{tokens * ((m.vocab + tp - 1) / tp) * kLogitBytesPerElement};
  // The loss's fp32 workspace on the last stage (transformer/precision.hpp): held while the head runs.
  const Bytes loss_workspace{tokens * ((m.vocab + tp - 1) / tp) * kLossWorkspaceBytesPerElement};
  const PipelineTensorExchange exchange = megatron_exchange(spec, activation_elements);  // p2p bytes, gathers
  const LayerWork w = context_parallel_layer_work(ml, train, cp);
  const Bytes ring_kv = ring_kv_bytes(m, train.micro_batch, cp, tp);
  std::optional<RingAttention> ring;          // context parallelism's ring attention (context_parallel.hpp)
  std::optional<OverlappedDataParallel> ddp;  // Megatron-Core's overlap_grad_reduce / overlap_param_gather
  sim::Flops recomputed{};
  const sim::Flops head_flops = head_forward_flops(ml, train.micro_batch);
  const int tp_reductions_backward = train.recompute == Recompute::kFull ? 4 : 2;

  TensorParallelGroups tp_comms;
  const CollectivePlan tp_plan = Communicator::flat(tp);
  std::vector<RankState> rank_state;
  std::map<int, int> sim_of_rank;

  // entry[s][(forward, vs, mb)]: the barrier at which the operation may start; exit: its last
  // task (run_schedules). last_op: each rank's last task so far.
  std::vector<OperationTasks> entry, exit;
  std::vector<TaskId> last_op;

  // The DP group of a rank: the ranks tp x cp x pp apart, with cp > 1 its CP group's too (gradient_group_plan).
  const CollectivePlan dp_plan;

  // Replayed operations (phases/operation_replay.hpp); those the overlapped DDP hooks into
  // (ddp_start, ddp_end) add tasks beside the chain and are built in full.
  OperationReplays replays{tp > 1 && cp == 1 && spec.collectives.fidelity == Fidelity::kAnalytic &&
                               !in.link_statistics && layout.class_size == tp,
                           in.replayed_chains};

  // Of a rank's n parameters, those whose optimizer states it holds and updates: 1/dp of them where
  // the optimizer is partitioned (Megatron's distributed optimizer, DeepSpeed's ZeRO-1, BF16_Optimizer).
  [[nodiscard]] std::int64_t optimizer_share(std::int64_t n) const { return policy.updated_parameters(n, n, dp); }
  [[nodiscard]] StatePlacement states_of(int s) const { return rank_model_states(rank_state[s].params, policy, dp); }

  // Each simulated rank's place, parameters and kernel times. The times depend on the rank only
  // through the parameters it updates: worked out once per count (the middle stages share one).
  void place_ranks() {
    std::map<std::int64_t, KernelTimes> times_by_updated;
    for (int s = 0; s < sims; ++s) {
      RankState& rs = rank_state[s];
      rs.rank = layout.simulated[s];
      rs.t = rs.rank % tp;
      rs.c = (rs.rank / tp) % cp;
      rs.stage = (rs.rank / (tp * cp)) % pp;
      rs.device = out.devices[rs.rank];
      (void)timeline.add_rank(rs.rank, *out.machine->unit_of_device[rs.device],
                              *out.machine->pool_of_device[rs.device]);
      rs.params = stage_parameters(params, split, m, rs.stage, tp, last_virtual % pp);
      const std::int64_t updated = optimizer_share(rs.params);
      auto [known, added] = times_by_updated.try_emplace(updated);
      if (added) known->second = kernel_times(local_in, updated, tp, spec.sequence_parallel);
      rs.k = known->second;
      sim_of_rank[rs.rank] = s;
    }
  }

  void make_tp_communicators() {
    if (tp == 1) return;
    tp_comms.replays.emplace(in.replay_flow_collectives && spec.collectives.fidelity == Fidelity::kFlow && cp == 1 &&
                                 !ub && layout.class_size == 1,
                             out.machine->platform);
    for (const RankState& rs : rank_state)
      tp_comms.add(rs.rank - rs.t, tp, layout.class_size, out, in, in.collective_options(spec.collectives));
  }

  // Model states.
  std::vector<TaskId> place_states() {
    std::vector<TaskId> ready(sims);
    for (int s = 0; s < sims; ++s) {
      ready[s] = allocate_model_states(timeline, s, states_of(s), policy, /*optimizer_offload=*/false);
      if (train.fp8) {  // Transformer Engine's FP8 weight copies and scaling state (layer_kernels.hpp)
        ready[s] =
            timeline.alloc(s, "alloc.fp8", "setup", "FP8 weights and scaling state",
                           fp8_state_bytes(m, *train.fp8, tp, 1, split.of_stage(rank_state[s].stage)), {ready[s]});
      }
    }
    return ready;
  }

  // The operations, built group by group (the TP ranks of one stage run the same schedule in
  // lockstep through their all-reduces).
  void run_schedules(const std::vector<TaskId>& ready) {
    last_op = ready;
    std::map<int, std::vector<int>> groups;  // first rank of the TP group -> simulated indices
    for (int s = 0; s < sims; ++s) groups[rank_state[s].rank - rank_state[s].t].push_back(s);
    for (const auto& [first, members] : groups) run_group(first, members, ready);
  }

  // One TP group's schedule; previous: each member's last task.
  virtual void run_group(int first, const std::vector<int>& members, const std::vector<TaskId>& ready) {
    const int stage = rank_state[members.front()].stage;
    const std::vector<Op> ops = megatron_schedule(pp, stage, v, micro_batches);
    std::vector<TaskId> previous(members.size());
    for (std::size_t i = 0; i < members.size(); ++i) previous[i] = ready[members[i]];
    for (const Op& op : ops) run_operation(first, members, op.chunk * pp + stage, op, previous);
  }

  // One operation of virtual stage vs on every member of the TP group: its barrier, the
  // activations it allocates, its compute and all-reduces, and the frees after it. `at` holds each
  // member's task the operation follows and, on return, its last one (in place: a list per
  // operation was 74 k allocations in the tp 8 search).
  void run_operation(int first, const std::vector<int>& members, int vs, const Op& op, std::vector<TaskId>& at) {
    // The operation's part of its tasks' names, made only for a graph that keeps them (nothing else
    // reads it: formatting it was about 2% of a search).
    const std::string tag =
        g.name_from([&] { return fmt::format(FMT_COMPILE("{}{}.mb{}"), op.forward ? "F" : "B", vs, op.micro_batch); });
    for (std::size_t i = 0; i < members.size(); ++i) {
      const int s = members[i];
      at[i] = g.add(g.name_from([&] { return fmt::format(FMT_COMPILE("r{}.{}.ready"), rank_state[s].rank, tag); }),
                    "pipeline", BarrierTask{}, {at[i]});
      entry[s][{op.forward, vs, op.micro_batch}] = at[i];
      if (ddp && op.forward && op.micro_batch == 0) ddp->forward_chunk(s, vs / pp, at[i]);
      if (!op.forward && op.micro_batch == 0 && op.chunk == v - 1)  // the rank's first backward
        at[i] = allocate_whole_gradients(timeline, s, policy, rank_state[s].params, tag, at[i]);
    }
    gather_received(exchange, tp_comms, first, tag, op.forward, vs, last_virtual, activation_elements, tp_plan, at);
    const char* phase = op.forward ? phase::kForward : phase::kBackward;
    const bool head = vs == last_virtual;
    if (op.forward) {
      for (std::size_t i = 0; i < members.size(); ++i) {
        at[i] = timeline.alloc(members[i], named(tag, ".alloc.activations"), "setup", "activations",
                               activation_bytes(vs), {at[i]});
      }
    }
    if (head) {
      for (std::size_t i = 0; i < members.size(); ++i) {
        at[i] = timeline.alloc(members[i], named(tag, ".alloc.loss"), "setup", "activations", loss_workspace, {at[i]});
      }
    }
    run_chunk(first, members, op, vs, tag, phase, at);
    for (std::size_t i = 0; i < members.size(); ++i) {
      const int s = members[i];
      if (head) at[i] = timeline.release(s, named(tag, ".free.loss"), "memory", "activations", loss_workspace, {at[i]});
      if (!op.forward) {
        at[i] = timeline.release(s, named(tag, ".free.activations"), "memory", "activations", activation_bytes(vs),
                                 {at[i]});
      }
      exit[s][{op.forward, vs, op.micro_batch}] = at[i];
      // Rank 0's phases: its busy time per operation; the waits before them are the bubble.
      if (rank_state[s].rank == 0) {
        const TaskId start = entry[s][{op.forward, vs, op.micro_batch}];
        out.spans.push_back({phase::kPipelineBubble, last_op[s], start, true});
        out.spans.push_back({phase, start, at[i], true});
      }
      last_op[s] = at[i];
    }
  }

  // `tag` + `suffix` as a task's name part, or empty when the graph keeps no names (a sweep's or
  // search's point: sim::ScopedUnnamedTasks), without building it.
  [[nodiscard]] std::string named(const std::string& tag, std::string_view suffix) const {
    return g.name_from([&] { return std::string(tag).append(suffix); });
  }

  // The activations an operation of virtual stage vs stores (with the logits on the last one).
  [[nodiscard]] Bytes activation_bytes(int vs) const {
    return Bytes{stored.count * split.of_virtual(vs) + (vs == last_virtual ? logits.count : 0)};
  }

  // Megatron-Core's overlapped DDP: the first micro-batch's forward piece k (its first kernel
  // `start`) waits for its parameters' gather; the last one's backward piece k produces the
  // gradients reduced (after `end`).
  void ddp_start(int s, const Op& op, int vs, std::int64_t k, TaskId start) {
    if (ddp && op.forward && op.micro_batch == 0) ddp->forward_piece(s, vs / pp, static_cast<std::size_t>(k), start);
  }
  void ddp_end(int s, const Op& op, int vs, std::int64_t k, TaskId end) {
    if (ddp && !op.forward && op.micro_batch == micro_batches - 1)
      ddp->backward_piece(s, vs / pp, static_cast<std::size_t>(k), end);
  }

  // The chunk's compute on every member, after at. Each half-layer ends with a TP all-reduce;
  // without TP the chunk is one kernel per rank.
  void run_chunk(int first, const std::vector<int>& members, const Op& op, int vs, const std::string& tag,
                 const char* phase, std::vector<TaskId>& at) {
    const bool forward = op.forward;
    const KernelTimes& k = rank_state[members.front()].k;
    const EdgeWork edge = edge_work(k, forward, vs, last_virtual, head_flops, tp);
    const TimePs layer = forward ? k.layer_fwd : k.layer_bwd;
    const sim::Flops layer_flops =
        (forward ? (w.gemm + w.attention) : (w.gemm + w.attention) * 2.0 + recomputed) * (1.0 / tp);
    const std::int64_t layers_per_chunk = split.of_virtual(vs);
    if (cp > 1) {
      run_chunk_context_parallel(first, members, op, vs, tag, phase, at);
      return;
    }
    if (tp == 1) {
      for (std::size_t i = 0; i < members.size(); ++i) {
        at[i] = timeline.compute(members[i], tag, phase, TimePs{layer.ps * layers_per_chunk} + edge.time,
                                 layer_flops * static_cast<double>(layers_per_chunk) + edge.flops, "layer", {at[i]});
        ddp_start(members[i], op, vs, 0, at[i]);
        ddp_end(members[i], op, vs, 0, at[i]);
      }
      return;
    }
    OperationReplays::Recording recording;
    const bool hooked = ddp && (op.forward ? op.micro_batch == 0 : op.micro_batch == micro_batches - 1);
    if (replays.enabled() && members.size() == 1 && !hooked) {
      if (replays.replayed({first, forward, vs}, timeline, members[0], tag, at[0])) return;
      recording = replays.start({first, forward, vs}, g, at.front());
    }
    const int reductions = ub ? 1 : forward ? 2 : tp_reductions_backward;
    const TimePs piece{layer.ps / reductions};
    for (std::size_t i = 0; i < members.size(); ++i) {
      if (edge.time.ps > 0) {
        at[i] = timeline.compute(members[i], named(tag, ".edge"), phase, edge.time, edge.flops, "gemm", {at[i]});
        if (vs == 0) ddp_start(members[i], op, vs, 0, at[i]);  // the embedding: the first layer's bucket
      }
    }
    std::vector<std::vector<TaskId>>& deps = piece_ends;
    deps.resize(members.size());
    const std::uint32_t unit = *out.machine->unit_of_device[rank_state[members[0]].device];
    OperationReplays::Piece first_layer{g.mark(), at.front()};
    for (std::int64_t l = 0; l < layers_per_chunk; ++l) {
      // A recorded operation's layers are built alike (nothing below depends on l but names and
      // the DDP hooks, which a recorded operation has none of): the first one tells them all.
      if (l == 1 && replays.finish_repeated(recording, first_layer, layers_per_chunk, timeline, members[0], tag, unit,
                                            at.front())) {
        return;
      }
      for (int half = 0; half < reductions; ++half) {
        for (std::size_t i = 0; i < members.size(); ++i) {
          const auto name = g.name_from([&] { return fmt::format(FMT_COMPILE("{}.l{}.{}"), tag, l, half); });
          const TaskId piece_end =
              timeline.compute(members[i], name, phase, piece, layer_flops * (1.0 / reductions), "layer", {at[i]});
          deps[i].assign(1, piece_end);
          if (half == 0) ddp_start(members[i], op, vs, l, piece_end);
        }
        at = tp_comms.all_reduce(first, timeline, members, tp_name(g, first, tag, l, half), overlap_extra(ub, forward),
                                 activation_elements, tp_plan, deps, out, in, in.collective_options(spec.collectives));
      }
      for (std::size_t i = 0; i < members.size(); ++i) ddp_end(members[i], op, vs, l, at[i]);
    }
    for (std::size_t i = 0; i < members.size() && split.of_virtual(vs) == 0; ++i) ddp_end(members[i], op, vs, 0, at[i]);
    replays.finish(recording, timeline, members[0], tag, unit, at.front());
  }

  // The chunk's compute on every member with context parallelism (context_parallel.hpp): per layer,
  // the non-attention work split in equal pieces around the TP all-reduces (two forward, two or
  // four backward), the first piece followed by the layer's ring attention (cp blocks with the KV
  // passed around the CP group).
  void run_chunk_context_parallel(int first, const std::vector<int>& members, const Op& op, int vs,
                                  const std::string& tag, const char* phase, std::vector<TaskId>& at) {
    const bool forward = op.forward;
    const KernelTimes& k = rank_state[members.front()].k;
    const EdgeWork edge = edge_work(k, forward, vs, last_virtual, head_flops, tp);
    const TimePs block = forward ? k.attention_fwd : k.attention_bwd;
    const TimePs rest{(forward ? k.layer_fwd : k.layer_bwd).ps - block.ps};
    const sim::Flops attention = w.attention * (1.0 / tp);
    const sim::Flops all = (forward ? (w.gemm + w.attention) : (w.gemm + w.attention) * 2.0 + recomputed) * (1.0 / tp);
    // A block's FLOPs: its share of the attention, backward twice that plus the recomputed forward.
    const double passes = forward ? 1.0 : (train.recompute == Recompute::kNone ? 2.0 : 3.0);
    const sim::Flops block_flops = attention * (passes / cp);
    const int reductions = tp == 1 || ub ? 1 : (forward ? 2 : tp_reductions_backward);
    const TimePs piece{rest.ps / reductions};
    const sim::Flops piece_flops{(all.count - block_flops.count * cp) / reductions};
    for (std::size_t i = 0; i < members.size(); ++i) {
      if (edge.time.ps > 0) {
        at[i] = timeline.compute(members[i], named(tag, ".edge"), phase, edge.time, edge.flops, "gemm", {at[i]});
        if (vs == 0) ddp_start(members[i], op, vs, 0, at[i]);  // the embedding: the first layer's bucket
      }
    }
    for (std::int64_t l = 0; l < split.of_virtual(vs); ++l) {
      for (int half = 0; half < reductions; ++half) {
        for (std::size_t i = 0; i < members.size(); ++i) {
          const int s = members[i];
          const std::string name = fmt::format(FMT_COMPILE("{}.l{}.{}"), tag, l, half);
          at[i] = timeline.compute(s, name, phase, piece, piece_flops, "layer", {at[i]});
          if (half == 0) ddp_start(s, op, vs, l, at[i]);
          if (half == 0) at[i] = ring->run(s, forward, name, phase, block, block_flops, at[i]);
        }
        if (tp == 1) continue;
        std::vector<std::vector<TaskId>> deps(members.size());
        for (std::size_t i = 0; i < members.size(); ++i) deps[i] = {at[i]};
        at = tp_reduction(tp_comms.at(first), timeline, members, tp_name(g, first, tag, l, half),
                          overlap_extra(ub, forward), activation_elements, tp_plan, deps);
      }
      for (std::size_t i = 0; i < members.size(); ++i) ddp_end(members[i], op, vs, l, at[i]);
    }
    for (std::size_t i = 0; i < members.size() && split.of_virtual(vs) == 0; ++i) ddp_end(members[i], op, vs, 0, at[i]);
  }

  // Point-to-point: each operation's input comes from the same TP rank of the neighbouring virtual
  // stage (forward: the previous one's activations; backward: the next one's gradients).
  virtual void point_to_point() {
    // The sending rank depends on the operation only through the sender's stage: it is looked up
    // (simulated index and route) once a stage, not once an operation.
    struct Sender {
      bool looked_up = false;
      int simulated = -1;  // its simulated index; -1: not simulated (nothing is sent)
      const sim::Route* route = nullptr;
    };
    std::vector<Sender> senders;
    for (int s = 0; s < sims; ++s) {
      const RankState& rs = rank_state[s];
      const int replica = rs.rank / (tp * cp * pp);
      senders.assign(static_cast<std::size_t>(pp), Sender{});
      entry[s].for_each(rs.stage, [&](const OpKey& key, TaskId start) {
        const auto [forward, vs, mb] = key;
        const int from_vs = forward ? vs - 1 : vs + 1;
        if (from_vs < 0 || from_vs > last_virtual) return;
        const int from_rank = rank_of(spec, rs.t, rs.c, from_vs % pp, replica);
        Sender& sender = senders[static_cast<std::size_t>(from_vs % pp)];
        if (!sender.looked_up) {
          sender.looked_up = true;
          if (const auto found = sim_of_rank.find(from_rank); found != sim_of_rank.end()) {
            sender.simulated = found->second;
            sender.route = &stage_route(from_rank, rs.rank);
          }
        }
        if (sender.simulated < 0) return;
        const TaskId sent = exit[sender.simulated].at({forward, from_vs, mb});
        TransferTask transfer{};
        transfer.route = *sender.route;
        transfer.bytes = exchange.bytes_per_rank;
        const auto name =
            g.name_from([&, forward = forward, mb = mb] {  // bindings copied: clang 15 cannot name them in a lambda
              return fmt::format(FMT_COMPILE("p2p.{}{}.mb{}.r{}to{}"), forward ? "act" : "grad", from_vs, mb, from_rank,
                                 rs.rank);
            });
        g.add_dependency(start, g.add(name, phase::kCommunication, std::move(transfer), {sent}));
      });
    }
  }

  PipelineRoutes stage_route{*out.machine, in.topology, out.devices, layout.class_size};  // p2p_route, once a pair
  // run_chunk's scratch: each TP member's last layer piece before its all-reduce, kept between
  // calls so that the lists are not allocated again for every piece (two allocations each).
  std::vector<std::vector<TaskId>> piece_ends;

  // Data parallelism after the schedules (phases/pipeline_data_parallel.hpp): the gradients over each rank's DP
  // group (gradient_group_plan), the tied embedding's all-reduce, Adam, the parameter all-gather (ZeRO-1).
  std::vector<TaskId> data_parallel_step() {
    auto tied = tied_embedding_after_reduction(in, out, timeline, spec, layout.class_size, policy);
    bool norm_grads = false;  // some simulated rank holds gradients to all-reduce over its TP group
    for (int s = 0; s < sims; ++s) norm_grads = norm_grads || sequence_parallel_gradients(s) > 0;
    if (!deepspeed_engine(spec) && norm_grads) {
      // finalize_model_grads: the norms' gradients over the TP group, then the tied embedding's.
      tied = [this, tied = std::move(tied)](std::vector<TaskId>& last) {
        reduce_sequence_parallel_gradients(last);
        if (tied) tied(last);
      };
    }
    PipelineDataParallel step{timeline,       dp_comm,       policy, dp_plan, dp,
                              in.costs,       micro_batches, {},     {},      ddp ? &*ddp : nullptr,
                              std::move(tied)};
    for (const RankState& rs : rank_state) {
      step.params.push_back(rs.params);
      step.adam.push_back(rs.k.adam);
    }
    step.unfused_accumulation_bytes_per_param = unfused_accumulation_bytes_per_param(policy, spec, micro_batches);
    return pipeline_data_parallel_step(step, last_op, out.spans);
  }

  // The elements of simulated rank s's norm gradients that Megatron-Core all-reduces over its TP
  // group after the data-parallel reduction (phases/sequence_parallel_grads.hpp).
  [[nodiscard]] std::int64_t sequence_parallel_gradients(int s) const {
    const int stage = rank_state[s].stage;
    return sequence_parallel_gradient_elements(m, tp, spec.sequence_parallel, split.of_stage(stage),
                                               stage == last_virtual % pp);
  }

  // _allreduce_layernorm_grads: each TP group's coalesced buffer all-reduced in the gradients'
  // dtype after each member's `last` task, which moves past it.
  void reduce_sequence_parallel_gradients(std::vector<TaskId>& last) {
    std::map<int, std::vector<int>> groups;  // first rank of the TP group -> simulated indices
    for (int s = 0; s < sims; ++s) groups[rank_state[s].rank - rank_state[s].t].push_back(s);
    const std::int64_t per_bf16 = (policy.fp32_gradients() ? kFp32Bytes : kBf16Bytes) / kBf16Bytes;
    for (const auto& [first, members] : groups) {
      if (sequence_parallel_gradients(members.front()) == 0) continue;  // a stage without layers or final norm
      std::vector<std::vector<TaskId>> deps(members.size());
      for (std::size_t i = 0; i < members.size(); ++i) deps[i] = {last[members[i]]};
      // Replayed under flow fidelity where it can be (its own shape: key -1 - first).
      const auto done =
          tp_comms.all_reduce(first, timeline, members, fmt::format(FMT_COMPILE("tp{}.norm_grads"), first),
                              std::nullopt, sequence_parallel_gradients(members.front()) * per_bf16, tp_plan, deps, out,
                              in, in.collective_options(spec.collectives), -1 - first);
      for (std::size_t i = 0; i < members.size(); ++i) last[members[i]] = done[i];
    }
  }

  // The iteration's figures and approximations.
  void finish() {
    // Per device: a replica's work split over its tp x cp x pp devices; spec.dp replicas of the
    // data (the shared steps' dp is the dp x cp gradient group).
    set_work_figures(out, in, static_cast<double>(train.micro_batch * train.grad_accum), spec.dp, tp * cp * pp);
    // The model states of the first simulated rank (pipeline stage 0). The last stage holds more
    // when the embeddings are untied (the output head and final norm against the embedding); the
    // largest over the ranks would change the shipped llama2-70b figure, so it is left as is.
    out.model_states_per_device = Bytes{states_of(0).gpu_model_states()};
    add_common_approximations(out, in, policy);
    add_pipeline_approximations(out, spec, split, policy, m.tied_embeddings);
    if (unfused_accumulation_bytes_per_param(policy, spec, micro_batches) > 0) {
      out.approximations.emplace_back(
          "gradient accumulation outside the weight-gradient GEMMs (no gradient_accumulation_fusion, DeepSpeed's "
          "optimizer owning param.grad, or FSDP2's no-sync fp32 accumulation): each micro-batch's additions costed by "
          "their bytes and run back to back "
          "after the rank's last operation, not inside each backward");
    }
  }
};

// Megatron-DeepSpeed's pipeline run by DeepSpeed's PipelineEngine (deepspeed_pipeline.hpp):
// Megatron's layers, states and data-parallel step, TrainSchedule's order and its blocking
// transfers, and with tp > 1 the TP all-gathers of the partitioned pipeline tensors.
class DeepSpeedPipelineBuilder final : public MegatronBuilder {
 public:
  using MegatronBuilder::MegatronBuilder;

 private:
  BlockingPointToPoint blocking{g};

  void run_group(int first, const std::vector<int>& members, const std::vector<TaskId>& ready) override {
    TrainScheduleRun run{pp, rank_state[members.front()].stage, micro_batches, {}, {}, {}};
    for (const int s : members) run.members.push_back({rank_state[s].rank, timeline.slot(s).prefix, ready[s]});
    run.compute = [&](const PipeInstruction& ins, std::vector<TaskId> at) {
      if (tp > 1) {
        at = gather_partitioned(tp_comms.at(first), fmt::format("tp{}", first), run.stages, run.stage, ins,
                                activation_elements, tp_plan, std::move(at));
      }
      run_operation(first, members, run.stage, Op{ins.forward(), 0, ins.micro_batch}, at);
      return at;
    };
    run.peer = [&](std::size_t i, int peer_stage) {
      const RankState& rs = rank_state[members[i]];
      return rank_of(spec, rs.t, rs.c, peer_stage, rs.rank / (tp * cp * pp));
    };
    // The rank's last instruction may be a send: its data-parallel step waits for it.
    const std::vector<TaskId> last = run_train_schedule(run, blocking);
    for (std::size_t i = 0; i < members.size(); ++i) last_op[members[i]] = last[i];
  }

  void point_to_point() override {
    blocking.connect(
        [&](const BlockingPointToPoint::Message& msg) {
          return TransferTask{stage_route(msg.from, msg.to), exchange.bytes_per_rank, TimePs{0}, {}, {}};
        },
        phase::kCommunication);
    reduce_tied_embedding(in, out, timeline, spec, layout.class_size, policy, last_op);  // ReduceTiedGrads
  }
};

}  // namespace

BuiltIteration build_megatron(const IterationInputs& in, const MegatronSpec& spec) {
  const auto build = [&spec](const IterationInputs& inputs) {
    if (spec.pipeline_engine == MegatronSpec::PipelineEngine::kDeepSpeed && spec.pp > 1) {
      return DeepSpeedPipelineBuilder(inputs, spec).build();
    }
    return MegatronBuilder(inputs, spec).build();
  };
  BuiltIteration built = build(in);
  // Replayed collectives need links of their own (phases/collective_replay.hpp, precondition 1):
  // where another flow of the iteration shares one, the iteration is built in full.
  if (!built.replayed.empty() && !replay_links_exclusive(built.replayed, built.graph)) {
    IterationInputs full = in;
    full.replay_flow_collectives = false;
    return build(full);
  }
  return built;
}

}  // namespace offsim::models
