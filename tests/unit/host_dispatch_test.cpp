// Host dispatch of eager frameworks (models/strategies/host_dispatch.hpp): the recurrence in closed
// form, and its effect on a whole run.
//
// With kernel i of GPU time g_i issued after host time d_i:
//   h_i = h_{i-1} + d_i,  e_i = max(e_{i-1}, h_i) + g_i,  h_0 = e_0 = 0.
// (1) n equal kernels with g <= d: the GPU waits for every issue, e_n = n d + g.
// (2) n equal kernels with g >= d: only the first issue is waited for, e_n = d + n g.
// (3) k small kernels (g <= d), then one of GPU time G: the host issues it at (k + 1) d, after
//     the small ones end (k d + g <= (k + 1) d): e = (k + 1) d + G.
// (4) one kernel of G >= k d, then k small kernels (g <= d): the host runs ahead during the long
//     kernel, the small ones queue behind it: e = d + G + k g.
// (5) no host cost: e_n = sum of g_i.
// (6) two segments run back to back equal one run over their concatenation.
#include <gtest/gtest.h>

#include <fmt/format.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "models/experiment.hpp"
#include "models/strategies/host_dispatch.hpp"
#include "models/transformer/framework.hpp"
#include "models/validation.hpp"
#include "tests/unit/source_paths.hpp"

