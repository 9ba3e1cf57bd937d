// `offsim search`: the fastest strategy for a base experiment's model and machine under limits
// (models/search.hpp states the method; docs/search.md shows its use).
#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <limits>
#include <sstream>
#include <stdexcept>
#include <type_traits>

#include "apps/offsim/commands.hpp"
#include "apps/offsim/heap.hpp"
#include "apps/offsim/progress.hpp"
#include "models/search.hpp"
#include "models/strategies/layout_cache.hpp"
#include "sim/config/config_reader.hpp"
#include "sim/report/atomic_file.hpp"

namespace offsim::app {

namespace {

// The Pareto front as CSV, one row per point, fastest first.
std::string pareto_csv(const std::vector<models::SearchResult>& results) {
  std::string out =
      "strategy,gpus,kind,tp,pp,dp,zero_stage,offload,micro_batch,grad_accum,tokens_per_s,tflops_per_device,"
      "iteration_time_s,hbm_peak_bytes,cost_per_million_tokens\n";
  for (const std::size_t i : models::pareto_front(results)) {
    const auto& r = results[i];
    const auto& c = r.candidate;
    out += fmt::format("{},{},{},{},{},{},{},{},{},{},{},{},{},{},{}\n", c.label(), c.gpus, c.kind, c.tp, c.pp, c.dp,
                       c.zero_stage, c.offload ? "cpu" : "none", c.micro_batch, c.grad_accum, r.tokens_per_s,
                       r.tflops_per_device, r.iteration_s, r.hbm_peak_bytes, r.cost_per_million_tokens);
  }
  return out;
}

int search_or_throw(const SearchCliOptions& options);

}  // namespace

int search_command(const SearchCliOptions& options) {
  return runtime_errors_are_bad_input([&] { return search_or_throw(options); });
}

namespace {

// `--set` on a key the search chooses (strategy.tp, strategy.pp, strategy.zero_stage,
// strategy.kind, training.micro_batch) fixes that dimension of the space, as --tp, --pp, --zero,
// --kind and --micro-batch do, instead of being applied to every point (where the point's own
// strategy would contradict it). Other strategy keys are refused: the search writes the strategy.
SearchCliOptions with_fixed_dimensions(const SearchCliOptions& given) {
  SearchCliOptions o = given;
  o.overrides.clear();
  for (const auto& text : given.overrides) {
    const auto eq = text.find('=');
    const std::string key = text.substr(0, eq), value = eq == std::string::npos ? "" : text.substr(eq + 1);
    const auto integer = [&](const char* flag) {
      try {
        std::size_t used = 0;
        const long long v = std::stoll(value, &used);
        if (used == value.size() && v > 0 && v <= std::numeric_limits<int>::max()) return v;
      } catch (const std::exception&) {
      }
      throw std::runtime_error(fmt::format("--set {}: expected a positive integer (as {} takes)", text, flag));
    };
    const auto fix = [&](auto& list, auto v, const char* flag) {
      using T = typename std::decay_t<decltype(list)>::value_type;
      if (!list.empty() && std::find(list.begin(), list.end(), static_cast<T>(v)) == list.end()) {
        throw std::runtime_error(fmt::format("--set {} contradicts {}", text, flag));
      }
      list = {static_cast<T>(v)};
      fmt::print("search: --set {} fixes the space to {} {}\n", text, flag, value);
    };
    if (key == "strategy.tp") {
      fix(o.tp, integer("--tp"), "--tp");
    } else if (key == "strategy.pp") {
      const auto pp = integer("--pp");
      fix(o.pp, pp, "--pp");
      // Pipelines are Megatron's: data parallelism has one stage.
      if (pp > 1 && o.kinds.empty()) o.kinds = {"megatron"};
    } else if (key == "strategy.zero_stage") {
      if (value.size() != 1 || value[0] < '0' || value[0] > '3') {
        throw std::runtime_error(fmt::format("--set {}: expected a ZeRO stage 0-3", text));
      }
      fix(o.zero_stages, value[0] - '0', "--zero");
    } else if (key == "strategy.kind") {
      if (value != "data_parallel" && value != "megatron") {
        throw std::runtime_error(
            fmt::format("--set {}: the search enumerates data_parallel and megatron (--kind)", text));
      }
      if (!o.kinds.empty() && std::find(o.kinds.begin(), o.kinds.end(), value) == o.kinds.end()) {
        throw std::runtime_error(fmt::format("--set {} contradicts --kind", text));
      }
      o.kinds = {value};
      fmt::print("search: --set {} fixes the space to --kind {}\n", text, value);
    } else if (key == "training.micro_batch") {
      fix(o.micro_batches, integer("--micro-batch"), "--micro-batch");
    } else if (key == "strategy" || key.starts_with("strategy.")) {
      throw std::runtime_error(fmt::format(
          "--set {}: the search writes each point's strategy; fix a dimension with --set strategy.tp / strategy.pp / "
          "strategy.zero_stage / strategy.kind (or --tp, --pp, --zero, --kind, --offload)",
          text));
    } else {
      o.overrides.push_back(text);
    }
  }
  return o;
}

int search_or_throw(const SearchCliOptions& given) {
  namespace fs = std::filesystem;
  const SearchCliOptions options = with_fixed_dimensions(given);
  // The base's files, parsed here to plan, are the points' files too: the sweep's worker on this
  // thread reuses them (its own scope nests in this one) instead of parsing them again, about 5 ms
  // of YAML before its first point (issue 35: this start is serial time that --jobs cannot share).
  const sim::config::ScopedFileCache files;
  // Its machine and calibration tables, read once here, are the points' too (all but a node count
  // that --gpus or --max-nodes changes): the points read through the same cache, where the first
  // point read them again (21 M instructions, about 2.5 ms: bench/perf's 128-node machine and GEMM table).
  models::ReadCache reads;
  const models::ExperimentSpec base = models::load_experiment(options.experiment, options.overrides, &reads);
  models::SearchLimits limits;
  if (!options.max_hbm.empty()) limits.max_hbm_bytes = sim::parse_bytes(options.max_hbm).count;
  if (options.gpus > 0) limits.gpus = options.gpus;
  if (options.max_nodes > 0) limits.max_nodes = options.max_nodes;
  if (options.global_batch > 0) limits.global_batch = options.global_batch;
  limits.price_per_gpu_hour = options.price_per_gpu_hour;
  models::SearchSpace space;
  space.kinds = options.kinds;
  space.tp = options.tp;
  space.pp = options.pp;
  space.zero_stages = options.zero_stages;
  space.micro_batches = options.micro_batches;
  if (options.offload == "none") space.offload = {false};
  if (options.offload == "cpu") space.offload = {true};
  const models::SearchPlan plan = models::plan_search(base, space, limits);

  // The outputs are one set, search.csv and pareto.csv, renamed into place together once every
  // point is simulated (AtomicFileSet, as run --out writes its files): an interrupted search leaves
  // the previous complete set or none. Meanwhile each finished row is appended to a journal,
  // search.partial.csv, which --resume continues and which is removed once the set is in place.
  fs::create_directories(options.out);
  const fs::path csv = fs::path(options.out) / "search.csv";
  const fs::path journal = fs::path(options.out) / "search.partial.csv";
  models::Sweep sweep = models::search_sweep(options.experiment, plan);
  // The base's own overrides go with every point (before the point's strategy).
  for (auto& p : sweep.points)
    p.overrides.insert(p.overrides.begin(), options.overrides.begin(), options.overrides.end());
  // The rows already simulated: the journal's, or (resuming a search that finished) the complete
  // set's, which then start the journal. Without --resume an earlier search is an error.
  const auto rows_there = [&] {
    if (!options.resume && fs::exists(csv)) {
      throw std::runtime_error(
          fmt::format("{} exists: pass --resume to continue it, or choose another --out", csv.string()));
    }
    if (options.resume && !fs::exists(journal) && fs::exists(csv)) {
      models::write_sorted(sweep, journal, models::finished_rows(sweep, csv));
    }
    auto rows = models::finished_rows(sweep, journal);
    if (options.resume) {
      fmt::print("search: resuming {}: {} of {} points are there, {} to simulate\n", csv.string(), rows.size(),
                 sweep.points.size(), sweep.points.size() - std::min(rows.size(), sweep.points.size()));
    }
    return rows;
  };
  // The points lay out the same ranks of the same machine: made once (layout_cache.hpp).
  const models::LayoutCacheScope layouts;
  if (!sweep.points.empty()) {
    SweepCliOptions distributed;
    distributed.out = journal.string();
    distributed.resume = options.resume;
    Progress mpi_progress("search", 0);
    const auto rank = run_distributed_sweep(
        sweep, distributed,
        DistributedSweepHooks{
            .finished_rows = rows_there,
            .write_sorted = {},
            .run_point =
                [&](std::size_t point) { return models::run_sweep_point(sweep, sweep.points.at(point), &reads); },
            .progress = [&](std::size_t done, std::size_t total) { mpi_progress(done, total); },
            .report = [](std::size_t, int) {}});
    if (rank.has_value() && *rank != 0) return 0;  // MPI: rank 0 writes the set and prints
    if (!rank.has_value()) {
      if (!options.resume && fs::exists(journal)) {
        throw std::runtime_error(
            fmt::format("{} exists: pass --resume to continue it, or choose another --out", journal.string()));
      }
      const std::size_t already = rows_there().size();
      models::SweepOptions run;
      run.out = journal;
      run.out_is_journal = true;  // search.csv is written from its rows, sorted, below
      run.jobs = options.jobs;
      run.resume = true;  // the journal was checked above
      Progress progress("search", already);
      run.progress = [&](std::size_t done, std::size_t total) { progress(done, total); };
      run.on_worker_start = back_thread_heap_with_huge_pages;
      run.reads = &reads;
      (void)models::run_sweep(sweep, run);
    }
  } else if (!options.resume && fs::exists(csv)) {
    (void)rows_there();  // the same error as with points
  }
  // The journal's rows in the order they finished (threads, MPI ranks): search.csv sorts them.
  const std::string rows_csv =
      sweep.points.empty() ? std::string{} : models::sorted_csv(sweep, models::finished_rows(sweep, journal));
  std::istringstream rows_in(rows_csv);
  const auto results = sweep.points.empty() ? std::vector<models::SearchResult>{}
                                            : models::read_search_results(plan, rows_in, journal.string(), limits);
  {
    sim::report::AtomicFileSet set(options.out);
    if (!sweep.points.empty()) set.add("search.csv", rows_csv);
    set.add("pareto.csv", pareto_csv(results));  // last: its presence means the set is complete
    set.commit();
  }
  if (!sweep.points.empty()) fs::remove(journal);
  fmt::print("{}", models::search_report(plan, results, limits));
  fmt::print("every simulated point: {}; the front: {}\n", csv.string(),
             (fs::path(options.out) / "pareto.csv").string());
  return 0;
}

}  // namespace

}  // namespace offsim::app
