#include "models/strategies/tp_overlap.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <stdexcept>
#include <utility>

#include "models/strategies/layer_kernels.hpp"
#include "models/strategies/phases/iteration.hpp"
#include "models/strategies/value_ranges.hpp"
#include "models/transformer/fp8.hpp"
#include "sim/config/config_reader.hpp"
#include "sim/config/value_range.hpp"

namespace offsim::models {

using sim::Bytes;
using sim::TimePs;
using Method = UbGemmConfig::Method;

namespace {

// How a GEMM may overlap its collective, as offsim models it: the all-gathers before a GEMM
// by the ring exchange (TE refuses `pipeline` for them: add_ub), the reduce-scatters after one by
// the ring exchange or the pipeline, and the dgrad / wgrad pairs of the QKV and FC1 projections
// by bulk overlaps (another method there makes TE reduce-scatter the dgrad instead, not modelled).
enum class Role { kAllGatherBefore, kReduceScatterAfter, kBulk };

struct GemmEntry {
  const char* name;
  UbGemmConfig TpCommOverlap::*field;
  Role role;
};

constexpr std::array<GemmEntry, 10> kGemms{{
    {"qkv_fprop", &TpCommOverlap::qkv_fprop, Role::kAllGatherBefore},
    {"proj_fprop", &TpCommOverlap::proj_fprop, Role::kReduceScatterAfter},
    {"fc1_fprop", &TpCommOverlap::fc1_fprop, Role::kAllGatherBefore},
    {"fc2_fprop", &TpCommOverlap::fc2_fprop, Role::kReduceScatterAfter},
    {"proj_dgrad", &TpCommOverlap::proj_dgrad, Role::kAllGatherBefore},
    {"fc2_dgrad", &TpCommOverlap::fc2_dgrad, Role::kAllGatherBefore},
    {"qkv_dgrad", &TpCommOverlap::qkv_dgrad, Role::kBulk},
    {"fc1_dgrad", &TpCommOverlap::fc1_dgrad, Role::kBulk},
    {"qkv_wgrad", &TpCommOverlap::qkv_wgrad, Role::kBulk},
    {"fc1_wgrad", &TpCommOverlap::fc1_wgrad, Role::kBulk},
}};

Method method_of(std::string_view name) {
  if (name == "ring_exchange") return Method::kRingExchange;
  if (name == "pipeline") return Method::kPipeline;
  return Method::kBulk;
}

const char* method_name(Method m) {
  switch (m) {
    case Method::kRingExchange:
      return "ring_exchange";
    case Method::kPipeline:
      return "pipeline";
    case Method::kBulk:
      break;
  }
  return "bulk";
}

// TE's get_default_config for a GEMM's default method (configs/defaults.yaml, te_userbuffers).
UbGemmConfig default_config(const UbDefaults& d, const char* gemm) {
  UbGemmConfig c;
  c.method = method_of(d(gemm));
  const std::string m = method_name(c.method);
  c.num_sm = std::stoi(d(m + "_num_sm"));
  c.set_sm_margin = d(m + "_set_sm_margin") == "true";
  if (c.method == Method::kPipeline) c.num_splits = std::stoi(d("pipeline_num_splits"));
  return c;
}

bool allowed(Role role, Method m) {
  switch (role) {
    case Role::kAllGatherBefore:
      return m == Method::kRingExchange;
    case Role::kReduceScatterAfter:
      return m != Method::kBulk;
    case Role::kBulk:
      break;
  }
  return m == Method::kBulk;
}

// One GEMM's entry of a tp_overlap YAML over TE's defaults.
void read_gemm(const sim::config::Node& node, const GemmEntry& e, const UbDefaults& d, UbGemmConfig& c) {
  auto& ctx = node.context();
  sim::config::MapReader r(node);
  if (r.has("method")) {
    const auto m = r.choice("method", {"ring_exchange", "pipeline", "bulk"});
    if (m.valid) {
      c.method = method_of(m.value);
      if (!allowed(e.role, c.method)) {
        ctx.error(m.loc, node.child_path("method"),
                  fmt::format("{} overlaps {}: {} is not modelled there (offsim models {})", e.name,
                              e.role == Role::kAllGatherBefore      ? "the all-gather before its GEMM"
                              : e.role == Role::kReduceScatterAfter ? "the reduce-scatter after its GEMM"
                                                                    : "a whole collective beside its GEMM",
                              m.value,
                              e.role == Role::kAllGatherBefore
                                  ? "ring_exchange; Transformer Engine refuses pipeline for an all-gather"
                              : e.role == Role::kReduceScatterAfter ? "ring_exchange or pipeline"
                                                                    : "bulk"));
      }
    }
  }
  for (const auto& [key, field, range] : {std::tuple{"num_sm", &c.num_sm, ranges::kUbNumSm},
                                          std::tuple{"num_splits", &c.num_splits, ranges::kUbNumSplits},
                                          std::tuple{"cga_size", static_cast<int*>(nullptr), ranges::kUbNumSm}}) {
    if (!r.has(key)) continue;
    const auto v = r.required<int>(key);
    if (v.valid && sim::config::check_range(ctx, v.loc, node.child_path(key), v.value, range) && field)
      *field = v.value;
  }
  c.set_sm_margin = r.optional<bool>("set_sm_margin", c.set_sm_margin).value;
  c.aggregate = r.optional<bool>("aggregate", c.aggregate).value;
  c.fp8_buf = r.optional<bool>("fp8_buf", c.fp8_buf).value;
  (void)r.optional<bool>("use_ce", true);
  const auto atomic = r.optional<bool>("atomic_gemm", false);
  if (atomic.valid && atomic.value) {
    ctx.error(atomic.loc, node.child_path("atomic_gemm"),
              "atomic GEMM overlap (a cuBLAS beta API in Transformer Engine) is not modelled: use false");
  }
  if (c.method == Method::kPipeline && c.num_splits == 0) {
    c.num_splits = std::stoi(d("pipeline_num_splits"));
  }
}

}  // namespace

TpCommOverlap read_tp_comm_overlap(const sim::config::Node* cfg, const UbDefaults& defaults) {
  TpCommOverlap out;
  out.source = "Transformer Engine's defaults (initialize_ub)";
  for (const GemmEntry& e : kGemms) out.*e.field = default_config(defaults, e.name);
  if (cfg == nullptr) return out;
  sim::config::MapReader r(*cfg);
  out.source = r.optional<std::string>("source", cfg->location().file).value;
  for (const GemmEntry& e : kGemms) {
    if (auto child = r.child(e.name)) read_gemm(*child, e, defaults, out.*e.field);
  }
  return out;
}

TimePs ring_all_gather_overlap(int n, TimePs gemm_chunk, TimePs step, bool aggregate) {
  // e_k = max(e_{k-1}, arrival_k) + g'; with aggregate the first step brings one shard and each
  // later one two, and the GEMM chunks are two shards.
  TimePs end{0};
  const int chunks = aggregate ? std::max(1, n / 2) : n;
  const TimePs g = aggregate ? TimePs{2 * gemm_chunk.ps} : gemm_chunk;
  for (int k = 0; k < chunks; ++k) {
    const TimePs arrival =
        k == 0 ? TimePs{aggregate ? step.ps : 0} : TimePs{(aggregate ? step.ps + 2 * k * step.ps : k * step.ps)};
    end = TimePs{std::max(end.ps, arrival.ps) + g.ps};
  }
  return end;
}

TimePs ring_reduce_scatter_overlap(int n, TimePs gemm_chunk, TimePs step, TimePs reduce) {
  // GEMM chunks back to back; chunk k < n - 1 sent after it (sends chained); the last is local.
  TimePs sent{0};
  for (int k = 0; k + 1 < n; ++k) sent = TimePs{std::max(sent.ps, (k + 1) * gemm_chunk.ps) + step.ps};
  return TimePs{std::max(sent.ps, n * gemm_chunk.ps) + reduce.ps};
}

TimePs pipeline_reduce_scatter_overlap(int n, TimePs gemm_chunk, TimePs chunk_rs) {
  TimePs end{0};
  for (int k = 0; k < n; ++k) end = TimePs{std::max(end.ps, (k + 1) * gemm_chunk.ps) + chunk_rs.ps};
  return end;
}

TimePs bulk_overlap(TimePs gemm, TimePs collective, int num_sm, int sms) {
  // The GEMM gives up num_sm / sms of its rate while the collective runs.
  const double lost = static_cast<double>(collective.ps) * static_cast<double>(num_sm) / static_cast<double>(sms);
  return TimePs{std::max<std::int64_t>(collective.ps, gemm.ps + std::llround(lost))};
}

namespace {

// The calibrated ring of `name` over g ranks for a buffer of `bytes` (Communicator::stage_shape's
// analytic ring, uncontended): (g - 1) alpha + (g - 1) / g x bytes / bus bandwidth, at the measured
// bus bandwidth of that buffer where the table has one (its latency then included).
TimePs ring_time(const MeasuredCosts& m, const char* name, int g, double bytes) {
  if (!m.collectives.contains(name) || m.collectives.at(name).empty()) {
    throw std::invalid_argument(
        fmt::format("strategy.tp_comm_overlap: the collectives table has no {} (calibration.collectives)", name));
  }
  const CollectiveFit& f = m.collective(name, g, nullptr);
  double alpha = static_cast<double>(f.step_latency.ps), rate = f.bus_bandwidth.bytes_per_s;
  if (const auto measured = m.measured_bus_bandwidth(name, g, bytes, false)) {
    alpha = 0.0;
    rate = measured->bytes_per_s;
  }
  const double steps = static_cast<double>(g - 1);
  return TimePs{std::llround(steps * alpha)} + sim::duration_of(steps / static_cast<double>(g) * bytes, rate);
}

struct Overlapped {
  TimePs total{0}, gemm{0}, collective{0};
};

class LayerOverlaps {
 public:
  LayerOverlaps(const IterationInputs& in, int tp, int sms) : in_(in), tp_(tp), sms_(sms) {}

