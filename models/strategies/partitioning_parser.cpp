#include "models/strategies/partitioning_parser.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <charconv>

#include "models/strategies/value_ranges.hpp"

namespace offsim::models {

using sim::config::MapReader;
using sim::config::Node;

namespace {

// A level name or a rank count; nullopt (error recorded) otherwise.
std::optional<int> level_size(const Node& item, const LevelSizes& levels) {
  auto& ctx = item.context();
  const auto text = item.as<std::string>();
  if (!text) return std::nullopt;
  if (*text == "gcd_pair") return 2;
  if (*text == "node") {
    // No GPU on node 0: the machine is missing or broken (its error is reported where it is).
    if (levels.gpus_per_node >= 1) return levels.gpus_per_node;
    ctx.error(item.location(), item.path(), "the level node needs a machine with GPUs (hardware)");
    return std::nullopt;
  }
  if (*text == "cluster") return levels.ranks;
  if (!text->empty() && std::all_of(text->begin(), text->end(), [](unsigned char c) { return std::isdigit(c); })) {
    int n = 0;
    const auto [end, ec] = std::from_chars(text->data(), text->data() + text->size(), n);
    if (ec == std::errc{} && end == text->data() + text->size() && n >= 1 && n <= levels.ranks &&
        levels.ranks % n == 0) {
      return n;
    }
    ctx.error(item.location(), item.path(),
              fmt::format("expected a group size dividing the {} ranks, got {}", levels.ranks, *text));
    return std::nullopt;
  }
  ctx.error(item.location(), item.path(),
            fmt::format("expected gcd_pair, node, cluster or a number of ranks, got \"{}\"", *text));
  return std::nullopt;
}

std::optional<int> parse_over(MapReader& r, const Node& node, const LevelSizes& levels) {
  auto over = r.required_child("over", "a level: gcd_pair, node, cluster or a number of ranks");
  if (!over) return std::nullopt;
  const auto size = level_size(*over, levels);
  if (size && levels.ranks % *size != 0) {
    node.context().error(over->location(), over->path(),
                         fmt::format("a group of {} ranks does not divide the {} ranks", *size, levels.ranks));
    return std::nullopt;
  }
  return size;
}

// The bands of a stage list inside a group of `over` ranks (default: one flat band).
std::optional<std::vector<Band>> parse_stages(MapReader& r, const Node& node, std::string_view key, int over,
                                              const LevelSizes& levels) {
  auto& ctx = node.context();
  auto list = r.child(key);
  if (!list) return std::vector<Band>{Band{"flat", 1, over}};
  struct Named {
    std::string name;
    int size;
    Node item;
  };
  std::vector<Named> listed;
  bool ok = true;
  for (const auto& item : list->items()) {
    const auto size = level_size(item, levels);
    if (!size) {
      ok = false;
      continue;
    }
    listed.push_back({*item.as<std::string>(), *size, item});
  }
  if (!ok) return std::nullopt;
  if (listed.empty()) {
    ctx.error(list->location(), list->path(), "expected at least one level");
    return std::nullopt;
  }
  // Two levels of one size (node and cluster on a one-node machine) are one band: keep the first.
  std::vector<int> sizes;
  std::vector<Named> distinct;
  for (const auto& l : listed) {
    if (std::any_of(distinct.begin(), distinct.end(), [&](const Named& d) { return d.name == l.name; })) {
      ctx.error(l.item.location(), l.item.path(), fmt::format("level {} is listed twice", l.name));
      return std::nullopt;
    }
    if (std::find(sizes.begin(), sizes.end(), l.size) != sizes.end()) continue;
    sizes.push_back(l.size);
    distinct.push_back(l);
  }
  listed = std::move(distinct);
  std::sort(sizes.begin(), sizes.end());
  if (sizes.back() != over) {
    ctx.error(list->location(), list->path(),
              fmt::format("the largest level must be the group the state is sharded over ({} ranks), got {}", over,
                          sizes.back()));
    return std::nullopt;
  }
  std::vector<Band> bands;
  for (const auto& l : listed) {
    const auto it = std::find(sizes.begin(), sizes.end(), l.size);
    const int lo = it == sizes.begin() ? 1 : *(it - 1);
    if (l.size % lo != 0) {
      ctx.error(l.item.location(), l.item.path(),
                fmt::format("level {} ({} ranks) is not a multiple of the next smaller level ({} ranks)", l.name,
                            l.size, lo));
      return std::nullopt;
    }
    bands.push_back(Band{l.name, lo, l.size});
  }
  return bands;
}

std::optional<Quantization> parse_quantization(MapReader& r) {
  auto node = r.child("quantization");
  if (!node) return Quantization{};
  return parse_quantization_format(*node);
}

}  // namespace

std::optional<Quantization> parse_quantization_format(const Node& format) {
  const std::optional<Node> node = format;
  auto& ctx = node->context();
  const std::size_t errors_before = ctx.error_count();
  MapReader q(*node);
  Quantization out;
  const auto bits = q.required<int>("bits");
  if (bits.valid && bits.value != 4 && bits.value != 8) {
    ctx.error(bits.loc, node->child_path("bits"), fmt::format("expected 4 or 8, got {}", bits.value));
  }
  out.bits = bits.value;
  const auto group = q.required<std::int64_t>("group_elements");
  if (group.valid && group.value < 1) ctx.error(group.loc, node->child_path("group_elements"), "expected >= 1");
  out.group_elements = group.value;
  const auto scale = q.required<std::int64_t>("scale_bytes");
  if (scale.valid && scale.value < 0) ctx.error(scale.loc, node->child_path("scale_bytes"), "expected >= 0");
  out.scale_bytes = scale.value;
  out.source = q.required<std::string>("source").value;
  if (ctx.error_count() != errors_before) return std::nullopt;
  return out;
}

namespace {

StageAlgorithm parse_algorithm(MapReader& r, bool tree_allowed) {
  const auto choice = r.choice("algorithm", {"ring", "all_to_all", "tree"}, "ring");
  const std::string& a = choice.value;
  if (a == "tree" && !tree_allowed) {
    r.node().context().error(
        choice.loc, r.node().child_path("algorithm"),
        "the tree algorithm runs all-reduce only (collective benchmarks with operation: all_reduce)");
  }
  return a == "all_to_all" ? StageAlgorithm::kAllToAll : a == "tree" ? StageAlgorithm::kTree : StageAlgorithm::kRing;
}

}  // namespace

std::optional<Partitioning> parse_partitioning(const Node& node, const LevelSizes& levels) {
  auto& ctx = node.context();
  const std::size_t errors_before = ctx.error_count();
  MapReader r(node);
  Partitioning p;
  std::optional<int> params_over, grads_over, optimizer_over;
  if (auto n = r.required_child("parameters", "a mapping with over, gather, quantization")) {
    MapReader pr(*n);
    params_over = parse_over(pr, *n, levels);
    if (params_over) {
      p.shard_ranks = *params_over;
      if (auto stages = parse_stages(pr, *n, "gather", *params_over, levels)) p.parameter_gather.stages = *stages;
    }
    if (auto q = parse_quantization(pr)) p.parameter_gather.quantization = *q;
  }
  if (auto n = r.child("secondary_parameters")) {
    MapReader sr(*n);
    if (auto over = parse_over(sr, *n, levels)) {
      p.secondary_ranks = *over;
      if (params_over && *over > *params_over) {
        ctx.error(n->location(), n->child_path("over"),
                  fmt::format("the secondary group ({} ranks) must lie inside the primary one ({} ranks)", *over,
                              *params_over));
      }
      if (auto stages = parse_stages(sr, *n, "gather", *over, levels)) p.secondary_gather.stages = *stages;
    }
    if (auto q = parse_quantization(sr)) p.secondary_gather.quantization = *q;
  }
  if (auto n = r.required_child("gradients", "a mapping with over, reduce, algorithm, quantization")) {
    MapReader gr(*n);
    grads_over = parse_over(gr, *n, levels);
    if (grads_over) {
      if (auto stages = parse_stages(gr, *n, "reduce", *grads_over, levels)) p.gradient_reduce.stages = *stages;
    }
    p.gradient_reduce.algorithm = parse_algorithm(gr, false);
    if (auto q = parse_quantization(gr)) p.gradient_reduce.quantization = *q;
  }
  if (auto n = r.required_child("optimizer", "a mapping with over")) {
    MapReader orr(*n);
    optimizer_over = parse_over(orr, *n, levels);
  }
  // Each rank updates the shard of the optimizer states it owns, from the gradients it reduced,
  // into the primary parameters it keeps: the three must share one group.
  if (params_over && grads_over && optimizer_over && (*params_over != *grads_over || *grads_over != *optimizer_over)) {
    ctx.error(node.location(), node.path(),
              fmt::format("parameters, gradients and optimizer must be sharded over the same group (got {}, {} and {} "
                          "ranks); only secondary_parameters may differ",
                          *params_over, *grads_over, *optimizer_over));
  }
  if (ctx.error_count() != errors_before) return std::nullopt;
  if (p.shard_ranks < levels.ranks) p.replica_reduce.stages = {Band{"replicas", p.shard_ranks, levels.ranks}};
  return p;
}

std::optional<CollectivePlan> parse_collective_plan(MapReader& r, const Node& node, const LevelSizes& levels,
                                                    bool all_reduce) {
  auto& ctx = node.context();
  const std::size_t errors_before = ctx.error_count();
  CollectivePlan plan;
  if (r.has("stages")) {
    if (auto stages = parse_stages(r, node, "stages", levels.ranks, levels)) plan.stages = *stages;
  }
  plan.algorithm = parse_algorithm(r, all_reduce);
  if (auto q = parse_quantization(r)) plan.quantization = *q;
  if (ctx.error_count() != errors_before) return std::nullopt;
  return plan;
}

CollectiveOptions parse_collective_options(MapReader& r) {
  CollectiveOptions out;
  auto node = r.child("collectives");
  if (!node) return out;
  MapReader c(*node);
  out.fidelity =
      c.choice("fidelity", {"flow", "analytic"}, "flow").value == "analytic" ? Fidelity::kAnalytic : Fidelity::kFlow;
  const auto steps = c.optional<int>("max_ring_steps", 0);
  if (steps.valid && steps.value < 0) {
    node->context().error(steps.loc, node->child_path("max_ring_steps"), "expected 0 (every step) or a positive count");
  }
  out.max_ring_steps = steps.value;
  const auto channels = c.optional<int>("channels", 1);
  if (channels.valid && sim::config::check_range(node->context(), channels.loc, node->child_path("channels"),
                                                 channels.value, ranges::kCollectiveChannels)) {
    out.channels = channels.value;
  }
  return out;
}

bool parse_all_ranks(MapReader& r) {
  return r.choice("simulate", {"representative_node", "all_ranks"}, "representative_node").value == "all_ranks";
}

}  // namespace offsim::models
