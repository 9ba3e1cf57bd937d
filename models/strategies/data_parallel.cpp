// Data parallelism with ZeRO stages 0-3, and ZeRO-3 optimizer offload to the host.
//
// Where the model states live on each of g ranks (P parameters, bf16 mixed precision, Adam):
//   stage 0: bf16 parameters 2P, gradients fp32 4P + bf16 2P, fp32 master + m + v 12P/g: DeepSpeed's
//            BF16_Optimizer (fp32 gradient accumulation, DeepSpeed's default without ZeRO), which
//            all-reduces the fp32 gradients and all-gathers the updated bf16 parameters; with
//            grad_accum_dtype bf16, bf16 gradients 2P and the optimizer replicated, 12P
//   stage 1: as stage 0 with bf16 gradients 2P (the ZeRO-1 optimizer: under ZeRO the accumulation
//            dtype defaults to the model's); with grad_accum_dtype fp32, BF16_Optimizer as at stage 0
//   stage 2: gradients 2P/g plus one reduce bucket, optimizer 12P/g
//   stage 3: parameters 2P/g too; each module's parameters are all-gathered before its forward
//            and again before its backward, and freed after use.
// One iteration per rank: for each micro-batch, forward (embedding, layers, head) then backward
// in reverse; gradients fill buckets of reduce_bucket_elements in backward order and each full
// bucket is all-reduced (a replicated optimizer and BF16_Optimizer) or reduce-scattered (the ZeRO
// optimizer at stages 1-3), at stages 0-1 at the accumulation boundary only, at stages 2-3 every
// micro-batch, as soon as its last gradient exists (overlap_comm) or after
// backward; buckets go one after another on the rank's reduce stream, as in DeepSpeed. Then Adam
// on the rank's parameters (all of them with a replicated optimizer, its 1/g partition otherwise);
// wherever the optimizer is partitioned below stage 3 the updated bf16 parameters are all-gathered. With offload, each
// reduced bucket goes to the host and the update runs there in subgroups (docs/strategies.md states both DeepSpeed
// recipes). Stage 3 gathers run on their own stream, one module ahead of the compute (at most two modules' parameters
// live at once), a simplification of DeepSpeed's prefetch bucket and max_live_parameters limits. Collectives:
// models/collectives/communicator.hpp.
//
// Tensor parallelism (tp > 1, as Megatron-DeepSpeed runs ZeRO under Megatron layers): each group
// of tp consecutive ranks splits every layer Megatron-style (layer_gemms with tp), so each rank
// holds 1/tp of every state above and ZeRO partitions, reduces and gathers that share across the
// g/tp replicas (stride tp); each layer all-reduces its activations inside the group after the
// attention and after the MLP, forward and backward, on the critical path.
#include <fmt/compile.h>
#include <fmt/format.h>
#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <stdexcept>
#include <tuple>
#include <utility>

#include "models/collectives/communicator.hpp"
#include "models/placement/state_placement.hpp"
#include "models/strategies/host_dispatch.hpp"
#include "models/strategies/layer_kernels.hpp"
#include "models/strategies/phases/gradient_reduction.hpp"
#include "models/strategies/phases/layer_compute.hpp"
#include "models/strategies/phases/parameter_gather.hpp"
#include "models/strategies/phases/rank_timeline.hpp"
#include "models/strategies/phases/steps.hpp"
#include "models/strategies/phases/zero_policy.hpp"
#include "models/strategies/strategy.hpp"
#include "models/strategies/ulysses.hpp"
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

