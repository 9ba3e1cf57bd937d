#include "models/collectives/communicator.hpp"
#include "models/transformer/phases.hpp"

#include <fmt/compile.h>
#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <limits>
#include <optional>
#include <stdexcept>

namespace offsim::models {

using sim::BarrierTask;
using sim::Bytes;
using sim::TaskId;
using sim::TimePs;
using sim::TransferTask;

namespace {

std::int64_t ceil_div(std::int64_t a, std::int64_t b) {
  return (a + b - 1) / b;
}

}  // namespace

TaskId Communicator::quantization_buffer(const std::string& name, int s, Bytes bytes, bool release,
                                         std::span<const TaskId> deps) {
  const auto pool = machine_.pool_of_device[layout_.devices[layout_.simulated[s]]];
  if (!active(s) || !pool) return pass_through(name, s, deps);
  constexpr const char* kTenant = "quantized collective buffers";
  const std::string_view full = rank_task_name(name, "", s);
  if (release) return graph_.add(full, phase::kCommunication, sim::FreeTask{*pool, kTenant, bytes}, deps);
  return graph_.add(full, phase::kCommunication, sim::AllocTask{*pool, kTenant, bytes}, deps);
}

TaskId Communicator::pass_through(const std::string& name, int s, std::span<const TaskId> deps) {
  return graph_.add(rank_task_name(name, ".skip", s), phase::kCommunication, BarrierTask{}, deps);
}

std::string_view Communicator::rank_task_name(const std::string& name, std::string_view part, int s) {
  name_buffer_.clear();
  if (!graph_.keeps_names()) return name_buffer_;  // a graph without names (sim::ScopedUnnamedTasks)
  fmt::format_to(std::back_inserter(name_buffer_), FMT_COMPILE("{}{}.r{}"), name, part, layout_.simulated[s]);
  return name_buffer_;
}

std::vector<int> Communicator::channel_order(const std::vector<int>& members, int channel, int channels) const {
  if (channel == 0) return members;
  // Blocks of consecutive members on one node, each rotated by channel x size / channels.
  std::vector<int> order;
  std::size_t begin = 0;
  while (begin < members.size()) {
    const int node = topology_.device(layout_.devices[members[begin]]).node;
    std::size_t end = begin;
    while (end < members.size() && topology_.device(layout_.devices[members[end]]).node == node) ++end;
    const std::size_t size = end - begin;
    const std::size_t shift = static_cast<std::size_t>(channel) * size / static_cast<std::size_t>(channels) % size;
    for (std::size_t i = 0; i < size; ++i) order.push_back(members[begin + (i + shift) % size]);
    begin = end;
  }
  return order;
}

std::vector<int> Communicator::class_of(int s) const {
  std::vector<int> members(static_cast<std::size_t>(layout_.class_size));
  for (int k = 0; k < layout_.class_size; ++k) members[k] = layout_.simulated[s] + k;
  return members;
}

void Communicator::require_single_rank_classes(const std::string& name) const {
  if (layout_.class_size > 1) {
    throw std::logic_error(fmt::format("{}: rank classes of {} need analytic collectives (flows are stepped per rank)",
                                       name, layout_.class_size));
  }
}

std::int64_t Quantization::wire_bytes(std::int64_t elements) const {
  if (!quantized()) return elements * 2;
  const std::int64_t payload = ceil_div(elements * bits, 8);
  return payload + (group_elements > 0 ? ceil_div(elements, group_elements) * scale_bytes : 0);
}

CollectivePlan Communicator::flat(int ranks) {
  return CollectivePlan{{Band{"flat", 1, ranks}}, {}, {}};
}

Communicator::Communicator(sim::TaskGraph& graph, const SharedMachine& machine, const topo::Topology& topology,
                           const RankLayout& layout, const MeasuredCosts& measured, const CostModel& costs,
                           CollectiveOptions options, std::vector<std::string>& notes)
    : graph_(graph),
      machine_(*machine),
      topology_(topology),
      layout_(layout),
      measured_(measured),
      costs_(costs),
      options_(options),
      notes_(notes) {
  shared_machine_ = machine.shared_version();
}

const std::map<std::size_t, std::size_t>& Communicator::entry_links() const {
  if (entry_link_into_) return *entry_link_into_;
  // Links that enter a device of the representative block from another node (a NIC's link from its
  // network switch): the counterparts of the links that enter any other node, whichever switch
  // (dragonfly group) that node hangs off. First in link order, so the choice is deterministic.
  // Found at the first route that needs them, not when the communicator is made: a pass over every
  // link of the machine that a point whose stage flows are all shared (stage_flow_cache.hpp) never
  // needs (1.6% of the tp 8 search).
  auto& entries = entry_link_into_.emplace();
  const auto& links = topology_.links();
  for (std::size_t l = 0; l < links.size(); ++l) {
    const std::size_t a = topology_.link_src(l);
    const std::size_t b = topology_.link_dst(l);
    if (layout_.mirror_of[b] != b || topology_.device(a).node == topology_.device(b).node) continue;
    entries.try_emplace(b, l);
  }
  return entries;
}

CollectiveFit Communicator::fit(const std::string& collective, int g, bool spans_nodes) {
  // When nothing measured applies, the links alone limit the ring (an upper bound on its speed).
  const bool measured = measured_.collectives.contains(collective);
  std::string link_limited;
  if (measured_.roofline_collectives && !measured) {
    link_limited = "no measured collective for this machine (calibration.collectives: roofline); rings run";
  } else if (!spans_nodes && measured) {
    const auto& fits = measured_.collectives.at(collective);
    if (std::all_of(fits.begin(), fits.end(), [](const CollectiveFit& f) { return f.nodes > 1; })) {
      link_limited = "measured across nodes only; groups inside one node run";
    }
  }
  if (!link_limited.empty()) {
    note_once(fmt::format("{}: {} at the links' rates with no step latency, an upper bound", collective, link_limited));
    return CollectiveFit{g, 0, TimePs{0}, sim::Bandwidth{std::numeric_limits<double>::infinity()}, {}};
  }
  std::string note;
  const CollectiveFit& f = measured_.collective(collective, g, &note);
  note_once(note);
  return f;
}

std::vector<sim::ConstraintId> Communicator::route(int from_rank, int to_rank) const {
  const std::size_t src = layout_.devices[from_rank];
  const std::size_t dst = layout_.devices[to_rank];
  const int dst_node = topology_.device(dst).node;
  if (!layout_.symmetric || layout_.mirror_of[dst] == dst) return machine_.transfer_route(topology_, src, dst);
  // Out of the source's node and through the network as routed; the links inside the
  // destination's node replaced by their counterparts inside the representative node.
  std::vector<sim::ConstraintId> out;
  if (machine_.memory_constraint_of_device[src]) out.push_back(*machine_.memory_constraint_of_device[src]);
  for (const auto l : topology_.route(src, dst).links) {
    const std::size_t a = topology_.link_src(l);
    const std::size_t b = topology_.link_dst(l);
    if (topology_.device(b).node != dst_node) {
      out.push_back(machine_.link_constraint(topology_, l));
      continue;
    }
    std::optional<std::size_t> mirrored;
    if (topology_.device(a).node == dst_node) {
      mirrored = topology_.direct_link(layout_.mirror_of[a], layout_.mirror_of[b]);
    } else if (const auto entry = entry_links().find(layout_.mirror_of[b]); entry != entry_links().end()) {
      mirrored = entry->second;  // the link into the node from its switch: the representative's own
    }
    if (!mirrored) {
      throw std::logic_error(fmt::format("rank symmetry: link {}->{} has no counterpart in the representative node",
                                         topology_.link_src_name(l), topology_.link_dst_name(l)));
    }
    out.push_back(machine_.link_constraint(topology_, *mirrored));
  }
  const std::size_t mirrored_dst = layout_.mirror_of[dst];
  if (machine_.memory_constraint_of_device[mirrored_dst]) {
    out.push_back(*machine_.memory_constraint_of_device[mirrored_dst]);
  }
  return out;
}

TaskId Communicator::add_kernel(const std::string& name, int s, Bytes bytes, std::span<const TaskId> deps) {
  if (!active(s)) return pass_through(name, s, deps);
  return graph_.add(rank_task_name(name, "", s), phase::kCommunication,
                    TransferTask{{}, Bytes{0}, costs_.memory_bound_time(bytes), {}, {}}, deps);
}

std::vector<TaskId> Communicator::add(CollectiveKind kind, const std::string& name, std::int64_t elements,
                                      const CollectivePlan& plan, RankDeps deps,
                                      const std::vector<bool>& participants) {
  active_ = participants;
  const int sims = layout_.simulated_ranks();
  Progress progress{sims, deps, {}, false, &spare_lists_};  // (done is set by the first advance)
  if (plan.algorithm == StageAlgorithm::kTree) {
    if (kind != CollectiveKind::kAllReduce)
      throw std::invalid_argument(name + ": the tree algorithm runs all-reduce only");
    add_tree_stages(name, elements, plan, progress);
    return add_done_barriers(name, progress);
  }
  const Quantization& q = plan.quantization;
  // Quantized collectives hold their wire data in a send and a receive buffer of the whole
  // buffer's quantized size while they run.
  const Bytes quantized_buffers{q.quantized() ? 2 * q.wire_bytes(elements) : 0};
  if (q.quantized())
    add_quantization_buffers(graph_.name_from([&] { return name + ".alloc.quantized"; }), quantized_buffers, false,
                             progress);
  std::int64_t held = elements;  // elements each rank holds before the next stage
  if (kind == CollectiveKind::kReduceScatter || kind == CollectiveKind::kAllReduce) {
    held = add_reduce_scatter_stages(name, held, plan, progress);
  }
  if (kind == CollectiveKind::kAllGather || kind == CollectiveKind::kAllReduce) {
    add_all_gather_stages(kind, name, held, plan, progress);
  }
  if (q.quantized())
    add_quantization_buffers(graph_.name_from([&] { return name + ".free.quantized"; }), quantized_buffers, true,
                             progress);
  // An analytic collective ends with its last stage's one task per rank: no barrier after it (a TP
  // all-reduce per layer piece would otherwise add a third of its tasks). Flow-level stages end with
  // their own barriers too, but their names are what golden graphs and traces show, so they keep
  // the collective's. Nothing to move (one rank, or groups of one): the result is ready when the
  // inputs are.
  if (progress.advanced && options_.fidelity == Fidelity::kAnalytic) return std::move(progress.done);
  return add_done_barriers(name, progress);
}

void Communicator::add_tree_stages(const std::string& name, std::int64_t elements, const CollectivePlan& plan,
                                   Progress& progress) {
  for (std::size_t j = 0; j < plan.stages.size(); ++j) {
    if (plan.stages[j].group() < 2) continue;
    progress.advance(add_tree_stage(fmt::format(FMT_COMPILE("{}.tree{}"), name, j), plan.stages[j],
                                    plan.quantization.wire_bytes(elements), progress.first()));
  }
}

std::vector<TaskId> Communicator::task_list(int n) {
  if (spare_lists_.empty()) return std::vector<TaskId>(static_cast<std::size_t>(n));
  std::vector<TaskId> list = std::move(spare_lists_.back());
  spare_lists_.pop_back();
  list.assign(static_cast<std::size_t>(n), TaskId{});
  return list;
}

void Communicator::add_quantization_buffers(const std::string& name, Bytes bytes, bool release, Progress& progress) {
  std::vector<TaskId> buffers = task_list(progress.sims);
  for (int s = 0; s < progress.sims; ++s) {
    buffers[s] = quantization_buffer(name, s, bytes, release, progress.first()[s]);
  }
  progress.advance(std::move(buffers));
}

void Communicator::add_kernels(const std::string& name, Bytes bytes, Progress& progress) {
  std::vector<TaskId> kernels = task_list(progress.sims);
  for (int s = 0; s < progress.sims; ++s) {
    kernels[s] = add_kernel(name, s, bytes, progress.first()[s]);
  }
  progress.advance(std::move(kernels));
}

std::int64_t Communicator::add_reduce_scatter_stages(const std::string& name, std::int64_t held,
                                                     const CollectivePlan& plan, Progress& progress) {
  const Quantization& q = plan.quantization;
  for (std::size_t j = 0; j < plan.stages.size(); ++j) {
    const Band& band = plan.stages[j];
    const int g = band.group();
    if (g < 2) continue;
    const std::int64_t share = ceil_div(held, g);
    const std::string stage = graph_.name_from([&] { return fmt::format(FMT_COMPILE("{}.rs{}"), name, j); });
    // Quantize the buffer; after the exchange, dequantize the g shares received and reduce.
    if (q.quantized())
      add_kernels(graph_.name_from([&] { return stage + ".quantize"; }), Bytes{held * 2 + q.wire_bytes(held)},
                  progress);
    std::vector<TaskId> exchanged = add_stage(stage, "reduce_scatter", band, plan, share, progress.first());
    if (q.quantized()) {
      const std::string dequantize = graph_.name_from([&] { return stage + ".dequantize_reduce"; });
      for (int s = 0; s < progress.sims; ++s) {
        exchanged[s] =
            add_kernel(dequantize, s, Bytes{q.wire_bytes(held) + share * 2}, std::span<const TaskId>(&exchanged[s], 1));
      }
    }
    progress.advance(std::move(exchanged));
    held = share;
  }
  return held;
}

void Communicator::add_all_gather_stages(CollectiveKind kind, const std::string& name, std::int64_t held,
                                         const CollectivePlan& plan, Progress& progress) {
  const Quantization& q = plan.quantization;
  // An all-reduce gathers back over its bands in reverse order.
  const std::size_t bands = plan.stages.size();
  const auto band_of = [&](std::size_t j) -> const Band& {
    return plan.stages[kind == CollectiveKind::kAllReduce ? bands - 1 - j : j];
  };
  if (kind == CollectiveKind::kAllGather) {
    for (const auto& b : plan.stages) held = ceil_div(held, std::max(1, b.group()));
  }
  const bool quantized_gather = q.quantized() && kind == CollectiveKind::kAllGather;
  if (quantized_gather)
    add_kernels(graph_.name_from([&] { return name + ".quantize"; }), Bytes{held * 2 + q.wire_bytes(held)}, progress);
  // The gathers of a quantized reduction (qgZ's all-reduce) move bf16: the plan without its
  // quantization, copied once per collective that needs it.
  std::optional<CollectivePlan> unquantized;
  if (!quantized_gather && q.quantized()) {
    unquantized = plan;
    unquantized->quantization = Quantization{};
  }
  const CollectivePlan& gather = unquantized ? *unquantized : plan;
  for (std::size_t j = 0; j < bands; ++j) {
    const int g = band_of(j).group();
    if (g < 2) continue;
    progress.advance(add_stage(graph_.name_from([&] { return fmt::format(FMT_COMPILE("{}.ag{}"), name, j); }),
                               "all_gather", band_of(j), gather, held, progress.first()));
    held *= g;
  }
  if (quantized_gather)
    add_kernels(graph_.name_from([&] { return name + ".dequantize"; }), Bytes{q.wire_bytes(held) + held * 2}, progress);
}

std::vector<TaskId> Communicator::add_done_barriers(const std::string& name, const Progress& progress) {
  std::vector<TaskId> done(progress.sims);
  for (int s = 0; s < progress.sims; ++s) {
    done[s] = graph_.add(rank_task_name(name, ".done", s), phase::kCommunication, BarrierTask{}, progress.first()[s]);
  }
  return done;
}

std::vector<TaskId> Communicator::add_stage(const std::string& name, const std::string& collective, const Band& band,
                                            const CollectivePlan& plan, std::int64_t per_peer, RankDeps first) {
  if (options_.fidelity == Fidelity::kAnalytic) {
    // A stage's analytic transfers depend only on what it moves and over which ranks: built once
    // per kind of stage (a TP all-reduce repeats with every layer and micro-batch), then reused.
    const Quantization& q = plan.quantization;
    const AnalyticKeyView key{
        {band.lo, band.hi, static_cast<int>(plan.algorithm), q.bits, q.group_elements, q.scale_bytes, per_peer},
        collective,
        active_};
    auto found = analytic_stages_.find(key);
    if (found == analytic_stages_.end()) {
      found = analytic_stages_
                  .emplace(AnalyticKey{key.numbers, collective, active_}, priced_stage(key, band, plan, per_peer))
                  .first;
    }
    return emit_analytic(name, *found->second, first);
  }
  const StageShape st = stage_shape(collective, band, plan, per_peer);
  if (st.ring) return add_ring_flows(name, st.fit, band.group(), st.bytes_per_flow, *st.flows, first);
  return add_one_step_flows(name, st.fit.step_latency, st.bytes_per_flow, st.flows->front(), first);
}

std::shared_ptr<const Communicator::AnalyticStage> Communicator::priced_stage(const AnalyticKeyView& key,
                                                                              const Band& band,
                                                                              const CollectivePlan& plan,
                                                                              std::int64_t per_peer) {
  SharedStages* shared = shared_stages();
  if (shared != nullptr) {
    std::optional<SharedStage> taken;
    {
      const std::lock_guard lock(shared->mutex);
      if (const auto it = shared->stages.find(key); it != shared->stages.end()) taken = it->second;
    }
    if (taken) {
      for (const auto& note : taken->notes) note_once(note);
      return taken->stage;
    }
  }
  const std::string collective(key.collective);
  std::vector<std::string> notes;
  note_log_ = &notes;
  std::shared_ptr<const AnalyticStage> stage;
  try {
    stage = analytic_stage(stage_shape(collective, band, plan, per_peer), band);
  } catch (...) {
    note_log_ = nullptr;
    throw;
  }
  note_log_ = nullptr;
  if (shared != nullptr) {
    // (Two workers pricing one stage at once price it alike: the first kept is the one shared.)
    const std::lock_guard lock(shared->mutex);
    if (shared->stages.size() < kSharedStagesPerContext) {
      shared->stages.try_emplace(AnalyticKey{key.numbers, collective, active_}, SharedStage{stage, std::move(notes)});
    }
  }
  return stage;
}

Communicator::SharedStages* Communicator::shared_stages() {
  if (!shared_stages_looked_up_) {
    shared_stages_looked_up_ = true;
    if (shares_flows()) {
      shared_stages_ = std::static_pointer_cast<SharedStages>(
          stage_flow_cache::context_value({shared_machine_, topology_.identity(), &layout_, &measured_, options_},
                                          [] { return std::make_shared<SharedStages>(); }));
    }
  }
  return shared_stages_.get();
}

void Communicator::note_once(const std::string& note) {
  if (note.empty()) return;
  if (note_log_ != nullptr) note_log_->push_back(note);
  if (std::find(notes_.begin(), notes_.end(), note) == notes_.end()) notes_.push_back(note);
}

std::shared_ptr<const Communicator::AnalyticStage> Communicator::analytic_stage(const StageShape& st,
                                                                                const Band& band) {
  if (!st.shared) {
    return std::make_shared<const AnalyticStage>(
        analytic_bodies(st.fit, band, st.ring, st.bytes_per_flow, st.steps, *st.flows));
  }
  stage_flow_cache::AnalyticKey key{st.flows,
                                    std::bit_cast<std::uint64_t>(st.fit.bus_bandwidth.bytes_per_s),
                                    st.fit.step_latency.ps,
                                    st.ring,
                                    st.bytes_per_flow,
                                    st.steps,
                                    options_.link_statistics};
  if (auto held = stage_flow_cache::find_analytic(key)) return held;
  return stage_flow_cache::insert_analytic(
      std::move(key), analytic_bodies(st.fit, band, st.ring, st.bytes_per_flow, st.steps, *st.flows));
}

bool Communicator::shares_flows() const {
  return shared_machine_ && topology_.identity() && stage_flow_cache::shareable(layout_) && stage_flow_cache::active();
}

template <typename Build>
const std::shared_ptr<const StageFlows>& Communicator::flows_of(StageAlgorithm algorithm, const Band& band,
                                                                int channels, Build&& build) {
  auto& held = stage_flows_[{static_cast<int>(algorithm), band.lo, band.hi, active_}];
  if (held) return held;
  if (!shares_flows()) {
    StageFlows flows;
    build(flows);
    held = std::make_shared<const StageFlows>(std::move(flows));
    return held;
  }
  const auto topology = topology_.identity();
  held = stage_flow_cache::find({shared_machine_.get(), topology.get(), &layout_, static_cast<int>(algorithm), band.lo,
                                 band.hi, channels, &active_});
  if (!held) {
    StageFlows flows;
    build(flows);
    held = stage_flow_cache::insert(
        {shared_machine_, topology, layout_, static_cast<int>(algorithm), band.lo, band.hi, channels, active_},
        std::move(flows));
  }
  return held;
}

Communicator::StageShape Communicator::stage_shape(const std::string& collective, const Band& band,
                                                   const CollectivePlan& plan, std::int64_t per_peer) {
  const int g = band.group();
  const int sims = layout_.simulated_ranks();
  const auto member = [&](int r, int k) { return r - r % band.hi + r % band.lo + k * band.lo; };
  const auto position = [&](int r) { return (r % band.hi) / band.lo; };
  const int first_node = topology_.device(layout_.devices[member(layout_.simulated[0], 0)]).node;
  const int last_node = topology_.device(layout_.devices[member(layout_.simulated[0], g - 1)]).node;
  CollectiveFit f = fit(collective, g, first_node != last_node);
  if (plan.algorithm == StageAlgorithm::kRing) {
    // With measured points, the implementation's bus bandwidth at this stage's buffer (what
    // nccl-tests would call its size: every member's share) caps the ring, latency included.
    const double stage_bytes = static_cast<double>(plan.quantization.wire_bytes(per_peer)) * g;
    if (const auto measured = measured_.measured_bus_bandwidth(collective, g, stage_bytes, first_node != last_node)) {
      f.step_latency = TimePs{0};
      f.bus_bandwidth = *measured;
    }
    // Channels (RCCL's parallel rings): channel c visits the members of each node in the band's
    // order rotated by c x (members on the node) / channels, so the rings enter and leave every
    // node through different devices (and NICs). Each channel carries 1/channels of the buffer.
    // Per channel, two directions, one flow per simulated rank each: to the next member (cw), to
    // the previous one (ccw).
    const int channels = std::max(1, options_.channels);
    // Each channel's ring order and every member's place in it depend only on the band (the
    // members of the first simulated rank's subgroup are fixed): computed once per band, not per
    // collective, since they cost O(group) where the flows cost O(simulated ranks).
    auto& rings = ring_orders_[{band.lo, band.hi, channels}];
    if (rings.empty()) {
      std::vector<int> members(g);
      for (int k = 0; k < g; ++k) members[k] = member(layout_.simulated[0], k);
      for (int c = 0; c < channels; ++c) {
        std::vector<int> order = channel_order(members, c, channels);
        std::vector<int> place(g);
        for (int k = 0; k < g; ++k) place[position(order[k])] = k;
        rings.emplace_back(std::move(order), std::move(place));
      }
    }
    // The flows depend on the band and who takes part, not on the bytes: built once for all sizes.
    const auto& ring = flows_of(StageAlgorithm::kRing, band, channels, [&](StageFlows& directions) {
      directions.resize(static_cast<std::size_t>(2 * channels));
      for (int c = 0; c < channels; ++c) {
        const auto& [order, place] = rings[static_cast<std::size_t>(c)];
        for (int s = 0; s < sims; ++s) {
          if (!active(s)) continue;
          for (const int r : class_of(s)) {
            const int base = member(r, 0) - member(layout_.simulated[0], 0);  // this subgroup's offset
            const int k = place[position(r)];
            const int next = order[(k + 1) % g] + base;
            const int prev = order[(k + g - 1) % g] + base;
            directions[2 * c].push_back({s, layout_.simulated_index[next], route(r, next), r});
            directions[2 * c + 1].push_back({s, layout_.simulated_index[prev], route(r, prev), r});
          }
        }
      }
    });
    const std::int64_t chunk = plan.quantization.wire_bytes(ceil_div(per_peer, 2 * channels));
    f.bus_bandwidth = f.bus_bandwidth * (1.0 / channels);
    return {f, ring, true, chunk, g - 1, shares_flows()};
  }
  // All-to-all: one flow from each simulated rank to each peer, all in one step.
  const auto& all_to_all = flows_of(StageAlgorithm::kAllToAll, band, 1, [&](StageFlows& flows) {
    flows.resize(1);
    for (int s = 0; s < sims; ++s) {
      if (!active(s)) continue;
      for (const int r : class_of(s)) {
        for (int k = 1; k < g; ++k) {
          const int peer = member(r, (position(r) + k) % g);
          flows[0].push_back({s, layout_.simulated_index[peer], route(r, peer), r});
        }
      }
    }
  });
  const std::int64_t bytes = plan.quantization.wire_bytes(per_peer);
  return {f, all_to_all, false, bytes, 1, shares_flows()};
}

}  // namespace offsim::models
