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

// A gradient-producing step of backward: the task after which its gradients exist on each rank.
struct GradientItem {
  std::int64_t elements;
  std::vector<TaskId> ready_on_rank;
  std::int64_t expert_elements = 0;  // expert parallelism: reduced over the expert-data-parallel group
  std::int64_t tensors = 0;          // parameter tensors (DeepSpeed's early stage 3 reduces each apart)
};

// A module whose parameters stage 3 gathers before it runs: one all-gather per submodule whose
// parameters reach the persistence threshold, in forward order (DeepSpeed fetches each submodule's
// parameters in its pre-forward hook); smaller ones (norms, biases) stay resident on every rank.
struct Module {
  std::string name;
  std::vector<std::int64_t> gathers;  // elements of each all-gather
  std::vector<bool> expert;           // per gather: the rank's experts (gathered over their data-parallel group)
  std::int64_t persistent = 0;        // elements kept whole on every rank
  [[nodiscard]] std::int64_t gathered() const {
    std::int64_t n = 0;
    for (const auto g : gathers) n += g;
    return n;
  }
};

// Splits `parts` (submodule parameter counts) into gathered and persistent by the threshold.
Module make_module(std::string name, const std::vector<std::int64_t>& parts, std::int64_t persistence_threshold,
                   const std::vector<bool>& expert = {}) {
  Module mod{std::move(name), {}, {}, 0};
  for (std::size_t i = 0; i < parts.size(); ++i) {
    const std::int64_t n = parts[i];
    if (n <= 0) continue;
    if (n < persistence_threshold) {
      mod.persistent += n;
    } else {
      mod.gathers.push_back(n);
      mod.expert.push_back(i < expert.size() && expert[i]);
    }
  }
  return mod;
}

// The spec's checks, made before anything is built. Returns the number of ranks.
int checked_ranks(const IterationInputs& in, const DataParallelSpec& spec) {
  const auto& m = in.model;
  const int ranks = static_cast<int>(spec.devices.size());
  const int stage = spec.zero_stage;
  if (ranks < 1) throw std::invalid_argument("data_parallel needs at least one device");
  if (stage < 0 || stage > 3) throw std::invalid_argument("data_parallel: zero_stage must be 0 to 3");
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
    if (tp > 1 || spec.partitioning || spec.offload || spec.offload_param) {
      throw std::invalid_argument(
          "data_parallel: expert parallelism together with tp > 1, a partitioning or offload is not modelled");
    }
  }
  return ranks;
}

// Where a simulated rank runs: its GPU's unit and pool, and with offload its host (and NVMe).
struct Rank {
  std::uint32_t unit = 0;
  std::uint32_t pool = 0;
  std::string prefix;
  std::size_t host = 0;  // the nearest CPU (offload)
  std::uint32_t host_pool = 0;
  sim::ConstraintId host_memory;                // its DDR, crossed by host copies and CPU work
  std::optional<sim::ConstraintId> host_cores;  // its cores' streaming throughput, crossed by CPU work
  std::size_t nvme = 0;                         // ZeRO-Infinity: the node's NVMe device
  std::uint32_t nvme_pool = 0;
};

// A layer's tasks per rank (layer_compute).
struct LayerTasks {
  std::vector<TaskId> first, last_compute, end;
};

constexpr const char* kGathered = "gathered parameters (bf16)";
// hpZ: after its first forward gather, each rank keeps a secondary shard of the module (bf16)
// until the optimizer step drops them (DeepSpeed invalidate_secondary_tensor).
constexpr const char* kSecondary = "secondary parameter partition (hpZ, bf16)";

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

// build_data_parallel in phases. The constructor checks the spec and works out the layout, the
// parameter counts, the kernel times, the modules and each rank's placement; build() adds the
// iteration's tasks phase by phase: model states, each micro-batch's forward, backward and
// gradient reduction, the optimizer step and the parameter all-gather.
class DataParallelBuilder {
 public:
  DataParallelBuilder(const IterationInputs& inputs, const DataParallelSpec& strategy)
      : in(inputs),
        spec(strategy),
        out(),
        g(out.graph),
        m(inputs.model),
        train(inputs.training),
        ranks(checked_ranks(inputs, strategy)),
        stage(strategy.zero_stage),
        grads(deepspeed_gradient_handling(stage, strategy.fp32_grad_accum, strategy.fp32_gradient_reduce)),
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
        expert_plan{{Band{"expert-dp", ep, ranks}}, StageAlgorithm::kRing, {}},
        dispatch_plan{{Band{"ep", 1, ep}}, StageAlgorithm::kAllToAll, {}},
        part(strategy.partitioning.value_or(Partitioning{replicas, replica_plan, 0, {}, replica_plan, {}})),
        shard(stage == 3 ? part.shard_ranks : replicas),
        offload(strategy.offload.has_value()),
        off(strategy.offload.value_or(OptimizerOffload{})),
        backward_tasks(sims),
        prev(sims),
        freed_two_ago(sims),
        freed_one_ago(sims),
        secondary_kept(sims),
        gradient_swaps(sims),
        last_backward(sims) {
    count_rank_parameters();
    split_offload_subgroups();
    k = kernel_times(in, updated_on_rank, tp, spec.sequence_parallel, ep);
    stored = stored_activations_on_tp_rank(m, train, tp, spec.sequence_parallel);
    const std::int64_t vocab_on_rank = (m.vocab + tp - 1) / tp;
    logits = Bytes{train.micro_batch * m.seq * vocab_on_rank * kLogitBytesPerElement};
    loss_workspace = Bytes{train.micro_batch * m.seq * vocab_on_rank * kLossWorkspaceBytesPerElement};
    w = layer_forward(m, train.micro_batch, train.flash_attention);
    if (train.recompute == Recompute::kFull) recomputed = w.gemm + w.attention;
    if (train.recompute == Recompute::kSelective) recomputed = w.attention;
    define_modules();
    list_gradient_items();
    place_ranks();
    check_copy_fits();
    measure_host_rates();
  }

  // The iteration's tasks, phase by phase.
  BuiltIteration build() {
    place_states();
    for (std::int64_t mb = 0; mb < train.grad_accum; ++mb) micro_batch(mb);
    std::vector<TaskId> end = parameter_allgather(optimizer_step());
    // hpZ: the secondary partitions are dropped after the optimizer step.
    if (secondary_elements > 0) {
      const Bytes secondary{states().secondary.gpu};
      for (int r = 0; r < sims; ++r) {
        end[r] = release(r, "free.secondary", phase::kOptimizer, kSecondary, secondary, {end[r]});
      }
    }
    (void)g.add("iteration.end", "end", BarrierTask{}, end);
    finish();
    return std::move(out);
  }

