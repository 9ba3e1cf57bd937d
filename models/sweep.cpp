#include "models/sweep.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <charconv>
#include <cmath>
#include <fstream>
#include <mutex>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "models/experiment.hpp"
#include "models/figures.hpp"
#include "models/intervals.hpp"
#include "models/strategies/layout_cache.hpp"
#include "sim/config/config_reader.hpp"
#include "sim/exec/task_graph.hpp"
#include "sim/report/atomic_file.hpp"
#include "sim/report/csv.hpp"
#include "sim/report/text_table.hpp"

namespace offsim::models {

using sim::report::csv_field;
using sim::report::parse_csv_line;

using sim::config::MapReader;
using sim::config::Node;

namespace {

// The most points a sweep may have, and so the most values of one axis (docs/fuzzing.md): a
// hundred thousand simulations is days of work; larger sweeps are split.
constexpr std::size_t kMaxSweepPoints = 100'000;

// One axis: a single key, or several keys zipped (same number of values each).
struct Axis {
  std::vector<std::string> keys;
  std::vector<std::vector<std::string>> values;  // [value index][key]
};

std::string number_text(double v) {
  if (std::fabs(v - std::round(v)) < 1e-9 && std::fabs(v) < 1e15) return fmt::format("{}", std::llround(v));
  return fmt::format("{}", v);
}

std::optional<double> as_number(const std::string& s) {
  double v = 0.0;
  const auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc{} || ptr != s.data() + s.size()) return std::nullopt;
  return v;
}

// `{key, values: [...]}` or `{key, range: {from, to, step}}`: the key and its values.
std::optional<std::pair<std::string, std::vector<std::string>>> parse_key_values(const Node& node) {
  auto& ctx = node.context();
  const std::size_t errors_before = ctx.error_count();
  MapReader r(node);
  const auto key = r.required<std::string>("key");
  std::vector<std::string> values;
  if (auto list = r.child("values")) {
    for (const auto& item : list->items()) {
      if (auto v = item.as<std::string>()) values.push_back(*v);
    }
  } else if (auto range = r.child("range")) {
    MapReader rr(*range);
    const auto from = rr.required<double>("from");
    const auto to = rr.required<double>("to");
    const auto step = rr.required<double>("step");
    if (step.valid && !(step.value > 0.0)) {
      ctx.error(step.loc, range->child_path("step"), "expected a positive step");
    } else if (from.valid && to.valid && step.valid &&
               (to.value - from.value) / step.value >= static_cast<double>(kMaxSweepPoints)) {
      ctx.error(range->location(), range->path(),
                fmt::format("more than {} values (offsim's limit for a sweep)", kMaxSweepPoints));
    } else if (from.valid && to.valid && step.valid) {
      // Inclusive of `to` (within a millionth of a step, so 0.1 steps land on it).
      for (std::size_t i = 0; i <= kMaxSweepPoints; ++i) {
        const double v = from.value + static_cast<double>(i) * step.value;
        if (v > to.value + 1e-6 * step.value) break;
        values.push_back(number_text(v));
      }
    }
  } else {
    ctx.error(node.location(), node.path(), "expected values: [...] or range: {from, to, step}");
  }
  if (!key.valid) return std::nullopt;
  if (key.value.find_first_not_of(" \t") == std::string::npos) {
    // An empty key sets nothing: every point would be an error row.
    ctx.error(key.loc, node.child_path("key"), "expected a key path such as training.micro_batch, got an empty key");
    return std::nullopt;
  }
  if (values.empty()) {
    // Said once: a range or values already reported have no values either.
    if (ctx.error_count() == errors_before) ctx.error(node.location(), node.path(), "the axis has no values");
    return std::nullopt;
  }
  return std::pair{key.value, values};
}

struct Filter {
  std::string key;
  std::string op;
  std::string value;
  [[nodiscard]] bool keep(const std::string& actual) const {
    const auto a = as_number(actual);
    const auto b = as_number(value);
    if (a && b) {
      if (op == "<=") return *a <= *b;
      if (op == ">=") return *a >= *b;
      if (op == "<") return *a < *b;
      if (op == ">") return *a > *b;
      if (op == "==") return *a == *b;
      return *a != *b;
    }
    if (op == "==") return actual == value;
    if (op == "!=") return actual != value;
    return false;
  }
};

// The CSV's figure columns: every headline figure but `feasible`, which the status column says.
const std::vector<const Figure*> kCsvFigures = [] {
  std::vector<const Figure*> out;
  for (const Figure& f : headline_figures()) {
    if (f.kind != FigureKind::kFlag) out.push_back(&f);
  }
  return out;
}();

// Step of read_axis: `{zip: [{key, values}, ...]}` into `axis`, one value per member at each
// index; false (errors already reported) when a member is bad, none is given or lengths differ.
bool read_zip_axis(sim::config::Context& ctx, const Node& item, Axis& axis) {
  MapReader z(item);
  auto members = z.required_child("zip", "a list of {key, values}");
  std::size_t length = 0;
  bool ok = members.has_value();
  if (members && members->is_sequence() && members->yaml().size() == 0) {
    // No axis zipped: the grid would have no point at all.
    ctx.error(members->location(), members->path(), "expected at least one {key, values} to zip");
    ok = false;
  } else if (members) {
    for (const auto& m : members->items()) {
      auto kv = parse_key_values(m);
      if (!kv) {
        ok = false;
        continue;
      }
      if (!axis.keys.empty() && kv->second.size() != length) {
        ctx.error(m.location(), m.path(),
                  fmt::format("zipped axes need the same number of values: {} has {}, {} has {}", axis.keys.front(),
                              length, kv->first, kv->second.size()));
        ok = false;
        continue;
      }
      length = kv->second.size();
      axis.keys.push_back(kv->first);
      axis.values.resize(length);
      for (std::size_t i = 0; i < length; ++i) axis.values[i].push_back(kv->second[i]);
    }
  }
  return ok;
}

// Step of read_axes: one entry of `axes:`, a single {key, values|range} or a zip; nullopt when
// it has errors (already reported).
std::optional<Axis> read_axis(sim::config::Context& ctx, const Node& item) {
  Axis axis;
  if (item.is_map() && item.yaml()["zip"]) {
    if (!read_zip_axis(ctx, item, axis)) return std::nullopt;
  } else if (auto kv = parse_key_values(item)) {
    axis.keys.push_back(kv->first);
    for (auto& v : kv->second) axis.values.push_back({v});
  } else {
    return std::nullopt;
  }
  return axis;
}

// Step 1 of load_sweep: the `axes:` list; each good axis's keys are appended to sweep.keys in
// column order (a key swept twice is an error).
std::vector<Axis> read_axes(sim::config::Context& ctx, MapReader& r, Sweep& sweep) {
  std::vector<Axis> axes;
  if (auto list = r.required_child("axes", "a list of {key, values} or {zip: [...]}")) {
    for (const auto& item : list->items()) {
      auto axis = read_axis(ctx, item);
      if (!axis) continue;
      for (const auto& k : axis->keys) {
        if (std::find(sweep.keys.begin(), sweep.keys.end(), k) != sweep.keys.end()) {
          ctx.error(item.location(), item.path(), fmt::format("key '{}' is swept twice", k));
        }
        sweep.keys.push_back(k);
      }
      axes.push_back(std::move(*axis));
    }
  }
  return axes;
}

// Step 2 of load_sweep: axes whose grid passes kMaxSweepPoints are an error, and are dropped so
// that no grid is built.
void limit_points(sim::config::Context& ctx, const Node& root, std::vector<Axis>& axes) {
  std::size_t points = 1;
  for (const auto& a : axes) {
    points *= a.values.size();
    if (points > kMaxSweepPoints) {
      ctx.error(root.location(), "axes",
                fmt::format("the axes make more than {} points (offsim's limit): split the sweep", kMaxSweepPoints));
      axes.clear();
      break;
    }
  }
}

// Step of read_filters: "key OP value" split at its first operator (tried in the order <= >= ==
// != < >), blanks trimmed; an empty op when the text has none.
Filter parse_filter(const std::string& text) {
  Filter f;
  for (const char* op : {"<=", ">=", "==", "!=", "<", ">"}) {
    const auto at = text.find(op);
    if (at == std::string::npos) continue;
    const auto trim = [](std::string s) {
      s.erase(0, s.find_first_not_of(' '));
      s.erase(s.find_last_not_of(' ') + 1);
      return s;
    };
    f = {trim(text.substr(0, at)), op, trim(text.substr(at + std::string_view(op).size()))};
    break;
  }
  return f;
}

// Step 3 of load_sweep: the `where:` filters, each on a swept key.
std::vector<Filter> read_filters(sim::config::Context& ctx, MapReader& r, const std::vector<std::string>& keys) {
  std::vector<Filter> filters;
  if (auto where = r.child("where")) {
    for (const auto& item : where->items()) {
      const auto text = item.as<std::string>();
      if (!text) continue;
      const Filter f = parse_filter(*text);
      if (f.op.empty() || f.value.empty()) {
        // Without a value a filter would compare with "" and keep or drop every point silently.
        ctx.error(item.location(), item.path(),
                  fmt::format("expected \"key OP value\" (OP: <= >= == != < >), got \"{}\"", *text));
      } else if (std::find(keys.begin(), keys.end(), f.key) == keys.end()) {
        ctx.error(item.location(), item.path(), fmt::format("'{}' is not a swept key", f.key));
      } else {
        filters.push_back(f);
      }
    }
  }
  return filters;
}

// Step 4 of load_sweep: the grid, last axis fastest, into sweep.points; points the filters drop
// are skipped and the kept ones numbered from 0. An `experiment` axis replaces `base`.
void add_grid_points(const std::vector<Axis>& axes, const std::vector<Filter>& filters,
                     const std::filesystem::path& base, const std::filesystem::path& file, Sweep& sweep) {
  std::size_t total = 1;
  for (const auto& a : axes) total *= a.values.size();
  std::size_t index = 0;
  for (std::size_t n = 0; n < total; ++n) {
    SweepPoint p;
    p.experiment = base;
    std::size_t rest = n;
    std::vector<std::size_t> pick(axes.size());
    for (std::size_t a = axes.size(); a-- > 0;) {
      pick[a] = rest % axes[a].values.size();
      rest /= axes[a].values.size();
    }
    for (std::size_t a = 0; a < axes.size(); ++a) {
      for (std::size_t k = 0; k < axes[a].keys.size(); ++k) {
        const std::string& value = axes[a].values[pick[a]][k];
        p.values.emplace_back(axes[a].keys[k], value);
        if (axes[a].keys[k] == "experiment") p.experiment = file.parent_path() / value;
      }
    }
    const bool keep = std::all_of(filters.begin(), filters.end(), [&](const Filter& f) {
      const auto it = std::find_if(p.values.begin(), p.values.end(), [&](const auto& kv) { return kv.first == f.key; });
      return f.keep(it->second);
    });
    if (!keep) continue;
    p.index = index++;
    sweep.points.push_back(std::move(p));
  }
}

// run_experiment with graphs that keep no task names (sim::ScopedUnnamedTasks): a row holds no
// name, and names were an eighth of a point's work. Only error messages name tasks (a deadlock, a
// graph that fails its checks): a point that fails is run again with names, so its error is the
// one `offsim run` gives, word for word (the run is deterministic and names steer nothing).
ExperimentResult run_unnamed(const ExperimentSpec& spec, const RunExperimentOptions& options) {
  try {
    const sim::ScopedUnnamedTasks unnamed;
    return run_experiment(spec, options);
  } catch (const std::exception&) {
  }
  return run_experiment(spec, options);
}

}  // namespace

