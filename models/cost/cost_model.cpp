#include "models/cost/cost_model.hpp"

#include "models/transformer/fp8.hpp"
#include "sim/config/block_table.hpp"

#include <fmt/format.h>
#include <algorithm>
#include <array>
#include <cmath>
#include <optional>
#include <set>
#include <stdexcept>

namespace offsim::models {

using sim::config::MapReader;
using sim::config::Node;

namespace {
// bf16 operands and result.
constexpr double kGemmElementBytes = 2.0;
double work(std::int64_t m, std::int64_t n, std::int64_t k) {
  return static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k);
}

// A GEMM table as a cost model uses it: `points` (sorted by work when `by_work`) and their grid.
// Default-made, it is the empty table's (no points, no grid).
struct PreparedTable {
  std::vector<GemmPoint> given;
  std::vector<GemmPoint> points;
  std::optional<GemmGrid> grid;
};

bool same_points(const std::vector<GemmPoint>& a, const std::vector<GemmPoint>& b) {
  return std::equal(a.begin(), a.end(), b.begin(), b.end(), [](const GemmPoint& x, const GemmPoint& y) {
    return x.m == y.m && x.n == y.n && x.k == y.k && x.efficiency == y.efficiency;
  });
}

// The table prepared, kept for the next cost model of this thread made from the same one (slot 0:
// the bf16 table, sorted; slot 1: the FP8 one): a sweep's or search's points each make one from the
// same tables, and sorting and gridding them again was 1.6% of a search.
const PreparedTable& prepared(const std::vector<GemmPoint>& table, bool by_work) {
  thread_local std::array<PreparedTable, 2> last;
  PreparedTable& p = last[by_work ? 0 : 1];
  if (same_points(p.given, table)) return p;
  p.given = table;
  p.points = table;
  if (by_work) {
    std::sort(p.points.begin(), p.points.end(),
              [](const GemmPoint& a, const GemmPoint& b) { return work(a.m, a.n, a.k) < work(b.m, b.n, b.k); });
  }
  p.grid = GemmGrid::of(p.points);
  return p;
}

}  // namespace

CostModel::CostModel(DeviceCosts device) : device_(std::move(device)) {
  const PreparedTable& bf16 = prepared(device_.gemm_table, true);
  device_.gemm_table = bf16.points;
  grid_ = bf16.grid;
  if (device_.fp8 && !device_.fp8->gemm_table.empty()) fp8_grid_ = prepared(device_.fp8->gemm_table, false).grid;
}

std::optional<GemmGrid> GemmGrid::of(const std::vector<GemmPoint>& points) {
  if (points.empty()) return std::nullopt;
  std::vector<std::int64_t> ms, ns, ks;
  for (const auto& p : points) {
    ms.push_back(p.m);
    ns.push_back(p.n);
    ks.push_back(p.k);
  }
  for (auto* axis : {&ms, &ns, &ks}) {
    std::sort(axis->begin(), axis->end());
    axis->erase(std::unique(axis->begin(), axis->end()), axis->end());
  }
  // A grid needs at least two values on some axis to interpolate anything, and every combination.
  const std::size_t cells = ms.size() * ns.size() * ks.size();
  if (cells < 2 || points.size() < cells) return std::nullopt;
  GemmGrid g;
  std::vector<double> sum(cells, 0.0);
  std::vector<int> count(cells, 0);
  const auto index_of = [](const std::vector<std::int64_t>& axis, std::int64_t v) {
    return static_cast<std::size_t>(std::lower_bound(axis.begin(), axis.end(), v) - axis.begin());
  };
  for (const auto& p : points) {
    const std::size_t i = (index_of(ms, p.m) * ns.size() + index_of(ns, p.n)) * ks.size() + index_of(ks, p.k);
    sum[i] += p.efficiency;  // repeated measurements of one shape: their mean
    ++count[i];
  }
  for (std::size_t i = 0; i < cells; ++i) {
    if (count[i] == 0) return std::nullopt;
    g.efficiency.push_back(sum[i] / count[i]);
  }
  const auto logs = [](const std::vector<std::int64_t>& axis) {
    std::vector<double> out;
    for (const auto v : axis) out.push_back(std::log(static_cast<double>(v)));
    return out;
  };
  g.log_m = logs(ms);
  g.log_n = logs(ns);
  g.log_k = logs(ks);
  g.min_m = ms.front();
  g.max_m = ms.back();
  g.min_n = ns.front();
  g.max_n = ns.back();
  g.min_k = ks.front();
  g.max_k = ks.back();
  return g;
}