// The spec's checks, made before anything is built. Returns the number of ranks.
int checked_ranks(const IterationInputs& in, const DataParallelSpec& spec) {
  const auto& m = in.model;
  const int ranks = static_cast<int>(spec.devices.size());
  if (ranks < 1) throw std::invalid_argument("data_parallel needs at least one device");
  const int tp = spec.tp;
  if (tp < 1 || ranks % tp != 0) {
    throw std::invalid_argument(fmt::format("data_parallel: tp ({}) must divide the {} ranks", tp, ranks));
  }
  if (tp > 1 && spec.partitioning) {
    throw std::invalid_argument("data_parallel: a hierarchical partitioning together with tp > 1 is not modelled");
  }
  const int replicas = ranks / tp;
  const int ep = spec.ep;
  if (ep != 1) {
    if (ep < 1 || !m.moe() || m.experts % ep != 0 || replicas % ep != 0) {
      throw std::invalid_argument(fmt::format(
          "data_parallel: ep ({}) needs a mixture-of-experts model whose experts ({}) and ranks ({}) divide by it", ep,
          m.experts, replicas));
    }
    if (spec.partitioning || spec.offload_param) {
      throw std::invalid_argument(
          "data_parallel: expert parallelism together with a partitioning or parameter offload is not modelled");
    }
  }
  if (spec.sp != 1) {
    if (spec.sp < 1 || ranks % spec.sp != 0 || tp > 1 || ep > 1) {
      throw std::invalid_argument(fmt::format(
          "data_parallel: Ulysses over sp = {} ranks needs sp to divide the {} ranks, tp 1 and ep 1", spec.sp, ranks));
    }
  }
  const auto partitioned = ZeroPolicy::partitioning_if_valid(spec.zero_stage);
  if (spec.fsdp2 && (!partitioned || !partitioned->parameters || spec.partitioning || spec.offload)) {
    // The readers refuse these at their keys (models/experiment/torchtitan_profile.cpp).
    throw std::invalid_argument("data_parallel: FSDP2 is modelled at zero_stage 3 without partitioning or offload");
  }
  if (spec.offload_param && !spec.offload) {
    // The readers refuse it at its key; the host pool and threads come with the optimizer offload.
    throw std::invalid_argument("data_parallel: parameter offload is modelled together with optimizer offload");
  }
  return ranks;
}

// The parameters of a rank of a tensor-parallel group of tp with 1/ep of the experts: all the
// model's (its tp share, `sharded`: P_model), which ZeRO shards over `shard` ranks, and those it
// holds whole before sharding (`held`: P; with expert parallelism, its own experts only). An
// expert's share of its data-parallel group (shard / ep ranks) is (experts / ep) / (shard / ep):
// sharded counts are P_model / shard either way. `updated`: those whose optimizer states it keeps.
struct RankParameters {
  ParameterCounts counts;              // of what the rank holds
  std::int64_t sharded = 0;            // P_model
  std::int64_t experts_per_layer = 0;  // expert parallelism: the rank's experts' weights per layer
  std::int64_t held = 0;               // P
  std::int64_t updated = 0;
};
RankParameters rank_parameters(const ModelSpec& m, int tp, int ep, const ZeroPolicy& policy, int shard) {
  RankParameters p;
  p.counts = tensor_parallel_share(count_parameters(m), tp);
  p.sharded = p.counts.total;
  if (ep > 1) {
    ParameterCounts& c = p.counts;
    p.experts_per_layer = c.experts_per_layer / ep;
    c.per_layer -= c.experts_per_layer - p.experts_per_layer;
    c.layers = c.per_layer * m.layers;
    c.total = c.layers + c.embedding + c.position + c.final_norm + c.output_head;
  }
  p.held = p.counts.total;
  p.updated = policy.updated_parameters(p.held, p.sharded, shard);
  return p;
}

// The gradient items, in the order backward produces them (each parameter once): the head, the
// layers in reverse, the embedding.
// FSDP2 (`units_alone`) reduce-scatters each unit's gradients by themselves after its backward.
std::vector<GradientReduction::Item> gradient_items(const ModelSpec& m, const ParameterCounts& params, int ep,
                                                    std::int64_t experts_per_layer_on_rank, bool units_alone) {
  std::vector<GradientReduction::Item> items;
  // Parameter tensors: each projection's weight (and bias), each norm's weight (and bias).
  const std::int64_t norm_tensors = m.norm == NormKind::kLayerNorm ? 2 : 1;
  std::int64_t layer_tensors = m.norms_per_layer() * norm_tensors;
  for (const auto& gemm : layer_gemms(m, 1, 1, ep)) {
    if (!gemm.attention_core) layer_tensors += gemm.batch * (gemm.bias ? 2 : 1);
  }
  items.push_back({params.output_head + params.final_norm, 0, (params.output_head > 0 ? 1 : 0) + norm_tensors});
  for (std::int64_t l = m.layers - 1; l >= 0; --l) {
    items.push_back({params.per_layer - experts_per_layer_on_rank, experts_per_layer_on_rank, layer_tensors});
  }
  items.push_back({params.embedding + params.position, 0, 1 + (params.position > 0 ? 1 : 0)});
  for (auto& item : items) item.closes_bucket = units_alone;
  return items;
}

