// configs/defaults.yaml, compiled in (CMakeLists.txt writes it into defaults_yaml.inc as a raw
// string literal) and read once.
#include "models/experiment/defaults.hpp"

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include <map>
#include <stdexcept>

namespace offsim::models::defaults {

namespace {

constexpr std::string_view kYaml =
#include "defaults_yaml.inc"
    ;

// configs/calibration/deepspeed-0.3-zero3-host.yaml, compiled in (CMakeLists.txt).
constexpr std::string_view kDeepSpeed03Host =
#include "deepspeed_0_3_zero3_host_yaml.inc"
    ;

struct Entry {
  std::string value;
  std::string source;
};

struct Table {
  std::map<std::string, Entry, std::less<>> entries;
  std::string deepspeed_version;
  std::vector<std::string> runtimes;
};

// Every mapping with a `value:` is one default, named by its path.
void collect(const YAML::Node& node, const std::string& path, Table& out) {
  if (!node.IsMap()) return;
  if (node["value"]) {
    out.entries[path] = {node["value"].Scalar(), node["source"] ? node["source"].Scalar() : std::string()};
    return;
  }
  for (const auto& kv : node)
    collect(kv.second, path.empty() ? kv.first.Scalar() : path + "." + kv.first.Scalar(), out);
}

const Table& table() {
  static const Table t = [] {
    Table out;
    const YAML::Node root = YAML::Load(std::string(kYaml));
    collect(root, "", out);
    out.deepspeed_version = root["deepspeed"]["version"].Scalar();
    for (const auto& kv : root["deepspeed_runtimes"]) out.runtimes.push_back(kv.first.Scalar());
    return out;
  }();
  return t;
}

const Entry& entry(std::string_view path) {
  const auto& entries = table().entries;
  const auto it = entries.find(path);
  if (it == entries.end()) throw std::logic_error(fmt::format("configs/defaults.yaml has no default {}", path));
  return it->second;
}

}  // namespace

const std::string& text(std::string_view path) {
  return entry(path).value;
}

std::int64_t integer(std::string_view path) {
  return std::stoll(entry(path).value);
}

bool flag(std::string_view path) {
  const std::string& v = entry(path).value;
  if (v != "true" && v != "false") throw std::logic_error(fmt::format("default {} is not a flag: {}", path, v));
  return v == "true";
}

const std::string& source(std::string_view path) {
  return entry(path).source;
}

const std::string& deepspeed_version() {
  return table().deepspeed_version;
}

const std::vector<std::string>& deepspeed_runtimes() {
  return table().runtimes;
}

const FetchHostCost& zero3_host_table(std::string_view name) {
  static const FetchHostCost ds03 = [] {
    const YAML::Node root = YAML::Load(std::string(kDeepSpeed03Host));
    FetchHostCost cost;
    cost.name = root["name"].Scalar();
    const auto launch = [&](const char* key) {
      return HostLaunchCost{sim::parse_time(root[key]["fixed"].Scalar()),
                            sim::parse_time(root[key]["per_rank"].Scalar())};
    };
    cost.all_gather = launch("all_gather");
    cost.reduce_scatter = launch("reduce_scatter");
    return cost;
  }();
  if (name == "deepspeed-0.3-zero3-host") return ds03;
  throw std::logic_error(fmt::format("no compiled-in stage-3 host table {}", name));
}

}  // namespace offsim::models::defaults