  [[nodiscard]] TimePs gemm(const GemmShape& g) const {
    return in_.training.fp8 && runs_in_fp8(g) ? in_.costs.fp8_gemm_time(g) : in_.costs.gemm_time(g);
  }
  [[nodiscard]] TimePs narrowed(TimePs t, int num_sm) const {
    if (num_sm >= sms_) {
      throw std::invalid_argument(fmt::format(
          "strategy.tp_comm_overlap_cfg: num_sm {} leaves no SM of the device's {} to the GEMM", num_sm, sms_));
    }
    return TimePs{std::llround(static_cast<double>(t.ps) * sms_ / static_cast<double>(sms_ - num_sm))};
  }

  // `full`: the GEMM alone; `kind`: its collective; `bytes`: the collective's whole buffer.
  [[nodiscard]] Overlapped run(const UbGemmConfig& c, const GemmShape& full, const char* kind, double bytes) const {
    Overlapped o;
    o.gemm = gemm(full);
    o.collective = ring_time(in_.collectives, kind, tp_, bytes);
    const TimePs step{o.collective.ps / std::max(1, tp_ - 1)};
    // A chunk runs at the whole GEMM's rate: TE launches the chunks on up to _NUM_MAX_UB_STREAMS = 3
    // compute streams in turn with no dependency between them, so each fills the last wave of the
    // one before and the device sees the whole GEMM's work.
    const auto chunk = [&](int n) { return TimePs{o.gemm.ps / n}; };
    switch (c.method) {
      case Method::kRingExchange: {
        const TimePs g = c.set_sm_margin ? narrowed(chunk(tp_), c.num_sm) : chunk(tp_);
        if (std::string_view(kind) == "all_gather") {
          o.total = ring_all_gather_overlap(tp_, g, step, c.aggregate);
        } else {
          // The received partials summed: tp shards read, one written.
          const Bytes pass{static_cast<std::int64_t>(bytes * (tp_ + 1) / tp_)};
          o.total = ring_reduce_scatter_overlap(tp_, g, step, in_.costs.memory_bound_time(pass));
        }
        break;
      }
      case Method::kPipeline: {
        const TimePs r = ring_time(in_.collectives, kind, tp_, bytes / c.num_splits);
        o.total = pipeline_reduce_scatter_overlap(c.num_splits, narrowed(chunk(c.num_splits), c.num_sm), r);
        break;
      }
      case Method::kBulk:
        o.total = c.set_sm_margin ? std::max(o.collective, narrowed(o.gemm, c.num_sm))
                                  : bulk_overlap(o.gemm, o.collective, c.num_sm, sms_);
        break;
    }
    return o;
  }

