#include "topologies/topology.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <boost/graph/compressed_sparse_row_graph.hpp>
#include <limits>
#include <stdexcept>

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
  grow_name_slots(devices_.size() + 1);
  const std::size_t slot = name_slot(d.name);
  if (name_slots_[slot] != kEmptySlot) throw TopologyError(fmt::format("device '{}' is declared twice", d.name));
  const std::size_t index = devices_.size();
  if (index >= std::numeric_limits<std::uint32_t>::max())
    throw TopologyError(
        fmt::format("device '{}': more than {} devices", d.name, std::numeric_limits<std::uint32_t>::max()));
  name_slots_[slot] = static_cast<std::uint32_t>(index);
  devices_.push_back(std::move(d));
  return index;
}

std::size_t Topology::add_link(LinkSpec l) {
  if (sealed_) throw TopologyError("topology is sealed");
  const auto src = find_device(l.src);
  const auto dst = find_device(l.dst);
  if (!src) throw TopologyError(fmt::format("link {} -> {}: unknown device '{}'", l.src, l.dst, l.src));
  if (!dst) throw TopologyError(fmt::format("link {} -> {}: unknown device '{}'", l.src, l.dst, l.dst));
  return add_link(std::move(l), *src, *dst);
}

std::size_t Topology::add_link(LinkSpec l, std::size_t src, std::size_t dst) {
  if (sealed_) throw TopologyError("topology is sealed");
  if (src >= devices_.size() || dst >= devices_.size() || devices_[src].name != l.src || devices_[dst].name != l.dst) {
    throw std::logic_error(
        fmt::format("link {} -> {}: device indices {} -> {} do not name it", l.src, l.dst, src, dst));
  }
  if (src == dst) throw TopologyError(fmt::format("link {} -> {} connects a device to itself", l.src, l.dst));
  if (!(l.bandwidth.bytes_per_s > 0.0)) {
    throw TopologyError(fmt::format("link {} -> {}: bandwidth must be positive", l.src, l.dst));
  }
  const std::size_t index = link_kind_of_.size();
  if (index >= std::numeric_limits<std::uint32_t>::max())
    throw TopologyError(
        fmt::format("link {} -> {}: more than {} links", l.src, l.dst, std::numeric_limits<std::uint32_t>::max()));
  // Classes are few (a handful per machine): the last one used is the likely match.
  auto known = std::find(link_classes_.rbegin(), link_classes_.rend(), l.link_class);
  if (known == link_classes_.rend()) {
    link_classes_.push_back(std::move(l.link_class));
    known = link_classes_.rbegin();
  }
  const Link link{l.bandwidth, l.latency, static_cast<std::uint32_t>(link_classes_.rend() - known - 1)};
  const auto [kind, added] = kind_index_.try_emplace({link.bandwidth.bytes_per_s, link.latency.ps, link.class_index},
                                                     static_cast<std::uint32_t>(link_kinds_.size()));
  if (added) link_kinds_.push_back(link);
  link_kind_of_.push_back(kind->second);
  link_ends_.emplace_back(static_cast<std::uint32_t>(src), static_cast<std::uint32_t>(dst));
  return index;
}

void Topology::reserve(std::size_t devices, std::size_t links) {
  devices_.reserve(devices);
  grow_name_slots(devices);
  link_kind_of_.reserve(links);
  link_ends_.reserve(links);
}

std::size_t Topology::name_slot(std::string_view name) const {
  const std::size_t mask = name_slots_.size() - 1;
  for (std::size_t s = std::hash<std::string_view>{}(name)&mask;; s = (s + 1) & mask) {
    if (name_slots_[s] == kEmptySlot || devices_[name_slots_[s]].name == name) return s;
  }
}

