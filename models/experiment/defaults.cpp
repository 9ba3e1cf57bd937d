// configs/defaults.yaml, compiled in: apps/defaults_table parses it at build time into
// defaults_table.inc (CMakeLists.txt), read here once into a map.
#include "models/experiment/defaults.hpp"

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include <map>
#include <stdexcept>
#include <string_view>

namespace offsim::models::defaults {

namespace {

// One default: its key path, value and source, as the YAML gives them.
struct DefaultEntry {
  std::string_view path;
  std::string_view value;
  std::string_view source;
};

#include "defaults_table.inc"

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

const Table& table() {
  static const Table t = [] {
    Table out;
    for (const DefaultEntry& e : kEntries) {
      out.entries[std::string(e.path)] = {std::string(e.value), std::string(e.source)};
    }
    out.deepspeed_version = std::string(kDeepSpeedVersion);
    for (const std::string_view runtime : kDeepSpeedRuntimes) out.runtimes.emplace_back(runtime);
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