// Rank classes: with analytic collectives and nothing on the host (no offload), the ranks of the
// simulated node run the same kernels on the same amounts, and each one's collectives wait on
// nothing but its own work (analytic transfers share no link), so they move in lockstep and its
// first rank can stand for them all (collapse_classes; the communicator builds every member's flows
// for the rates and the link bytes). Host offload couples them through the shared CPU, DDR and
// PCIe, and tensor parallelism through its own groups: those keep every rank.
RankLayout data_parallel_layout(BuiltIteration& out, const IterationInputs& in, const DataParallelSpec& spec) {
  RankLayout layout = lay_out_ranks(out, in.topology, spec.devices, "data_parallel", spec.all_ranks, spec.tp);
  const bool lockstep = !spec.all_ranks && spec.collectives.fidelity == Fidelity::kAnalytic && spec.tp == 1 &&
                        !spec.offload && !spec.offload_param;
  const int block = layout.simulated_ranks();
  if (!lockstep || block < 2) return layout;
  const auto& first = in.topology.device(out.devices[layout.simulated[0]]);
  for (const int r : layout.simulated) {
    const auto& d = in.topology.device(out.devices[r]);
    if (d.node != first.node || d.device_kind != first.device_kind) return layout;  // one node, one kind of GPU
  }
  collapse_classes(layout, block);
  out.simulated_ranks = layout.simulated_ranks();
  out.approximations.push_back(fmt::format(
      "rank classes: rank {} is simulated for the {} ranks of its node (the same kernels in lockstep; analytic "
      "collectives at the pace of the slowest member's subgroup, carrying every member's traffic); run with "
      "--all-ranks to simulate every rank",
      layout.simulated[0], block));
  return layout;
}

// The loss's transient buffers of a rank holding `logits` logits, in forward and in backward: the
// fp32 workspace of a fused cross-entropy, or those a framework names (Hugging Face: nll_loss's
// gradient and the log-softmax's input gradient at once in backward,
// configs/frameworks/hf-transformers.yaml).
[[nodiscard]] std::pair<Bytes, Bytes> loss_workspaces(const TrainingSpec& train, std::int64_t logits) {
  if (const auto& fw = framework_profile(train.framework); fw.loss_workspace_backward > 0.0) {
    const auto on_rank = static_cast<double>(logits);
    return {Bytes{static_cast<std::int64_t>(fw.loss_workspace_forward * on_rank)},
            Bytes{static_cast<std::int64_t>(fw.loss_workspace_backward * on_rank)}};
  }
  return {Bytes{logits * kLossWorkspaceBytesPerElement}, Bytes{logits * kLossWorkspaceBytesPerElement}};
}

// The report notes of a data-parallel iteration: the common ones, the host dispatch, the
// collectives, stage 3's gathering (DeepSpeed's or FSDP2's) and expert parallelism.
void add_data_parallel_approximations(BuiltIteration& out, const IterationInputs& in, const DataParallelSpec& spec,
                                      const ZeroPolicy& policy, int shard_ranks) {
  add_common_approximations(out, in, policy);
  out.approximations.push_back(host_dispatch_approximation(in));
  out.approximations.push_back(
      "collectives: bidirectional rings (all-to-all for qgZ) over each stage of the plan, in rank order; reduction "
      "arithmetic not modelled");
  std::vector<std::string> notes;
  if (policy.engine() == OptimizerEngine::kZeroStage3) {
    notes = parameter_gather_approximations(spec.zero3_fetch, spec.zero3_host, shard_ranks);
  } else if (policy.fsdp2()) {
    notes = fsdp2_approximations(*spec.fsdp2, spec.tp, shard_ranks);
  }
  for (auto& note : notes) out.approximations.push_back(std::move(note));
  if (in.model.moe()) {
    out.approximations.push_back(
        spec.ep > 1
            ? fmt::format("expert parallelism over {} {}: each routed token goes to its expert's rank "
                          "and back by all-to-all (even routing: (ep - 1) / ep of the tokens leave each rank), "
                          "on the critical path of its layer",
                          spec.ep,
                          spec.tp > 1 ? fmt::format("replicas of each tensor rank (stride {}), each expert split over "
                                                    "the {} tensor ranks as Megatron-Core's expert tensor parallelism "
                                                    "(a TP all-reduce after its down-projection); every tensor rank "
                                                    "dispatches the micro-batch's tokens (sequence parallelism's "
                                                    "smaller dispatch not modelled)",
                                                    spec.tp, spec.tp)
                                      : std::string("consecutive ranks"))
            : "no expert parallelism: every rank runs every expert (set strategy.ep to spread them)");
  }
}

// The tasks of the last data-parallel graph this thread built: the next one reserves room for as
// many (sim::TaskGraph::reserve), since a sweep's points build graphs of similar sizes one after
// another, and a graph that grows moves every task it holds (a sixteenth of a sweep point's work,
// issue 35). Room only: the graph and every result are the same whatever it holds. At most
// kReservedTasks, so that a small graph after a large one (the fuzz harness, under a memory
// limit) does not ask for the large one's room; the shipped sweep's graphs hold ~1,500 tasks.
thread_local std::size_t previous_graph_tasks = 0;
constexpr std::size_t kReservedTasks = std::size_t{1} << 16;