Sweep load_sweep(const std::filesystem::path& file) {
  sim::config::Context ctx;
  const Node root = ctx.load_root(file);
  Sweep sweep;
  std::vector<Axis> axes;
  std::vector<Filter> filters;
  std::filesystem::path base;
  {
    MapReader r(root);
    sweep.name = r.required<std::string>("name").value;
    if (auto b = r.child("base")) {
      if (auto v = b->as<std::string>()) base = file.parent_path() / *v;
    }
    axes = read_axes(ctx, r, sweep);
    limit_points(ctx, root, axes);
    filters = read_filters(ctx, r, sweep.keys);
    const bool swaps_experiment = std::find(sweep.keys.begin(), sweep.keys.end(), "experiment") != sweep.keys.end();
    if (base.empty() && !swaps_experiment) {
      ctx.error(root.location(), "base", "a sweep needs base: EXPERIMENT.yaml or an axis with key: experiment");
    }
  }
  ctx.finish();
  add_grid_points(axes, filters, base, file, sweep);
  return sweep;
}

std::string sweep_header(const Sweep& sweep) {
  std::vector<std::string> columns{"index"};
  for (const auto& k : sweep.keys) columns.push_back(csv_field(k));
  columns.emplace_back("status");
  for (const Figure* f : kCsvFigures) columns.emplace_back(f->name);
  // The iteration time's 80% interval (models/intervals.hpp), for telling points apart.
  columns.emplace_back("iteration_time_low_s");
  columns.emplace_back("iteration_time_high_s");
  columns.emplace_back("reason");
  return fmt::format("{}\n", fmt::join(columns, ","));
}

