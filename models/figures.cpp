#include "models/figures.hpp"

#include <fmt/format.h>

#include <array>
#include <cstdint>
#include <stdexcept>

#include "models/experiment.hpp"
#include "models/transformer/phases.hpp"

namespace offsim::models {

namespace {

constexpr std::array kFigures{
    Figure{"feasible", "1 when it fits in memory, else 0",
           [](const ExperimentResult& r) { return r.feasible ? 1.0 : 0.0; }, FigureKind::kFlag},
    Figure{"iteration_time_s", "s", [](const ExperimentResult& r) { return r.iteration_time.seconds(); }},
    Figure{"tflops_per_device", "TFLOP/s (hardware FLOPs, with recomputation)",
           [](const ExperimentResult& r) { return r.tflops_per_device; }, FigureKind::kReal, true},
    Figure{"model_tflops_per_device", "TFLOP/s (model FLOPs)",
           [](const ExperimentResult& r) { return r.model_tflops_per_device; }, FigureKind::kReal, true},
    Figure{"mfu", "fraction of the device's dense BF16 peak", [](const ExperimentResult& r) { return r.mfu; },
           FigureKind::kReal, true},
    Figure{"tokens_per_s", "tokens/s (whole job)", [](const ExperimentResult& r) { return r.tokens_per_s; },
           FigureKind::kReal, true},
    Figure{"exposed_communication_s", "s (rank 0)",
           [](const ExperimentResult& r) { return r.phase_seconds(phase::kExposedCommunication); }},
    Figure{"model_states_bytes_per_device", "bytes",
           [](const ExperimentResult& r) { return r.model_states_per_device.as_double(); }, FigureKind::kCount},
    Figure{"hbm_peak_bytes", "bytes (fullest GPU memory pool)",
           [](const ExperimentResult& r) { return static_cast<double>(r.peak_bytes("hbm")); }, FigureKind::kCount},
};

}  // namespace

std::string Figure::text(const ExperimentResult& r) const {
  const double v = get(r);
  return kind == FigureKind::kReal ? fmt::format("{}", v) : std::to_string(static_cast<std::int64_t>(v));
}

std::span<const Figure> headline_figures() {
  return kFigures;
}

const Figure* find_figure(std::string_view name) {
  for (const Figure& f : kFigures) {
    if (f.name == name) return &f;
  }
  return nullptr;
}

std::vector<const Figure*> figures_named(std::initializer_list<std::string_view> names) {
  std::vector<const Figure*> out;
  for (const std::string_view name : names) {
    const Figure* f = find_figure(name);
    if (f == nullptr) throw std::logic_error(fmt::format("no headline figure '{}'", name));
    out.push_back(f);
  }
  return out;
}

}  // namespace offsim::models
