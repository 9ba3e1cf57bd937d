// What a run writes: the text report, summary.json, and config.resolved.yaml (every value read).
#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <optional>

#include "models/experiment.hpp"
#include "models/figures.hpp"
#include "models/intervals.hpp"
#include "models/strategies/strategy_registry.hpp"
#include "models/transformer/phases.hpp"
#include "sim/report/json_writer.hpp"
#include "sim/report/text_table.hpp"

namespace offsim::models {

using sim::config::Context;
using sim::config::MapReader;
using sim::config::Node;

namespace {

std::string phase_key(const std::string& phase) {
  return phase + "_s";
}

// nccl-tests' bus bandwidth: (g-1)/g x S / t for all-gather and reduce-scatter, twice that for
// all-reduce (the convention of bench/data/frontier-rccl-collectives.csv).
double bus_bandwidth(const CollectiveSpec& c, const ExperimentResult& r) {
  const double g = static_cast<double>(c.devices.size());
  const double factor = (c.operation == CollectiveKind::kAllReduce ? 2.0 : 1.0) * (g - 1.0) / g;
  const double t = r.iteration_time.seconds();
  return t > 0.0 ? factor * c.bytes.as_double() / t : 0.0;
}

}  // namespace

namespace {

// The effective configuration as a tree: maps keep reading order, numeric keys make sequences.
// (Children are a struct, not std::pair<std::string, ConfigTree>, which clang 14 with libstdc++ 12
// cannot instantiate inside ConfigTree: the fuzz build, docs/fuzzing.md.)
struct ConfigTree {
  struct Child;
  std::string value;
  bool leaf = false;
  std::vector<Child> children;
  ConfigTree& child(const std::string& key);
  void emit(YAML::Emitter& out) const;
};

struct ConfigTree::Child {
  std::string key;
  ConfigTree tree;
};

ConfigTree& ConfigTree::child(const std::string& key) {
  for (auto& [k, c] : children) {
    if (k == key) return c;
  }
  children.push_back({key, ConfigTree{}});
  return children.back().tree;
}

void ConfigTree::emit(YAML::Emitter& out) const {
  if (leaf) {
    // A block table (a GEMM grid) keeps its lines.
    if (value.find('\n') != std::string::npos) out << YAML::Literal;
    out << value;
    return;
  }
  const bool sequence = !children.empty() && std::all_of(children.begin(), children.end(), [](const Child& kv) {
    return !kv.key.empty() &&
           std::all_of(kv.key.begin(), kv.key.end(), [](unsigned char c) { return std::isdigit(c); });
  });
  if (sequence) {
    out << YAML::BeginSeq;
    for (const auto& [k, c] : children) c.emit(out);
    out << YAML::EndSeq;
    return;
  }
  out << YAML::BeginMap;
  for (const auto& [k, c] : children) {
    out << YAML::Key << k << YAML::Value;
    c.emit(out);
  }
  out << YAML::EndMap;
}

}  // namespace

std::string resolved_config_yaml(const ExperimentSpec& spec) {
  ConfigTree root;
  for (const auto& [path, value] : spec.effective) {
    ConfigTree* node = &root;
    std::size_t start = 0;
    while (true) {
      const std::size_t dot = path.find('.', start);
      node = &node->child(path.substr(start, dot == std::string::npos ? std::string::npos : dot - start));
      if (dot == std::string::npos) break;
      start = dot + 1;
    }
    node->leaf = true;
    node->value = value;
  }
  YAML::Emitter out;
  root.emit(out);
  return fmt::format(
      "# The configuration offsim simulated for {}: every value it read, after !include, set: and --set\n"
      "# (sources and notes omitted). It loads as an experiment by itself.\n{}\n",
      spec.file, out.c_str());
}

namespace {

// summary.json's headline figures, in its key order (a subset of the table, in another order).
const Figure* const kSummaryFeasible = figures_named({"feasible"}).front();
const std::vector<const Figure*> kSummaryFigures =
    figures_named({"iteration_time_s", "tokens_per_s", "model_tflops_per_device", "tflops_per_device", "mfu",
                   "exposed_communication_s", "model_states_bytes_per_device"});

void write_figure(sim::report::JsonWriter& j, const Figure& f, const ExperimentResult& r) {
  const double v = f.get(r);
  switch (f.kind) {
    case FigureKind::kFlag:
      j.field(f.name, v != 0.0);
      break;
    case FigureKind::kCount:
      j.field(f.name, static_cast<std::int64_t>(v));
      break;
    case FigureKind::kReal:
      j.field(f.name, v);
      break;
  }
}

// summary.json's interval_80: the 80% interval of the iteration time and throughput, from the
// validation residuals (models/intervals.hpp): the measured value is expected inside for 80% of
// runs like the pool's.
void write_interval(sim::report::JsonWriter& j, const ExperimentSpec& spec, const ExperimentResult& r) {
  if (const auto interval = prediction_interval(spec)) {
    const double t = r.iteration_time.seconds();
    j.key("interval_80").begin_object();
    const auto range = [&j](const char* key, double low, double high) {
      j.key(key).begin_array().value(low).value(high).end_array();
    };
    range("iteration_time_s", t * interval->low, t * interval->high);
    if (!std::holds_alternative<CollectiveSpec>(spec.strategy)) {
      // Throughput is work over time: the time's interval inverted.
      range("tflops_per_device", r.tflops_per_device / interval->high, r.tflops_per_device / interval->low);
      range("model_tflops_per_device", r.model_tflops_per_device / interval->high,
            r.model_tflops_per_device / interval->low);
    }
    j.field("pool", interval->pool).field("pool_rows", static_cast<std::uint64_t>(interval->rows));
    j.field("method", "split conformal on the validation residuals (configs/calibration/validation-residuals.csv)");
    j.end_object();
  }
}

// Step of summary_json: only for a compact trace (a full one's summary is as it was before compact
// traces existed).
void write_compact_trace(sim::report::JsonWriter& j, const ExperimentResult::Trace& trace) {
  if (!trace.compact) return;
  j.key("trace").begin_object();
  j.field("kind", std::string_view("compact"));
  j.field("full_trace_events", static_cast<std::uint64_t>(trace.full_events));
  if (trace.limit != 0) j.field("limit_events", static_cast<std::uint64_t>(trace.limit));
  if (trace.window_end_s) j.field("window_end_s", *trace.window_end_s);
  j.key("ranks").begin_array();
  for (const auto rank : trace.ranks) j.value(static_cast<std::uint64_t>(rank));
  j.end_array();
  j.key("devices").begin_array();
  for (const auto& d : trace.devices) j.value(d);
  j.end_array();
  j.field("holds", trace.note);
  j.end_object();
}

}  // namespace

std::string summary_json(const ExperimentSpec& spec, const ExperimentResult& r, const Provenance& p) {
  sim::report::JsonWriter j;
  j.begin_object();
  j.key("offsim").begin_object().field("version", p.version).field("git", p.git_hash).end_object();
  j.field("experiment", spec.name);
  j.field("config_file", spec.file);
  write_figure(j, *kSummaryFeasible, r);
  if (strategy_kind(spec.strategy).trains) {
    j.field("seq", spec.model.seq);
    j.field("model_context", spec.model.context > 0 ? spec.model.context : spec.model.seq);
  }
  j.key("defaults_applied").begin_array();
  for (const auto& d : spec.defaults_applied) j.value(d);
  j.end_array();
  j.key("infeasible_reasons").begin_array();
  for (const auto& reason : r.infeasible_reasons) j.value(reason);
  j.end_array();
  for (const Figure* f : kSummaryFigures) write_figure(j, *f, r);
  write_interval(j, spec, r);
  if (const auto* c = std::get_if<CollectiveSpec>(&spec.strategy))
    j.field("bus_bandwidth_bytes_per_s", bus_bandwidth(*c, r));
  j.key("phases").begin_object();
  // The three headline phases are always present, then any others the strategy reports.
  for (const std::string_view key : {phase::kForward, phase::kBackward, phase::kOptimizer})
    j.field(phase_key(std::string(key)), r.phase_seconds(key));
  for (const auto& ph : r.phases) {
    if (ph.phase != phase::kForward && ph.phase != phase::kBackward && ph.phase != phase::kOptimizer)
      j.field(phase_key(ph.phase), ph.time.seconds());
  }
  j.end_object();
  j.key("memory").begin_object();
  for (const auto& m : r.memory) {
    j.key(m.kind).begin_object();
    j.field("peak_bytes", m.peak.count).field("capacity_bytes", m.capacity.count).field("pool", m.fullest_pool);
    j.end_object();
  }
  j.end_object();
  j.key("links").begin_object();
  for (const auto& l : r.links) {
    j.key(l.link_class).begin_object();
    j.field("bytes", l.bytes)
        .field("busiest_link", l.busiest_link)
        .field("busiest_link_busy_s", l.busiest_link_busy.seconds())
        .field("busy_fraction",
               r.iteration_time.ps > 0 ? l.busiest_link_busy.seconds() / r.iteration_time.seconds() : 0.0);
    j.field("busiest_link_peak_bytes_per_s", l.peak_bytes_per_s);
    j.end_object();
  }
  j.end_object();
  if (spec.cost) {
    const CostFigures f = cost_figures(*spec.cost, r);
    j.key("cost").begin_object();
    j.field("nodes", static_cast<std::uint64_t>(r.nodes)).field("node_hours_per_iteration", f.node_hours_per_iteration);
    const auto optional = [&](const char* key, const std::optional<double>& v) {
      if (v) j.field(key, *v);
    };
    if (!spec.cost->currency.empty()) j.field("currency", spec.cost->currency);
    optional("energy_kwh_per_iteration", f.energy_kwh_per_iteration);
    optional("price_per_iteration", f.price_per_iteration);
    optional("energy_kwh_per_million_tokens", f.energy_kwh_per_million_tokens);
    optional("price_per_million_tokens", f.price_per_million_tokens);
    optional("time_to_train_s", f.time_to_train_s);
    optional("node_hours_to_train", f.node_hours_to_train);
    optional("energy_kwh_to_train", f.energy_kwh_to_train);
    optional("price_to_train", f.price_to_train);
    j.end_object();
  }
  j.key("simulation").begin_object();
  j.field("ranks", static_cast<std::uint64_t>(r.ranks));
  j.field("ranks_simulated", static_cast<std::uint64_t>(r.simulated_ranks));
  j.field("tasks", static_cast<std::uint64_t>(r.tasks));
  j.field("events", r.events);
  j.end_object();
  write_compact_trace(j, r.trace);
  j.key("approximations").begin_array();
  for (const auto& a : r.approximations) j.value(a);
  j.end_array();
  j.key("warnings").begin_array();
  for (const auto& w : spec.warnings) j.value(w.str());
  j.end_array();
  j.key("config").begin_object();
  for (const auto& [key, value] : spec.effective) j.field(key, value);
  j.end_object();
  j.end_object();
  return j.str();
}

namespace {

// Step 1: the title (what runs on which machine), the sequence and batch, and the defaults the
// experiment did not give.
std::string report_header(const ExperimentSpec& spec, const ExperimentResult& r) {
  std::string out;
  if (const auto* c = std::get_if<CollectiveSpec>(&spec.strategy)) {
    out += fmt::format("offsim: {}  (a collective of {} over {} ranks on {})\n\n", spec.name,
                       sim::format_bytes(c->bytes), r.ranks, spec.hardware->name);
  } else {
    const ParameterCounts params = count_parameters(spec.model);
    out += fmt::format("offsim: {}  ({} with {:.3f} B parameters, {} ranks on {})\n\n", spec.name, spec.model.name,
                       static_cast<double>(params.total) / 1e9, r.ranks, spec.hardware->name);
  }
  if (strategy_kind(spec.strategy).trains) {
    const std::int64_t context = spec.model.context > 0 ? spec.model.context : spec.model.seq;
    out += fmt::format("sequence length      {} tokens{}, micro-batch {}, {} micro-batch{} per step\n", spec.model.seq,
                       spec.model.seq == context ? " (the model's context)"
                                                 : fmt::format(" (training.seq; the model's context is {})", context),
                       spec.training.micro_batch, spec.training.grad_accum, spec.training.grad_accum == 1 ? "" : "es");
  }
  if (!spec.defaults_applied.empty()) {
    // One per line: each is a value the experiment did not give (configs/defaults.yaml).
    for (std::size_t i = 0; i < spec.defaults_applied.size(); ++i) {
      out += fmt::format("{:<21}{}\n", i == 0 ? "defaults applied" : "", spec.defaults_applied[i]);
    }
  }
  return out;
}

// Step 2: whether the run fits, and each overflow; pools that overflow alike (every GPU of a
// data-parallel group) are named on one line.
std::string feasibility_lines(const ExperimentResult& r) {
  std::string out = fmt::format("feasible             {}\n", r.feasible ? "yes" : "NO");
  std::vector<std::pair<std::string, std::vector<std::string>>> overflows;  // what, which pools
  for (const auto& reason : r.infeasible_reasons) {
    const auto space = reason.find(' ');
    const std::string pool = reason.substr(0, space), what = reason.substr(space + 1);
    auto it = std::find_if(overflows.begin(), overflows.end(), [&](const auto& o) { return o.first == what; });
    if (it == overflows.end()) {
      overflows.push_back({what, {pool}});
    } else {
      it->second.push_back(pool);
    }
  }
  for (const auto& [what, pools] : overflows) {
    if (pools.size() == 1) {
      out += fmt::format("  {} {}\n", pools.front(), what);
    } else {
      constexpr std::size_t kNamed = 3;
      const std::vector<std::string> named(pools.begin(), pools.begin() + std::min(kNamed, pools.size()));
      out += fmt::format("  {} pools ({}{}) each {}\n", pools.size(), fmt::join(named, ", "),
                         pools.size() > kNamed ? ", ..." : "", what);
    }
  }
  return out;
}

// Step 3: the headline figures: the iteration time, then a collective's bus bandwidth or a
// training run's throughput, model states and MFU. An infeasible run's figures are what it would
// do with enough memory: said on each line.
std::string headline_figures(const ExperimentSpec& spec, const ExperimentResult& r) {
  const std::string if_it_fit = r.feasible ? "" : "  (if it fit: it does not)";
  std::string out = fmt::format("iteration time       {}{}\n", sim::format_time(r.iteration_time), if_it_fit);
  const auto interval = prediction_interval(spec);
  if (interval) {
    const double t = r.iteration_time.seconds();
    out += fmt::format("  80% interval       {} to {} (validation residuals of {}, {} rows)\n",
                       sim::format_time(sim::seconds_to_time(t * interval->low)),
                       sim::format_time(sim::seconds_to_time(t * interval->high)), interval->pool, interval->rows);
  }
  if (const auto* collective = std::get_if<CollectiveSpec>(&spec.strategy)) {
    out += fmt::format("bus bandwidth        {} (as nccl-tests report it)\n\n",
                       sim::format_bandwidth(sim::Bandwidth{bus_bandwidth(*collective, r)}));
  } else {
    out += fmt::format("TFLOPS per device    {:.1f} with recomputation (Megatron's count), {:.1f} model{}\n",
                       r.tflops_per_device, r.model_tflops_per_device, if_it_fit);
    if (interval) {
      out += fmt::format("  80% interval       {:.1f} to {:.1f} ({:.1f} to {:.1f} model)\n",
                         r.tflops_per_device / interval->high, r.tflops_per_device / interval->low,
                         r.model_tflops_per_device / interval->high, r.model_tflops_per_device / interval->low);
    }
    out += fmt::format("tokens per second    {:.0f} (whole job){}\n", r.tokens_per_s, if_it_fit);
    out += fmt::format("model states         {} per device\n", sim::format_bytes(r.model_states_per_device));
    out += fmt::format("MFU                  {:.1f}% of {}{}\n\n", 100.0 * r.mfu,
                       sim::format_flop_rate(spec.device.peak_matrix_bf16), if_it_fit);
  }
  return out;
}

// Step 4: the tables of rank 0's phases, the memory kinds' fullest pools and the link classes,
// shares of the iteration time `total` (seconds).
std::string breakdown_tables(const ExperimentResult& r, double total) {
  sim::report::TextTable phases({"phase (rank 0)", "time", "share"});
  for (const auto& p : r.phases) {
    phases.add_row({p.phase, sim::format_time(p.time),
                    fmt::format("{:.1f}%", total > 0 ? 100.0 * p.time.seconds() / total : 0.0)});
  }
  std::string out = phases.str() + "\n";

  sim::report::TextTable memory({"memory", "fullest pool", "peak", "capacity", "use"});
  for (const auto& m : r.memory) {
    memory.add_row(
        {m.kind, m.fullest_pool, sim::format_bytes(m.peak), sim::format_bytes(m.capacity),
         fmt::format("{:.1f}%", m.capacity.count > 0 ? 100.0 * m.peak.as_double() / m.capacity.as_double() : 0.0)});
  }
  out += memory.str() + "\n";

  sim::report::TextTable links({"link class", "bytes moved", "busiest link", "busy", "peak rate"});
  for (const auto& l : r.links) {
    links.add_row({l.link_class, sim::format_bytes(sim::Bytes{static_cast<std::int64_t>(l.bytes)}), l.busiest_link,
                   fmt::format("{:.1f}%", total > 0 ? 100.0 * l.busiest_link_busy.seconds() / total : 0.0),
                   sim::format_bandwidth(sim::Bandwidth{l.peak_bytes_per_s})});
  }
  out += links.str() + "\n";
  return out;
}

// Step 5: what an iteration costs (node-hours, energy, price), per million tokens, and to train
// on the token budget.
std::string cost_lines(const CostSpec& cost, const ExperimentResult& r) {
  const CostFigures f = cost_figures(cost, r);
  const std::string& cur = cost.currency;
  std::string out = fmt::format("cost                 {} node{}: {:.4g} node-hours per iteration", r.nodes,
                                r.nodes == 1 ? "" : "s", f.node_hours_per_iteration);
  if (f.energy_kwh_per_iteration) out += fmt::format(", {:.4g} kWh", *f.energy_kwh_per_iteration);
  if (f.price_per_iteration) out += fmt::format(", {:.4g} {}", *f.price_per_iteration, cur);
  out += "\n";
  if (f.energy_kwh_per_million_tokens || f.price_per_million_tokens) {
    out += "per million tokens  ";
    if (f.energy_kwh_per_million_tokens) out += fmt::format(" {:.4g} kWh", *f.energy_kwh_per_million_tokens);
    if (f.price_per_million_tokens) out += fmt::format(" {:.4g} {}", *f.price_per_million_tokens, cur);
    out += "\n";
  }
  if (f.time_to_train_s) {
    out += fmt::format("to train on {:.3g} tokens: {:.1f} days, {:.4g} node-hours", *cost.token_budget,
                       *f.time_to_train_s / 86400.0, *f.node_hours_to_train);
    if (f.energy_kwh_to_train) out += fmt::format(", {:.4g} MWh", *f.energy_kwh_to_train / 1000.0);
    if (f.price_to_train) out += fmt::format(", {:.4g} {}", *f.price_to_train, cur);
    out += "\n";
  }
  out += "\n";
  return out;
}

// Step 6: the bottleneck: rank 0's largest phase (the first of equals) and the communication
// left exposed after backward, as shares of the iteration time `total` (seconds).
std::string bottleneck_line(const ExperimentResult& r, double total) {
  const PhaseTime* largest = nullptr;
  for (const auto& p : r.phases) {
    if (!largest || p.time > largest->time) largest = &p;
  }
  if (!largest || !(total > 0)) return "";
  std::string out = fmt::format("bottleneck: {} takes {:.0f}% of the iteration", largest->phase,
                                100.0 * largest->time.seconds() / total);
  const double exposed = r.phase_seconds(phase::kExposedCommunication);
  out += fmt::format("; communication left exposed after backward is {:.1f}%.\n", 100.0 * exposed / total);
  return out;
}

}  // namespace

std::string text_report(const ExperimentSpec& spec, const ExperimentResult& r) {
  const bool collective = !strategy_kind(spec.strategy).trains;
  const double total = r.iteration_time.seconds();
  std::string out = report_header(spec, r);
  out += feasibility_lines(r);
  out += headline_figures(spec, r);
  out += breakdown_tables(r, total);
  if (spec.cost && !collective) out += cost_lines(*spec.cost, r);
  if (!collective) out += bottleneck_line(r, total);
  out += "\napproximations in this model:\n";
  for (const auto& a : r.approximations) out += fmt::format("  - {}\n", a);
  for (const auto& w : spec.warnings) out += fmt::format("warning: {}\n", w.str());
  return out;
}

}  // namespace offsim::models