// build_data_parallel in phases. The constructor checks the spec and works out the layout, the
// parameter counts, the kernel times, the modules and each rank's placement; build() adds the
// iteration's tasks phase by phase: model states, each micro-batch's forward, backward and
// gradient reduction, the optimizer step and the parameter all-gather.
class DataParallelBuilder {
 public:
  DataParallelBuilder(const IterationInputs& inputs, const DataParallelSpec& strategy, const UlyssesShare& share)
      : in(inputs),
        spec(strategy),
        out(),
        g(out.graph),
        timeline(out.graph),
        m(inputs.model),
        train(inputs.training),
        ranks(checked_ranks(inputs, strategy)),
        policy(strategy.fsdp2 ? ZeroPolicy::fsdp2(strategy.fp32_gradient_reduce)
                              : ZeroPolicy::deepspeed(strategy.zero_stage, strategy.fp32_grad_accum,
                                                      strategy.fp32_gradient_reduce)),
        tp(strategy.tp),
        replicas(ranks / tp),
        ep(strategy.ep),
        layout(data_parallel_layout(out, inputs, strategy)),
        sims(layout.simulated_ranks()),
        comm(g, out.machine, inputs.topology, layout, inputs.collectives, inputs.costs,
             inputs.collective_options(strategy.collectives), out.approximations),
        replica_plan(tp == 1 ? Communicator::flat(ranks)
                             : CollectivePlan{{Band{"dp", tp, ranks}}, StageAlgorithm::kRing, {}}),
        tp_plan(Communicator::flat(tp)),
        expert_plan{{Band{"expert-dp", tp * ep, ranks}}, StageAlgorithm::kRing, {}},
        dispatch_plan{{Band{"ep", tp, tp * ep}}, StageAlgorithm::kAllToAll, {}},
        part(strategy.partitioning.value_or(Partitioning{replicas, replica_plan, 0, {}, replica_plan, {}})),
        shard(policy.gathers_parameters_before_use() ? part.shard_ranks : replicas),
        rank_params(rank_parameters(inputs.model, tp, ep, policy, shard)),
        offload(strategy.offload.has_value()),
        prev(sims),
        last_backward(sims) {
    k = share.kernel_times(updated_on_rank, tp, spec.sequence_parallel, ep);
    // Every rank runs the whole model: its stream is embedding, all layers, head (host_dispatch.hpp).
    apply_host_dispatch(in, m, m.layers, tp, spec.sequence_parallel, ep, k);
    layers.emplace(timeline, comm, share.layer_times(k), train.recompute,
                   share.parallelism(tp, ep, tp_plan, dispatch_plan, activation_elements, dispatch_elements));
    stored = share.stored_activations(tp, spec.sequence_parallel);
    const std::int64_t vocab_on_rank = (m.vocab + tp - 1) / tp;
    logits = Bytes{train.micro_batch * m.seq * vocab_on_rank * kLogitBytesPerElement};
    std::tie(loss_workspace, loss_grad_workspace) = loss_workspaces(train, train.micro_batch * m.seq * vocab_on_rank);
    w = share.layer_forward();
    if (train.recompute == Recompute::kFull) recomputed = w.gemm + w.attention;
    if (train.recompute == Recompute::kSelective) recomputed = w.attention;
    define_modules();
    place_ranks();
  }

  // The iteration's tasks, phase by phase.
  BuiltIteration build() {
    g.reserve(std::min(previous_graph_tasks, kReservedTasks));
    place_states();
    for (std::int64_t mb = 0; mb < train.grad_accum; ++mb) micro_batch(mb);
    std::vector<TaskId> end = parameter_allgather(optimizer_step());
    // hpZ: the secondary partitions are dropped after the optimizer step.
    if (gather && gather->secondary_elements() > 0) {
      const Bytes secondary{states().secondary.gpu};
      for (int r = 0; r < sims; ++r) {
        end[r] =
            timeline.release(r, "free.secondary", phase::kOptimizer, kSecondaryPartitionTenant, secondary, {end[r]});
      }
    }
    (void)g.add("iteration.end", "end", BarrierTask{}, end);
    previous_graph_tasks = g.size();
    finish();
    return std::move(out);
  }

