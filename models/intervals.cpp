#include "models/intervals.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <sstream>
#include <stdexcept>
#include <variant>

#include "models/experiment.hpp"
#include "models/strategies/phases/zero_policy.hpp"

namespace offsim::models {

namespace {

// configs/calibration/validation-residuals.csv, compiled in (CMakeLists.txt).
constexpr std::string_view kShippedCsv =
#include "validation_residuals_csv.inc"
    ;

constexpr std::string_view kHeader = "group,case,metric,mechanism,device,measured_s,predicted_s";

// The interval's level and its split-conformal order statistics: the lower end is the
// floor(kTail (n + 1))-th smallest residual, the upper the ceil((1 - kTail) (n + 1))-th.
// In whole percent, so that the order statistics are exact integer arithmetic.
constexpr std::size_t kCoveragePercent = 80;
constexpr std::size_t kTailPercent = (100 - kCoveragePercent) / 2;

std::vector<std::string> split(std::string_view line) {
  std::vector<std::string> out;
  std::string field;
  for (const char c : line) {
    if (c == ',') {
      out.push_back(field);
      field.clear();
    } else {
      field += c;
    }
  }
  out.push_back(field);
  return out;
}

}  // namespace

double Residual::log_residual() const {
  return std::log(measured_s / predicted_s);
}

std::string mechanism_of(const ExperimentSpec& spec) {
  if (std::holds_alternative<CollectiveSpec>(spec.strategy)) return "collective";
  if (const auto* dp = std::get_if<DataParallelSpec>(&spec.strategy)) {
    if (dp->offload) return "zero-offload";
    const auto partitioned = ZeroPolicy::partitioning_if_valid(dp->zero_stage);
    return partitioned && partitioned->parameters ? "zero3" : "data-parallel";
  }
  if (const auto* mg = std::get_if<MegatronSpec>(&spec.strategy)) return mg->pp > 1 ? "megatron-pipeline" : "megatron";
  return "other";
}

std::string device_family(const ExperimentSpec& spec) {
  const std::string& kind = spec.device.device_kind;
  return kind.substr(0, kind.find('-'));
}

std::string residuals_csv(const std::vector<Residual>& rows) {
  std::string out = fmt::format(
      "# ln(measured / predicted) of every timing row of the shipped validation set, by mechanism and device:\n"
      "# the residuals offsim's 80% prediction intervals are drawn from (docs/validation.md). Written by\n"
      "# `offsim validate --residuals configs/calibration/validation-residuals.csv`; never edit by hand.\n{}\n",
      kHeader);
  for (const auto& r : rows) {
    for (const auto* text : {&r.group, &r.case_name, &r.metric, &r.mechanism, &r.device}) {
      if (text->find_first_of(",\n") != std::string::npos)
        throw std::runtime_error(fmt::format("residual field '{}' holds a comma or a newline", *text));
    }
    out += fmt::format("{},{},{},{},{},{},{}\n", r.group, r.case_name, r.metric, r.mechanism, r.device, r.measured_s,
                       r.predicted_s);
  }
  return out;
}

std::vector<Residual> parse_residuals(std::string_view csv) {
  std::vector<Residual> out;
  std::istringstream in{std::string(csv)};
  std::string line;
  bool header = false;
  int number = 0;
  while (std::getline(in, line)) {
    ++number;
    if (line.empty() || line.front() == '#') continue;
    if (!header) {
      if (line != kHeader)
        throw std::runtime_error(fmt::format("residual table line {}: expected {}", number, kHeader));
      header = true;
      continue;
    }
    const auto f = split(line);
    if (f.size() != 7) throw std::runtime_error(fmt::format("residual table line {}: expected 7 fields", number));
    Residual r{f[0], f[1], f[2], f[3], f[4], std::stod(f[5]), std::stod(f[6])};
    if (!(r.measured_s > 0.0) || !(r.predicted_s > 0.0))
      throw std::runtime_error(fmt::format("residual table line {}: times must be positive", number));
    out.push_back(std::move(r));
  }
  return out;
}

const std::vector<Residual>& shipped_residuals() {
  static const std::vector<Residual> rows = parse_residuals(kShippedCsv);
  return rows;
}

std::optional<PredictionInterval> interval_for(const std::vector<Residual>& residuals, std::string_view mechanism,
                                               std::string_view device, std::string_view exclude_group) {
  struct Pool {
    bool same_mechanism;
    bool same_device;
    std::string name;
  };
  const std::vector<Pool> pools{{true, true, fmt::format("{} on {}", mechanism, device)},
                                {true, false, fmt::format("{} (any device)", mechanism)},
                                {false, false, "every mechanism"}};
  for (const auto& pool : pools) {
    std::vector<double> r;
    for (const auto& row : residuals) {
      if (!exclude_group.empty() && row.group == exclude_group) continue;
      if (pool.same_mechanism && row.mechanism != mechanism) continue;
      if (pool.same_device && row.device != device) continue;
      r.push_back(row.log_residual());
    }
    const std::size_t n = r.size();
    const std::size_t lo = kTailPercent * (n + 1) / 100;                 // floor
    const std::size_t hi = ((100 - kTailPercent) * (n + 1) + 99) / 100;  // ceil
    if (lo < 1 || hi > n) continue;  // too few residuals for this level: a wider pool
    std::sort(r.begin(), r.end());
    return PredictionInterval{std::exp(r[lo - 1]), std::exp(r[hi - 1]), static_cast<double>(kCoveragePercent) / 100.0,
                              pool.name, n};
  }
  return std::nullopt;
}

std::optional<PredictionInterval> prediction_interval(const ExperimentSpec& spec) {
  return interval_for(shipped_residuals(), mechanism_of(spec), device_family(spec));
}

bool intervals_overlap(double a, const PredictionInterval& ia, double b, const PredictionInterval& ib) {
  return a * ia.low <= b * ib.high && b * ib.low <= a * ia.high;
}

}  // namespace offsim::models
