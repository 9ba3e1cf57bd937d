#include "models/strategies/host_dispatch.hpp"

#include <fmt/format.h>
#include <algorithm>
#include <cmath>

#include "models/strategies/layer_kernels.hpp"
#include "models/strategies/phases/iteration.hpp"
#include "models/transformer/framework.hpp"

namespace offsim::models {

using sim::Bytes;
using sim::TimePs;

sim::TimePs DispatchStream::run(const std::vector<DispatchedKernel>& kernels) {
  for (const auto& k : kernels) {
    host_ += k.host;                       // h_i = h_{i-1} + d_i
    gpu_ = std::max(gpu_, host_) + k.gpu;  // e_i = max(e_{i-1}, h_i) + g_i
  }
  return gpu_;
}

sim::TimePs dispatched_time(const std::vector<DispatchedKernel>& kernels) {
  DispatchStream s;
  return s.run(kernels);
}

namespace {

TimePs scaled(TimePs t, double f) {
  return TimePs{std::llround(static_cast<double>(t.ps) * f)};
}

// One segment of a stream (the embedding, a layer, the head), forward and backward: the kernels
// with their host costs, and the forward operators (one autograd node each in backward).
struct Segment {
  std::vector<DispatchedKernel> forward, backward;
  int forward_ops = 0;
  void op(TimePs gpu, TimePs host) {
    forward.push_back({gpu, host});
    ++forward_ops;
  }
  // Host time without a kernel of its own (the framework's Python around the operators): it
  // delays the next kernel's issue, and leaves no backward node here.
  void host_only(TimePs host) {
    if (host > TimePs{0}) forward.push_back({TimePs{0}, host});
  }
  // The backward nodes' host time (one per forward operator) over the backward kernels, and what
  // the kernels leave of the phase's time (`fwd_total`, `bwd_total`: FP8 casts, amax updates) as a
  // kernel of its own without host cost, so the GPU time adds up to the undispatched one.
  void finish(const HostDispatch& d, TimePs fwd_total, TimePs bwd_total) {
    const auto rest = [](std::vector<DispatchedKernel>& list, TimePs total) {
      TimePs sum{0};
      for (const auto& k : list) sum += k.gpu;
      if (total > sum) list.push_back({total - sum, TimePs{0}});
    };
    rest(forward, fwd_total);
    rest(backward, bwd_total);
    if (backward.empty()) return;
    const TimePs per = scaled(d.backward_node, static_cast<double>(forward_ops) / static_cast<double>(backward.size()));
    for (auto& k : backward) k.host = per;
  }
};

// The framework's Python-level host work for this model (configs/frameworks/*.yaml python_host),
// or nullptr: none counted for its family, or the host table has not measured module calls and
// views (no `python:` in its dispatch).
const PythonHostWork* python_work(const IterationInputs& in, const ModelSpec& m) {
  if (!in.host.dispatch || in.host.dispatch->python.empty()) return nullptr;
  return framework_profile(in.training.framework).python_host_work(m.hf_model_type);
}

// sum over the lines of count x the measured host cost of its class.
TimePs python_time(const HostDispatch& d, const std::vector<PythonCalls>& calls) {
  TimePs t{0};
  for (const auto& c : calls) t += TimePs{d.call_cost(c.call_class).ps * c.count};
  return t;
}

// The host class of a non-GEMM kernel (framework.hpp's and transformer.hpp's kernel classes).
const char* host_class(const std::string& kernel) {
  if (kernel == "layernorm") return "layer_norm";
  if (kernel == "attention_softmax") return "softmax";
  return "elementwise";
}

// A layer's segment: its GEMMs (the layer's GEMM time split by their FLOPs; SDPA or flash
// attention's core one operator and one backward kernel, an unfused core's products matmuls),
// then its other kernels as layer_elementwise_kernels lists them, each at its own time.
Segment layer_segment(const IterationInputs& in, const ModelSpec& m, std::int64_t tp, bool sp, std::int64_t ep,
                      const KernelTimes& k) {
  const auto& t = in.training;
  const auto& c = in.costs;
  const HostDispatch& d = *in.host.dispatch;
  Segment s;
  if (const PythonHostWork* py = python_work(in, m)) s.host_only(python_time(d, py->layer));
  TimePs elementwise_fwd{0}, elementwise_bwd{0};
  std::vector<DispatchedKernel> other_fwd, other_bwd;
  for (const auto& e : layer_elementwise_kernels(m, t.micro_batch, tp, t.attention_kernels(), sp, ep, t.framework)) {
    const TimePs host = d.forward_cost(host_class(e.kernel));
    if (e.forward_bytes > 0.0) {
      const TimePs g = c.memory_bound_time(Bytes{static_cast<std::int64_t>(e.forward_bytes)}, e.kernel);
      elementwise_fwd += g;
      for (int i = 0; i < e.forward_ops; ++i) other_fwd.push_back({scaled(g, 1.0 / e.forward_ops), host});
    }
    if (e.backward_bytes > 0.0) {
      const TimePs g = c.memory_bound_time(Bytes{static_cast<std::int64_t>(e.backward_bytes)}, e.kernel, true);
      elementwise_bwd += g;
      other_bwd.push_back({g, TimePs{0}});
    }
  }
  const TimePs recompute = t.recompute == Recompute::kFull ? k.layer_fwd : TimePs{0};
  // What the layer's time holds beyond its other kernels: its GEMMs (and FP8 casts). Never below
  // zero (a mixture of experts with dense layers has averaged layer times).
  const TimePs gemm_fwd = std::max(TimePs{0}, k.layer_fwd - elementwise_fwd);
  const TimePs gemm_bwd = std::max(TimePs{0}, k.layer_bwd - recompute - elementwise_bwd);
  const bool fused_core = t.flash_attention;
  double flops = 0.0, core_flops = 0.0;
  for (const auto& g : layer_gemms(m, t.micro_batch, tp, ep)) {
    flops += g.flops();
    if (g.attention_core) core_flops += g.flops();
  }
  for (const auto& g : layer_gemms(m, t.micro_batch, tp, ep)) {
    if (g.attention_core && fused_core) {
      if (g.name != "attention_scores") continue;
      const double share = core_flops / flops;
      s.op(scaled(gemm_fwd, share), d.forward_cost("elementwise"));  // scaled_dot_product_attention
      s.backward.push_back({scaled(gemm_bwd, share), TimePs{0}});
      continue;
    }
    const double share = g.flops() / flops;
    // The framework's nn.Linear modules behind the GEMM (Hugging Face's separate Q, K, V and
    // gate, up projections), one operator each, the GEMM's time split evenly among them.
    const int n = framework_profile(t.framework).linears(g.name, m.hf_model_type, m.ffn_kind == FfnKind::kSwiglu);
    for (int i = 0; i < n; ++i) s.op(scaled(gemm_fwd, share / n), d.forward_cost("linear"));
    s.backward.push_back({scaled(gemm_bwd, share / 2.0), TimePs{0}});  // input and weight gradients
    s.backward.push_back({scaled(gemm_bwd, share / 2.0), TimePs{0}});
  }
  for (const auto& o : other_fwd) s.op(o.gpu, o.host);
  s.backward.insert(s.backward.end(), other_bwd.begin(), other_bwd.end());
  s.finish(d, k.layer_fwd, k.layer_bwd - recompute);
  return s;
}

// The embedding (its lookup, and the framework's embedding dropout) and the head (the logits
// GEMM, the loss's operators: the framework's chain or one cross-entropy, any soft-capping's three),
// each with the undispatched time split evenly over its kernels past the logits GEMM.
Segment embedding_segment(const IterationInputs& in, const ModelSpec& m, const KernelTimes& k) {
  const HostDispatch& d = *in.host.dispatch;
  const FrameworkProfile& f = framework_profile(in.training.framework);
  const ModuleChain* drop = m.embedding_dropout ? f.chain("embedding_dropout") : nullptr;
  const int ops = 1 + (drop ? static_cast<int>(drop->forward.size()) : 0);
  const int bwd = 1 + (drop ? static_cast<int>(drop->backward.size()) : 0);
  Segment s;
  if (const PythonHostWork* py = python_work(in, m)) s.host_only(python_time(d, py->embedding));
  for (int i = 0; i < ops; ++i) s.op(scaled(k.embed_fwd, 1.0 / ops), d.forward_cost("elementwise"));
  for (int i = 0; i < bwd; ++i) s.backward.push_back({scaled(k.embed_bwd, 1.0 / bwd), TimePs{0}});
  s.finish(d, k.embed_fwd, k.embed_bwd);
  return s;
}

Segment head_segment(const IterationInputs& in, const ModelSpec& m, std::int64_t tp, const KernelTimes& k) {
  const HostDispatch& d = *in.host.dispatch;
  const auto& c = in.costs;
  const GemmShape head = head_gemm(m, in.training.micro_batch, tp);
  GemmShape input_grad = head, weight_grad = head;
  input_grad.n = head.k;
  input_grad.k = head.n;
  weight_grad.m = head.k;
  weight_grad.k = head.m;
  const FrameworkProfile& f = framework_profile(in.training.framework);
  const ModuleChain* loss = f.chain("loss");
  const int softcap = m.logit_softcap ? 3 : 0;
  const int ops = (loss ? static_cast<int>(loss->forward.size()) : 1) + softcap;
  const int bwd = (loss ? static_cast<int>(loss->backward.size()) : 1) + softcap;
  Segment s;
  if (const PythonHostWork* py = python_work(in, m)) s.host_only(python_time(d, py->head));
  const TimePs gemm = c.gemm_time(head);
  const TimePs grads = c.gemm_time(input_grad) + c.gemm_time(weight_grad);
  s.op(gemm, d.forward_cost("linear"));
  for (int i = 0; i < ops; ++i) s.op(scaled(k.head_fwd - gemm, 1.0 / ops), d.forward_cost("elementwise"));
  for (int i = 0; i < bwd; ++i) s.backward.push_back({scaled(k.head_bwd - grads, 1.0 / bwd), TimePs{0}});
  s.backward.push_back({c.gemm_time(input_grad), TimePs{0}});
  s.backward.push_back({c.gemm_time(weight_grad), TimePs{0}});
  s.finish(d, k.head_fwd, k.head_bwd);
  return s;
}

// The stream's end after each of its three parts: the first, `layers` times the middle, the last.
struct PhaseEnds {
  TimePs first, middle, last;
};
PhaseEnds run_phase(const std::vector<DispatchedKernel>& first, const std::vector<DispatchedKernel>& layer,
                    std::int64_t layers, const std::vector<DispatchedKernel>& last) {
  DispatchStream s;
  PhaseEnds e;
  e.first = s.run(first);
  for (std::int64_t i = 0; i < layers; ++i) s.run(layer);
  e.middle = s.gpu_end();
  e.last = s.run(last);
  return e;
}

}  // namespace

bool apply_host_dispatch(const IterationInputs& in, const ModelSpec& m, std::int64_t layers, std::int64_t tp,
                         bool sequence_parallel, std::int64_t ep, KernelTimes& k) {
  if (!in.host.dispatch || layers <= 0) return false;
  const Segment embed = embedding_segment(in, m, k);
  const Segment layer = layer_segment(in, m, tp, sequence_parallel, ep, k);
  const Segment head = head_segment(in, m, tp, k);
  // Forward: embedding, layers, head. Backward: head, each layer's recomputed forward (full
  // recomputation: torch.utils.checkpoint dispatches it again, recording autograd) and backward,
  // embedding. Each phase starts with host and GPU aligned (a synchronisation at its start).
  const PhaseEnds f = run_phase(embed.forward, layer.forward, layers, head.forward);
  std::vector<DispatchedKernel> layer_bwd;
  if (in.training.recompute == Recompute::kFull) layer_bwd = layer.forward;
  layer_bwd.insert(layer_bwd.end(), layer.backward.begin(), layer.backward.end());
  if (in.training.recompute == Recompute::kSelective) {
    // Selective recomputation's attention core, recomputed inside its backward node.
    layer_bwd.push_back({k.attention_fwd, TimePs{0}});
  }
  const PhaseEnds b = run_phase(head.backward, layer_bwd, layers, embed.backward);
  const auto per_layer = [&](TimePs t) { return TimePs{t.ps / layers}; };
  k.embed_fwd = f.first;
  k.layer_fwd = per_layer(f.middle - f.first);
  k.head_fwd = f.last - f.first - TimePs{k.layer_fwd.ps * layers};
  k.head_bwd = b.first;
  k.layer_bwd = per_layer(b.middle - b.first);
  k.embed_bwd = b.last - b.first - TimePs{k.layer_bwd.ps * layers};
  return true;
}

std::string host_dispatch_approximation(const IterationInputs& in) {
  if (!in.host.dispatch) {
    return "host dispatch not modelled: no measurement for this host (the host table has no dispatch section); "
           "eager frameworks' per-operator host time is not charged, so small shapes come out fast";
  }
  const HostDispatch& d = *in.host.dispatch;
  const auto us = [](TimePs t) { return t.seconds() * 1e6; };
  std::string text = fmt::format(
      "host dispatch of eager PyTorch (table: {}): each operator is issued after the host's measured time ({:.1f} us a "
      "linear, {:.1f} us a layer_norm, {:.1f} us a softmax, {:.1f} us any other operator, recording autograd; {:.1f} "
      "us per backward node, one per forward operator, spread over its kernels), and the GPU starts a kernel at the "
      "later of its issue and the previous kernel's end, per phase from an aligned start (exact for one GPU's "
      "stream); within a layer the GEMMs (their time split by FLOPs) come before the other kernels, so a layer's "
      "order can be off by less than one layer's time; the optimizer step and collectives are not dispatched (a "
      "collective waits for its inputs as before); ",
      d.source, us(d.forward_cost("linear")), us(d.forward_cost("layer_norm")), us(d.forward_cost("softmax")),
      us(d.forward_cost("elementwise")), us(d.backward_node));
  const PythonHostWork* py = python_work(in, in.model);
  if (!py) {
    text += d.python.empty()
                ? "Python module calls, views and reshapes cost no host time here (the host table has no python "
                  "section)"
                : "Python module calls, views and reshapes cost no host time here (the framework counts none for "
                  "this model)";
    return text + ", nor torch.utils.checkpoint's own per-layer work";
  }
  const auto& L = py->layer;
  const int other = python_call_count(L, "elementwise") + python_call_count(L, "linear");
  text += fmt::format(
      "the framework's Python around the operators is included (configs/frameworks python_host, model_type {}; "
      "table: {}): per decoder layer {} module calls x {:.2f} us + {} views x {:.2f} us{} = {:.1f} us of host time in "
      "its forward "
      "(again in a recomputed forward), {:.1f} us once for the embedding and {:.1f} us for the head, no GPU time; the "
      "{} autograd nodes a layer's views leave cost nothing in backward (no microbenchmark of a view's node), nor do "
      "the mask helpers or torch.utils.checkpoint's per-layer work (saved-tensor hooks, RNG state: no "
      "microbenchmark)",
      in.model.hf_model_type, d.python_source, python_call_count(L, "module_call"), us(d.call_cost("module_call")),
      python_call_count(L, "view"), us(d.call_cost("view")),
      other > 0 ? fmt::format(" + {} other operators at their class's cost", other) : std::string{},
      us(python_time(d, L)), us(python_time(d, py->embedding)), us(python_time(d, py->head)), python_backward_nodes(L));
  return text;
}

}  // namespace offsim::models