 private:
  const IterationInputs& in;
  const DataParallelSpec& spec;
  BuiltIteration out;
  sim::TaskGraph& g;
  RankTimeline timeline;  // the simulated ranks' GPUs (place_ranks)
  const ModelSpec& m;
  const TrainingSpec& train;
  const int ranks;
  // What the stage partitions and how DeepSpeed's engine treats the gradients (zero_policy.hpp): at
  // stages 0-1 with fp32 gradient accumulation its BF16_Optimizer, whose optimizer states are
  // partitioned as at stage 1 and whose all-reduce moves the fp32 gradients; at stages 2-3 the
  // reduce-scatter's dtype.
  const ZeroPolicy policy;
  const int tp;
  const int replicas;
  // Expert parallelism (DeepSpeed-MoE): the experts of every MoE layer spread over ep consecutive
  // replicas (of one tensor rank); each expert's states are ZeRO-partitioned over its data-parallel
  // group (the ranks of one expert-parallel position, stride tp x ep).
  const int ep;
  const RankLayout layout;
  const int sims;
  Communicator comm;
  // ZeRO's collectives run across the replicas (the ranks of one tensor rank, stride tp); the
  // tensor-parallel all-reduces inside each group of tp consecutive ranks.
  const CollectivePlan replica_plan;
  const CollectivePlan tp_plan;
  // Expert parallelism: the experts' states over their data-parallel group (the ranks of one
  // tensor rank and one expert-parallel position, stride tp x ep); the routed tokens' all-to-all
  // among the ep replicas of an expert-parallel group that hold the same tensor rank (stride tp).
  const CollectivePlan expert_plan;
  const CollectivePlan dispatch_plan;
  // Stage 3 follows the partitioning (by default: every state over all replicas, flat rings).
  const Partitioning part;
  const int shard;
  // The parameters of a rank (rank_parameters): P_model, P, updated_on_rank, ...
  const RankParameters rank_params;
  const ParameterCounts& params = rank_params.counts;
  const std::int64_t P_model = rank_params.sharded;
  const std::int64_t experts_per_layer_on_rank = rank_params.experts_per_layer;
  const std::int64_t P = rank_params.held;
  const std::int64_t updated_on_rank = rank_params.updated;
  // Optimizer offload to the host (phases/host_offload.hpp), made by place_ranks.
  const bool offload;
  std::optional<HostOffload> host;
  KernelTimes k;
  Bytes stored;
  Bytes logits;
  Bytes loss_workspace;       // the loss's transient buffers in forward
  Bytes loss_grad_workspace;  // and in backward
  // Megatron's tensor-parallel layer: an all-reduce of the micro-batch's activations after the
  // attention and after the MLP in forward, two in backward (four with full recomputation).
  const std::int64_t activation_elements = train.micro_batch * m.seq * m.hidden;
  LayerWork w;
  sim::Flops recomputed{};
  // Modules in forward order (define_modules).
  std::vector<Module> modules;
  std::int64_t persistent = 0;
  // prev: each rank's last task so far.
  std::vector<TaskId> prev;
  // Each rank's framework host thread (stage 3's launch costs) and stage 3's gathers (place_ranks).
  std::optional<HostThreads> host_threads;
  std::optional<ParameterGather> gather;
  // The gradients' bucketed reduction (phases/gradient_reduction.hpp), made by place_ranks.
  std::optional<GradientReduction> reduction;
  std::optional<LayerCompute> layers;  // each layer's compute and its collectives (phases/layer_compute.hpp)
  // Elements of each expert-parallel all-to-all (phases/layer_compute.hpp).
  const std::int64_t dispatch_elements = busiest_rank_dispatch_elements(m, train.micro_batch* m.seq, ep);
  std::vector<TaskId> last_backward;
  const sim::Flops head_flops = head_forward_flops(m, train.micro_batch) * (1.0 / tp);

  void define_modules() {
    modules = spec.fsdp2 ? fsdp2_units(m, params, experts_per_layer_on_rank, ep, *spec.fsdp2)
                         : model_modules(m, params, tp, ep, spec.param_persistence_threshold);
    for (const auto& mod : modules) persistent += mod.persistent;
  }

