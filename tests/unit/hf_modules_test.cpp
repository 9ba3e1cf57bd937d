// Hugging Face transformers' eager modules timed alone on an H100 (bench/data/h100-hf-modules.csv,
// ../shared/data/h100-micro) against the model's cost of the same kernels: the chains of
// configs/frameworks/hf-transformers.yaml (RMSNorm, gelu_new, rotary, the fp32 loss) and the
// shipped H100 table; the CSV's generic rows (layer_norm, gelu, SiLU x mul) are read but not checked.
//
// Golden with explicit tolerances:
//  - rows of at least 2^24 elements (the GPU's work dominates): within kTolerance of the time;
//  - smaller rows: the host dispatches one Python operator per kernel (about 14 us forward,
//    20 us in autograd on the benchmark's host), which offsim does not model, so the model must
//    not come out above the measurement by more than kTolerance (a one-sided bound).
// The chains' class efficiencies were fitted on the large rows (bench/torch/fit_hf_modules.py:
// the median over each class), so this checks that one efficiency per class and direction holds
// across sizes, and that the generic kernels' classes (fitted on bench/torch/transformer_bench.py
// ops) hold for these modules: not an out-of-sample validation of the chains.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "models/cost/cost_model.hpp"
#include "models/experiment.hpp"
#include "models/transformer/framework.hpp"
#include "sim/config/config_reader.hpp"
#include "tests/unit/source_paths.hpp"

namespace offsim::models {
namespace {

constexpr double kTolerance = 0.15;
constexpr double kLargeRow = 16777216.0;  // 2^24 elements

CostModel h100() {
  sim::config::Context ctx;
  const auto root = ctx.load_root(std::string(OFFSIM_SOURCE_DIR) + "/configs/calibration/h100-sxm.yaml");
  auto d = parse_device_costs(root);
  EXPECT_TRUE(d.has_value());
  return CostModel(*d);
}

double seconds(sim::TimePs t) {
  return static_cast<double>(t.ps) * 1e-12;
}

// A chain's time on n elements in `rows` rows, one direction.
double chain_s(const CostModel& c, const std::vector<ChainKernel>& chain, double n, double rows, bool backward) {
  double s = 0.0;
  for (const auto& k : chain) {
    const double bytes = k.bytes > 0.0 ? k.bytes * n : 8.0 * rows;
    s += seconds(c.memory_bound_time(sim::Bytes{static_cast<std::int64_t>(bytes)}, k.kernel_class, backward));
  }
  return s;
}

double stream_s(const CostModel& c, double bytes) {
  return seconds(c.memory_bound_time(sim::Bytes{static_cast<std::int64_t>(bytes)}));
}

struct Row {
  std::string module, shape;
  double fwd = 0.0, bwd = 0.0, elements = 0.0;
};

std::vector<Row> read_rows() {
  std::ifstream in(std::string(OFFSIM_SOURCE_DIR) + "/bench/data/h100-hf-modules.csv");
  std::vector<Row> rows;
  std::string line;
  std::getline(in, line);  // header: module,shape,fwd_s,bwd_s,elements
  while (std::getline(in, line)) {
    Row r;
    std::string rest = line;
    if (rest.front() == '"') {  // a quoted module name holds a comma
      const auto end = rest.find('"', 1);
      r.module = rest.substr(1, end - 1);
      rest = rest.substr(end + 2);
    } else {
      r.module = rest.substr(0, rest.find(','));
      rest = rest.substr(rest.find(',') + 1);
    }
    std::stringstream fields(rest);
    std::string f;
    std::getline(fields, r.shape, ',');
    std::getline(fields, f, ',');
    r.fwd = std::stod(f);
    std::getline(fields, f, ',');
    r.bwd = std::stod(f);
    std::getline(fields, f, ',');
    r.elements = std::stod(f);
    rows.push_back(r);
  }
  return rows;
}

TEST(HfModules, EveryMeasuredModuleWithinItsToleranceOnTheH100) {
  const CostModel c = h100();
  const FrameworkProfile& hf = framework_profile(Framework::kHfTransformers);
  const auto rows = read_rows();
  ASSERT_EQ(rows.size(), 49u);
  int large = 0;
  for (const auto& r : rows) {
    const double n = r.elements;
    const double tokens = std::stod(r.shape.substr(0, r.shape.find('x')));
    double fwd = 0.0, bwd = 0.0;
    if (r.module == "LlamaRMSNorm" || r.module == "NewGELUActivation" || r.module == "cross_entropy(logits.float())") {
      const char* name = r.module == "LlamaRMSNorm" ? "rmsnorm" : r.module == "NewGELUActivation" ? "gelu_new" : "loss";
      const ModuleChain* chain = hf.chain(name);
      ASSERT_NE(chain, nullptr) << name;
      fwd = chain_s(c, chain->forward, n, tokens, false);
      bwd = chain_s(c, chain->backward, n, tokens, true);
    } else if (r.module == "apply_rotary_pos_emb(q,k)") {
      // The benchmark rotates q as both q and k and sums the two outputs (0 + q_embed, + k_embed:
      // 4 + 6 B per element), and backward adds the two chains' gradients of q (6 B).
      const ModuleChain* chain = hf.chain("rotary");
      ASSERT_NE(chain, nullptr);
      fwd = 2.0 * chain_s(c, chain->forward, n, tokens, false) + stream_s(c, 10.0 * n);
      bwd = 2.0 * chain_s(c, chain->backward, n, tokens, true) + stream_s(c, 6.0 * n);
    } else if (r.module == "layer_norm" || r.module == "gelu" || r.module == "silu_mul") {
      // The fused counterparts and SiLU x mul are the generic kernels' classes, fitted on
      // transformer_bench.py's ops; they are not checked here (the report of issue 36 lists
      // their disagreement with these rows: affine-free layer_norm, sliced SiLU x mul).
      continue;
    } else {
      ADD_FAILURE() << "unknown module " << r.module;
      continue;
    }
    for (const auto& [what, model, measured] :
         {std::tuple{"forward", fwd, r.fwd}, std::tuple{"backward", bwd, r.bwd}}) {
      const double error = model / measured - 1.0;
      const std::string row = fmt::format("{} {} {}: model {:.1f} us, measured {:.1f} us ({:+.1f}%)", r.module, r.shape,
                                          what, model * 1e6, measured * 1e6, 100.0 * error);
      if (n >= kLargeRow) {
        EXPECT_LE(std::abs(error), kTolerance) << row;
      } else {
        EXPECT_LE(error, kTolerance) << row;
      }
    }
    if (n >= kLargeRow) ++large;
  }
  EXPECT_EQ(large, 22);
}

}  // namespace
}  // namespace offsim::models