void Topology::grow_name_slots(std::size_t devices) {
  std::size_t capacity = std::max<std::size_t>(name_slots_.size(), 16);
  while (devices * 4 > capacity * 3) capacity *= 2;
  if (capacity == name_slots_.size()) return;
  name_slots_.assign(capacity, kEmptySlot);
  for (std::size_t i = 0; i < devices_.size(); ++i)
    name_slots_[name_slot(devices_[i].name)] = static_cast<std::uint32_t>(i);
}

std::optional<std::size_t> Topology::find_device(std::string_view name) const {
  if (name_slots_.empty()) return std::nullopt;
  const std::uint32_t index = name_slots_[name_slot(name)];
  if (index == kEmptySlot) return std::nullopt;
  return index;
}

std::vector<std::size_t> Topology::devices_of(DeviceKind kind) const {
  std::vector<std::size_t> out;
  for (std::size_t i = 0; i < devices_.size(); ++i) {
    if (devices_[i].kind == kind) out.push_back(i);
  }
  return out;
}

namespace {

struct EdgeProps {
  std::size_t link = 0;
};
using Graph = boost::compressed_sparse_row_graph<boost::directedS, boost::no_property, EdgeProps>;

}  // namespace

void Topology::seal() {
  // The graph, needed while sealing only (the route search has its own view, arcs_): links
  // stably sorted by source device by Boost's histogram sort (linear in the links), so every
  // device's out-links keep their declaration order and ties between routes go to the first
  // declared.
  std::vector<EdgeProps> props(link_kind_of_.size());
  for (std::size_t l = 0; l < props.size(); ++l) props[l] = EdgeProps{l};
  const Graph graph(boost::edges_are_unsorted_multi_pass, link_ends_.begin(), link_ends_.end(), props.begin(),
                    devices_.size());
  // Every GPU must reach, and be reached from, every GPU and CPU: one that cannot could never take
  // part in a collective or an offload copy. Checked with one forward and one backward search
  // from the first GPU, so sealing a 9,408-node machine stays linear in its size.
  const auto gpus = devices_of(DeviceKind::kGpu);
  gpu_device_kinds_.clear();
  for (const auto g : gpus) {
    const std::string& kind = devices_[g].device_kind;
    if (std::find(gpu_device_kinds_.begin(), gpu_device_kinds_.end(), kind) == gpu_device_kinds_.end()) {
      gpu_device_kinds_.push_back(kind);
    }
  }
  std::vector<std::string> problems;
  if (!gpus.empty()) {
    std::vector<std::pair<std::size_t, std::size_t>> reversed;
    reversed.reserve(link_ends_.size());
    for (const auto& [src, dst] : link_ends_) reversed.emplace_back(dst, src);
    const boost::compressed_sparse_row_graph<boost::directedS> reverse(
        boost::edges_are_unsorted_multi_pass, reversed.begin(), reversed.end(), devices_.size());
    const auto reach = [&](const auto& g) {
      std::vector<bool> seen(devices_.size(), false);
      std::vector<std::size_t> todo{gpus.front()};  // breadth-first: appended, read in order
      seen[gpus.front()] = true;
      for (std::size_t next = 0; next < todo.size(); ++next) {
        for (auto [e, end] = boost::out_edges(todo[next], g); e != end; ++e) {
          const std::size_t w = boost::target(*e, g);
          if (!seen[w]) {
            seen[w] = true;
            todo.push_back(w);
          }
        }
      }
      return seen;
    };
    const auto from_first = reach(graph);
    const auto to_first = reach(reverse);
    const std::string& first = devices_[gpus.front()].name;
    for (std::size_t i = 0; i < devices_.size(); ++i) {
      const auto kind = devices_[i].kind;
      if (kind != DeviceKind::kGpu && kind != DeviceKind::kCpu) continue;
      if (!from_first[i])
        problems.push_back(fmt::format("'{}' cannot be reached from GPU '{}'", devices_[i].name, first));
      if (!to_first[i]) problems.push_back(fmt::format("'{}' cannot reach GPU '{}'", devices_[i].name, first));
    }
  }
  if (!problems.empty()) throw TopologyError(fmt::format("{}", fmt::join(problems, "; ")));
  // Sized exactly (push_back's doubling left up to 10 MB spare on the full Frontier).
  arcs_ = {};
  arcs_.reserve(link_kind_of_.size());
  arc_begin_.assign(1, 0);
  arc_begin_.reserve(devices_.size() + 1);
  local_end_.clear();
  local_end_.reserve(devices_.size());
  for (std::size_t v = 0; v < devices_.size(); ++v) {
    const std::size_t begin = arcs_.size();
    std::size_t order = 0;
    for (auto [e, end] = boost::out_edges(v, graph); e != end; ++e, ++order) {
      const std::size_t w = boost::target(*e, graph);
      arcs_.push_back(Arc{static_cast<std::uint32_t>(w), static_cast<std::uint32_t>(graph[*e].link),
                          static_cast<std::uint32_t>(order), devices_[w].node});
    }
    const int own = devices_[v].node;
    const auto cross = std::stable_partition(arcs_.begin() + static_cast<std::ptrdiff_t>(begin), arcs_.end(),
                                             [&](const Arc& a) { return a.node == -1 || a.node == own; });
    std::stable_sort(cross, arcs_.end(), [](const Arc& a, const Arc& b) { return a.node < b.node; });
    local_end_.push_back(static_cast<std::uint32_t>(cross - arcs_.begin()));
    arc_begin_.push_back(static_cast<std::uint32_t>(arcs_.size()));
  }
  route_cache_ = std::make_shared<RouteCache>();
  kind_index_.clear();  // only add_link needs it
  sealed_ = true;
}

