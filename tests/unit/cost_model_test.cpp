#include <gtest/gtest.h>

#include "models/cost/cost_model.hpp"

#include <fmt/format.h>
#include <unistd.h>
#include <filesystem>
#include <fstream>

#include "sim/config/config_reader.hpp"

namespace offsim::models {
namespace {

DeviceCosts device_with_table() {
  DeviceCosts d;
  d.device_kind = "test";
  d.peak_matrix_bf16 = sim::FlopRate{100e12};
  d.memory_bandwidth = sim::Bandwidth{1e12};
  d.memory_efficiency = 1.0;
  d.gemm_efficiency = 0.3;                                            // ignored when a table exists
  d.gemm_table = {{8192, 8192, 8192, 0.8}, {1024, 1024, 1024, 0.5}};  // unsorted on purpose
  return d;
}

// A 2 x 2 x 2 grid over m, n, k in {1024, 4096}: efficiency 0.2 everywhere except 0.8 at
// (4096, 4096, 4096).
DeviceCosts device_with_grid() {
  DeviceCosts d = device_with_table();
  d.gemm_table.clear();
  for (std::int64_t m : {1024, 4096})
    for (std::int64_t n : {1024, 4096})
      for (std::int64_t k : {1024, 4096})
        d.gemm_table.push_back({m, n, k, (m == 4096 && n == 4096 && k == 4096) ? 0.8 : 0.2});
  return d;
}

GemmShape cube(std::int64_t n) {
  return {"g", n, n, n, 1};
}

// A measured collective curve below its smallest buffer is latency-bound: the time is held, not
// the bus bandwidth. One measured group, g0 = 8 ranks over 2 nodes, points (b0 = 1 KiB, 0.1 GB/s)
// and (1 GiB, 36 GB/s); a ring over g ranks takes t = (g - 1) / g x S / busbw.
//   t8(b0) = 7/8 x 1024 / 0.1e9 = 8.96 us; per ring step t8(b0) / 7 = 1.28 us.
//   g = 8, S = 256 B < b0:  busbw = 0.1e9 x 256 / 1024 = 0.025e9, t = 7/8 x 256 / 0.025e9 = 8.96 us
//     (held at t8(b0); holding the bus bandwidth would give 2.24 us, falling to zero with S).
//   g = 1024, S = 16 KiB, 16 B per rank, i.e. 128 B at 8 ranks (< b0): busbw = 0.1e9 x 128 / 1024
//     = 0.0125e9, t = 1023/1024 x 16384 / 0.0125e9 = 1309.44 us = 1023 steps x 1.28 us.
//   above the largest buffer the bus bandwidth is held: 4 GiB at 8 ranks runs at 36 GB/s.
TEST(CostModel, MeasuredCollectiveHoldsItsSmallestBufferTimeBelowTheMeasuredRange) {
  MeasuredCosts m;
  m.collectives["all_gather"] = {{8, 2, sim::TimePs{0}, sim::Bandwidth{36e9}, {{1024.0, 0.1e9}, {1073741824.0, 36e9}}}};
  const auto ring_time_us = [&](int g, double bytes) {
    const auto bw = m.measured_bus_bandwidth("all_gather", g, bytes, true);
    EXPECT_TRUE(bw.has_value());
    return (g - 1.0) / g * bytes / bw->bytes_per_s * 1e6;
  };
  EXPECT_NEAR(ring_time_us(8, 1024.0), 8.96, 1e-9);
  EXPECT_NEAR(ring_time_us(8, 256.0), 8.96, 1e-9);
  EXPECT_NEAR(ring_time_us(8, 1.0), 8.96, 1e-9);
  EXPECT_NEAR(ring_time_us(1024, 16384.0), 1309.44, 1e-6);
  EXPECT_NEAR(m.measured_bus_bandwidth("all_gather", 8, 4294967296.0, true)->bytes_per_s, 36e9, 1e-3);
}

TEST(CostModel, InterpolatesGemmEfficiencyInLogSize) {
  // 4096^3 lies 6/9 of the way from 1024^3 (2^30) to 8192^3 (2^39) in log2(m n k):
  //   efficiency = 0.5 + (6/9)(0.8 - 0.5) = 0.7;  t = 2 x 4096^3 / (0.7 x 100 TFLOP/s)
  // (compute-bound: the memory time 2 B x 3 x 4096^2 / 1 TB/s is 0.1 ms, the compute 1.96 ms).
  const CostModel c(device_with_table());
  EXPECT_EQ(c.gemm_time(cube(4096)), sim::duration_of(2.0 * 4096.0 * 4096.0 * 4096.0, 0.7 * 100e12));
  // Above the largest measured size the largest one's efficiency holds.
  EXPECT_EQ(c.gemm_time(cube(16384)), sim::duration_of(2.0 * 16384.0 * 16384.0 * 16384.0, 0.8 * 100e12));
  // No fallback so far.
  for (const auto& a : c.approximations()) EXPECT_EQ(a.find("roofline"), std::string::npos) << a;
}

TEST(CostModel, GridTablesInterpolateInLogMNK) {
  // A 2 x 2 x 2 grid over m, n, k in {1024, 4096}: efficiency 0.2 everywhere except 0.8 at
  // (4096, 4096, 4096). At m = n = k = 2048 each axis lies halfway (in log), so trilinear
  // interpolation weighs the corner (4096)^3 by 1/8: e = 0.2 + (0.8 - 0.2) / 8 = 0.275.
  const CostModel c(device_with_grid());
  EXPECT_EQ(c.gemm_time(cube(2048)), sim::duration_of(2.0 * 2048.0 * 2048.0 * 2048.0, 0.275 * 100e12));
  // n halfway, m and k at the top: e = (0.2 + 0.8) / 2 = 0.5.
  const GemmShape g{"g", 4096, 2048, 4096, 1};
  EXPECT_EQ(c.gemm_time(g), sim::duration_of(g.flops(), 0.5 * 100e12));
  for (const auto& a : c.approximations()) EXPECT_EQ(a.find("outside the measured grid"), std::string::npos) << a;
  // Beyond the grid the edge holds and the report says so; a batch counts as more rows
  // (4 x 1024 = 4096 rows: the top edge in m).
  EXPECT_EQ(c.gemm_time(cube(8192)), sim::duration_of(2.0 * 8192.0 * 8192.0 * 8192.0, 0.8 * 100e12));
  const GemmShape batched{"b", 1024, 4096, 4096, 4};
  EXPECT_EQ(c.gemm_time(batched), sim::duration_of(batched.flops(), 0.8 * 100e12));
  bool named = false;
  for (const auto& a : c.approximations()) {
    named = named || a == "GEMMs on test: 1 shape outside the measured grid (m 1024..4096, n 1024..4096, k "
                          "1024..4096) uses the nearest edge's efficiency: 8192 x 8192 x 8192";
  }
  EXPECT_TRUE(named);
}

// Cost models made one after another on a thread reuse the last prepared table of the same
// content (CostModel's constructor): one made from another table in between, or from the first
// table changed in one efficiency, must price by its own table, and the first's again by the first.
TEST(CostModel, EachCostModelPricesByItsOwnTableWhateverWasMadeBefore) {
  const DeviceCosts grid = device_with_grid();
  DeviceCosts changed = grid;
  changed.gemm_table.back().efficiency = 0.6;  // the (4096)^3 corner: 0.2 + (0.6 - 0.2) / 8 = 0.25
  const sim::TimePs at_0275 = sim::duration_of(2.0 * 2048.0 * 2048.0 * 2048.0, 0.275 * 100e12);
  EXPECT_EQ(CostModel(grid).gemm_time(cube(2048)), at_0275);
  EXPECT_EQ(CostModel(device_with_table()).gemm_time(cube(4096)),
            sim::duration_of(2.0 * 4096.0 * 4096.0 * 4096.0, 0.7 * 100e12));
  EXPECT_EQ(CostModel(grid).gemm_time(cube(2048)), at_0275);
  EXPECT_EQ(CostModel(changed).gemm_time(cube(2048)), sim::duration_of(2.0 * 2048.0 * 2048.0 * 2048.0, 0.25 * 100e12));
  const CostModel again(grid);
  EXPECT_EQ(again.gemm_time(cube(2048)), at_0275);
  EXPECT_EQ(again.device().gemm_table.size(), 8u);
}

TEST(CostModel, NamedKernelsStreamAtTheirEfficiencyAboveTheLaunchFloor) {
  // 1 TB/s x streaming 0.8; layernorm forward at 0.5 of that, backward 0.25; launch floor 5 us.
  DeviceCosts d = device_with_table();
  d.memory_efficiency = 0.8;
  d.kernel_launch = sim::parse_time("5 us");
  d.kernel_efficiency["layernorm"] = {0.5, 0.25};
  const CostModel c(d);
  const sim::Bytes mb{100'000'000};                                                        // 100 MB
  EXPECT_EQ(c.memory_bound_time(mb), sim::duration_of(1e8, 0.8e12));                       // 125 us
  EXPECT_EQ(c.memory_bound_time(mb, "layernorm"), sim::duration_of(1e8, 0.4e12));          // 250 us
  EXPECT_EQ(c.memory_bound_time(mb, "layernorm", true), sim::duration_of(1e8, 0.2e12));    // 500 us
  EXPECT_EQ(c.memory_bound_time(mb, "dropout"), sim::duration_of(1e8, 0.8e12));            // not in the table
  EXPECT_EQ(c.memory_bound_time(sim::Bytes{1000}, "layernorm"), sim::parse_time("5 us"));  // the floor
  EXPECT_EQ(c.gemm_time(cube(16)), sim::parse_time("5 us"));                               // GEMMs too
}

TEST(CostModel, TileAndWaveQuantization) {
  // 108 compute units, 128 x 128 tiles. Utilization = m n b / (waves x 108 x 128^2).
  GemmTiling t{108, {{128, 128}}};
  // 1536 x 1152: 12 x 9 = 108 tiles, one full wave -> 1.
  EXPECT_DOUBLE_EQ(tile_wave_utilization(t, 1536, 1152, 1), 1.0);
  // 1536 x 1280: 120 tiles -> 2 waves; 1536 x 1280 / (2 x 108 x 16384) = 0.55556.
  EXPECT_DOUBLE_EQ(tile_wave_utilization(t, 1536, 1280, 1), 1536.0 * 1280.0 / (2.0 * 108.0 * 16384.0));
  // A ragged tile: 100 x 128 is one tile of one wave: 12800 / (108 x 16384).
  EXPECT_DOUBLE_EQ(tile_wave_utilization(t, 100, 128, 1), 12800.0 / (108.0 * 16384.0));
  // Batch entries are tiled apart: 8 x (128 x 128) = 8 tiles, one wave -> 8 / 108.
  EXPECT_DOUBLE_EQ(tile_wave_utilization(t, 128, 128, 8), 8.0 / 108.0);
  // With a 64 x 64 tile too the better one wins: 24 x 20 = 480 tiles -> 5 waves;
  // 1536 x 1280 / (5 x 108 x 4096) = 0.88889 > 0.55556.
  t.tiles.emplace_back(64, 64);
  EXPECT_DOUBLE_EQ(tile_wave_utilization(t, 1536, 1280, 1), 1536.0 * 1280.0 / (5.0 * 108.0 * 4096.0));

  // In the cost model (no table): efficiency = best-shape 0.8 x utilization.
  DeviceCosts d = device_with_table();
  d.gemm_table.clear();
  d.gemm_efficiency = 0.8;
  d.gemm_tiling = GemmTiling{108, {{128, 128}}};
  const CostModel c(d);
  const GemmShape g{"g", 1536, 1280, 8192, 1};
  EXPECT_EQ(c.gemm_time(g), sim::duration_of(g.flops(), 0.8 * (1536.0 * 1280.0 / (2.0 * 108.0 * 16384.0)) * 100e12));
  bool named = false;
  for (const auto& a : c.approximations())
    named = named || a.find("tile and wave quantization over 108") != std::string::npos;
  EXPECT_TRUE(named);
}

TEST(CostModel, SmallerThanEveryMeasuredShapeFallsBackToTheRooflineWithAWarning) {
  // 64 x 64 x 64: compute at peak 2 x 64^3 / 100 TFLOP/s = 5.24 ns; memory 2 B x 3 x 64^2 / 1 TB/s
  // = 24.6 ns: memory-bound on the roofline.
  const CostModel c(device_with_table());
  EXPECT_EQ(c.gemm_time(cube(64)), sim::duration_of(2.0 * 3.0 * 64.0 * 64.0, 1e12));
  // The fallback is named once, after the table's own notes (no per-kernel efficiencies, no
  // launch floor).
  const auto notes = c.approximations();
  ASSERT_EQ(notes.size(), 3u);
  EXPECT_NE(notes[0].find("no measured per-kernel efficiencies"), std::string::npos);
  EXPECT_NE(notes[1].find("no launch floor"), std::string::npos);
  EXPECT_EQ(notes[2], "GEMM 64 x 64 x 64 on test is smaller than every measured shape: roofline ceiling used");
}

TEST(CostModel, FusedAttentionCoresAreComputeOnly) {
  // Q K^T for 32 heads at s = 2048, d = 128 on a 0.1 TB/s memory: unfused it writes the 2048^2
  // scores (2 B x 32 x (2 x 2048 x 128 + 2048^2) = 302 MB, 3.0 ms); fused it is compute only
  // (2 x 2048^2 x 128 x 32 = 34.4 GFLOP at the 100 TFLOP/s roofline = 0.34 ms).
  DeviceCosts d = device_with_table();
  d.memory_bandwidth = sim::Bandwidth{0.1e12};
  const CostModel c(d);
  const GemmShape scores{"attention_scores", 2048, 2048, 128, 32, true};
  EXPECT_EQ(c.gemm_time(scores, true), sim::duration_of(scores.flops(), 100e12));
  EXPECT_EQ(c.gemm_time(scores, false), sim::duration_of(2.0 * 32 * (2.0 * 2048 * 128 + 2048.0 * 2048), 0.1e12));
}

TEST(CostModel, WithoutATableOneEfficiencyAppliesAndTheReportSaysSo) {
  DeviceCosts d = device_with_table();
  d.gemm_table.clear();
  const CostModel c(d);
  EXPECT_EQ(c.gemm_time(cube(4096)), sim::duration_of(2.0 * 4096.0 * 4096.0 * 4096.0, 0.3 * 100e12));
  ASSERT_FALSE(c.approximations().empty());
  EXPECT_NE(c.approximations()[0].find("one efficiency (0.300 of peak) for every shape"), std::string::npos);
}

// The two forms of a GEMM efficiency table, a list of mappings and a block table (what `offsim
// calibrate` writes), give the same points.
TEST(CostModel, AGemmTableReadsTheSameAsAListOrAsABlock) {
  const std::string head =
      "device_kind: test\nsource: synthetic\npeak: {matrix_bf16: \"100 TFLOP/s\", memory_bandwidth: \"1 TB/s\"}\n"
      "gemm:\n  efficiency: 0.5\n  efficiency_table:";
  const std::string as_list = head +
                              "\n    - {m: 1024, n: 256, k: 512, efficiency: 0.25}\n"
                              "    - {m: 8192, n: 8192, k: 8192, efficiency: 0.8}\n";
  const std::string as_block = head +
                               " |\n    m     n     k     efficiency\n"
                               "    1024  256   512   0.25\n"
                               "    8192  8192  8192  0.8\n";
  std::vector<std::vector<GemmPoint>> tables;
  for (const auto& text : {as_list, as_block}) {
    const auto path = std::filesystem::temp_directory_path() / fmt::format("offsim-gemm-{}.yaml", ::getpid());
    std::ofstream(path) << text;
    sim::config::Context ctx;
    const auto costs = parse_device_costs(ctx.load_root(path));
    ctx.finish();
    std::filesystem::remove(path);
    ASSERT_TRUE(costs.has_value());
    tables.push_back(costs->gemm_table);
  }
  ASSERT_EQ(tables[1].size(), 2u);
  for (std::size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(tables[0][i].m, tables[1][i].m);
    EXPECT_EQ(tables[0][i].n, tables[1][i].n);
    EXPECT_EQ(tables[0][i].k, tables[1][i].k);
    EXPECT_EQ(tables[0][i].efficiency, tables[1][i].efficiency);
  }
  EXPECT_EQ(tables[1][0].m, 1024);
  EXPECT_EQ(tables[1][1].efficiency, 0.8);
}

}  // namespace
}  // namespace offsim::models

