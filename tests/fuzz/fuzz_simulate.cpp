// libFuzzer harness that reads, builds and simulates an experiment and checks the simulator's
// invariants (docs/fuzzing.md; issue 32: a ds_config ratio of -1 crashed `run` although 5 M
// executions of the readers' harness had passed, because that harness never simulates).
//
// The input is the text of one experiment YAML, written to <tmp>/configs/experiments/fuzz.yaml
// (tests/fuzz/fuzz_common.hpp) so the seeds' `!include`s resolve. An input that loads is, when
// small (kMaxTasks tasks, kMaxRanks ranks: the fuzzer's time goes to many small runs, not a few
// large ones), run as `offsim run --out` runs it, and on every graph that run simulates (once
// each, through RunExperimentOptions::on_simulated) these must hold, or the harness aborts (a
// crash for libFuzzer):
//   - no SimulationError: no negative reservation, no release of more than a tenant holds, no
//     deadlock, time never going back (the engine throws these);
//   - every task ran once: ready <= start <= end <= makespan for every task, and the compute units
//     ran as many tasks as the graph has compute tasks;
//   - time is monotone along the graph: a task becomes ready no earlier than each dependency ends;
//   - the run a sweep or search point makes, without link statistics (its flows share bandwidth
//     over classes of alike constraints, sim/exec/route_classes.hpp, and its analytic transfers run
//     outside the flow network), gives every task the times of the run with them, and as many
//     events;
//   - memory returns to its start: every tenant the iteration frees (activations, gathered
//     parameters, buffers) is freed of all it took, so a pool ends holding its states (the tenants
//     never freed) only; every pool's timeline goes forward in time and never below zero;
//   - the whole run (run_experiment, its summary and report) ends in a result;
//   - the experiment run as a sweep's or search's point runs it (no link statistics when built,
//     so Megatron's operations and flow-level TP all-reduces are replayed, no task names) gives
//     every headline figure, every phase, every memory peak and every infeasibility reason of the
//     run above, to the last digit.
// Bad input ends in ConfigError (exit 2), std::invalid_argument (a strategy the machine cannot
// host: exit 2) or SimulationLimit (beyond the 64-bit clock: exit 3), as the CLI maps them; any
// other exception escapes and aborts.
#include <fmt/format.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <stdexcept>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "models/cost/cost_model.hpp"
#include "models/experiment.hpp"
#include "models/figures.hpp"
#include "sim/config/config_reader.hpp"
#include "sim/core/errors.hpp"
#include "sim/exec/executor.hpp"
#include "tests/fuzz/fuzz_common.hpp"
#include "topologies/topology_parser.hpp"