std::optional<std::size_t> Topology::direct_link(std::size_t src, std::size_t dst) const {
  if (!sealed_) {
    // Before sealing (route overrides while a machine is built) the links are a plain list.
    for (std::size_t l = 0; l < link_ends_.size(); ++l) {
      if (link_ends_[l].first == src && link_ends_[l].second == dst) return l;
    }
    return std::nullopt;
  }
  // The first declared: the arc of lowest order among src's arcs to dst.
  const Arc* best = nullptr;
  for (std::size_t a = arc_begin_[src]; a < arc_begin_[src + 1]; ++a) {
    if (arcs_[a].target == dst && (best == nullptr || arcs_[a].order < best->order)) best = &arcs_[a];
  }
  if (best == nullptr) return std::nullopt;
  return best->link;
}

void Topology::add_route_override(const std::string& src, const std::string& dst,
                                  const std::vector<std::string>& hops) {
  if (sealed_) throw TopologyError("topology is sealed");
  std::vector<std::string> path{src};
  path.insert(path.end(), hops.begin(), hops.end());
  path.push_back(dst);
  Route r;
  for (std::size_t i = 0; i + 1 < path.size(); ++i) {
    const auto a = find_device(path[i]);
    const auto b = find_device(path[i + 1]);
    if (!a) throw TopologyError(fmt::format("route {} -> {}: unknown device '{}'", src, dst, path[i]));
    if (!b) throw TopologyError(fmt::format("route {} -> {}: unknown device '{}'", src, dst, path[i + 1]));
    const auto l = direct_link(*a, *b);
    if (!l)
      throw TopologyError(fmt::format("route {} -> {}: no link from '{}' to '{}'", src, dst, path[i], path[i + 1]));
    r.links.push_back(*l);
  }
  overrides_[{*find_device(src), *find_device(dst)}] = std::move(r);
}

