#include "models/platform/rank_layout.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <charconv>
#include <map>
#include <stdexcept>
#include <string_view>

namespace offsim::models {

namespace {

// A device's name inside its node: "n3.gcd5" -> "gcd5" (single-node machines have no prefix). A
// view into the device's name: checking 75,264 ranks builds no strings.
std::string_view local_name(const topo::Device& d) {
  std::array<char, 24> buffer{'n'};
  char* end = std::to_chars(buffer.data() + 1, buffer.data() + buffer.size() - 1, d.node).ptr;
  *end++ = '.';
  const std::string_view prefix(buffer.data(), static_cast<std::size_t>(end - buffer.data()));
  const std::string_view name(d.name);
  return name.starts_with(prefix) ? name.substr(prefix.size()) : name;
}

// Why `devices` is not node-major with one local order, or empty when it is.
std::string asymmetry(const topo::Topology& t, const std::vector<std::size_t>& devices, int per_node) {
  const int ranks = static_cast<int>(devices.size());
  if (per_node < 1 || ranks % per_node != 0) return "the ranks do not fill whole nodes equally";
  std::vector<int> seen_nodes;
  for (int r = 0; r < ranks; ++r) {
    const auto& d = t.device(devices[r]);
    const auto& first_of_block = t.device(devices[r - r % per_node]);
    if (d.node != first_of_block.node) return fmt::format("rank {} is not on the node of rank {}", r, r - r % per_node);
    if (local_name(d) != local_name(t.device(devices[r % per_node]))) {
      return fmt::format("rank {} ({}) does not take the local place of rank {}", r, d.name, r % per_node);
    }
    if (r % per_node == 0) {
      if (std::find(seen_nodes.begin(), seen_nodes.end(), d.node) != seen_nodes.end()) {
        return fmt::format("node {} holds two blocks of ranks", d.node);
      }
      seen_nodes.push_back(d.node);
    }
  }
  return {};
}

}  // namespace

RankLayout make_rank_layout(const topo::Topology& topology, std::vector<std::size_t> devices, bool all_ranks,
                            std::string* note, int block_ranks) {
  RankLayout layout;
  layout.devices = std::move(devices);
  const int ranks = layout.ranks();
  int per_node = 0;
  if (ranks > 0) {
    const int node0 = topology.device(layout.devices[0]).node;
    while (per_node < ranks && topology.device(layout.devices[per_node]).node == node0) ++per_node;
  }
  // The representative block: whole nodes, at least `block_ranks` ranks, dividing the ranks.
  int block = per_node;
  if (block_ranks > per_node && per_node > 0) block = (block_ranks + per_node - 1) / per_node * per_node;
  std::string why_not;
  if (!all_ranks && block < ranks) {
    why_not = asymmetry(topology, layout.devices, per_node);
    if (why_not.empty() && ranks % block != 0) {
      why_not = fmt::format("{} ranks do not split into blocks of {}", ranks, block);
    }
  }
  layout.symmetric = !all_ranks && block < ranks && why_not.empty();
  if (!layout.symmetric) {
    for (int r = 0; r < ranks; ++r) {
      layout.simulated.push_back(r);
      layout.simulated_index.push_back(r);
    }
    if (note && !why_not.empty()) {
      *note = fmt::format("all {} ranks simulated (no representative node: {})", ranks, why_not);
    }
    return layout;
  }
  for (int r = 0; r < block; ++r) layout.simulated.push_back(r);
  for (int r = 0; r < ranks; ++r) layout.simulated_index.push_back(r % block);
  // Each node maps onto the node of the representative block in the same position, and each of its
  // devices onto the device of the same local name there (the machine's nodes come from one
  // template, so that is usually the device at the same place in the node: checked by name).
  layout.mirror_of.resize(topology.devices().size());
  for (std::size_t d = 0; d < layout.mirror_of.size(); ++d) layout.mirror_of[d] = d;
  std::map<int, int> representative_node;
  for (int r = block; r < ranks; r += per_node) {
    representative_node[topology.device(layout.devices[r]).node] = topology.device(layout.devices[r % block]).node;
  }
  std::map<int, std::pair<std::size_t, std::size_t>> node_devices;  // node -> [first, last] device
  for (std::size_t d = 0; d < topology.devices().size(); ++d) {
    const int node = topology.device(d).node;
    if (node < 0) continue;
    auto [it, inserted] = node_devices.try_emplace(node, d, d);
    if (!inserted) it->second.second = d;
  }
  std::map<int, std::map<std::string_view, std::size_t, std::less<>>> by_local_name;  // of representative nodes
  for (std::size_t d = 0; d < layout.mirror_of.size(); ++d) {
    const auto& dev = topology.device(d);
    const auto it = representative_node.find(dev.node);
    if (dev.node < 0 || it == representative_node.end() || it->second == dev.node) continue;
    const std::string_view local = local_name(dev);
    const auto [first, last] = node_devices.at(it->second);
    const std::size_t same_place = first + (d - node_devices.at(dev.node).first);
    if (same_place <= last && local_name(topology.device(same_place)) == local) {
      layout.mirror_of[d] = same_place;
      continue;
    }
    auto& names = by_local_name[it->second];
    if (names.empty()) {
      for (std::size_t m = first; m <= last; ++m) {
        if (topology.device(m).node == it->second) names.emplace(local_name(topology.device(m)), m);
      }
    }
    if (const auto m = names.find(local); m != names.end()) layout.mirror_of[d] = m->second;
  }
  if (note) {
    const int first = topology.device(layout.devices[0]).node;
    const int nodes = block / per_node;
    *note = fmt::format(
        "rank symmetry: the {} ranks of {} stand for all {} ranks (every {} does the same work; traffic into "
        "other nodes is mirrored onto the representative links); run with --all-ranks to simulate every rank",
        block, nodes == 1 ? fmt::format("node {}", first) : fmt::format("nodes {}-{}", first, first + nodes - 1), ranks,
        nodes == 1 ? "node" : fmt::format("block of {} nodes", nodes));
  }
  return layout;
}

void collapse_classes(RankLayout& layout, int class_size) {
  if (class_size <= 1) return;
  const int block = layout.simulated_ranks();
  for (int s = 0; s < block; ++s) {
    if (layout.simulated[s] != s) throw std::logic_error("collapse_classes: the simulated ranks are not 0..n-1");
  }
  if (layout.class_size != 1 || block % class_size != 0) {
    throw std::logic_error(
        fmt::format("collapse_classes: {} simulated ranks do not split into classes of {}", block, class_size));
  }
  std::vector<int> representatives;
  for (int r = 0; r < block; r += class_size) representatives.push_back(r);
  layout.simulated = std::move(representatives);
  for (auto& index : layout.simulated_index) index /= class_size;
  layout.class_size = class_size;
}

}  // namespace offsim::models
