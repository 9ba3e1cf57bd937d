#include "topologies/topology.hpp"

#include <fmt/format.h>
#include <deque>

namespace offsim::topo {

std::string_view to_string(DeviceKind k) {
  switch (k) {
    case DeviceKind::kGpu:
      return "gpu";
    case DeviceKind::kCpu:
      return "cpu";
    case DeviceKind::kNic:
      return "nic";
    case DeviceKind::kNvme:
      return "nvme";
    case DeviceKind::kSwitch:
      return "switch";
  }
  return "?";
}

sim::Bandwidth Route::bottleneck(const Topology& t) const {
  double bw = std::numeric_limits<double>::infinity();
  for (const auto l : links) bw = std::min(bw, t.links()[l].bandwidth.bytes_per_s);
  return sim::Bandwidth{bw};
}

std::size_t Topology::add_device(Device d) {
  if (sealed_) throw TopologyError("topology is sealed");
  if (by_name_.contains(d.name)) throw TopologyError(fmt::format("device '{}' is declared twice", d.name));
  const std::size_t index = devices_.size();
  by_name_.emplace(d.name, index);
  devices_.push_back(std::move(d));
  boost::add_vertex(VertexProps{index}, graph_);
  return index;
}

std::size_t Topology::add_link(Link l) {
  if (sealed_) throw TopologyError("topology is sealed");
  const auto src = find_device(l.src);
  const auto dst = find_device(l.dst);
  if (!src) throw TopologyError(fmt::format("link {} -> {}: unknown device '{}'", l.src, l.dst, l.src));
  if (!dst) throw TopologyError(fmt::format("link {} -> {}: unknown device '{}'", l.src, l.dst, l.dst));
  if (*src == *dst) throw TopologyError(fmt::format("link {} -> {} connects a device to itself", l.src, l.dst));
  if (!(l.bandwidth.bytes_per_s > 0.0)) {
    throw TopologyError(fmt::format("link {} -> {}: bandwidth must be positive", l.src, l.dst));
  }
  const std::size_t index = links_.size();
  links_.push_back(std::move(l));
  boost::add_edge(*src, *dst, EdgeProps{index}, graph_);
  return index;
}

std::optional<std::size_t> Topology::find_device(std::string_view name) const {
  const auto it = by_name_.find(name);
  if (it == by_name_.end()) return std::nullopt;
  return it->second;
}

std::vector<std::size_t> Topology::devices_of(DeviceKind kind) const {
  std::vector<std::size_t> out;
  for (std::size_t i = 0; i < devices_.size(); ++i) {
    if (devices_[i].kind == kind) out.push_back(i);
  }
  return out;
}

void Topology::seal() {
  std::vector<std::string> problems;
  // Every GPU must reach, and be reached from, every other GPU and CPU: a disconnected GPU could
  // never take part in a collective or an offload copy.
  std::vector<std::size_t> endpoints = devices_of(DeviceKind::kGpu);
  for (const auto c : devices_of(DeviceKind::kCpu)) endpoints.push_back(c);
  sealed_ = true;
  for (const auto g : devices_of(DeviceKind::kGpu)) {
    for (const auto other : endpoints) {
      if (other == g) continue;
      try {
        (void)route(g, other);
        (void)route(other, g);
      } catch (const TopologyError&) {
        problems.push_back(fmt::format("GPU '{}' is not connected to '{}'", devices_[g].name, devices_[other].name));
        break;
      }
    }
  }
  if (!problems.empty()) {
    sealed_ = false;
    route_cache_.clear();
    throw TopologyError(fmt::format("{}", fmt::join(problems, "; ")));
  }
}

const Route& Topology::route(std::size_t src, std::size_t dst) const {
  if (!sealed_) throw TopologyError("routes are only available on a sealed topology");
  const auto key = std::make_pair(src, dst);
  if (auto it = route_cache_.find(key); it != route_cache_.end()) return it->second;
  // Breadth-first search over out-edges in declaration order (vecS keeps insertion order).
  std::vector<std::optional<std::size_t>> via_link(devices_.size());
  std::vector<bool> seen(devices_.size(), false);
  std::deque<std::size_t> frontier{src};
  seen[src] = true;
  while (!frontier.empty() && !seen[dst]) {
    const std::size_t v = frontier.front();
    frontier.pop_front();
    for (auto [e, end] = boost::out_edges(v, graph_); e != end; ++e) {
      const std::size_t w = boost::target(*e, graph_);
      if (seen[w]) continue;
      seen[w] = true;
      via_link[w] = graph_[*e].link;
      frontier.push_back(w);
    }
  }
  if (!seen[dst]) {
    throw TopologyError(fmt::format("no route from '{}' to '{}'", devices_[src].name, devices_[dst].name));
  }
  Route r;
  for (std::size_t v = dst; v != src;) {
    const std::size_t l = *via_link[v];
    r.links.insert(r.links.begin(), l);
    v = *find_device(links_[l].src);
  }
  return route_cache_.emplace(key, std::move(r)).first->second;
}

}  // namespace offsim::topo