 private:
  const IterationInputs& in_;
  int tp_;
  int sms_;
};

const GemmShape& find_gemm(const std::vector<GemmShape>& gemms, std::string_view name) {
  const auto it = std::find_if(gemms.begin(), gemms.end(), [&](const GemmShape& g) { return g.name == name; });
  if (it == gemms.end()) {
    throw std::invalid_argument(
        fmt::format("strategy.tp_comm_overlap: modelled for dense layers (qkv, attention_out, mlp_up, mlp_down); this "
                    "model's layers have no {} GEMM",
                    name));
  }
  return *it;
}

GemmShape dgrad(const GemmShape& g) {
  GemmShape d = g;
  d.n = g.k;
  d.k = g.n;
  return d;
}
GemmShape wgrad(const GemmShape& g) {
  GemmShape w = g;
  w.m = g.k;
  w.k = g.m;
  return w;
}

}  // namespace

TpOverlapTimes tp_overlap_times(const IterationInputs& in, int tp, const TpCommOverlap& ub) {
  const auto sms = in.costs.device().compute_units;
  if (!sms) {
    throw std::invalid_argument(
        fmt::format("strategy.tp_comm_overlap: the device table ({}) has no compute_units (the SM count the "
                    "communication kernels take SMs from)",
                    in.costs.device().device_kind));
  }
  const ModelSpec& m = in.model;
  const TrainingSpec& t = in.training;
  const std::vector<GemmShape> gemms = layer_gemms(m, t.micro_batch, tp, 1);
  const GemmShape& qkv = find_gemm(gemms, "qkv");
  const GemmShape& proj = find_gemm(gemms, "attention_out");
  const GemmShape& fc1 = find_gemm(gemms, "mlp_up");
  const GemmShape& fc2 = find_gemm(gemms, "mlp_down");
  const LayerOverlaps o(in, tp, *sms);
  // The sequence-parallel activations (tokens x hidden): all-gathered in FP8 under FP8 training
  // (initialize_ub: fp8_buf for every all-gather overlap), reduce-scattered in bf16 unless the
  // GEMM's fp8_buf says FP8 output (pipeline method).
  const double elements = static_cast<double>(t.micro_batch * m.seq * m.hidden);
  const double gathered = elements * (t.fp8 ? kFp8Bytes : kBf16Bytes);
  const auto scattered = [&](const UbGemmConfig& c) {
    return elements * (t.fp8 && c.fp8_buf && c.method == Method::kPipeline ? kFp8Bytes : kBf16Bytes);
  };
  TpOverlapTimes out;
  const auto add = [](const Overlapped& x, TimePs& extra, TimePs& collectives) {
    extra += TimePs{x.total.ps - x.gemm.ps};
    collectives += x.collective;
  };
  add(o.run(ub.qkv_fprop, qkv, "all_gather", gathered), out.forward_extra, out.forward_collectives);
  add(o.run(ub.proj_fprop, proj, "reduce_scatter", scattered(ub.proj_fprop)), out.forward_extra,
      out.forward_collectives);
  add(o.run(ub.fc1_fprop, fc1, "all_gather", gathered), out.forward_extra, out.forward_collectives);
  add(o.run(ub.fc2_fprop, fc2, "reduce_scatter", scattered(ub.fc2_fprop)), out.forward_extra, out.forward_collectives);
  // Backward: the output gradient all-gathered for the row-parallel dgrads; the normed input
  // all-gathered beside the column-parallel dgrads, their output reduce-scattered (bf16) beside
  // the wgrads.
  add(o.run(ub.fc2_dgrad, dgrad(fc2), "all_gather", gathered), out.backward_extra, out.backward_collectives);
  add(o.run(ub.fc1_dgrad, dgrad(fc1), "all_gather", gathered), out.backward_extra, out.backward_collectives);
  add(o.run(ub.fc1_wgrad, wgrad(fc1), "reduce_scatter", elements * kBf16Bytes), out.backward_extra,
      out.backward_collectives);
  add(o.run(ub.proj_dgrad, dgrad(proj), "all_gather", gathered), out.backward_extra, out.backward_collectives);
  add(o.run(ub.qkv_dgrad, dgrad(qkv), "all_gather", gathered), out.backward_extra, out.backward_collectives);
  add(o.run(ub.qkv_wgrad, wgrad(qkv), "reduce_scatter", elements * kBf16Bytes), out.backward_extra,
      out.backward_collectives);
  if (t.recompute == Recompute::kFull) {
    out.backward_extra += out.forward_extra;
    out.backward_collectives += out.forward_collectives;
  }
  return out;
}

std::string tp_overlap_approximation(const TpCommOverlap& ub) {
  const auto describe = [](const char* name, const UbGemmConfig& c) {
    std::string s = fmt::format("{} {}", name, method_name(c.method));
    if (c.method != Method::kRingExchange || c.set_sm_margin) s += fmt::format(" {} SMs", c.num_sm);
    if (c.method == Method::kPipeline) s += fmt::format(" x{}", c.num_splits);
    if (c.aggregate) s += " aggregate";
    return s;
  };
  std::string list;
  for (const GemmEntry& e : kGemms) {
    if (!list.empty()) list += ", ";
    list += describe(e.name, ub.*e.field);
  }
  return fmt::format(
      "tensor-parallel communication overlapped with the GEMMs by Transformer Engine's userbuffers "
      "(tp_comm_overlap; {}: {}): each GEMM and its sequence-parallel all-gather or reduce-scatter as a split "
      "pipeline of chunks (tp_overlap.hpp: ring exchange in tp chunks, pipeline in num_splits, bulk whole), the "
      "first and last chunk exposed, the GEMM slowed by the SMs its communication kernels hold; a collective's "
      "time is the calibrated NCCL ring of its kind over the tp ranks (userbuffers' own kernels and copy-engine "
      "transfers are not measured), uncontended; all-gathers in FP8 under FP8 training; the GEMM chunks of "
      "different streams run one after another; the wgrad GEMMs of proj and fc2 are not overlapped (TE 2.x's "
      "external overlap is not modelled); cga_size is read and not modelled; the collectives' bytes are not "
      "credited to the links (no TP traffic in the link report)",
      ub.source, list);
}

}  // namespace offsim::models
