#include "models/cost/cost_model.hpp"

#include <fmt/format.h>

namespace offsim::models {

using sim::config::MapReader;
using sim::config::Node;

sim::TimePs CostModel::gemm_time(sim::Flops flops) const {
  return flops / (device_.peak_matrix_bf16 * device_.gemm_efficiency);
}

sim::TimePs CostModel::memory_bound_time(sim::Bytes bytes) const {
  return bytes / (device_.memory_bandwidth * device_.memory_efficiency.value_or(1.0));
}

std::vector<std::string> CostModel::approximations() const {
  std::vector<std::string> out;
  out.push_back(fmt::format("GEMMs on {} use one efficiency ({:.3f} of peak) for every shape: an upper bound",
                            device_.device_kind, device_.gemm_efficiency));
  if (!device_.memory_efficiency) {
    out.push_back(
        fmt::format("memory-bound kernels on {} use the roofline ceiling (no measured efficiency in the table)",
                    device_.device_kind));
  }
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
  }
  if (auto mem = r.child("memory_bound")) {
    MapReader m(*mem);
    d.memory_efficiency = fraction(m, *mem, "efficiency");
  }
  if (ctx.error_count() != errors_before) return std::nullopt;
  return d;
}

const CollectiveFit& MeasuredCosts::collective(const std::string& name, int ranks, std::string* note) const {
  const auto& fits = collectives.at(name);
  if (fits.empty()) throw std::out_of_range(name);
  const CollectiveFit* best = &fits.front();
  for (const auto& f : fits) {
    if (std::abs(f.ranks - ranks) < std::abs(best->ranks - ranks)) best = &f;
  }
  if (best->ranks != ranks && note != nullptr) {
    *note = fmt::format("{} over {} ranks uses the fit measured at {} ranks (nearest group size)", name, ranks,
                        best->ranks);
  }
  return *best;
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
        fit.step_latency = f.required<sim::TimePs>("step_latency").value;
        const auto busbw = f.required<sim::Bandwidth>("bus_bandwidth");
        if (busbw.valid && !(busbw.value.bytes_per_s > 0.0)) {
          ctx.error(busbw.loc, item.child_path("bus_bandwidth"), "expected a positive bandwidth");
        }
        fit.bus_bandwidth = busbw.value;
        read_fit(f);
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
  if (auto adam = r.child("cpu_adam")) {
    for (const auto& item : adam->items()) {
      MapReader f(item);
      c.cpu_adam.push_back({f.required<int>("threads").value, f.required<double>("params_per_s").value});
      (void)f.optional<int>("rows", 0);
    }
  }
  if (auto gemm = r.child("gemm")) {
    MapReader g(*gemm);
    if (auto table = g.required_child("efficiency_table", "a list of {m, n, k, efficiency}")) {
      for (const auto& item : table->items()) {
        MapReader f(item);
        GemmPoint p;
        p.m = f.required<std::int64_t>("m").value;
        p.n = f.required<std::int64_t>("n").value;
        p.k = f.required<std::int64_t>("k").value;
        p.efficiency = fraction(f, item, "efficiency");
        c.gemm.push_back(p);
      }
    }
  }
  if (ctx.error_count() != errors_before) return std::nullopt;
  return c;
}

}  // namespace offsim::models