double GemmGrid::at(std::int64_t m, std::int64_t n, std::int64_t k) const {
  // Per axis: the lower cell index and the weight of the upper one, held at the ends.
  const auto locate = [](const std::vector<double>& axis, std::int64_t v) -> std::pair<std::size_t, double> {
    const double x = std::log(static_cast<double>(v));
    if (axis.size() == 1 || x <= axis.front()) return {0, 0.0};
    if (x >= axis.back()) return {axis.size() - 2, 1.0};
    const std::size_t hi = static_cast<std::size_t>(std::upper_bound(axis.begin(), axis.end(), x) - axis.begin());
    return {hi - 1, (x - axis[hi - 1]) / (axis[hi] - axis[hi - 1])};
  };
  const auto [im, wm] = locate(log_m, m);
  const auto [in, wn] = locate(log_n, n);
  const auto [ik, wk] = locate(log_k, k);
  const std::size_t nn = log_n.size(), nk = log_k.size();
  double e = 0.0;
  for (std::size_t dm = 0; dm < 2; ++dm) {
    for (std::size_t dn = 0; dn < 2; ++dn) {
      for (std::size_t dk = 0; dk < 2; ++dk) {
        const double w = (dm ? wm : 1.0 - wm) * (dn ? wn : 1.0 - wn) * (dk ? wk : 1.0 - wk);
        if (w == 0.0) continue;
        const std::size_t cm = std::min(im + dm, log_m.size() - 1);
        const std::size_t cn = std::min(in + dn, nn - 1);
        const std::size_t ck = std::min(ik + dk, nk - 1);
        e += w * efficiency[(cm * nn + cn) * nk + ck];
      }
    }
  }
  return e;
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
  if (grid_) {
    const std::int64_t rows = g.m * g.batch;
    if (rows < grid_->min_m || rows > grid_->max_m || g.n < grid_->min_n || g.n > grid_->max_n || g.k < grid_->min_k ||
        g.k > grid_->max_k) {
      const std::string shape = fmt::format("{} x {} x {}", rows, g.n, g.k);
      if (std::find(outside_grid_.begin(), outside_grid_.end(), shape) == outside_grid_.end()) {
        outside_grid_.push_back(shape);
      }
    }
    return grid_->at(rows, g.n, g.k);
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
  if (fused) return std::max(compute, kernel_floor());
  const sim::TimePs memory =
      sim::duration_of(bytes, device_.memory_bandwidth.bytes_per_s * device_.memory_efficiency.value_or(1.0));
  return std::max({compute, memory, kernel_floor()});
}

sim::TimePs CostModel::fp8_gemm_time(const GemmShape& g) const {
  if (!device_.fp8 || !device_.fp8->supported) {
    throw std::logic_error(fmt::format("no FP8 GEMM costs for {}", device_.device_kind));
  }
  const auto& f = *device_.fp8;
  double efficiency = f.gemm_efficiency;
  if (fp8_grid_) {
    const std::int64_t rows = g.m * g.batch;
    if (rows < fp8_grid_->min_m || rows > fp8_grid_->max_m || g.n < fp8_grid_->min_n || g.n > fp8_grid_->max_n ||
        g.k < fp8_grid_->min_k || g.k > fp8_grid_->max_k) {
      const std::string shape = fmt::format("{} x {} x {}", rows, g.n, g.k);
      if (std::find(fp8_outside_grid_.begin(), fp8_outside_grid_.end(), shape) == fp8_outside_grid_.end()) {
        fp8_outside_grid_.push_back(shape);
      }
    }
    efficiency = fp8_grid_->at(rows, g.n, g.k);
  }
  const double batch = static_cast<double>(g.batch);
  const double m = static_cast<double>(g.m), n = static_cast<double>(g.n), k = static_cast<double>(g.k);
  // FP8 operands, bf16 result.
  const double bytes = batch * (static_cast<double>(kFp8Bytes) * (m * k + k * n) + kGemmElementBytes * m * n);
  const sim::TimePs compute = sim::Flops{g.flops()} / (f.peak * efficiency);
  const sim::TimePs memory =
      sim::duration_of(bytes, device_.memory_bandwidth.bytes_per_s * device_.memory_efficiency.value_or(1.0));
  return std::max({compute, memory, kernel_floor()});
}

sim::TimePs CostModel::kernel_floor() const {
  return device_.kernel_launch.value_or(sim::TimePs{0});
}

sim::TimePs CostModel::memory_bound_time(sim::Bytes bytes, std::string_view kernel, bool backward) const {
  double efficiency = device_.memory_efficiency.value_or(1.0);
  if (!kernel.empty()) {
    if (auto it = device_.kernel_efficiency.find(kernel); it != device_.kernel_efficiency.end()) {
      efficiency *= backward ? it->second.backward : it->second.forward;
    }
  }
  return std::max(bytes / (device_.memory_bandwidth * efficiency), kernel_floor());
}

std::optional<std::pair<double, double>> CostModel::sdpa_rates(std::string_view backend, std::int64_t head_dim,
                                                               std::int64_t seq, bool gqa) const {
  std::vector<const DeviceCosts::SdpaPoint*> kind;
  for (const auto& p : device_.sdpa) {
    if (p.backend == backend && p.gqa == gqa) kind.push_back(&p);
  }
  if (kind.empty()) {
    for (const auto& p : device_.sdpa) {
      if (p.backend == backend) kind.push_back(&p);
    }
  }
  if (kind.empty()) return std::nullopt;
  // The measured head sizes and sequences bracketing the query, held at the edges.
  const auto bracket = [&](auto key, double x) {
    double lo = -1.0, hi = -1.0, min = 0.0, max = 0.0;
    bool first = true;
    for (const auto* p : kind) {
      const double v = static_cast<double>(key(*p));
      if (first || v < min) min = v;
      if (first || v > max) max = v;
      first = false;
      if (v <= x && (lo < 0.0 || v > lo)) lo = v;
      if (v >= x && (hi < 0.0 || v < hi)) hi = v;
    }
    if (lo < 0.0) lo = hi = min;
    if (hi < 0.0) lo = hi = max;
    return std::pair{lo, hi};
  };
  const auto hd = bracket([](const DeviceCosts::SdpaPoint& p) { return p.head_dim; }, static_cast<double>(head_dim));
  const auto sq = bracket([](const DeviceCosts::SdpaPoint& p) { return p.seq; }, static_cast<double>(seq));
  // The rates at (d, s) for measured d and s (the grid is full: bench/torch/sdpa_table.py).
  const auto at = [&](double d, double s) -> std::pair<double, double> {
    for (const auto* p : kind) {
      if (static_cast<double>(p->head_dim) == d && static_cast<double>(p->seq) == s) return {p->forward, p->backward};
    }
    return {0.0, 0.0};
  };
  const auto weight = [](std::pair<double, double> r, double x) {
    return r.second > r.first ? (x - r.first) / (r.second - r.first) : 0.0;
  };
  const double wd = weight(hd, static_cast<double>(std::clamp(static_cast<double>(head_dim), hd.first, hd.second)));
  const double ls = std::log(static_cast<double>(seq));
  const double ws = sq.second > sq.first
                        ? std::clamp((ls - std::log(sq.first)) / (std::log(sq.second) - std::log(sq.first)), 0.0, 1.0)
                        : 0.0;
  std::pair<double, double> out{0.0, 0.0};
  for (const auto& [d, wdd] : {std::pair{hd.first, 1.0 - wd}, std::pair{hd.second, wd}}) {
    for (const auto& [sv, wss] : {std::pair{sq.first, 1.0 - ws}, std::pair{sq.second, ws}}) {
      const auto r = at(d, sv);
      out.first += wdd * wss * r.first;
      out.second += wdd * wss * r.second;
    }
  }
  if (!(out.first > 0.0) || !(out.second > 0.0)) return std::nullopt;
  return out;
}

std::vector<std::string> CostModel::approximations() const {
  std::vector<std::string> out;
  for (const auto& missing : device_.unmeasured) {
    out.push_back(fmt::format("largest uncertainty on {}, not measured: {}", device_.device_kind, missing));
  }
  if (device_.gemm_shape_from == device_.device_kind) {
    out.push_back(fmt::format(
        "GEMMs on {}: its best-shape efficiency ({:.3f} of peak) times its own tuning table's shape dependence "
        "(relative to that table's best shape; {} shapes, interpolated by work m n k)",
        device_.device_kind, device_.gemm_efficiency, device_.gemm_table.size()));
  } else if (!device_.gemm_shape_from.empty()) {
    out.push_back(fmt::format(
        "GEMMs on {}: its best-shape efficiency ({:.3f} of peak) times the shape dependence measured on {} (relative "
        "to that device's best shape), assumed to carry over",
        device_.device_kind, device_.gemm_efficiency, device_.gemm_shape_from));
  }
  if (device_.gemm_table.empty() && device_.gemm_tiling) {
    out.push_back(fmt::format(
        "GEMMs on {}: the best-shape efficiency ({:.3f} of peak) times tile and wave quantization over {} compute "
        "units; other shape effects (short K, small tiles' lower efficiency) are not modelled: an upper bound",
        device_.device_kind, device_.gemm_efficiency, device_.gemm_tiling->compute_units));
  } else if (device_.gemm_table.empty()) {
    out.push_back(fmt::format("GEMMs on {} use one efficiency ({:.3f} of peak) for every shape: an upper bound",
                              device_.device_kind, device_.gemm_efficiency));
  }
  if (device_.flash_attention) {
    out.push_back(fmt::format(
        "flash attention on {} (when used): its measured kernels, forward {:.3f} and backward {:.3f} of peak "
        "(FlashAttention-2's FLOP count, backward 2.5 x forward), at every shape",
        device_.device_kind, device_.flash_attention->forward, device_.flash_attention->backward));
  }
  if (!device_.memory_efficiency) {
    out.push_back(
        fmt::format("memory-bound kernels on {} use the roofline ceiling (no measured efficiency in the table)",
                    device_.device_kind));
  }
  if (device_.kernel_efficiency.empty()) {
    out.push_back(fmt::format(
        "non-GEMM kernels on {} (norms, softmax, activations, dropout, residual adds) stream at the device's "
        "streaming efficiency: no measured per-kernel efficiencies in the table, an upper bound",
        device_.device_kind));
  }
  if (!device_.kernel_launch) {
    out.push_back(
        fmt::format("kernels on {} have no launch floor (none measured in the table): small kernels are "
                    "costed by their work alone",
                    device_.device_kind));
  }
  if (!outside_grid_.empty()) {
    // One line for all of them: how many shapes, a few of them, and the grid they fall outside.
    constexpr std::size_t kShown = 3;
    const std::vector<std::string> shown(
        outside_grid_.begin(),
        outside_grid_.begin() + static_cast<std::ptrdiff_t>(std::min(kShown, outside_grid_.size())));
    out.push_back(fmt::format(
        "GEMMs on {}: {} shape{} outside the measured grid (m {}..{}, n {}..{}, k {}..{}) {} the nearest edge's "
        "efficiency: {}{}",
        device_.device_kind, outside_grid_.size(), outside_grid_.size() == 1 ? "" : "s", grid_->min_m, grid_->max_m,
        grid_->min_n, grid_->max_n, grid_->min_k, grid_->max_k, outside_grid_.size() == 1 ? "uses" : "use",
        fmt::join(shown, ", "), outside_grid_.size() > kShown ? ", ..." : ""));
  }
  if (!fp8_outside_grid_.empty()) {
    constexpr std::size_t kShown = 3;
    const std::vector<std::string> shown(
        fp8_outside_grid_.begin(),
        fp8_outside_grid_.begin() + static_cast<std::ptrdiff_t>(std::min(kShown, fp8_outside_grid_.size())));
    out.push_back(fmt::format(
        "FP8 GEMMs on {}: {} shape{} outside the measured FP8 grid (m {}..{}, n {}..{}, k {}..{}) {} the nearest "
        "edge's efficiency: {}{}",
        device_.device_kind, fp8_outside_grid_.size(), fp8_outside_grid_.size() == 1 ? "" : "s", fp8_grid_->min_m,
        fp8_grid_->max_m, fp8_grid_->min_n, fp8_grid_->max_n, fp8_grid_->min_k, fp8_grid_->max_k,
        fp8_outside_grid_.size() == 1 ? "uses" : "use", fmt::join(shown, ", "),
        fp8_outside_grid_.size() > kShown ? ", ..." : ""));
  }
  out.insert(out.end(), fallbacks_.begin(), fallbacks_.end());
  return out;
}

namespace {

double fraction(MapReader& r, const Node& node, std::string_view key) {
  const auto v = r.required<double>(key);
  if (v.valid) sim::config::check_fraction(node.context(), v.loc, node.child_path(key), v.value);
  return v.value;
}

// The block form, `efficiency_table: |` with a header line `m n k efficiency` (what `offsim
// calibrate` writes: sim/config/block_table.hpp says why).
std::vector<GemmPoint> parse_gemm_block_table(const Node& table) {
  static constexpr std::array<std::string_view, 4> kColumns{"m", "n", "k", "efficiency"};
  std::vector<GemmPoint> out;
  const auto rows = sim::config::read_block_table(table, kColumns);
  if (!rows) return out;
  for (const auto& row : *rows) {
    GemmPoint p;
    for (auto [c, field] : {std::pair{0, &p.m}, {1, &p.n}, {2, &p.k}}) {
      // Exact integers only: a dimension is a count, and 2^53 bounds what a double holds exactly
      // (and keeps the conversion defined). A bad one is reported; the table is then not used.
      const auto& cell = row.cells[static_cast<std::size_t>(c)];
      if (cell.value >= 1.0 && cell.value <= 0x1p53 && std::floor(cell.value) == cell.value) {
        *field = static_cast<std::int64_t>(cell.value);
      } else {
        table.context().error(cell.loc, fmt::format("{}.{}", row.path, kColumns[static_cast<std::size_t>(c)]),
                              fmt::format("expected a positive integer, got {}", cell.value));
      }
    }
    p.efficiency = row.cells[3].value;
    sim::config::check_fraction(table.context(), row.cells[3].loc, row.path + ".efficiency", p.efficiency);
    out.push_back(p);
  }
  return out;
}

// efficiency_table: a block table (above), or a list of {m, n, k, efficiency} mappings.
std::vector<GemmPoint> parse_gemm_table(const Node& table) {
  if (table.is_scalar()) return parse_gemm_block_table(table);
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

// fp8: {supported: false, source} or {matrix_peak, mxfp8, source, gemm: {efficiency, source,
// measured: !include x.gemm-fp8.yaml}}; the measured table must be a full m x n x k grid.
DeviceCosts::Fp8Costs parse_fp8_costs(const Node& node, const std::string& device_kind) {
  auto& ctx = node.context();
  MapReader r(node);
  DeviceCosts::Fp8Costs f;
  f.supported = r.optional<bool>("supported", true).value;
  f.source = r.required<std::string>("source").value;
  if (!f.supported) return f;
  const auto peak = r.required<sim::FlopRate>("matrix_peak");
  if (peak.valid && !(peak.value.flops_per_s > 0.0)) {
    ctx.error(peak.loc, node.child_path("matrix_peak"), "expected a positive FLOP rate");
  }
  f.peak = peak.value;
  f.mxfp8 = r.optional<bool>("mxfp8", false).value;
  if (auto gemm = r.required_child("gemm", "a mapping with efficiency (and a measured table)")) {
    MapReader g(*gemm);
    f.gemm_efficiency = fraction(g, *gemm, "efficiency");
    (void)g.required<std::string>("source");
    if (auto measured = g.child("measured")) {
      if (auto m = parse_measured_costs(*measured)) {
        if (m->device_kind != device_kind) {
          ctx.error(
              measured->location(), measured->child_path("device_kind"),
              fmt::format("the measured FP8 GEMM table is for '{}', this table for '{}'", m->device_kind, device_kind));
        } else if (m->gemm.empty()) {
          ctx.error(measured->location(), measured->path(), "the included table has no gemm efficiency_table");
        } else if (m->gemm_peak && std::abs(m->gemm_peak->flops_per_s / f.peak.flops_per_s - 1.0) > 1e-3) {
          ctx.error(measured->location(), measured->child_path("gemm"),
                    fmt::format("its efficiencies are relative to {}, the FP8 peak is {}",
                                sim::format_flop_rate(*m->gemm_peak), sim::format_flop_rate(f.peak)));
        } else if (!GemmGrid::of(m->gemm)) {
          ctx.error(measured->location(), measured->path(),
                    "the FP8 table must be a full m x n x k grid (every combination of its m, n and k values)");
        } else {
          f.gemm_table = m->gemm;
        }
      }
    }
  }
  return f;
}

// parse_device_costs, step 1: peak: {matrix_bf16, memory_bandwidth}, both positive.
void parse_peaks(const Node& peak, DeviceCosts& d) {
  auto& ctx = peak.context();
  MapReader p(peak);
  const auto matrix = p.required<sim::FlopRate>("matrix_bf16");
  if (matrix.valid && !(matrix.value.flops_per_s > 0.0)) {
    ctx.error(matrix.loc, peak.child_path("matrix_bf16"), "expected a positive FLOP rate");
  }
  d.peak_matrix_bf16 = matrix.value;
  const auto memory = p.required<sim::Bandwidth>("memory_bandwidth");
  if (memory.valid && !(memory.value.bytes_per_s > 0.0)) {
    ctx.error(memory.loc, peak.child_path("memory_bandwidth"), "expected a positive bandwidth");
  }
  d.memory_bandwidth = memory.value;
}

// gemm.shape_from: !include y.gemm.yaml -- another device's measured grid: its efficiency by shape
// relative to its best shape, times this device's best-shape efficiency (no grid of its own).
void add_shape_from_table(const Node& other, DeviceCosts& d) {
  auto m = parse_measured_costs(other);
  if (!m) return;
  if (m->gemm.empty()) {
    other.context().error(other.location(), other.path(), "the included table has no gemm efficiency_table");
    return;
  }
  double best = 0.0;
  for (const auto& p : m->gemm) best = std::max(best, p.efficiency);
  for (auto p : m->gemm) {
    p.efficiency = d.gemm_efficiency * p.efficiency / best;
    d.gemm_table.push_back(p);
  }
  d.gemm_shape_from = m->device_kind;
}

// gemm.measured: !include x.gemm.yaml -- a table written by `offsim calibrate` from gemm_bench
// rows, for this device kind and relative to this table's peak.
void add_measured_gemm_table(const Node& measured, DeviceCosts& d) {
  auto& ctx = measured.context();
  auto m = parse_measured_costs(measured);
  if (!m) return;
  if (m->device_kind != d.device_kind) {
    ctx.error(measured.location(), measured.child_path("device_kind"),
              fmt::format("the measured GEMM table is for '{}', this table for '{}'", m->device_kind, d.device_kind));
  } else if (m->gemm.empty()) {
    ctx.error(measured.location(), measured.path(), "the included table has no gemm efficiency_table");
  } else if (m->gemm_peak && std::abs(m->gemm_peak->flops_per_s / d.peak_matrix_bf16.flops_per_s - 1.0) > 1e-3) {
    ctx.error(measured.location(), measured.child_path("gemm"),
              fmt::format("its efficiencies are relative to {}, this table's peak is {}",
                          sim::format_flop_rate(*m->gemm_peak), sim::format_flop_rate(d.peak_matrix_bf16)));
  } else {
    d.gemm_table.insert(d.gemm_table.end(), m->gemm.begin(), m->gemm.end());
  }
}

// parse_device_costs, step 2: gemm: {efficiency, efficiency_table, shape_from or measured, tiling}.
void parse_gemm_costs(const Node& gemm, DeviceCosts& d) {
  MapReader g(gemm);
  d.gemm_efficiency = fraction(g, gemm, "efficiency");
  if (auto table = g.child("efficiency_table")) d.gemm_table = parse_gemm_table(*table);
  if (auto other = g.child("shape_from")) add_shape_from_table(*other, d);
  if (auto measured = g.child("measured"); measured && g.has("shape_from")) {
    gemm.context().error(measured->location(), measured->path(),
                         "give either a measured table or shape_from (another device's shapes), not both");
  } else if (measured) {
    add_measured_gemm_table(*measured, d);
  }
  if (auto tiling = g.child("tiling")) d.gemm_tiling = parse_gemm_tiling(*tiling);
}

// memory_bound.kernels: !include ../calibration/x.kernels.yaml -- {source,
// relative_to_streaming: {name: {forward, backward}}}, positive relative efficiencies, for the
// classes `names` (the generic kernels' classes, or memory_bound.framework_kernels': the classes
// of the frameworks' kernel chains, configs/frameworks/).
template <class Names>
void parse_kernel_efficiencies(const Node& kernels, const Names& names, DeviceCosts& d) {
  auto& ctx = kernels.context();
  MapReader k(kernels);
  (void)k.required<std::string>("source");
  (void)k.optional<std::string>("command", "");
  auto table = k.required_child("relative_to_streaming", "a mapping of kernel name to {forward, backward}");
  if (!table) return;
  MapReader t(*table);
  for (const auto& class_name : names) {
    const std::string name(class_name);
    const auto found = t.child(name);
    if (!found) continue;
    const Node& entry = *found;
    MapReader e(entry);
    DeviceCosts::KernelEfficiency eff;
    for (auto [key, field] : {std::pair{"forward", &eff.forward}, {"backward", &eff.backward}}) {
      const auto v = e.required<double>(key);
      if (v.valid && !(v.value > 0.0)) {
        ctx.error(v.loc, entry.child_path(key),
                  fmt::format("expected a positive relative efficiency, got {}", v.value));
      }
      *field = v.value;
    }
    d.kernel_efficiency[name] = eff;
  }
}

// sdpa: !include x.sdpa.yaml -- {source, command, points: [{backend, head_dim, seq, gqa, forward, backward}]},
// a full grid of head sizes by sequences for each kind (GQA or not) measured.
void parse_sdpa_points(const Node& node, DeviceCosts& d) {
  auto& ctx = node.context();
  MapReader r(node);
  (void)r.required<std::string>("source");
  (void)r.optional<std::string>("command", "");
  auto points = r.required_child("points", "a list of {head_dim, seq, gqa, forward, backward}");
  if (!points) return;
  for (const auto& item : points->items()) {
    MapReader p(item);
    DeviceCosts::SdpaPoint pt;
    pt.backend = p.required<std::string>("backend").value;
    pt.head_dim = p.required<std::int64_t>("head_dim").value;
    pt.seq = p.required<std::int64_t>("seq").value;
    pt.gqa = p.required<bool>("gqa").value;
    pt.forward = p.required<sim::FlopRate>("forward").value.flops_per_s;
    pt.backward = p.required<sim::FlopRate>("backward").value.flops_per_s;
    if (pt.head_dim < 1 || pt.seq < 1 || !(pt.forward > 0.0) || !(pt.backward > 0.0)) {
      ctx.error(item.location(), item.path(), "expected a positive head_dim, seq and rates");
    }
    d.sdpa.push_back(pt);
  }
  // Every measured head size at every measured sequence, per kind (sdpa_rates interpolates on the grid).
  std::set<std::string> backends;
  for (const auto& pt : d.sdpa) backends.insert(pt.backend);
  for (const auto& backend : backends)
    for (const bool gqa : {false, true}) {
      std::set<std::int64_t> dims, seqs;
      std::size_t n = 0;
      for (const auto& pt : d.sdpa) {
        if (pt.gqa != gqa || pt.backend != backend) continue;
        dims.insert(pt.head_dim);
        seqs.insert(pt.seq);
        ++n;
      }
      if (n != dims.size() * seqs.size()) {
        ctx.error(points->location(), points->path(),
                  "expected every head_dim at every seq (a full grid) per backend and gqa");
      }
    }
}

// parse_device_costs, step 3: memory_bound: {efficiency, source, kernel_launch, kernels}.
void parse_memory_bound_costs(const Node& mem, DeviceCosts& d) {
  MapReader m(mem);
  d.memory_efficiency = fraction(m, mem, "efficiency");
  (void)m.required<std::string>("source");
  if (auto launch = m.child("kernel_launch")) {
    if (auto t = launch->as<sim::TimePs>()) {
      if (*t < sim::TimePs{0}) mem.context().error(launch->location(), launch->path(), "expected a non-negative time");
      d.kernel_launch = *t;
    }
  }
  if (auto kernels = m.child("kernels")) parse_kernel_efficiencies(*kernels, kElementwiseKernelClasses, d);
  if (auto kernels = m.child("framework_kernels")) parse_kernel_efficiencies(*kernels, framework_kernel_classes(), d);
}

}  // namespace

std::optional<DeviceCosts> parse_device_costs(const Node& node) {
  auto& ctx = node.context();
  const std::size_t errors_before = ctx.error_count();
  MapReader r(node);
  DeviceCosts d;
  d.device_kind = r.required<std::string>("device_kind").value;
  if (auto peak = r.required_child("peak", "a mapping with matrix_bf16 and memory_bandwidth")) parse_peaks(*peak, d);
  if (auto gemm = r.required_child("gemm", "a mapping with efficiency")) parse_gemm_costs(*gemm, d);
  if (auto mem = r.child("memory_bound")) parse_memory_bound_costs(*mem, d);
  if (auto fp8 = r.child("fp8")) d.fp8 = parse_fp8_costs(*fp8, d.device_kind);
  if (auto sdpa = r.child("sdpa")) parse_sdpa_points(*sdpa, d);
  if (auto units = r.child("compute_units")) {
    MapReader u(*units);
    const auto count = u.required<int>("count");
    if (count.valid && count.value < 1) units->context().error(count.loc, units->child_path("count"), "expected >= 1");
    d.compute_units = count.value;
    (void)u.required<std::string>("source");
  }
  if (auto fa = r.child("flash_attention")) {
    MapReader f(*fa);
    d.flash_attention = DeviceCosts::FlashAttentionEfficiency{fraction(f, *fa, "forward_efficiency"),
                                                              fraction(f, *fa, "backward_efficiency")};
    (void)f.required<std::string>("source");
    (void)f.optional<std::string>("derivation", "");
  }
  if (auto unmeasured = r.child("unmeasured")) {
    for (const auto& item : unmeasured->items()) {
      if (auto text = item.as<std::string>()) d.unmeasured.push_back(*text);
    }
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

// log-linear interpolation of a measured (bytes, busbw) curve at `bytes`. Above the largest
// measured buffer the bus bandwidth is held (the ring's bandwidth-bound limit). Below the smallest
// one the *time* is held: a buffer that small is latency-bound, so it takes at least what the
// smallest measured buffer took, t(b) = t(b0) for b < b0, i.e. busbw(b) = busbw(b0) x b / b0
// (holding the bus bandwidth instead would let the time fall to zero with the buffer).
double interpolate_by_size(const std::vector<std::pair<double, double>>& curve, double bytes) {
  if (bytes <= 0.0) return curve.front().second;
  if (bytes <= curve.front().first) return curve.front().second * bytes / curve.front().first;
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

namespace {

// A fit's quality ({rows, max_relative_residual, note}), kept for the reader; not used by the model.
void read_fit(MapReader& m) {
  if (auto fit = m.child("fit")) {
    MapReader f(*fit);
    (void)f.optional<int>("rows", 0);
    (void)f.optional<double>("max_relative_residual", 0.0);
    (void)f.optional<std::string>("note", "");
  }
}

// A collective fit's measured curve: [bytes, "bus bandwidth"] points, positive, sizes ascending.
void parse_measured_points(const Node& points, CollectiveFit& fit) {
  auto& ctx = points.context();
  for (const auto& point : points.items()) {
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

// One collective fit: {ranks, nodes, step_latency, bus_bandwidth, fit, measured}.
CollectiveFit parse_collective_fit(const Node& item) {
  auto& ctx = item.context();
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
  if (auto points = f.child("measured")) parse_measured_points(*points, fit);
  return fit;
}

// parse_measured_costs, step 1: collectives: {all_gather, reduce_scatter, all_reduce: [fit, ...]}.
void parse_collective_fits(const Node& coll, MeasuredCosts& c) {
  MapReader cr(coll);
  for (const char* name : {"all_gather", "reduce_scatter", "all_reduce"}) {
    auto list = cr.child(name);
    if (!list) continue;
    auto& fits = c.collectives[name];
    for (const auto& item : list->items()) fits.push_back(parse_collective_fit(item));
  }
}

// parse_measured_costs, step 2: copies: {h2d_pinned, ...: {latency, bandwidth, fit}}.
void parse_copy_fits(const Node& copies, MeasuredCosts& c) {
  MapReader cr(copies);
  for (const char* name : {"h2d_pinned", "h2d_pageable", "d2h_pinned", "d2h_pageable", "peer"}) {
    auto item = cr.child(name);
    if (!item) continue;
    MapReader f(*item);
    const auto latency = f.required<sim::TimePs>("latency");
    const auto bandwidth = f.required<sim::Bandwidth>("bandwidth");
    if (bandwidth.valid && !(bandwidth.value.bytes_per_s > 0.0)) {
      copies.context().error(bandwidth.loc, item->child_path("bandwidth"), "expected a positive bandwidth");
    }
    c.copies[name] = CopyFit{latency.value, bandwidth.value};
    read_fit(f);
  }
}

// parse_measured_costs, step 3: a host rate table (cpu_adam, cpu_upcast, cpu_downcast):
// [{threads, params_per_s, rows}, ...].
void parse_cpu_rate_fits(const Node& list, std::vector<CpuRateFit>& fits) {
  auto& ctx = list.context();
  for (const auto& item : list.items()) {
    MapReader f(item);
    const auto threads = f.required<int>("threads");
    if (threads.valid && threads.value < 1) {
      ctx.error(threads.loc, item.child_path("threads"), fmt::format("expected >= 1, got {}", threads.value));
    }
    const auto rate = f.required<double>("params_per_s");
    if (rate.valid && !(rate.value >= 1.0)) {
      // At least one parameter a second: slower rates leave the simulated clock.
      ctx.error(rate.loc, item.child_path("params_per_s"),
                fmt::format("expected a rate of at least 1 parameter per second, got {}", rate.value));
    }
    fits.push_back({threads.value, rate.value});
    (void)f.optional<int>("rows", 0);
  }
}

}  // namespace

namespace {
// A host table's dispatch: {source, forward: {class: time, ...} (every class of
// kHostDispatchClasses), backward_node: time, python (optional): {source, class: time, ...} (every
// class of kHostPythonClasses)}, every time positive.
HostDispatch parse_host_dispatch(const Node& node) {
  auto& ctx = node.context();
  MapReader r(node);
  HostDispatch d;
  d.source = r.required<std::string>("source").value;
  const auto positive = [&](MapReader& m, const Node& parent, const std::string& key) {
    const auto t = m.required<sim::TimePs>(key);
    if (t.valid && !(t.value > sim::TimePs{0})) ctx.error(t.loc, parent.child_path(key), "expected a positive time");
    return t.value;
  };
  if (auto forward = r.required_child("forward", "a mapping of operator class to host time per operator")) {
    MapReader f(*forward);
    for (const auto& cls : kHostDispatchClasses) d.forward[cls] = positive(f, *forward, cls);
  }
  d.backward_node = positive(r, node, "backward_node");
  if (auto python = r.child("python")) {
    MapReader py(*python);
    d.python_source = py.required<std::string>("source").value;
    for (const auto& cls : kHostPythonClasses) d.python[cls] = positive(py, *python, cls);
  }
  return d;
}
}  // namespace

std::optional<MeasuredCosts> parse_measured_costs(const Node& node) {
  auto& ctx = node.context();
  const std::size_t errors_before = ctx.error_count();
  MapReader r(node);
  MeasuredCosts c;
  c.device_kind = r.required<std::string>("device_kind").value;
  if (auto coll = r.child("collectives")) parse_collective_fits(*coll, c);
  if (auto copies = r.child("copies")) parse_copy_fits(*copies, c);
  for (auto [key, fits] :
       {std::pair{"cpu_adam", &c.cpu_adam}, {"cpu_upcast", &c.cpu_upcast}, {"cpu_downcast", &c.cpu_downcast}}) {
    if (auto list = r.child(key)) parse_cpu_rate_fits(*list, *fits);
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
  if (auto dispatch = r.child("dispatch")) c.dispatch = parse_host_dispatch(*dispatch);
  if (auto gemm = r.child("gemm")) {
    MapReader g(*gemm);
    if (auto peak = g.child("peak")) c.gemm_peak = peak->as<sim::FlopRate>();
    if (auto table = g.required_child("efficiency_table", "a list of {m, n, k, efficiency}"))
      c.gemm = parse_gemm_table(*table);
  }
  if (ctx.error_count() != errors_before) return std::nullopt;
  return c;
}

}  // namespace offsim::models
