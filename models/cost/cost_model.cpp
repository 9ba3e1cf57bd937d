#include "models/cost/cost_model.hpp"

#include <fmt/format.h>
#include <algorithm>
#include <cmath>

namespace offsim::models {

using sim::config::MapReader;
using sim::config::Node;

namespace {
// bf16 operands and result.
constexpr double kGemmElementBytes = 2.0;
double work(std::int64_t m, std::int64_t n, std::int64_t k) {
  return static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k);
}
}  // namespace

CostModel::CostModel(DeviceCosts device) : device_(std::move(device)) {
  std::sort(device_.gemm_table.begin(), device_.gemm_table.end(),
            [](const GemmPoint& a, const GemmPoint& b) { return work(a.m, a.n, a.k) < work(b.m, b.n, b.k); });
}

double tile_wave_utilization(const GemmTiling& tiling, std::int64_t m, std::int64_t n, std::int64_t batch) {
  const auto ceil_div = [](std::int64_t a, std::int64_t b) { return (a + b - 1) / b; };
  const double useful = static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(batch);
  double best = 0.0;
  for (const auto& [tm, tn] : tiling.tiles) {
    const std::int64_t tiles = ceil_div(m, tm) * ceil_div(n, tn) * batch;
    const std::int64_t waves = ceil_div(tiles, tiling.compute_units);
    const double issued = static_cast<double>(waves) * static_cast<double>(tiling.compute_units) *
                          static_cast<double>(tm) * static_cast<double>(tn);
    best = std::max(best, useful / issued);
  }
  return best;
}

double CostModel::efficiency_for(const GemmShape& g) const {
  const auto& table = device_.gemm_table;
  if (table.empty()) {
    if (!device_.gemm_tiling) return device_.gemm_efficiency;
    return device_.gemm_efficiency * tile_wave_utilization(*device_.gemm_tiling, g.m, g.n, g.batch);
  }
  const double w = work(g.m, g.n, g.k);
  if (w < work(table.front().m, table.front().n, table.front().k)) {
    const std::string note =
        fmt::format("GEMM {} x {} x {} on {} is smaller than every measured shape: roofline ceiling used", g.m, g.n,
                    g.k, device_.device_kind);
    if (std::find(fallbacks_.begin(), fallbacks_.end(), note) == fallbacks_.end()) fallbacks_.push_back(note);
    return 1.0;
  }
  for (std::size_t i = 1; i < table.size(); ++i) {
    const double lo = work(table[i - 1].m, table[i - 1].n, table[i - 1].k);
    const double hi = work(table[i].m, table[i].n, table[i].k);
    if (w <= hi) {
      const double t = hi > lo ? (std::log(w) - std::log(lo)) / (std::log(hi) - std::log(lo)) : 1.0;
      return table[i - 1].efficiency + t * (table[i].efficiency - table[i - 1].efficiency);
    }
  }
  return table.back().efficiency;
}

sim::TimePs CostModel::gemm_time(const GemmShape& g, bool fused) const {
  const double batch = static_cast<double>(g.batch);
  const double bytes =
      kGemmElementBytes * batch *
      (static_cast<double>(g.m) * static_cast<double>(g.k) + static_cast<double>(g.k) * static_cast<double>(g.n) +
       static_cast<double>(g.m) * static_cast<double>(g.n));
  const sim::TimePs compute = sim::Flops{g.flops()} / (device_.peak_matrix_bf16 * efficiency_for(g));
  if (fused) return compute;
  const sim::TimePs memory =
      sim::duration_of(bytes, device_.memory_bandwidth.bytes_per_s * device_.memory_efficiency.value_or(1.0));
  return std::max(compute, memory);
}

sim::TimePs CostModel::memory_bound_time(sim::Bytes bytes) const {
  return bytes / (device_.memory_bandwidth * device_.memory_efficiency.value_or(1.0));
}

