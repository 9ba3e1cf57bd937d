#include "models/cost/calibration.hpp"

#include <fmt/format.h>
#include <Eigen/Dense>
#include <algorithm>
#include <charconv>
#include <cmath>
#include <fstream>
#include <map>
#include <tuple>

#include "models/transformer/precision.hpp"
#include "sim/report/csv.hpp"

namespace offsim::models {

LineFit fit_line(const std::vector<double>& x, const std::vector<double>& y) {
  if (x.size() != y.size() || x.size() < 2 ||
      std::all_of(x.begin(), x.end(), [&](double v) { return v == x.front(); })) {
    throw std::invalid_argument("fit_line needs at least two distinct x values");
  }
  const auto n = static_cast<Eigen::Index>(x.size());
  Eigen::MatrixXd a(n, 2);
  Eigen::VectorXd b(n);
  for (Eigen::Index i = 0; i < n; ++i) {
    a(i, 0) = 1.0;
    a(i, 1) = x[static_cast<std::size_t>(i)];
    b(i) = y[static_cast<std::size_t>(i)];
  }
  // Columns differ by many orders of magnitude (1 vs bytes): scale before solving.
  const double scale = a.col(1).cwiseAbs().maxCoeff();
  a.col(1) /= scale;
  const Eigen::Vector2d c = a.colPivHouseholderQr().solve(b);
  LineFit f;
  f.intercept = c(0);
  f.slope = c(1) / scale;
  f.rows = x.size();
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double predicted = f.intercept + f.slope * x[i];
    f.max_relative_residual = std::max(f.max_relative_residual, std::fabs(predicted - y[i]) / y[i]);
  }
  return f;
}

namespace {

// Bytes per element of the simulator's DeepSpeed 0.13 ZeRO-3 host path (transformer/precision.hpp), which
// fit_offload_host inverts: CPU Adam plus the down-cast through the shared cores, a bf16 copy,
// the CPU up-cast of the boundary gradient.
constexpr std::int64_t kNodeSharedBytes = kHostAdamTrafficBytesPerParam + kBf16Bytes + kFp32Bytes;
constexpr std::int64_t kCopyBytes = kBf16Bytes;
constexpr std::int64_t kUpcastBytes = kBf16Bytes + kFp32Bytes;
// With full recomputation the backward computes the forward again and then twice its FLOPs.
constexpr double kBackwardComputeInForwards = 3.0;

}  // namespace

OffloadHostFit fit_offload_host(const std::vector<OffloadTimingRow>& rows, sim::Bandwidth pinned) {
  if (std::all_of(rows.begin(), rows.end(),
                  [&](const auto& r) { return r.ranks_per_node == rows.front().ranks_per_node; })) {
    throw CalibrationError(
        "offload timings: the fit needs runs with different numbers of ranks per node (they separate the "
        "node-shared CPU work from the per-rank copy-back)");
  }
  // Per element and relative: row i says (k_i u + v) / y_i = 1, y_i = step / N.
  const auto n = static_cast<Eigen::Index>(rows.size());
  Eigen::MatrixXd a(n, 2);
  Eigen::VectorXd b = Eigen::VectorXd::Ones(n);
  for (Eigen::Index i = 0; i < n; ++i) {
    const auto& r = rows[static_cast<std::size_t>(i)];
    const double y = r.step_s / r.params_per_rank;
    a(i, 0) = r.ranks_per_node / y;
    a(i, 1) = 1.0 / y;
  }
  const Eigen::Vector2d x = a.colPivHouseholderQr().solve(b);
  const double u = x(0), v = x(1);
  if (!(u > 0.0) || !(v > 0.0)) {
    throw CalibrationError(fmt::format(
        "offload timings: no positive rates explain these steps (u = {:.4g} s, v = {:.4g} s per element)", u, v));
  }
  OffloadHostFit f;
  f.cpu_work = sim::Bandwidth{static_cast<double>(kNodeSharedBytes) / u};
  f.h2d_pageable = sim::Bandwidth{static_cast<double>(kCopyBytes) / v};
  f.step_rows = rows.size();
  for (const auto& r : rows) {
    const double predicted = r.params_per_rank * (r.ranks_per_node * u + v);
    f.step_max_relative_residual = std::max(f.step_max_relative_residual, std::fabs(predicted - r.step_s) / r.step_s);
  }
  // Backward: what the boundary copies leave to the pageable D2H, per element.
  const double known = 2.0 * static_cast<double>(kCopyBytes) / pinned.bytes_per_s +
                       static_cast<double>(kUpcastBytes) * u / static_cast<double>(kNodeSharedBytes);
  std::vector<const OffloadTimingRow*> backward;
  double w = 0.0;
  for (const auto& r : rows) {
    if (r.ranks_per_node != 1 || r.grad_accum != 1) continue;
    backward.push_back(&r);
    w += (r.backward_s - kBackwardComputeInForwards * r.forward_s) / r.params_per_rank - known;
  }
  if (!backward.empty()) {
    w /= static_cast<double>(backward.size());
    if (!(w > 0.0)) {
      throw CalibrationError("offload timings: the backward leaves no time for the pageable D2H copies");
    }
    f.d2h_pageable = sim::Bandwidth{static_cast<double>(kCopyBytes) / w};
    f.backward_rows = backward.size();
    for (const auto* r : backward) {
      const double predicted = kBackwardComputeInForwards * r->forward_s + r->params_per_rank * (known + w);
      f.backward_max_relative_residual =
          std::max(f.backward_max_relative_residual, std::fabs(predicted - r->backward_s) / r->backward_s);
    }
  }
  return f;
}