 private:
  const IterationInputs& in;
  const DataParallelSpec& spec;
  BuiltIteration out;
  sim::TaskGraph& g;
  const ModelSpec& m;
  const TrainingSpec& train;
  const int ranks;
  const int stage;
  // DeepSpeed's handling of the gradients (layer_kernels.hpp): at stages 0-1 with fp32 gradient
  // accumulation its BF16_Optimizer, whose optimizer states are partitioned as at stage 1 and whose
  // all-reduce moves the fp32 gradients; at stages 2-3 the reduce-scatter's dtype.
  const GradientHandling grads;
  const int tp;
  const int replicas;
  // Expert parallelism (DeepSpeed-MoE): the experts of every MoE layer spread over ep consecutive
  // ranks; each expert's states are ZeRO-partitioned over its data-parallel group (the ranks of
  // one expert-parallel position, stride ep).
  const int ep;
  const RankLayout layout;
  const int sims;
  Communicator comm;
  // ZeRO's collectives run across the replicas (the ranks of one tensor rank, stride tp); the
  // tensor-parallel all-reduces inside each group of tp consecutive ranks.
  const CollectivePlan replica_plan;
  const CollectivePlan tp_plan;
  // Expert parallelism: the experts' states over their data-parallel group (stride ep); the routed
  // tokens' all-to-all among the ep consecutive ranks of an expert-parallel group.
  const CollectivePlan expert_plan;
  const CollectivePlan dispatch_plan;
  // Stage 3 follows the partitioning (by default: every state over all replicas, flat rings).
  const Partitioning part;
  const int shard;
  // All the model's parameters (P_model), sharded over `shard` ranks by ZeRO; P: those a rank holds
  // whole before sharding (with expert parallelism, its experts only). An expert's share of its
  // data-parallel group (shard / ep ranks) is (experts / ep) / (shard / ep): sharded counts are
  // P_model / shard either way.
  ParameterCounts params;
  std::int64_t P_model = 0;
  std::int64_t experts_per_layer_on_rank = 0;  // expert parallelism: the rank's experts' weights
  std::int64_t P = 0;
  std::int64_t updated_on_rank = 0;
  // Optimizer offload: the rank's partition is updated in subgroups of sub_group_size elements;
  // the first int(ratio x n) subgroups on the host CPU, the rest on the GPU (Twin-Flow).
  const bool offload;
  const OptimizerOffload off;
  std::vector<std::int64_t> subgroups;
  std::size_t cpu_subgroups = 0;
  std::int64_t cpu_params = 0;
  double cpu_fraction = 0.0;
  KernelTimes k;
  Bytes stored;
  Bytes logits;
  Bytes loss_workspace;
  // Megatron's tensor-parallel layer: an all-reduce of the micro-batch's activations after the
  // attention and after the MLP in forward, two in backward (four with full recomputation).
  const std::int64_t activation_elements = train.micro_batch * m.seq * m.hidden;
  const int tp_reductions_forward = tp > 1 ? 2 : 1;
  const int tp_reductions_backward = tp == 1 ? 1 : (train.recompute == Recompute::kFull ? 4 : 2);
  LayerWork w;
  sim::Flops recomputed{};
  // Modules in forward order (define_modules).
  std::vector<Module> modules;
  std::int64_t persistent = 0;
  // Gradients in the order backward produces them (each parameter once), and on the last
  // micro-batch each rank's backward compute tasks in that order.
  std::vector<std::vector<TaskId>> backward_tasks;
  std::vector<GradientItem> items;
  // The reduce buckets: consecutive gradient items until a bucket holds at least
  // reduce_bucket_elements, and the last item (list_gradient_items).
  struct Bucket {
    std::size_t last_item = 0;
    std::int64_t elements = 0, expert_elements = 0, tensors = 0;
  };
  std::vector<Bucket> buckets;
  std::vector<Rank> rank_info;
  // CPU work's measured rates (measure_host_rates).
  std::optional<sim::Bandwidth> cpu_adam_bound, cpu_upcast_bound, cpu_downcast_bound;
  // prev: each rank's last task so far.
  std::vector<TaskId> prev;
  // Stage 3 gather stream and the modules freed one and two modules ago (gather_module).
  std::vector<TaskId> gather_stream;
  std::vector<std::optional<TaskId>> host_thread;  // each rank's last framework host work (host_work)
  std::vector<std::vector<TaskId>> reduce_host;    // this micro-batch: per bucket, per rank (launch_reduce_host)
  std::vector<std::vector<TaskId>> freed_two_ago, freed_one_ago;
  std::vector<std::vector<TaskId>> secondary_kept;  // hpZ secondary shards
  std::int64_t secondary_elements = 0;
  // Elements of each expert-parallel all-to-all (expert_parallel_layer).
  const std::int64_t dispatch_elements = busiest_rank_dispatch_elements(m, (train.micro_batch * m.seq), ep);
  // Gradient reduction (reduce_micro_batch): each rank needs only its partition's gradients at
  // stages 1-3, reduced to their owner (DeepSpeed's ZeRO optimizer, stage_1_and_2.py average_tensor:
  // one reduce per owner's slice of a bucket, costed as a reduce-scatter); a replicated optimizer,
  // and BF16_Optimizer (engine.py allreduce_gradients, buffered_allreduce_fallback), all-reduce.
  const CollectiveKind reduction =
      grads.reduce_to_owners() ? CollectiveKind::kReduceScatter : CollectiveKind::kAllReduce;
  std::vector<std::vector<TaskId>> gradient_swaps;  // ZeRO-Infinity gradient writes
  std::vector<TaskId> reduce_stream;                // empty until the first bucket
  std::vector<TaskId> last_backward;
  const sim::Flops head_flops = head_forward_flops(m, train.micro_batch) * (1.0 / tp);

  // The parameters a rank holds (P) and updates (updated_on_rank).
  void count_rank_parameters() {
    params = tensor_parallel_share(count_parameters(m), tp);
    P_model = params.total;
    if (ep > 1) {
      experts_per_layer_on_rank = params.experts_per_layer / ep;
      params.per_layer -= params.experts_per_layer - experts_per_layer_on_rank;
      params.layers = params.per_layer * m.layers;
      params.total = params.layers + params.embedding + params.position + params.final_norm + params.output_head;
    }
    P = params.total;
    updated_on_rank = updated_parameters(grads.optimizer_stage, P, P_model, shard);
  }
  [[nodiscard]] std::int64_t partition(std::int64_t n) const { return (n + shard - 1) / shard; }

  // Optimizer offload's subgroups and the CPU's share of them.
  void split_offload_subgroups() {
    if (offload) {
      // ZeRO-2 runs CPU Adam over the whole partition at once (one parameter group here).
      const std::int64_t group_size = stage == 2 ? updated_on_rank : off.sub_group_size;
      for (std::int64_t left = updated_on_rank; left > 0; left -= group_size) {
        subgroups.push_back(std::min(left, group_size));
      }
      cpu_subgroups = static_cast<std::size_t>(off.ratio * static_cast<double>(subgroups.size()));
      for (std::size_t j = 0; j < cpu_subgroups; ++j) cpu_params += subgroups[j];
    }
    cpu_fraction = offload ? static_cast<double>(cpu_params) / static_cast<double>(updated_on_rank) : 0.0;
  }

  void define_modules() {
    // Modules in forward order; the head multiplies by the embedding when they are tied.
    // A layer's submodules: its linear projections (weight and bias) and what remains (the norms).
    std::vector<std::int64_t> layer_parts;
    std::vector<bool> expert_parts;  // expert parallelism: the parts gathered over the experts' group
    {
      std::int64_t linear = 0;
      for (const auto& gemm : layer_gemms(m, 1, 1, ep)) {
        if (gemm.attention_core) continue;
        layer_parts.push_back((gemm.parameters() + tp - 1) / tp);
        expert_parts.push_back(ep > 1 && gemm.expert);
        linear += layer_parts.back();
      }
      layer_parts.push_back(params.per_layer - linear);
      expert_parts.push_back(false);
    }
    const std::int64_t threshold = spec.param_persistence_threshold;
    modules = {make_module("embedding", {params.embedding, params.position}, threshold)};
    for (std::int64_t l = 0; l < m.layers; ++l)
      modules.push_back(make_module(fmt::format(FMT_COMPILE("layer{}"), l), layer_parts, threshold, expert_parts));
    modules.push_back(
        make_module("head", {params.final_norm, m.tied_embeddings ? params.embedding : params.output_head}, threshold));
    for (const auto& mod : modules) persistent += mod.persistent;
  }

  // The gradient items, in backward order (see backward_tasks).
  void list_gradient_items() {
    // Parameter tensors: each projection's weight (and bias), each norm's weight (and bias).
    const std::int64_t norm_tensors = m.norm == NormKind::kLayerNorm ? 2 : 1;
    std::int64_t layer_tensors = m.norms_per_layer() * norm_tensors;
    for (const auto& gemm : layer_gemms(m, 1, 1, ep)) {
      if (!gemm.attention_core) layer_tensors += gemm.batch * (gemm.bias ? 2 : 1);
    }
    items.push_back({params.output_head + params.final_norm, {}, 0, (params.output_head > 0 ? 1 : 0) + norm_tensors});
    for (std::int64_t l = m.layers - 1; l >= 0; --l) {
      items.push_back({params.per_layer - experts_per_layer_on_rank, {}, experts_per_layer_on_rank, layer_tensors});
    }
    items.push_back({params.embedding + params.position, {}, 0, 1 + (params.position > 0 ? 1 : 0)});
    Bucket open;
    for (std::size_t i = 0; i < items.size(); ++i) {
      open.elements += items[i].elements;
      open.expert_elements += items[i].expert_elements;
      open.tensors += items[i].tensors;
      if (open.elements + open.expert_elements >= spec.reduce_bucket_elements || i + 1 == items.size()) {
        open.last_item = i;
        buckets.push_back(open);
        open = Bucket{};
      }
    }
  }

