// Data parallelism, ZeRO stage 0 (replicated parameters, gradients and optimizer states).
//
// Per rank, one iteration is:
//   allocate states -> for each micro-batch: forward (embedding, layers, head)
//   -> backward (head, layers in reverse, embedding) -> gradient all-reduce in buckets
//   -> Adam on all parameters -> iteration barrier.
// Gradient buckets fill in backward order; on the last micro-batch each full bucket is
// all-reduced as soon as its last gradient exists (overlap_comm) or after backward ends.
// Buckets are reduced one after another (one communication stream), as in DeepSpeed.
//
// The all-reduce is a bidirectional ring in rank order: the bucket is split in two halves, one
// travelling the ring forward and one backward (using both directions of every full-duplex
// link), each as reduce-scatter then all-gather, (g-1) steps each, chunks of S/(2g). A step's
// flow leaves rank i after rank i's previous step and after the chunk it forwards has arrived.
// Each step waits the measured per-step latency, and each flow is capped at half the measured bus
// bandwidth (the two directions together carry the bus bandwidth), so an uncontended ring
// reproduces the measured t = (g-1) x step_latency + (g-1)/g x S / bus_bandwidth; the links
// lower the rate further where they are slower or shared.
// Reduction arithmetic is not modelled (it is a small memory-bound add per chunk).
#include <fmt/format.h>
#include <optional>
#include <stdexcept>

#include "models/strategies/strategy.hpp"