  // Each simulated rank's GPU and, with offload, its host and NVMe.
  void place_ranks() {
    std::vector<std::size_t> gpus;
    for (int r = 0; r < sims; ++r) {
      const std::size_t device = out.devices[layout.simulated[r]];
      (void)timeline.add_rank(layout.simulated[r], *out.machine->unit_of_device[device],
                              *out.machine->pool_of_device[device]);
      gpus.push_back(device);
    }
    if (offload) {
      host.emplace(timeline, out, in, std::move(gpus), *spec.offload, policy, spec.offload_param, updated_on_rank);
    }
    host_threads.emplace(timeline);
    if (policy.gathers_parameters_before_use()) {
      gather.emplace(timeline, comm, ParameterGather::Plans{part, expert_plan}, spec.zero3_fetch, spec.zero3_host,
                     *host_threads, spec.offload_param ? &*host : nullptr, spec.param_pin_memory);
    }
    reduction.emplace(timeline, comm, policy, gradient_items(m, params, ep, experts_per_layer_on_rank, policy.fsdp2()),
                      GradientReduction::Plans{replica_plan, expert_plan, part},
                      GradientReduction::Options{
                          spec.reduce_bucket_elements, spec.overlap_comm, shard, replicas, spec.zero3_host, {}, {}},
                      *host_threads, host ? &*host : nullptr);
  }

  // Each rank's model states per memory tier (models/placement): at stage 3 each rank keeps its
  // partition of the gathered parameters and every persistent one whole (DeepSpeed's
  // param_persistence_threshold); with offload, the host (or the NVMe) keeps the states of the CPU
  // subgroups. The hpZ secondary partition counts once the first forward has kept it.
  [[nodiscard]] StatePlacement states() const {
    StateCounts c;
    c.held = P;
    c.sharded = P_model;
    c.partitioned = policy.partitioned();
    c.shard_ranks = shard;
    c.gradient_buffers = policy.gradient_buffers();
    c.fp32_gradient_partition = c.parameter_shard_is_master = policy.fsdp2();
    c.persistent = persistent;
    c.reduce_bucket_elements =
        policy.fsdp2() ? fsdp2_reduce_buffer_elements(modules, policy.fp32_gradients()) : spec.reduce_bucket_elements;
    if (host) host->describe(c);
    c.parameter_offload = spec.offload_param;
    c.secondary_elements = gather ? gather->secondary_elements() : 0;
    return place_model_states(c, kBf16MixedPrecision);
  }

  // Model states: the setup allocations of states() on every rank.
  void place_states() {
    const StatePlacement st = states();
    for (int r = 0; r < sims; ++r) {
      // With offload, the GPU keeps the states of its GPU-resident subgroups (fp32 master, m, v and
      // fp32 gradients); the host keeps the rest and a bf16 buffer for the whole gradient partition.
      TaskId last = allocate_model_states(
          timeline, r, st, policy, offload,
          spec.offload_param ? std::optional(ParameterHostPool{host->host_pool(r)}) : std::nullopt);
      if (host) last = host->allocate_host_states(r, st, last);
      if (policy.reduces_every_micro_batch()) {
        last = timeline.alloc(r, "alloc.reduce_bucket", "setup", "gradient reduce bucket (bf16)",
                              Bytes{st.reduce_bucket.gpu}, {last});
      }
      prev[r] = last;
    }
    if (gather) gather->start(prev);
  }