namespace offsim::models {
namespace {

using sim::TimePs;
namespace fs = std::filesystem;

TimePs us(double v) {
  return TimePs{static_cast<std::int64_t>(v * 1e6)};
}

std::vector<DispatchedKernel> repeat(int n, TimePs gpu, TimePs host) {
  return std::vector<DispatchedKernel>(static_cast<std::size_t>(n), DispatchedKernel{gpu, host});
}

TEST(HostDispatch, SmallKernelsCostTheHostsTime) {
  EXPECT_EQ(dispatched_time(repeat(100, us(4), us(17))), us(100 * 17 + 4));  // (1)
}

TEST(HostDispatch, LongKernelsCostTheGpusTime) {
  EXPECT_EQ(dispatched_time(repeat(100, us(50), us(17))), us(17 + 100 * 50));  // (2)
}

TEST(HostDispatch, ALongKernelAfterSmallOnesWaitsForItsIssue) {
  auto seq = repeat(8, us(4), us(17));
  seq.push_back({us(1000), us(17)});
  EXPECT_EQ(dispatched_time(seq), us(9 * 17 + 1000));  // (3)
}

TEST(HostDispatch, TheHostRunsAheadDuringALongKernel) {
  std::vector<DispatchedKernel> seq{{us(1000), us(17)}};
  const auto small = repeat(8, us(4), us(17));
  seq.insert(seq.end(), small.begin(), small.end());
  EXPECT_EQ(dispatched_time(seq), us(17 + 1000 + 8 * 4));  // (4)
}

TEST(HostDispatch, WithoutHostCostTheKernelsAddUp) {
  EXPECT_EQ(dispatched_time({{us(3), TimePs{0}}, {us(5), TimePs{0}}, {us(7), TimePs{0}}}), us(15));  // (5)
}

TEST(HostDispatch, SegmentsChainAsOneStream) {
  const std::vector<DispatchedKernel> a{{us(1000), us(17)}, {us(4), us(17)}};
  const auto b = repeat(20, us(4), us(17));
  DispatchStream s;
  s.run(a);
  std::vector<DispatchedKernel> all = a;
  all.insert(all.end(), b.begin(), b.end());
  EXPECT_EQ(s.run(b), dispatched_time(all));  // (6)
  EXPECT_EQ(s.host_time(), us(22 * 17));
}

// A run with a dispatch table never comes out faster than without one, and a small model on one
// GPU (the tiny test model: every kernel far below 17 us) becomes host-bound: its forward is at
// least its operators' host time (with 2 layers of at least 5 GEMM or SDPA operators each, at
// least 10 x 46 us).
TEST(HostDispatch, AHostTableSlowsASmallModelToItsDispatch) {
  const fs::path dir = fs::temp_directory_path() / fmt::format("offsim-dispatch-{}", ::getpid());
  fs::create_directories(dir);
  const fs::path data = fs::path(OFFSIM_SOURCE_DIR) / "tests/data";
  for (const char* f : {"two-gpu-node.yaml", "test-gpu-costs.yaml", "test-collectives.yaml", "tiny-gpt.yaml"}) {
    fs::copy_file(data / f, dir / f, fs::copy_options::overwrite_existing);
  }
  std::ofstream(dir / "host.yaml") << "device_kind: test-host\nsource: s\ndispatch:\n  source: s\n"
                                      "  forward: {linear: \"46 us\", layer_norm: \"21 us\", softmax: \"27 us\", "
                                      "elementwise: \"17 us\"}\n  backward_node: \"17 us\"\n";
  const auto run = [&](bool host) {
    std::ofstream(dir / "e.yaml") << fmt::format(
        "name: e\nhardware: !include two-gpu-node.yaml\ncalibration:\n  device: !include "
        "test-gpu-costs.yaml\n  collectives: !include test-collectives.yaml\n{0}model: !include "
        "tiny-gpt.yaml\ntraining: {{micro_batch: 1, grad_accum: 1, precision: bf16, recompute: none, "
        "flash_attention: false}}\nstrategy: {{kind: data_parallel, zero_stage: 0, dp: 1, devices: [gpu0]}}\n",
        host ? "  host: !include host.yaml\n" : "");
    return run_experiment(load_experiment(dir / "e.yaml", {}));
  };
  const ExperimentResult plain = run(false);
  const ExperimentResult dispatched = run(true);
  const double f0 = plain.phase_seconds("forward"), f1 = dispatched.phase_seconds("forward");
  const double b0 = plain.phase_seconds("backward"), b1 = dispatched.phase_seconds("backward");
  EXPECT_GE(f1, f0);
  EXPECT_GE(b1, b0);
  EXPECT_GE(f1, 10 * 46e-6) << f0 << " -> " << f1;
  fs::remove_all(dir);
}

// Hugging Face's separate projections (configs/frameworks/hf-transformers.yaml, projections): the
// eager linears behind offsim's fused QKV and gate/up GEMMs, one dispatched operator each.
TEST(HostDispatch, HuggingFaceProjectionsAreSeparateLinears) {
  const FrameworkProfile& hf = framework_profile(Framework::kHfTransformers);
  EXPECT_EQ(hf.linears("qkv", "llama", true), 3);     // q_proj, k_proj, v_proj
  EXPECT_EQ(hf.linears("mlp_up", "llama", true), 2);  // gate_proj, up_proj
  EXPECT_EQ(hf.linears("mlp_down", "llama", true), 1);
  EXPECT_EQ(hf.linears("qkv", "phi", false), 3);
  EXPECT_EQ(hf.linears("mlp_up", "phi", false), 1);  // fc1
  EXPECT_EQ(hf.linears("qkv", "gpt2", false), 1);    // c_attn
  EXPECT_EQ(hf.linears("qkv", "phi3", true), 1);     // qkv_proj
  EXPECT_EQ(hf.linears("mlp_up", "phi3", true), 1);  // gate_up_proj
  EXPECT_EQ(hf.linears("qkv", "", false), 1);        // an offsim model file
}

// transformers' Python around the operators (configs/frameworks/hf-transformers.yaml, python_host)
// as counted from modeling_llama.py: per decoder layer 13 module calls (the layer, two norms,
// self_attn, q/k/v/o_proj, mlp, gate/up/down_proj, act_fn) and 14 views (q, k, v view + transpose:
// 6; cos, sin unsqueeze: 2; rotate_half's two slices of q and of k: 4; SDPA's output transpose and
// the reshape before o_proj: 2), 12 of which leave an autograd node (cos and sin carry none).
TEST(HostDispatch, LlamaPythonCallsAreCountedFromTheSource) {
  const PythonHostWork* llama = framework_profile(Framework::kHfTransformers).python_host_work("llama");
  ASSERT_NE(llama, nullptr);
  EXPECT_EQ(python_call_count(llama->layer, "module_call"), 13);
  EXPECT_EQ(python_call_count(llama->layer, "view"), 14);
  EXPECT_EQ(python_call_count(llama->layer), 27);
  EXPECT_EQ(python_backward_nodes(llama->layer), 12);
  EXPECT_EQ(framework_profile(Framework::kHfTransformers).python_host_work("qwen2"), llama);  // same code
  EXPECT_EQ(framework_profile(Framework::kHfTransformers).python_host_work(""), nullptr);     // an offsim model file
  EXPECT_EQ(framework_profile(Framework::kPyTorch).python_host_work("llama"), nullptr);
}

// A tiny Llama (2 layers, hidden 64, 16 tokens: every kernel far below its dispatch cost, so the
// host sets every phase's end) with and without the host table's `python:` costs. With module call
// c = 2 us, view v = 4 us, elementwise e = 17 us, linear l = 46 us, the Python-level work is
//   per layer  L = 13 c + 14 v                   = 26 + 56           =  82 us
//   embedding  E = 4 c + 5 v + 9 e + 1 l         = 8 + 20 + 153 + 46 = 227 us
//   head       H = 2 c + 4 v + 2 e               = 4 + 16 + 34       =  54 us
// (python_host's llama lines). It is host time only: on a host-bound stream it delays the last
// kernel's issue by exactly its sum, so
//   forward  grows by 2 L + E + H = 445 us,
//   backward grows by 0 (view nodes are not costed), and by 2 L = 164 us under full recomputation
//   (torch.utils.checkpoint runs each layer's forward, its Python included, again in backward).
TEST(HostDispatch, PythonHostWorkAddsItsMeasuredCosts) {
  const fs::path dir = fs::temp_directory_path() / fmt::format("offsim-python-host-{}", ::getpid());
  fs::create_directories(dir);
  const fs::path data = fs::path(OFFSIM_SOURCE_DIR) / "tests/data";
  for (const char* f : {"two-gpu-node.yaml", "test-gpu-costs.yaml", "test-collectives.yaml"}) {
    fs::copy_file(data / f, dir / f, fs::copy_options::overwrite_existing);
  }
  std::ofstream(dir / "tiny-llama.config.json")
      << R"({"model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": 64, )"
         R"("intermediate_size": 128, "num_attention_heads": 4, "num_key_value_heads": 4, "num_hidden_layers": 2, )"
         R"("vocab_size": 256, "max_position_embeddings": 128, "rms_norm_eps": 1e-6, "hidden_act": "silu", )"
         R"("tie_word_embeddings": false, "torch_dtype": "bfloat16"})";
  const std::string table =
      "device_kind: test-host\nsource: s\ndispatch:\n  source: s\n"
      "  forward: {linear: \"46 us\", layer_norm: \"21 us\", softmax: \"27 us\", elementwise: \"17 us\"}\n"
      "  backward_node: \"17 us\"\n";
  std::ofstream(dir / "host.yaml") << table;
  std::ofstream(dir / "host-python.yaml") << table << "  python: {source: s, module_call: \"2 us\", view: \"4 us\"}\n";
  const auto run = [&](const char* host, const char* recompute) {
    std::ofstream(dir / "e.yaml") << fmt::format(
        "name: e\nhardware: !include two-gpu-node.yaml\ncalibration:\n  device: !include test-gpu-costs.yaml\n"
        "  collectives: !include test-collectives.yaml\n  host: !include {}\nmodel: !include "
        "tiny-llama.config.json\ntraining: {{micro_batch: 1, seq: 16, grad_accum: 1, precision: bf16, recompute: {}, "
        "flash_attention: true}}\nstrategy: {{kind: data_parallel, zero_stage: 0, dp: 1, devices: [gpu0]}}\n",
        host, recompute);
    return run_experiment(load_experiment(dir / "e.yaml", {}));
  };
  for (const char* recompute : {"none", "full"}) {
    const ExperimentResult plain = run("host.yaml", recompute);
    const ExperimentResult python = run("host-python.yaml", recompute);
    const double L = 13 * 2e-6 + 14 * 4e-6, E = 4 * 2e-6 + 5 * 4e-6 + 9 * 17e-6 + 46e-6,
                 H = 2 * 2e-6 + 4 * 4e-6 + 2 * 17e-6;
    const bool full = std::string(recompute) == "full";
    EXPECT_NEAR(python.phase_seconds("forward") - plain.phase_seconds("forward"), 2 * L + E + H, 1e-9) << recompute;
    EXPECT_NEAR(python.phase_seconds("backward") - plain.phase_seconds("backward"), full ? 2 * L : 0.0, 1e-9)
        << recompute;
    // The report names the cost per layer.
    bool named = false;
    for (const auto& a : python.approximations) {
      named = named || a.find("13 module calls x 2.00 us + 14 views x 4.00 us = 82.0 us") != std::string::npos;
    }
    EXPECT_TRUE(named) << recompute;
  }
  fs::remove_all(dir);
}

// A feasibility claim holds when the run's verdict is the measured one (a case of claims only,
// without metrics).
TEST(HostDispatch, FeasibilityClaimsCompareTheVerdict) {
  const fs::path dir = fs::temp_directory_path() / fmt::format("offsim-feasible-{}", ::getpid());
  fs::create_directories(dir);
  const std::string experiment = std::string(OFFSIM_SOURCE_DIR) + "/tests/data/tiny-dp2.yaml";
  for (const char* measured : {"true", "false"}) {
    std::ofstream(dir / fmt::format("{}.yaml", measured)) << fmt::format(
        "name: {0}\ngroup: g\nexperiment: {1}\nmeasured_source: s\ninputs: i\nuncertain: u\ntolerance: 0.15\n"
        "claims:\n  - {{name: feasible, measured: {0}, source: s}}\n",
        measured, experiment);
  }
  const ValidationReport report = validate(dir);
  ASSERT_EQ(report.claims.size(), 2u);
  EXPECT_FALSE(report.claims[0].holds);  // false.yaml: the tiny run fits
  EXPECT_TRUE(report.claims[1].holds);   // true.yaml
  EXPECT_FALSE(report.passed);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace offsim::models
