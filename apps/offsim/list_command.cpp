// offsim list [machines|devices|calibrations|models|strategies]: what a new experiment can name,
// read from the configs/ folder (found from here or a parent folder, as `offsim validate` finds
// its cases) and from the strategy table.
#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <set>
#include <stdexcept>

#include "apps/offsim/commands.hpp"
#include "models/experiment.hpp"
#include "models/transformer/model_parser.hpp"

namespace offsim::app {

namespace {

namespace fs = std::filesystem;

// configs/ here or in a parent folder.
fs::path configs_folder() {
  for (fs::path at = fs::current_path(); !at.empty(); at = at.parent_path()) {
    if (fs::is_directory(at / "configs" / "hardware")) return at / "configs";
    if (at == at.parent_path()) break;
  }
  throw std::invalid_argument(
      "configs/: no such folder here or in any parent folder; run `offsim list` from the offsim repository");
}

// The files of `dir` with extension `ext`, sorted.
std::vector<fs::path> files(const fs::path& dir, const std::string& ext) {
  std::vector<fs::path> out;
  if (!fs::is_directory(dir)) return out;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.is_regular_file() && e.path().extension() == ext) out.push_back(e.path());
  }
  std::sort(out.begin(), out.end());
  return out;
}

// The file a `!include` names (relative to `from`'s folder), or "" for another value.
std::string included(const YAML::Node& n, const fs::path& from, const fs::path& root) {
  if (!n.IsDefined() || n.Tag() != "!include" || !n.IsScalar()) return "";
  return fs::relative((from.parent_path() / n.Scalar()).lexically_normal(), root).string();
}

std::string scalar(const YAML::Node& n, const std::string& fallback = "") {
  return n.IsDefined() && n.IsScalar() ? n.Scalar() : fallback;
}

// A node file's GPUs: (count, device_kind) of its devices of kind gpu.
std::vector<std::pair<int, std::string>> gpus_of(const YAML::Node& node) {
  std::vector<std::pair<int, std::string>> out;
  if (!node.IsMap() || !node["devices"].IsDefined() || !node["devices"].IsSequence()) return out;
  for (const auto& d : node["devices"]) {
    if (!d.IsMap() || scalar(d["kind"]) != "gpu") continue;
    out.emplace_back(d["count"].IsDefined() ? d["count"].as<int>(1) : 1, scalar(d["device_kind"], "?"));
  }
  return out;
}

struct Machine {
  std::string file, name;
  int nodes = 1;
  std::vector<std::pair<int, std::string>> gpus;  // per node
  std::string device_table, collectives_table, host_table;
};

std::vector<Machine> read_machines(const fs::path& configs) {
  std::vector<Machine> out;
  const fs::path root = configs.parent_path();
  for (const auto& f : files(configs / "hardware", ".yaml")) {
    Machine m;
    m.file = fs::relative(f, root).string();
    const YAML::Node y = YAML::LoadFile(f.string());
    if (!y.IsMap()) continue;  // not a machine
    m.name = scalar(y["name"], f.stem().string());
    if (y["node"].IsDefined()) {
      m.nodes = y["nodes"].IsDefined() ? y["nodes"].as<int>(1) : 1;
      const std::string node_file = included(y["node"], f, configs / "hardware");
      m.gpus = gpus_of(node_file.empty() ? y["node"] : YAML::LoadFile((configs / "hardware" / node_file).string()));
    } else {
      m.gpus = gpus_of(y);
    }
    const YAML::Node cal = y["calibration"];
    if (cal.IsMap()) {
      m.device_table = included(cal["device"], f, root);
      m.collectives_table = cal["collectives"].IsDefined() && cal["collectives"].Tag() != "!include"
                                ? scalar(cal["collectives"])
                                : included(cal["collectives"], f, root);
      m.host_table = included(cal["host"], f, root);
    }
    out.push_back(m);
  }
  return out;
}

std::string gpu_text(const Machine& m) {
  std::vector<std::string> parts;
  for (const auto& [count, kind] : m.gpus) parts.push_back(fmt::format("{} x {}", count, kind));
  return parts.empty() ? "no GPUs" : fmt::format("{}", fmt::join(parts, ", "));
}