std::vector<std::string> CostModel::approximations() const {
  std::vector<std::string> out;
  if (device_.gemm_table.empty() && device_.gemm_tiling) {
    out.push_back(fmt::format(
        "GEMMs on {}: the best-shape efficiency ({:.3f} of peak) times tile and wave quantization over {} compute "
        "units; other shape effects (short K, small tiles' lower efficiency) are not modelled: an upper bound",
        device_.device_kind, device_.gemm_efficiency, device_.gemm_tiling->compute_units));
  } else if (device_.gemm_table.empty()) {
    out.push_back(fmt::format("GEMMs on {} use one efficiency ({:.3f} of peak) for every shape: an upper bound",
                              device_.device_kind, device_.gemm_efficiency));
  }
  if (!device_.memory_efficiency) {
    out.push_back(
        fmt::format("memory-bound kernels on {} use the roofline ceiling (no measured efficiency in the table)",
                    device_.device_kind));
  }
  out.insert(out.end(), fallbacks_.begin(), fallbacks_.end());
  return out;
}

namespace {

double fraction(MapReader& r, const Node& node, std::string_view key) {
  const auto v = r.required<double>(key);
  if (v.valid && !(v.value > 0.0 && v.value <= 1.0)) {
    node.context().error(v.loc, node.child_path(key), fmt::format("expected a fraction in (0, 1], got {}", v.value));
  }
  return v.value;
}

std::vector<GemmPoint> parse_gemm_table(const Node& table) {
  std::vector<GemmPoint> out;
  for (const auto& item : table.items()) {
    MapReader f(item);
    GemmPoint p;
    for (auto [key, field] : {std::pair{"m", &p.m}, {"n", &p.n}, {"k", &p.k}}) {
      const auto v = f.required<std::int64_t>(key);
      if (v.valid && v.value < 1) item.context().error(v.loc, item.child_path(key), "expected a positive integer");
      *field = v.value;
    }
    p.efficiency = fraction(f, item, "efficiency");
    out.push_back(p);
  }
  return out;
}

// tiling: {compute_units: 108, tiles: [[256, 128], [128, 128]], source: "..."}
GemmTiling parse_gemm_tiling(const Node& node) {
  MapReader r(node);
  GemmTiling t;
  const auto units = r.required<int>("compute_units");
  if (units.valid && units.value < 1)
    node.context().error(units.loc, node.child_path("compute_units"), "expected a positive integer");
  t.compute_units = units.value;
  (void)r.required<std::string>("source");
  if (auto tiles = r.required_child("tiles", "a list of [rows, columns] tile sizes")) {
    for (const auto& item : tiles->items()) {
      const auto dims = item.is_sequence() ? item.items() : std::vector<Node>{};
      if (dims.size() != 2) {
        item.context().error(item.location(), item.path(), "expected [rows, columns], e.g. [128, 128]");
        continue;
      }
      const auto rows = dims[0].as<std::int64_t>();
      const auto columns = dims[1].as<std::int64_t>();
      if (!rows || !columns) continue;  // reported by as()
      if (*rows < 1 || *columns < 1) {
        item.context().error(item.location(), item.path(), "expected positive tile sizes");
        continue;
      }
      t.tiles.emplace_back(*rows, *columns);
    }
    if (t.tiles.empty()) tiles->context().error(tiles->location(), tiles->path(), "expected at least one tile size");
  }
  return t;
}

}  // namespace

std::optional<DeviceCosts> parse_device_costs(const Node& node) {
  auto& ctx = node.context();
  const std::size_t errors_before = ctx.error_count();
  MapReader r(node);
  DeviceCosts d;
  d.device_kind = r.required<std::string>("device_kind").value;
  if (auto peak = r.required_child("peak", "a mapping with matrix_bf16 and memory_bandwidth")) {
    MapReader p(*peak);
    d.peak_matrix_bf16 = p.required<sim::FlopRate>("matrix_bf16").value;
    d.memory_bandwidth = p.required<sim::Bandwidth>("memory_bandwidth").value;
  }
  if (auto gemm = r.required_child("gemm", "a mapping with efficiency")) {
    MapReader g(*gemm);
    d.gemm_efficiency = fraction(g, *gemm, "efficiency");
    if (auto table = g.child("efficiency_table")) d.gemm_table = parse_gemm_table(*table);
    if (auto tiling = g.child("tiling")) d.gemm_tiling = parse_gemm_tiling(*tiling);
  }
  if (auto mem = r.child("memory_bound")) {
    MapReader m(*mem);
    d.memory_efficiency = fraction(m, *mem, "efficiency");
  }
  if (ctx.error_count() != errors_before) return std::nullopt;
  return d;
}

