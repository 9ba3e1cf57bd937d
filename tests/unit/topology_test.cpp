#include <gtest/gtest.h>

#include <fmt/format.h>
#include <unistd.h>
#include <filesystem>
#include <fstream>

#include "models/strategies/strategy.hpp"
#include "sim/exec/executor.hpp"
#include "topologies/topology_parser.hpp"

namespace offsim::topo {
namespace {

const std::string kFrontier = std::string(OFFSIM_SOURCE_DIR) + "/configs/hardware/frontier-node.yaml";

Topology load(const std::string& file) {
  sim::config::Context ctx;
  auto parsed = parse_node_topology(ctx.load_root(file));
  ctx.finish();
  return std::move(parsed->topology);
}

std::size_t dev(const Topology& t, const char* name) {
  return *t.find_device(name);
}

TEST(FrontierNode, DirectGcdLinksHaveTheOlcfBandwidths) {
  const Topology t = load(kFrontier);
  // OLCF Frontier User Guide: GB/s per direction; 0 = no direct link.
  const double expected[8][8] = {{0, 200, 50, 0, 0, 0, 100, 0}, {200, 0, 0, 50, 0, 50, 0, 0},
                                 {50, 0, 0, 200, 100, 0, 0, 0}, {0, 50, 200, 0, 0, 0, 0, 50},
                                 {0, 0, 100, 0, 0, 200, 50, 0}, {0, 50, 0, 0, 200, 0, 0, 50},
                                 {100, 0, 0, 0, 50, 0, 0, 200}, {0, 0, 0, 50, 0, 50, 200, 0}};
  for (int a = 0; a < 8; ++a) {
    for (int b = 0; b < 8; ++b) {
      if (a == b) continue;
      const auto& r = t.route(dev(t, fmt::format("gcd{}", a).c_str()), dev(t, fmt::format("gcd{}", b).c_str()));
      if (expected[a][b] > 0) {
        ASSERT_EQ(r.links.size(), 1u) << a << "->" << b;
        EXPECT_DOUBLE_EQ(t.links()[r.links[0]].bandwidth.bytes_per_s, expected[a][b] * 1e9) << a << "->" << b;
      } else {
        EXPECT_EQ(r.links.size(), 2u) << a << "->" << b << " has no direct link: every such pair is 2 hops";
      }
    }
  }
}

TEST(FrontierNode, TwoHopRouteWhereNoLinkExists) {
  // gcd0 -> gcd3: no direct link. Breadth-first in declaration order finds gcd0 -> gcd1 -> gcd3
  // (gcd0's links are declared 0-1 first); its bottleneck is the single 1-3 link, 50 GB/s.
  const Topology t = load(kFrontier);
  const auto& r = t.route(dev(t, "gcd0"), dev(t, "gcd3"));
  ASSERT_EQ(r.links.size(), 2u);
  EXPECT_EQ(t.links()[r.links[0]].dst, "gcd1");
  EXPECT_EQ(t.links()[r.links[1]].dst, "gcd3");
  EXPECT_DOUBLE_EQ(r.bottleneck(t).bytes_per_s, 50e9);
}

TEST(FrontierNode, EightConcurrentHostCopiesShareTheDdr) {
  // 8 H2D copies of 1 GB, one per GCD, each crossing DDR (205 GB/s) and its own 36 GB/s link:
  // each gets 205/8 = 25.625 GB/s, not 36, and all end at 1 GB / 25.625 GB/s = 39.02 ms.
  const Topology t = load(kFrontier);
  const models::MachineResources m = models::make_machine_resources(t);
  sim::TaskGraph g;
  for (int i = 0; i < 8; ++i) {
    g.add(fmt::format("h2d{}", i), "copy",
          sim::TransferTask{m.transfer_route(t, dev(t, "cpu"), dev(t, fmt::format("gcd{}", i).c_str())),
                            sim::Bytes{1'000'000'000},
                            sim::TimePs{0},
                            {}});
  }
  const sim::RunResult r = sim::execute(m.platform, g);
  EXPECT_NEAR(r.makespan.seconds(), 1e9 / (205e9 / 8), 1e-9);
  for (const auto& c : r.constraints) {
    if (c.link_class == "cpu-gpu" && c.name.starts_with("cpu->")) {
      EXPECT_NEAR(c.stats.peak_bytes_per_s, 205e9 / 8, 1.0) << c.name;
    }
  }
}

class BadTopologyTest : public ::testing::Test {
 protected:
  std::string check(const std::string& yaml) {
    const auto path = std::filesystem::temp_directory_path() / fmt::format("offsim-topo-{}.yaml", ::getpid());
    std::ofstream(path) << yaml;
    sim::config::Context ctx;
    std::string out;
    try {
      (void)parse_node_topology(ctx.load_root(path));
      ctx.finish();
    } catch (const sim::config::ConfigError& e) {
      out = e.what();
    }
    std::filesystem::remove(path);
    // Make messages independent of the temporary path.
    const std::string prefix = path.string();
    std::string result;
    std::size_t from = 0;
    for (std::size_t at = out.find(prefix); at != std::string::npos; at = out.find(prefix, from)) {
      result.append(out, from, at - from).append("T");
      from = at + prefix.size();
    }
    return result.append(out, from, std::string::npos);
  }
};

constexpr const char* kTwoGpus =
    "name: t\n"
    "devices:\n"
    "  - {name: g, count: 2, kind: gpu, device_kind: k, memory: {kind: hbm, capacity: \"1 GB\"}}\n";

TEST_F(BadTopologyTest, UnknownDeviceInALink) {
  EXPECT_EQ(check(std::string(kTwoGpus) +
                  "links:\n  - {between: [g0, g7], bandwidth: \"1 GB/s\", latency: \"0 s\", class: x}\n"),
            "T:5:20: links.0.between.1: unknown device 'g7'");
}

TEST_F(BadTopologyTest, DanglingLinkWithOneEnd) {
  EXPECT_EQ(
      check(std::string(kTwoGpus) + "links:\n  - {between: [g0], bandwidth: \"1 GB/s\", latency: \"0 s\", class: x}\n"),
      "T:5:15: links.0.between: expected a list of two device names");
}

TEST_F(BadTopologyTest, DisconnectedGpu) {
  EXPECT_EQ(check(std::string(kTwoGpus) + "links: []\n"),
            "T:1:1: links: GPU 'g0' is not connected to 'g1'; GPU 'g1' is not connected to 'g0'");
}

TEST_F(BadTopologyTest, ZeroBandwidth) {
  EXPECT_EQ(check(std::string(kTwoGpus) +
                  "links:\n  - {between: [g0, g1], bandwidth: \"0 GB/s\", latency: \"0 s\", class: x}\n"),
            "T:5:36: links.0.bandwidth: expected a positive bandwidth, got 0");
}

TEST_F(BadTopologyTest, UnknownKeyWithSuggestion) {
  EXPECT_EQ(check(std::string(kTwoGpus) +
                  "links:\n  - {between: [g0, g1], bandwith: \"1 GB/s\", latency: \"0 s\", class: x}\n"),
            "T:5:5: links.0.bandwidth: missing required key (expected a bandwidth such as \"36 GB/s\")\n"
            "T:5:25: links.0.bandwith: unknown key (did you mean 'bandwidth'?)");
}

}  // namespace
}  // namespace offsim::topo
