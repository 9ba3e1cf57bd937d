// `offsim diff A B`: two runs side by side (their summary.json, or the --out folders holding
// them), with the change in every numeric figure. The effective configurations are compared too,
// so the table starts with what was changed between the runs.
#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include <cmath>
#include <filesystem>
#include <map>
#include <optional>
#include <stdexcept>

#include "apps/offsim/commands.hpp"
#include "sim/report/text_table.hpp"

namespace offsim::app {

namespace {

// summary.json is JSON, a subset of YAML: yaml-cpp reads it.
YAML::Node load_summary(const std::string& path) {
  std::filesystem::path p(path);
  if (std::filesystem::is_directory(p)) p /= "summary.json";
  if (!std::filesystem::exists(p)) {
    throw std::invalid_argument(
        fmt::format("{}: no such file (give a summary.json or a run --out folder)", p.string()));
  }
  return YAML::LoadFile(p.string());
}

// Scalar leaves under `node` as dotted paths; lists (approximations, reasons, warnings) skipped.
void flatten(const YAML::Node& node, const std::string& prefix, std::map<std::string, std::string>& out) {
  if (node.IsMap()) {
    for (const auto& kv : node) {
      const std::string key = kv.first.as<std::string>();
      flatten(kv.second, prefix.empty() ? key : prefix + "." + key, out);
    }
  } else if (node.IsScalar()) {
    out[prefix] = node.as<std::string>();
  }
}

std::optional<double> number(const std::string& s) {
  try {
    std::size_t used = 0;
    const double v = std::stod(s, &used);
    if (used == s.size()) return v;
  } catch (const std::exception&) {
  }
  return std::nullopt;
}

}  // namespace

int diff_command(const std::string& a, const std::string& b) {
  std::map<std::string, std::string> left, right;
  flatten(load_summary(a), "", left);
  flatten(load_summary(b), "", right);
  std::vector<std::string> keys;
  for (const auto& [k, v] : left) keys.push_back(k);
  for (const auto& [k, v] : right) {
    if (!left.contains(k)) keys.push_back(k);
  }
  // Configuration changes first (what differs between the runs), then the figures.
  sim::report::TextTable config({"changed setting", "A", "B"});
  sim::report::TextTable figures({"figure", "A", "B", "change"});
  for (const auto& k : keys) {
    if (k.starts_with("offsim.")) continue;
    const std::string va = left.contains(k) ? left[k] : "-";
    const std::string vb = right.contains(k) ? right[k] : "-";
    if (k.starts_with("config.")) {
      if (va != vb) config.add_row({k.substr(7), va, vb});
      continue;
    }
    const auto na = number(va);
    const auto nb = number(vb);
    if (!na || !nb) {
      if (va != vb) figures.add_row({k, va, vb, "changed"});
      continue;
    }
    if (*na == 0.0 && *nb == 0.0) continue;  // idle links and empty pools in both runs
    std::string change = "=";
    if (*na != *nb) change = *na != 0.0 ? fmt::format("{:+.2f}%", 100.0 * (*nb - *na) / std::fabs(*na)) : "new";
    figures.add_row({k, fmt::format("{:.6g}", *na), fmt::format("{:.6g}", *nb), change});
  }
  fmt::print("A: {}\nB: {}\n\n{}\n{}", a, b, config.str(), figures.str());
  return 0;
}

}  // namespace offsim::app
