// Megatron-style 3D parallelism: tensor (TP), pipeline (PP) and data (DP) parallelism.
//
// Ranks: r = t + tp x (s + pp x d) for tensor rank t, pipeline stage s, replica d, so a TP group is
// tp consecutive ranks (inside a node when tp divides the GPUs per node) and replica d is the
// block of tp x pp ranks starting at d x tp x pp. Under rank symmetry one replica is simulated and
// stands for all (its DP all-reduce flows are mirrored, docs/collectives.md).
//
// Model per rank:
// - Layers are split evenly over pp x v virtual stages (v = virtual_stages); rank stage s holds
//   chunks c = 0..v-1, virtual stage c x pp + s. The embedding is on virtual stage 0, the output
//   head on the last. Each GEMM is split Megatron-style over the TP group (layer_gemms with tp):
//   every layer's forward ends its attention and MLP blocks with an all-reduce of the activations
//   (b x s x h bf16) over the TP group, and so does backward (twice more with full recomputation,
//   which re-runs the forward). The layer's compute is split into two equal halves around them
//   (an approximation: the attention and MLP halves differ). Sequence parallelism replaces each
//   all-reduce with a reduce-scatter and an all-gather of the same total bytes, so it is costed as
//   the all-reduce; it divides the stored activations by tp.
// - Stages exchange activations (forward) and their gradients (backward) point to point: b x s x h
//   bf16 split over the TP group (Megatron's scatter-gather of pipeline tensors), from each TP rank
//   to the same TP rank of the next (previous) stage.
// - Schedule, per rank, in Megatron's order: 1F1B (pp - s - 1 warm-up forwards, then one forward
//   one backward, then the cool-down backwards) or, with v > 1, the interleaved schedule
//   (warm-up (pp - s - 1) x 2 + (v - 1) x pp, micro-batches in groups of pp through the chunks).
//   An operation starts when the previous one on the rank ended and its input arrived.
// - After the last backward (Megatron's optimizer; `optimizer: deepspeed` takes DeepSpeed's, see
//   MegatronBuilder::grads): all-reduce of the rank's fp32 gradients (main_grad) over its DP
//   group (ZeRO-0) or a reduce-scatter, Adam on 1/dp of them, and an all-gather of the updated parameters (ZeRO-1,
//   Megatron's distributed optimizer). Adam on the GPU.
// - Memory: bf16 parameters and fp32 gradients (main_grad: Megatron accumulates and all-reduces
//   the gradients of bf16 training in fp32) of the rank's chunks, fp32 master + m + v (divided by
//   dp at ZeRO-1), stored activations of each in-flight micro-batch (allocated by its forward,
//   freed by its backward; Korthikanti's count with TP: /tp with sequence parallelism, otherwise
//   only the split part shrinks), and the logits on the last stage.
#include <fmt/compile.h>
#include <fmt/format.h>

#include <algorithm>
#include <deque>
#include <map>
#include <stdexcept>

#include "models/collectives/communicator.hpp"
#include "models/placement/state_placement.hpp"
#include "models/strategies/layer_kernels.hpp"
#include "models/strategies/strategy.hpp"
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

struct Op {
  bool forward = true;
  int chunk = 0;
  int micro_batch = 0;
};

// Megatron's per-rank operation order (megatron/core/pipeline_parallel/schedules.py).
std::vector<Op> schedule(int pp, int stage, int v, int m) {
  const int total = m * v;
  const auto chunk_of = [&](int k, bool forward) {
    const int c = (k / pp) % v;
    return forward ? c : v - 1 - c;
  };
  const auto micro_batch_of = [&](int k) { return (k / (pp * v)) * pp + k % pp; };
  int warmup = 0;
  if (v == 1) {
    warmup = std::min(pp - stage - 1, m);
  } else {
    warmup = std::min((pp - stage - 1) * 2 + (v - 1) * pp, total);
  }
  std::vector<Op> ops;
  int f = 0;
  int b = 0;
  const auto forward = [&] {
    ops.push_back({true, v == 1 ? 0 : chunk_of(f, true), v == 1 ? f : micro_batch_of(f)});
    ++f;
  };
  const auto backward = [&] {
    ops.push_back({false, v == 1 ? 0 : chunk_of(b, false), v == 1 ? b : micro_batch_of(b)});
    ++b;
  };
  for (int i = 0; i < warmup; ++i) forward();
  while (f < total) {
    forward();
    backward();
  }
  while (b < total) backward();
  return ops;
}