const CollectiveFit& MeasuredCosts::collective(const std::string& name, int ranks, std::string* note) const {
  const CollectiveFit* best = nearest(
      collectives.at(name), [](const CollectiveFit& f) { return f.ranks; }, ranks);
  if (best == nullptr) throw std::out_of_range(name);
  if (best->ranks != ranks && note != nullptr) {
    *note = fmt::format("{} over {} ranks uses the fit measured at {} ranks (nearest group size)", name, ranks,
                        best->ranks);
  }
  return *best;
}

namespace {

// log-linear interpolation of a measured (bytes, busbw) curve at `bytes`, clamped at its ends.
double interpolate_by_size(const std::vector<std::pair<double, double>>& curve, double bytes) {
  if (bytes <= curve.front().first) return curve.front().second;
  if (bytes >= curve.back().first) return curve.back().second;
  const auto hi = std::lower_bound(curve.begin(), curve.end(), bytes,
                                   [](const std::pair<double, double>& p, double b) { return p.first < b; });
  const auto lo = hi - 1;
  const double t = std::log(bytes / lo->first) / std::log(hi->first / lo->first);
  return lo->second + t * (hi->second - lo->second);
}

}  // namespace

std::optional<sim::Bandwidth> MeasuredCosts::measured_bus_bandwidth(const std::string& name, int ranks, double bytes,
                                                                    bool spans_nodes) const {
  const auto it = collectives.find(name);
  if (it == collectives.end()) return std::nullopt;
  std::vector<const CollectiveFit*> with_points;
  for (const auto& f : it->second) {
    if (!f.measured.empty() && (f.nodes == 0 || (f.nodes > 1) == spans_nodes)) with_points.push_back(&f);
  }
  if (with_points.empty()) return std::nullopt;
  std::sort(with_points.begin(), with_points.end(), [](const auto* a, const auto* b) { return a->ranks < b->ranks; });
  // At the same bytes per rank: a group of g measured ranks sees bytes x g / ranks.
  const auto at = [&](const CollectiveFit* f) {
    return interpolate_by_size(f->measured, bytes * f->ranks / static_cast<double>(ranks));
  };
  if (ranks <= with_points.front()->ranks) return sim::Bandwidth{at(with_points.front())};
  if (ranks >= with_points.back()->ranks) return sim::Bandwidth{at(with_points.back())};
  const auto hi =
      std::find_if(with_points.begin(), with_points.end(), [&](const auto* f) { return f->ranks >= ranks; });
  const auto lo = hi - 1;
  const double t =
      std::log(static_cast<double>(ranks) / (*lo)->ranks) / std::log(static_cast<double>((*hi)->ranks) / (*lo)->ranks);
  return sim::Bandwidth{at(*lo) + t * (at(*hi) - at(*lo))};
}

