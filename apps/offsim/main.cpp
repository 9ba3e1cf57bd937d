// offsim: simulate offloaded and partitioned distributed training of transformer models.
// main() is the only place that maps exceptions to exit codes (apps/offsim/exit_codes.hpp): 2 = bad
// input, 3 = the simulation cannot be done on this machine, 70 = internal error (a bug).
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <array>
#include <cctype>
#include <cstdint>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <limits>
#include <stdexcept>
#include <string>
#include <string_view>

#include "apps/offsim/commands.hpp"
#include "apps/offsim/exit_codes.hpp"
#include "apps/offsim/heap.hpp"
#include "models/experiment.hpp"
#include "models/strategies/value_ranges.hpp"
#include "offsim_git_hash.hpp"  // generated at every build: cmake/git_version.cmake
#include "sim/report/atomic_file.hpp"

int main(int argc, char** argv) {
  offsim::app::keep_freed_memory();
  offsim::app::back_heap_with_huge_pages();
  // SIGINT / SIGTERM / SIGHUP remove the outputs' temporaries before ending the process.
  offsim::sim::report::install_interrupt_cleanup();
  using namespace offsim;
  CLI::App app{"offsim: a discrete-event simulator of offloaded and partitioned distributed training of transformers"};
  app.set_version_flag("--version", fmt::format("offsim {} ({})", OFFSIM_VERSION, OFFSIM_GIT_HASH));
  app.require_subcommand(1);
  app.footer("Environment: OFFSIM_HUGE_PAGES=0 keeps the heap on small pages (docs/adr/0009).");

  app::RunOptions run;
  auto* run_cmd = app.add_subcommand("run", "simulate one training iteration of an experiment and print the report");
  run_cmd->add_option("config", run.config, "experiment YAML (e.g. configs/experiments/gpt3-1.3b-dp8-frontier.yaml)")
      ->required();
  run_cmd->add_option("--set", run.overrides, "override a value: --set key.path=value (repeatable)");
  run_cmd->add_flag("--all-ranks", run.all_ranks,
                    "simulate every rank even when one node could stand for all (rank symmetry)");
  run_cmd->add_flag("--all-micro-batches", run.all_micro_batches,
                    "megatron: simulate every micro-batch instead of extrapolating a long schedule from its steady "
                    "state (pp and 2 pp micro-batches)");
  auto* run_out = run_cmd->add_option(
      "--out", run.out_dir,
      "write DIR/summary.json, DIR/timeline.csv (memory and link rates over time), DIR/trace.json "
      "(Chrome trace for Perfetto) and DIR/config.resolved.yaml (every value the run read, after includes "
      "and overrides; it runs as an experiment itself), each atomically");
  run_cmd
      ->add_option("--trace", run.trace,
                   "with --out: full (every simulated rank's tasks, memory and link rates), compact (those of the "
                   "first and last simulated rank, and the link rates per class and direction of every link) or "
                   "auto: compact when the full trace.json would hold more than --trace-limit events")
      ->check(CLI::IsMember({"auto", "full", "compact"}))
      ->default_str("auto")
      ->needs(run_out);
  run_cmd
      ->add_option(
          "--trace-limit", run.trace_limit,
          fmt::format(
              "events above which --trace auto writes the compact trace (counted before writing, "
              "an upper bound: about 60 bytes of files each; default {}); a compact trace whose two ranks alone hold "
              "more covers the start of the run up to that many",
              offsim::models::kDefaultTraceEventLimit))
      ->check(CLI::Range(std::size_t{1}, std::numeric_limits<std::size_t>::max()))
      ->needs(run_out);

  app::GraphOptions graph;
  auto* graph_cmd = app.add_subcommand("graph", "print the task graph of one iteration without running it");
  graph_cmd->add_option("config", graph.config, "experiment YAML")->required();
  graph_cmd->add_option("--set", graph.overrides, "override a value: --set key.path=value (repeatable)");
  graph_cmd->add_flag("--dot", graph.dot, "Graphviz DOT instead of text");

  app::TopoOptions topo_opts;
  auto* topo_cmd = app.add_subcommand("topo", "describe a machine: summary, JSON, Graphviz, routes");
  topo_cmd->add_option("file", topo_opts.file, "machine YAML (configs/hardware/*.yaml: a node or a system)")
      ->required();
  topo_cmd->add_option("--nodes", topo_opts.nodes, "build N nodes of a system file (default: as in the file)")
      ->check(CLI::PositiveNumber);
  topo_cmd->add_flag("--json", topo_opts.json, "devices and directed links as JSON");
  topo_cmd->add_option("--dot", topo_opts.dot_file, "write a Graphviz drawing of the machine to FILE");
  topo_cmd->add_option("--route", topo_opts.route, "show the links a transfer from A to B crosses")->expected(2);
  topo_cmd->add_option("--set", topo_opts.overrides, "override a value: --set key.path=value (repeatable)");

  app::ModelOptions model_opts;
  auto* model_cmd = app.add_subcommand("model", "a model's parameter counts, GEMM shapes, FLOPs and activation memory");
  model_cmd->add_option("file", model_opts.file, "model YAML (configs/models/*.yaml)")->required();
  model_cmd->add_flag("--json", model_opts.json, "as JSON");
  model_cmd->add_option("--micro-batch", model_opts.micro_batch, "sequences per micro-batch (default 1)")
      ->check(CLI::PositiveNumber);
  model_cmd->add_option("--tp", model_opts.tp, "tensor-parallel degree for the GEMM shapes (default 1)")
      ->check(CLI::PositiveNumber);
  model_cmd->add_option("--set", model_opts.overrides, "override a value: --set key.path=value (repeatable)");

  app::CalibrateCliOptions cal;
  auto* cal_cmd = app.add_subcommand(
      "calibrate", "fit a cost table to microbenchmark CSVs (bench/hip/README.md) or offload training timings");
  cal_cmd->add_option("csv", cal.files, "measurement CSV files")->required();
  cal_cmd->add_option("--device", cal.device_kind, "device kind the table is for (e.g. mi250x-gcd)")->required();
  cal_cmd->add_option("--out", cal.out, "the YAML table to write (e.g. configs/calibration/KIND.measured.yaml)")
      ->required();
  cal_cmd->add_option("--filter", cal.filters, "keep rows where column=value (repeatable)");
  cal_cmd->add_option("--peak", cal.peak, "peak rate for GEMM efficiencies, e.g. \"191.5 TFLOP/s\"");
  cal_cmd->add_option("--pinned-bandwidth", cal.pinned_bandwidth,
                      "the host link's pinned copy rate, for offload training timings, e.g. \"25 GB/s\"");
  cal_cmd->add_flag("--reduce-scatter-from-all-reduce", cal.reduce_scatter_from_all_reduce,
                    "when only all_reduce was measured, write reduce_scatter fits from it (a ring all-reduce is a "
                    "reduce-scatter then an all-gather: half its time at the same bus bandwidth)");

  app::SweepCliOptions sweep_opts;
  auto* sweep_cmd = app.add_subcommand(
      "sweep",
      "run every point of a sweep file (axes of overrides over a base experiment) into one CSV, on --jobs threads, "
      "or across an MPI job: mpirun -n N offsim sweep FILE --out CSV (rank 0 writes the file)");
  sweep_cmd->add_option("file", sweep_opts.file, "sweep YAML (configs/sweeps/*.yaml)")->required();
  sweep_cmd->add_option("--out", sweep_opts.out, "results CSV: one row per point, appended as points finish");
  sweep_cmd->add_option("--jobs", sweep_opts.jobs, "points simulated at once (threads; default 1)")
      ->check(CLI::PositiveNumber);
  sweep_cmd->add_flag("--resume", sweep_opts.resume, "skip the points already in --out (after an interruption)");
  sweep_cmd->add_option("--best", sweep_opts.best,
                        "after the sweep, rank the feasible points by a column (e.g. tflops_per_device)");
  sweep_cmd->add_option("--top", sweep_opts.top, "how many points --best shows (default 5)")
      ->check(CLI::PositiveNumber);
  sweep_cmd->add_flag("--rank-only", sweep_opts.best_only, "with --best: rank the existing --out without running");
  sweep_cmd
      ->add_option("--tie", sweep_opts.tie,
                   "with --best: points within this fraction of the best are called tied (default 0.05, the "
                   "validation's mean error over its bounded rows, docs/validation.md)")
      ->check(CLI::Range(0.0, 1.0));
  sweep_cmd
      ->add_option("--fidelity", sweep_opts.fidelity,
                   "collectives of every point: analytic (default; link bytes still counted), flow, or experiment "
                   "(as each file says)")
      ->check(CLI::IsMember({"analytic", "flow", "experiment"}));

  std::string validate_dir = "configs/validation";
  bool validate_json = false;
  auto* validate_cmd = app.add_subcommand("validate",
                                          "run every validation case (predictions against published measurements) and "
                                          "print the errors; exit 1 if a bound fails");
  auto* validate_dir_opt = validate_cmd->add_option(
      "dir", validate_dir,
      "folder of case files, or one case file (default configs/validation, found from here or a parent folder)");
  validate_cmd->add_flag("--json", validate_json, "as JSON");
  std::string validate_residuals;
  validate_cmd->add_option("--residuals", validate_residuals,
                           "also write the timing rows' residuals (the table the 80% prediction intervals are drawn "
                           "from; shipped as configs/calibration/validation-residuals.csv) to this CSV, atomically");

  std::vector<std::string> diff_runs;
  auto* diff_cmd =
      app.add_subcommand("diff", "two runs side by side: changed settings, then every figure and its change");
  diff_cmd->add_option("runs", diff_runs, "two summary.json files or run --out folders (A then B)")
      ->required()
      ->expected(2);

  std::string check_dir = "configs/regression";
  bool check_update = false;
  auto* check_cmd = app.add_subcommand(
      "check", "re-run every regression case and name each predicted figure that moved; exit 1 if any did");
  auto* check_dir_opt = check_cmd->add_option(
      "dir", check_dir,
      "folder of regression cases, or one case file (default configs/regression, found from here or a parent folder)");
  check_cmd->add_flag(
      "--update", check_update,
      "re-record the cases whose predictions moved beyond their tolerance (the others stay as they are)");

  std::string list_what;
  auto* list_cmd = app.add_subcommand(
      "list",
      "what an experiment can name: machines (and the tables each implies), GPU device kinds, calibration "
      "tables, models, strategies (all of them when none is given)");
  list_cmd->add_option("what", list_what, "machines, devices, calibrations, models or strategies")
      ->check(CLI::IsMember({"machines", "devices", "calibrations", "models", "strategies"}));

  app::EstimateOptions est;
  auto* est_cmd = app.add_subcommand(
      "estimate",
      "memory per tier per GPU and the iteration time of a DeepSpeed ds_config.json with a Hugging Face config.json "
      "on N GPUs, beside DeepSpeed's own estimate_zero2/zero3_model_states_mem_needs figures");
  est_cmd->add_option("ds_config", est.ds_config, "DeepSpeed ds_config.json")->required();
  est_cmd->add_option("--model", est.model, "Hugging Face config.json (or an offsim model YAML)")->required();
  est_cmd->add_option("--gpus", est.gpus, "GPUs (data-parallel ranks; default 1)")->check(CLI::PositiveNumber);
  est_cmd->add_option("--machine", est.machine,
                      "a machine of configs/hardware by name or file (default dgx-h100; offsim list machines)");
  est_cmd->add_option("--seq", est.seq, "sequence length (default: the model's context, up to 8,192 tokens)")
      ->check(CLI::PositiveNumber);
  est_cmd->add_option("--set", est.overrides, "override a value of the experiment: --set key.path=value");

  app::SearchCliOptions search_opts;
  auto* search_cmd = app.add_subcommand(
      "search",
      "the fastest strategy for an experiment's model on its machine under limits: enumerates data parallelism "
      "(ZeRO 0-3, CPU offload, tp) and Megatron 3D parallelism over micro-batches at a fixed global batch, prunes by "
      "model-state memory, simulates the rest as a sweep (on --jobs threads, or across an MPI job as sweep "
      "does: mpirun -n N offsim search ..., rank 0 writes the files) and prints the Pareto front (docs/search.md)");
  search_cmd->add_option("experiment", search_opts.experiment, "base experiment: machine, calibration, model, training")
      ->required();
  search_cmd->add_option("--out", search_opts.out, "folder for search.csv (every point) and pareto.csv")->required();
  search_cmd->add_option("--set", search_opts.overrides, "override a value of the base: --set key.path=value");
  search_cmd->add_option("--max-hbm", search_opts.max_hbm,
                         "HBM per GPU the run may use (e.g. \"64 GB\"; default: all)");
  // The search's values are checked against the ranges the experiment readers use
  // (models/strategies/value_ranges.hpp): a --tp or --micro-batch of 0 divided by zero.
  const auto in_range = [](const auto& range) { return CLI::Range(range.min, range.max); };
  search_cmd->add_option("--gpus", search_opts.gpus, "GPUs to train on (default: the base experiment's)")
      ->check(in_range(models::ranges::kParallelSize));
  search_cmd->add_option("--max-nodes", search_opts.max_nodes, "search 1, 2, 4, ... nodes up to this many")
      ->check(in_range(models::ranges::kParallelSize));
  search_cmd
      ->add_option("--global-batch", search_opts.global_batch,
                   "sequences per iteration (default: the base experiment's)")
      ->check(CLI::PositiveNumber);
  search_cmd
      ->add_option("--price", search_opts.price_per_gpu_hour,
                   "price of a GPU-hour: costs per million tokens in that currency (default: GPU-hours)")
      ->check(CLI::NonNegativeNumber);
  search_cmd
      ->add_option("--kind", search_opts.kinds,
                   "strategy kinds (data_parallel, megatron; default both, megatron alone when the base trains in fp8)")
      ->check(CLI::IsMember({"data_parallel", "megatron"}));
  search_cmd->add_option("--tp", search_opts.tp, "tensor-parallel sizes (default 1, 2, 4, ... up to a node)")
      ->check(in_range(models::ranges::kParallelSize));
  search_cmd->add_option("--pp", search_opts.pp, "pipeline sizes (default: divisors of the layer count)")
      ->check(in_range(models::ranges::kParallelSize));
  search_cmd
      ->add_option("--zero", search_opts.zero_stages, "ZeRO stages (default 0-3; Megatron 0-1, and 2 with pp > 1)")
      ->check(in_range(models::ranges::kZeroStage));
  search_cmd->add_option("--micro-batch", search_opts.micro_batches, "micro-batch sizes (default 1, 2, 4, 8)")
      ->check(in_range(models::ranges::kBatch));
  search_cmd->add_option("--offload", search_opts.offload, "CPU optimizer offload: none, cpu or both (default both)")
      ->check(CLI::IsMember({"none", "cpu", "both"}));
  search_cmd->add_option("--jobs", search_opts.jobs, "points simulated at once (threads; default 1)")
      ->check(CLI::PositiveNumber);
  search_cmd->add_flag("--resume", search_opts.resume, "keep the points already in --out/search.csv");

  // Every command that reads configuration files takes --allow-include-outside, which widens what
  // `!include` may name (sim/config/config_reader.hpp) for this process and the ones it starts.
  bool allow_include_outside = false;
  for (auto* cmd : {run_cmd, graph_cmd, topo_cmd, model_cmd, sweep_cmd, validate_cmd, check_cmd, search_cmd}) {
    cmd->add_flag(
        "--allow-include-outside", allow_include_outside,
        "let !include name files outside the experiment's folder and its project (the folder holding configs/); "
        "also: OFFSIM_ALLOW_INCLUDE_OUTSIDE=1");
  }

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);
    return code == 0 ? 0 : app::kExitBadInput;
  }

  if (allow_include_outside) ::setenv(sim::config::kAllowIncludeOutsideEnv, "1", 1);

  // A folder argument: as given; the default is also looked for in the parent folders, so that
  // `offsim validate` works from anywhere inside the repository.
  const auto folder = [](const std::string& dir, bool given, const char* command) {
    namespace fs = std::filesystem;
    if (fs::is_directory(dir) || (given && fs::is_regular_file(dir))) return dir;  // a folder of cases, or one case
    if (!given) {
      for (fs::path at = fs::current_path(); !at.empty(); at = at.parent_path()) {
        if (fs::is_directory(at / dir)) return (at / dir).string();
        if (at == at.parent_path()) break;
      }
      throw std::invalid_argument(fmt::format(
          "{}: no such folder here or in any parent folder; run from the offsim repository or give it: offsim {} DIR",
          dir, command));
    }
    throw std::invalid_argument(fmt::format("{}: no such folder or case file", dir));
  };

  // The selected command's exit code (0 when no command was selected: --help and --version ran).
  const auto run_selected = [&]() -> int {
    if (*validate_cmd) validate_dir = folder(validate_dir, validate_dir_opt->count() > 0, "validate");
    if (*check_cmd) check_dir = folder(check_dir, check_dir_opt->count() > 0, "check");
    if (*run_cmd) return app::run_command(run);
    if (*sweep_cmd) return app::sweep_command(sweep_opts);
    if (*check_cmd) return app::check_command(check_dir, check_update);
    if (*diff_cmd) return app::diff_command(diff_runs[0], diff_runs[1]);
    if (*graph_cmd) return app::graph_command(graph);
    if (*topo_cmd) return app::topo_command(topo_opts);
    if (*model_cmd) return app::model_command(model_opts);
    if (*validate_cmd) return app::validate_command(validate_dir, validate_json, validate_residuals);
    if (*cal_cmd) {
      // The command line is recorded in the table, with the program name as users type it and
      // arguments a shell would split or interpret ("25 GB/s", gcds=8|32) quoted, so it re-runs.
      std::string line = "offsim";
      for (int i = 1; i < argc; ++i) {
        const std::string_view arg = argv[i];
        const bool plain = !arg.empty() && std::all_of(arg.begin(), arg.end(), [](char c) {
          return std::isalnum(static_cast<unsigned char>(c)) ||
                 std::string_view("_-./=:,+").find(c) != std::string_view::npos;
        });
        line += plain ? fmt::format(" {}", arg) : fmt::format(" '{}'", arg);
      }
      cal.command_line = line;
      return app::calibrate_command(cal);
    }
    if (*list_cmd) return app::list_command(list_what);
    if (*est_cmd) return app::estimate_command(est);
    if (*search_cmd) return app::search_command(search_opts);
    return 0;
  };
  int code = 0;
  try {
    code = run_selected();
  } catch (...) {
    const app::ExitReport report =
        app::report_exception(std::current_exception(), fmt::format("{} ({})", OFFSIM_VERSION, OFFSIM_GIT_HASH));
    fmt::print(stderr, "{}", report.message);
    code = report.code;
  }
  // What a command printed is part of its result (apps/offsim/exit_codes.hpp): a report lost to a full disk
  // behind a redirection is an output that cannot be written, as for --out.
  return app::with_output_flushed(stdout, code);
}