namespace offsim::models {
namespace {

TEST(CostModel, Fp8GemmsRunAtTheFp8PeakWithOneByteOperands) {
  // FP8 peak 200 TFLOP/s at efficiency 0.5 (no table): 4096^3 takes 2 x 4096^3 / 100 TFLOP/s =
  // 1.374 ms (compute-bound; its memory time (1 B x 2 x 4096^2 + 2 B x 4096^2) / 1 TB/s is 67 us).
  DeviceCosts d = device_with_table();
  d.fp8 = DeviceCosts::Fp8Costs{true, false, "test", sim::FlopRate{200e12}, 0.5, {}};
  const CostModel c(d);
  EXPECT_EQ(c.fp8_gemm_time(cube(4096)), sim::duration_of(2.0 * 4096.0 * 4096.0 * 4096.0, 0.5 * 200e12));
  // A skinny GEMM is memory-bound: 65536 x 16 x 65536 reads 1 B x (2^32 + 2^20) and writes
  // 2 B x 2^20 bytes: (2^32 + 3 x 2^20) / 1 TB/s.
  const GemmShape skinny{"g", 65536, 16, 65536, 1};
  EXPECT_EQ(c.fp8_gemm_time(skinny), sim::duration_of(4294967296.0 + 3.0 * 1048576.0, 1e12));
  // A device without FP8 costs refuses.
  EXPECT_THROW((void)CostModel(device_with_table()).fp8_gemm_time(cube(1024)), std::logic_error);
}

}  // namespace
}  // namespace offsim::models