namespace {

struct Table {
  std::string file;
  std::map<std::string, std::size_t> column;  // canonical name -> index
  std::vector<std::vector<std::string>> rows;
  std::vector<int> lines;
};

const std::map<std::string, std::string> kAliases{
    {"collective", "benchmark"}, {"gcds", "ranks"}, {"total_bytes", "bytes"}, {"mean_time_s", "time_s"}};

Table read_table(const std::filesystem::path& path) {
  std::ifstream in(path);
  if (!in) throw CalibrationError(fmt::format("{}: cannot open the file", path.string()));
  Table t;
  t.file = path.string();
  std::string line;
  int number = 0;
  while (std::getline(in, line)) {
    ++number;
    if (line.empty() || line.front() == '#') continue;
    auto fields = sim::report::parse_csv_line(line);
    if (t.column.empty()) {
      for (std::size_t i = 0; i < fields.size(); ++i) {
        const auto alias = kAliases.find(fields[i]);
        t.column[alias == kAliases.end() ? fields[i] : alias->second] = i;
      }
      continue;
    }
    if (fields.size() != t.column.size()) {
      throw CalibrationError(
          fmt::format("{}:{}: expected {} fields, got {}", t.file, number, t.column.size(), fields.size()));
    }
    t.rows.push_back(std::move(fields));
    t.lines.push_back(number);
  }
  // Training timings (bench/data/offload-polaris-a100.csv) or microbenchmark rows.
  const std::vector<const char*> needed =
      t.column.contains("step_ms")
          ? std::vector<const char*>{"actual_params_B", "gpus",   "nodes",  "grad_accum", "offload_ratio",
                                     "deepspeed",       "fwd_ms", "bwd_ms", "step_ms"}
          : std::vector<const char*>{"benchmark", "bytes", "time_s"};
  for (const char* column : needed) {
    if (!t.column.contains(column)) throw CalibrationError(fmt::format("{}:1: missing column '{}'", t.file, column));
  }
  return t;
}

struct Row {
  const Table* table;
  std::size_t index;
  [[nodiscard]] bool has(const std::string& column) const { return table->column.contains(column); }
  [[nodiscard]] std::string text(const std::string& column) const {
    const auto it = table->column.find(column);
    return it == table->column.end() ? std::string() : table->rows[index][it->second];
  }
  [[nodiscard]] double number(const std::string& column) const {
    const std::string s = text(column);
    double v = 0.0;
    const auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (ec != std::errc{} || ptr != s.data() + s.size() || !std::isfinite(v)) {
      throw CalibrationError(fmt::format("{}:{}: column '{}': expected a number, got \"{}\"", table->file,
                                         table->lines[index], column, s));
    }
    return v;
  }
};

std::string yaml_time(double seconds) {
  return fmt::format("\"{:.3f} us\"", seconds * 1e6);
}
std::string yaml_bandwidth(double bytes_per_s) {
  return fmt::format("\"{:.2f} GB/s\"", bytes_per_s / 1e9);
}
std::string yaml_fit(const LineFit& f) {
  return fmt::format("{{rows: {}, max_relative_residual: {:.3f}}}", f.rows, f.max_relative_residual);
}

// Records a fit whose worst row is off by more than kPoorFitResidual (when the caller asks).
struct FitChecker {
  std::vector<std::string>* poor_fits;
  void operator()(const std::string& what, double residual) const {
    if (poor_fits != nullptr && residual > kPoorFitResidual) {
      poor_fits->push_back(
          fmt::format("{}: the fit misses a measured row by {:.1f}% (max relative residual)", what, 100.0 * residual));
    }
  }
};

// The (column, value) pairs of --filter column=value, column names through their aliases.
std::vector<std::pair<std::string, std::string>> parse_filters(const std::vector<std::string>& given) {
  std::vector<std::pair<std::string, std::string>> filters;
  for (const auto& f : given) {
    const auto eq = f.find('=');
    if (eq == std::string::npos || eq == 0)
      throw CalibrationError(fmt::format("--filter {}: expected column=value", f));
    std::string column = f.substr(0, eq);
    if (const auto alias = kAliases.find(column); alias != kAliases.end()) column = alias->second;
    filters.emplace_back(column, f.substr(eq + 1));
  }
  return filters;
}

// The rows of every table that pass every filter; a filter value may list alternatives
// (--filter gcds=8|32|128).
std::vector<Row> select_rows(const std::vector<Table>& tables,
                             const std::vector<std::pair<std::string, std::string>>& filters) {
  std::vector<Row> rows;
  for (const auto& t : tables) {
    for (const auto& [column, value] : filters) {
      if (!t.column.contains(column))
        throw CalibrationError(fmt::format("{}:1: --filter names missing column '{}'", t.file, column));
    }
    for (std::size_t i = 0; i < t.rows.size(); ++i) {
      const Row r{&t, i};
      const auto matches = [&](const auto& f) {
        std::string_view alternatives = f.second;
        while (true) {
          const auto bar = alternatives.find('|');
          if (r.text(f.first) == alternatives.substr(0, bar)) return true;
          if (bar == std::string_view::npos) return false;
          alternatives.remove_prefix(bar + 1);
        }
      };
      if (std::all_of(filters.begin(), filters.end(), matches)) rows.push_back(r);
    }
  }
  if (rows.empty()) throw CalibrationError("no rows left to fit (check the files and --filter)");
  return rows;
}

// Host rate benchmarks: elements per second by thread count.
const std::vector<std::string> kRateBenchmarks{"cpu_adam", "cpu_upcast", "cpu_downcast"};

// The selected rows by what they measure. Groups keep first-appearance order, so the output
// follows the input.
struct RowGroups {
  std::vector<std::string> copy_keys, collective_keys;
  std::map<std::string, std::vector<Row>> copies;
  std::map<std::string, std::map<int, std::vector<Row>>> collectives;
  std::map<std::string, std::map<int, std::vector<Row>>> rates;
  std::vector<Row> gemm;
  std::vector<OffloadTimingRow> offload;
  std::size_t ignored = 0;
};

// A training-timing row, checked against what the offload fit's model covers: DeepSpeed 0.13,
// the whole optimizer on the host, no TP.
OffloadTimingRow offload_timing(const Row& r) {
  const auto where = [&](const char* column) {
    return fmt::format("{}:{}: column '{}'", r.table->file, r.table->lines[r.index], column);
  };
  if (!r.text("deepspeed").starts_with("0.13")) {
    throw CalibrationError(fmt::format("{}: the offload fit models DeepSpeed 0.13's path, got \"{}\"",
                                       where("deepspeed"), r.text("deepspeed")));
  }
  if (r.number("offload_ratio") != 1.0) {
    throw CalibrationError(
        fmt::format("{}: the offload fit needs the whole optimizer on the host (ratio 1)", where("offload_ratio")));
  }
  if (r.has("tp") && r.number("tp") != 1.0) {
    throw CalibrationError(fmt::format("{}: the offload fit needs tp = 1", where("tp")));
  }
  const double gpus = r.number("gpus"), nodes = r.number("nodes");
  if (!(gpus >= 1.0) || !(nodes >= 1.0) || std::fmod(gpus, nodes) != 0.0) {
    throw CalibrationError(fmt::format("{}: expected whole GPUs per node", where("gpus")));
  }
  return {r.number("actual_params_B") * 1e9 / gpus,
          static_cast<int>(gpus / nodes),
          static_cast<int>(r.number("grad_accum")),
          r.number("fwd_ms") / 1e3,
          r.number("bwd_ms") / 1e3,
          r.number("step_ms") / 1e3};
}

RowGroups group_rows(const std::vector<Row>& rows) {
  RowGroups g;
  for (const auto& r : rows) {
    if (r.has("step_ms")) {
      g.offload.push_back(offload_timing(r));
      continue;
    }
    const std::string b = r.text("benchmark");
    if (b == "h2d" || b == "d2h" || b == "peer") {
      const std::string key = b == "peer" ? b : b + "_" + r.text("memory");
      if (!g.copies.contains(key)) g.copy_keys.push_back(key);
      g.copies[key].push_back(r);
    } else if (b == "all_gather" || b == "reduce_scatter" || b == "all_reduce") {
      if (!g.collectives.contains(b)) g.collective_keys.push_back(b);
      g.collectives[b][static_cast<int>(r.number("ranks"))].push_back(r);
    } else if (std::find(kRateBenchmarks.begin(), kRateBenchmarks.end(), b) != kRateBenchmarks.end()) {
      g.rates[b][static_cast<int>(r.number("threads"))].push_back(r);
    } else if (b == "gemm") {
      g.gemm.push_back(r);
    } else {
      ++g.ignored;
    }
  }
  return g;
}

// The host rates fitted from training timings: the cpu_work line (returned) and the pageable copy
// lines (appended to `copy_lines`).
std::string offload_section(const std::vector<OffloadTimingRow>& offload, const CalibrateOptions& o,
                            const FitChecker& check_fit, std::vector<std::string>& copy_lines) {
  if (!o.pinned_bandwidth) {
    throw CalibrationError(
        "training-timing rows need --pinned-bandwidth (the host link's pinned copy rate, e.g. \"25 GB/s\")");
  }
  const OffloadHostFit f = fit_offload_host(offload, *o.pinned_bandwidth);
  std::string out = fmt::format(
      "# Host rates fitted from DeepSpeed 0.13 ZeRO-3 offload timings through the simulator's model of that path\n"
      "# (models/cost/calibration.hpp, fit_offload_host). N: elements per rank, k: ranks per node.\n"
      "#   step:     N (k {0} B / cpu_work + {1} B / h2d_pageable)  (ranks in step: CPU work shared, then the "
      "copies)\n"
      "#   backward: k = 1, one micro-step: {2} x forward + N ({3} B / {4} pinned + {1} B / d2h_pageable + {5} B / "
      "cpu_work)\n",
      kNodeSharedBytes, kCopyBytes, kBackwardComputeInForwards, 2 * kCopyBytes,
      sim::format_bandwidth(*o.pinned_bandwidth), kUpcastBytes);
  out += fmt::format("cpu_work: {{bandwidth: {}, fit: {{rows: {}, max_relative_residual: {:.3f}}}}}\n",
                     yaml_bandwidth(f.cpu_work.bytes_per_s), f.step_rows, f.step_max_relative_residual);
  check_fit("cpu_work and copies h2d_pageable", f.step_max_relative_residual);
  if (f.d2h_pageable) check_fit("copies d2h_pageable", f.backward_max_relative_residual);
  copy_lines.push_back(fmt::format(
      "  h2d_pageable: {{latency: \"0 us\", bandwidth: {}, fit: {{rows: {}, max_relative_residual: {:.3f}, note: "
      "\"fitted from step times\"}}}}\n",
      yaml_bandwidth(f.h2d_pageable.bytes_per_s), f.step_rows, f.step_max_relative_residual));
  if (f.d2h_pageable) {
    copy_lines.push_back(fmt::format(
        "  d2h_pageable: {{latency: \"0 us\", bandwidth: {}, fit: {{rows: {}, max_relative_residual: {:.3f}, "
        "note: \"fitted from backward times\"}}}}\n",
        yaml_bandwidth(f.d2h_pageable->bytes_per_s), f.backward_rows, f.backward_max_relative_residual));
  }
  return out;
}

// One line per measured copy kind: t = latency + bytes / bandwidth.
void fit_copies(const RowGroups& g, const FitChecker& check_fit, std::vector<std::string>& copy_lines) {
  for (const auto& key : g.copy_keys) {
    std::vector<double> x, y;
    for (const auto& r : g.copies.at(key)) {
      x.push_back(r.number("bytes"));
      y.push_back(r.number("time_s"));
    }
    const LineFit f = fit_line(x, y);
    copy_lines.push_back(fmt::format("  {}: {{latency: {}, bandwidth: {}, fit: {}}}\n", key, yaml_time(f.intercept),
                                     yaml_bandwidth(1.0 / f.slope), yaml_fit(f)));
    check_fit(fmt::format("copies {}", key), f.max_relative_residual);
  }
}

// One group size of one collective: the ring's alpha-beta fit (or the plateau where no physical
// line fits) and the measured bus bandwidth by size.
std::string collective_group(const std::string& key, int g, const std::vector<Row>& group, double time_scale,
                             const FitChecker& check_fit) {
  const double per_rank = key == "all_reduce" ? 2.0 * (g - 1) / g : static_cast<double>(g - 1) / g;
  const double steps = key == "all_reduce" ? 2.0 * (g - 1) : static_cast<double>(g - 1);
  std::vector<double> x, y;
  for (const auto& r : group) {
    x.push_back(per_rank * r.number("bytes"));
    y.push_back(time_scale * r.number("time_s"));
  }
  const LineFit f = fit_line(x, y);
  // Whether the group spans nodes, when the CSV says (a `nodes` column).
  std::string nodes;
  if (group.front().has("nodes")) nodes = fmt::format("nodes: {:.0f}, ", group.front().number("nodes"));
  std::string out;
  if (f.slope > 0.0 && f.intercept >= 0.0) {
    out += fmt::format("    - {{ranks: {}, {}step_latency: {}, bus_bandwidth: {}, fit: {},\n", g, nodes,
                       yaml_time(f.intercept / steps), yaml_bandwidth(1.0 / f.slope), yaml_fit(f));
    check_fit(fmt::format("collectives {} ranks: {}", key, g), f.max_relative_residual);
  } else {
    // No physical line through these points (the implementation's efficiency collapses at
    // some sizes): the plateau stands in for the fit and the measured table carries the rest.
    double plateau = 0.0;
    for (std::size_t i = 0; i < x.size(); ++i) plateau = std::max(plateau, x[i] / y[i]);
    out += fmt::format(
        "    - {{ranks: {}, {}step_latency: \"0 us\", bus_bandwidth: {}, fit: {{rows: {}, note: \"no physical "
        "alpha-beta line (fitted bus bandwidth {}); the highest measured bus bandwidth stands in\"}},\n",
        g, nodes, yaml_bandwidth(plateau), f.rows, sim::format_bandwidth(sim::Bandwidth{1.0 / f.slope}));
  }
  // The measured bus bandwidth by size, for the collective-implementation efficiency layer
  // (mean over rows of one size, sizes ascending).
  std::map<double, std::pair<double, int>> by_size;
  for (const auto& r : group) {
    auto& [sum, n] = by_size[r.number("bytes")];
    sum += per_rank * r.number("bytes") / (time_scale * r.number("time_s"));
    ++n;
  }
  std::vector<std::string> points;
  for (const auto& [bytes, mean] : by_size) {
    points.push_back(fmt::format("[{:.0f}, \"{:.4g} GB/s\"]", bytes, mean.first / mean.second / 1e9));
  }
  out += fmt::format("       measured: [{}]}}\n", fmt::join(points, ", "));
  return out;
}

std::string collectives_section(const RowGroups& g, const CalibrateOptions& o, const FitChecker& check_fit) {
  if (g.collective_keys.empty()) return {};
  std::string out =
      "collectives:  # ring model: t = steps x step_latency + (bytes through each rank) / bus_bandwidth\n";
  // (written key, measured key, time scale): the reduce-scatter may come from the all-reduce.
  std::vector<std::tuple<std::string, std::string, double>> sections;
  for (const auto& key : g.collective_keys) sections.emplace_back(key, key, 1.0);
  if (o.reduce_scatter_from_all_reduce) {
    if (g.collectives.contains("reduce_scatter")) {
      throw CalibrationError("--reduce-scatter-from-all-reduce: the files hold reduce_scatter rows; fit those");
    }
    if (!g.collectives.contains("all_reduce")) {
      throw CalibrationError("--reduce-scatter-from-all-reduce: the files hold no all_reduce rows");
    }
    sections.emplace_back("reduce_scatter", "all_reduce", 0.5);
  }
  for (const auto& [key, measured_key, time_scale] : sections) {
    out += fmt::format("  {}:\n", key);
    if (key != measured_key) {
      out += fmt::format("  # from the {} rows at {} x their time (a ring all-reduce = reduce-scatter + all-gather)\n",
                         measured_key, time_scale);
    }
    for (const auto& [ranks, group] : g.collectives.at(measured_key)) {
      out += collective_group(key, ranks, group, time_scale, check_fit);
    }
  }
  return out;
}

std::string rates_section(const RowGroups& g) {
  std::string out;
  for (const auto& name : kRateBenchmarks) {
    if (!g.rates.contains(name)) continue;
    out += fmt::format("{}:  # elements per second (mean over rows)\n", name);
    for (const auto& [threads, group] : g.rates.at(name)) {
      double rate = 0.0;
      for (const auto& r : group) rate += r.number("elements") / r.number("time_s");
      rate /= static_cast<double>(group.size());
      out += fmt::format("  - {{threads: {}, params_per_s: {:.4g}, rows: {}}}\n", threads, rate, group.size());
    }
  }
  return out;
}

std::string gemm_section(std::vector<Row> gemm, const CalibrateOptions& o) {
  if (gemm.empty()) return {};
  if (!o.peak) throw CalibrationError("gemm rows need --peak (the device's peak rate, e.g. \"191.5 TFLOP/s\")");
  // A block table (sim/config/block_table.hpp): one row per shape, read ten times faster than a
  // list of mappings.
  std::string out = fmt::format(
      "gemm:  # efficiency = 2 m n k / time / peak\n  peak: \"{}\"\n  efficiency_table: |\n    {:<6} {:<6} {:<6} {}\n",
      sim::format_flop_rate(*o.peak), "m", "n", "k", "efficiency");
  std::sort(gemm.begin(), gemm.end(), [](const Row& a, const Row& b) {
    return a.number("m") * a.number("n") * a.number("k") < b.number("m") * b.number("n") * b.number("k");
  });
  for (const auto& r : gemm) {
    const double flops = 2.0 * r.number("m") * r.number("n") * r.number("k");
    out += fmt::format("    {:<6} {:<6} {:<6} {:.4f}\n", r.text("m"), r.text("n"), r.text("k"),
                       flops / r.number("time_s") / o.peak->flops_per_s);
  }
  return out;
}

}  // namespace

