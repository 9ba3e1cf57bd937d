#pragma once
// Kernel and collective costs of one device kind, read from a calibration table
// (configs/calibration/*.yaml) where every number names the measurement it comes from.
//
// This first cost model is deliberately coarse, and says so in every report:
//  - GEMM time = FLOPs / (peak matrix rate x one measured efficiency). One efficiency for all
//    shapes is an upper bound on real transformer GEMMs (its source is a best-shape search).
//  - Memory-bound kernels = bytes / (memory bandwidth x efficiency); without a measured
//    efficiency the roofline ceiling (efficiency 1) is used and the report warns.
//  - Collectives: per ring step a latency, and an efficiency that caps each step's flow at that
//    fraction of its route's bottleneck link, both fitted from measured collectives.
// Shape-dependent tables replace the single efficiencies with the calibration pipeline.
#include <optional>
#include <string>
#include <vector>

#include "sim/config/config_reader.hpp"
#include "sim/core/units.hpp"

namespace offsim::models {

struct DeviceCosts {
  std::string device_kind;
  sim::FlopRate peak_matrix_bf16;
  sim::Bandwidth memory_bandwidth;
  double gemm_efficiency = 0.0;
  std::optional<double> memory_efficiency;  // nullopt: roofline ceiling, with a warning
};

struct CollectivePhaseCosts {
  sim::TimePs step_latency;
  double efficiency = 0.0;  // fraction of the bottleneck link each ring-step flow may use
};

struct CollectiveCosts {
  std::string name;
  CollectivePhaseCosts reduce_scatter;
  CollectivePhaseCosts all_gather;
};

class CostModel {
 public:
  explicit CostModel(DeviceCosts device) : device_(std::move(device)) {}

  [[nodiscard]] sim::TimePs gemm_time(sim::Flops flops) const;
  [[nodiscard]] sim::TimePs memory_bound_time(sim::Bytes bytes) const;
  [[nodiscard]] const DeviceCosts& device() const { return device_; }
  /// What this model approximates, for the report.
  [[nodiscard]] std::vector<std::string> approximations() const;

 private:
  DeviceCosts device_;
};

[[nodiscard]] std::optional<DeviceCosts> parse_device_costs(const sim::config::Node& node);
[[nodiscard]] std::optional<CollectiveCosts> parse_collective_costs(const sim::config::Node& node);

}  // namespace offsim::models