#include "models/strategies/layer_kernels.hpp"

namespace offsim::models {
namespace {

TEST(Fp8State, WeightCopiesAndScalingStateByTheirBytes) {
  // A GeLU layer of hidden 64, tp 1: QKV 64 x 192, out 64 x 64, MLP 64 x 256 and 256 x 64: 12 x 64^2
  // weights at 2 B (FP8 copy and transpose); 4 GEMMs x 5 slots x (1,024 history + scale +
  // scale_inv) x 4 B of scaling state; 3 layers.
  ModelSpec m;
  m.name = "t";
  m.layers = 3;
  m.hidden = 64;
  m.heads = 4;
  m.kv_heads = 4;
  m.ffn = 256;
  m.vocab = 128;
  m.seq = 32;
  const Fp8Training delayed{Fp8Recipe::kDelayed, 1024, {}, {}};
  EXPECT_EQ(fp8_state_bytes(m, delayed, 1, 1, 3).count, 3 * (12 * 64 * 64 * 2 + 4 * 5 * 1026 * 4));
  // Current scaling keeps no history: one amax, the scale and scale_inv per slot.
  const Fp8Training current{Fp8Recipe::kCurrent, 1024, {}, {}};
  EXPECT_EQ(fp8_state_bytes(m, current, 1, 1, 3).count, 3 * (12 * 64 * 64 * 2 + 4 * 5 * 3 * 4));
  // Casts: cast-transpose 2 + 1 + 1 B; current scaling an amax pass (2 B) first.
  EXPECT_DOUBLE_EQ(fp8_cast_bytes_per_element(Fp8Recipe::kDelayed), 4.0);
  EXPECT_DOUBLE_EQ(fp8_cast_bytes_per_element(Fp8Recipe::kCurrent), 6.0);
}

}  // namespace
}  // namespace offsim::models