std::string run_sweep_point(const Sweep& sweep, const SweepPoint& point, ReadCache* cache) {
  std::vector<std::string> fields{std::to_string(point.index)};
  std::vector<std::string> overrides;
  for (const auto& [key, value] : point.values) {
    fields.push_back(csv_field(value));
    if (key != "experiment" && point.overrides.empty()) overrides.push_back(fmt::format("{}={}", key, value));
  }
  overrides.insert(overrides.end(), point.overrides.begin(), point.overrides.end());
  std::string status = "ok";
  std::string reason;
  std::vector<std::string> figures(kCsvFigures.size());
  std::string low, high;  // the iteration time's 80% interval
  try {
    // Every strategy kind reads strategy.collectives: the sweep's fidelity is one more override
    // (and shows in the effective configuration like the axes).
    if (sweep.collective_fidelity) {
      overrides.push_back(fmt::format("strategy.collectives.fidelity={}",
                                      *sweep.collective_fidelity == Fidelity::kAnalytic ? "analytic" : "flow"));
    }
    const ExperimentSpec spec = load_experiment(point.experiment, overrides, cache);
    // The rows hold no link activity and no rank 0 views: the run leaves them out (the same
    // times, less work).
    const RunExperimentOptions options{.link_statistics = false, .rank0_views = false};
    const ExperimentResult r = run_unnamed(spec, options);
    if (!r.feasible) {
      status = "infeasible";
      reason = fmt::format("{}", fmt::join(r.infeasible_reasons, "; "));
    }
    for (std::size_t i = 0; i < kCsvFigures.size(); ++i) figures[i] = kCsvFigures[i]->text(r);
    if (const auto interval = prediction_interval(spec)) {
      low = fmt::format("{}", r.iteration_time.seconds() * interval->low);
      high = fmt::format("{}", r.iteration_time.seconds() * interval->high);
    }
  } catch (const std::exception& e) {
    status = "error";
    reason = e.what();
  }
  fields.push_back(status);
  fields.insert(fields.end(), figures.begin(), figures.end());
  fields.push_back(low);
  fields.push_back(high);
  fields.push_back(csv_field(reason));
  return fmt::format("{}\n", fmt::join(fields, ","));
}

