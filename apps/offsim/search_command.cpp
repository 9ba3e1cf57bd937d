// `offsim search`: the fastest strategy for a base experiment's model and machine under limits
// (models/search.hpp states the method; docs/search.md shows its use).
#include <fmt/format.h>

#include <filesystem>
#include <fstream>

#include "apps/offsim/commands.hpp"
#include "apps/offsim/heap.hpp"
#include "apps/offsim/progress.hpp"
#include "models/search.hpp"
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

int search_or_throw(const SearchCliOptions& options) {
  namespace fs = std::filesystem;
  const models::ExperimentSpec base = models::load_experiment(options.experiment, options.overrides);
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

  fs::create_directories(options.out);
  const fs::path csv = fs::path(options.out) / "search.csv";
  models::Sweep sweep = models::search_sweep(options.experiment, plan);
  // The base's own overrides go with every point (before the point's strategy).
  for (auto& p : sweep.points)
    p.overrides.insert(p.overrides.begin(), options.overrides.begin(), options.overrides.end());
  models::SweepOptions run;
  run.out = csv;
  run.jobs = options.jobs;
  run.resume = options.resume;
  Progress progress("search", options.resume ? models::finished_rows(sweep, csv).size() : 0);
  run.progress = [&](std::size_t done, std::size_t total) { progress(done, total); };
  run.on_worker_start = back_thread_heap_with_huge_pages;
  if (!sweep.points.empty()) (void)models::run_sweep(sweep, run);
  const auto results =
      sweep.points.empty() ? std::vector<models::SearchResult>{} : models::read_search_results(plan, csv, limits);
  sim::report::write_file_atomically(fs::path(options.out) / "pareto.csv", pareto_csv(results));
  fmt::print("{}", models::search_report(plan, results, limits));
  fmt::print("every simulated point: {}; the front: {}\n", csv.string(),
             (fs::path(options.out) / "pareto.csv").string());
  return 0;
}

}  // namespace

}  // namespace offsim::app