  // Runs one module's compute on every rank, with its stage-3 gather and release around it.
  // `body(deps)` builds the module's work on all ranks at once (tensor-parallel all-reduces join
  // the ranks of a group), from each rank's dependencies, and returns each rank's last task.
  template <typename Body>
  void run_module_on_all(const Module& mod, const std::string& when, Body&& body) {
    prev = body(gather ? gather->before(mod, when, prev) : timeline.per_rank(prev));
    if (gather) gather->after(mod, when, prev);
  }
  // The same with `body(r, deps)` building one rank's work at a time.
  template <typename Body>
  void run_module(const Module& mod, const std::string& when, Body&& body) {
    run_module_on_all(mod, when, [&](std::vector<std::vector<TaskId>> deps) {
      std::vector<TaskId> last(sims);
      for (int r = 0; r < sims; ++r) last[r] = body(r, std::move(deps[r]));
      return last;
    });
  }
  // One micro-batch: forward, backward, and (when this micro-batch reduces) its gradient reduction.
  void micro_batch(std::int64_t mb) {
    const std::string mbs = fmt::format(FMT_COMPILE("mb{}"), mb);
    const bool last_mb = mb == train.grad_accum - 1;
    const bool reduces = policy.reduces_every_micro_batch() || last_mb;  // this micro-batch's gradients are reduced
    reduction->begin_micro_batch();
    const std::pair<TaskId, TaskId> fwd = forward_pass(mbs);
    const TaskId b_first = backward_pass(mbs, reduces);
    out.spans.push_back({phase::kForward, fwd.first, fwd.second, false});
    out.spans.push_back({phase::kBackward, b_first, last_backward[0], false});
    if (policy.bf16_optimizer()) accumulate_fp32_gradients(mbs);
    if (!reduces) return;
    reduction->reduce(mb, last_mb, last_backward);
    if (!last_mb) {
      // DeepSpeed's end-of-backward epilogue flushes the last bucket and waits for the reduce
      // stream: the next micro-batch's forward starts after this one's gradients are reduced.
      for (int r = 0; r < sims; ++r) {
        prev[r] =
            timeline.barrier(r, mbs + ".gradients_reduced", phase::kCommunication, {prev[r], reduction->stream()[r]});
      }
      out.spans.push_back({phase::kExposedCommunication, last_backward[0], prev[0], true});
    }
  }
  // BF16_Optimizer adds the micro-batch's bf16 gradients into its fp32 buffer once the backward is
  // done, on the compute stream (precision.hpp); its gradient all-reduce starts after that
  // (engine.py backward: the optimizer's backward, then allreduce_gradients).
  void accumulate_fp32_gradients(const std::string& mbs) {
    const TaskId backward_end = last_backward[0];
    for (int r = 0; r < sims; ++r) {
      last_backward[r] = prev[r] = models::accumulate_fp32_gradients(timeline, r, mbs + ".accumulate_fp32_gradients",
                                                                     in.costs, P, 1, last_backward[r]);
    }
    out.spans.push_back({phase::kOptimizer, backward_end, last_backward[0], true});
  }
  // Forward of micro-batch `mbs` on every rank: embedding, layers, head. Returns rank 0's first and
  // last forward compute.
  std::pair<TaskId, TaskId> forward_pass(const std::string& mbs) {
    std::vector<TaskId> f_first(sims), f_last(sims);
    run_module(modules.front(), mbs + ".fwd", [&](int r, std::vector<TaskId> deps) {
      return f_first[r] = timeline.compute(r, mbs + ".fwd.embedding", phase::kForward, k.embed_fwd, {}, "memory",
                                           std::move(deps));
    });
    for (std::int64_t l = 0; l < m.layers; ++l) {
      run_module_on_all(
          modules[static_cast<std::size_t>(l + 1)], mbs + ".fwd", [&](std::vector<std::vector<TaskId>> deps) {
            const std::string alloc =
                timeline.graph().name_from([&] { return fmt::format(FMT_COMPILE("{}.alloc.act{}"), mbs, l); });
            for (int r = 0; r < sims; ++r) {
              deps[r].push_back(timeline.alloc(r, alloc, phase::kForward, "activations", stored, {prev[r]}));
            }
            return layers
                ->run(fmt::format(FMT_COMPILE("{}.fwd.layer{}"), mbs, l), phase::kForward, true,
                      (w.gemm + w.attention) * (1.0 / tp), std::move(deps))
                .end;
          });
    }
    run_module(modules.back(), mbs + ".fwd", [&](int r, std::vector<TaskId> deps) {
      deps.push_back(timeline.alloc(r, mbs + ".alloc.logits", phase::kForward, "activations", logits, {prev[r]}));
      deps.push_back(timeline.alloc(r, mbs + ".alloc.loss", phase::kForward, "activations", loss_workspace, {prev[r]}));
      f_last[r] =
          timeline.compute(r, mbs + ".fwd.head", phase::kForward, k.head_fwd, head_flops, "gemm", std::move(deps));
      return timeline.release(r, mbs + ".free.loss", phase::kForward, "activations", loss_workspace, {f_last[r]});
    });
    return {f_first[0], f_last[0]};
  }
  // Backward of micro-batch `mbs`; when it `reduces`, its gradient items record when each rank's
  // gradients exist. Returns rank 0's first backward compute.
  TaskId backward_pass(const std::string& mbs, bool reduces) {
    std::vector<TaskId> b_first(sims);
    // Backward: head, layers in reverse, embedding.
    std::size_t item = 0;
    run_module(modules.back(), mbs + ".bwd", [&](int r, std::vector<TaskId> deps) {
      deps.push_back(
          timeline.alloc(r, mbs + ".alloc.loss_grad", phase::kBackward, "activations", loss_grad_workspace, {prev[r]}));
      b_first[r] = timeline.compute(r, mbs + ".bwd.head", phase::kBackward, k.head_bwd, head_flops * 2.0, "gemm",
                                    std::move(deps));
      timeline.release(r, mbs + ".free.loss_grad", phase::kBackward, "activations", loss_grad_workspace, {b_first[r]});
      if (reduces) {
        reduction->produced(item, r, b_first[r], b_first[r]);
      }
      return timeline.release(r, mbs + ".free.logits", phase::kBackward, "activations", logits, {b_first[r]});
    });
    if (reduces) reduction->item_done(item, mbs);
    ++item;
    for (std::int64_t l = m.layers - 1; l >= 0; --l) {
      run_module_on_all(
          modules[static_cast<std::size_t>(l + 1)], mbs + ".bwd", [&](std::vector<std::vector<TaskId>> deps) {
            const LayerTasks b =
                layers->run(fmt::format(FMT_COMPILE("{}.bwd.layer{}"), mbs, l), phase::kBackward, false,
                            ((w.gemm + w.attention) * 2.0 + recomputed) * (1.0 / tp), std::move(deps));
            std::vector<TaskId> done(sims);
            const std::string free =
                timeline.graph().name_from([&] { return fmt::format(FMT_COMPILE("{}.free.act{}"), mbs, l); });
            for (int r = 0; r < sims; ++r) {
              // The layer's weight gradients exist after its last compute piece; a later kernel
              // that must wait (the offload's blocking copy) holds back its first piece.
              if (reduces) {
                reduction->produced(item, r, b.last_compute[r], b.first[r]);
              }
              done[r] = timeline.release(r, free, phase::kBackward, "activations", stored, {b.end[r]});
            }
            return done;
          });
      if (reduces) reduction->item_done(item, mbs);
      ++item;
    }
    run_module(modules.front(), mbs + ".bwd", [&](int r, std::vector<TaskId> deps) {
      const TaskId b =
          timeline.compute(r, mbs + ".bwd.embedding", phase::kBackward, k.embed_bwd, {}, "memory", std::move(deps));
      if (reduces) {
        reduction->produced(item, r, b, b);
      }
      return last_backward[r] = b;
    });
    if (reduces) reduction->item_done(item, mbs);
    return b_first[0];
  }