#include "tests/unit/source_paths.hpp"

namespace offsim::models {
namespace {

TEST(CostModel, Mi250xTableTakesItsOwnTensileShapesAndNamesWhatIsUnmeasuredFirst) {
  // configs/calibration/mi250x-gcd.yaml: best-shape 0.7676 (MAMF 147.0 / 191.5) times rocBLAS's
  // Tensile shape dependence relative to its best shape (6400 x 8192 x 32768: 0.9625). 8192^3 is
  // in the table at 0.8133, so it runs at 0.7676 x 0.8133 / 0.9625 of 191.5 TFLOP/s.
  sim::config::Context ctx;
  const auto costs = parse_device_costs(ctx.load_root(testing::in_source("configs/calibration/mi250x-gcd.yaml")));
  ctx.finish();
  ASSERT_TRUE(costs.has_value());
  EXPECT_EQ(costs->gemm_shape_from, "mi250x-gcd");
  EXPECT_EQ(costs->gemm_table.size(), 13u);
  const CostModel c(*costs);
  const double e = 0.7676 * 0.8133 / 0.9625;
  EXPECT_NEAR(c.gemm_time(cube(8192)).seconds(), 2.0 * 8192.0 * 8192.0 * 8192.0 / (e * 191.5e12), 1e-9);
  // 1024^3 (0.3042) runs at 0.374 of 8192^3's rate (0.8133): the MI250X's own small-shape loss.
  EXPECT_GT(c.gemm_time(cube(1024)).seconds() / c.gemm_time(cube(8192)).seconds() * 512.0, 2.6);
  // The missing measurements lead the approximations.
  const auto notes = c.approximations();
  ASSERT_GE(notes.size(), 3u);
  EXPECT_TRUE(notes[0].starts_with("largest uncertainty on mi250x-gcd, not measured: the GEMM and kernel rates"));
  EXPECT_TRUE(notes[1].starts_with("largest uncertainty on mi250x-gcd, not measured: flash attention"));
  EXPECT_NE(notes[2].find("its own tuning table's shape dependence"), std::string::npos) << notes[2];
}

}  // namespace
}  // namespace offsim::models