namespace {

using namespace offsim_fuzz;
using offsim::sim::TaskGraph;

// What the harness simulates: graphs of at most this many tasks (a larger graph stops its build
// at this size), strategies of at most this many ranks (larger ones are read, not built): a 10 s
// hang limit under the sanitizers.
constexpr std::size_t kMaxTasks = 20000;
constexpr std::size_t kMaxRanks = 64;
// The outputs over time (timeline.csv, trace.json) of a run whose full trace would hold more events
// than this are the compact trace, cut at this many events, as `offsim run --out --trace-limit`
// writes them: a run writes at most about this many, and the fuzzer reaches both writers (with the
// CLI's default, 4 M events, no graph it simulates reached the compact one). Before, writing the
// full trace was two thirds of the harness's time.
constexpr std::size_t kTraceEventLimit = 2000;

[[noreturn]] void broken(const std::string& what) {
  std::fprintf(stderr, "offsim fuzz: invariant broken: %s\n", what.c_str());
  std::abort();
}

std::size_t ranks_of(const offsim::models::StrategySpec& s) {
  return std::visit([](const auto& spec) { return spec.devices.size(); }, s);
}

// The invariants of one run of `graph` (see the file's comment).
void check_run(const TaskGraph& graph, const offsim::sim::Platform& platform, const offsim::sim::RunResult& run) {
  const auto& records = run.tasks;
  if (records.size() != graph.size()) broken("a record per task");
  std::uint64_t compute_tasks = 0;
  // Per pool and tenant: bytes allocated, bytes freed.
  std::map<std::pair<std::uint32_t, std::string>, std::pair<std::int64_t, std::int64_t>> tenants;
  for (const auto& t : graph.tasks()) {
    const auto& r = records[t.id.index];
    const std::string name(graph.name(t));
    if (!(r.ready.ps >= 0 && r.ready <= r.start && r.start <= r.end && r.end <= run.makespan)) {
      broken("task '" + name + "' ran outside 0 <= ready <= start <= end <= makespan");
    }
    for (const auto d : graph.deps(t)) {
      if (records[d.index].end > r.ready) broken("task '" + name + "' was ready before a dependency ended");
    }
    if (std::holds_alternative<offsim::sim::ComputeTask>(t.body)) ++compute_tasks;
    if (const auto* a = std::get_if<offsim::sim::AllocTask>(&t.body))
      tenants[{a->pool, a->tenant.str()}].first += a->bytes.count;
    if (const auto* f = std::get_if<offsim::sim::FreeTask>(&t.body))
      tenants[{f->pool, f->tenant.str()}].second += f->bytes.count;
  }
  std::uint64_t ran = 0;
  for (const auto& u : run.units) ran += u.tasks_run;
  if (ran != compute_tasks) broken("the compute units ran another number of tasks than the graph holds");
  // Memory returns to its start: a tenant the iteration frees (activations, gathered parameters,
  // buffers) is freed of all it took; the others (the model states) stay, as the next iteration
  // finds them. A pool then ends holding its states only.
  std::vector<std::int64_t> states(platform.pools.size(), 0);
  for (const auto& [key, bytes] : tenants) {
    const auto& [taken, freed] = bytes;
    if (freed != 0 && taken != freed) {
      broken("tenant '" + key.second + "' of pool " + platform.pools[key.first].name + " took " +
             std::to_string(taken) + " B and freed " + std::to_string(freed) + " B");
    }
    if (freed == 0) states[key.first] += taken;
  }
  for (std::size_t p = 0; p < run.pools.size(); ++p) {
    const auto& pool = run.pools[p];
    offsim::sim::TimePs last{0};
    for (const auto& s : pool.timeline) {
      if (s.time < last) broken("pool " + pool.name + "'s timeline goes back in time");
      if (s.used.count < 0) broken("pool " + pool.name + " holds a negative number of bytes");
      last = s.time;
    }
    if (!pool.timeline.empty() && pool.timeline.back().used.count != states[p]) {
      broken("pool " + pool.name + "'s timeline ends at other bytes than its states hold");
    }
  }
}

// The graph run again as a sweep's point runs it, without link statistics: the same times.
void check_lean_run(const TaskGraph& graph, const offsim::sim::Platform& platform, const offsim::sim::RunResult& run) {
  const offsim::sim::RunResult lean =
      offsim::sim::execute(platform, graph, offsim::sim::ExecOptions{.link_statistics = false});
  if (lean.makespan != run.makespan) broken("without link statistics the run ends at another time");
  if (lean.events_processed != run.events_processed) broken("without link statistics the run has other events");
  for (const auto& t : graph.tasks()) {
    const auto& a = run.tasks[t.id.index];
    const auto& b = lean.tasks[t.id.index];
    if (a.ready != b.ready || a.start != b.start || a.end != b.end) {
      broken("without link statistics task '" + std::string(graph.name(t)) + "' runs at other times");
    }
  }
}

// The experiment as a sweep's or search's point runs it (models/sweep.cpp: built and run without
// link statistics and task names, so replayed operations and collectives stand for what the run
// with the outputs over time built in full) gives `full`'s figures to the last digit.
void check_point_run(const offsim::models::ExperimentSpec& spec, const offsim::models::ExperimentResult& full) {
  using namespace offsim::models;
  const ExperimentResult point = [&] {
    const offsim::sim::ScopedUnnamedTasks unnamed;
    return run_experiment(spec, RunExperimentOptions{.link_statistics = false});
  }();
  for (const Figure& f : headline_figures()) {
    if (f.text(point) != f.text(full)) {
      broken(fmt::format("as a sweep point, {} is {}; the full run's is {}", f.name, f.text(point), f.text(full)));
    }
  }
  if (point.iteration_time != full.iteration_time) broken("as a sweep point, another iteration time");
  if (point.phases.size() != full.phases.size()) broken("as a sweep point, other phases");
  for (std::size_t i = 0; i < full.phases.size(); ++i) {
    if (point.phases[i].phase != full.phases[i].phase || point.phases[i].time != full.phases[i].time) {
      broken(fmt::format("as a sweep point, phase {} takes {} ps; in the full run {} {} ps", point.phases[i].phase,
                         point.phases[i].time.ps, full.phases[i].phase, full.phases[i].time.ps));
    }
  }
  if (point.memory.size() != full.memory.size()) broken("as a sweep point, other memory pools");
  for (std::size_t i = 0; i < full.memory.size(); ++i) {
    if (point.memory[i].peak != full.memory[i].peak) broken("as a sweep point, another memory peak");
  }
  if (point.infeasible_reasons != full.infeasible_reasons) broken("as a sweep point, other infeasibility reasons");
}

void simulate(const std::filesystem::path& file, offsim::models::ReadCache& reads) {
  using namespace offsim::models;
  const ExperimentSpec spec = load_experiment(file, {}, &reads);
  if (ranks_of(spec.strategy) > kMaxRanks) {
    if (g_verbose) std::fprintf(stderr, "not simulated: %zu ranks\n", ranks_of(spec.strategy));
    return;
  }
  // The whole path a user runs (the run with its extrapolation, the summary and the report), with
  // the invariants checked on every graph it simulates: one build and one run per graph (a graph
  // past kMaxTasks stops its build with SimulationLimit, LLVMFuzzerInitialize).
  int simulated = 0;
  const auto check = [&](const offsim::sim::Platform& platform, const TaskGraph& graph,
                         const offsim::sim::RunResult& run) {
    check_run(graph, platform, run);
    check_lean_run(graph, platform, run);
    ++simulated;
    if (g_verbose) std::fprintf(stderr, "simulated: %zu tasks, invariants hold\n", graph.size());
  };
  const ExperimentResult result = run_experiment(
      spec,
      RunExperimentOptions{.outputs_over_time = true, .trace_event_limit = kTraceEventLimit, .on_simulated = check});
  if (g_verbose) {
    std::fprintf(stderr, "outputs over time: %s trace (%zu events in full)\n",
                 result.trace.compact ? "compact" : "full", result.trace.full_events);
  }
  (void)summary_json(spec, result, {"fuzz", "fuzz"});
  (void)text_report(spec, result);
  check_point_run(spec, result);
  if (simulated == 1) return;
  // A long pipeline schedule ran as two shorter ones and was extrapolated (run_experiment): the
  // full schedule, which the CLI never runs, is checked too, as long as it is small.
  const CostModel costs(spec.device);
  const IterationInputs inputs{spec.model, spec.training, spec.hardware->topology, costs, spec.collectives,
                               spec.host,  true};
  const BuiltIteration built = build_iteration(inputs, spec.strategy);
  const offsim::sim::RunResult run = offsim::sim::execute(built.machine->platform, built.graph);
  check(built.machine->platform, built.graph, run);
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int* /*argc*/, char*** /*argv*/) {
  set_up();
  g_verbose = std::getenv("OFFSIM_FUZZ_VERBOSE") != nullptr;
  // As in the readers' harness: machines of at most 64 K devices and links under the sanitizers.
  offsim::topo::max_machine_elements = std::size_t{1} << 16;
  // Graphs of at most kMaxTasks tasks are built and simulated; a larger one stops its build with
  // SimulationLimit when it reaches that size (a sub_group_size of 1 on 13 B parameters ran the
  // harness out of its 2 GiB before it had a limit, and building graphs of up to 1 M tasks that
  // were then not simulated cost a second each under the sanitizers).
  offsim::sim::task_limit_cap = kMaxTasks;
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  write_input(text);
  // The shipped files are parsed once per process, as in the readers' harness.
  static offsim::sim::config::ScopedFileCache shipped_files;
  static offsim::models::ReadCache shipped_reads;
  try {
    simulate(g_input, shipped_reads);
  } catch (const offsim::sim::config::ConfigError& e) {
    if (g_verbose) std::fprintf(stderr, "%s\n", e.what());
  } catch (const std::invalid_argument& e) {
    // A strategy the machine cannot host, caught by the builders (exit 2).
    if (g_verbose) std::fprintf(stderr, "%s\n", e.what());
  } catch (const offsim::sim::SimulationLimit& e) {
    // Beyond the 64-bit clock (exit 3) or a graph past kMaxTasks: a result of the input, not a bug.
    if (g_verbose) std::fprintf(stderr, "%s\n", e.what());
  }
  // What was read from the input goes within the run that read it: a run that ends holding more
  // blocks than it started with makes libFuzzer run the input again to look for a leak (and, when
  // it still does, scan the heap), which doubled the cost of about half the runs when the input's
  // parse was only dropped at the start of the next one.
  shipped_files.forget(g_input.string());
  shipped_reads.forget(g_input.string());
  return 0;
}