std::string calibrate(const CalibrateOptions& o, std::vector<std::string>* poor_fits) {
  const FitChecker check_fit{poor_fits};
  std::vector<Table> tables;
  for (const auto& f : o.files) tables.push_back(read_table(f));
  const auto filters = parse_filters(o.filters);
  const RowGroups groups = group_rows(select_rows(tables, filters));

  std::string out = "# Written by `offsim calibrate`: do not edit by hand, re-run the command.\n";
  out += fmt::format("# command: {}\n", o.command_line);
  out += fmt::format("device_kind: {}\n", o.device_kind);
  std::vector<std::string> names;
  for (const auto& t : tables) names.push_back(t.file);
  out += fmt::format("source: \"least-squares fits by offsim calibrate of {}{}\"\n", fmt::join(names, ", "),
                     filters.empty() ? "" : fmt::format(" (rows where {})", fmt::join(o.filters, ", ")));
  std::vector<std::string> copy_lines;  // measured copies, then copies fitted from training timings
  if (!groups.offload.empty()) out += offload_section(groups.offload, o, check_fit, copy_lines);
  fit_copies(groups, check_fit, copy_lines);
  if (!copy_lines.empty()) {
    out += "copies:  # t = latency + bytes / bandwidth\n";
    for (const auto& line : copy_lines) out += line;
  }
  out += collectives_section(groups, o, check_fit);
  out += rates_section(groups);
  out += gemm_section(groups.gemm, o);
  if (groups.ignored > 0) out += fmt::format("# {} rows of other benchmarks were not used\n", groups.ignored);
  return out;
}

}  // namespace offsim::models
