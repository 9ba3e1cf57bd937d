#include "topologies/topology_parser.hpp"

#include <fmt/format.h>
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

std::optional<MemorySpec> parse_memory(const Node& n) {
  MapReader m(n);
  MemorySpec mem;
  mem.kind = m.choice("kind", {"hbm", "dram", "nvme"}).value;
  mem.capacity = m.required<sim::Bytes>("capacity").value;
  if (m.has("bandwidth")) mem.bandwidth = m.required<sim::Bandwidth>("bandwidth").value;
  const auto shared = m.optional<bool>("shared_by_transfers", false);
  if (shared.value && !mem.bandwidth) {
    n.context().error(shared.loc, n.child_path("shared_by_transfers"), "needs a memory bandwidth to share");
  }
  if (!shared.value) mem.bandwidth.reset();  // only a shared bandwidth becomes a transfer constraint
  return mem;
}

}  // namespace

std::optional<NodeTopology> parse_node_topology(const Node& node) {
  auto& ctx = node.context();
  const std::size_t errors_before = ctx.error_count();
  NodeTopology out;
  MapReader top(node);
  out.name = top.required<std::string>("name").value;

  std::vector<Device> devices;
  if (auto list = top.required_child("devices", "a list of devices")) {
    for (const auto& item : list->items()) {
      MapReader d(item);
      const auto name = d.required<std::string>("name");
      const auto kind = d.choice("kind", kDeviceKinds);
      const auto count = d.optional<int>("count", 1);
      Device dev;
      dev.kind = device_kind_of(kind.value);
      if (dev.kind == DeviceKind::kGpu || dev.kind == DeviceKind::kCpu) {
        dev.device_kind = d.required<std::string>("device_kind").value;
      }
      if (dev.kind == DeviceKind::kCpu) dev.cores = d.required<int>("cores").value;
      if (auto mem = d.child("memory")) dev.memory = parse_memory(*mem);
      if (dev.kind == DeviceKind::kGpu && !dev.memory) {
        ctx.error(item.location(), item.child_path("memory"), "missing required key (a GPU needs its memory)");
      }
      if (count.value < 1) ctx.error(count.loc, item.child_path("count"), "expected a positive integer");
      if (count.value == 1 && !d.has("count")) {
        dev.name = name.value;
        devices.push_back(dev);
      } else {
        for (int i = 0; i < count.value; ++i) {
          Device copy = dev;
          copy.name = fmt::format("{}{}", name.value, i);
          devices.push_back(std::move(copy));
        }
      }
    }
  }

  std::set<std::string> names;
  for (const auto& d : devices) {
    if (!names.insert(d.name).second) {
      ctx.error(node.location(), node.child_path("devices"), fmt::format("device '{}' is declared twice", d.name));
    }
  }

  std::vector<Link> links;
  if (auto list = top.required_child("links", "a list of links")) {
    for (const auto& item : list->items()) {
      MapReader l(item);
      const auto bandwidth = l.required<sim::Bandwidth>("bandwidth");
      const auto latency = l.required<sim::TimePs>("latency");
      const auto link_class = l.required<std::string>("class");
      if (bandwidth.valid && bandwidth.value.bytes_per_s <= 0.0) {
        ctx.error(bandwidth.loc, item.child_path("bandwidth"), "expected a positive bandwidth, got 0");
      }
      const bool duplex = l.has("between");
      std::vector<Located<std::string>> ends;
      std::vector<std::string> end_paths;
      if (duplex) {
        if (auto between = l.child("between")) {
          for (const auto& e : between->items()) {
            if (auto s = e.as<std::string>()) {
              ends.push_back({*s, e.location()});
              end_paths.push_back(e.path());
            }
          }
          if (ends.size() != 2) ctx.error(between->location(), between->path(), "expected a list of two device names");
        }
      } else {
        const auto from = l.required<std::string>("from");
        const auto to = l.required<std::string>("to");
        ends = {from, to};
        end_paths = {item.child_path("from"), item.child_path("to")};
      }
      if (ends.size() != 2) continue;
      bool ends_ok = true;
      for (std::size_t i = 0; i < 2; ++i) {
        if (!names.contains(ends[i].value)) {
          ctx.error(ends[i].loc, end_paths[i], fmt::format("unknown device '{}'", ends[i].value));
          ends_ok = false;
        }
      }
      if (ends_ok && ends[0].value == ends[1].value) {
        ctx.error(ends[0].loc, end_paths[0], "a link must connect two different devices");
        ends_ok = false;
      }
      if (!ends_ok) continue;
      links.push_back({ends[0].value, ends[1].value, bandwidth.value, latency.value, link_class.value});
      if (duplex) links.push_back({ends[1].value, ends[0].value, bandwidth.value, latency.value, link_class.value});
    }
  }

  if (ctx.error_count() != errors_before) return std::nullopt;
  for (auto& d : devices) out.topology.add_device(std::move(d));
  for (auto& l : links) out.topology.add_link(std::move(l));
  try {
    out.topology.seal();
  } catch (const TopologyError& e) {
    ctx.error(node.location(), node.child_path("links"), e.what());
    return std::nullopt;
  }
  return out;
}

}  // namespace offsim::topo