namespace offsim::models {
namespace {

// A Llama-shaped layer (t = 128 tokens, hidden h = q = kv = 1024, SwiGLU of f = 4096, RMSNorm,
// rotary, flash attention) under hf-transformers: the chains' bytes, written out.
//   forward:  2 RMSNorms 2 x (36 t h + 2 row kernels x 8 t), rotary 20 t (q + kv), the attention
//             output's copy 4 t q, 2 residual adds 2 x 6 t h, SwiGLU 10 t f;
//   backward: 2 x (92 t h + 1 row kernel x 8 t), rotary 30 t (q + kv), copy 4 t q, adds 12 t h,
//             SwiGLU 18 t f.
// The generic list has one norm kernel (4 t h, 6 t h), rotary 20 / 20 and no copy.
TEST(HfModules, LlamaLayerKernelsAreTheChainsBytes) {
  ModelSpec m;
  m.layers = 1;
  m.hidden = 1024;
  m.heads = m.kv_heads = 8;
  m.ffn = 4096;
  m.vocab = 32000;
  m.seq = 128;
  m.ffn_kind = FfnKind::kSwiglu;
  m.norm = NormKind::kRmsNorm;
  m.position = PositionKind::kRope;
  m.linear_bias = false;
  const double t = 128.0, h = 1024.0, f = 4096.0;
  const auto sum = [](const std::vector<ElementwiseKernel>& k, bool backward) {
    double s = 0.0;
    for (const auto& x : k) s += backward ? x.backward_bytes : x.forward_bytes;
    return s;
  };
  const auto hf = layer_elementwise_kernels(m, 1, 1, AttentionKernels::kFlash, false, 1, Framework::kHfTransformers);
  EXPECT_DOUBLE_EQ(sum(hf, false), 2 * (36 * t * h + 2 * 8 * t) + 20 * t * 2 * h + 4 * t * h + 12 * t * h + 10 * t * f);
  EXPECT_DOUBLE_EQ(sum(hf, true), 2 * (92 * t * h + 8 * t) + 30 * t * 2 * h + 4 * t * h + 12 * t * h + 18 * t * f);
  const auto generic = layer_elementwise_kernels(m, 1, 1, AttentionKernels::kFlash);
  EXPECT_DOUBLE_EQ(sum(generic, false), 2 * 4 * t * h + 20 * t * 2 * h + 12 * t * h + 10 * t * f);
  // Megatron's frameworks run the generic list.
  const auto megatron =
      layer_elementwise_kernels(m, 1, 1, AttentionKernels::kFlash, false, 1, Framework::kMegatronCore);
  EXPECT_DOUBLE_EQ(sum(megatron, false), sum(generic, false));
}

// GPT-2's config (activation_function gelu_new, resid/attn/embd_pdrop 0.1): gelu_new's chain
// (36 / 56 B per element of the MLP width) and two hidden dropouts (5 / 5 B each) under
// hf-transformers; the generic GeLU is one kernel (4 / 6).
TEST(HfModules, Gpt2GeluNewIsAChainOfEagerKernels) {
  ModelSpec m;
  m.layers = 1;
  m.hidden = 768;
  m.heads = m.kv_heads = 12;
  m.ffn = 3072;
  m.vocab = 50257;
  m.seq = 64;
  m.activation = Activation::kGeluNew;
  m.dropout = m.hidden_dropout = m.attention_dropout = m.embedding_dropout = true;
  const double t = 64.0, h = 768.0, f = 3072.0;
  double mlp = 0.0, dropout = 0.0;
  for (const auto& k :
       layer_elementwise_kernels(m, 1, 1, AttentionKernels::kFlash, false, 1, Framework::kHfTransformers)) {
    if (std::string_view(k.kernel) == "hf_gelu_new") mlp += k.forward_bytes + k.backward_bytes;
    if (std::string_view(k.kernel) == "dropout") dropout += k.forward_bytes;
  }
  EXPECT_DOUBLE_EQ(mlp, (36 + 56) * t * f);
  EXPECT_DOUBLE_EQ(dropout, 2 * 5 * t * h);
}

// training.framework left out: a Hugging Face config.json under data_parallel trains with
// transformers (named among the defaults applied); an offsim model file with plain PyTorch.
TEST(HfModules, FrameworkDefaultFollowsTheModelFileAndStrategy) {
  const auto dir = testing::scratch_folder("offsim-hf-modules-test");
  const auto write = [&](const std::string& name, const std::string& model) {
    const auto file = dir / (name + ".yaml");
    std::ofstream(file) << fmt::format(
        "name: {0}\nhardware: !include {1}/configs/hardware/dgx-h100.yaml\nmodel: !include {1}/{2}\n"
        "training: {{micro_batch: 1, seq: 1024}}\nstrategy: {{kind: data_parallel, dp: 1}}\n",
        name, OFFSIM_SOURCE_DIR, model);
    return file;
  };
  const auto hf = load_experiment(write("hf", "tests/data/real-inputs/hf/qwen2.5-0.5b-instruct.config.json"), {});
  EXPECT_EQ(hf.training.framework, Framework::kHfTransformers);
  bool named = false;
  for (const auto& d : hf.defaults_applied) named = named || d.rfind("training.framework=hf-transformers", 0) == 0;
  EXPECT_TRUE(named);
  const auto offsim = load_experiment(write("offsim", "configs/models/gpt3-1.3b.yaml"), {});
  EXPECT_EQ(offsim.training.framework, Framework::kPyTorch);
}

}  // namespace
}  // namespace offsim::models

// framework_kernel_classes() is a compiled list so that reading a calibration table does not parse
// the profiles; it must be exactly what the profiles' chains name, in their order (the order a
// table's framework_kernels entries are read, and so the order of their errors).
TEST(FrameworkProfile, KernelClassesAreThoseTheProfilesName) {
  EXPECT_EQ(offsim::models::framework_kernel_classes(), offsim::models::profile_kernel_classes());
}
