#include <fmt/format.h>
#include <filesystem>
#include <string_view>

#include "apps/offsim/commands.hpp"
#include "models/cost/calibration.hpp"
#include "models/experiment.hpp"
#include "models/regression.hpp"
#include "models/strategies/strategy_registry.hpp"
#include "models/transformer/model_parser.hpp"
#include "models/transformer/model_report.hpp"
#include "models/validation.hpp"
#include "offsim_git_hash.hpp"  // generated at every build: cmake/git_version.cmake
#include "sim/report/atomic_file.hpp"
#include "topologies/topology_report.hpp"

namespace offsim::app {

int run_command(const RunOptions& options) {
  std::vector<std::string> overrides = options.overrides;
  if (options.all_ranks) overrides.push_back("strategy.simulate=all_ranks");
  models::ExperimentSpec spec = models::load_experiment(options.config, overrides);
  // Only pipeline schedules are extrapolated; for other strategies the flag changes nothing.
  if (options.all_micro_batches) (void)models::strategy_kind(spec.strategy).simulate_all_micro_batches(spec.strategy);
  if (options.out_dir.empty()) {
    fmt::print("{}", models::text_report(spec, models::run_experiment(spec, {})));
    return 0;
  }
  const std::filesystem::path dir(options.out_dir);
  // The four files as one set: all written, then renamed into place together, so that an error
  // or an interrupt leaves the previous complete set (sim/report/atomic_file.hpp). timeline.csv
  // and trace.json are streamed into it while the run's data is alive, never held whole.
  sim::report::AtomicFileSet set(dir);
  models::RunExperimentOptions run_options;
  run_options.outputs_over_time = true;
  run_options.outputs = &set;
  run_options.trace = options.trace == "full"      ? models::TraceMode::full
                      : options.trace == "compact" ? models::TraceMode::compact
                                                   : models::TraceMode::automatic;
  if (options.trace_limit != 0) run_options.trace_event_limit = options.trace_limit;
  const models::ExperimentResult result = models::run_experiment(spec, run_options);
  fmt::print("{}", models::text_report(spec, result));
  set.add("config.resolved.yaml", models::resolved_config_yaml(spec));
  // summary.json last: its presence means the run's outputs are complete.
  set.add("summary.json", models::summary_json(spec, result, {OFFSIM_VERSION, OFFSIM_GIT_HASH}));
  set.commit();
  fmt::print("\nwrote {}/{{summary.json, timeline.csv, trace.json, config.resolved.yaml}}\n", dir.string());
  if (result.trace.compact) {
    fmt::print("{}", result.trace.limit != 0 ? fmt::format("the full trace would hold up to {} events, more than "
                                                           "--trace-limit {}: ",
                                                           result.trace.full_events, result.trace.limit)
                                             : std::string());
    fmt::print("{}\n", result.trace.note);
  }
  return 0;
}

int graph_command(const GraphOptions& options) {
  const models::ExperimentSpec spec = models::load_experiment(options.config, options.overrides);
  // Streamed a piece at a time; fmt::print throws on a failed write (exit 3, as every output).
  models::write_task_graph(spec, options.dot, [](std::string_view piece) { fmt::print("{}", piece); });
  return 0;
}

int topo_command(const TopoOptions& options) {
  sim::config::Context ctx(options.overrides);
  const sim::config::Node root = ctx.load_root(options.file);
  if (options.nodes > 0) {
    // Errors about it name the option as typed, not the override it becomes.
    const sim::config::Location typed{fmt::format("--nodes {}", options.nodes), 0, 0};
    if (!topo::describes_system(root)) {
      throw sim::config::ConfigError({sim::config::Diagnostic{
          typed, "",
          fmt::format("{} describes one node; --nodes applies to a system file (node:, nodes:, network:), such as "
                      "configs/hardware/frontier.yaml",
                      options.file)}});
    }
    ctx.add_file_overrides({{fmt::format("nodes={}", options.nodes), typed, true}});
  }
  auto machine = topo::parse_machine(root);
  ctx.finish();
  if (!machine) throw sim::config::ConfigError({});  // unreachable: finish() threw for the errors
  if (!options.dot_file.empty()) {
    sim::report::write_file_atomically(options.dot_file, topo::topology_dot(*machine));
  }
  if (!options.route.empty()) {
    fmt::print("{}", topo::describe_route(machine->topology, options.route[0], options.route[1]));
  } else if (options.json) {
    fmt::print("{}", topo::topology_json(*machine));
  } else {
    fmt::print("{}", topo::topology_summary(*machine));
  }
  return 0;
}

int model_command(const ModelOptions& options) {
  sim::config::Context ctx(options.overrides);
  const auto model = models::parse_model(ctx.load_root(options.file));
  ctx.finish();
  const models::ModelReportOptions report{options.micro_batch, options.tp};
  fmt::print("{}", options.json ? models::model_json(*model, report) : models::model_text(*model, report));
  return 0;
}

int calibrate_command(const CalibrateCliOptions& options) {
  models::CalibrateOptions o;
  for (const auto& f : options.files) o.files.emplace_back(f);
  o.device_kind = options.device_kind;
  o.filters = options.filters;
  o.command_line = options.command_line;
  o.reduce_scatter_from_all_reduce = options.reduce_scatter_from_all_reduce;
  if (!options.peak.empty()) {
    try {
      o.peak = sim::parse_flop_rate(options.peak);
    } catch (const sim::UnitError& e) {
      throw models::CalibrationError(fmt::format("--peak: {}", e.what()));
    }
  }
  if (!options.pinned_bandwidth.empty()) {
    try {
      o.pinned_bandwidth = sim::parse_bandwidth(options.pinned_bandwidth);
    } catch (const sim::UnitError& e) {
      throw models::CalibrationError(fmt::format("--pinned-bandwidth: {}", e.what()));
    }
  }
  std::vector<std::string> poor_fits;
  const std::string table = models::calibrate(o, &poor_fits);
  sim::report::write_file_atomically(options.out, table);
  fmt::print("wrote {}\n", options.out);
  for (const auto& fit : poor_fits) fmt::print(stderr, "warning: {}\n", fit);
  return 0;
}

int validate_command(const std::string& dir, bool json, const std::string& residuals_out) {
  const models::ValidationReport report = models::validate(dir);
  // The residual table the prediction intervals are drawn from (configs/calibration/validation-residuals.csv).
  if (!residuals_out.empty())
    sim::report::write_file_atomically(residuals_out, models::residuals_csv(report.residuals));
  fmt::print("{}", json ? models::validation_json(report) : models::validation_text(report));
  return report.passed ? 0 : 1;
}

int check_command(const std::string& dir, bool update) {
  const models::RegressionReport report = models::check_regressions(dir, update);
  fmt::print("{}", models::regression_text(report));
  return report.passed() ? 0 : 1;
}

}  // namespace offsim::app
