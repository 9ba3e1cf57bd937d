#include "topologies/topology_report.hpp"

#include <fmt/format.h>
#include <algorithm>
#include <deque>
#include <limits>
#include <map>

#include "sim/report/json_writer.hpp"
#include "sim/report/text_table.hpp"

namespace offsim::topo {

namespace {

// Maximum flow by Edmonds-Karp on a dense capacity matrix: the graphs are one node's GPUs and
// switches (tens of vertices).
double max_flow(std::vector<std::vector<double>> cap, std::size_t source, std::size_t sink) {
  const std::size_t n = cap.size();
  double total = 0.0;
  for (;;) {
    std::vector<std::size_t> parent(n, n);
    parent[source] = source;
    std::deque<std::size_t> q{source};
    while (!q.empty() && parent[sink] == n) {
      const std::size_t v = q.front();
      q.pop_front();
      for (std::size_t w = 0; w < n; ++w) {
        if (parent[w] == n && cap[v][w] > 0.0) {
          parent[w] = v;
          q.push_back(w);
        }
      }
    }
    if (parent[sink] == n) return total;
    double push = std::numeric_limits<double>::infinity();
    for (std::size_t v = sink; v != source; v = parent[v]) push = std::min(push, cap[parent[v]][v]);
    for (std::size_t v = sink; v != source; v = parent[v]) {
      cap[parent[v]][v] -= push;
      cap[v][parent[v]] += push;
    }
    total += push;
  }
}

std::string gbps(double bytes_per_s) {
  return sim::format_bandwidth(sim::Bandwidth{bytes_per_s});
}

}  // namespace

std::optional<Bisection> node_gpu_bisection(const Topology& t) {
  // Vertices: node 0's GPUs and switches; edges: links among them.
  std::vector<std::size_t> vertices;
  std::map<std::size_t, std::size_t> index;
  std::vector<std::size_t> gpus;  // positions in `vertices`
  for (std::size_t i = 0; i < t.devices().size(); ++i) {
    const auto& d = t.devices()[i];
    if (d.node != 0 || (d.kind != DeviceKind::kGpu && d.kind != DeviceKind::kSwitch)) continue;
    index[i] = vertices.size();
    if (d.kind == DeviceKind::kGpu) gpus.push_back(vertices.size());
    vertices.push_back(i);
  }
  if (gpus.size() < 2 || gpus.size() % 2 != 0 || gpus.size() > 16) return std::nullopt;
  const std::size_t n = vertices.size() + 2;
  const std::size_t source = n - 2;
  const std::size_t sink = n - 1;
  std::vector<std::vector<double>> base(n, std::vector<double>(n, 0.0));
  for (std::size_t l = 0; l < t.links().size(); ++l) {
    const std::size_t a = t.link_src(l);
    const std::size_t b = t.link_dst(l);
    if (index.contains(a) && index.contains(b)) base[index[a]][index[b]] += t.links()[l].bandwidth.bytes_per_s;
  }
  const double inf = std::numeric_limits<double>::infinity();
  Bisection out;
  out.min_bytes_per_s = inf;
  const std::size_t half = gpus.size() / 2;
  // Splits with the first GPU on side A enumerate each balanced bipartition once.
  for (std::uint32_t mask = 0; mask < (1u << gpus.size()); ++mask) {
    if ((mask & 1u) == 0 || static_cast<std::size_t>(__builtin_popcount(mask)) != half) continue;
    auto cap = base;
    std::vector<std::string> a, b;
    for (std::size_t g = 0; g < gpus.size(); ++g) {
      const bool in_a = (mask >> g) & 1u;
      (in_a ? cap[source][gpus[g]] : cap[gpus[g]][sink]) = inf;
      (in_a ? a : b).push_back(t.devices()[vertices[gpus[g]]].name);
    }
    const double flow = max_flow(std::move(cap), source, sink);
    if (flow < out.min_bytes_per_s) {
      out.min_bytes_per_s = flow;
      out.worst_split = fmt::format("{{{}}} | {{{}}}", fmt::join(a, ", "), fmt::join(b, ", "));
    }
    out.max_bytes_per_s = std::max(out.max_bytes_per_s, flow);
  }
  return out;
}

std::string topology_summary(const NodeTopology& m) {
  const Topology& t = m.topology;
  std::string out =
      fmt::format("{}: {} node{}, network: {}\n\n", m.name, m.nodes, m.nodes > 1 ? "s" : "", m.network_kind);

  // Devices of node 0 (all nodes are copies), grouped by kind and type.
  std::map<std::string, int> kinds;
  std::vector<std::string> order;
  for (const auto& d : t.devices()) {
    if (d.node != 0) continue;
    std::string key(to_string(d.kind));
    if (!d.device_kind.empty()) key += " " + d.device_kind;
    if (d.memory) key += fmt::format(", {} {}", sim::format_bytes(d.memory->capacity), d.memory->kind);
    if (d.memory && d.memory->bandwidth)
      key += fmt::format(" shared by transfers at {}", gbps(d.memory->bandwidth->bytes_per_s));
    if (d.kind == DeviceKind::kCpu) key += fmt::format(", {} cores", d.cores);
    if (!kinds.contains(key)) order.push_back(key);
    ++kinds[key];
  }
  out += "devices per node:\n";
  for (const auto& k : order) out += fmt::format("  {:>3} x {}\n", kinds[k], k);
  const auto network_devices =
      std::count_if(t.devices().begin(), t.devices().end(), [](const Device& d) { return d.node == -1; });
  if (network_devices > 0) out += fmt::format("network switches: {}\n", network_devices);

  struct ClassStats {
    std::size_t count = 0;
    double min = std::numeric_limits<double>::infinity();
    double max = 0.0;
    double total = 0.0;
  };
  std::map<std::string, ClassStats> classes;
  for (std::size_t i = 0; i < t.links().size(); ++i) {
    const Link& l = t.links()[i];
    auto& c = classes[t.link_class(i)];
    ++c.count;
    c.min = std::min(c.min, l.bandwidth.bytes_per_s);
    c.max = std::max(c.max, l.bandwidth.bytes_per_s);
    c.total += l.bandwidth.bytes_per_s;
  }
  sim::report::TextTable links({"link class", "directed links", "bandwidth each", "sum"});
  for (const auto& [name, c] : classes) {
    links.add_row({name, std::to_string(c.count), c.min == c.max ? gbps(c.min) : gbps(c.min) + " - " + gbps(c.max),
                   gbps(c.total)});
  }
  out += "\nlinks (whole machine, per direction):\n" + links.str();

  out += "\nbisection:\n";
  if (const auto b = node_gpu_bisection(t)) {
    out += fmt::format("  GPUs of one node, equal halves: worst {} ({}), best {}\n", gbps(b->min_bytes_per_s),
                       b->worst_split, gbps(b->max_bytes_per_s));
  }
  double injection = 0.0;
  for (std::size_t l = 0; l < t.links().size(); ++l) {
    if (t.link_class(l) != "network") continue;
    if (t.device(t.link_src(l)).node == 0) injection += t.links()[l].bandwidth.bytes_per_s;
  }
  if (injection > 0.0) out += fmt::format("  node injection into the network: {}\n", gbps(injection));
  if (m.network_kind == "dragonfly") {
    std::size_t groups = 0;
    double global = 0.0;
    for (const auto& d : t.devices()) groups += d.node == -1 ? 1 : 0;
    for (std::size_t l = 0; l < t.links().size(); ++l) {
      if (t.link_class(l) == "global") global = t.links()[l].bandwidth.bytes_per_s;
    }
    const double half = static_cast<double>(groups / 2);
    const double other = static_cast<double>(groups - groups / 2);
    out +=
        fmt::format("  dragonfly: {} groups, {} between each pair of groups; half the groups to the other half: {}\n",
                    groups, gbps(global), gbps(half * other * global));
  }
  return out;
}

std::string topology_json(const NodeTopology& m) {
  sim::report::JsonWriter j;
  j.begin_object();
  j.field("name", m.name).field("nodes", m.nodes).field("network", m.network_kind);
  j.key("devices").begin_array();
  for (const auto& d : m.topology.devices()) {
    j.begin_object().field("name", d.name).field("kind", to_string(d.kind)).field("node", d.node);
    if (!d.device_kind.empty()) j.field("device_kind", d.device_kind);
    if (d.kind == DeviceKind::kCpu) j.field("cores", d.cores);
    if (d.memory) {
      j.key("memory").begin_object().field("kind", d.memory->kind).field("capacity_bytes", d.memory->capacity.count);
      if (d.memory->bandwidth) j.field("shared_bandwidth_bytes_per_s", d.memory->bandwidth->bytes_per_s);
      j.end_object();
    }
    j.end_object();
  }
  j.end_array();
  j.key("links").begin_array();
  const Topology& t = m.topology;
  for (std::size_t i = 0; i < t.links().size(); ++i) {
    const Link& l = t.links()[i];
    j.begin_object().field("src", t.link_src_name(i)).field("dst", t.link_dst_name(i));
    j.field("bandwidth_bytes_per_s", l.bandwidth.bytes_per_s);
    j.field("latency_s", l.latency.seconds()).field("class", t.link_class(i)).end_object();
  }
  j.end_array();
  j.end_object();
  return j.str();
}

std::string topology_dot(const NodeTopology& m) {
  const Topology& t = m.topology;
  std::string out =
      fmt::format("graph \"{}\" {{\n  layout=neato; overlap=false; splines=true;\n  node [fontsize=10];\n", m.name);
  for (const auto& d : t.devices()) {
    const char* shape = d.kind == DeviceKind::kGpu      ? "box"
                        : d.kind == DeviceKind::kCpu    ? "box3d"
                        : d.kind == DeviceKind::kSwitch ? "diamond"
                                                        : "ellipse";
    out += fmt::format("  \"{}\" [shape={}];\n", d.name, shape);
  }
  // One undirected edge per duplex pair with equal bandwidth; directed edges otherwise.
  std::map<std::pair<std::string, std::string>, double> seen;
  for (std::size_t l = 0; l < t.links().size(); ++l) {
    seen[{t.link_src_name(l), t.link_dst_name(l)}] = t.links()[l].bandwidth.bytes_per_s;
  }
  for (std::size_t l = 0; l < t.links().size(); ++l) {
    const std::string& src = t.link_src_name(l);
    const std::string& dst = t.link_dst_name(l);
    const double bandwidth = t.links()[l].bandwidth.bytes_per_s;
    const auto back = seen.find({dst, src});
    const bool duplex = back != seen.end() && back->second == bandwidth;
    if (duplex && dst < src) continue;
    out +=
        fmt::format("  \"{}\" -- \"{}\" [label=\"{}\"{}];\n", src, dst, gbps(bandwidth), duplex ? "" : ", dir=forward");
  }
  out += "}\n";
  return out;
}

std::string describe_route(const Topology& t, const std::string& a, const std::string& b) {
  const auto src = t.find_device(a);
  const auto dst = t.find_device(b);
  if (!src) throw TopologyError(fmt::format("unknown device '{}'", a));
  if (!dst) throw TopologyError(fmt::format("unknown device '{}'", b));
  const Route& r = t.route(*src, *dst);
  sim::report::TextTable table({"link", "class", "bandwidth"});
  for (const auto l : r.links) {
    const auto& link = t.links()[l];
    table.add_row(
        {t.link_src_name(l) + " -> " + t.link_dst_name(l), t.link_class(l), gbps(link.bandwidth.bytes_per_s)});
  }
  return fmt::format("route {} -> {}: {} hop{}\n{}bottleneck: {}\n", a, b, r.links.size(),
                     r.links.size() == 1 ? "" : "s", table.str(), gbps(r.bottleneck(t).bytes_per_s));
}

}  // namespace offsim::topo
