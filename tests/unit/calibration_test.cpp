#include <gtest/gtest.h>

#include <fmt/format.h>
#include <unistd.h>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "models/cost/calibration.hpp"
#include "tests/unit/source_paths.hpp"

namespace offsim::models {
namespace {

namespace fs = std::filesystem;

TEST(FitLine, RecoversAnExactAlphaBetaLine) {
  // t = 20 us + bytes / 25 GB/s, sampled at 4 KiB ... 1 GiB: the fit is exact up to round-off.
  std::vector<double> x, y;
  for (double b = 4096; b <= 1073741824.0; b *= 4) {
    x.push_back(b);
    y.push_back(20e-6 + b / 25e9);
  }
  const LineFit f = fit_line(x, y);
  EXPECT_NEAR(f.intercept, 20e-6, 1e-15);
  EXPECT_NEAR(1.0 / f.slope, 25e9, 25e9 * 1e-9);
  EXPECT_LT(f.max_relative_residual, 1e-9);
  EXPECT_EQ(f.rows, x.size());
  EXPECT_THROW((void)fit_line({1.0, 1.0}, {2.0, 3.0}), std::invalid_argument);
}

class CalibrateTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / fmt::format("offsim-calibrate-{}", ::getpid());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path write(const std::string& name, const std::string& text) {
    std::ofstream(dir_ / name) << text;
    return dir_ / name;
  }
  fs::path dir_;
};

constexpr const char* kHeader =
    "benchmark,device_kind,host,src,dst,memory,ranks,m,n,k,dtype,threads,bytes,elements,time_s\n";

TEST_F(CalibrateTest, FitsCopiesCollectivesAdamAndGemmFromTheBenchmarkFormat) {
  // h2d pinned: t = 10 us + bytes / 20 GB/s.  all_gather over 4 ranks: t = 3 x 5 us + (3/4) S / 60 GB/s.
  // cpu_adam: 1e8 elements in 0.25 s = 4e8 params/s.  gemm 1024^3 in 20 us at a 200 TFLOP/s peak:
  // efficiency = 2 x 1024^3 / 20e-6 / 200e12 = 0.5369.
  std::string csv = kHeader;
  for (const double b : {1e6, 1e7, 1e8}) {
    csv += fmt::format("h2d,k,h,host,gpu0,pinned,,,,,,,{:.0f},0,{}\n", b, 10e-6 + b / 20e9);
    csv += fmt::format("all_gather,k,h,,,device,4,,,,bf16,,{:.0f},0,{}\n", b, 15e-6 + 0.75 * b / 60e9);
  }
  csv += "cpu_adam,host,h,,,pageable,,,,,fp32,32,2800000000,100000000,0.25\n";
  csv += "gemm,k,h,,,device,,1024,1024,1024,bf16,,0,0,0.00002\n";
  CalibrateOptions o;
  o.files = {write("m.csv", csv)};
  o.device_kind = "test-device";
  o.peak = sim::FlopRate{200e12};
  o.command_line = "offsim calibrate m.csv";
  const std::string table = calibrate(o);
  EXPECT_NE(table.find("h2d_pinned: {latency: \"10.000 us\", bandwidth: \"20.00 GB/s\""), std::string::npos) << table;
  EXPECT_NE(table.find("- {ranks: 4, step_latency: \"5.000 us\", bus_bandwidth: \"60.00 GB/s\""), std::string::npos)
      << table;
  EXPECT_NE(table.find("- {threads: 32, params_per_s: 4e+08, rows: 1}"), std::string::npos) << table;
  EXPECT_NE(table.find("  efficiency_table: |\n    m      n      k      efficiency\n    1024   1024   1024   0.5369\n"),
            std::string::npos)
      << table;
}

// The message of the CalibrationError that calibrate(o) throws ("no error" when it does not).
std::string calibration_error(const CalibrateOptions& o) {
  try {
    (void)calibrate(o);
  } catch (const CalibrationError& e) {
    return e.what();
  }
  return "no error";
}

TEST_F(CalibrateTest, BadInputNamesTheFileLineAndColumn) {
  CalibrateOptions o;
  o.device_kind = "test-device";
  o.files = {write("bad.csv", fmt::format("{}h2d,k,h,host,gpu0,pinned,,,,,,,4096,0,fast\n", kHeader))};
  EXPECT_EQ(calibration_error(o),
            fmt::format("{}:2: column 'time_s': expected a number, got \"fast\"", (dir_ / "bad.csv").string()));
  o.files = {write("nocol.csv", "benchmark,bytes\nh2d,4096\n")};
  EXPECT_THROW((void)calibrate(o), CalibrationError);
  o.files = {write("ok.csv", fmt::format("{}h2d,k,h,host,gpu0,pinned,,,,,,,4096,0,1e-5\n", kHeader))};
  o.filters = {"memory=pageable"};
  EXPECT_THROW((void)calibrate(o), CalibrationError);  // no rows left
}

TEST_F(CalibrateTest, QuotedFieldsAreReadAsTheSweepReadsThem) {
  // A host name with a comma and a doubled quote (RFC 4180), and Windows line ends: the row keeps
  // its 15 fields and fits as the plain one does (one CSV parser, sim/report/csv.hpp).
  std::string csv = kHeader;
  for (const double b : {1e6, 1e7}) {
    csv += fmt::format("h2d,k,\"node 1, \"\"a\"\"\",host,gpu0,pinned,,,,,,,{:.0f},0,{}\r\n", b, 10e-6 + b / 20e9);
  }
  CalibrateOptions o;
  o.files = {write("quoted.csv", csv)};
  o.device_kind = "test-device";
  const std::string table = calibrate(o);
  EXPECT_NE(table.find("h2d_pinned: {latency: \"10.000 us\", bandwidth: \"20.00 GB/s\""), std::string::npos) << table;
  // A doubled quote is one quote of the field (it used to toggle quoting twice and vanish).
  o.files = {write("bad.csv", std::string(kHeader) + "h2d,k,h,host,gpu0,pinned,,,,,,,4096,0,\"1\"\"5\"\n")};
  EXPECT_EQ(calibration_error(o),
            fmt::format("{}:2: column 'time_s': expected a number, got \"1\"5\"", (dir_ / "bad.csv").string()));
}

TEST(FitOffloadHost, RecoversTheHostRatesThatGeneratedTheTimings) {
  // Timings written from the fit's model with cpu_work C = 68 GB/s, h2d_pageable 12 GB/s,
  // d2h_pageable 5 GB/s and pinned copies at 25 GB/s (N elements per rank, k ranks per node):
  //   step = N (k 34 / C + 2 / 12e9);  backward (k = 1, one micro-step) = 3 fwd + N (4 / 25e9 + 2 / 5e9 + 6 / C).
  const double C = 68e9, u = 34.0 / C, v = 2.0 / 12e9;
  std::vector<OffloadTimingRow> rows;
  for (const auto& [n, k] : std::vector<std::pair<double, int>>{{5.9e9, 1}, {2.95e9, 2}, {1.475e9, 4}, {11.2e9, 1}}) {
    const double forward = 0.5;
    rows.push_back({n, k, 1, forward, 3 * forward + n * (4 / 25e9 + 2 / 5e9 + 6 / C), n * (k * u + v)});
  }
  const OffloadHostFit f = fit_offload_host(rows, sim::Bandwidth{25e9});
  EXPECT_NEAR(f.cpu_work.bytes_per_s, C, C * 1e-9);
  EXPECT_NEAR(f.h2d_pageable.bytes_per_s, 12e9, 12e9 * 1e-9);
  ASSERT_TRUE(f.d2h_pageable);
  EXPECT_NEAR(f.d2h_pageable->bytes_per_s, 5e9, 5e9 * 1e-9);
  EXPECT_EQ(f.step_rows, 4u);
  EXPECT_EQ(f.backward_rows, 2u);  // only the single-rank rows say what the pageable D2H costs
  EXPECT_LT(f.step_max_relative_residual, 1e-9);
  // One rank count per node cannot separate the shared CPU work from the per-rank copy.
  rows.erase(rows.begin() + 1, rows.begin() + 3);
  EXPECT_THROW((void)fit_offload_host(rows, sim::Bandwidth{25e9}), CalibrationError);
}

// The shipped table at `path` is byte for byte what calibrate writes with `o` (the command recorded
// in it): this fails if either the table or the data is edited by hand. The files are read by
// absolute path; the table names them relative to the source directory, as the command does.
void expect_reproducible(const std::string& path, CalibrateOptions o) {
  for (auto& f : o.files) f = testing::in_source(f.string());
  std::ifstream in(testing::in_source(path));
  std::stringstream shipped;
  shipped << in.rdbuf();
  EXPECT_EQ(testing::relative_to_source(calibrate(o)), shipped.str()) << path;
}

TEST(ShippedCalibration, PolarisHostTableIsWhatCalibrateWritesFromTheShippedData) {
  // configs/calibration/polaris-host.yaml: fitted on the 7B DP1 and DP4 one-micro-step runs only,
  // so every other Polaris run of the study validates it (configs/validation/offload-polaris-a100).
  CalibrateOptions o;
  o.files = {"bench/data/offload-polaris-a100.csv"};
  o.device_kind = "epyc-7543p";
  o.filters = {"testbed=Polaris", "model=7B", "dp=1|4", "grad_accum=1"};
  o.pinned_bandwidth = sim::Bandwidth{25e9};
  o.command_line =
      "offsim calibrate bench/data/offload-polaris-a100.csv --device epyc-7543p --filter testbed=Polaris --filter "
      "model=7B --filter 'dp=1|4' --filter grad_accum=1 --pinned-bandwidth '25 GB/s' --out "
      "configs/calibration/polaris-host.yaml";
  expect_reproducible("configs/calibration/polaris-host.yaml", o);
}

TEST(ShippedCalibration, FrontierRcclTableIsWhatCalibrateWritesFromTheShippedData) {
  // configs/calibration/frontier-rccl.yaml must be reproducible from bench/data with the command
  // recorded in it; this fails if either is edited by hand.
  CalibrateOptions o;
  o.files = {"bench/data/frontier-rccl-collectives.csv"};
  o.device_kind = "mi250x-gcd";
  o.filters = {"library=rccl", "nodes=1"};
  o.command_line =
      "offsim calibrate bench/data/frontier-rccl-collectives.csv --device mi250x-gcd --filter library=rccl --filter "
      "nodes=1 --out configs/calibration/frontier-rccl.yaml";
  expect_reproducible("configs/calibration/frontier-rccl.yaml", o);
}

TEST(ShippedCalibration, PolarisTcpNcclTableIsWhatItsCommandWrites) {
  // NCCL's default TCP transport on Polaris (alcf-nccl-tests setup (1)): the study's runs had no
  // NCCL environment and no aws-ofi-nccl plugin.
  CalibrateOptions o;
  o.files = {"bench/data/polaris-nccl-tcp.csv"};
  o.device_kind = "a100-40gb";
  o.reduce_scatter_from_all_reduce = true;
  o.command_line =
      "offsim calibrate bench/data/polaris-nccl-tcp.csv --device a100-40gb --reduce-scatter-from-all-reduce --out "
      "configs/calibration/polaris-nccl-tcp.yaml";
  expect_reproducible("configs/calibration/polaris-nccl-tcp.yaml", o);
}

TEST(ShippedCalibration, PolarisNcclTableDerivesItsReduceScatterFromTheAllReduce) {
  CalibrateOptions o;
  o.files = {"bench/data/nvidia-nccl-collectives.csv"};
  o.device_kind = "a100-40gb";
  o.filters = {"gpu=a100-40gb", "ranks=8|32|1024", "nodes=2|8|256"};
  o.reduce_scatter_from_all_reduce = true;
  o.command_line =
      "offsim calibrate bench/data/nvidia-nccl-collectives.csv --device a100-40gb --filter gpu=a100-40gb --filter "
      "'ranks=8|32|1024' --filter 'nodes=2|8|256' --reduce-scatter-from-all-reduce --out "
      "configs/calibration/polaris-nccl.yaml";
  expect_reproducible("configs/calibration/polaris-nccl.yaml", o);
  // Half the all-reduce's time over half its bytes per rank: the same per-step latency and bus
  // bandwidth, so each derived reduce-scatter line repeats its all-reduce line.
  o.files = {testing::in_source("bench/data/nvidia-nccl-collectives.csv")};
  const std::string out = calibrate(o);
  const auto first_line_of = [&](const std::string& name) {
    const auto at = out.find("  " + name + ":\n");
    return at == std::string::npos ? std::string{} : out.substr(out.find("- {ranks: 8", at), 80);
  };
  ASSERT_FALSE(first_line_of("reduce_scatter").empty());
  EXPECT_EQ(first_line_of("reduce_scatter"), first_line_of("all_reduce"));
  // Measured reduce-scatter rows are fitted, never replaced.
  o.filters = {"gpu=h100-sxm", "ranks=8", "nodes=1"};  // Together AI rows include reduce_scatter
  EXPECT_THROW((void)calibrate(o), CalibrationError);
}

TEST(ShippedCalibration, DgxA100NcclTableIsWhatCalibrateWritesFromTheShippedData) {
  CalibrateOptions o;
  o.files = {"bench/data/nvidia-nccl-collectives.csv"};
  o.device_kind = "a100-80gb";
  o.filters = {"gpu=a100-80gb"};
  o.reduce_scatter_from_all_reduce = true;
  o.command_line =
      "offsim calibrate bench/data/nvidia-nccl-collectives.csv --device a100-80gb --filter gpu=a100-80gb "
      "--reduce-scatter-from-all-reduce --out configs/calibration/dgx-a100-nccl.yaml";
  expect_reproducible("configs/calibration/dgx-a100-nccl.yaml", o);
}

TEST(ShippedCalibration, DgxH100NcclTableIsWhatCalibrateWritesFromTheShippedData) {
  CalibrateOptions o;
  o.files = {"bench/data/nvidia-nccl-collectives.csv"};
  o.device_kind = "h100-sxm";
  o.filters = {"gpu=h100-sxm", "nodes=1"};
  o.command_line =
      "offsim calibrate bench/data/nvidia-nccl-collectives.csv --device h100-sxm --filter gpu=h100-sxm --filter "
      "nodes=1 --out configs/calibration/dgx-h100-nccl.yaml";
  expect_reproducible("configs/calibration/dgx-h100-nccl.yaml", o);
}

TEST(ShippedCalibration, H100TablesAreWhatCalibrateWritesFromTheMeasurements) {
  CalibrateOptions gemm;
  gemm.files = {"bench/data/h100-sxm-gemm-grid.csv"};
  gemm.device_kind = "h100-sxm";
  gemm.peak = sim::FlopRate{989.4e12};
  gemm.command_line =
      "offsim calibrate bench/data/h100-sxm-gemm-grid.csv --device h100-sxm --peak '989.4 TFLOP/s' --out "
      "configs/calibration/h100-sxm.gemm.yaml";
  expect_reproducible("configs/calibration/h100-sxm.gemm.yaml", gemm);
  CalibrateOptions copies;
  copies.files = {"bench/data/h100-sxm-transfer.csv"};
  copies.device_kind = "h100-sxm";
  copies.filters = {"memory=pinned"};
  copies.command_line =
      "offsim calibrate bench/data/h100-sxm-transfer.csv --device h100-sxm --filter memory=pinned --out "
      "configs/calibration/h100-sxm.copies.yaml";
  expect_reproducible("configs/calibration/h100-sxm.copies.yaml", copies);
  // The FP8 E4M3 grid (bench/data/h100-sxm-gemm-fp8.md): the full m x n x k grid inside the
  // measured shapes, against the FP8 peak.
  CalibrateOptions fp8;
  fp8.files = {"bench/data/h100-sxm-gemm-fp8.csv"};
  fp8.device_kind = "h100-sxm";
  fp8.filters = {"dtype=fp8_e4m3", "m=1024|2048|4096|8192", "n=1024|2048|4096|8192"};
  fp8.peak = sim::FlopRate{1978.9e12};
  fp8.command_line =
      "offsim calibrate bench/data/h100-sxm-gemm-fp8.csv --device h100-sxm --filter dtype=fp8_e4m3 --filter "
      "'m=1024|2048|4096|8192' --filter 'n=1024|2048|4096|8192' --peak '1978.9 TFLOP/s' --out "
      "configs/calibration/h100-sxm.gemm-fp8.yaml";
  expect_reproducible("configs/calibration/h100-sxm.gemm-fp8.yaml", fp8);
}

TEST(ShippedCalibration, Mi250xTensileShapeTableIsWhatCalibrateWritesFromThePublishedData) {
  // configs/calibration/mi250x-gcd.gemm-tensile.yaml: rocBLAS's Tensile tuning logic for gfx90a
  // (bench/data/mi250x-gemm-tensile.csv, written by bench/mi250x_tensile_gemm.py from
  // bench/data/mi250x-published-figures.csv); mi250x-gcd.yaml takes its shape dependence.
  CalibrateOptions o;
  o.files = {"bench/data/mi250x-gemm-tensile.csv"};
  o.device_kind = "mi250x-gcd";
  o.peak = sim::FlopRate{191.5e12};
  o.command_line =
      "offsim calibrate bench/data/mi250x-gemm-tensile.csv --device mi250x-gcd --peak '191.5 TFLOP/s' --out "
      "configs/calibration/mi250x-gcd.gemm-tensile.yaml";
  expect_reproducible("configs/calibration/mi250x-gcd.gemm-tensile.yaml", o);
  // The shape dependence the table carries, from the source rows (Tensile DeviceEfficiency, bf16,
  // mean over layouts): 1024^3 (27.873 NN, 32.962 TN) = 30.42%, 8192^3 (81.936, 80.508, 81.541) =
  // 81.33%: the cube falls to 0.374 of the large one's rate, as rocBLAS tuned it.
  o.files = {testing::in_source("bench/data/mi250x-gemm-tensile.csv")};
  const std::string table = calibrate(o);
  EXPECT_NE(table.find("    1024   1024   1024   0.3042\n"), std::string::npos) << table;
  EXPECT_NE(table.find("    8192   8192   8192   0.8133\n"), std::string::npos) << table;
}

TEST(ShippedCalibration, XeonHostTableIsWhatCalibrateWritesFromTheH100MachinesHost) {
  // configs/calibration/xeon-platinum-host.yaml: CPU Adam and casts by thread count and the copies
  // of 64 MiB and more, pinned and pageable, measured on the lent H100 machine's Xeon.
  CalibrateOptions o;
  o.files = {"bench/data/h100-sxm-host-cpu-adam.csv", "bench/data/h100-sxm-transfer.csv"};
  o.device_kind = "xeon-platinum";
  o.filters = {"bytes=67108864|268435456|1073741824|2800000000|600000000"};
  o.command_line =
      "offsim calibrate bench/data/h100-sxm-host-cpu-adam.csv bench/data/h100-sxm-transfer.csv --device "
      "xeon-platinum --filter 'bytes=67108864|268435456|1073741824|2800000000|600000000' --out "
      "configs/calibration/xeon-platinum-host.yaml";
  expect_reproducible("configs/calibration/xeon-platinum-host.yaml", o);
}

}  // namespace
}  // namespace offsim::models
