#pragma once
// Kernel and collective costs of one device kind, read from a calibration table
// (configs/calibration/*.yaml) where every number names the measurement it comes from.
//
// This cost model is coarse, and says so in every report:
//  - A GEMM is the larger of its compute time (peak matrix rate x the efficiency for its shape,
//    from a measured table, or one sourced efficiency for every shape: then an upper bound) and
//    its memory time (gemm_time below).
//  - Memory-bound kernels = bytes / (memory bandwidth x efficiency); without a measured
//    efficiency the roofline ceiling (efficiency 1) is used and the report warns.
//  - Collectives: per ring step a latency, and the bus bandwidth measured at that group size,
//    both fitted by `offsim calibrate` from measured collectives (configs/calibration/*.yaml).
// Host rates (CPU Adam, casts) and copy fits come from `offsim calibrate` tables too.
#include <cstdint>
#include <cstdlib>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "models/transformer/transformer.hpp"
#include "sim/config/config_reader.hpp"
#include "sim/core/units.hpp"

namespace offsim::models {

struct GemmPoint {
  std::int64_t m = 0, n = 0, k = 0;
  double efficiency = 0.0;
};

/// A measured efficiency table that covers every combination of its distinct m, n and k values
/// (bench/run-gpu-calibration.sh measures such a grid): interpolated multilinearly in log m,
/// log n and log k, each held at the ends of its measured range.
struct GemmGrid {
  std::vector<double> log_m, log_n, log_k;  // ascending
  std::vector<double> efficiency;           // [im][in][ik], row-major
  std::int64_t min_m = 0, max_m = 0, min_n = 0, max_n = 0, min_k = 0, max_k = 0;
  /// The grid the points form, or nullopt when some combination is missing.
  [[nodiscard]] static std::optional<GemmGrid> of(const std::vector<GemmPoint>& points);
  [[nodiscard]] double at(std::int64_t m, std::int64_t n, std::int64_t k) const;
};

/// How a GEMM library covers an M x N output with tiles spread over the device's compute units
/// (SMs, CUs): the tile sizes it can choose from and how many tiles run at once.
struct GemmTiling {
  int compute_units = 0;
  std::vector<std::pair<std::int64_t, std::int64_t>> tiles;  // (rows, columns) of the output
};

/// Tile and wave quantization (NVIDIA Deep Learning Performance guide, "Matrix Multiplication
/// Background"): the output is cut into ceil(m/tm) x ceil(n/tn) tiles per batch entry, run in
/// waves of `compute_units` tiles; the last wave and the ragged edge tiles do work nobody asked
/// for. Utilization = useful output elements / (waves x compute_units x tm x tn), the best over
/// the library's tiles (its heuristics pick a good one). In (0, 1].
[[nodiscard]] double tile_wave_utilization(const GemmTiling& tiling, std::int64_t m, std::int64_t n,
                                           std::int64_t batch);

struct DeviceCosts {
  std::string device_kind;
  sim::FlopRate peak_matrix_bf16;
  sim::Bandwidth memory_bandwidth;
  // For every shape when there is no table: with `tiling`, the best-shape efficiency, scaled by
  // each shape's tile and wave utilization; without, one efficiency for all (an upper bound).
  double gemm_efficiency = 0.0;
  std::optional<GemmTiling> gemm_tiling;
  std::vector<GemmPoint> gemm_table;        // measured efficiencies by shape (may be empty)
  std::string gemm_shape_from;              // the device whose grid shapes gemm_table (shape_from)
  std::optional<double> memory_efficiency;  // streaming kernels; nullopt: roofline ceiling, with a warning
  // The least time any kernel takes on the GPU when kernels run back to back (launch and
  // scheduling cost; memory_bound.kernel_launch); nullopt: none modelled, with a warning.
  std::optional<sim::TimePs> kernel_launch;
  // Named non-GEMM kernels' achieved bandwidth relative to the streaming efficiency, forward and
  // backward (memory_bound.kernels: measured framework kernels at layer shapes). Absent: a kernel
  // streams at memory_efficiency.
  struct KernelEfficiency {
    double forward = 1.0, backward = 1.0;
  };
  std::map<std::string, KernelEfficiency, std::less<>> kernel_efficiency;
  // Flash attention's fused kernels measured on this device (`flash_attention:`), as fractions of
  // peak_matrix_bf16: forward, and backward counted as FlashAttention-2 counts it (2.5 x the
  // forward's FLOPs). Absent: the attention cores run at the GEMM efficiency of their shapes.
  struct FlashAttentionEfficiency {
    double forward = 0.0, backward = 0.0;
  };
  std::optional<FlashAttentionEfficiency> flash_attention;
  // PyTorch's F.scaled_dot_product_attention measured on this device (`sdpa:`), causal, by head
  // size, sequence and whether K/V heads are shared: FLOP/s of the causal count (2 b h s^2 d
  // forward; backward 2.5 x that), for the frameworks that call it (pytorch, hf-transformers).
  struct SdpaPoint {
    std::string backend;  // "default" (PyTorch's pick) or a forced backend ("flash_attention")
    std::int64_t head_dim = 0, seq = 0;
    bool gqa = false;
    double forward = 0.0, backward = 0.0;
  };
  std::vector<SdpaPoint> sdpa;
  // FP8 tensor cores (`fp8:`): absent, no FP8 costs are known for the device; `supported: false`,
  // the device has none (its source says so). Otherwise the FP8 matrix peak and the FP8 GEMMs'
  // efficiency by shape, relative to that peak, as for bf16 (one efficiency for shapes the table
  // does not hold, a measured grid interpolated by shape).
  struct Fp8Costs {
    bool supported = false;
    bool mxfp8 = false;  // block-scaled MXFP8 GEMMs (Blackwell's tensor cores)
    std::string source;
    sim::FlopRate peak;
    double gemm_efficiency = 0.0;
    std::vector<GemmPoint> gemm_table;
  };
  std::optional<Fp8Costs> fp8;
  // The device's streaming multiprocessors (compute units): what communication kernels that run
  // beside a GEMM take from it (strategy.tp_comm_overlap). nullopt: not in the table.
  std::optional<int> compute_units;
  // `unmeasured:` what a run on this device costs without any measurement of the device behind
  // it (e.g. its attention kernels under the software of the runs it is checked against): the
  // largest uncertainty of such a run, printed first among the approximations.
  std::vector<std::string> unmeasured;
};

/// A fitted collective at one group size (offsim calibrate, ring model).
struct CollectiveFit {
  int ranks = 0;
  int nodes = 0;  // nodes the measured group spanned; 0: not recorded
  sim::TimePs step_latency;
  sim::Bandwidth bus_bandwidth;
  // Measured bus bandwidth by buffer size (bytes, bytes/s), ascending: the collective
  // implementation's efficiency, pathologies included. Empty: only the alpha-beta fit is known.
  std::vector<std::pair<double, double>> measured;
  friend bool operator==(const CollectiveFit&, const CollectiveFit&) = default;
};

struct CopyFit {
  sim::TimePs latency;
  sim::Bandwidth bandwidth;
};

/// A host rate (elements per second) measured with `threads` threads: CPU Adam or a cast.
struct CpuRateFit {
  int threads = 0;
  double params_per_s = 0.0;
};

/// The entry of `fits` whose `key(entry)` is nearest `target` (the first among equals); nullptr
/// when `fits` is empty. Tables measured at some group sizes or thread counts answer for others.
template <class T, class Key>
[[nodiscard]] const T* nearest(const std::vector<T>& fits, Key key, int target) {
  const T* best = nullptr;
  for (const auto& f : fits) {
    if (!best || std::abs(key(f) - target) < std::abs(key(*best) - target)) best = &f;
  }
  return best;
}

/// The host's wall clock per eager PyTorch operator (a host table's `dispatch:`, written by
/// bench/torch/fit_host_dispatch.py): the Python and dispatcher time before an operator's kernel is
/// issued, forward with autograd recording by operator class, and per autograd backward node.
struct HostDispatch {
  std::map<std::string, sim::TimePs> forward;  // by class: kHostDispatchClasses
  sim::TimePs backward_node{0};
  std::string source;
  // The Python-level calls around the operators that launch no kernel (`python:`, by class:
  // kHostPythonClasses); empty when the table has not measured them.
  std::map<std::string, sim::TimePs> python;
  std::string python_source;
  /// The forward cost of an operator of `op_class` (one of kHostDispatchClasses).
  [[nodiscard]] sim::TimePs forward_cost(const std::string& op_class) const { return forward.at(op_class); }
  /// The host cost of a call of `call_class`: one of kHostPythonClasses (the table must have them)
  /// or of kHostDispatchClasses.
  [[nodiscard]] sim::TimePs call_cost(const std::string& call_class) const {
    const auto it = python.find(call_class);
    return it != python.end() ? it->second : forward.at(call_class);
  }
};

/// The operator classes a dispatch table gives: GEMMs (F.linear, matmul), a fused norm, softmax,
/// and every other operator (elementwise, copies, SDPA's call: the mean of the measured simple ones).
inline const std::vector<std::string> kHostDispatchClasses{"linear", "layer_norm", "softmax", "elementwise"};
/// The Python-level call classes a dispatch table's `python:` gives: an nn.Module call and a
/// view-producing call (view, reshape, transpose, ...), neither launching a kernel.
inline const std::vector<std::string> kHostPythonClasses{"module_call", "view"};

/// A table written by `offsim calibrate`: whichever sections the measurements covered.
struct MeasuredCosts {
  std::string device_kind;
  std::map<std::string, std::vector<CollectiveFit>> collectives;  // "all_gather", ... by ranks
  std::map<std::string, CopyFit> copies;                          // "h2d_pinned", "peer", ...
  std::vector<CpuRateFit> cpu_adam;                               // elements per second by thread count
  std::vector<CpuRateFit> cpu_upcast;                             // bf16 -> fp32 on the host
  std::vector<CpuRateFit> cpu_downcast;                           // fp32 -> bf16 on the host
  // The memory traffic a host's cores sustain for streaming CPU work (CPU Adam, casts), shared by
  // every rank on the host; nullopt: only the DDR bandwidth (or a per-rank rate above) limits it.
  std::optional<sim::Bandwidth> cpu_work_bandwidth;
  // The host's per-operator dispatch of eager frameworks (a host table only); nullopt: not measured.
  std::optional<HostDispatch> dispatch;
  // `collectives: roofline`: no measured collectives for this machine; rings are limited by the
  // links alone (no step latency, no implementation efficiency) and every report says so.
  bool roofline_collectives = false;
  std::vector<GemmPoint> gemm;             // efficiency by shape, relative to gemm_peak
  std::optional<sim::FlopRate> gemm_peak;  // the peak the efficiencies were computed against