using OpKey = std::tuple<bool, int, int>;  // (forward, virtual stage, micro-batch)

// Tensor-parallel classes: with analytic collectives, the tp ranks of a TP group run the same
// kernels, and each one's all-reduce waits on nothing but its own work, so they move in lockstep;
// TP rank 0 can stand for its group (collapse_classes). Their pipeline transfers, which share NICs
// and links as flows, become one flow over the union of the members' routes (a link crossed by k
// members' transfers counted k times), which moves at the pace the slowest member would get.
bool tensor_parallel_classes(const MegatronSpec& spec) {
  return spec.tp > 1 && !spec.all_ranks && spec.collectives.fidelity == Fidelity::kAnalytic;
}

RankLayout megatron_layout(BuiltIteration& out, const topo::Topology& topology, const MegatronSpec& spec) {
  RankLayout layout = lay_out_ranks(out, topology, spec.devices, "megatron", spec.all_ranks, spec.tp * spec.pp);
  if (tensor_parallel_classes(spec) && layout.simulated_ranks() % spec.tp == 0) {
    collapse_classes(layout, spec.tp);
    out.simulated_ranks = layout.simulated_ranks();
    out.approximations.push_back(fmt::format(
        "tensor-parallel classes: TP rank 0 of each group is simulated for its {} ranks (the same kernels in "
        "lockstep, analytic all-reduces at the pace of the group's slowest flow; pipeline transfers as one flow "
        "over the union of the members' routes, at the slowest member's pace); run with --all-ranks to simulate "
        "every rank",
        spec.tp));
  }
  return layout;
}

// tp x pp x dp, checked against the devices, the layers and the micro-batches.
int checked_ranks(const IterationInputs& in, const MegatronSpec& spec) {
  const auto& m = in.model;
  const int pp = spec.pp;
  const int v = spec.virtual_stages;
  const int ranks = spec.tp * pp * spec.dp;
  const int micro_batches = static_cast<int>(in.training.grad_accum);
  if (static_cast<int>(spec.devices.size()) != ranks) {
    throw std::invalid_argument(
        fmt::format("megatron: tp x pp x dp = {} ranks but {} devices", ranks, spec.devices.size()));
  }
  if (m.layers % (pp * v) != 0) {
    throw std::invalid_argument(
        fmt::format("megatron: {} layers do not split into pp x virtual_stages = {} chunks", m.layers, pp * v));
  }
  if (v > 1 && micro_batches % pp != 0) {
    throw std::invalid_argument(
        fmt::format("megatron: the interleaved schedule needs micro-batches (grad_accum {}) divisible by pp ({})",
                    micro_batches, pp));
  }
  return ranks;
}

