#include "topologies/topology_parser.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <set>

namespace offsim::topo {

namespace {

using sim::config::Located;
using sim::config::MapReader;
using sim::config::Node;

const std::vector<std::string> kDeviceKinds{"gpu", "cpu", "nic", "nvme", "switch"};

DeviceKind device_kind_of(const std::string& s) {
  if (s == "cpu") return DeviceKind::kCpu;
  if (s == "nic") return DeviceKind::kNic;
  if (s == "nvme") return DeviceKind::kNvme;
  if (s == "switch") return DeviceKind::kSwitch;
  return DeviceKind::kGpu;
}

struct RouteSpec {
  std::string from;
  std::string to;
  std::vector<std::string> via;
  sim::config::Location loc;
  std::string path;
};

struct NodeSpec {
  std::string name;
  std::vector<Device> devices;
  std::vector<LinkSpec> links;
  std::vector<RouteSpec> routes;
};

std::optional<MemorySpec> parse_memory(const Node& n) {
  MapReader m(n);
  MemorySpec mem;
  mem.kind = m.choice("kind", {"hbm", "dram", "nvme"}).value;
  mem.capacity = m.required<sim::Bytes>("capacity").value;
  if (m.has("bandwidth")) {
    const auto bandwidth = m.required<sim::Bandwidth>("bandwidth");
    if (bandwidth.valid && !(bandwidth.value.bytes_per_s > 0.0)) {
      // Even unshared it is the machine's description (reports show it): zero is a mistake.
      n.context().error(bandwidth.loc, n.child_path("bandwidth"), "expected a positive bandwidth, got 0");
    }
    if (bandwidth.valid) mem.bandwidth = bandwidth.value;
  }
  const auto shared = m.optional<bool>("shared_by_transfers", false);
  if (shared.value && !mem.bandwidth) {
    n.context().error(shared.loc, n.child_path("shared_by_transfers"), "needs a memory bandwidth to share");
  }
  if (!shared.value) mem.bandwidth.reset();  // only a shared bandwidth becomes a transfer constraint
  return mem;
}

struct LinkParams {
  sim::Bandwidth bandwidth;
  sim::TimePs latency;
};

// bandwidth (positive) and latency of a link-like mapping.
LinkParams parse_link_params(MapReader& r, const Node& n) {
  const auto bandwidth = r.required<sim::Bandwidth>("bandwidth");
  const auto latency = r.required<sim::TimePs>("latency");
  if (bandwidth.valid && bandwidth.value.bytes_per_s <= 0.0) {
    n.context().error(bandwidth.loc, n.child_path("bandwidth"), "expected a positive bandwidth, got 0");
  }
  return {bandwidth.value, latency.value};
}

std::optional<NodeSpec> parse_node_spec(const Node& node) {
  auto& ctx = node.context();
  const std::size_t errors_before = ctx.error_count();
  NodeSpec out;
  MapReader top(node);
  out.name = top.required<std::string>("name").value;
  (void)top.has("calibration");  // the machine's cost tables, read by load_experiment

  if (auto list = top.required_child("devices", "a list of devices")) {
    for (const auto& item : list->items()) {
      MapReader d(item);
      const auto name = d.required<std::string>("name");
      const auto kind = d.choice("kind", kDeviceKinds);
      const auto count = d.optional<int>("count", 1);
      Device dev;
      dev.kind = device_kind_of(kind.value);
      // An unknown kind is reported once, not again as a GPU's missing keys.
      if (kind.valid && (dev.kind == DeviceKind::kGpu || dev.kind == DeviceKind::kCpu)) {
        dev.device_kind = d.required<std::string>("device_kind").value;
      }
      if (dev.kind == DeviceKind::kCpu) {
        const auto cores = d.required<int>("cores");
        if (cores.valid && cores.value < 1) {
          ctx.error(cores.loc, item.child_path("cores"),
                    fmt::format("expected a positive integer, got {}", cores.value));
        }
        dev.cores = cores.value;
      }
      if (auto mem = d.child("memory")) {
        if (auto spec = parse_memory(*mem)) dev.memory = std::make_shared<const MemorySpec>(std::move(*spec));
      }
      if (kind.valid && dev.kind == DeviceKind::kGpu && !dev.memory && d.node().yaml().IsMap()) {
        ctx.error(item.location(), item.child_path("memory"), "missing required key (a GPU needs its memory)");
      }
      if (count.value < 1) ctx.error(count.loc, item.child_path("count"), "expected a positive integer");
      if (const std::size_t devices = out.devices.size() + static_cast<std::size_t>(std::max(count.value, 0));
          devices > max_machine_elements) {
        ctx.error(count.loc, item.child_path("count"),
                  fmt::format("{} devices on a node, more than offsim builds ({} devices and links in a machine)",
                              devices, max_machine_elements));
        break;
      }
      if (!d.has("count")) {
        dev.name = name.value;
        out.devices.push_back(dev);
      } else {
        for (int i = 0; i < count.value; ++i) {
          Device copy = dev;
          copy.name = fmt::format("{}{}", name.value, i);
          out.devices.push_back(std::move(copy));
        }
      }
    }
  }
  std::set<std::string> names;
  for (const auto& d : out.devices) {
    if (!names.insert(d.name).second) {
      ctx.error(node.location(), node.child_path("devices"), fmt::format("device '{}' is declared twice", d.name));
    }
  }
  const auto known = [&](const Located<std::string>& name, const std::string& path) {
    if (names.contains(name.value)) return true;
    ctx.error(name.loc, path, fmt::format("unknown device '{}'", name.value));
    return false;
  };

  if (auto list = top.required_child("links", "a list of links")) {
    for (const auto& item : list->items()) {
      MapReader l(item);
      const LinkParams params = parse_link_params(l, item);
      const auto link_class = l.required<std::string>("class");
      const bool duplex = l.has("between");
      std::vector<Located<std::string>> ends;
      std::vector<std::string> end_paths;
      if (duplex) {
        if (auto between = l.child("between")) {
          for (const auto& e : between->items()) {
            if (auto s = e.as<std::string>()) {
              ends.push_back({*s, e.location(), true});
              end_paths.push_back(e.path());
            }
          }
          if (ends.size() != 2) ctx.error(between->location(), between->path(), "expected a list of two device names");
        }
      } else {
        ends = {l.required<std::string>("from"), l.required<std::string>("to")};
        end_paths = {item.child_path("from"), item.child_path("to")};
      }
      if (ends.size() != 2) continue;
      const bool a_ok = known(ends[0], end_paths[0]);
      const bool b_ok = known(ends[1], end_paths[1]);
      if (!a_ok || !b_ok) continue;
      if (ends[0].value == ends[1].value) {
        ctx.error(ends[0].loc, end_paths[0], "a link must connect two different devices");
        continue;
      }
      out.links.push_back({ends[0].value, ends[1].value, params.bandwidth, params.latency, link_class.value});
      if (duplex)
        out.links.push_back({ends[1].value, ends[0].value, params.bandwidth, params.latency, link_class.value});
    }
  }

  if (auto list = top.child("routes")) {
    for (const auto& item : list->items()) {
      MapReader r(item);
      const auto from = r.required<std::string>("from");
      const auto to = r.required<std::string>("to");
      RouteSpec route{from.value, to.value, {}, item.location(), item.path()};
      // Both ends are checked, so that each unknown one is reported.
      const bool from_known = known(from, item.child_path("from"));
      const bool to_known = known(to, item.child_path("to"));
      bool ok = from_known && to_known;
      if (auto via = r.required_child("via", "a list of intermediate devices")) {
        for (const auto& hop : via->items()) {
          if (auto name = hop.as<std::string>()) {
            ok = known({*name, hop.location(), true}, hop.path()) && ok;
            route.via.push_back(*name);
          }
        }
      }
      if (ok) out.routes.push_back(std::move(route));
    }
  }
  if (ctx.error_count() != errors_before) return std::nullopt;
  return out;
}

// Adds one node's devices, links and routes, with names prefixed by `prefix`.
// One node from the template. Its devices take consecutive indices, so a link's ends are found by
// their place in the template (`link_ends`), not by name.
void instantiate(Topology& t, const NodeSpec& spec, const std::vector<std::pair<std::size_t, std::size_t>>& link_ends,
                 const std::string& prefix, int node_index) {
  const std::size_t first = t.devices().size();
  for (Device d : spec.devices) {
    d.name = prefix + d.name;
    d.node = node_index;
    t.add_device(std::move(d));
  }
  for (std::size_t i = 0; i < spec.links.size(); ++i) {
    LinkSpec l = spec.links[i];
    l.src = prefix + l.src;
    l.dst = prefix + l.dst;
    t.add_link(std::move(l), first + link_ends[i].first, first + link_ends[i].second);
  }
}

// The template's links as pairs of device places in the node (parse_node_spec has checked that
// every link names a device of the node).
std::vector<std::pair<std::size_t, std::size_t>> template_link_ends(const NodeSpec& spec) {
  std::map<std::string, std::size_t, std::less<>> place;
  for (std::size_t i = 0; i < spec.devices.size(); ++i) place.emplace(spec.devices[i].name, i);
  std::vector<std::pair<std::size_t, std::size_t>> ends;
  for (const auto& l : spec.links) ends.emplace_back(place.at(l.src), place.at(l.dst));
  return ends;
}

void add_routes(Topology& t, const NodeSpec& spec, const std::string& prefix, sim::config::Context& ctx) {
  for (const auto& r : spec.routes) {
    std::vector<std::string> via;
    for (const auto& hop : r.via) via.push_back(prefix + hop);
    try {
      t.add_route_override(prefix + r.from, prefix + r.to, via);
    } catch (const TopologyError& e) {
      ctx.error(r.loc, r.path, e.what());
    }
  }
}

struct NetworkSpec {
  std::string kind;
  LinkParams nic_link;
  int group_size = 0;
  int global_links_per_group_pair = 0;
  LinkParams global_link;
};

std::optional<NetworkSpec> parse_network(const Node& node) {
  auto& ctx = node.context();
  const std::size_t errors_before = ctx.error_count();
  MapReader r(node);
  NetworkSpec n;
  n.kind = r.choice("kind", {"switch", "dragonfly"}).value;
  if (auto nic = r.required_child("nic_link", "a mapping with bandwidth and latency")) {
    MapReader l(*nic);
    n.nic_link = parse_link_params(l, *nic);
  }
  if (n.kind == "dragonfly") {
    const auto group = r.required<int>("group_size");
    const auto globals = r.required<int>("global_links_per_group_pair");
    if (group.valid && group.value < 1)
      ctx.error(group.loc, node.child_path("group_size"), "expected a positive integer");
    if (globals.valid && globals.value < 1) {
      ctx.error(globals.loc, node.child_path("global_links_per_group_pair"), "expected a positive integer");
    }
    n.group_size = group.value;
    n.global_links_per_group_pair = globals.value;
    if (auto g = r.required_child("global_link", "a mapping with bandwidth and latency")) {
      MapReader l(*g);
      n.global_link = parse_link_params(l, *g);
    }
  }
  if (ctx.error_count() != errors_before) return std::nullopt;
  return n;
}

// Switch vertices of the network: one per dragonfly group (written so that no sum overflows).
int group_count(const NetworkSpec& net, int nodes) {
  return net.kind == "dragonfly" ? (nodes - 1) / net.group_size + 1 : 1;
}

// Joins the NICs of every node to the network. A dragonfly group is one switch vertex: Slingshot
// groups are all-to-all with adaptive routing, modelled as non-blocking inside a group. The
// global links between two groups are one constraint per direction carrying their total
// bandwidth (adaptive routing spreads traffic over them). Only minimal routes are modelled.
void add_network(Topology& t, const NetworkSpec& net, int nodes, const std::vector<std::vector<std::string>>& nics) {
  const int groups = group_count(net, nodes);
  const auto switch_name = [&](int g) {
    return net.kind == "dragonfly" ? fmt::format("group{}", g) : std::string("switch");
  };
  std::vector<std::size_t> switches;
  for (int g = 0; g < groups; ++g) {
    Device sw;
    sw.name = switch_name(g);
    sw.kind = DeviceKind::kSwitch;
    sw.node = -1;
    switches.push_back(t.add_device(std::move(sw)));
  }
  for (int n = 0; n < nodes; ++n) {
    const std::size_t sw = switches[net.kind == "dragonfly" ? n / net.group_size : 0];
    const std::string& sw_name = t.device(sw).name;
    for (const auto& nic_name : nics[n]) {
      const std::size_t nic = *t.find_device(nic_name);
      t.add_link({nic_name, sw_name, net.nic_link.bandwidth, net.nic_link.latency, "network"}, nic, sw);
      t.add_link({sw_name, nic_name, net.nic_link.bandwidth, net.nic_link.latency, "network"}, sw, nic);
    }
  }
  const sim::Bandwidth global = net.global_link.bandwidth * static_cast<double>(net.global_links_per_group_pair);
  for (int a = 0; a < groups; ++a) {
    for (int b = 0; b < groups; ++b) {
      if (a == b) continue;
      t.add_link({t.device(switches[a]).name, t.device(switches[b]).name, global, net.global_link.latency, "global"},
                 switches[a], switches[b]);
    }
  }
}

}  // namespace

bool describes_system(const Node& node) {
  return node.yaml().IsMap() && node.yaml()["node"].IsDefined();
}

std::optional<NodeTopology> parse_machine(const Node& node) {
  auto& ctx = node.context();
  const std::size_t errors_before = ctx.error_count();
  NodeTopology out;
  std::optional<NodeSpec> spec;
  std::optional<NetworkSpec> network;
  sim::config::Location nodes_loc = node.location();
  const YAML::Node& yaml = node.yaml();
  const bool system = yaml.IsMap() && yaml["node"].IsDefined();
  if (system) {
    MapReader probe(node);
    {
      out.name = probe.required<std::string>("name").value;
      (void)probe.has("calibration");  // the machine's cost tables, read by load_experiment
      if (auto n = probe.required_child("node", "a node description (usually !include x-node.yaml)"))
        spec = parse_node_spec(*n);
      const auto nodes = probe.required<int>("nodes");
      nodes_loc = nodes.loc;
      if (nodes.valid && nodes.value < 1) ctx.error(nodes.loc, node.child_path("nodes"), "expected a positive integer");
      out.nodes = nodes.value;
      if (auto n = probe.required_child("network", "a network mapping with kind")) network = parse_network(*n);
    }
  }
  if (!system) {
    spec = parse_node_spec(node);
    if (spec) out.name = spec->name;
  }
  if (ctx.error_count() != errors_before || !spec) return std::nullopt;

  // The size of what would be built, checked first: nodes < 2^31 and a node's devices and links are
  // bounded by the limit and the file size, so nothing here overflows 64 bits.
  std::uint64_t nics_per_node = 0;
  for (const auto& d : spec->devices) nics_per_node += d.kind == DeviceKind::kNic ? 1 : 0;
  const auto nodes = static_cast<std::uint64_t>(out.nodes);
  std::uint64_t devices = nodes * spec->devices.size();
  std::uint64_t links = nodes * spec->links.size();
  if (network) {
    const auto groups = static_cast<std::uint64_t>(group_count(*network, out.nodes));
    devices += groups;
    links += 2 * nodes * nics_per_node + groups * (groups - 1);
  }
  const std::uint64_t elements = devices + links;
  if (elements > max_machine_elements) {
    ctx.error(nodes_loc, node.child_path("nodes"),
              fmt::format("{} nodes of {} devices and {} links make {} devices and links with the network, more "
                          "than offsim builds ({})",
                          out.nodes, spec->devices.size(), spec->links.size(), elements, max_machine_elements));
    return std::nullopt;
  }
  out.network_kind = network ? network->kind : "none";
  const bool prefixed = out.nodes > 1;
  std::vector<std::vector<std::string>> nics(out.nodes);
  const auto link_ends = template_link_ends(*spec);
  out.topology.reserve(static_cast<std::size_t>(devices), static_cast<std::size_t>(links));
  for (int n = 0; n < out.nodes; ++n) {
    const std::string prefix = prefixed ? fmt::format("n{}.", n) : std::string();
    instantiate(out.topology, *spec, link_ends, prefix, n);
    add_routes(out.topology, *spec, prefix, ctx);
    for (const auto& d : spec->devices) {
      if (d.kind == DeviceKind::kNic) nics[n].push_back(prefix + d.name);
    }
  }
  if (network) {
    if (nics.front().empty()) {
      ctx.error(node.location(), node.child_path("network"), "the node has no NIC to attach to the network");
      return std::nullopt;
    }
    try {
      add_network(out.topology, *network, out.nodes, nics);
    } catch (const TopologyError& e) {  // a device of a one-node machine named like a switch
      ctx.error(node.location(), node.child_path("network"), e.what());
      return std::nullopt;
    }
  } else if (out.nodes > 1) {
    ctx.error(nodes_loc, node.child_path("nodes"), "several nodes need a network");
    return std::nullopt;
  }
  try {
    out.topology.seal();
  } catch (const TopologyError& e) {
    ctx.error(node.location(), node.child_path("links"), e.what());
    return std::nullopt;
  }
  if (ctx.error_count() != errors_before) return std::nullopt;
  return out;
}

}  // namespace offsim::topo