  /// The fit for `collective` at `ranks`; when that group size was not measured, the nearest
  /// measured one, and `note` says so. Throws std::out_of_range when the collective is absent.
  [[nodiscard]] const CollectiveFit& collective(const std::string& collective, int ranks, std::string* note) const;
  /// The measured bus bandwidth of `collective` over `ranks` ranks for a buffer of `bytes`, when
  /// the table has measured points: interpolated at the same bytes per rank (where the software
  /// changes protocol) between the nearest measured group sizes, log-linear in size and in ranks,
  /// held at the largest measured buffer's bus bandwidth above the measured range and at the
  /// smallest measured buffer's time below it (a latency-bound floor). nullopt without measured
  /// points.
  /// Groups within one node and across nodes are never mixed when the table records `nodes`.
  [[nodiscard]] std::optional<sim::Bandwidth> measured_bus_bandwidth(const std::string& collective, int ranks,
                                                                     double bytes, bool spans_nodes) const;
};

class CostModel {
 public:
  explicit CostModel(DeviceCosts device);

  /// One GEMM (bf16 operands and result): the larger of its compute time at the efficiency for
  /// its shape and its memory time (reading A and B, writing C). With a measured table that forms
  /// an m x n x k grid, the efficiency is interpolated in log m, log n, log k (a batched GEMM is
  /// looked up as m x batch rows: its batch entries fill the device like more rows); a shape
  /// outside the grid takes the nearest edge, and approximations() says so. With another measured
  /// table, the efficiency is interpolated in log(m n k) between the two nearest measured sizes
  /// and held at the largest one above it; a GEMM smaller than every measured one gets the
  /// roofline ceiling (efficiency 1) and a warning. Without a table, the best-shape efficiency
  /// times the shape's tile and wave utilization (with a tiling), or the single efficiency.
  /// `fused` GEMMs (flash attention's cores) keep their operands and result on chip: compute only.
  [[nodiscard]] sim::TimePs gemm_time(const GemmShape& gemm, bool fused = false) const;
  /// One GEMM with FP8 operands (1 B each) and a bf16 result, at the device's FP8 peak times the
  /// FP8 efficiency for its shape (the FP8 grid, interpolated as the bf16 one; the edges held),
  /// or its memory time. Throws std::logic_error when the device has no FP8 costs (the experiment
  /// loader refuses fp8 there first).
  [[nodiscard]] sim::TimePs fp8_gemm_time(const GemmShape& gemm) const;
  /// A memory-bound kernel moving `bytes` through HBM: bytes / (bandwidth x streaming
  /// efficiency x the named kernel's relative efficiency in that direction, when the table has
  /// one), and never less than the kernel launch cost.
  [[nodiscard]] sim::TimePs memory_bound_time(sim::Bytes bytes, std::string_view kernel = {},
                                              bool backward = false) const;
  /// The launch floor alone (zero when the table has none).
  [[nodiscard]] sim::TimePs kernel_floor() const;
  /// PyTorch SDPA's measured forward and backward rates (FLOP/s, causal count) at a head size and
  /// sequence: interpolated linearly in head size and in log sequence between the measured points
  /// of the same kind (GQA or not; the other kind when only it was measured), held at the edges.
  /// nullopt without an `sdpa:` table.
  [[nodiscard]] std::optional<std::pair<double, double>> sdpa_rates(std::string_view backend, std::int64_t head_dim,
                                                                    std::int64_t seq, bool gqa) const;
  [[nodiscard]] const DeviceCosts& device() const { return device_; }
  /// What this model approximates, for the report, including shapes that fell back to the roofline.
  [[nodiscard]] std::vector<std::string> approximations() const;

 private:
  [[nodiscard]] double efficiency_for(const GemmShape& gemm) const;

  DeviceCosts device_;
  std::optional<GemmGrid> grid_;                       // when the table is a full m x n x k grid
  std::optional<GemmGrid> fp8_grid_;                   // the FP8 table's grid
  mutable std::vector<std::string> outside_grid_;      // shapes beyond the grid's edges, in first-use order
  mutable std::vector<std::string> fallbacks_;         // shapes costed at the roofline, in first-use order
  mutable std::vector<std::string> fp8_outside_grid_;  // FP8 GEMM shapes beyond the FP8 grid
};

[[nodiscard]] std::optional<DeviceCosts> parse_device_costs(const sim::config::Node& node);
[[nodiscard]] std::optional<MeasuredCosts> parse_measured_costs(const sim::config::Node& node);

}  // namespace offsim::models
