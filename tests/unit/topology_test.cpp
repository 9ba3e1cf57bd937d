#include <gtest/gtest.h>

#include <fmt/format.h>
#include <unistd.h>
#include <filesystem>
#include <fstream>
#include <thread>

#include "models/strategies/strategy.hpp"
#include "sim/exec/executor.hpp"
#include "topologies/topology_parser.hpp"
#include "topologies/topology_report.hpp"

namespace offsim::topo {
namespace {

const std::string kFrontier = std::string(OFFSIM_SOURCE_DIR) + "/configs/hardware/frontier-node.yaml";
const std::string kFrontierSystem = std::string(OFFSIM_SOURCE_DIR) + "/configs/hardware/frontier.yaml";

Topology load(const std::string& file, std::vector<std::string> overrides = {}) {
  sim::config::Context ctx(overrides);
  auto parsed = parse_machine(ctx.load_root(file));
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
  EXPECT_EQ(t.link_dst_name(r.links[0]), "gcd1");
  EXPECT_EQ(t.link_dst_name(r.links[1]), "gcd3");
  EXPECT_DOUBLE_EQ(r.bottleneck(t).bytes_per_s, 50e9);
}

TEST(FrontierSystem, EngineResourcesOnlyForTheSimulatedNodes) {
  // Three nodes, node 1 simulated: units, pools and constraints for node 1's devices, for the links
  // between node 1 and the network and for its DDR, nothing for nodes 0 and 2; a route into node 0
  // crosses a link without a constraint, which the lookup reports as a bug.
  const Topology t = load(kFrontierSystem, {"nodes=3"});
  const models::MachineResources all = models::make_machine_resources(t);
  const models::MachineResources one = models::make_machine_resources(t, {false, true, false});
  EXPECT_EQ(all.platform.units.size(), 3 * one.platform.units.size());
  EXPECT_EQ(all.platform.pools.size(), 3 * one.platform.pools.size());
  std::size_t node1_links = 0;
  for (std::size_t l = 0; l < t.links().size(); ++l) {
    const int a = t.device(t.link_src(l)).node;
    const int b = t.device(t.link_dst(l)).node;
    const bool simulated = (a == 1 || a == -1) && (b == 1 || b == -1);
    node1_links += simulated ? 1 : 0;
    EXPECT_EQ(one.constraint_of_link[l] != models::MachineResources::kNoConstraint, simulated) << l;
  }
  const std::size_t memories = one.platform.constraints.size() - node1_links;  // the DDR, shared by transfers
  EXPECT_EQ(memories, 1u);
  EXPECT_FALSE(one.unit_of_device[dev(t, "n0.gcd0")].has_value());
  EXPECT_TRUE(one.unit_of_device[dev(t, "n1.gcd0")].has_value());
  EXPECT_NO_THROW((void)one.transfer_route(t, dev(t, "n1.gcd0"), dev(t, "n1.gcd5")));
  EXPECT_THROW((void)one.transfer_route(t, dev(t, "n1.gcd0"), dev(t, "n0.gcd0")), std::logic_error);
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
                            {},
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

TEST(FrontierSystem, AMultiNodeRouteLeavesThroughTheNicOfTheRightGcd) {
  // Each NIC hangs off an odd GCD (hsn0..3 on gcd1, 3, 5, 7). An even GCD reaches the network
  // through its MI250X partner's NIC over the 200 GB/s in-package link:
  //   n0.gcd0 -> n0.gcd1 -> n0.hsn0 -> group0 -> n1.hsn2 -> n1.gcd5 -> n1.gcd4.
  const Topology t = load(kFrontierSystem, {"nodes=2"});
  const auto& r = t.route(dev(t, "n0.gcd0"), dev(t, "n1.gcd4"));
  std::vector<std::string> path;
  for (const auto l : r.links) path.push_back(t.link_dst_name(l));
  EXPECT_EQ(path, (std::vector<std::string>{"n0.gcd1", "n0.hsn0", "group0", "n1.hsn2", "n1.gcd5", "n1.gcd4"}));
  EXPECT_DOUBLE_EQ(r.bottleneck(t).bytes_per_s, 25e9);  // the Slingshot NIC
  // Every GCD leaves through its own package's NIC.
  const char* nic_of[8] = {"n0.hsn0", "n0.hsn0", "n0.hsn1", "n0.hsn1", "n0.hsn2", "n0.hsn2", "n0.hsn3", "n0.hsn3"};
  for (int g = 0; g < 8; ++g) {
    const auto& route = t.route(dev(t, fmt::format("n0.gcd{}", g).c_str()), dev(t, "n1.gcd0"));
    bool through = false;
    for (const auto l : route.links) through = through || t.link_dst_name(l) == nic_of[g];
    EXPECT_TRUE(through) << "gcd" << g;
  }
}

TEST(FrontierSystem, RoutesBetweenGroupsCrossOneGlobalLinkAndNoThirdNode) {
  // 129 nodes: node 128 is in group 1. The route crosses group0 -> group1 (4 x 25 GB/s) once and
  // touches no device of another node.
  const Topology t = load(kFrontierSystem, {"nodes=129"});
  const auto& r = t.route(dev(t, "n0.gcd1"), dev(t, "n128.gcd1"));
  int globals = 0;
  for (const auto l : r.links) {
    globals += t.link_class(l) == "global" ? 1 : 0;
    const int node = t.device(t.link_dst(l)).node;
    EXPECT_TRUE(node == -1 || node == 0 || node == 128) << t.link_dst_name(l);
  }
  EXPECT_EQ(globals, 1);
  EXPECT_EQ(t.devices_of(DeviceKind::kGpu).size(), 129u * 8u);
}

TEST(FrontierSystem, ThreadsSharingOneTopologyFindTheRoutesOneThreadFinds) {
  // The threads of a sweep share one sealed machine (ExperimentSpec::hardware), and its route
  // search's scratch with it: two threads asking for every GCD pair, in opposite orders, must get
  // what a fresh copy of the machine finds alone, link for link (the scratch is used under the
  // route cache's lock; without it two searches corrupted each other).
  const Topology shared = load(kFrontierSystem, {"nodes=16"});
  const Topology alone = load(kFrontierSystem, {"nodes=16"});
  const auto gcds = shared.devices_of(DeviceKind::kGpu);
  std::vector<std::pair<std::size_t, std::size_t>> pairs;
  for (const auto a : gcds) {
    for (const auto b : gcds) {
      if (a != b) pairs.emplace_back(a, b);
    }
  }
  std::vector<std::vector<std::size_t>> forward(pairs.size()), backward(pairs.size());
  std::thread other([&] {
    for (std::size_t i = pairs.size(); i-- > 0;) backward[i] = shared.route(pairs[i].first, pairs[i].second).links;
  });
  for (std::size_t i = 0; i < pairs.size(); ++i) forward[i] = shared.route(pairs[i].first, pairs[i].second).links;
  other.join();
  for (std::size_t i = 0; i < pairs.size(); ++i) {
    const auto& expected = alone.route(pairs[i].first, pairs[i].second).links;
    EXPECT_EQ(forward[i], expected) << i;
    EXPECT_EQ(backward[i], expected) << i;
  }
  EXPECT_EQ(pairs.size(), 128u * 127u);
}

TEST(FrontierSystem, ASingleNodeKeepsOlcfNames) {
  const Topology t = load(kFrontierSystem, {"nodes=1"});
  EXPECT_TRUE(t.find_device("gcd0").has_value());
  EXPECT_TRUE(t.find_device("hsn3").has_value());
  EXPECT_TRUE(t.find_device("cpu").has_value());
  EXPECT_FALSE(t.find_device("n0.gcd0").has_value());
}

TEST(FrontierNode, BisectionOfTheGcdGraph) {
  // Cutting Frontier's 8 GCDs into two packages pairs: {A,B}|{C,D} = 300 GB/s per direction is the
  // worst balanced split (frontier-node.md section 2).
  const auto b = node_gpu_bisection(load(kFrontier));
  ASSERT_TRUE(b.has_value());
  EXPECT_DOUBLE_EQ(b->min_bytes_per_s, 300e9);
}

TEST(ShippedMachines, AllLoadAndEveryGpuReachesEveryOther) {
  for (const char* name : {"frontier-node", "polaris", "dgx-a100", "h100-pcie-node", "dgx-h100"}) {
    SCOPED_TRACE(name);
    const Topology t = load(std::string(OFFSIM_SOURCE_DIR) + "/configs/hardware/" + name + ".yaml",
                            std::string(name).find("node") == std::string::npos ? std::vector<std::string>{"nodes=2"}
                                                                                : std::vector<std::string>{});
    const auto gpus = t.devices_of(DeviceKind::kGpu);
    ASSERT_GE(gpus.size(), 4u);
    for (const auto a : gpus) {
      for (const auto b : gpus) {
        if (a != b) {
          EXPECT_FALSE(t.route(a, b).links.empty());
        }
      }
    }
  }
}

TEST(DgxA100, GpusReachEachOtherThroughNvswitchAtFullNvlinkRate) {
  const Topology t = load(std::string(OFFSIM_SOURCE_DIR) + "/configs/hardware/dgx-a100.yaml", {"nodes=1"});
  const auto& r = t.route(dev(t, "gpu0"), dev(t, "gpu7"));
  ASSERT_EQ(r.links.size(), 2u);
  EXPECT_EQ(t.link_dst_name(r.links[0]), "nvswitch");
  EXPECT_DOUBLE_EQ(r.bottleneck(t).bytes_per_s, 300e9);
}

TEST(Topology, ARouteOverrideWinsOverTheShortestPath) {
  // g0 - g1 - g2 and a direct g0 - g2: the shortest route is direct; the override goes via g1.
  Topology t;
  for (const char* n : {"g0", "g1", "g2"})
    t.add_device(
        {n, 0, DeviceKind::kGpu, "k", 0, std::make_shared<const MemorySpec>(MemorySpec{"hbm", sim::Bytes{1}, {}})});
  for (auto [a, b] : {std::pair{"g0", "g1"}, {"g1", "g2"}, {"g0", "g2"}}) {
    t.add_link({a, b, sim::Bandwidth{1e9}, sim::TimePs{0}, "x"});
    t.add_link({b, a, sim::Bandwidth{1e9}, sim::TimePs{0}, "x"});
  }
  t.add_route_override("g0", "g2", {"g1"});
  t.seal();
  EXPECT_EQ(t.route(0, 2).links.size(), 2u);
  EXPECT_EQ(t.route(2, 0).links.size(), 1u);  // only the named direction is overridden
  EXPECT_THROW(t.add_link({"g0", "g1", sim::Bandwidth{1e9}, sim::TimePs{0}, "x"}), TopologyError);  // sealed
}

TEST(Topology, TheGpusDistinctKindsInOrderOfFirstAppearance) {
  // GPUs of kinds b, a, b and a CPU of kind c: the GPUs' kinds are b then a (the CPU's is not one).
  Topology t;
  const auto hbm = std::make_shared<const MemorySpec>(MemorySpec{"hbm", sim::Bytes{1}, {}});
  const std::vector<std::pair<const char*, const char*>> devices{{"g0", "b"}, {"g1", "a"}, {"g2", "b"}};
  for (const auto& [name, kind] : devices) t.add_device({name, 0, DeviceKind::kGpu, kind, 0, hbm});
  t.add_device({"cpu", 0, DeviceKind::kCpu, "c", 4, hbm});
  for (const char* a : {"g0", "g1", "g2"}) {
    t.add_link({a, "cpu", sim::Bandwidth{1e9}, sim::TimePs{0}, "x"});
    t.add_link({"cpu", a, sim::Bandwidth{1e9}, sim::TimePs{0}, "x"});
  }
  EXPECT_TRUE(t.gpu_device_kinds().empty());  // made by seal()
  t.seal();
  EXPECT_EQ(t.gpu_device_kinds(), (std::vector<std::string>{"b", "a"}));
}

TEST(Topology, CopiesOfASealedMachineShareTheRoutesFound) {
  // A sweep's points each take a copy of one machine: a route searched on one copy is the same
  // route object on the others (searched once), from any thread; a machine sealed afresh has its own.
  const Topology original = load(kFrontierSystem, {"nodes=4"});
  const Topology copy = original;
  const std::size_t a = dev(original, "n0.gcd0");
  const std::size_t b = dev(original, "n3.gcd5");
  const Route* from_copy = nullptr;
  std::thread other([&] { from_copy = &copy.route(a, b); });
  other.join();
  EXPECT_EQ(&original.route(a, b), from_copy);
  EXPECT_EQ(original.route(a, b).links, from_copy->links);
  const Topology separate = load(kFrontierSystem, {"nodes=4"});
  EXPECT_NE(&separate.route(a, b), from_copy);
  EXPECT_EQ(separate.route(a, b).links, from_copy->links);
}
class BadTopologyTest : public ::testing::Test {
 protected:
  std::string check(const std::string& yaml) {
    const auto path = std::filesystem::temp_directory_path() / fmt::format("offsim-topo-{}.yaml", ::getpid());
    std::ofstream(path) << yaml;
    sim::config::Context ctx;
    std::string out;
    try {
      (void)parse_machine(ctx.load_root(path));
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
            "T:1:1: links: 'g1' cannot be reached from GPU 'g0'; 'g1' cannot reach GPU 'g0'");
}

TEST_F(BadTopologyTest, ZeroBandwidth) {
  EXPECT_EQ(check(std::string(kTwoGpus) +
                  "links:\n  - {between: [g0, g1], bandwidth: \"0 GB/s\", latency: \"0 s\", class: x}\n"),
            "T:5:36: links.0.bandwidth: expected a positive bandwidth, got 0");
}

TEST_F(BadTopologyTest, RouteOverridesAreChecked) {
  const std::string three =
      "name: t\n"
      "devices:\n"
      "  - {name: g, count: 3, kind: gpu, device_kind: k, memory: {kind: hbm, capacity: \"1 GB\"}}\n"
      "links:\n"
      "  - {between: [g0, g1], bandwidth: \"1 GB/s\", latency: \"0 s\", class: x}\n"
      "  - {between: [g1, g2], bandwidth: \"1 GB/s\", latency: \"0 s\", class: x}\n"
      "  - {between: [g0, g2], bandwidth: \"1 GB/s\", latency: \"0 s\", class: x}\n";
  EXPECT_EQ(check(three + "routes:\n  - {from: g0, to: g2, via: [g1]}\n"), "");
  EXPECT_EQ(check(three + "routes:\n  - {from: g0, to: g2, via: [g7]}\n"),
            "T:9:30: routes.0.via.0: unknown device 'g7'");
  const std::string chain =
      "name: t\n"
      "devices:\n"
      "  - {name: g, count: 3, kind: gpu, device_kind: k, memory: {kind: hbm, capacity: \"1 GB\"}}\n"
      "links:\n"
      "  - {between: [g0, g1], bandwidth: \"1 GB/s\", latency: \"0 s\", class: x}\n"
      "  - {between: [g1, g2], bandwidth: \"1 GB/s\", latency: \"0 s\", class: x}\n";
  EXPECT_EQ(check(chain + "routes:\n  - {from: g0, to: g1, via: [g2]}\n"),
            "T:8:5: routes.0: route g0 -> g1: no link from 'g0' to 'g2'");
}

TEST_F(BadTopologyTest, SeveralNodesNeedANetwork) {
  EXPECT_EQ(check("name: s\nnodes: 2\nnode:\n  name: t\n  devices: []\n  links: []\nnetwork: {kind: mesh}\n"),
            "T:7:10: network.nic_link: missing required key (expected a mapping with bandwidth and latency)\n"
            "T:7:17: network.kind: expected one of {switch, dragonfly}, got \"mesh\"");
}

TEST_F(BadTopologyTest, UnknownKeyWithSuggestion) {
  EXPECT_EQ(check(std::string(kTwoGpus) +
                  "links:\n  - {between: [g0, g1], bandwith: \"1 GB/s\", latency: \"0 s\", class: x}\n"),
            "T:5:5: links.0.bandwidth: missing required key (expected a bandwidth such as \"36 GB/s\")\n"
            "T:5:25: links.0.bandwith: unknown key (did you mean 'bandwidth'?)");
}

}  // namespace
}  // namespace offsim::topo