void list_machines(const fs::path& configs) {
  fmt::print(
      "machines (configs/hardware; hardware: !include ../hardware/FILE; the tables are those an experiment "
      "without calibration: takes):\n");
  for (const auto& m : read_machines(configs)) {
    fmt::print("  {:<22} {:<16} {} node{} of {}\n", fs::path(m.file).filename().string(), m.name, m.nodes,
               m.nodes == 1 ? "" : "s", gpu_text(m));
    fmt::print(
        "  {:<22} device table: {}; collectives: {}{}\n", "", m.device_table.empty() ? "none" : m.device_table,
        m.collectives_table.empty() ? "none (one GPU only, or give calibration.collectives)" : m.collectives_table,
        m.host_table.empty() ? "" : fmt::format("; host: {}", m.host_table));
  }
}

// A calibration file's role: device (peak and GEMM efficiency), collectives, host, or a part
// another table includes (a GEMM grid, kernel list).
std::string table_role(const YAML::Node& y) {
  if (!y.IsMap()) return "part";
  if (y["peak"].IsDefined()) return "device";
  if (y["collectives"].IsDefined()) return "collectives";
  if (y["cpu_work"].IsDefined() || y["copies"].IsDefined() || y["dispatch"].IsDefined()) return "host";
  if (y["zero3_host"].IsDefined() || y["all_gather"].IsDefined()) return "zero3 host";
  return "part";
}

void list_calibrations(const fs::path& configs) {
  fmt::print(
      "calibration tables (configs/calibration; calibration: {{device: !include ../calibration/FILE, "
      "collectives: ..., host: ...}}):\n");
  for (const auto& f : files(configs / "calibration", ".yaml")) {
    const YAML::Node y = YAML::LoadFile(f.string());
    fmt::print("  {:<32} {:<12} {}\n", f.filename().string(), table_role(y),
               y.IsMap() ? scalar(y["device_kind"], "-") : std::string("-"));
  }
}

void list_devices(const fs::path& configs) {
  // device kind -> the machines that have it and the device tables for it.
  std::map<std::string, std::set<std::string>> machines, tables;
  for (const auto& m : read_machines(configs)) {
    for (const auto& [count, kind] : m.gpus) machines[kind].insert(m.name);
  }
  for (const auto& f : files(configs / "calibration", ".yaml")) {
    const YAML::Node y = YAML::LoadFile(f.string());
    if (table_role(y) == "device") {
      const std::string kind = scalar(y["device_kind"], "?");
      tables[kind].insert(f.filename().string());
      (void)machines[kind];
    }
  }
  fmt::print("GPU device kinds (a machine's device_kind; its cost table's device_kind must match):\n");
  for (const auto& [kind, names] : machines) {
    fmt::print("  {:<12} machines: {:<32} device tables: {}\n", kind,
               names.empty() ? std::string("none") : fmt::format("{}", fmt::join(names, ", ")),
               tables[kind].empty() ? std::string("none") : fmt::format("{}", fmt::join(tables[kind], ", ")));
  }
}

void list_models(const fs::path& configs) {
  fmt::print(
      "models (configs/models: model: !include ../models/FILE; Hugging Face config.json files read as they "
      "are):\n");
  std::vector<fs::path> all = files(configs / "models", ".yaml");
  for (const auto& f : files(configs / "models" / "hf", ".json")) all.push_back(f);
  const fs::path root = configs.parent_path();
  for (const auto& f : all) {
    std::string what;
    try {
      sim::config::Context ctx;
      const auto m = models::parse_model(ctx.load_root(f));
      ctx.finish();
      if (m) {
        const models::ParameterCounts p = models::count_parameters(*m);
        what = fmt::format("{:.2f} B parameters, {} layers, hidden {}, context {}", static_cast<double>(p.total) / 1e9,
                           m->layers, m->hidden, m->seq);
      }
    } catch (const sim::config::ConfigError& e) {
      what = "does not load (offsim run names the problem)";
    }
    fmt::print("  {:<40} {}\n", fs::relative(f, configs / "models").string(), what);
  }
}

void list_strategies() {
  fmt::print("strategies (strategy: {{kind: KIND, ...}}; docs/strategies.md):\n");
  for (const auto& s : models::list_strategies()) fmt::print("  {:<16} {}\n", s.kind, s.description);
}

}  // namespace

int list_command(const std::string& what) {
  if (what == "strategies") {
    list_strategies();
    return 0;
  }
  const fs::path configs = configs_folder();
  const bool all = what.empty();
  const auto section = [&](const char* name, auto&& print) {
    if (!all && what != name) return;
    print();
    if (all) fmt::print("\n");
  };
  section("machines", [&] { list_machines(configs); });
  section("devices", [&] { list_devices(configs); });
  section("calibrations", [&] { list_calibrations(configs); });
  section("models", [&] { list_models(configs); });
  section("strategies", [&] { list_strategies(); });
  return 0;
}

}  // namespace offsim::app