  // The optimizer step on every rank, once its gradients are reduced; returns each rank's last task.
  std::vector<TaskId> optimizer_step() {
    std::vector<TaskId> adam(sims);
    for (int r = 0; r < sims; ++r) {
      const TaskId ready = timeline.barrier(r, "gradients_synchronized", phase::kCommunication,
                                            {last_backward[r], reduction->stream()[r]});
      TaskId first_step;
      if (offload) {
        adam[r] = host->step(r, ready, first_step);
      } else {
        const StepTasks step = gpu_optimizer_step(timeline, r, policy, in.costs, P, updated_on_rank, k.adam, ready);
        first_step = step.first;
        adam[r] = step.last;
      }
      if (r == 0) {
        out.spans.push_back({phase::kExposedCommunication, last_backward[0], ready, true});
        out.spans.push_back({phase::kOptimizer, first_step, adam[0], false});
      }
    }
    return adam;
  }
  // Stages 1-2 and BF16_Optimizer: the all-gather of the updated parameters after `adam`; returns
  // each rank's end.
  std::vector<TaskId> parameter_allgather(std::vector<TaskId> adam) {
    std::vector<TaskId> end = adam;
    if (policy.gathers_updated_parameters() && replicas > 1) {
      // Every rank updated its partition: all-gather the new bf16 parameters.
      const std::int64_t experts_on_rank = experts_per_layer_on_rank * m.layers;
      if (experts_on_rank > 0) {
        adam = comm.add(CollectiveKind::kAllGather, "updated_parameters.experts", experts_on_rank, expert_plan, adam);
      }
      end = comm.add(CollectiveKind::kAllGather, "updated_parameters", P - experts_on_rank, replica_plan, adam);
      out.spans.push_back({phase::kParameterAllgather, adam[0], end[0], true});
    }
    return end;
  }

  // The iteration's figures and approximations.
  void finish() {
    set_work_figures(out, in, static_cast<double>(train.micro_batch * train.grad_accum), replicas, tp);
    // Model states on one GPU: parameters, gradients, optimizer states (the setup allocations) and
    // the hpZ secondary partition.
    out.model_states_per_device = Bytes{states().gpu_model_states()};
    add_data_parallel_approximations(out, in, spec, policy, part.shard_ranks);
  }
};

}  // namespace

BuiltIteration build_data_parallel(const IterationInputs& in, const DataParallelSpec& spec) {
  // Ulysses (ulysses.hpp): each rank builds the iteration of its s / sp tokens.
  if (const std::string unfit = spec.sp > 1 ? ulysses_unfit(in.model, spec.sp) : ""; !unfit.empty()) {
    throw std::invalid_argument("data_parallel: " + unfit);
  }
  const UlyssesShare share(in, std::max(1, spec.sp));
  BuiltIteration out = DataParallelBuilder(share.inputs(), spec, share).build();
  share.finish(out, static_cast<int>(spec.devices.size()));
  return out;
}

}  // namespace offsim::models
