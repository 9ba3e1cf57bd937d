// run_experiment: one simulated iteration of an experiment (a long pipeline schedule through its
// steady state), its task graph, its headline figures and what it costs.
#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <optional>
#include <stdexcept>

#include "models/experiment.hpp"
#include "models/strategies/layer_kernels.hpp"
#include "models/strategies/phases/collective_replay.hpp"
#include "models/strategies/phases/operation_replay.hpp"
#include "models/strategies/strategy_registry.hpp"
#include "sim/report/timeline.hpp"

namespace offsim::models {

using sim::config::Context;
using sim::config::MapReader;
using sim::config::Node;

namespace {

IterationInputs inputs_of(const ExperimentSpec& spec, const CostModel& costs, bool link_statistics = true) {
  return IterationInputs{spec.model,       spec.training, spec.hardware->topology, costs,
                         spec.collectives, spec.host,     link_statistics};
}

// The iteration's task graph. A strategy the builders refuse (std::invalid_argument: a shape the
// machine cannot host that the readers let through) is bad input located at the strategy, so that
// every exit 2 names where (issue 32).
BuiltIteration build_located(const ExperimentSpec& spec, const IterationInputs& inputs) {
  try {
    return build_iteration(inputs, spec.strategy);
  } catch (const std::invalid_argument& e) {
    const sim::config::Location at =
        spec.strategy_kind_at.file.empty() ? sim::config::Location{spec.file, 0, 0} : spec.strategy_kind_at;
    throw sim::config::ConfigError({sim::config::Diagnostic{at, "strategy", e.what()}});
  }
}

}  // namespace

void write_task_graph(const ExperimentSpec& spec, bool dot, const sim::TaskGraph::TextSink& sink) {
  const CostModel costs(spec.device);
  const BuiltIteration built = build_located(spec, inputs_of(spec, costs));
  if (dot) {
    built.graph.write_dot(built.machine->platform, sink);
  } else {
    built.graph.write_text(built.machine->platform, sink);
  }
}

std::string dump_task_graph(const ExperimentSpec& spec, bool dot) {
  std::string out;
  write_task_graph(spec, dot, [&](std::string_view piece) { out.append(piece); });
  return out;
}

namespace {

// Links: per class, total bytes and the busiest link.
std::vector<LinkClassSummary> summarise_links(const std::vector<LinkStat>& stats) {
  std::vector<LinkClassSummary> links;
  for (const auto& c : stats) {
    auto it = std::find_if(links.begin(), links.end(), [&](const auto& l) { return l.link_class == c.link_class; });
    if (it == links.end()) {
      links.push_back({c.link_class, 0.0, sim::TimePs{0}, c.name, 0.0});
      it = links.end() - 1;
    }
    it->bytes += c.bytes;
    if (c.busy > it->busiest_link_busy) {
      it->busiest_link_busy = c.busy;
      it->busiest_link = c.name;
      it->peak_bytes_per_s = c.peak_bytes_per_s;
    }
  }
  return links;
}

// Step of simulate_iteration: the number of distinct nodes the ranks run on.
std::size_t node_count(const ExperimentSpec& spec, const BuiltIteration& built) {
  std::vector<int> nodes;
  for (const auto d : built.devices) nodes.push_back(spec.hardware->topology.device(d).node);
  std::sort(nodes.begin(), nodes.end());
  return static_cast<std::size_t>(std::unique(nodes.begin(), nodes.end()) - nodes.begin());
}

// Step of simulate_iteration: the approximations a mixture-of-experts model adds (routing, and
// the dense first layers costed as a mean).
void add_moe_approximations(const ModelSpec& m, std::vector<std::string>& approximations) {
  if (m.routing_imbalance > 1.0) {
    approximations.push_back(fmt::format(
        "mixture of experts: routing_imbalance {:g}: the busiest of the {} experts ({} per token) runs {:g} x the "
        "mean tokens and sits on the simulated rank (the slowest rank sets the pace), the rank's other experts the "
        "mean; the expert-parallel all-to-all carries the busiest rank's tokens; experts run one after another as "
        "eager PyTorch does",
        m.routing_imbalance, m.experts, m.experts_per_token, m.routing_imbalance));
  } else {
    approximations.push_back(fmt::format(
        "mixture of experts: the router spreads tokens evenly over the {} experts ({} per token; routing_imbalance "
        "1: no measured imbalance for this model), run one after another as eager PyTorch does; real routing is "
        "uneven and the busiest expert sets the pace, so this is a lower bound on the MLP time",
        m.experts, m.experts_per_token));
  }
  if (m.dense_layers > 0) {
    approximations.push_back(fmt::format(
        "mixture of experts: the first {} layers are dense (width {}): each layer is costed as the mean of a dense "
        "and a sparse layer, so a pipeline stage's work is the mean, not its own layers'",
        m.dense_layers, m.dense_ffn));
  }
}

// Step of simulate_iteration: rank 0's phase spans, and the time of each phase summed over its
// spans (phases in order of first appearance).
void add_phases(const BuiltIteration& built, const sim::RunResult& run, ExperimentResult& r) {
  for (const auto& span : built.spans) {
    const auto& first = run.tasks[span.first.index];
    const sim::TimePs begin = span.from_end ? first.end : first.start;
    const sim::TimePs length = run.tasks[span.last.index].end - begin;
    r.rank0_phases.push_back({span.phase, begin, run.tasks[span.last.index].end});
    auto it = std::find_if(r.phases.begin(), r.phases.end(), [&](const PhaseTime& p) { return p.phase == span.phase; });
    if (it == r.phases.end()) {
      r.phases.push_back({span.phase, length});
    } else {
      it->time += length;
    }
  }
}

// Step of simulate_iteration: rank 0's GPU: its compute tasks, its memory, its host links.
void add_rank0_views(const ExperimentSpec& spec, const BuiltIteration& built, const sim::RunResult& run,
                     ExperimentResult& r) {
  const std::size_t device0 = built.devices.front();
  const std::uint32_t unit0 = *built.machine->unit_of_device[device0];
  for (const auto& t : built.graph.tasks()) {
    if (const auto* c = std::get_if<sim::ComputeTask>(&t.body); c && c->unit == unit0) {
      r.rank0_compute.push_back({built.graph.phase(t), run.tasks[t.id.index].start, run.tasks[t.id.index].end});
    }
  }
  r.rank0_memory = run.pools[*built.machine->pool_of_device[device0]].timeline;
  // Its host links: the cpu-gpu links between it and a device of its node, found by index; their
  // activity when the run kept link statistics (RunResult::constraints), their capacity always.
  const topo::Topology& topology = spec.hardware->topology;
  const auto host_link = [&](std::size_t from, std::size_t to) -> std::optional<sim::ConstraintId> {
    const auto l = topology.direct_link(from, to);
    if (!l || topology.link_class(*l) != "cpu-gpu") return std::nullopt;
    return built.machine->link_constraint(topology, *l);
  };
  const auto read_link = [&](sim::ConstraintId c, std::vector<sim::RateSample>& timeline, double& capacity) {
    if (c.index < run.constraints.size()) timeline = run.constraints[c.index].stats.timeline;
    capacity = built.machine->platform.constraints[c.index].capacity.bytes_per_s;
  };
  for (std::size_t d = 0; d < topology.devices().size(); ++d) {
    if (d == device0 || topology.device(d).node != topology.device(device0).node) continue;
    if (const auto into = host_link(d, device0)) read_link(*into, r.rank0_h2d, r.rank0_h2d_capacity);
    if (const auto out_of = host_link(device0, d)) read_link(*out_of, r.rank0_d2h, r.rank0_d2h_capacity);
  }
}

// The compact trace's representatives: the first and the last rank whose compute unit ran tasks
// (under rank symmetry with a pipeline: the first ranks of its first and last stage), with their
// units and memory pools.
sim::report::TraceSelection compact_selection(const ExperimentSpec& spec, const BuiltIteration& built,
                                              ExperimentResult::Trace& trace) {
  const auto& platform = built.machine->platform;
  std::vector<bool> ran(platform.units.size(), false);
  for (const auto& t : built.graph.tasks()) {
    if (const auto* c = std::get_if<sim::ComputeTask>(&t.body)) ran[c->unit] = true;
  }
  std::vector<std::size_t> ranks;
  for (std::size_t rank = 0; rank < built.devices.size(); ++rank) {
    const auto unit = built.machine->unit_of_device[built.devices[rank]];
    if (!unit || !ran[*unit]) continue;
    if (ranks.size() == 2) ranks.pop_back();
    ranks.push_back(rank);
  }
  sim::report::TraceSelection selection;
  selection.compact = true;
  for (const auto rank : ranks) {
    const std::size_t device = built.devices[rank];
    const std::uint32_t unit = *built.machine->unit_of_device[device];
    trace.ranks.push_back(rank);
    trace.devices.push_back(spec.hardware->topology.device(device).name);
    selection.devices.push_back(trace.devices.back());
    selection.units.push_back(unit);
    if (const auto pool = built.machine->pool_of_device[device]) selection.pools.push_back(*pool);
  }
  std::sort(selection.units.begin(), selection.units.end());
  std::sort(selection.pools.begin(), selection.pools.end());
  std::vector<std::string> named;
  for (std::size_t i = 0; i < trace.ranks.size(); ++i)
    named.push_back(fmt::format("rank {} ({})", trace.ranks[i], trace.devices[i]));
  trace.note = fmt::format(
      "compact trace: the tasks, memory and per-device link rates of {} of the {} ranks, and the link rates per "
      "class and direction of every link; --trace full writes every simulated rank's detail",
      fmt::join(named, " and "), built.devices.size());
  selection.note = trace.note;
  return selection;
}

// A compact trace whose representatives alone hold more than `limit` events (one simulated rank
// can run tens of millions of tasks) covers the start of the iteration only, and says so.
void limit_compact_window(const BuiltIteration& built, const sim::RunResult& run,
                          const std::vector<sim::report::Series>& link_classes, std::size_t limit,
                          sim::report::TraceSelection& selection, ExperimentResult::Trace& trace) {
  selection.window_end_ps =
      sim::report::compact_window_end(built.machine->platform, built.graph, run, selection, link_classes, limit);
  if (selection.window_end_ps == std::numeric_limits<std::int64_t>::max()) return;
  trace.window_end_s = sim::TimePs{selection.window_end_ps}.seconds();
  trace.note += fmt::format(
      "; only what begins in the first {:.6g} s of the {:.6g} s run, since those ranks alone hold more than {} "
      "events (--trace-limit)",
      *trace.window_end_s, run.makespan.seconds(), limit);
  selection.note = trace.note;
}

// Step of simulate_iteration: timeline.csv and trace.json, full or compact (RunExperimentOptions),
// streamed into the output set or kept in the result.
void add_outputs_over_time(const ExperimentSpec& spec, const BuiltIteration& built, const sim::RunResult& run,
                           const RunExperimentOptions& options, ExperimentResult& r) {
  r.trace.full_events = sim::report::full_trace_events(built.graph, run);
  r.trace.compact = options.trace == TraceMode::compact ||
                    (options.trace == TraceMode::automatic && r.trace.full_events > options.trace_event_limit);
  r.trace.limit = options.trace == TraceMode::automatic ? options.trace_event_limit : 0;
  sim::report::TraceSelection selection =
      r.trace.compact ? compact_selection(spec, built, r.trace) : sim::report::TraceSelection{};
  const auto& platform = built.machine->platform;
  const std::vector<sim::report::Series> link_classes = sim::report::link_class_rates(run);
  if (r.trace.compact) limit_compact_window(built, run, link_classes, options.trace_event_limit, selection, r.trace);
  if (options.outputs != nullptr) {
    options.outputs->add_streamed("timeline.csv", [&](sim::report::TextSink& out) {
      sim::report::write_timeline_csv(run, selection, link_classes, out);
    });
    options.outputs->add_streamed("trace.json", [&](sim::report::TextSink& out) {
      sim::report::write_chrome_trace(platform, built.graph, run, selection, link_classes, out);
    });
    return;
  }
  sim::report::TextSink csv;
  sim::report::write_timeline_csv(run, selection, link_classes, csv);
  r.timeline_csv = csv.take();
  sim::report::TextSink trace;
  sim::report::write_chrome_trace(platform, built.graph, run, selection, link_classes, trace);
  r.trace_json = trace.take();
}

// Step of simulate_iteration: the rates over the iteration time (none for a zero-length one).
void add_rates(const ExperimentSpec& spec, const BuiltIteration& built, const sim::RunResult& run,
               ExperimentResult& r) {
  const double seconds = run.makespan.seconds();
  if (seconds > 0.0) {
    r.model_tflops_per_device = built.model_flops_per_device.count / seconds / 1e12;
    r.tflops_per_device = built.hardware_flops_per_device.count / seconds / 1e12;
    r.tokens_per_s = built.tokens_per_iteration / seconds;
    r.mfu = built.model_flops_per_device.count / seconds / spec.device.peak_matrix_bf16.flops_per_s;
  }
}

// Step of simulate_iteration: memory per pool kind, the fullest pool; any overflow makes the
// configuration infeasible, with the reason.
void add_memory(const sim::RunResult& run, ExperimentResult& r) {
  for (const auto& pool : run.pools) {
    auto it = std::find_if(r.memory.begin(), r.memory.end(), [&](const auto& m) { return m.kind == pool.kind; });
    if (it == r.memory.end()) {
      r.memory.push_back({pool.kind, pool.name, pool.peak, pool.capacity});
    } else if (pool.peak > it->peak) {
      *it = {pool.kind, pool.name, pool.peak, pool.capacity};
    }
    if (pool.overflow) {
      std::vector<std::string> tenants;
      for (const auto& t : pool.overflow->top_tenants)
        tenants.push_back(fmt::format("{} {}", t.tenant, sim::format_bytes(t.bytes)));
      r.feasible = false;
      r.infeasible_reasons.push_back(
          fmt::format("{} needs {} of {} (over by {}) at t={}: {}", pool.name, sim::format_bytes(pool.overflow->used),
                      sim::format_bytes(pool.capacity), sim::format_bytes(pool.overflow->excess),
                      sim::format_time(pool.overflow->time), fmt::join(tenants, ", ")));
    }
  }
}

// One simulated iteration of the experiment as it is: build and execute the task graph, then
// read the result's figures off the run, step by step.
// `replayed`: the replayed operations' chains of an earlier simulation of the same experiment with
// another number of micro-batches (run_experiment's steady state), shared with this one.
ExperimentResult simulate_iteration(const ExperimentSpec& spec, const RunExperimentOptions& options,
                                    ReplayedChains* replayed = nullptr) {
  const CostModel costs(spec.device);
  const bool link_statistics = options.link_statistics || options.outputs_over_time;
  IterationInputs inputs = inputs_of(spec, costs, link_statistics);
  inputs.replayed_chains = replayed;
  // Flow-level collectives may be replayed (models/strategies/phases/collective_replay.hpp) unless
  // the run records link timelines and a trace, which a replay does not reproduce.
  inputs.replay_flow_collectives = options.replay_collectives && !options.outputs_over_time;
  BuiltIteration built = build_located(spec, inputs);
  // Without link statistics the links' activity is not kept at all (ExecOptions::link_statistics).
  const sim::ExecOptions exec{.record_link_timelines = options.outputs_over_time, .link_statistics = link_statistics};
  sim::RunResult run = sim::execute(built.machine->platform, built.graph, exec);
  if (!built.replayed.empty()) {
    if (replays_held(built.replayed, run)) {
      if (link_statistics) add_replayed_statistics(built.replayed, run);  // (else no link is kept)
    } else {  // a replay's members did not start together: the iteration in full
      inputs.replay_flow_collectives = false;
      built = build_located(spec, inputs);
      run = sim::execute(built.machine->platform, built.graph, exec);
    }
  }
  if (options.on_simulated) options.on_simulated(built.machine->platform, built.graph, run);

  ExperimentResult r;
  r.iteration_time = run.makespan;
  r.ranks = built.devices.size();
  r.simulated_ranks = static_cast<std::size_t>(built.simulated_ranks);
  r.model_states_per_device = built.model_states_per_device;
  r.nodes = node_count(spec, built);
  r.tasks = built.graph.size();
  r.events = run.events_processed;
  r.approximations = built.approximations;
  if (spec.training.fp8) {
    const auto* mg = std::get_if<MegatronSpec>(&spec.strategy);
    r.approximations.push_back(fp8_approximation(*spec.training.fp8, mg && mg->tp_comm_overlap && mg->tp > 1));
  }
  if (spec.model.moe()) add_moe_approximations(spec.model, r.approximations);
  if (options.outputs_over_time) add_outputs_over_time(spec, built, run, options, r);
  add_phases(built, run, r);
  if (options.rank0_views) add_rank0_views(spec, built, run, r);
  add_rates(spec, built, run, r);
  add_memory(run, r);
  if (!link_statistics) return r;
  for (const auto& c : run.constraints) {
    r.link_stats.push_back({c.name, c.link_class, c.stats.bytes_carried, c.stats.busy_time, c.stats.peak_bytes_per_s});
  }
  r.links = summarise_links(r.link_stats);
  return r;
}

// Megatron's pipeline schedules repeat: past the warm-up, every further pp micro-batches run the
// same operations on every stage, with the same transfers, so the iteration time, every phase time
// and every link's bytes and busy time are affine in the number of micro-batches m. A long schedule
// is therefore simulated at m1 = pp and m2 = 2 pp micro-batches (multiples of pp, as the
// interleaved schedule requires) and extrapolated to m: x(m) = x(m2) + (m - m2) / (m2 - m1) x
// (x(m2) - x(m1)). tests/unit/megatron_test.cpp checks the extrapolation against full
// simulations of both schedules (equal to 1e-9). Only when m > m1 + m2, where it saves work.
// (The warm-up and cool-down of 1F1B and interleaved schedules span fewer than pp micro-batches
// of each stage, so from m = pp on every further one adds the same steady-state period.)
struct SteadyState {
  std::int64_t m1 = 0, m2 = 0, m = 0;
};
std::optional<SteadyState> steady_state_plan(const ExperimentSpec& spec) {
  const auto steady = strategy_kind(spec.strategy).steady_state_period(spec.strategy);
  if (!steady) return std::nullopt;
  const std::int64_t period = *steady;
  const std::int64_t m = spec.training.grad_accum;
  if (m <= 3 * period) return std::nullopt;
  return SteadyState{period, 2 * period, m};
}

ExperimentResult extrapolate_steady_state(const SteadyState& plan, const ExperimentResult& r1, ExperimentResult r2) {
  const double a = static_cast<double>(plan.m - plan.m2) / static_cast<double>(plan.m2 - plan.m1);
  const auto time = [a](sim::TimePs x1, sim::TimePs x2) {
    return sim::TimePs{x2.ps + static_cast<std::int64_t>(std::llround(a * static_cast<double>(x2.ps - x1.ps)))};
  };
  ExperimentResult r = std::move(r2);
  const sim::TimePs simulated = r.iteration_time;
  r.iteration_time = time(r1.iteration_time, r.iteration_time);
  for (auto& phase : r.phases) {
    const auto it =
        std::find_if(r1.phases.begin(), r1.phases.end(), [&](const auto& p) { return p.phase == phase.phase; });
    phase.time = time(it == r1.phases.end() ? sim::TimePs{0} : it->time, phase.time);
  }
  for (std::size_t i = 0; i < r.link_stats.size() && i < r1.link_stats.size(); ++i) {
    auto& l = r.link_stats[i];
    l.bytes += a * (l.bytes - r1.link_stats[i].bytes);
    l.busy = time(r1.link_stats[i].busy, l.busy);
  }
  r.links = summarise_links(r.link_stats);
  // The work per device grows with m like the micro-batches do; the rates follow from the time.
  const double work = static_cast<double>(plan.m) / static_cast<double>(plan.m2);
  const double rate = r.iteration_time.ps > 0
                          ? work * static_cast<double>(simulated.ps) / static_cast<double>(r.iteration_time.ps)
                          : 0.0;
  r.model_tflops_per_device *= rate;
  r.tflops_per_device *= rate;
  r.tokens_per_s *= rate;
  r.mfu *= rate;
  r.tasks += r1.tasks;
  r.events += r1.events;
  r.approximations.push_back(fmt::format(
      "pipeline steady state: {} micro-batches extrapolated from simulations of {} and {} (the schedule repeats "
      "every pp micro-batches, so times and link traffic are affine in their number; memory peaks, rank 0's "
      "timeline and the trace are those of the {}-micro-batch run); run with --all-micro-batches to simulate "
      "every one",
      plan.m, plan.m1, plan.m2, plan.m2));
  return r;
}

}  // namespace

ExperimentResult run_experiment(const ExperimentSpec& spec, const RunExperimentOptions& options) {
  const auto plan = steady_state_plan(spec);
  if (!plan) return simulate_iteration(spec, options);
  ExperimentSpec shorter = spec;
  shorter.training.grad_accum = plan->m1;
  // The shorter run reports link activity only if the result does (its times are the same), and
  // no rank 0 views (the result's are the longer run's).
  ReplayedChains replayed;  // recorded by the first build, replayed by the second
  const ExperimentResult r1 = simulate_iteration(shorter,
                                                 RunExperimentOptions{.link_statistics = options.link_statistics,
                                                                      .rank0_views = false,
                                                                      .replay_collectives = options.replay_collectives,
                                                                      .on_simulated = options.on_simulated},
                                                 &replayed);
  shorter.training.grad_accum = plan->m2;
  return extrapolate_steady_state(*plan, r1, simulate_iteration(shorter, options, &replayed));
}

double ExperimentResult::phase_seconds(std::string_view phase) const {
  for (const auto& p : phases) {
    if (p.phase == phase) return p.time.seconds();
  }
  return 0.0;
}

std::int64_t ExperimentResult::peak_bytes(std::string_view kind) const {
  for (const auto& m : memory) {
    if (m.kind == kind) return m.peak.count;
  }
  return 0;
}

CostFigures cost_figures(const CostSpec& c, const ExperimentResult& r) {
  CostFigures f;
  const double seconds = r.iteration_time.seconds();
  const double nodes = static_cast<double>(r.nodes);
  f.node_hours_per_iteration = nodes * seconds / 3600.0;
  const double tokens = r.tokens_per_s * seconds;
  const double per_million = tokens > 0.0 ? 1e6 / tokens : 0.0;
  if (c.power_per_node_w) f.energy_kwh_per_iteration = *c.power_per_node_w * nodes * seconds / 3.6e6;
  if (c.price_per_node_hour) f.price_per_iteration = *c.price_per_node_hour * f.node_hours_per_iteration;
  if (f.energy_kwh_per_iteration) f.energy_kwh_per_million_tokens = *f.energy_kwh_per_iteration * per_million;
  if (f.price_per_iteration) f.price_per_million_tokens = *f.price_per_iteration * per_million;
  if (c.token_budget && tokens > 0.0) {
    const double iterations = *c.token_budget / tokens;
    f.time_to_train_s = iterations * seconds;
    f.node_hours_to_train = iterations * f.node_hours_per_iteration;
    if (f.energy_kwh_per_iteration) f.energy_kwh_to_train = iterations * *f.energy_kwh_per_iteration;
    if (f.price_per_iteration) f.price_to_train = iterations * *f.price_per_iteration;
  }
  return f;
}

}  // namespace offsim::models
