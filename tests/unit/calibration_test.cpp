#include <gtest/gtest.h>

#include <fmt/format.h>
#include <unistd.h>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "models/cost/calibration.hpp"

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
  EXPECT_NE(table.find("- {m: 1024, n: 1024, k: 1024, efficiency: 0.5369}"), std::string::npos) << table;
}

TEST_F(CalibrateTest, BadInputNamesTheFileLineAndColumn) {
  CalibrateOptions o;
  o.device_kind = "test-device";
  o.files = {write("bad.csv", fmt::format("{}h2d,k,h,host,gpu0,pinned,,,,,,,4096,0,fast\n", kHeader))};
  try {
    (void)calibrate(o);
    FAIL();
  } catch (const CalibrationError& e) {
    EXPECT_EQ(std::string(e.what()),
              fmt::format("{}:2: column 'time_s': expected a number, got \"fast\"", (dir_ / "bad.csv").string()));
  }
  o.files = {write("nocol.csv", "benchmark,bytes\nh2d,4096\n")};
  EXPECT_THROW((void)calibrate(o), CalibrationError);
  o.files = {write("ok.csv", fmt::format("{}h2d,k,h,host,gpu0,pinned,,,,,,,4096,0,1e-5\n", kHeader))};
  o.filters = {"memory=pageable"};
  EXPECT_THROW((void)calibrate(o), CalibrationError);  // no rows left
}

TEST(ShippedCalibration, FrontierRcclTableIsWhatCalibrateWritesFromTheShippedData) {
  // configs/calibration/frontier-rccl.yaml must be reproducible from bench/data with the command
  // recorded in it; this fails if either is edited by hand.
  fs::current_path(OFFSIM_SOURCE_DIR);
  std::ifstream in("configs/calibration/frontier-rccl.yaml");
  std::stringstream shipped;
  shipped << in.rdbuf();
  CalibrateOptions o;
  o.files = {"bench/data/frontier-rccl-collectives.csv"};
  o.device_kind = "mi250x-gcd";
  o.filters = {"library=rccl", "nodes=1"};
  o.command_line =
      "offsim calibrate bench/data/frontier-rccl-collectives.csv --device mi250x-gcd --filter library=rccl --filter "
      "nodes=1 --out configs/calibration/frontier-rccl.yaml";
  EXPECT_EQ(calibrate(o), shipped.str());
}

}  // namespace
}  // namespace offsim::models
