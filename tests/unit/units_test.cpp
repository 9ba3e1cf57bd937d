#include <gtest/gtest.h>

#include "sim/core/units.hpp"

namespace offsim::sim {
namespace {

TEST(Units, BytesSiAndIecPrefixesDiffer) {
  EXPECT_EQ(parse_bytes("64 GiB").count, 64LL * 1024 * 1024 * 1024);
  EXPECT_EQ(parse_bytes("64 GB").count, 64'000'000'000LL);
  EXPECT_EQ(parse_bytes("1.5 KiB").count, 1536);
  EXPECT_EQ(parse_bytes("2kB").count, 2000);
  EXPECT_EQ(parse_bytes("512 B").count, 512);
}

TEST(Units, AmbiguousKbIsRejected) {
  EXPECT_THROW((void)parse_bytes("4 KB"), UnitError);
}

TEST(Units, BareNumberIsAnErrorThatShowsAnExample) {
  try {
    (void)parse_bandwidth("36");
    FAIL() << "a bare number must not parse";
  } catch (const UnitError& e) {
    EXPECT_STREQ(e.what(), "expected a bandwidth such as \"36 GB/s\", got the bare number \"36\" (a unit is required)");
  }
}

TEST(Units, BandwidthInBytesAndBits) {
  EXPECT_DOUBLE_EQ(parse_bandwidth("36 GB/s").bytes_per_s, 36e9);
  EXPECT_DOUBLE_EQ(parse_bandwidth("1.6 TB/s").bytes_per_s, 1.6e12);
  EXPECT_DOUBLE_EQ(parse_bandwidth("200 Gb/s").bytes_per_s, 25e9);
  EXPECT_DOUBLE_EQ(parse_bandwidth("1 GiB/s").bytes_per_s, 1073741824.0);
  EXPECT_THROW((void)parse_bandwidth("36 GB"), UnitError);
}

TEST(Units, Durations) {
  EXPECT_EQ(parse_time("1.5 us").ps, 1'500'000);
  EXPECT_EQ(parse_time("2 ms").ps, 2'000'000'000);
  EXPECT_EQ(parse_time("3 ns").ps, 3'000);
  EXPECT_EQ(parse_time("1 s").ps, kPsPerSecond);
  EXPECT_EQ(parse_time("0 s").ps, 0);
  EXPECT_THROW((void)parse_time("0.1 ps"), UnitError);  // below the clock's resolution
  EXPECT_THROW((void)parse_time("5 parsecs"), UnitError);
}

TEST(Units, FlopsAndRates) {
  EXPECT_DOUBLE_EQ(parse_flop_rate("191.5 TFLOP/s").flops_per_s, 191.5e12);
  EXPECT_DOUBLE_EQ(parse_flop_rate("312 TFLOPS").flops_per_s, 312e12);
  EXPECT_DOUBLE_EQ(parse_flops("3 GFLOP").count, 3e9);
  EXPECT_THROW((void)parse_flop_rate("191.5 TB/s"), UnitError);
}

TEST(Units, NegativeAndGarbageAreRejected) {
  EXPECT_THROW((void)parse_bytes("-1 GB"), UnitError);
  EXPECT_THROW((void)parse_bytes("lots"), UnitError);
  EXPECT_THROW((void)parse_bytes("0.5 B"), UnitError);
}

TEST(Units, DurationRoundsUpToTheNextPicosecond) {
  // 1 byte at 3 B/s = 333,333,333,333.33 ps -> 333,333,333,334 ps (never early).
  EXPECT_EQ((Bytes{1} / Bandwidth{3.0}).ps, 333'333'333'334);
  // 36 GB at 36 GB/s is exactly one second.
  EXPECT_EQ((Bytes{36'000'000'000} / Bandwidth{36e9}).ps, kPsPerSecond);
  EXPECT_EQ((Flops{0.0} / FlopRate{1.0}).ps, 0);
  EXPECT_THROW((void)(Bytes{1} / Bandwidth{0.0}), std::domain_error);
}

TEST(Units, Formatting) {
  EXPECT_EQ(format_bytes(Bytes{1536}), "1.50 KiB");
  EXPECT_EQ(format_time(TimePs{1'500'000}), "1.500 us");
  EXPECT_EQ(format_bandwidth(Bandwidth{36e9}), "36.0 GB/s");
  EXPECT_EQ(format_flop_rate(FlopRate{191.5e12}), "191.5 TFLOP/s");
}

}  // namespace
}  // namespace offsim::sim
