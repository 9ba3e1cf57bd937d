#include "models/transformer/model_report.hpp"

#include <fmt/format.h>

#include "sim/report/json_writer.hpp"
#include "sim/report/text_table.hpp"

namespace offsim::models {

namespace {

struct Work {
  std::vector<GemmShape> gemms;
  GemmShape head;
  double layer_forward = 0.0;  // FLOPs of one layer on one tp rank
  double head_forward = 0.0;
};

Work work_of(const ModelSpec& m, const ModelReportOptions& o) {
  Work w;
  w.gemms = layer_gemms(m, o.micro_batch, o.tp);
  w.head = head_gemm(m, o.micro_batch, o.tp);
  for (const auto& g : w.gemms) w.layer_forward += g.flops();
  w.head_forward = w.head.flops();
  return w;
}

}  // namespace

std::string model_json(const ModelSpec& m, const ModelReportOptions& o) {
  const ParameterCounts c = count_parameters(m);
  const Work w = work_of(m, o);
  sim::report::JsonWriter j;
  j.begin_object();
  j.field("name", m.name).field("micro_batch", o.micro_batch).field("tp", o.tp);
  j.key("parameters").begin_object();
  j.field("total", c.total).field("per_layer", c.per_layer).field("layers", c.layers).field("embedding", c.embedding);
  j.field("position", c.position).field("final_norm", c.final_norm).field("output_head", c.output_head);
  j.field("active", c.active);
  j.end_object();
  j.key("per_layer").begin_object();
  j.field("forward_flops", w.layer_forward).field("backward_flops", 2.0 * w.layer_forward);
  j.key("gemms").begin_array();
  for (const auto& g : w.gemms) {
    j.begin_object().field("name", g.name).field("m", g.m).field("n", g.n).field("k", g.k).field("batch", g.batch);
    j.field("flops", g.flops()).end_object();
  }
  j.end_array();
  j.key("activation_bytes").begin_object();
  j.field("none", stored_activation_bytes(m, o.micro_batch, Recompute::kNone, false).count);
  j.field("none_flash_attention", stored_activation_bytes(m, o.micro_batch, Recompute::kNone, true).count);
  j.field("selective", stored_activation_bytes(m, o.micro_batch, Recompute::kSelective, false).count);
  j.field("full", stored_activation_bytes(m, o.micro_batch, Recompute::kFull, false).count);
  j.end_object();
  j.end_object();
  j.key("head").begin_object();
  j.field("m", w.head.m).field("n", w.head.n).field("k", w.head.k).field("forward_flops", w.head_forward);
  j.end_object();
  j.key("per_sequence").begin_object();
  j.field("model_flops", model_flops_per_sequence(m).count);
  j.field("hardware_flops_selective", hardware_flops_per_sequence(m, Recompute::kSelective).count);
  j.field("hardware_flops_full", hardware_flops_per_sequence(m, Recompute::kFull).count);
  j.end_object();
  j.end_object();
  return j.str();
}

std::string model_text(const ModelSpec& m, const ModelReportOptions& o) {
  const ParameterCounts c = count_parameters(m);
  const Work w = work_of(m, o);
  std::string out = fmt::format("{}: {} parameters ({:.3f} B)\n", m.name, c.total, static_cast<double>(c.total) / 1e9);
  out += fmt::format(
      "  {} layers x {}{} + embedding {} + positions {} + final norm {} + output head {}\n\n", m.layers, c.per_layer,
      m.moe() && m.dense_layers > 0 ? fmt::format(" (the mean: {} dense layers of width {}, then sparse; {} in all)",
                                                  m.dense_layers, m.dense_ffn, c.layers)
                                    : std::string(),
      c.embedding, c.position, c.final_norm, c.output_head);
  if (m.moe()) {
    out += fmt::format(
        "  mixture of experts: {} experts of width {}, {} per token{}; {} parameters active per token ({:.3f} B)\n"
        "  {}\n",
        m.experts, m.ffn, m.experts_per_token,
        m.shared_ffn > 0 ? fmt::format(", a shared MLP of width {}", m.shared_ffn) : std::string(), c.active,
        static_cast<double>(c.active) / 1e9,
        m.routing_imbalance > 1.0
            ? fmt::format("(the busiest expert runs {:g} x the mean tokens: routing_imbalance)", m.routing_imbalance)
            : std::string("(tokens assumed spread evenly over the experts: a lower bound on the time)"));
  }
  sim::report::TextTable t(
      {fmt::format("forward GEMM (micro-batch {}, tp {})", o.micro_batch, o.tp), "M", "N", "K", "batch", "GFLOP"});
  for (const auto& g : w.gemms) {
    t.add_row({g.name, std::to_string(g.m), std::to_string(g.n), std::to_string(g.k), std::to_string(g.batch),
               fmt::format("{:.2f}", g.flops() / 1e9)});
  }
  t.add_row({"logits (once)", std::to_string(w.head.m), std::to_string(w.head.n), std::to_string(w.head.k), "1",
             fmt::format("{:.2f}", w.head_forward / 1e9)});
  out += t.str();
  out += fmt::format("\nper layer and rank: forward {:.2f} GFLOP, backward {:.2f} GFLOP\n", w.layer_forward / 1e9,
                     2.0 * w.layer_forward / 1e9);
  out += fmt::format(
      "stored activations per layer: {} (none), {} (flash attention or selective), {} (full recomputation)\n",
      sim::format_bytes(stored_activation_bytes(m, o.micro_batch, Recompute::kNone, false)),
      sim::format_bytes(stored_activation_bytes(m, o.micro_batch, Recompute::kSelective, false)),
      sim::format_bytes(stored_activation_bytes(m, o.micro_batch, Recompute::kFull, false)));
  out += fmt::format(
      "per sequence: {:.3f} TFLOP model (6 x params x tokens + attention), {:.3f} TFLOP with full recomputation\n",
      model_flops_per_sequence(m).count / 1e12, hardware_flops_per_sequence(m, Recompute::kFull).count / 1e12);
  return out;
}

}  // namespace offsim::models