std::vector<std::string> finished_rows(const Sweep& sweep, const std::filesystem::path& out) {
  std::vector<std::string> rows;
  std::ifstream in(out, std::ios::binary);
  if (!in) return rows;
  std::string content((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::string header = sweep_header(sweep);
  if (content.empty()) return rows;
  if (!content.starts_with(header)) {
    throw std::runtime_error(
        fmt::format("{}: its header is not this sweep's; refusing to resume into it", out.string()));
  }
  const std::size_t columns = parse_csv_line(header.substr(0, header.size() - 1)).size();
  std::vector<bool> seen(sweep.points.size(), false);
  std::size_t at = header.size();
  while (at < content.size()) {
    const std::size_t end = content.find('\n', at);
    if (end == std::string::npos) break;  // a torn last line (interrupted write): run it again
    const std::string line = content.substr(at, end - at);
    at = end + 1;
    const auto fields = parse_csv_line(line);
    if (fields.size() != columns) continue;
    const auto index = as_number(fields[0]);
    if (!index || *index < 0 || static_cast<std::size_t>(*index) >= seen.size()) continue;
    const auto i = static_cast<std::size_t>(*index);
    if (seen[i]) continue;
    seen[i] = true;
    rows.push_back(line + "\n");
  }
  return rows;
}

namespace {
// A finished row's point index (its first field; finished_rows kept only rows whose index parses).
std::size_t index_of(const std::string& row) {
  return std::stoull(row.substr(0, row.find(',')));
}
bool by_index(const std::string& a, const std::string& b) {
  return index_of(a) < index_of(b);
}
}  // namespace

std::string sorted_csv(const Sweep& sweep, std::vector<std::string> rows) {
  std::sort(rows.begin(), rows.end(), by_index);
  std::string content = sweep_header(sweep);
  for (const auto& r : rows) content += r;
  return content;
}

void write_sorted(const Sweep& sweep, const std::filesystem::path& out, std::vector<std::string> rows) {
  sim::report::write_file_atomically(out, sorted_csv(sweep, std::move(rows)));
}

namespace {

// Whether two points read the same files under the same overrides but for the innermost axis
// (points with overrides of their own, a search's, are never alike: each names its strategy).
bool alike_but_innermost(const SweepPoint& a, const SweepPoint& b) {
  if (a.experiment != b.experiment || !a.overrides.empty() || !b.overrides.empty()) return false;
  if (a.values.size() != b.values.size() || a.values.empty()) return false;
  return std::equal(a.values.begin(), a.values.end() - 1, b.values.begin());
}

// The ends (exclusive) of `order`'s runs of consecutive points alike but for the innermost axis.
std::vector<std::size_t> alike_runs(const std::vector<const SweepPoint*>& todo, const std::vector<std::size_t>& order) {
  std::vector<std::size_t> ends;
  for (std::size_t i = 0; i < order.size(); ++i) {
    if (i + 1 == order.size() || !alike_but_innermost(*todo[order[i]], *todo[order[i + 1]])) ends.push_back(i + 1);
  }
  return ends;
}

}  // namespace

SweepSummary run_sweep(const Sweep& sweep, const SweepOptions& options) {
  SweepSummary summary;
  summary.points = sweep.points.size();
  if (!options.resume && std::filesystem::exists(options.out)) {
    throw std::runtime_error(
        fmt::format("{} exists: pass --resume to continue it, or choose another --out", options.out.string()));
  }
  std::vector<std::string> rows = finished_rows(sweep, options.out);
  std::vector<bool> done(sweep.points.size(), false);
  for (const auto& r : rows) done[index_of(r)] = true;
  summary.skipped = rows.size();
  // Start the file again from its complete rows (drops a torn line), then append. With no rows
  // there is nothing to lose to a power cut: the header is written without waiting for the disk.
  if (rows.empty()) {
    sim::report::write_file_atomically(options.out, sweep_header(sweep), sim::report::Sync::os_cache);
  } else {
    write_sorted(sweep, options.out, rows);
  }
  std::vector<const SweepPoint*> todo;
  for (const auto& p : sweep.points) {
    if (!done[p.index]) todo.push_back(&p);
  }
  // The costliest points first (SweepPoint::relative_work; a stable sort keeps point order among
  // equals and when no point says): with several workers, the run then ends on short points
  // instead of one worker finishing a long one alone.
  std::vector<std::size_t> order(todo.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t a, std::size_t b) { return todo[a]->relative_work > todo[b]->relative_work; });
  std::ofstream append(options.out, std::ios::binary | std::ios::app);
  if (!append) throw sim::report::OutputError(fmt::format("cannot append to {}", options.out.string()));
  // Each row is appended and flushed as its point finishes, whatever its place: an interrupted
  // run keeps every row it finished (--resume reads rows in any order). The file is rewritten in
  // point order at the end when the rows did not arrive in it. Two locks guard that hand-off only
  // (once per point): one the file's append and flush (a system call), the other the rows, the
  // count and the progress callback, so that a worker handing over its row waits for another's
  // write only when both finish within that call (with one lock over both, the second worker slept
  // on it at most points of a 2-job sweep, and on these virtual machines waking it costs more than
  // the write). The simulation itself shares nothing between workers but the read-only machines,
  // tables, models, strategies and training sections of ReadCache and the rank layouts of the
  // layout cache.
  std::mutex file_lock;
  std::mutex state_lock;
  std::atomic<std::size_t> next{0};
  std::size_t finished = summary.skipped;
  ReadCache own_reads;  // every worker reads the machines, tables, models, strategies and training through it
  ReadCache& reads = options.reads != nullptr ? *options.reads : own_reads;
  // Points on one machine with the same devices (a sweep's other axes) share their rank layout and
  // machine resources (layout_cache.hpp): the machines come from `reads`, copies of one topology.
  const LayoutCacheScope layouts;
  // Workers take runs of points alike but for the innermost axis (the shipped sweep's micro-batch
  // sizes of one experiment on one machine), not single points. Taking points one by one, both
  // workers of a 2-job sweep reached each new machine together, and one slept in ReadCache while
  // the other read it: about 66 waits per run of the shipped sweep. By runs, they read different
  // machines side by side. A search's points are runs of one.
  const std::vector<std::size_t> run_ends = alike_runs(todo, order);
  const auto run_point = [&](const SweepPoint& point) {
    std::string row = run_sweep_point(sweep, point, &reads);
    {
      const std::lock_guard guard(file_lock);
      append << row;
      append.flush();
    }
    const std::lock_guard guard(state_lock);
    rows.push_back(std::move(row));
    ++finished;
    if (options.progress) options.progress(finished, summary.points);
  };
  const auto worker = [&] {
    const sim::config::ScopedFileCache files;  // each worker parses the experiments' YAML once
    while (true) {
      const std::size_t r = next.fetch_add(1);
      if (r >= run_ends.size()) return;
      for (std::size_t n = r == 0 ? 0 : run_ends[r - 1]; n < run_ends[r]; ++n) run_point(*todo[order[n]]);
    }
  };
  const int jobs = std::max(1, std::min(options.jobs, static_cast<int>(run_ends.size())));
  std::vector<std::thread> threads;
  for (int j = 1; j < jobs; ++j) {
    threads.emplace_back([&] {
      if (options.on_worker_start) options.on_worker_start();
      worker();
    });
  }
  worker();
  for (auto& t : threads) t.join();
  append.close();
  if (!append) throw sim::report::OutputError(fmt::format("cannot write {}", options.out.string()));
  summary.ran = todo.size();
  // Rows appended in point order after no earlier ones are already the final file.
  if (!options.out_is_journal && (summary.skipped > 0 || !std::is_sorted(rows.begin(), rows.end(), by_index))) {
    write_sorted(sweep, options.out, std::move(rows));
  }
  return summary;
}

namespace {

// A figure to four significant digits, without an exponent (120.76053557495153 -> 120.8,
// 0.30705487 -> 0.3071, 123456.7 -> 123457): the CSV keeps every digit.
std::string rounded(double v) {
  if (v == 0.0 || !std::isfinite(v)) return fmt::format("{}", v);
  const int magnitude = static_cast<int>(std::floor(std::log10(std::fabs(v))));
  return fmt::format("{:.{}f}", v, std::clamp(3 - magnitude, 0, 9));
}

}  // namespace

std::string best_points(const std::filesystem::path& csv, const std::string& metric, std::size_t top, double tie) {
  std::ifstream in(csv);
  if (!in) throw std::runtime_error(fmt::format("cannot read {}", csv.string()));
  std::string line;
  std::getline(in, line);
  const auto header = parse_csv_line(line);
  const auto column = std::find(header.begin(), header.end(), metric);
  const auto status = std::find(header.begin(), header.end(), "status");
  if (column == header.end() || status == header.end()) {
    throw std::runtime_error(fmt::format("{}: no column '{}'", csv.string(), metric));
  }
  const std::size_t c = static_cast<std::size_t>(column - header.begin());
  const std::size_t s = static_cast<std::size_t>(status - header.begin());
  const Figure* figure = find_figure(metric);
  const bool larger_is_better = figure != nullptr && figure->larger_is_better;
  // The 80% interval of a metric that is the iteration time or a rate of it (larger is better:
  // the time's interval inverted), from the iteration time's interval columns when the CSV has them.
  const auto low_col = std::find(header.begin(), header.end(), "iteration_time_low_s");
  const auto high_col = std::find(header.begin(), header.end(), "iteration_time_high_s");
  const auto time_col = std::find(header.begin(), header.end(), "iteration_time_s");
  const bool per_iteration = metric == "iteration_time_s" || metric == "tflops_per_device" ||
                             metric == "model_tflops_per_device" || metric == "tokens_per_s" || metric == "mfu";
  const bool with_interval =
      per_iteration && low_col != header.end() && high_col != header.end() && time_col != header.end();
  const auto interval_of =
      [&](const std::pair<double, std::vector<std::string>>& row) -> std::optional<std::pair<double, double>> {
    if (!with_interval) return std::nullopt;
    const auto field = [&](auto col) { return as_number(row.second[static_cast<std::size_t>(col - header.begin())]); };
    const auto lo = field(low_col), hi = field(high_col), t = field(time_col);
    if (!lo || !hi || !t || *t <= 0.0) return std::nullopt;
    if (!larger_is_better) return std::pair{row.first * *lo / *t, row.first * *hi / *t};
    return std::pair{row.first * *t / *hi, row.first * *t / *lo};
  };
  std::vector<std::pair<double, std::vector<std::string>>> ranked;
  while (std::getline(in, line)) {
    auto fields = parse_csv_line(line);
    if (fields.size() != header.size() || fields[s] != "ok") continue;
    if (const auto v = as_number(fields[c])) ranked.emplace_back(*v, std::move(fields));
  }
  std::stable_sort(ranked.begin(), ranked.end(), [&](const auto& a, const auto& b) {
    return larger_is_better ? a.first > b.first : a.first < b.first;
  });
  std::vector<std::string> columns(header.begin(), status);
  columns.push_back(metric);
  columns.push_back("vs best");
  if (with_interval) columns.push_back("80% interval");
  sim::report::TextTable table(columns);
  const auto best_interval = ranked.empty() ? std::nullopt : interval_of(ranked.front());
  // Whether a row's interval overlaps the best's: at 80% the model cannot rank the two apart.
  const auto overlaps_best = [&](std::size_t i) {
    const auto row = interval_of(ranked[i]);
    return best_interval && row && row->first <= best_interval->second && best_interval->first <= row->second;
  };
  // How much worse than the best a value is, as a fraction (0 for the best).
  const auto behind = [&](double v) {
    const double best = ranked.front().first;
    return best == 0.0 ? 0.0 : (larger_is_better ? (best - v) / best : (v - best) / best);
  };
  for (std::size_t i = 0; i < ranked.size() && i < top; ++i) {
    std::vector<std::string> row(ranked[i].second.begin(), ranked[i].second.begin() + static_cast<long>(s));
    row.push_back(rounded(ranked[i].first));
    row.push_back(i == 0 ? "best" : fmt::format("-{:.2f}%", 100.0 * behind(ranked[i].first)));
    if (with_interval) {
      const auto interval = interval_of(ranked[i]);
      row.push_back(!interval ? std::string("-")
                              : fmt::format("{} to {}{}", rounded(interval->first), rounded(interval->second),
                                            i > 0 && overlaps_best(i) ? " (overlaps best)" : ""));
    }
    table.add_row(row);
  }
  std::string out = fmt::format("best {} feasible points by {} ({} is better):\n{}", std::min(top, ranked.size()),
                                metric, larger_is_better ? "larger" : "smaller", table.str());
  if (best_interval) {
    std::size_t overlapping = 0;
    for (std::size_t i = 1; i < ranked.size(); ++i) overlapping += overlaps_best(i) ? 1 : 0;
    out += overlapping > 0 ? fmt::format(
                                 "the best's 80% interval overlaps those of {} other point{}: at 80% the model cannot "
                                 "rank {} apart from the best (docs/validation.md, prediction intervals)\n",
                                 overlapping, overlapping == 1 ? "" : "s", overlapping == 1 ? "it" : "them")
                           : "no other point's 80% interval overlaps the best's\n";
  }
  std::size_t tied = 0;
  for (std::size_t i = 1; i < ranked.size() && behind(ranked[i].first) <= tie; ++i) ++tied;
  if (tie > 0.0 && tied > 0) {
    out += fmt::format(
        "{} more point{} within {:.1f}% of the best: tied within the model's error (--tie), not a clear winner\n", tied,
        tied == 1 ? " lies" : "s lie", 100.0 * tie);
  }
  return out;
}

}  // namespace offsim::models