  // rank_info: each simulated rank's GPU and, with offload, its host and NVMe.
  void place_ranks() {
    // Host cores are one resource per CPU, shared by the ranks offloading to it (calibration.host
    // cpu_work: the streaming throughput its cores sustain for CPU Adam and casts).
    std::map<std::size_t, sim::ConstraintId> cores_of_host;
    for (int r = 0; r < sims; ++r) {
      Rank info;
      const std::size_t device = out.devices[layout.simulated[r]];
      info.unit = *out.machine.unit_of_device[device];
      info.pool = *out.machine.pool_of_device[device];
      info.prefix = fmt::format(FMT_COMPILE("r{}"), layout.simulated[r]);
      if (offload) {
        const auto host = nearest_cpu(in.topology, device);
        if (!host) {
          throw std::invalid_argument(
              fmt::format("'{}' has no CPU in its node to offload to", in.topology.device(device).name));
        }
        info.host = *host;
        const auto& mem = out.machine.memory_constraint_of_device[info.host];
        if (!mem || !out.machine.pool_of_device[info.host]) {
          throw std::invalid_argument(
              fmt::format("optimizer offload needs the memory of '{}' with a bandwidth shared by transfers",
                          in.topology.device(info.host).name));
        }
        info.host_memory = *mem;
        if (in.host.cpu_work_bandwidth) {
          auto it = cores_of_host.find(info.host);
          if (it == cores_of_host.end()) {
            // Named after the host's cores unit, which it stands for: trace.json draws the host work
            // that streams through it on that unit's track.
            const std::string cores = out.machine.platform.units.at(*out.machine.unit_of_device.at(info.host)).name;
            it = cores_of_host
                     .emplace(info.host, out.machine.platform.add_constraint(
                                             {cores, *in.host.cpu_work_bandwidth, "cpu-work", "", "", ""}))
                     .first;
          }
          info.host_cores = it->second;
        }
        info.host_pool = *out.machine.pool_of_device[info.host];
        if (off.nvme) {
          std::optional<std::size_t> nvme;
          for (const auto d : in.topology.devices_of(topo::DeviceKind::kNvme)) {
            if (in.topology.device(d).node == in.topology.device(device).node && out.machine.pool_of_device[d]) {
              nvme = d;
              break;
            }
          }
          if (!nvme) {
            throw std::invalid_argument(fmt::format("NVMe offload: the node of '{}' has no NVMe device with a capacity",
                                                    in.topology.device(device).name));
          }
          info.nvme = *nvme;
          info.nvme_pool = *out.machine.pool_of_device[*nvme];
        }
      }
      rank_info.push_back(std::move(info));
    }
  }

  // Per-rank task builders.
  // Host-side work (CPU Adam, casts) is traffic through the host's DDR and, when the host table
  // measures it, through the cores' streaming throughput that every rank on the host shares; each
  // rank's work is also capped at a measured per-thread-count rate when the table has one.
  TaskId host_traffic(int r, const std::string& name, const char* phase, Bytes bytes,
                      std::optional<sim::Bandwidth> bound, std::vector<TaskId> deps) {
    std::vector<sim::ConstraintId> route{rank_info[r].host_memory};
    if (rank_info[r].host_cores) route.push_back(*rank_info[r].host_cores);
    return g.add(fmt::format(FMT_COMPILE("{}.{}"), rank_info[r].prefix, name), phase,
                 TransferTask{std::move(route), bytes, TimePs{0}, bound, {}}, std::move(deps));
  }
  // Framework work on the rank's host thread (launching collectives, Python bookkeeping): a delay
  // that holds no link or unit. One thread per rank, so each piece also waits for the rank's
  // previous one: callers must add them in the thread's program order.
  TaskId host_work(int r, const std::string& name, TimePs duration, std::vector<TaskId> deps) {
    if (host_thread.empty()) host_thread.resize(static_cast<std::size_t>(sims));
    if (host_thread[r]) deps.push_back(*host_thread[r]);
    const TaskId t = g.add(fmt::format(FMT_COMPILE("{}.{}"), rank_info[r].prefix, name), phase::kCommunication,
                           TransferTask{{}, Bytes{0}, duration, std::nullopt, {}}, std::move(deps));
    host_thread[r] = t;
    return t;
  }
  // Host copies of pinned or pageable buffers (offload_optimizer.pin_memory) follow the copy fits
  // measured for the host (calibration.host copies: latency and bandwidth); without a fit only the
  // links limit them, and the report says pinned and pageable are not told apart.
  [[nodiscard]] const CopyFit* copy_fit(bool to_host, bool pinned) const {
    const std::string key = fmt::format(FMT_COMPILE("{}_{}"), to_host ? "d2h" : "h2d", pinned ? "pinned" : "pageable");
    const auto it = in.host.copies.find(key);
    return it == in.host.copies.end() ? nullptr : &it->second;
  }
  // Notes the host copies that have no measured fit.
  void check_copy_fits() {
    if (!offload) return;
    // Pageable copies happen whatever pin_memory says (dtype-changing copies, below).
    std::vector<std::string> missing;
    for (const bool pinned : {true, false}) {
      if (pinned && !off.pin_memory) continue;
      for (const bool to_host : {true, false}) {
        if (!copy_fit(to_host, pinned))
          missing.push_back(fmt::format(FMT_COMPILE("{}_{}"), to_host ? "d2h" : "h2d", pinned ? "pinned" : "pageable"));
      }
    }
    if (!missing.empty()) {
      out.approximations.push_back(fmt::format(
          "host copies: no measured copy fit for {} in calibration.host, so only the links limit those copies",
          fmt::join(missing, ", ")));
    }
  }
  TaskId copy(int r, const std::string& name, const char* phase, bool to_host, Bytes bytes, std::vector<TaskId> deps,
              bool pinned) {
    const std::size_t gpu = out.devices[layout.simulated[r]];
    const std::size_t cpu = rank_info[r].host;
    const CopyFit* fit = copy_fit(to_host, pinned);
    return g.add(fmt::format(FMT_COMPILE("{}.{}"), rank_info[r].prefix, name), phase,
                 TransferTask{to_host ? out.machine.transfer_route(in.topology, gpu, cpu)
                                      : out.machine.transfer_route(in.topology, cpu, gpu),
                              bytes,
                              fit ? fit->latency : TimePs{0},
                              fit ? std::optional<sim::Bandwidth>(fit->bandwidth) : std::nullopt,
                              {}},
                 std::move(deps));
  }
  // ZeRO-Infinity swaps: NVMe to host memory (read) or back (write), through the NVMe links and DDR.
  TaskId swap(int r, const std::string& name, bool to_nvme, Bytes bytes, std::vector<TaskId> deps) {
    const std::size_t cpu = rank_info[r].host;
    const std::size_t nvme = rank_info[r].nvme;
    return g.add(fmt::format(FMT_COMPILE("{}.{}"), rank_info[r].prefix, name), phase::kOptimizer,
                 TransferTask{to_nvme ? out.machine.transfer_route(in.topology, cpu, nvme)
                                      : out.machine.transfer_route(in.topology, nvme, cpu),
                              bytes,
                              TimePs{0},
                              {},
                              {}},
                 std::move(deps));
  }
  // Host work is capped at the rate measured for the threads each rank has (cores / ranks on the
  // host, nearest measured count), when the host table has one; otherwise DDR is its only limit.
  void measure_host_rates() {
    if (!offload) return;
    const auto ranks_per_host =
        std::count_if(rank_info.begin(), rank_info.end(), [&](const Rank& x) { return x.host == rank_info[0].host; });
    const int threads = std::max(1, in.topology.device(rank_info[0].host).cores / static_cast<int>(ranks_per_host));
    const std::string& host_kind = in.topology.device(rank_info[0].host).device_kind;
    const auto measured = [&](const std::vector<CpuRateFit>& fits, const char* what,
                              std::int64_t bytes_per_element) -> std::optional<sim::Bandwidth> {
      const CpuRateFit* best = nearest(
          fits, [](const CpuRateFit& f) { return f.threads; }, threads);
      if (!best) {
        if (!in.host.cpu_work_bandwidth) {
          out.approximations.push_back(fmt::format(
              "{} on {}: no measured rate (calibration.host); bounded only by host memory bandwidth (roofline)", what,
              host_kind));
        }
        return std::nullopt;
      }
      if (best->threads != threads) {
        out.approximations.push_back(
            fmt::format("{} with {} threads per rank uses the rate measured with {}", what, threads, best->threads));
      }
      return sim::Bandwidth{best->params_per_s * static_cast<double>(bytes_per_element)};
    };
    cpu_adam_bound = measured(in.host.cpu_adam, "CPU Adam", kHostAdamTrafficBytesPerParam);
    cpu_upcast_bound = measured(in.host.cpu_upcast, "CPU up-cast (bf16 to fp32)", kBf16Bytes + kFp32Bytes);
    cpu_downcast_bound = measured(in.host.cpu_downcast, "CPU down-cast (fp32 to bf16)", kBf16Bytes + kFp32Bytes);
    if (in.host.cpu_work_bandwidth) {
      out.approximations.push_back(fmt::format(
          "CPU Adam and casts on {} share its cores' streaming throughput ({}, calibration.host cpu_work), each "
          "costed by its DDR traffic: Adam {} B, a cast {} B per element",
          host_kind, sim::format_bandwidth(*in.host.cpu_work_bandwidth), kHostAdamTrafficBytesPerParam,
          kBf16Bytes + kFp32Bytes));
    }
    out.approximations.push_back("Twin-Flow: each gradient bucket is offloaded in the CPU share of the partition");
  }
  TaskId compute(int r, const std::string& name, const char* phase, TimePs duration, sim::Flops flops,
                 const char* kernel, std::vector<TaskId> deps) {
    return g.add(fmt::format(FMT_COMPILE("{}.{}"), rank_info[r].prefix, name), phase,
                 ComputeTask{rank_info[r].unit, duration, flops, Bytes{0}, kernel}, std::move(deps));
  }
  TaskId alloc(int r, const std::string& name, const char* phase, const char* tenant, Bytes bytes,
               std::vector<TaskId> deps) {
    return g.add(fmt::format(FMT_COMPILE("{}.{}"), rank_info[r].prefix, name), phase,
                 AllocTask{rank_info[r].pool, tenant, bytes}, std::move(deps));
  }
  TaskId release(int r, const std::string& name, const char* phase, const char* tenant, Bytes bytes,
                 std::vector<TaskId> deps) {
    return g.add(fmt::format(FMT_COMPILE("{}.{}"), rank_info[r].prefix, name), phase,
                 sim::FreeTask{rank_info[r].pool, tenant, bytes}, std::move(deps));
  }
  [[nodiscard]] std::vector<std::vector<TaskId>> per_rank(const std::vector<TaskId>& tasks) const {
    std::vector<std::vector<TaskId>> deps(sims);
    for (int r = 0; r < sims; ++r) deps[r] = {tasks[r]};
    return deps;
  }