std::optional<MeasuredCosts> parse_measured_costs(const Node& node) {
  auto& ctx = node.context();
  const std::size_t errors_before = ctx.error_count();
  MapReader r(node);
  MeasuredCosts c;
  c.device_kind = r.required<std::string>("device_kind").value;
  const auto read_fit = [](MapReader& m) {
    if (auto fit = m.child("fit")) {
      MapReader f(*fit);  // fit quality, kept for the reader; not used by the model
      (void)f.optional<int>("rows", 0);
      (void)f.optional<double>("max_relative_residual", 0.0);
      (void)f.optional<std::string>("note", "");
    }
  };
  if (auto coll = r.child("collectives")) {
    MapReader cr(*coll);
    for (const char* name : {"all_gather", "reduce_scatter", "all_reduce"}) {
      auto list = cr.child(name);
      if (!list) continue;
      auto& fits = c.collectives[name];
      for (const auto& item : list->items()) {
        MapReader f(item);
        CollectiveFit fit;
        const auto ranks = f.required<int>("ranks");
        if (ranks.valid && ranks.value < 2) ctx.error(ranks.loc, item.child_path("ranks"), "expected at least 2 ranks");
        fit.ranks = ranks.value;
        const auto nodes = f.optional<int>("nodes", 0);
        if (nodes.valid && nodes.value < 0) ctx.error(nodes.loc, item.child_path("nodes"), "expected a count >= 1");
        fit.nodes = nodes.value;
        fit.step_latency = f.required<sim::TimePs>("step_latency").value;
        const auto busbw = f.required<sim::Bandwidth>("bus_bandwidth");
        if (busbw.valid && !(busbw.value.bytes_per_s > 0.0)) {
          ctx.error(busbw.loc, item.child_path("bus_bandwidth"), "expected a positive bandwidth");
        }
        fit.bus_bandwidth = busbw.value;
        read_fit(f);
        if (auto points = f.child("measured")) {
          for (const auto& point : points->items()) {
            const auto pair = point.items();
            if (pair.size() != 2) {
              ctx.error(point.location(), point.path(), "expected [bytes, \"bus bandwidth\"]");
              continue;
            }
            const auto bytes = pair[0].as<double>();
            const auto bw = pair[1].as<sim::Bandwidth>();
            if (!bytes || !bw) continue;
            if (!(*bytes > 0.0) || !(bw->bytes_per_s > 0.0)) {
              ctx.error(point.location(), point.path(), "expected a positive size and bandwidth");
              continue;
            }
            if (!fit.measured.empty() && *bytes <= fit.measured.back().first) {
              ctx.error(point.location(), point.path(), "expected sizes in ascending order");
              continue;
            }
            fit.measured.emplace_back(*bytes, bw->bytes_per_s);
          }
        }
        fits.push_back(fit);
      }
    }
  }
  if (auto copies = r.child("copies")) {
    MapReader cr(*copies);
    for (const char* name : {"h2d_pinned", "h2d_pageable", "d2h_pinned", "d2h_pageable", "peer"}) {
      auto item = cr.child(name);
      if (!item) continue;
      MapReader f(*item);
      c.copies[name] = CopyFit{f.required<sim::TimePs>("latency").value, f.required<sim::Bandwidth>("bandwidth").value};
      read_fit(f);
    }
  }
  for (auto [key, fits] :
       {std::pair{"cpu_adam", &c.cpu_adam}, {"cpu_upcast", &c.cpu_upcast}, {"cpu_downcast", &c.cpu_downcast}}) {
    auto list = r.child(key);
    if (!list) continue;
    for (const auto& item : list->items()) {
      MapReader f(item);
      fits->push_back({f.required<int>("threads").value, f.required<double>("params_per_s").value});
      (void)f.optional<int>("rows", 0);
    }
  }
  if (auto work = r.child("cpu_work")) {
    MapReader w(*work);
    const auto bw = w.required<sim::Bandwidth>("bandwidth");
    if (bw.valid && !(bw.value.bytes_per_s > 0.0)) {
      ctx.error(bw.loc, work->child_path("bandwidth"), "expected a positive bandwidth");
    }
    c.cpu_work_bandwidth = bw.value;
    read_fit(w);
  }
  if (auto gemm = r.child("gemm")) {
    MapReader g(*gemm);
    if (auto table = g.required_child("efficiency_table", "a list of {m, n, k, efficiency}"))
      c.gemm = parse_gemm_table(*table);
  }
  if (ctx.error_count() != errors_before) return std::nullopt;
  return c;
}

}  // namespace offsim::models
