// configs/frameworks/*.yaml, compiled in (CMakeLists.txt writes each into a raw string literal)
// and read once.
#include "models/transformer/framework.hpp"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <array>
#include <stdexcept>

namespace offsim::models {

namespace {

constexpr std::string_view kHfTransformersYaml =
#include "hf_transformers_yaml.inc"
    ;

std::vector<ChainKernel> read_chain(const YAML::Node& list) {
  std::vector<ChainKernel> out;
  for (const auto& k : list) {
    out.push_back({k["op"].as<std::string>(), k["bytes"].as<double>(),
                   k["class"] ? k["class"].as<std::string>() : std::string{}});
  }
  return out;
}

// The host classes a python_host line may name: host_dispatch.cpp costs each from the host
// table's dispatch (cost_model.hpp's kHostPythonClasses and two of kHostDispatchClasses).
const std::vector<std::string>& python_call_classes() {
  static const std::vector<std::string> classes{"module_call", "view", "elementwise", "linear"};
  return classes;
}

std::vector<PythonCalls> read_python_calls(const YAML::Node& list) {
  std::vector<PythonCalls> out;
  for (const auto& e : list) {
    PythonCalls c{e["what"].as<std::string>(), e["class"].as<std::string>(), e["count"].as<int>(),
                  e["backward_nodes"] ? e["backward_nodes"].as<int>() : 0};
    const auto& known = python_call_classes();
    if (std::find(known.begin(), known.end(), c.call_class) == known.end() || c.count <= 0 || c.backward_nodes < 0 ||
        c.backward_nodes > c.count) {
      throw std::logic_error("configs/frameworks: python_host line '" + c.what + "' has an unknown class or bad count");
    }
    out.push_back(std::move(c));
  }
  return out;
}

FrameworkProfile read_profile(Framework f, std::string_view yaml) {
  FrameworkProfile p;
  p.framework = f;
  const YAML::Node root = YAML::Load(std::string(yaml));
  if (root["framework"].as<std::string>() != framework_name(f)) {
    throw std::logic_error("configs/frameworks: profile names another framework");
  }
  p.source = root["source"].as<std::string>();
  for (const auto& kv : root["modules"]) {
    ModuleChain c;
    c.source = kv.second["source"].as<std::string>();
    c.forward = read_chain(kv.second["forward"]);
    c.backward = read_chain(kv.second["backward"]);
    p.modules.emplace_back(kv.first.as<std::string>(), std::move(c));
  }
  if (const auto proj = root["projections"]) {
    for (const auto& t : proj["separate_qkv"]) p.separate_qkv.push_back(t.as<std::string>());
    for (const auto& t : proj["separate_gate_up"]) p.separate_gate_up.push_back(t.as<std::string>());
  }
  if (const auto py = root["python_host"]) {
    p.python_host_source = py["source"].as<std::string>();
    for (const auto& fam : py["families"]) {
      PythonHostWork w;
      for (const auto& t : fam["model_types"]) w.model_types.push_back(t.as<std::string>());
      w.source = fam["source"].as<std::string>();
      w.layer = read_python_calls(fam["layer"]);
      w.embedding = read_python_calls(fam["embedding"]);
      w.head = read_python_calls(fam["head"]);
      p.python_host.push_back(std::move(w));
    }
  }
  if (const auto w = root["loss_workspace_bytes"]) {
    p.loss_workspace_forward = w["forward"].as<double>();
    p.loss_workspace_backward = w["backward"].as<double>();
  }
  return p;
}

double sum_bytes(const std::vector<ChainKernel>& chain) {
  double b = 0.0;
  for (const auto& k : chain) b += k.bytes;
  return b;
}

}  // namespace

const std::vector<std::string>& framework_names() {
  static const std::vector<std::string> names{"pytorch", "hf-transformers", "megatron-core", "deepspeed-megatron",
                                              "nemo",    "torchtitan"};
  return names;
}

std::string_view framework_name(Framework f) {
  return framework_names()[static_cast<std::size_t>(f)];
}

std::optional<Framework> framework_from_name(std::string_view name) {
  const auto& names = framework_names();
  const auto it = std::find(names.begin(), names.end(), name);
  if (it == names.end()) return std::nullopt;
  return static_cast<Framework>(it - names.begin());
}

double ModuleChain::forward_bytes() const {
  return sum_bytes(forward);
}
double ModuleChain::backward_bytes() const {
  return sum_bytes(backward);
}

int python_call_count(const std::vector<PythonCalls>& calls, std::string_view call_class) {
  int n = 0;
  for (const auto& c : calls) {
    if (call_class.empty() || c.call_class == call_class) n += c.count;
  }
  return n;
}

int python_backward_nodes(const std::vector<PythonCalls>& calls) {
  int n = 0;
  for (const auto& c : calls) n += c.backward_nodes;
  return n;
}

const PythonHostWork* FrameworkProfile::python_host_work(std::string_view model_type) const {
  if (model_type.empty()) return nullptr;
  for (const auto& w : python_host) {
    if (std::find(w.model_types.begin(), w.model_types.end(), model_type) != w.model_types.end()) return &w;
  }
  return nullptr;
}

const ModuleChain* FrameworkProfile::chain(std::string_view module) const {
  for (const auto& [name, c] : modules) {
    if (name == module) return &c;
  }
  return nullptr;
}

int FrameworkProfile::linears(std::string_view gemm, std::string_view model_type, bool gated) const {
  const auto listed = [&](const std::vector<std::string>& types) {
    return !model_type.empty() && std::find(types.begin(), types.end(), model_type) != types.end();
  };
  if (gemm == "qkv" && listed(separate_qkv)) return 3;
  if (gated && (gemm == "mlp_up" || gemm == "shared_mlp_up") && listed(separate_gate_up)) return 2;
  return 1;
}

const FrameworkProfile& framework_profile(Framework f) {
  // The generic frameworks' (empty) profiles, and Hugging Face's read from the compiled-in data
  // only when asked for: a process that runs no Hugging Face experiment does not parse it.
  static const std::array<FrameworkProfile, 6> generic = [] {
    std::array<FrameworkProfile, 6> out;
    for (std::size_t i = 0; i < out.size(); ++i) out[i].framework = static_cast<Framework>(i);
    return out;
  }();
  if (f == Framework::kHfTransformers) {
    static const FrameworkProfile hf = read_profile(Framework::kHfTransformers, kHfTransformersYaml);
    return hf;
  }
  return generic[static_cast<std::size_t>(f)];
}

std::vector<std::string> profile_kernel_classes() {
  std::vector<std::string> out;
  for (std::size_t i = 0; i < framework_names().size(); ++i) {
    for (const auto& [name, c] : framework_profile(static_cast<Framework>(i)).modules) {
      for (const auto* chain : {&c.forward, &c.backward}) {
        for (const auto& k : *chain) {
          if (!k.kernel_class.empty() && std::find(out.begin(), out.end(), k.kernel_class) == out.end()) {
            out.push_back(k.kernel_class);
          }
        }
      }
    }
  }
  return out;
}

const std::vector<std::string>& framework_kernel_classes() {
  // The list profile_kernel_classes() derives from the compiled-in profiles, in its order (the
  // unit test FrameworkProfile.KernelClassesAreThoseTheProfilesName holds them equal): reading a
  // calibration table needs only these names, and parsing the 21 KB profile for them cost every
  // process ~26 M instructions (3% of the shipped sweep) when no experiment runs its chains.
  static const std::vector<std::string> classes{"hf_rmsnorm", "hf_rotary", "hf_gelu_new", "dropout", "cross_entropy"};
  return classes;
}

}  // namespace offsim::models