  // Each rank's model states per memory tier (models/placement): at stage 3 each rank keeps its
  // partition of the gathered parameters and every persistent one whole (DeepSpeed's
  // param_persistence_threshold); with offload, the host (or the NVMe) keeps the states of the CPU
  // subgroups. The hpZ secondary partition counts once the first forward has kept it.
  [[nodiscard]] StatePlacement states() const {
    StateCounts c;
    c.held = P;
    c.sharded = P_model;
    c.zero_stage = grads.optimizer_stage;
    c.shard_ranks = shard;
    c.gradient_buffers = grads.buffers;
    c.persistent = persistent;
    c.reduce_bucket_elements = spec.reduce_bucket_elements;
    c.optimizer_offload = offload;
    c.offloaded_elements = cpu_params;
    c.nvme = off.nvme;
    if (off.nvme && !subgroups.empty()) {
      c.swap_buffer_elements = off.buffer_count * *std::max_element(subgroups.begin(), subgroups.end());
    }
    c.parameter_offload = spec.offload_param;
    c.secondary_elements = secondary_elements;
    return place_model_states(c, kBf16MixedPrecision);
  }

  // Model states: the setup allocations of states() on every rank.
  void place_states() {
    const StatePlacement st = states();
    for (int r = 0; r < sims; ++r) {
      const TaskId a0 =
          spec.offload_param
              ? g.add(
                    fmt::format(FMT_COMPILE("{}.alloc.parameters"), rank_info[r].prefix), "setup",
                    AllocTask{rank_info[r].host_pool, "parameter partition on host (bf16)", Bytes{st.parameters.host}},
                    {})
              : alloc(r, "alloc.parameters", "setup", stage == 3 ? "parameter partition (bf16)" : "parameters (bf16)",
                      Bytes{st.parameters.gpu}, {});
      // With offload, the GPU keeps the states of its GPU-resident subgroups (fp32 master, m, v and
      // fp32 gradients); the host keeps the rest and a bf16 buffer for the whole gradient partition.
      const TaskId a1 = alloc(r, "alloc.gradients", "setup",
                              offload      ? "fp32 gradients of GPU subgroups"
                              : stage >= 2 ? "gradient partition (bf16)"
                                           : grads.gradient_tenant(),
                              Bytes{st.gradients.gpu}, {a0});
      TaskId last =
          alloc(r, "alloc.optimizer", "setup", "optimizer states (fp32 master, m, v)", Bytes{st.optimizer.gpu}, {a1});
      if (offload) {
        const auto host_alloc = [&](const char* name, const char* tenant, Bytes bytes, TaskId after) {
          return g.add(fmt::format(FMT_COMPILE("{}.{}"), rank_info[r].prefix, name), "setup",
                       AllocTask{rank_info[r].host_pool, tenant, bytes}, {after});
        };
        if (off.nvme) {
          // States and fp32 gradients on the NVMe; the host keeps the pinned swap buffers.
          last = g.add(fmt::format(FMT_COMPILE("{}.alloc.nvme_states"), rank_info[r].prefix), "setup",
                       AllocTask{rank_info[r].nvme_pool, "optimizer states and fp32 gradients on NVMe",
                                 Bytes{st.optimizer.nvme + st.gradients.nvme}},
                       {last});
          last = host_alloc("alloc.swap_buffers", "pinned NVMe swap buffers", Bytes{st.swap_buffers.host}, last);
        } else {
          last = host_alloc("alloc.host_optimizer", "optimizer states on host (fp32 master, m, v)",
                            Bytes{st.optimizer.host}, last);
          last = host_alloc("alloc.host_gradients", "fp32 gradients on host", Bytes{st.gradients.host}, last);
        }
        if (stage == 3) {
          last = host_alloc("alloc.host_gradient_buffer", "bf16 gradient buffer on host",
                            Bytes{st.gradient_buffer.host}, last);
        }
      }
      if (stage >= 2) {
        last = alloc(r, "alloc.reduce_bucket", "setup", "gradient reduce bucket (bf16)", Bytes{st.reduce_bucket.gpu},
                     {last});
      }
      prev[r] = last;
    }
    gather_stream = prev;
  }