namespace offsim::models {

namespace {

using sim::AllocTask;
using sim::BarrierTask;
using sim::Bytes;
using sim::ComputeTask;
using sim::TaskId;
using sim::TimePs;
using sim::TransferTask;

// Bytes per element of each state under bf16 mixed precision with Adam.
constexpr std::int64_t kBf16Bytes = 2;
constexpr std::int64_t kFp32Bytes = 4;
// fp32 master weights, Adam momentum and variance.
constexpr std::int64_t kOptimizerStateBytesPerParam = 3 * kFp32Bytes;
// Adam's HBM traffic per parameter: read fp32 p, m, v and the bf16 gradient (14 B), write fp32
// p, m, v and the bf16 working copy of p (14 B).
constexpr std::int64_t kAdamTrafficBytesPerParam = 3 * kFp32Bytes + kBf16Bytes + 3 * kFp32Bytes + kBf16Bytes;
// Logits kept for the loss's backward: bf16 logits and their fp32 softmax.
constexpr std::int64_t kLogitBytesPerElement = kBf16Bytes + kFp32Bytes;

struct KernelTimes {
  TimePs embed_fwd, embed_bwd, layer_fwd, layer_bwd, head_fwd, head_bwd, adam;
};

KernelTimes kernel_times(const IterationInputs& in, std::int64_t params_on_rank) {
  const auto& m = in.model;
  const auto& t = in.training;
  const auto& c = in.costs;
  const LayerWork w = layer_forward(m, t.micro_batch, t.flash_attention);
  const std::int64_t tokens = t.micro_batch * m.seq;
  // GEMMs by shape (one tensor-parallel rank: tp = 1 here). Backward runs two GEMMs of each
  // forward shape (input and weight gradients), costed as twice the forward shape's time.
  TimePs gemms{0};
  TimePs attention_core{0};
  for (const auto& g : layer_gemms(m, t.micro_batch, 1)) {
    const TimePs d = c.gemm_time(g, g.attention_core && t.flash_attention);
    gemms += d;
    if (g.attention_core) attention_core += d;
  }
  // Non-GEMM kernels (norms, softmax, activation functions, residual adds, dropout) are charged
  // as HBM traffic of twice the bytes the layer stashes: each stashed tensor is written once and
  // read once. A coarse stand-in until kernel tables cover them.
  const Bytes elementwise = w.activations * 2;
  const TimePs layer_fwd = gemms + c.memory_bound_time(elementwise);
  TimePs recompute{0};
  if (t.recompute == Recompute::kFull) recompute = layer_fwd;
  if (t.recompute == Recompute::kSelective) recompute = attention_core;
  KernelTimes k;
  k.layer_fwd = layer_fwd;
  k.layer_bwd = recompute + gemms + gemms + c.memory_bound_time(elementwise * 2);
  const GemmShape head = head_gemm(m, t.micro_batch, 1);
  const Bytes logits{tokens * m.vocab * kLogitBytesPerElement};
  k.head_fwd = c.gemm_time(head) + c.memory_bound_time(logits);
  k.head_bwd = c.gemm_time(head) + c.gemm_time(head) + c.memory_bound_time(logits);
  k.embed_fwd = c.memory_bound_time(Bytes{tokens * m.hidden * kBf16Bytes});
  k.embed_bwd = c.memory_bound_time(Bytes{tokens * m.hidden * kBf16Bytes * 2});
  k.adam = c.memory_bound_time(Bytes{params_on_rank * kAdamTrafficBytesPerParam});
  return k;
}

// A gradient bucket: the rank-0-relative index of the task after which it is complete on each
// rank, and its size.
struct GradientItem {
  std::int64_t elements;
  std::vector<TaskId> ready_on_rank;
};

}  // namespace

BuiltIteration build_data_parallel(const IterationInputs& in, const DataParallelSpec& spec) {
  BuiltIteration out;
  out.machine = make_machine_resources(in.topology);
  auto& g = out.graph;
  const auto& m = in.model;
  const auto& train = in.training;
  const int ranks = static_cast<int>(spec.devices.size());
  if (ranks < 1) throw std::invalid_argument("data_parallel needs at least one device");
  if (spec.zero_stage != 0) throw std::invalid_argument("data_parallel: only ZeRO stage 0 is implemented");
  for (const auto& name : spec.devices) {
    const auto d = in.topology.find_device(name);
    if (!d || in.topology.device(*d).kind != topo::DeviceKind::kGpu) {
      throw std::invalid_argument(fmt::format("data_parallel: '{}' is not a GPU of the machine", name));
    }
    out.devices.push_back(*d);
  }

  const ParameterCounts params = count_parameters(m);
  const std::int64_t P = params.total;
  const KernelTimes k = kernel_times(in, P);
  const Bytes stored = stored_activation_bytes(m, train.micro_batch, train.recompute, train.flash_attention);
  const Bytes logits{train.micro_batch * m.seq * m.vocab * kLogitBytesPerElement};

  // Gradient items in the order backward produces them.
  std::vector<GradientItem> items;
  items.push_back({params.output_head + params.final_norm, {}});
  for (std::int64_t l = m.layers - 1; l >= 0; --l) items.push_back({params.per_layer, {}});
  items.push_back({params.embedding + params.position, {}});

  std::vector<TaskId> last_backward(ranks);
  std::vector<std::uint32_t> unit(ranks);
  for (int r = 0; r < ranks; ++r) {
    const std::size_t dev = out.devices[r];
    unit[r] = *out.machine.unit_of_device[dev];
    const std::uint32_t pool = *out.machine.pool_of_device[dev];
    const std::string rank = fmt::format("r{}", r);
    const auto compute = [&](std::string name, std::string phase, TimePs duration, sim::Flops flops, std::string kernel,
                             std::vector<TaskId> deps) {
      return g.add(fmt::format("{}.{}", rank, name), std::move(phase),
                   ComputeTask{unit[r], duration, flops, Bytes{0}, std::move(kernel)}, std::move(deps));
    };
    const auto alloc = [&](std::string name, std::string phase, std::string tenant, Bytes bytes,
                           std::vector<TaskId> deps) {
      return g.add(fmt::format("{}.{}", rank, name), std::move(phase), AllocTask{pool, std::move(tenant), bytes},
                   std::move(deps));
    };
    const auto release = [&](std::string name, std::string phase, std::string tenant, Bytes bytes,
                             std::vector<TaskId> deps) {
      return g.add(fmt::format("{}.{}", rank, name), std::move(phase), sim::FreeTask{pool, std::move(tenant), bytes},
                   std::move(deps));
    };

    const TaskId a0 = alloc("alloc.parameters", "setup", "parameters (bf16)", Bytes{P * kBf16Bytes}, {});
    const TaskId a1 = alloc("alloc.gradients", "setup", "gradients (bf16)", Bytes{P * kBf16Bytes}, {a0});
    TaskId prev = alloc("alloc.optimizer", "setup", "optimizer states (fp32 master, m, v)",
                        Bytes{P * kOptimizerStateBytesPerParam}, {a1});

    const LayerWork w = layer_forward(m, train.micro_batch, train.flash_attention);
    sim::Flops recomputed{};
    if (train.recompute == Recompute::kFull) recomputed = w.gemm + w.attention;
    if (train.recompute == Recompute::kSelective) recomputed = w.attention;
    for (std::int64_t mb = 0; mb < train.grad_accum; ++mb) {
      const std::string mbs = fmt::format("mb{}", mb);
      const TaskId f_first = compute(mbs + ".fwd.embedding", "forward", k.embed_fwd, {}, "memory", {prev});
      prev = f_first;
      std::vector<TaskId> act_alloc(m.layers);
      for (std::int64_t l = 0; l < m.layers; ++l) {
        const TaskId a = alloc(fmt::format("{}.alloc.act{}", mbs, l), "forward", "activations", stored, {prev});
        prev =
            compute(fmt::format("{}.fwd.layer{}", mbs, l), "forward", k.layer_fwd, w.gemm + w.attention, "layer", {a});
      }
      const TaskId la = alloc(mbs + ".alloc.logits", "forward", "activations", logits, {prev});
      const TaskId f_last =
          compute(mbs + ".fwd.head", "forward", k.head_fwd, head_forward_flops(m, train.micro_batch), "gemm", {la});
      const bool last_mb = mb == train.grad_accum - 1;
      std::size_t item = 0;
      const TaskId b_first = compute(mbs + ".bwd.head", "backward", k.head_bwd,
                                     head_forward_flops(m, train.micro_batch) * 2.0, "gemm", {f_last});
      prev = release(mbs + ".free.logits", "backward", "activations", logits, {b_first});
      if (last_mb) items[item++].ready_on_rank.push_back(b_first);
      for (std::int64_t l = m.layers - 1; l >= 0; --l) {
        const TaskId b = compute(fmt::format("{}.bwd.layer{}", mbs, l), "backward", k.layer_bwd,
                                 (w.gemm + w.attention) * 2.0 + recomputed, "layer", {prev});
        prev = release(fmt::format("{}.free.act{}", mbs, l), "backward", "activations", stored, {b});
        if (last_mb) items[item++].ready_on_rank.push_back(b);
      }
      const TaskId b_last = compute(mbs + ".bwd.embedding", "backward", k.embed_bwd, {}, "memory", {prev});
      if (last_mb) items[item++].ready_on_rank.push_back(b_last);
      prev = b_last;
      if (r == 0) {
        out.spans.push_back({"forward", f_first, f_last, false});
        out.spans.push_back({"backward", b_first, b_last, false});
      }
    }
    last_backward[r] = prev;
  }

  // Buckets: consecutive gradient items until the bucket holds at least reduce_bucket_elements.
  struct Bucket {
    std::int64_t elements = 0;
    std::vector<TaskId> ready_on_rank;
  };
  std::vector<Bucket> buckets;
  Bucket open;
  for (const auto& it : items) {
    open.elements += it.elements;
    open.ready_on_rank = it.ready_on_rank;
    if (open.elements >= spec.reduce_bucket_elements) {
      buckets.push_back(open);
      open = Bucket{};
    }
  }
  if (open.elements > 0) buckets.push_back(open);

  // Ring all-reduce of each bucket; synced[r] is the barrier after which rank r holds the
  // previous bucket's result (buckets share one communication stream per rank).
  std::vector<std::optional<TaskId>> synced(ranks);
  if (ranks > 1) {
    std::string note;
    const CollectiveFit& reduce_scatter = in.collectives.collective("reduce_scatter", ranks, &note);
    if (!note.empty()) out.approximations.push_back(note);
    note.clear();
    const CollectiveFit& all_gather = in.collectives.collective("all_gather", ranks, &note);
    if (!note.empty()) out.approximations.push_back(note);
    std::vector<std::vector<sim::ConstraintId>> route_fwd(ranks), route_rev(ranks);
    for (int r = 0; r < ranks; ++r) {
      const std::size_t next = out.devices[(r + 1) % ranks];
      const std::size_t prev_dev = out.devices[(r + ranks - 1) % ranks];
      route_fwd[r] = out.machine.transfer_route(in.topology, out.devices[r], next);
      route_rev[r] = out.machine.transfer_route(in.topology, out.devices[r], prev_dev);
    }
    for (std::size_t b = 0; b < buckets.size(); ++b) {
      const Bytes bucket_bytes{buckets[b].elements * kBf16Bytes};
      // Each direction carries half the bucket in `ranks` chunks.
      const Bytes chunk{(bucket_bytes.count + 2 * ranks - 1) / (2 * ranks)};
      // sends[dir][r] of the previous step
      std::vector<std::vector<TaskId>> previous(2, std::vector<TaskId>(ranks));
      bool first_step = true;
      for (int phase = 0; phase < 2; ++phase) {
        const CollectiveFit& costs = phase == 0 ? reduce_scatter : all_gather;
        const char* phase_name = phase == 0 ? "rs" : "ag";
        for (int step = 0; step < ranks - 1; ++step) {
          std::vector<std::vector<TaskId>> current(2, std::vector<TaskId>(ranks));
          for (int dir = 0; dir < 2; ++dir) {
            for (int r = 0; r < ranks; ++r) {
              const int from = dir == 0 ? (r + ranks - 1) % ranks : (r + 1) % ranks;  // who sends to r
              std::vector<TaskId> deps;
              if (first_step) {
                deps.push_back(spec.overlap_comm ? buckets[b].ready_on_rank[r] : last_backward[r]);
                if (synced[r]) deps.push_back(*synced[r]);
              } else {
                deps = {previous[dir][r], previous[dir][from]};
              }
              const auto& route = dir == 0 ? route_fwd[r] : route_rev[r];
              current[dir][r] = g.add(
                  fmt::format("bucket{}.{}{}.{}.r{}", b, phase_name, step, dir == 0 ? "cw" : "ccw", r), "communication",
                  TransferTask{route, chunk, costs.step_latency, costs.bus_bandwidth * 0.5}, std::move(deps));
            }
          }
          previous = std::move(current);
          first_step = false;
        }
      }
      for (int r = 0; r < ranks; ++r) {
        const int cw_from = (r + ranks - 1) % ranks;
        const int ccw_from = (r + 1) % ranks;
        synced[r] = g.add(fmt::format("bucket{}.done.r{}", b, r), "communication", BarrierTask{},
                          {previous[0][r], previous[0][cw_from], previous[1][r], previous[1][ccw_from]});
      }
    }
  }

  std::vector<TaskId> optimizer_done;
  for (int r = 0; r < ranks; ++r) {
    std::vector<TaskId> deps{last_backward[r]};
    if (synced[r]) deps.push_back(*synced[r]);
    const TaskId ready =
        g.add(fmt::format("r{}.gradients_synchronized", r), "communication", BarrierTask{}, std::move(deps));
    const TaskId adam = g.add(fmt::format("r{}.adam", r), "optimizer",
                              ComputeTask{unit[r], k.adam, {}, Bytes{P * kAdamTrafficBytesPerParam}, "adam"}, {ready});
    optimizer_done.push_back(adam);
    if (r == 0) {
      out.spans.push_back({"exposed_communication", last_backward[0], ready, true});
      out.spans.push_back({"optimizer", adam, adam, false});
    }
  }
  (void)g.add("iteration.end", "end", BarrierTask{}, optimizer_done);

  const double sequences = static_cast<double>(train.micro_batch * train.grad_accum);
  out.model_flops_per_device = model_flops_per_sequence(m) * sequences;
  out.hardware_flops_per_device = hardware_flops_per_sequence(m, train.recompute) * sequences;
  const auto cost_notes = in.costs.approximations();
  out.approximations.insert(out.approximations.begin(), cost_notes.begin(), cost_notes.end());
  out.approximations.push_back("non-GEMM layer kernels are charged as HBM traffic of twice the stashed activations");
  out.approximations.push_back(
      "gradient all-reduce: bidirectional ring in rank order; reduction arithmetic not modelled");
  return out;
}

}  // namespace offsim::models
