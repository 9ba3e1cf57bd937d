#pragma once
// The sections of an experiment file that load_experiment reads besides the machine, the model and
// the calibration tables: training, the strategy (every kind: collective, deepspeed, megatron,
// data_parallel), cost, and the checks across them once all are read. Internal to models/experiment/.
#include <cstdint>
#include <optional>

#include "models/experiment.hpp"
#include "models/strategies/deepspeed_config.hpp"

namespace offsim::models {

// The longest training.seq: the model readers' limit on sequence lengths (16,777,216 tokens).
inline constexpr std::int64_t kMaxSeq = std::int64_t{1} << 24;

// Training values a strategy section may carry (a DeepSpeed config's batch settings).
struct TrainingFromStrategy {
  std::optional<std::int64_t> micro_batch;
  std::optional<std::int64_t> grad_accum;
  sim::config::Location at;
  std::optional<DeepSpeedImport> deepspeed;  // for its "auto" sizes, resolved with the model
  // Where the strategy gives its degrees, for the checks that need the model (check_against_model).
  sim::config::Location tp_at, pp_at, ep_at;
  sim::config::Location cp_at, split_at;  // megatron: cp, and the first key of an uneven pipeline split
  std::string split_key = "pp";
  bool collective = false;            // kind: collective, which has no model or training (even when invalid)
  sim::config::Location kind_at;      // strategy.kind
  std::vector<std::string> defaults;  // strategy keys left out that took a default (key=value, whose)
  // megatron: strategy.pipeline_engine written, and where the interleaved schedule was asked for
  // (resolve_pipeline_engine in load.cpp, once training.framework is known).
  bool pipeline_engine_given = false;
  std::optional<sim::config::Location> interleaved_at;
  // megatron: strategy.scatter_gather_tensors_in_pipeline written (resolve_pipeline_tensors in
  // load.cpp takes Megatron-DeepSpeed's default when training.framework names it).
  bool scatter_gather_given = false;
  bool gradient_accumulation_fusion_given = false;  // strategy.gradient_accumulation_fusion written
  // In: the model when it was read before the strategy, so that a tp it cannot split over is
  // reported at tp (by its heads and widths), not as the rank count it makes.
  const ModelSpec* model = nullptr;
  // In: training.framework is torchtitan (peeked before the strategy is read): a data_parallel
  // strategy is FSDP2 with torchtitan's defaults (torchtitan_section.hpp).
  bool torchtitan = false;
};

/// What parse_training says besides the TrainingSpec.
struct TrainingRead {
  sim::config::Location grad_accum_at;                    // (for the strategy checks)
  std::optional<sim::config::Located<std::int64_t>> seq;  // training.seq, when given
  std::vector<std::string> defaults;                      // keys left out that took a default (key=value)
  // In: the strategy is Megatron-LM's, whose attention without flash fuses scale, mask and softmax
  // by default (configs/defaults.yaml, megatron.masked_softmax_fusion).
  bool megatron = false;
  bool framework_given = false;  // training.framework written (else inferred in load.cpp)
};

/// `training:`; keys left out take configs/defaults.yaml's values (named in `read->defaults`).
[[nodiscard]] std::optional<TrainingSpec> parse_training(const sim::config::Node& node, TrainingRead* read);

/// `cost:`, every number with its source.
[[nodiscard]] std::optional<CostSpec> parse_cost(const sim::config::Node& node);

/// `strategy:` of any kind (list_strategies); `topology` (null when the machine has errors) gives
/// the devices and level sizes; `training` receives what the strategy says of the batch.
[[nodiscard]] std::optional<StrategySpec> parse_strategy(const sim::config::Node& node, const topo::Topology* topology,
                                                         TrainingFromStrategy* training);

/// What the strategy asks of the model's shape and the batch, each mismatch at the strategy's key.
void check_against_model(sim::config::Context& ctx, const StrategySpec& strategy, const ModelSpec& m,
                         const TrainingSpec& training, const TrainingFromStrategy& from_strategy,
                         const sim::config::Location& grad_accum_at);

}  // namespace offsim::models