// A simulated rank: its place in the grid, its GPU's unit and pool, its parameters and kernels.
struct RankState {
  int rank = 0;
  int t = 0;
  int stage = 0;
  std::uint32_t unit = 0;
  std::uint32_t pool = 0;
  std::size_t device = 0;
  std::int64_t params = 0;
  KernelTimes k;
};

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
        m(inputs.model),
        train(inputs.training),
        tp(strategy.tp),
        pp(strategy.pp),
        dp(strategy.dp),
        v(strategy.virtual_stages),
        ranks(checked_ranks(inputs, strategy)),
        micro_batches(static_cast<int>(inputs.training.grad_accum)),
        layout(megatron_layout(out, inputs.topology, strategy)),
        sims(layout.simulated_ranks()),
        dp_comm(g, out.machine, inputs.topology, layout, inputs.collectives, inputs.costs,
                inputs.collective_options(strategy.collectives), out.approximations),
        rank_state(sims),
        entry(sims),
        exit(sims),
        dp_plan{{Band{"dp", tp * pp, ranks}}, StageAlgorithm::kRing, {}} {
    if (train.recompute == Recompute::kFull) recomputed = w.gemm + w.attention;
    if (train.recompute == Recompute::kSelective) recomputed = w.attention;
    place_ranks();
    make_tp_communicators();
  }

  // The iteration's tasks, phase by phase.
  BuiltIteration build() {
    g.reserve(estimated_tasks());
    const std::vector<TaskId> ready = place_states();
    run_schedules(ready);
    point_to_point();
    std::vector<TaskId> end = optimizer_step(reduce_gradients());
    if (grads.optimizer_stage == 1 && dp > 1) end = parameter_allgather(end);
    (void)g.add("iteration.end", "end", BarrierTask{}, end);
    finish();
    return std::move(out);
  }

 private:
  const IterationInputs& in;
  const MegatronSpec& spec;
  BuiltIteration out;
  sim::TaskGraph& g;
  const ModelSpec& m;
  const TrainingSpec& train;
  const int tp;
  const int pp;
  const int dp;
  const int v;
  const int ranks;
  const int micro_batches;
  const RankLayout layout;
  const int sims;
  Communicator dp_comm;

  // The data-parallel optimizer (MegatronSpec::optimizer). Megatron-LM's accumulates and reduces
  // the gradients of bf16 training in fp32 (16 bits with grad_accum_dtype bf16: fp16 training's
  // default) and partitions the optimizer at zero_stage 1 (its distributed optimizer:
  // reduce-scatter, then all-gather of the parameters). DeepSpeed's
  // follows its engine (layer_kernels.hpp): BF16_Optimizer with fp32 accumulation (fp32 buffer and
  // bf16 gradients, fp32 all-reduce, partitioned optimizer, parameter all-gather), else at stage 1
  // its ZeRO optimizer (bf16 gradients reduced to their owners, then the all-gather), at stage 0
  // bf16 gradients all-reduced and the optimizer replicated.
  const GradientHandling grads = spec.optimizer == MegatronSpec::Optimizer::kDeepSpeed
                                     ? deepspeed_gradient_handling(spec.zero_stage, spec.fp32_grad_accum, false)
                                     : megatron_gradient_handling(spec.zero_stage, spec.fp32_grad_accum);

  // Work and states of one rank.
  const ParameterCounts params = count_parameters(m);
  const std::int64_t layers_per_chunk = m.layers / (pp * v);
  const int last_virtual = pp * v - 1;
  const std::int64_t tokens = train.micro_batch * m.seq;
  const std::int64_t activation_elements = tokens * m.hidden;
  const Bytes stored = stored_activations_on_tp_rank(m, train, tp, spec.sequence_parallel);
  const Bytes logits{tokens * ((m.vocab + tp - 1) / tp) * kLogitBytesPerElement};
  // The loss's fp32 workspace on the last stage (transformer/precision.hpp): held while the head runs.
  const Bytes loss_workspace{tokens * ((m.vocab + tp - 1) / tp) * kLossWorkspaceBytesPerElement};
  const Bytes p2p_bytes{activation_elements * kBf16Bytes / tp};
  const LayerWork w = layer_forward(m, train.micro_batch, train.flash_attention);
  sim::Flops recomputed{};
  const sim::Flops head_flops = head_forward_flops(m, train.micro_batch);
  const int tp_reductions_backward = train.recompute == Recompute::kFull ? 4 : 2;

  // One TP communicator per (replica, stage) group of simulated ranks: ranks outside a TP group
  // never take part in its all-reduces.
  std::deque<RankLayout> tp_layouts;
  std::map<int, Communicator> tp_comms;  // by the group's first rank
  const CollectivePlan tp_plan = Communicator::flat(tp);
  std::vector<RankState> rank_state;
  std::map<int, int> sim_of_rank;

  // entry[s][(forward, vs, mb)]: the barrier at which the operation may start; exit: its last
  // task (run_schedules). last_op: each rank's last task so far.
  std::vector<std::map<OpKey, TaskId>> entry, exit;
  std::vector<TaskId> last_op;

  // The DP group of a rank: the ranks tp x pp apart (reduce_gradients, parameter_allgather).
  const CollectivePlan dp_plan;

  // The parameters of a rank of `stage` (its share of its TP group's).
  [[nodiscard]] std::int64_t params_of_stage(int stage) const {
    std::int64_t n = layers_per_chunk * v * params.per_layer;
    if (stage == 0) n += params.embedding + params.position;
    if (stage == (last_virtual % pp)) n += params.final_norm + (m.tied_embeddings ? 0 : params.output_head);
    return (n + tp - 1) / tp;
  }
  // Of a rank's n parameters, those whose optimizer states it holds and updates: 1/dp of them
  // where the optimizer is partitioned (Megatron's distributed optimizer, DeepSpeed's ZeRO-1 and
  // BF16_Optimizer).
  [[nodiscard]] std::int64_t optimizer_share(std::int64_t n) const {
    return updated_parameters(grads.optimizer_stage, n, n, dp);
  }
  // The model states of simulated rank s (models/placement): its parameters and gradients whole,
  // its optimizer share, all on the GPU.
  [[nodiscard]] StatePlacement states_of(int s) const {
    StateCounts c;
    c.held = rank_state[s].params;
    c.sharded = rank_state[s].params;
    c.zero_stage = grads.optimizer_stage;
    c.shard_ranks = dp;
    c.gradient_buffers = grads.buffers;
    return place_model_states(c, kBf16MixedPrecision);
  }
  // The rank of TP rank t of `stage` in `replica`.
  [[nodiscard]] int rank_of(int t, int stage, int replica) const { return t + tp * (stage + pp * replica); }

  // Each simulated rank's place, parameters and kernel times.
  void place_ranks() {
    for (int s = 0; s < sims; ++s) {
      RankState& rs = rank_state[s];
      rs.rank = layout.simulated[s];
      rs.t = rs.rank % tp;
      rs.stage = (rs.rank / tp) % pp;
      rs.device = out.devices[rs.rank];
      rs.unit = *out.machine.unit_of_device[rs.device];
      rs.pool = *out.machine.pool_of_device[rs.device];
      rs.params = params_of_stage(rs.stage);
      rs.k = kernel_times(in, optimizer_share(rs.params), tp, spec.sequence_parallel);
      sim_of_rank[rs.rank] = s;
    }
  }

  void make_tp_communicators() {
    if (tp > 1) {
      for (int s = 0; s < sims; ++s) {
        const int first = rank_state[s].rank - rank_state[s].t;
        if (tp_comms.contains(first)) continue;
        std::vector<std::size_t> group;
        for (int t = 0; t < tp; ++t) group.push_back(out.devices[first + t]);
        tp_layouts.push_back(make_rank_layout(in.topology, group, true, nullptr));
        if (layout.class_size > 1) collapse_classes(tp_layouts.back(), tp);
        tp_comms.emplace(std::piecewise_construct, std::forward_as_tuple(first),
                         std::forward_as_tuple(g, out.machine, in.topology, tp_layouts.back(), in.collectives, in.costs,
                                               spec.collectives, out.approximations));
      }
    }
  }

  // A task of simulated rank s, named r<rank>.<name>: compute on its GPU, or (de)allocation in its memory.
  TaskId compute(int s, const std::string& name, const char* phase, TimePs d, sim::Flops flops, const char* kernel,
                 std::vector<TaskId> deps) {
    return g.add(fmt::format(FMT_COMPILE("r{}.{}"), rank_state[s].rank, name), phase,
                 ComputeTask{rank_state[s].unit, d, flops, Bytes{0}, kernel}, std::move(deps));
  }
  TaskId alloc(int s, const std::string& name, const char* tenant, Bytes bytes, std::vector<TaskId> deps,
               bool release = false) {
    const std::string full = fmt::format(FMT_COMPILE("r{}.{}"), rank_state[s].rank, name);
    if (release) return g.add(full, "memory", sim::FreeTask{rank_state[s].pool, tenant, bytes}, std::move(deps));
    return g.add(full, "setup", AllocTask{rank_state[s].pool, tenant, bytes}, std::move(deps));
  }

  // About how many tasks build() adds: per simulated rank and micro-batch of each chunk, a forward
  // and a backward operation (barrier, allocations, transfer in) and per layer its compute pieces,
  // each with its TP all-reduce when tp > 1 (two analytic stages; flow-level ones add more, and
  // the graph then grows past the reserve as it would without one).
  [[nodiscard]] std::size_t estimated_tasks() const {
    constexpr std::size_t kTasksPerOperationPair = 8;
    constexpr std::size_t kTasksPerAllReduce = 2;
    const std::size_t pieces = static_cast<std::size_t>(2 + tp_reductions_backward);
    const std::size_t per_layer = tp > 1 ? pieces * (1 + kTasksPerAllReduce) : 0;
    const std::size_t per_pair = kTasksPerOperationPair + static_cast<std::size_t>(layers_per_chunk) * per_layer;
    return static_cast<std::size_t>(sims) * static_cast<std::size_t>(micro_batches) * static_cast<std::size_t>(v) *
           per_pair;
  }

  // Model states.
  std::vector<TaskId> place_states() {
    std::vector<TaskId> ready(sims);
    for (int s = 0; s < sims; ++s) {
      const StatePlacement st = states_of(s);
      const TaskId a = alloc(s, "alloc.parameters", "parameters (bf16)", Bytes{st.parameters.gpu}, {});
      const TaskId b = alloc(s, "alloc.gradients", grads.gradient_tenant(), Bytes{st.gradients.gpu}, {a});
      ready[s] = alloc(s, "alloc.optimizer", "optimizer states (fp32 master, m, v)", Bytes{st.optimizer.gpu}, {b});
      if (train.fp8) {  // Transformer Engine's FP8 weight copies and scaling state (layer_kernels.hpp)
        ready[s] = alloc(s, "alloc.fp8", "FP8 weights and scaling state",
                         fp8_state_bytes(m, *train.fp8, tp, 1, layers_per_chunk * v), {ready[s]});
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
  void run_group(int first, const std::vector<int>& members, const std::vector<TaskId>& ready) {
    const int stage = rank_state[members.front()].stage;
    const std::vector<Op> ops = schedule(pp, stage, v, micro_batches);
    std::vector<TaskId> previous(members.size());
    for (std::size_t i = 0; i < members.size(); ++i) previous[i] = ready[members[i]];
    for (const Op& op : ops) previous = run_operation(first, members, op.chunk * pp + stage, op, previous);
  }

  // One operation of virtual stage vs on every member of the TP group: its barrier, the
  // activations it allocates, its compute and all-reduces, and the frees after it. Returns each
  // member's last task.
  std::vector<TaskId> run_operation(int first, const std::vector<int>& members, int vs, const Op& op,
                                    const std::vector<TaskId>& previous) {
    const std::string tag = fmt::format(FMT_COMPILE("{}{}.mb{}"), op.forward ? "F" : "B", vs, op.micro_batch);
    std::vector<TaskId> at(members.size());
    for (std::size_t i = 0; i < members.size(); ++i) {
      const int s = members[i];
      at[i] = g.add(fmt::format(FMT_COMPILE("r{}.{}.ready"), rank_state[s].rank, tag), "pipeline", BarrierTask{},
                    {previous[i]});
      entry[s][{op.forward, vs, op.micro_batch}] = at[i];
    }
    const char* phase = op.forward ? phase::kForward : phase::kBackward;
    const bool head = vs == last_virtual;
    if (op.forward) {
      for (std::size_t i = 0; i < members.size(); ++i) {
        at[i] = alloc(members[i], tag + ".alloc.activations", "activations", activation_bytes(head), {at[i]});
      }
    }
    if (head) {
      for (std::size_t i = 0; i < members.size(); ++i) {
        at[i] = alloc(members[i], tag + ".alloc.loss", "activations", loss_workspace, {at[i]});
      }
    }
    run_chunk(first, members, op.forward, vs, tag, phase, at);
    for (std::size_t i = 0; i < members.size(); ++i) {
      const int s = members[i];
      if (head) at[i] = alloc(s, tag + ".free.loss", "activations", loss_workspace, {at[i]}, true);
      if (!op.forward)
        at[i] = alloc(s, tag + ".free.activations", "activations", activation_bytes(head), {at[i]}, true);
      exit[s][{op.forward, vs, op.micro_batch}] = at[i];
      // Rank 0's phases: its busy time per operation; the waits before them are the bubble.
      if (rank_state[s].rank == 0) {
        const TaskId start = entry[s][{op.forward, vs, op.micro_batch}];
        out.spans.push_back({phase::kPipelineBubble, last_op[s], start, true});
        out.spans.push_back({phase, start, at[i], true});
      }
      last_op[s] = at[i];
    }
    return at;
  }

  // The activations an operation of a chunk stores (with the logits on the last virtual stage).
  [[nodiscard]] Bytes activation_bytes(bool head) const {
    return Bytes{stored.count * layers_per_chunk + (head ? logits.count : 0)};
  }

  // The embedding's and the head's work on the first and last virtual stages.
  struct EdgeWork {
    TimePs time{0};
    sim::Flops flops{};
  };
  [[nodiscard]] EdgeWork edge_work(const KernelTimes& k, bool forward, int vs) const {
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

  // The chunk's compute on every member, after at. Each half-layer ends with a TP all-reduce;
  // without TP the chunk is one kernel per rank.
  void run_chunk(int first, const std::vector<int>& members, bool forward, int vs, const std::string& tag,
                 const char* phase, std::vector<TaskId>& at) {
    const KernelTimes& k = rank_state[members.front()].k;
    const EdgeWork edge = edge_work(k, forward, vs);
    const TimePs layer = forward ? k.layer_fwd : k.layer_bwd;
    const sim::Flops layer_flops =
        (forward ? (w.gemm + w.attention) : (w.gemm + w.attention) * 2.0 + recomputed) * (1.0 / tp);
    if (tp == 1) {
      for (std::size_t i = 0; i < members.size(); ++i) {
        at[i] = compute(members[i], tag, phase, TimePs{layer.ps * layers_per_chunk} + edge.time,
                        layer_flops * static_cast<double>(layers_per_chunk) + edge.flops, "layer", {at[i]});
      }
      return;
    }
    Communicator& comm = tp_comms.at(first);
    const int reductions = forward ? 2 : tp_reductions_backward;
    const TimePs piece{layer.ps / reductions};
    for (std::size_t i = 0; i < members.size(); ++i) {
      if (edge.time.ps > 0) at[i] = compute(members[i], tag + ".edge", phase, edge.time, edge.flops, "gemm", {at[i]});
    }
    for (std::int64_t l = 0; l < layers_per_chunk; ++l) {
      for (int half = 0; half < reductions; ++half) {
        std::vector<std::vector<TaskId>> deps(members.size());
        for (std::size_t i = 0; i < members.size(); ++i) {
          deps[i] = {compute(members[i], fmt::format(FMT_COMPILE("{}.l{}.{}"), tag, l, half), phase, piece,
                             layer_flops * (1.0 / reductions), "layer", {at[i]})};
        }
        at = comm.add(CollectiveKind::kAllReduce, fmt::format(FMT_COMPILE("tp{}.{}.l{}.{}"), first, tag, l, half),
                      activation_elements, tp_plan, deps);
      }
    }
  }

  // Point-to-point: each operation's input comes from the same TP rank of the neighbouring virtual
  // stage (forward: the previous one's activations; backward: the next one's gradients).
  void point_to_point() {
    for (int s = 0; s < sims; ++s) {
      const RankState& rs = rank_state[s];
      const int replica = rs.rank / (tp * pp);
      for (const auto& [key, start] : entry[s]) {
        const auto [forward, vs, mb] = key;
        const int from_vs = forward ? vs - 1 : vs + 1;
        if (from_vs < 0 || from_vs > last_virtual) continue;
        const int from_rank = rank_of(rs.t, from_vs % pp, replica);
        const auto found = sim_of_rank.find(from_rank);
        if (found == sim_of_rank.end()) continue;
        const int from = found->second;
        const TaskId sent = exit[from].at({forward, from_vs, mb});
        const TaskId p2p = g.add(fmt::format(FMT_COMPILE("p2p.{}{}.mb{}.r{}to{}"), forward ? "act" : "grad", from_vs,
                                             mb, from_rank, rs.rank),
                                 phase::kCommunication,
                                 TransferTask{p2p_route(from_rank, rs.rank), p2p_bytes, TimePs{0}, {}, {}}, {sent});
        g.add_dependency(start, p2p);
      }
    }
  }

  // The constraints of the pipeline transfer from rank `from` to rank `to`; with tensor-parallel
  // classes, those of every member's transfer (from + t to to + t) back to back, so that a link
  // several of them cross is shared as by that many flows.
  [[nodiscard]] std::vector<sim::ConstraintId> p2p_route(int from, int to) const {
    std::vector<sim::ConstraintId> route;
    for (int t = 0; t < layout.class_size; ++t) {
      const auto member = out.machine.transfer_route(in.topology, out.devices[from + t], out.devices[to + t]);
      route.insert(route.end(), member.begin(), member.end());
    }
    return route;
  }

  // The simulated ranks by their number of parameters (which differs between stages).
  [[nodiscard]] std::map<std::int64_t, std::vector<int>> ranks_by_size() const {
    std::map<std::int64_t, std::vector<int>> by_size;
    for (int s = 0; s < sims; ++s) by_size[rank_state[s].params].push_back(s);
    return by_size;
  }

  // BF16_Optimizer adds each micro-batch's bf16 gradients into its fp32 buffer (precision.hpp).
  // DeepSpeed does it after every micro-batch's backward; here the micro-batches' additions run
  // back to back after the rank's last operation, before the gradient all-reduce: the same work on
  // the rank, placed after the schedule instead of inside it.
  void accumulate_fp32_gradients() {
    for (int s = 0; s < sims; ++s) {
      const RankState& rs = rank_state[s];
      const Bytes bytes{rs.params * kBf16OptimizerAccumulationBytesPerParam * micro_batches};
      const TaskId before = last_op[s];
      last_op[s] = g.add(fmt::format(FMT_COMPILE("r{}.accumulate_fp32_gradients"), rs.rank), phase::kOptimizer,
                         ComputeTask{rs.unit, in.costs.memory_bound_time(bytes), {}, bytes, "memory"}, {last_op[s]});
      if (rs.rank == 0) out.spans.push_back({phase::kOptimizer, before, last_op[s], true});
    }
  }

  // Data parallelism: the rank's gradients over its DP group (ranks tp x pp apart).
  std::vector<TaskId> reduce_gradients() {
    if (grads.bf16_optimizer) accumulate_fp32_gradients();
    std::vector<std::vector<TaskId>> after_backward(sims);
    for (int s = 0; s < sims; ++s) after_backward[s] = {last_op[s]};
    std::vector<TaskId> reduced(sims);
    if (dp > 1) {
      // Ranks of different stages hold different amounts: one collective per distinct size, each
      // rank taking part in its own (the others pass through).
      for (const auto& [n, members] : ranks_by_size()) {
        std::vector<bool> taking_part(sims, false);
        for (const int s : members) taking_part[s] = true;
        // The gradients in the dtype they accumulate in (fp32: Megatron's main_grad, BF16_Optimizer's
        // buffer), reduced to their owners where the optimizer is partitioned (GradientHandling).
        const auto done =
            dp_comm.add(grads.reduce_to_owners() ? CollectiveKind::kReduceScatter : CollectiveKind::kAllReduce,
                        fmt::format(FMT_COMPILE("dp.gradients.{}"), n), grads.reduced_elements(n), dp_plan,
                        after_backward, taking_part);
        for (const int s : members) reduced[s] = done[s];
      }
    } else {
      for (int s = 0; s < sims; ++s) reduced[s] = last_op[s];
    }
    return reduced;
  }

  // Then Adam on the GPU, over the rank's optimizer share.
  std::vector<TaskId> optimizer_step(const std::vector<TaskId>& reduced) {
    std::vector<TaskId> end(sims);
    for (int s = 0; s < sims; ++s) {
      const RankState& rs = rank_state[s];
      const std::int64_t updated = optimizer_share(rs.params);
      if (grads.bf16_optimizer) {
        // BF16_Optimizer's step: the gradient norm and the zeroing of its fp32 buffer, and Adam
        // without the cast (precision.hpp).
        const Bytes passes{rs.params * kBf16OptimizerStepPassBytesPerParam};
        const Bytes adam{updated * kBf16OptimizerAdamTrafficBytesPerParam};
        const TaskId first =
            g.add(fmt::format(FMT_COMPILE("r{}.bf16_optimizer.gradient_passes"), rs.rank), phase::kOptimizer,
                  ComputeTask{rs.unit, in.costs.memory_bound_time(passes), {}, passes, "memory"}, {reduced[s]});
        end[s] = g.add(fmt::format(FMT_COMPILE("r{}.adam"), rs.rank), phase::kOptimizer,
                       ComputeTask{rs.unit, in.costs.memory_bound_time(adam), {}, adam, "adam"}, {first});
      } else {
        end[s] = g.add(fmt::format(FMT_COMPILE("r{}.adam"), rs.rank), phase::kOptimizer,
                       ComputeTask{rs.unit, rs.k.adam, {}, Bytes{updated * kAdamTrafficBytesPerParam}, "adam"},
                       {reduced[s]});
      }
      if (rs.rank == 0) {
        out.spans.push_back({phase::kGradientReduction, last_op[s], reduced[s], true});
        out.spans.push_back({phase::kOptimizer, reduced[s], end[s], true});
      }
    }
    return end;
  }

  // ZeRO-1: the updated parameters all-gathered over the DP group.
  std::vector<TaskId> parameter_allgather(const std::vector<TaskId>& end) {
    std::vector<TaskId> gathered = end;
    for (const auto& [n, members] : ranks_by_size()) {
      std::vector<std::vector<TaskId>> deps(sims);
      for (int s = 0; s < sims; ++s) deps[s] = {end[s]};
      std::vector<bool> taking_part(sims, false);
      for (const int s : members) taking_part[s] = true;
      const auto done = dp_comm.add(CollectiveKind::kAllGather, fmt::format(FMT_COMPILE("dp.parameters.{}"), n), n,
                                    dp_plan, deps, taking_part);
      for (const int s : members) gathered[s] = done[s];
    }
    for (int s = 0; s < sims; ++s) {
      if (rank_state[s].rank == 0) out.spans.push_back({phase::kParameterAllgather, end[s], gathered[s], true});
    }
    return gathered;
  }

  // The iteration's figures and approximations.
  void finish() {
    const double sequences = static_cast<double>(train.micro_batch * train.grad_accum);
    // Per device: the replica's work split over its tp x pp devices.
    out.model_flops_per_device = model_flops_per_sequence(m) * (sequences / (tp * pp));
    out.hardware_flops_per_device = hardware_flops_per_sequence(m, train.recompute) * (sequences / (tp * pp));
    out.tokens_per_iteration = sequences * static_cast<double>(m.seq) * dp;
    // The model states of the first simulated rank (pipeline stage 0). The last stage holds more
    // when the embeddings are untied (the output head and final norm against the embedding); the
    // largest over the ranks would change the shipped llama2-70b figure, so it is left as is.
    out.model_states_per_device = Bytes{states_of(0).gpu_model_states()};
    const auto cost_notes = in.costs.approximations();
    out.approximations.insert(out.approximations.begin(), cost_notes.begin(), cost_notes.end());
    out.approximations.push_back(non_gemm_kernels_approximation(train));
    if (grads.bf16_optimizer) out.approximations.push_back(bf16_optimizer_approximation());
    if (tp > 1) {
      out.approximations.push_back(
          "tensor parallelism: each layer's compute split in equal halves around its all-reduces; sequence "
          "parallelism costed as the all-reduce it replaces");
    }
    out.approximations.push_back("pipeline: gradients reduced after the last backward (no overlap with the cool-down)");
  }
};

}  // namespace

BuiltIteration build_megatron(const IterationInputs& in, const MegatronSpec& spec) {
  return MegatronBuilder(in, spec).build();
}

}  // namespace offsim::models
