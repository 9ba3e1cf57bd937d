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

std::optional<CollectiveCosts> parse_collective_costs(const Node& node) {
  auto& ctx = node.context();
  const std::size_t errors_before = ctx.error_count();
  MapReader r(node);
  CollectiveCosts c;
  c.name = r.required<std::string>("name").value;
  (void)r.choice("algorithm", {"bidirectional_ring"});
  const auto phase = [&](std::string_view key, CollectivePhaseCosts& out) {
    if (auto n = r.required_child(key, "a mapping with step_latency and efficiency")) {
      MapReader p(*n);
      out.step_latency = p.required<sim::TimePs>("step_latency").value;
      out.efficiency = fraction(p, *n, "efficiency");
      if (auto fit = p.child("fit")) {
        MapReader f(*fit);  // fit quality, kept for the reader; not used by the model
        (void)f.optional<int>("rows", 0);
        (void)f.optional<double>("max_relative_residual", 0.0);
      }
    }
  };
  phase("reduce_scatter", c.reduce_scatter);
  phase("all_gather", c.all_gather);
  if (ctx.error_count() != errors_before) return std::nullopt;
  return c;
}

}  // namespace offsim::models
