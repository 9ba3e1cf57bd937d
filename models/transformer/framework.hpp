#pragma once
// Training frameworks and the kernels each launches where offsim's generic PyTorch kernel list
// (layer_elementwise_kernels) does not describe them: `training.framework` picks one. The chains
// of eager operators are data (configs/frameworks/<name>.yaml, compiled in), each citing the
// framework's source; the cost model streams every kernel of a chain at the device's measured
// efficiency for its class, never below the launch floor (layer_kernels.cpp).
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace offsim::models {

enum class Framework {
  /// Plain PyTorch modules (F.layer_norm, F.gelu, F.scaled_dot_product_attention), as
  /// bench/torch/transformer_bench.py and nanoGPT-style code run them: the generic kernel list.
  kPyTorch,
  /// Hugging Face transformers' model classes in eager autograd with SDPA attention: the chains of
  /// configs/frameworks/hf-transformers.yaml replace the generic norm, rotary, gelu_new,
  /// embedding-dropout and loss kernels.
  kHfTransformers,
  /// Megatron-Core, Megatron-DeepSpeed and NeMo (Megatron-Core underneath): fused norms (apex /
  /// Transformer Engine), the generic list; their fused softmax is `training.fused_softmax`.
  kMegatronCore,
  kDeepSpeedMegatron,
  kNemo,
  /// torchtitan (pytorch/torchtitan): Llama blocks under FSDP2 (fully_shard) and DTensor tensor
  /// parallelism, its defaults from configs/defaults.yaml's torchtitan section
  /// (models/experiment/torchtitan_profile.hpp). Its blocks run as torch.compile fuses them (the
  /// published runs compile): the generic kernel list; attention is PyTorch's SDPA with the
  /// FlashAttention backend first (torchtitan/models/attention.py, ScaledDotProductAttention).
  kTorchtitan,
};

/// The names `training.framework` takes, in Framework order.
[[nodiscard]] const std::vector<std::string>& framework_names();
[[nodiscard]] std::string_view framework_name(Framework f);
[[nodiscard]] std::optional<Framework> framework_from_name(std::string_view name);

/// One kernel of a module's chain: the HBM bytes it moves per element of the module's input, and
/// the efficiency class it streams at (empty: the device's plain streaming rate). bytes 0: a
/// kernel on one value per row, which costs the launch floor.
struct ChainKernel {
  std::string op;
  double bytes = 0.0;
  std::string kernel_class;
};

struct ModuleChain {
  std::string source;
  std::vector<ChainKernel> forward, backward;
  [[nodiscard]] double forward_bytes() const;
  [[nodiscard]] double backward_bytes() const;
};

/// One line of a framework's Python-level host work (configs/frameworks/<name>.yaml, python_host):
/// `count` calls of one host class ("module_call", "view", "elementwise", "linear"), and the
/// autograd nodes they leave for backward (counted; host_dispatch.cpp does not cost them).
struct PythonCalls {
  std::string what;
  std::string call_class;
  int count = 0;
  int backward_nodes = 0;
};

/// A model family's Python around the operators: per decoder layer, and once per forward for the
/// embedding (model entry, position ids, rotary table) and the head (final norm, lm_head, loss).
struct PythonHostWork {
  std::vector<std::string> model_types;  // config.json model_type values it describes
  std::string source;
  std::vector<PythonCalls> layer, embedding, head;
};

/// The sum of `calls`' counts of class `call_class` (empty: of every class), and of their nodes.
[[nodiscard]] int python_call_count(const std::vector<PythonCalls>& calls, std::string_view call_class = {});
[[nodiscard]] int python_backward_nodes(const std::vector<PythonCalls>& calls);

/// A framework's kernel chains by module ("rmsnorm", "rotary", "gelu_new", "attention_output",
/// "embedding_dropout", "loss"), and the loss's fp32 workspace per logit.
struct FrameworkProfile {
  Framework framework = Framework::kPyTorch;
  std::string source;
  std::vector<std::pair<std::string, ModuleChain>> modules;
  double loss_workspace_forward = 0.0, loss_workspace_backward = 0.0;  // bytes per logit; 0: generic
  // config.json model_types whose Q, K and V (gate and up) projections are separate nn.Linear
  // modules where offsim runs one fused GEMM: the host dispatches each (host_dispatch.cpp).
  std::vector<std::string> separate_qkv, separate_gate_up;
  // The Python-level host work by model family (hf-transformers' python_host).
  std::string python_host_source;
  std::vector<PythonHostWork> python_host;
  /// The Python-level host work of a model of config.json `model_type`, or nullptr (an offsim
  /// model file, a family not counted, a framework without such data).
  [[nodiscard]] const PythonHostWork* python_host_work(std::string_view model_type) const;
  /// The module's chain, or nullptr when the framework runs the generic kernels for it.
  [[nodiscard]] const ModuleChain* chain(std::string_view module) const;
  /// The eager linears behind the layer GEMM `gemm` ("qkv", "mlp_up", ...) of a model of
  /// config.json `model_type` (empty: an offsim model file): 3 for separate Q, K, V, 2 for
  /// separate gate and up projections, else 1.
  [[nodiscard]] int linears(std::string_view gemm, std::string_view model_type, bool gated) const;
};

/// The profile of `f` (generic frameworks: no chains). Read once from the compiled-in data.
[[nodiscard]] const FrameworkProfile& framework_profile(Framework f);

/// The efficiency classes the framework chains name (what a calibration table's
/// memory_bound.framework_kernels may hold).
/// A compiled list, equal to profile_kernel_classes() (a unit test holds them equal), so that
/// reading a calibration table does not parse the framework profiles.
[[nodiscard]] const std::vector<std::string>& framework_kernel_classes();
/// The efficiency classes the compiled-in profiles' chains name, in first-named order, read
/// from the profiles (parses them).
[[nodiscard]] std::vector<std::string> profile_kernel_classes();

}  // namespace offsim::models
