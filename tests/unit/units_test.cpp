#include <gtest/gtest.h>

#include <cmath>
#include <string>

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

// The clock holds 2^63 - 1 ps = 9,223,372.036854775807 s (about 106.75 days). Durations and times
// beyond it throw SimulationLimit (exit 3), naming the quantity, instead of wrapping.
TEST(Units, TheClockIsCheckedAtTwoToThe63Picoseconds) {
  EXPECT_EQ(kMaxTimePs, 9'223'372'036'854'775'807);
  EXPECT_EQ(TimePs::max().ps, kMaxTimePs);
  // Exact limits: 1 GB at 1 GB/s is exactly 1e12 ps; 9,223,372 B at 1 B/s fits (9.223372e18 ps),
  // 9,223,373 B does not.
  EXPECT_EQ((Bytes{1'000'000'000} / Bandwidth{1e9}).ps, 1'000'000'000'000);
  EXPECT_EQ(duration_of(9'223'372.0, 1.0).ps, 9'223'372'000'000'000'000);
  EXPECT_THROW((void)duration_of(9'223'373.0, 1.0), SimulationLimit);
  // 2^63 ps exactly (2^63 B at 1e12 B/s, 1 ps each): one past the limit.
  EXPECT_THROW((void)duration_of(9223372036854775808.0, 1e12), SimulationLimit);
  // The example: 1e9 bytes at 1e-300 B/s. The message names the amount, the rate and why.
  try {
    (void)(Bytes{1'000'000'000} / Bandwidth{1e-300});
    FAIL() << "expected a SimulationLimit";
  } catch (const SimulationLimit& e) {
    EXPECT_EQ(std::string(e.what()),
              "a duration of inf s (1e+09 B at 1e-300 B/s) does not fit: the simulated clock holds at most "
              "9223372036854775807 ps (2^63 - 1 ps, about 106.75 days)");
  }
  // FLOPs: 1e30 FLOP at 1 TFLOP/s is 1e18 s.
  try {
    (void)(Flops{1e30} / FlopRate{1e12});
    FAIL() << "expected a SimulationLimit";
  } catch (const SimulationLimit& e) {
    EXPECT_EQ(std::string(e.what()).rfind("a duration of 1e+18 s (1e+30 FLOP at 1e+12 FLOP/s) does not fit", 0), 0u)
        << e.what();
  }
  // Not a number is a bug, not a limit.
  EXPECT_THROW((void)duration_of(std::nan(""), 1.0), std::domain_error);
  // Sums, differences and conversions are checked at the same limit.
  EXPECT_EQ((TimePs{kMaxTimePs - 1} + TimePs{1}).ps, kMaxTimePs);
  EXPECT_THROW((void)(TimePs::max() + TimePs{1}), SimulationLimit);
  EXPECT_THROW((void)(TimePs{-kMaxTimePs} - TimePs{2}), SimulationLimit);
  TimePs t{kMaxTimePs};
  EXPECT_THROW(t += TimePs{1}, SimulationLimit);
  EXPECT_EQ(t.ps, kMaxTimePs);  // unchanged
  EXPECT_EQ(TimePs::from_us(9'223'372'036'854).ps, 9'223'372'036'854'000'000);
  EXPECT_THROW((void)TimePs::from_us(9'223'372'036'855), SimulationLimit);
  // k times a duration (a replayed operation's layers): 3 x (2^63 - 1) / 3 fits, one more does not.
  EXPECT_EQ(TimePs{kMaxTimePs / 3}.times(3).ps, kMaxTimePs / 3 * 3);
  EXPECT_THROW((void)TimePs{kMaxTimePs / 3 + 1}.times(3), SimulationLimit);
  EXPECT_EQ(seconds_to_time(9'223'372.0).ps, 9'223'372'000'000'000'000);
  EXPECT_THROW((void)seconds_to_time(1e7), SimulationLimit);
  EXPECT_THROW((void)seconds_to_time(std::nan("")), SimulationLimit);
  try {
    (void)(TimePs::max() + TimePs{5});
  } catch (const SimulationLimit& e) {
    EXPECT_EQ(std::string(e.what()),
              "simulated time out of range: 9223372036854775807 ps + 5 ps does not fit; the simulated clock holds at "
              "most 9223372036854775807 ps (2^63 - 1 ps, about 106.75 days)");
  }
}

TEST(Units, Formatting) {
  EXPECT_EQ(format_bytes(Bytes{1536}), "1.50 KiB");
  EXPECT_EQ(format_time(TimePs{1'500'000}), "1.500 us");
  EXPECT_EQ(format_bandwidth(Bandwidth{36e9}), "36.0 GB/s");
  EXPECT_EQ(format_flop_rate(FlopRate{191.5e12}), "191.5 TFLOP/s");
}

}  // namespace
}  // namespace offsim::sim