const Route& Topology::route(std::size_t src, std::size_t dst) const {
  if (!sealed_) throw TopologyError("routes are only available on a sealed topology");
  const std::uint64_t key = (static_cast<std::uint64_t>(src) << 32) | static_cast<std::uint64_t>(dst);
  // One lock for the lookup and the search: the search's scratch (search_) belongs to this object,
  // which the threads of a sweep share (ExperimentSpec::hardware), and a route is searched once
  // per machine and then found in the cache.
  const std::lock_guard lock(route_cache_->mutex);
  if (auto it = route_cache_->routes.find(key); it != route_cache_->routes.end()) return it->second;
  if (auto it = overrides_.find({src, dst}); it != overrides_.end())
    return route_cache_->routes.emplace(key, it->second).first->second;
  const int src_node = devices_[src].node;
  const int dst_node = devices_[dst].node;
  // Breadth-first by levels; within a level a vertex keeps the widest path reaching it. A vertex's
  // width is final when it is dequeued, because every vertex of the previous level came first.
  constexpr int kUnseen = -1;
  // Plain references, not a structured binding: lambdas below capture them (clang 14 cannot).
  auto& hops = search_.hops;
  auto& width = search_.width;
  auto& via_link = search_.via_link;
  auto& touched = search_.touched;
  if (hops.size() != devices_.size()) {
    hops.assign(devices_.size(), kUnseen);
    width.assign(devices_.size(), 0.0);
    via_link.assign(devices_.size(), 0);
  }
  const auto visit = [&](std::size_t v, int level, double w, std::size_t link) {
    hops[v] = level;
    width[v] = w;
    via_link[v] = link;
    touched.push_back(v);
  };
  visit(src, 0, std::numeric_limits<double>::infinity(), 0);
  // The links a search may take out of v, in declaration order: those in v's node or to the
  // network, and those into the source's or the destination's node (when v is not in it).
  const auto arcs_into = [&](std::size_t v, int node) -> std::pair<const Arc*, const Arc*> {
    const Arc* first = arcs_.data() + local_end_[v];
    const Arc* last = arcs_.data() + arc_begin_[v + 1];
    if (node == devices_[v].node || node == -1) return {last, last};
    const auto [lo, hi] =
        std::equal_range(first, last, Arc{0, 0, 0, node}, [](const Arc& a, const Arc& b) { return a.node < b.node; });
    return {lo, hi};
  };
  // `touched` doubles as the queue: vertices are appended in breadth-first order.
  for (std::size_t next = 0; next < touched.size(); ++next) {
    const std::size_t v = touched[next];
    if (hops[dst] != kUnseen && hops[v] >= hops[dst]) break;
    std::array<std::pair<const Arc*, const Arc*>, 3> ranges{
        std::pair{arcs_.data() + arc_begin_[v], arcs_.data() + local_end_[v]}, arcs_into(v, src_node),
        dst_node == src_node ? std::pair<const Arc*, const Arc*>{nullptr, nullptr} : arcs_into(v, dst_node)};
    while (true) {  // merge the three ranges by declaration order
      std::pair<const Arc*, const Arc*>* pick = nullptr;
      for (auto& r : ranges) {
        if (r.first != r.second && (pick == nullptr || r.first->order < pick->first->order)) pick = &r;
      }
      if (pick == nullptr) break;
      const Arc& a = *pick->first++;
      const double through = std::min(width[v], link_kinds_[link_kind_of_[a.link]].bandwidth.bytes_per_s);
      if (hops[a.target] == kUnseen) {
        visit(a.target, hops[v] + 1, through, a.link);
      } else if (hops[a.target] == hops[v] + 1 && through > width[a.target]) {
        width[a.target] = through;
        via_link[a.target] = a.link;
      }
    }
  }
  const bool found = hops[dst] != kUnseen;
  Route r;
  for (std::size_t v = dst; found && v != src;) {
    const std::size_t l = via_link[v];
    r.links.push_back(l);
    v = link_ends_[l].first;
  }
  for (const std::size_t v : touched) hops[v] = kUnseen;
  touched.clear();
  if (!found) {
    throw TopologyError(fmt::format("no route from '{}' to '{}'", devices_[src].name, devices_[dst].name));
  }
  std::reverse(r.links.begin(), r.links.end());
  return route_cache_->routes.emplace(key, std::move(r)).first->second;
}

}  // namespace offsim::topo