  // Stage 3: the all-gather of module i for every rank, issued on the gather stream after the
  // previous gather and after module i-2's parameters were freed (two modules live at most).
  std::vector<TaskId> gather_module(const Module& mod, const std::string& when) {
    std::vector<std::vector<TaskId>> deps(sims);
    std::vector<TaskId> allocated(sims);
    for (int r = 0; r < sims; ++r) {
      std::vector<TaskId> d{gather_stream[r]};
      // Blocking fetch: the gather starts once the rank's queued work (the previous module) is done.
      if (spec.zero3_fetch == DataParallelSpec::Fetch::kBlocking) d.push_back(prev[r]);
      d.insert(d.end(), freed_two_ago[r].begin(), freed_two_ago[r].end());
      allocated[r] = alloc(r, fmt::format(FMT_COMPILE("{}.alloc.{}"), when, mod.name), phase::kCommunication, kGathered,
                           Bytes{mod.gathered() * kBf16Bytes}, std::move(d));
      deps[r] = {allocated[r]};
    }
    // Backward gathers come from the secondary partition inside its group when there is one (hpZ).
    const bool from_secondary = part.secondary_ranks > 0 && when.ends_with(".bwd");
    std::vector<TaskId> done = allocated;
    const int group = from_secondary ? part.secondary_ranks : part.shard_ranks;
    for (std::size_t i = 0; i < mod.gathers.size(); ++i) {
      if (spec.zero3_host) {
        // The framework's host work before this parameter's all-gather is enqueued (a delay on the
        // rank's fetch path: it holds no link or unit).
        for (int r = 0; r < sims; ++r) {
          done[r] = host_work(r, fmt::format(FMT_COMPILE("{}.host.gather.{}.{}"), when, mod.name, i),
                              spec.zero3_host->all_gather.at(group), {done[r]});
        }
      }
      if (spec.offload_param) {
        // ZeRO-Infinity: the rank's shard comes from host memory first.
        for (int r = 0; r < sims; ++r) {
          done[r] = copy(r, fmt::format(FMT_COMPILE("{}.fetch.{}.{}"), when, mod.name, i), phase::kCommunication, false,
                         Bytes{(mod.gathers[i] + group - 1) / group * kBf16Bytes}, {done[r]}, spec.param_pin_memory);
        }
      }
      const CollectivePlan& plan = mod.expert[i]    ? expert_plan
                                   : from_secondary ? part.secondary_gather
                                                    : part.parameter_gather;
      done = comm.add(CollectiveKind::kAllGather, fmt::format(FMT_COMPILE("gather.{}.{}.{}"), when, mod.name, i),
                      mod.gathers[i], plan, per_rank(done));
    }
    gather_stream = done;
    return done;
  }
  void release_module(int r, const Module& mod, const std::string& when, TaskId after) {
    const TaskId f = release(r, fmt::format(FMT_COMPILE("{}.free.{}"), when, mod.name), phase::kCommunication,
                             kGathered, Bytes{mod.gathered() * kBf16Bytes}, {after});
    freed_two_ago[r] = freed_one_ago[r];
    freed_one_ago[r] = {f};
  }
  // Runs one module's compute on every rank, with its stage-3 gather and release around it.
  // `body(deps)` builds the module's work on all ranks at once (tensor-parallel all-reduces join
  // the ranks of a group), from each rank's dependencies, and returns each rank's last task.
  template <typename Body>
  void run_module_on_all(const Module& mod, const std::string& when, Body&& body) {
    std::vector<TaskId> gathered;
    if (stage == 3) gathered = gather_module(mod, when);
    const bool keep_secondary = stage == 3 && part.secondary_ranks > 0 && when == "mb0.fwd";
    const std::int64_t secondary_shard =
        (mod.gathered() + part.secondary_ranks - 1) / std::max(1, part.secondary_ranks);
    if (keep_secondary) secondary_elements += secondary_shard;
    std::vector<std::vector<TaskId>> deps(sims);
    for (int r = 0; r < sims; ++r) {
      deps[r] = {prev[r]};
      if (stage == 3) deps[r].push_back(gathered[r]);
      if (keep_secondary) {
        secondary_kept[r].push_back(alloc(r, fmt::format(FMT_COMPILE("alloc.secondary.{}"), mod.name),
                                          phase::kCommunication, kSecondary, Bytes{secondary_shard * kBf16Bytes},
                                          {gathered[r]}));
        deps[r].push_back(secondary_kept[r].back());
      }
    }
    prev = body(std::move(deps));
    for (int r = 0; r < sims; ++r) {
      if (stage == 3) release_module(r, mod, when, prev[r]);
    }
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
  // With expert parallelism the MoE layer's compute splits around the all-to-alls that send each
  // routed token to its expert's rank and back (DeepSpeed-MoE): forward [attention and router,
  // dispatch, experts, combine]; backward [combine's gradient, experts, dispatch's gradient, the
  // rest], after the recomputed forward (all-to-alls included) with full recomputation.
  LayerTasks expert_parallel_layer(const std::string& name, const char* phase, bool forward, sim::Flops flops,
                                   std::vector<std::vector<TaskId>> deps) {
    std::vector<std::optional<TimePs>> steps;  // compute pieces; nullopt: an all-to-all
    const auto forward_steps = [&] {
      steps.insert(steps.end(), {TimePs{k.layer_fwd.ps - k.experts_fwd.ps}, std::nullopt, k.experts_fwd, std::nullopt});
    };
    if (forward) {
      forward_steps();
    } else {
      std::int64_t rest = k.layer_bwd.ps - k.experts_bwd.ps;
      if (train.recompute == Recompute::kFull) {
        forward_steps();
        rest -= k.layer_fwd.ps;
      }
      steps.insert(steps.end(), {std::nullopt, k.experts_bwd, std::nullopt, TimePs{rest}});
    }
    const TimePs total = forward ? k.layer_fwd : k.layer_bwd;
    LayerTasks t{std::vector<TaskId>(sims), std::vector<TaskId>(sims), std::vector<TaskId>(sims)};
    bool started = false;
    for (std::size_t i = 0; i < steps.size(); ++i) {
      if (!steps[i]) {
        t.end = comm.add(CollectiveKind::kReduceScatter, fmt::format(FMT_COMPILE("all_to_all.{}.{}"), name, i),
                         dispatch_elements, dispatch_plan, started ? per_rank(t.end) : deps);
        if (!started) deps = per_rank(t.end);
        continue;
      }
      for (int r = 0; r < sims; ++r) {
        const double share = total.ps > 0 ? static_cast<double>(steps[i]->ps) / static_cast<double>(total.ps) : 0.0;
        t.last_compute[r] = compute(r, fmt::format(FMT_COMPILE("{}.{}"), name, i), phase, *steps[i], flops * share,
                                    "layer", started ? std::vector<TaskId>{t.end[r]} : std::move(deps[r]));
        if (!started) t.first[r] = t.last_compute[r];
        t.end[r] = t.last_compute[r];
      }
      started = true;
    }
    return t;
  }
  // A layer's compute on every rank: one task, or with tensor parallelism `reductions` pieces each
  // followed by the all-reduce of the activations inside the tensor-parallel group. Returns the
  // first and the last compute task and the end of the layer (its last all-reduce) per rank.
  LayerTasks layer_compute(const std::string& name, const char* phase, bool forward, sim::Flops flops,
                           std::vector<std::vector<TaskId>> deps) {
    if (ep > 1) return expert_parallel_layer(name, phase, forward, flops, std::move(deps));
    const TimePs duration = forward ? k.layer_fwd : k.layer_bwd;
    const int reductions = forward ? tp_reductions_forward : tp_reductions_backward;
    LayerTasks t{std::vector<TaskId>(sims), std::vector<TaskId>(sims), std::vector<TaskId>(sims)};
    if (tp == 1) {
      for (int r = 0; r < sims; ++r) {
        t.first[r] = t.last_compute[r] = t.end[r] =
            compute(r, name, phase, duration, flops, "layer", std::move(deps[r]));
      }
      return t;
    }
    const TimePs piece{duration.ps / reductions};
    for (int part_index = 0; part_index < reductions; ++part_index) {
      for (int r = 0; r < sims; ++r) {
        t.last_compute[r] =
            compute(r, fmt::format(FMT_COMPILE("{}.{}"), name, part_index), phase, piece, flops * (1.0 / reductions),
                    "layer", part_index == 0 ? std::move(deps[r]) : std::vector<TaskId>{t.end[r]});
        if (part_index == 0) t.first[r] = t.last_compute[r];
      }
      t.end = comm.add(CollectiveKind::kAllReduce, fmt::format(FMT_COMPILE("tp.{}.{}"), name, part_index),
                       activation_elements, tp_plan, per_rank(t.last_compute));
    }
    return t;
  }

  // One micro-batch: forward, backward, and (when this micro-batch reduces) its gradient reduction.
  void micro_batch(std::int64_t mb) {
    const std::string mbs = fmt::format(FMT_COMPILE("mb{}"), mb);
    const bool last_mb = mb == train.grad_accum - 1;
    const bool reduces = stage >= 2 || last_mb;  // this micro-batch's gradients are reduced
    for (auto& it : items) it.ready_on_rank.clear();
    for (auto& tasks : backward_tasks) tasks.clear();
    reduce_host.clear();
    const std::pair<TaskId, TaskId> fwd = forward_pass(mbs);
    const TaskId b_first = backward_pass(mbs, reduces);
    out.spans.push_back({phase::kForward, fwd.first, fwd.second, false});
    out.spans.push_back({phase::kBackward, b_first, last_backward[0], false});
    if (grads.bf16_optimizer) accumulate_fp32_gradients(mbs);
    if (!reduces) return;
    reduce_micro_batch(mb, last_mb);
    if (!last_mb) {
      // DeepSpeed's end-of-backward epilogue flushes the last bucket and waits for the reduce
      // stream: the next micro-batch's forward starts after this one's gradients are reduced.
      for (int r = 0; r < sims; ++r) {
        prev[r] = g.add(fmt::format(FMT_COMPILE("r{}.{}.gradients_reduced"), r, mbs), phase::kCommunication,
                        BarrierTask{}, {prev[r], reduce_stream[r]});
      }
      out.spans.push_back({phase::kExposedCommunication, last_backward[0], prev[0], true});
    }
  }
  // BF16_Optimizer adds the micro-batch's bf16 gradients into its fp32 buffer once the backward is
  // done, on the compute stream (precision.hpp); its gradient all-reduce starts after that
  // (engine.py backward: the optimizer's backward, then allreduce_gradients).
  void accumulate_fp32_gradients(const std::string& mbs) {
    const TimePs duration = in.costs.memory_bound_time(Bytes{P * kBf16OptimizerAccumulationBytesPerParam});
    const TaskId backward_end = last_backward[0];
    for (int r = 0; r < sims; ++r) {
      last_backward[r] = prev[r] =
          compute(r, mbs + ".accumulate_fp32_gradients", phase::kOptimizer, duration, {}, "memory", {last_backward[r]});
    }
    out.spans.push_back({phase::kOptimizer, backward_end, last_backward[0], true});
  }
  // Forward of micro-batch `mbs` on every rank: embedding, layers, head. Returns rank 0's first and
  // last forward compute.
  std::pair<TaskId, TaskId> forward_pass(const std::string& mbs) {
    std::vector<TaskId> f_first(sims), f_last(sims);
    run_module(modules.front(), mbs + ".fwd", [&](int r, std::vector<TaskId> deps) {
      return f_first[r] =
                 compute(r, mbs + ".fwd.embedding", phase::kForward, k.embed_fwd, {}, "memory", std::move(deps));
    });
    for (std::int64_t l = 0; l < m.layers; ++l) {
      run_module_on_all(modules[static_cast<std::size_t>(l + 1)], mbs + ".fwd",
                        [&](std::vector<std::vector<TaskId>> deps) {
                          for (int r = 0; r < sims; ++r) {
                            deps[r].push_back(alloc(r, fmt::format(FMT_COMPILE("{}.alloc.act{}"), mbs, l),
                                                    phase::kForward, "activations", stored, {prev[r]}));
                          }
                          return layer_compute(fmt::format(FMT_COMPILE("{}.fwd.layer{}"), mbs, l), phase::kForward,
                                               true, (w.gemm + w.attention) * (1.0 / tp), std::move(deps))
                              .end;
                        });
    }
    run_module(modules.back(), mbs + ".fwd", [&](int r, std::vector<TaskId> deps) {
      deps.push_back(alloc(r, mbs + ".alloc.logits", phase::kForward, "activations", logits, {prev[r]}));
      deps.push_back(alloc(r, mbs + ".alloc.loss", phase::kForward, "activations", loss_workspace, {prev[r]}));
      f_last[r] = compute(r, mbs + ".fwd.head", phase::kForward, k.head_fwd, head_flops, "gemm", std::move(deps));
      return release(r, mbs + ".free.loss", phase::kForward, "activations", loss_workspace, {f_last[r]});
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
      deps.push_back(alloc(r, mbs + ".alloc.loss_grad", phase::kBackward, "activations", loss_workspace, {prev[r]}));
      b_first[r] =
          compute(r, mbs + ".bwd.head", phase::kBackward, k.head_bwd, head_flops * 2.0, "gemm", std::move(deps));
      release(r, mbs + ".free.loss_grad", phase::kBackward, "activations", loss_workspace, {b_first[r]});
      if (reduces) {
        items[item].ready_on_rank.push_back(b_first[r]);
        backward_tasks[r].push_back(b_first[r]);
      }
      return release(r, mbs + ".free.logits", phase::kBackward, "activations", logits, {b_first[r]});
    });
    if (reduces) launch_reduce_host(item, mbs);
    ++item;
    for (std::int64_t l = m.layers - 1; l >= 0; --l) {
      run_module_on_all(modules[static_cast<std::size_t>(l + 1)], mbs + ".bwd",
                        [&](std::vector<std::vector<TaskId>> deps) {
                          const LayerTasks b =
                              layer_compute(fmt::format(FMT_COMPILE("{}.bwd.layer{}"), mbs, l), phase::kBackward, false,
                                            ((w.gemm + w.attention) * 2.0 + recomputed) * (1.0 / tp), std::move(deps));
                          std::vector<TaskId> done(sims);
                          for (int r = 0; r < sims; ++r) {
                            // The layer's weight gradients exist after its last compute piece; a later kernel
                            // that must wait (the offload's blocking copy) holds back its first piece.
                            if (reduces) {
                              items[item].ready_on_rank.push_back(b.last_compute[r]);
                              backward_tasks[r].push_back(b.first[r]);
                            }
                            done[r] = release(r, fmt::format(FMT_COMPILE("{}.free.act{}"), mbs, l), phase::kBackward,
                                              "activations", stored, {b.end[r]});
                          }
                          return done;
                        });
      if (reduces) launch_reduce_host(item, mbs);
      ++item;
    }
    run_module(modules.front(), mbs + ".bwd", [&](int r, std::vector<TaskId> deps) {
      const TaskId b = compute(r, mbs + ".bwd.embedding", phase::kBackward, k.embed_bwd, {}, "memory", std::move(deps));
      if (reduces) {
        items[item].ready_on_rank.push_back(b);
        backward_tasks[r].push_back(b);
      }
      return last_backward[r] = b;
    });
    if (reduces) launch_reduce_host(item, mbs);
    return b_first[0];
  }

  // Stage 3 with host launch costs: once gradient item `item` closes a bucket, the rank's host
  // thread launches the bucket's per-tensor reduce-scatters (from the backward hooks, before the
  // next module's fetch: built here, in program order, so the host thread's work stays in order).
  void launch_reduce_host(std::size_t item, const std::string& mbs) {
    if (stage != 3 || !spec.zero3_host) return;
    const std::size_t b = reduce_host.size();  // the next bucket to close
    if (b >= buckets.size() || buckets[b].last_item != item) return;
    const TimePs launch{spec.zero3_host->reduce_scatter.at(part.shard_ranks).ps * buckets[b].tensors};
    std::vector<TaskId> host(sims);
    for (int r = 0; r < sims; ++r) {
      host[r] = host_work(r, fmt::format(FMT_COMPILE("{}.bucket{}.host.reduce_scatter"), mbs, b), launch,
                          {items[item].ready_on_rank[static_cast<std::size_t>(r)]});
    }
    reduce_host.push_back(std::move(host));
  }

  // Gradient reduction of one micro-batch's backward: buckets of consecutive gradient items until
  // a bucket holds at least reduce_bucket_elements, reduced one after another on the rank's reduce
  // stream. Stages 0-1 reduce only at the accumulation boundary (the last micro-batch); stages 2-3
  // reduce every micro-batch into the gradient partition.
  void reduce_micro_batch(std::int64_t mb, bool boundary) {
    for (std::size_t b = 0; b < buckets.size(); ++b) {
      const std::vector<TaskId>& ready_on_rank = items[buckets[b].last_item].ready_on_rank;
      std::vector<std::vector<TaskId>> deps(sims);
      for (int r = 0; r < sims; ++r) {
        // BF16_Optimizer reduces after its accumulation, whatever overlap_comm says.
        deps[r] = {spec.overlap_comm && !grads.bf16_optimizer ? ready_on_rank[r] : last_backward[r]};
        if (!reduce_stream.empty()) deps[r].push_back(reduce_stream[r]);
      }
      const std::string bucket = fmt::format(FMT_COMPILE("mb{}.bucket{}"), mb, b);
      if (b < reduce_host.size()) {
        // The bucket's launches (launch_reduce_host): the reduction waits for them, and so does the
        // next backward kernel, which the same host thread launches after them.
        for (int r = 0; r < sims; ++r) {
          deps[r].push_back(reduce_host[b][r]);
          const std::size_t next = buckets[b].last_item + 1;
          if (spec.overlap_comm && next < backward_tasks[r].size()) {
            g.add_dependency(backward_tasks[r][next], reduce_host[b][r]);
          }
        }
      }
      if (buckets[b].expert_elements > 0) {
        // Expert parallelism: the bucket's expert gradients over the experts' data-parallel group,
        // then the rest over all ranks.
        deps = per_rank(comm.add(reduction, bucket + ".experts", grads.reduced_elements(buckets[b].expert_elements),
                                 expert_plan, deps));
      }
      if (stage < 3) {
        reduce_stream = comm.add(reduction, bucket, grads.reduced_elements(buckets[b].elements), replica_plan, deps);
      } else {
        // A quantized reduction (qgZ) sends its own format whatever the gradients' dtype.
        const std::int64_t elements = part.gradient_reduce.quantization.quantized()
                                          ? buckets[b].elements
                                          : grads.reduced_elements(buckets[b].elements);
        reduce_stream = comm.add(reduction, bucket, elements, part.gradient_reduce, deps);
        if (boundary && shard < replicas) {
          // The shard groups are replicas: all-reduce the reduced partition across them (MiCS).
          reduce_stream = comm.add(CollectiveKind::kAllReduce, bucket + ".replicas",
                                   grads.reduced_elements(partition(buckets[b].elements)), part.replica_reduce,
                                   per_rank(reduce_stream));
        }
      }
      if (!offload) continue;
      offload_bucket(mb, boundary, bucket, buckets[b].elements, buckets[b].last_item);
    }
  }
  // Offload of one reduced bucket of `elements` (its last gradient item `last_item`) to the host.
  void offload_bucket(std::int64_t mb, bool boundary, const std::string& bucket, std::int64_t elements,
                      std::size_t last_item) {
    // The reduced partition goes to the host (deepspeed-offload.md section 2). First micro-step:
    // a non-blocking D2H into the bf16 host buffer and its H2D "ping-pong" back. Later
    // micro-steps: the host buffer comes back to the GPU (H2D), the new partition is added, and
    // the sum goes back (D2H). At the boundary, 0.13 copies it once more with a blocking D2H and
    // up-casts it on the CPU (the autograd thread waits: the next backward kernel cannot start);
    // 0.16.3+ up-casts on the GPU and copies the fp32 result asynchronously.
    const std::int64_t e =
        static_cast<std::int64_t>(std::llround(cpu_fraction * static_cast<double>(partition(elements))));
    if (e == 0) return;
    if (stage == 2) {
      // ZeRO-2 offload (stage_1_and_2.py, deepspeed-offload.md section 2): on the compute stream,
      // up-cast the reduced partition on the GPU and copy it to the host fp32 gradient (4 B per
      // element, non-blocking). From the second micro-step on, the host gradient accumulates
      // through the GPU: H2D of the host fp32 gradient, add, D2H back.
      for (int r = 0; r < sims; ++r) {
        const std::string name = bucket + ".offload";
        std::vector<TaskId> after{reduce_stream[r]};
        if (mb > 0) {
          after = {
              copy(r, name + ".h2d_accumulate", phase::kBackward, false, Bytes{e * kFp32Bytes}, after, off.pin_memory)};
        }
        const TaskId cast =
            compute(r, name + ".gpu_upcast", phase::kBackward,
                    in.costs.memory_bound_time(Bytes{e * (kBf16Bytes + 2 * kFp32Bytes)}), {}, "memory", after);
        reduce_stream[r] =
            copy(r, name + ".d2h_fp32", phase::kBackward, true, Bytes{e * kFp32Bytes}, {cast}, off.pin_memory);
        const std::size_t next = last_item + 1;
        if (spec.overlap_comm && next < backward_tasks[r].size()) g.add_dependency(backward_tasks[r][next], cast);
      }
      return;
    }
    for (int r = 0; r < sims; ++r) {
      const std::string name = bucket + ".offload";
      TaskId last;
      if (mb == 0) {
        const TaskId d2h =
            copy(r, name + ".d2h", phase::kBackward, true, Bytes{e * kBf16Bytes}, {reduce_stream[r]}, off.pin_memory);
        last = copy(r, name + ".h2d", phase::kBackward, false, Bytes{e * kBf16Bytes}, {d2h}, off.pin_memory);
      } else {
        const TaskId h2d = copy(r, name + ".h2d_accumulate", phase::kBackward, false, Bytes{e * kBf16Bytes},
                                {reduce_stream[r]}, off.pin_memory);
        last = copy(r, name + ".d2h_accumulate", phase::kBackward, true, Bytes{e * kBf16Bytes}, {h2d}, off.pin_memory);
      }
      reduce_stream[r] = last;
      if (!boundary) continue;
      TaskId blocking;
      if (off.runtime == Runtime::kDeepSpeed013) {
        // `fp32_grad_tensor.copy_(grad_buffer)` changes dtype across devices: PyTorch copies into a
        // fresh pageable bf16 temporary and up-casts on the CPU, so this copy is pageable whatever
        // pin_memory says (deepspeed-offload.md section 2, step d).
        const TaskId d2h_blocking =
            copy(r, name + ".d2h_blocking", phase::kBackward, true, Bytes{e * kBf16Bytes}, {last}, /*pinned=*/false);
        blocking = host_traffic(r, name + ".cpu_upcast", phase::kBackward, Bytes{e * (kBf16Bytes + kFp32Bytes)},
                                cpu_upcast_bound, {d2h_blocking});
        reduce_stream[r] = blocking;
      } else {
        blocking = compute(r, name + ".gpu_upcast", phase::kBackward,
                           in.costs.memory_bound_time(Bytes{e * (kBf16Bytes + kFp32Bytes)}), {}, "memory", {last});
        reduce_stream[r] =
            copy(r, name + ".d2h_fp32", phase::kBackward, true, Bytes{e * kFp32Bytes}, {blocking}, off.pin_memory);
      }
      // The next backward kernel waits for the blocking step; without overlap_comm the buckets
      // are reduced after the whole backward, so no backward kernel comes after them.
      const std::size_t next = last_item + 1;
      if (spec.overlap_comm && next < backward_tasks[r].size()) g.add_dependency(backward_tasks[r][next], blocking);
      if (off.nvme) {
        // ZeRO-Infinity: the fp32 gradient goes on to the NVMe (AsyncTensorSwapper).
        gradient_swaps[r].push_back(
            swap(r, name + ".swap_out_gradient", true, Bytes{e * kFp32Bytes}, {reduce_stream[r]}));
      }
    }
  }

  // The optimizer step on every rank, once its gradients are reduced; returns each rank's last task.
  std::vector<TaskId> optimizer_step() {
    std::vector<TaskId> adam(sims);
    for (int r = 0; r < sims; ++r) {
      std::vector<TaskId> deps{last_backward[r], reduce_stream[r]};
      const TaskId ready = g.add(fmt::format(FMT_COMPILE("r{}.gradients_synchronized"), r), phase::kCommunication,
                                 BarrierTask{}, std::move(deps));
      TaskId first_step;
      if (grads.bf16_optimizer) {
        // BF16_Optimizer's step: the gradient norm over its fp32 buffer, Adam without a cast, the
        // zeroing of the buffer (precision.hpp), as two tasks.
        first_step =
            compute(r, "bf16_optimizer.gradient_passes", phase::kOptimizer,
                    in.costs.memory_bound_time(Bytes{P * kBf16OptimizerStepPassBytesPerParam}), {}, "memory", {ready});
        const Bytes adam_bytes{updated_on_rank * kBf16OptimizerAdamTrafficBytesPerParam};
        adam[r] = g.add(fmt::format(FMT_COMPILE("r{}.adam"), r), phase::kOptimizer,
                        ComputeTask{rank_info[r].unit, in.costs.memory_bound_time(adam_bytes), {}, adam_bytes, "adam"},
                        {first_step});
      } else if (!offload) {
        first_step = adam[r] = g.add(
            fmt::format(FMT_COMPILE("r{}.adam"), r), phase::kOptimizer,
            ComputeTask{rank_info[r].unit, k.adam, {}, Bytes{updated_on_rank * kAdamTrafficBytesPerParam}, "adam"},
            {ready});
      } else {
        adam[r] = offloaded_step(r, ready, first_step);
      }
      if (r == 0) {
        out.spans.push_back({phase::kExposedCommunication, last_backward[0], ready, true});
        out.spans.push_back({phase::kOptimizer, first_step, adam[0], false});
      }
    }
    return adam;
  }
  // Adam with optimizer offload on rank r from `ready`: returns its last task and sets `first_step`.
  TaskId offloaded_step(int r, TaskId ready, TaskId& first_step) {
    // DeepSpeed 0.13 and later, stage 3: subgroups strictly one after another. A host subgroup
    // runs CPU Adam, then the blocking copy-back: down-cast on the CPU and H2D of the bf16
    // parameters. A GPU subgroup runs Adam on the GPU. No overlap between subgroups.
    TaskId last = ready;
    // The copy-back `bf16_partition.copy_(fp32_partition)` changes dtype across devices: PyTorch
    // down-casts into a fresh pageable temporary on the CPU and copies that, so the H2D is pageable
    // whatever pin_memory says (stage 3, and stage 2 before 0.14.1). ZeRO-2 from 0.14.1 (PR #5301)
    // copies from the pinned fp32 partition.
    const bool copy_back_pinned = stage == 2 && off.runtime != Runtime::kDeepSpeed013 && off.pin_memory;
    // ZeRO-Infinity: each subgroup's fp32 p, m, v and gradient are read from the NVMe before CPU
    // Adam (the next one prefetched with pipeline_read) and p, m, v written back after it (the
    // next subgroup waits for the write unless pipeline_write).
    std::vector<TaskId> nvme_writes;
    std::optional<TaskId> prefetched;
    if (off.nvme) {
      std::vector<TaskId> swapped{ready};
      swapped.insert(swapped.end(), gradient_swaps[r].begin(), gradient_swaps[r].end());
      last = g.add(fmt::format(FMT_COMPILE("{}.gradients_on_nvme"), rank_info[r].prefix), phase::kOptimizer,
                   BarrierTask{}, swapped);
      if (r == 0) out.spans.push_back({phase::kNvmeGradientFlush, ready, last, true});
    }
    for (std::size_t j = 0; j < subgroups.size(); ++j) {
      const std::int64_t n = subgroups[j];
      const std::string name = fmt::format(FMT_COMPILE("subgroup{}"), j);
      if (j < cpu_subgroups) {
        std::vector<TaskId> adam_deps{last};
        if (off.nvme) {
          const Bytes in_bytes{n * (kOptimizerStateBytesPerParam + kFp32Bytes)};
          const TaskId read = prefetched ? *prefetched : swap(r, name + ".swap_in", false, in_bytes, {last});
          adam_deps.push_back(read);
          prefetched.reset();
          if (off.pipeline_read && j + 1 < cpu_subgroups) {
            const Bytes next_bytes{subgroups[j + 1] * (kOptimizerStateBytesPerParam + kFp32Bytes)};
            prefetched = swap(r, fmt::format(FMT_COMPILE("subgroup{}.swap_in"), j + 1), false, next_bytes, {read});
          }
        }
        const TaskId step = host_traffic(r, name + ".cpu_adam", phase::kOptimizer,
                                         Bytes{n * kHostAdamTrafficBytesPerParam}, cpu_adam_bound, adam_deps);
        const TaskId down = host_traffic(r, name + ".cpu_downcast", phase::kOptimizer,
                                         Bytes{n * (kFp32Bytes + kBf16Bytes)}, cpu_downcast_bound, {step});
        std::vector<TaskId> copy_deps{down};
        if (off.nvme) {
          nvme_writes.push_back(swap(r, name + ".swap_out", true, Bytes{n * kOptimizerStateBytesPerParam}, {step}));
          if (!off.pipeline_write) copy_deps.push_back(nvme_writes.back());
        }
        // With parameter offload the down-cast writes the host partition: nothing goes back.
        last = spec.offload_param ? g.add(fmt::format(FMT_COMPILE("{}.{}.params_on_host"), rank_info[r].prefix, name),
                                          phase::kOptimizer, BarrierTask{}, copy_deps)
                                  : copy(r, name + ".h2d_params", phase::kOptimizer, false, Bytes{n * kBf16Bytes},
                                         copy_deps, copy_back_pinned);
        if (j == 0) first_step = step;
      } else {
        last = compute(r, name + ".gpu_adam", phase::kOptimizer,
                       in.costs.memory_bound_time(Bytes{n * kAdamTrafficBytesPerParam}), {}, "adam", {last});
        if (j == 0) first_step = last;
      }
    }
    if (!nvme_writes.empty()) {
      nvme_writes.push_back(last);
      last = g.add(fmt::format(FMT_COMPILE("{}.states_on_nvme"), rank_info[r].prefix), phase::kOptimizer, BarrierTask{},
                   nvme_writes);
    }
    return last;
  }

  // Stages 1-2 and BF16_Optimizer: the all-gather of the updated parameters after `adam`; returns
  // each rank's end.
  std::vector<TaskId> parameter_allgather(std::vector<TaskId> adam) {
    std::vector<TaskId> end = adam;
    if ((grads.optimizer_stage == 1 || stage == 2) && replicas > 1) {
      // Every rank updated its partition: all-gather the new bf16 parameters.
      const std::int64_t experts_on_rank = experts_per_layer_on_rank * m.layers;
      if (experts_on_rank > 0) {
        adam = comm.add(CollectiveKind::kAllGather, "updated_parameters.experts", experts_on_rank, expert_plan,
                        per_rank(adam));
      }
      end =
          comm.add(CollectiveKind::kAllGather, "updated_parameters", P - experts_on_rank, replica_plan, per_rank(adam));
      out.spans.push_back({phase::kParameterAllgather, adam[0], end[0], true});
    }
    return end;
  }

  // The iteration's figures and approximations.
  void finish() {
    const double sequences = static_cast<double>(train.micro_batch * train.grad_accum);
    out.tokens_per_iteration = sequences * static_cast<double>(m.seq) * replicas;
    // Model states on one GPU: parameters, gradients, optimizer states (the setup allocations) and
    // the hpZ secondary partition.
    out.model_states_per_device = Bytes{states().gpu_model_states()};
    out.model_flops_per_device = model_flops_per_sequence(m) * (sequences / tp);
    out.hardware_flops_per_device = hardware_flops_per_sequence(m, train.recompute) * (sequences / tp);
    const auto cost_notes = in.costs.approximations();
    out.approximations.insert(out.approximations.begin(), cost_notes.begin(), cost_notes.end());
    out.approximations.push_back(non_gemm_kernels_approximation(train));
    if (grads.bf16_optimizer) out.approximations.push_back(bf16_optimizer_approximation());
    out.approximations.push_back(
        "collectives: bidirectional rings (all-to-all for qgZ) over each stage of the plan, in rank order; reduction "
        "arithmetic not modelled");
    if (stage == 3 && spec.zero3_fetch == DataParallelSpec::Fetch::kPrefetch)
      out.approximations.push_back("ZeRO-3 prefetch: one module ahead, at most two modules gathered");
    if (stage == 3 && spec.zero3_fetch == DataParallelSpec::Fetch::kBlocking) {
      out.approximations.push_back(
          "ZeRO-3 blocking fetch (DeepSpeed of 2021): every gather waits for the previous module and the module for "
          "it, no overlap");
    }
    if (stage == 3 && spec.zero3_host) {
      const auto& h = *spec.zero3_host;
      const auto group = static_cast<std::int64_t>(part.shard_ranks);
      out.approximations.push_back(fmt::format(
          "ZeRO-3 host launch costs ({}): {} + {} per rank per parameter all-gather, {} + {} per rank per gradient "
          "tensor reduce-scatter ({} and {} at {} ranks), serial on the rank's host thread; the reduce-scatters of a "
          "bucket hold back the next backward kernel",
          h.name, sim::format_time(h.all_gather.fixed), sim::format_time(h.all_gather.per_rank),
          sim::format_time(h.reduce_scatter.fixed), sim::format_time(h.reduce_scatter.per_rank),
          sim::format_time(h.all_gather.at(group)), sim::format_time(h.reduce_scatter.at(group)), group));
    } else if (stage == 3) {
      out.approximations.push_back(
          "ZeRO-3: no host cost per collective launch (strategy.zero3_host): the framework's hooks and launches are "
          "assumed to keep ahead of the GPU");
    }
    if (m.moe()) {
      out.approximations.push_back(
          ep > 1
              ? fmt::format("expert parallelism over {} consecutive ranks: each routed token goes to its expert's rank "
                            "and back by all-to-all (even routing: (ep - 1) / ep of the tokens leave each rank), "
                            "on the critical path of its layer",
                            ep)
              : "no expert parallelism: every rank runs every expert (set strategy.ep to spread them)");
    }
  }
};

}  // namespace

BuiltIteration build_data_parallel(const IterationInputs& in, const DataParallelSpec& spec) {
  return DataParallelBuilder(in, spec).build();
}

}  // namespace offsim::models
