#include "models/search.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <istream>
#include <map>
#include <optional>
#include <stdexcept>

#include "models/placement/state_placement.hpp"
#include "models/strategies/deepspeed_config.hpp"
#include "models/strategies/layer_kernels.hpp"
#include "models/strategies/phases/zero_policy.hpp"
#include "models/strategies/strategy_registry.hpp"
#include "sim/report/csv.hpp"
#include "sim/report/text_table.hpp"

namespace offsim::models {

using sim::report::parse_csv_line;

namespace {

// DeepSpeed's defaults for what the search does not vary (deepspeed/runtime/zero/config.py):
// reduce_bucket_size 5e8, stage3_param_persistence_threshold 1e5, sub_group_size 1e9; the
// offloaded optimizer's buffers pinned, as the Hugging Face and DeepSpeed examples configure it.
constexpr std::int64_t kReduceBucketElements = deepspeed_defaults::kReduceBucketSize;
constexpr std::int64_t kSubGroupSize = deepspeed_defaults::kSubGroupSize;

// What the base experiment fixes: the machine's shape, the batch, the collectives' channels and
// the order of a node's GPUs.
struct BaseFacts {
  int gpus_per_node = 0;
  int total_gpus = 0;
  bool nodes_vary = false;  // a cluster file: hardware.nodes can be set
  bool has_cpu = false;
  std::int64_t hbm_capacity = 0;
  std::int64_t global_batch = 0;
  int channels = 1;
  std::vector<std::string> devices_per_node;  // local names in the base's order; empty: default
  bool fp8 = false;                           // training.precision: fp8 is modelled under Megatron only
  // training.framework: torchtitan: data parallelism is FSDP2 (torchtitan_section.hpp), which runs
  // at ZeRO-3 only, without offload, and reads no DeepSpeed key; the rest takes torchtitan's defaults.
  bool torchtitan = false;
};

BaseFacts base_facts(const ExperimentSpec& base) {
  BaseFacts f;
  f.fp8 = base.training.fp8.has_value();
  f.torchtitan = base.training.framework == Framework::kTorchtitan;
  const auto& topo = base.hardware->topology;
  const auto gpus = topo.devices_of(topo::DeviceKind::kGpu);
  f.total_gpus = static_cast<int>(gpus.size());
  for (const auto g : gpus) {
    if (topo.device(g).node == topo.device(gpus.front()).node) ++f.gpus_per_node;
  }
  if (!gpus.empty() && topo.device(gpus.front()).memory)
    f.hbm_capacity = topo.device(gpus.front()).memory->capacity.count;
  f.has_cpu = !topo.devices_of(topo::DeviceKind::kCpu).empty();
  f.nodes_vary = base.hardware->network_kind != "none";
  const StrategyKindEntry& kind = strategy_kind(base.strategy);
  if (!kind.trains) {
    // Bad input, located at the key that makes it so (an exit 2 names where).
    throw sim::config::ConfigError({sim::config::Diagnostic{
        base.strategy_kind_at, "strategy.kind",
        fmt::format("search needs a base experiment that trains (kind data_parallel, deepspeed or megatron), got {}",
                    kind.name)}});
  }
  const std::vector<std::string>& devices = kind.devices(base.strategy);
  const std::int64_t replicas = kind.replicas(base.strategy);
  f.channels = kind.channels(base.strategy);
  f.global_batch = base.training.micro_batch * base.training.grad_accum * replicas;
  // The base's order of a node's GPUs (Frontier's ring order, say), as local names.
  if (static_cast<int>(devices.size()) >= f.gpus_per_node && f.gpus_per_node > 0) {
    const auto first = topo.find_device(devices.front());
    for (int i = 0; i < f.gpus_per_node && first; ++i) {
      const auto d = topo.find_device(devices[static_cast<std::size_t>(i)]);
      if (!d || topo.device(*d).node != topo.device(*first).node) {
        f.devices_per_node.clear();
        break;
      }
      const std::string& name = devices[static_cast<std::size_t>(i)];
      const auto dot = name.find('.');
      f.devices_per_node.push_back(f.nodes_vary && dot != std::string::npos ? name.substr(dot + 1) : name);
    }
  }
  return f;
}

// Model states on one GPU as ZeRO partitions them over the dp replicas of a tp x pp share
// (models/placement; with offload every update runs on the host): a lower bound on the GPU's
// memory (activations, buckets and gathered parameters come on top). With P the rank's parameters
// and g = dp, q = ceil(P / g), Megatron's defaults (fp32 main_grad, fp32 reduce dtype) give
//   zero 0: 2P (bf16 parameters) + 4P (fp32 main_grad) + 12P (fp32 master, m, v)  = 18P;
//   zero 1: 2P + 4P + 12q (the distributed optimizer's share)                      = 6P + 12q;
//   zero 2 (FSDP2 under the pipeline): 2P + 4q (the fp32 gradient shard) + 12q
//           + 4P (the whole fp32 gradient buffer)                                  = 6P + 16q.
// Stage 2's whole buffer is transient: the builder allocates it at the rank's first backward and
// frees it after the one reduce-scatter (allocate_whole_gradients, pipeline_data_parallel_step),
// while the states above are held all iteration, so the simulated peak holds both and their sum
// is still a lower bound on it.
//
// Under torchtitan a data-parallel point is FSDP2 (ZeroPolicy::fsdp2), all partitioned as
// data_parallel.cpp places them: the fp32 parameter shard, which is the master (4q), Adam's m and v
// (8q) and the fp32 gradient shard (4q) = 16q. Its reduce buffers (in the reduce dtype, which is
// therefore no part of the bound) and gathered bf16 parameters are transient and left out.
std::int64_t state_bytes(const SearchCandidate& c, std::int64_t params_on_rank, const BaseFacts& f) {
  StateCounts counts;
  counts.held = params_on_rank;
  counts.sharded = params_on_rank;
  // The candidates take their framework's default gradient handling.
  const bool fsdp2 = c.kind != "megatron" && f.torchtitan;
  const ZeroPolicy policy = c.kind == "megatron" ? ZeroPolicy::megatron(c.zero_stage, std::nullopt)
                            : fsdp2              ? ZeroPolicy::fsdp2(/*fp32_reduce=*/true)  // (no part of the bound)
                                                 : ZeroPolicy::deepspeed(c.zero_stage, std::nullopt, false);
  counts.partitioned = policy.partitioned();
  counts.shard_ranks = c.dp;
  counts.gradient_buffers = policy.gradient_buffers();
  counts.fp32_gradient_partition = policy.accumulates_whole_gradients() || fsdp2;
  counts.parameter_shard_is_master = fsdp2;
  counts.optimizer_offload = c.offload;
  counts.offloaded_elements = policy.updated_parameters(params_on_rank, params_on_rank, c.dp);
  return place_model_states(counts, kBf16MixedPrecision).gpu_model_states() +
         policy.whole_gradient_buffer_bytes(params_on_rank);
}

// Whether Megatron runs `zero` at `pp` stages with its own optimizer and without
// overlap_grad_reduce (what the search writes): its stages (ZeroPolicy::kMegatronStages), FSDP2
// under the pipeline only with a pipeline (the reader refuses it at pp 1, sections.cpp
// check_megatron_fsdp).
bool megatron_runs(int zero, int pp) {
  if (!ZeroPolicy::kMegatronStages.contains(zero)) return false;
  return pp > 1 || !ZeroPolicy::megatron(zero, std::nullopt).accumulates_whole_gradients();
}

std::string strategy_override(const SearchCandidate& c, const BaseFacts& f) {
  std::string s;
  if (c.kind == "megatron") {
    s = fmt::format("{{kind: megatron, tp: {}, pp: {}, dp: {}, schedule: 1f1b, sequence_parallel: {}, zero_stage: {}",
                    c.tp, c.pp, c.dp, c.tp > 1 ? "true" : "false", c.zero_stage);
  } else if (f.torchtitan) {
    // FSDP2 reads no DeepSpeed key: the rest takes torchtitan's defaults (named in each report).
    s = fmt::format("{{kind: data_parallel, zero_stage: {}, dp: {}, tp: {}", c.zero_stage, c.dp, c.tp);
    if (c.ep > 1) s += fmt::format(", ep: {}", c.ep);
  } else {
    s = fmt::format(
        "{{kind: data_parallel, zero_stage: {}, dp: {}, tp: {}, reduce_bucket_elements: {}, overlap_comm: {}, "
        "param_persistence_threshold: {}",
        c.zero_stage, c.dp, c.tp, kReduceBucketElements,
        ZeroPolicy::deepspeed(c.zero_stage, std::nullopt, false).deepspeed_default_overlap_comm() ? "true" : "false",
        DataParallelSpec::kDeepSpeedPersistenceThreshold);
    if (c.ep > 1) s += fmt::format(", ep: {}", c.ep);
    if (c.offload) {
      s += fmt::format(
          ", offload_optimizer: {{device: cpu, pin_memory: true, ratio: 1.0, sub_group_size: {}}}, runtime: "
          "deepspeed-0.16",
          kSubGroupSize);
    }
  }
  s += fmt::format(", collectives: {{fidelity: analytic, channels: {}}}", f.channels);
  if (!f.devices_per_node.empty() && c.gpus % f.gpus_per_node == 0) {
    s += fmt::format(", devices_per_node: [{}]", fmt::join(f.devices_per_node, ", "));
  }
  return s + "}";
}

std::vector<int> divisors(std::int64_t n) {
  std::vector<int> out;
  for (std::int64_t d = 1; d <= n; ++d) {
    if (n % d == 0) out.push_back(static_cast<int>(d));
  }
  return out;
}

// The strategies of the space, without GPU count and micro-batch: kind, tp, pp, expert
// parallelism, ZeRO stage and offload, each a combination DeepSpeed or Megatron can run (offload
// at ZeRO 2-3 of data parallelism with a host CPU; Megatron at ZeRO 0-1, and 2 with pp > 1;
// experts spread over ep ranks without tp or offload) whose tp divides the heads and widths and
// pp the layers.
std::vector<SearchCandidate> strategy_shapes(const ModelSpec& m, const SearchSpace& space, const BaseFacts& f) {
  std::vector<int> tps = space.tp;
  if (tps.empty()) {
    for (int t = 1; t <= f.gpus_per_node; t *= 2) tps.push_back(t);
  }
  std::vector<int> eps{1};
  for (int e = 2; m.moe() && e <= m.experts; e *= 2) {
    if (m.experts % e == 0) eps.push_back(e);
  }
  const std::vector<bool> offloads = space.offload.empty() ? std::vector<bool>{false, true} : space.offload;
  std::vector<SearchCandidate> out;
  const std::vector<std::string> kinds =
      f.fp8 ? std::vector<std::string>{"megatron"} : std::vector<std::string>{"data_parallel", "megatron"};
  for (const auto& kind : space.kinds.empty() ? kinds : space.kinds) {
    const bool megatron = kind == "megatron";
    const std::vector<int> pps = megatron ? (space.pp.empty() ? divisors(m.layers) : space.pp) : std::vector<int>{1};
    std::vector<int> stages = space.zero_stages;
    if (stages.empty()) {
      const auto range = megatron ? ZeroPolicy::kMegatronStages : ZeroPolicy::kStages;
      for (int z = range.min; z <= range.max; ++z) stages.push_back(z);
    }
    for (const int tp : tps) {
      for (const int pp : pps) {
        for (const int ep : megatron ? std::vector<int>{1} : eps) {
          for (const int zero : stages) {
            for (const bool offload : offloads) {
              if (offload && (megatron || zero < 2 || !f.has_cpu || f.torchtitan)) continue;
              // torchtitan's data parallelism is FSDP2, ZeRO-3 alone.
              if (!megatron && f.torchtitan) {
                const auto partitioned = ZeroPolicy::partitioning_if_valid(zero);
                if (!partitioned || !partitioned->parameters) continue;
              }
              if (megatron && !megatron_runs(zero, pp)) continue;
              if (ep > 1 && (tp > 1 || offload)) continue;
              if (!widths_not_dividing(m, tp).empty() || m.layers % pp != 0) continue;
              SearchCandidate c;
              c.kind = kind;
              c.tp = tp;
              c.pp = pp;
              c.ep = ep;
              c.zero_stage = zero;
              c.offload = offload;
              out.push_back(std::move(c));
            }
          }
        }
      }
    }
  }
  return out;
}

// Parameters a rank holds before ZeRO shards them: a tp share of the model, or of its fullest
// pipeline stage (its layers and the embedding or the head, whichever is larger), with only its
// experts / ep experts under expert parallelism.
std::int64_t parameters_held(const ModelSpec& m, const ParameterCounts& params, const SearchCandidate& c) {
  std::int64_t held = tensor_parallel_share(params, c.tp).total;
  if (c.kind == "megatron" && c.pp > 1) {
    const std::int64_t layers = m.layers / c.pp * params.per_layer;
    const std::int64_t edge =
        std::max(params.embedding + params.position, params.final_norm + (m.tied_embeddings ? 0 : params.output_head));
    held = (layers + edge + c.tp - 1) / c.tp;
  }
  if (c.ep > 1) held -= (params.experts_per_layer - params.experts_per_layer / c.ep) * m.layers;
  return held;
}

}  // namespace

std::string SearchCandidate::label() const {
  std::string s = kind == "megatron" ? fmt::format("megatron tp{} pp{} dp{} zero{}", tp, pp, dp, zero_stage)
                                     : fmt::format("zero{}{} tp{} dp{}", zero_stage, offload ? "+offload" : "", tp, dp);
  if (ep > 1) s += fmt::format(" ep{}", ep);
  return s + fmt::format(" mb{} ga{}", micro_batch, grad_accum);
}

SearchPlan plan_search(const ExperimentSpec& base, const SearchSpace& space, const SearchLimits& limits) {
  const BaseFacts f = base_facts(base);
  const ModelSpec& m = base.model;
  SearchPlan plan;
  plan.max_hbm_bytes = limits.max_hbm_bytes.value_or(f.hbm_capacity);
  plan.global_batch = limits.global_batch.value_or(f.global_batch);
  if (plan.global_batch < 1) throw std::invalid_argument("the global batch must be at least one sequence");
  // The GPU counts searched.
  std::vector<int> gpu_counts;
  if (limits.max_nodes) {
    if (!f.nodes_vary) {
      throw std::invalid_argument("--max-nodes needs a base experiment on a cluster (a hardware file with nodes)");
    }
    for (int n = 1; n <= *limits.max_nodes; n *= 2) gpu_counts.push_back(n * f.gpus_per_node);
  } else if (limits.gpus) {
    if (*limits.gpus > f.total_gpus && !f.nodes_vary) {
      throw std::invalid_argument(
          fmt::format("--gpus {}: the machine has {} GPUs and no node count to raise", *limits.gpus, f.total_gpus));
    }
    gpu_counts.push_back(*limits.gpus);
  } else {
    gpu_counts.push_back(static_cast<int>(strategy_kind(base.strategy).devices(base.strategy).size()));
  }
  const std::vector<std::int64_t> micro_batches =
      space.micro_batches.empty() ? std::vector<std::int64_t>{1, 2, 4, 8} : space.micro_batches;
  const std::vector<SearchCandidate> shapes = strategy_shapes(m, space, f);
  const ParameterCounts params = count_parameters(m);
  for (const int gpus : gpu_counts) {
    for (const SearchCandidate& shape : shapes) {
      for (const std::int64_t mb : micro_batches) {
        SearchCandidate c = shape;
        c.gpus = gpus;
        c.nodes = std::max(1, (gpus + f.gpus_per_node - 1) / f.gpus_per_node);
        c.micro_batch = mb;
        // Shapes that do not divide (GPUs, batch, experts over the replicas) are counted.
        if (gpus % (c.tp * c.pp) != 0 || (gpus / (c.tp * c.pp)) % c.ep != 0 ||
            plan.global_batch % (mb * (gpus / (c.tp * c.pp))) != 0) {
          ++plan.invalid;
          continue;
        }
        c.dp = gpus / (c.tp * c.pp);
        c.grad_accum = plan.global_batch / (mb * c.dp);
        c.state_bytes_lower_bound = state_bytes(c, parameters_held(m, params, c), f);
        c.overrides = {fmt::format("strategy={}", strategy_override(c, f)), fmt::format("training.micro_batch={}", mb),
                       fmt::format("training.grad_accum={}", c.grad_accum)};
        if (f.nodes_vary) c.overrides.push_back(fmt::format("hardware.nodes={}", c.nodes));
        if (c.state_bytes_lower_bound > plan.max_hbm_bytes) {
          plan.pruned.push_back(std::move(c));
        } else {
          plan.simulated.push_back(std::move(c));
        }
      }
    }
  }
  // FSDP2 under the pipeline (Megatron's ZeRO-2, searched since 2026-11-26) comes after the other
  // points, in the same order among itself: the points a search had before keep their index.
  const auto earlier = [](const SearchCandidate& c) {
    return c.kind != "megatron" || !ZeroPolicy::megatron(c.zero_stage, std::nullopt).accumulates_whole_gradients();
  };
  std::stable_partition(plan.simulated.begin(), plan.simulated.end(), earlier);
  std::stable_partition(plan.pruned.begin(), plan.pruned.end(), earlier);
  return plan;
}

Sweep search_sweep(const std::filesystem::path& base_file, const SearchPlan& plan) {
  Sweep sweep;
  sweep.name = "search";
  sweep.keys = {"strategy", "gpus", "kind", "tp", "pp", "dp", "zero_stage", "offload", "micro_batch", "grad_accum"};
  for (std::size_t i = 0; i < plan.simulated.size(); ++i) {
    const SearchCandidate& c = plan.simulated[i];
    SweepPoint p;
    p.index = i;
    p.experiment = base_file;
    p.values = {{"strategy", c.label()},
                {"gpus", std::to_string(c.gpus)},
                {"kind", c.kind},
                {"tp", std::to_string(c.tp)},
                {"pp", std::to_string(c.pp)},
                {"dp", std::to_string(c.dp)},
                {"zero_stage", std::to_string(c.zero_stage)},
                {"offload", c.offload ? "cpu" : "none"},
                {"micro_batch", std::to_string(c.micro_batch)},
                {"grad_accum", std::to_string(c.grad_accum)}};
    p.overrides = c.overrides;
    // A point simulates its micro-batches' operations on each pipeline stage's representative
    // rank: their count orders the points by cost, which is all the scheduling needs (on the
    // GPT-3 175B search of bench/perf, pp 32 at 256 micro-batches took about 10 ms, pp 2 at 16
    // about 1.6 ms). Scheduling only.
    p.relative_work = static_cast<double>(c.pp) * static_cast<double>(c.grad_accum);
    sweep.points.push_back(std::move(p));
  }
  return sweep;
}

std::vector<SearchResult> read_search_results(const SearchPlan& plan, std::istream& in, const std::string& csv_name,
                                              const SearchLimits& limits) {
  std::string line;
  std::getline(in, line);
  const auto header = parse_csv_line(line);
  const auto column = [&](const std::string& name) {
    const auto it = std::find(header.begin(), header.end(), name);
    if (it == header.end()) throw std::runtime_error(fmt::format("{}: no column '{}'", csv_name, name));
    return static_cast<std::size_t>(it - header.begin());
  };
  const std::size_t index = column("index"), status = column("status"), tokens = column("tokens_per_s"),
                    tflops = column("tflops_per_device"), iteration = column("iteration_time_s"),
                    hbm = column("hbm_peak_bytes"), reason = column("reason");
  // The iteration time's 80% interval, in CSVs that have it.
  const auto optional_column = [&](const std::string& name) -> std::optional<std::size_t> {
    const auto it = std::find(header.begin(), header.end(), name);
    if (it == header.end()) return std::nullopt;
    return static_cast<std::size_t>(it - header.begin());
  };
  const auto low = optional_column("iteration_time_low_s"), high = optional_column("iteration_time_high_s");
  std::vector<SearchResult> out;
  while (std::getline(in, line)) {
    const auto fields = parse_csv_line(line);
    if (fields.size() != header.size()) continue;
    const std::size_t i = std::stoul(fields[index]);
    if (i >= plan.simulated.size()) continue;
    SearchResult r;
    r.candidate = plan.simulated[i];
    r.status = fields[status];
    r.reason = fields[reason];
    if (r.status != "error") {
      if (low && high && !fields[*low].empty() && !fields[*high].empty()) {
        r.iteration_low_s = std::stod(fields[*low]);
        r.iteration_high_s = std::stod(fields[*high]);
      }
      r.tokens_per_s = std::stod(fields[tokens]);
      r.tflops_per_device = std::stod(fields[tflops]);
      r.iteration_s = std::stod(fields[iteration]);
      r.hbm_peak_bytes = std::stoll(fields[hbm]);
    }
    // GPU-hours per million tokens, times the price when one is given.
    if (r.tokens_per_s > 0.0) {
      const double gpu_hours = static_cast<double>(r.candidate.gpus) * 1e6 / r.tokens_per_s / 3600.0;
      r.cost_per_million_tokens = gpu_hours * (limits.price_per_gpu_hour > 0.0 ? limits.price_per_gpu_hour : 1.0);
    }
    r.within_limits = r.status == "ok" && r.hbm_peak_bytes <= plan.max_hbm_bytes;
    if (r.status == "ok" && !r.within_limits) {
      r.reason = fmt::format("peak HBM {} over the limit {}", sim::format_bytes(sim::Bytes{r.hbm_peak_bytes}),
                             sim::format_bytes(sim::Bytes{plan.max_hbm_bytes}));
    }
    out.push_back(std::move(r));
  }
  return out;
}

std::vector<std::size_t> pareto_front(const std::vector<SearchResult>& results) {
  const auto dominates = [](const SearchResult& a, const SearchResult& b) {
    const bool no_worse = a.tokens_per_s >= b.tokens_per_s && a.cost_per_million_tokens <= b.cost_per_million_tokens &&
                          a.hbm_peak_bytes <= b.hbm_peak_bytes;
    const bool better = a.tokens_per_s > b.tokens_per_s || a.cost_per_million_tokens < b.cost_per_million_tokens ||
                        a.hbm_peak_bytes < b.hbm_peak_bytes;
    return no_worse && better;
  };
  std::vector<std::size_t> front;
  for (std::size_t i = 0; i < results.size(); ++i) {
    if (!results[i].within_limits) continue;
    bool dominated = false;
    for (std::size_t j = 0; j < results.size() && !dominated; ++j) {
      dominated = j != i && results[j].within_limits && dominates(results[j], results[i]);
    }
    if (!dominated) front.push_back(i);
  }
  std::stable_sort(front.begin(), front.end(),
                   [&](std::size_t a, std::size_t b) { return results[a].tokens_per_s > results[b].tokens_per_s; });
  return front;
}

std::string search_report(const SearchPlan& plan, const std::vector<SearchResult>& results,
                          const SearchLimits& limits) {
  std::size_t within = 0, infeasible = 0, errors = 0, over_limit = 0;
  for (const auto& r : results) {
    if (r.within_limits) ++within;
    if (r.status == "infeasible") ++infeasible;
    if (r.status == "error") ++errors;
    if (r.status == "ok" && !r.within_limits) ++over_limit;
  }
  std::string out = fmt::format(
      "search: global batch {} sequences, HBM limit {} per GPU\n"
      "  {} strategies: {} pruned before simulating (model states alone over the limit), {} simulated: {} within "
      "the limits, {} over the HBM limit, {} infeasible, {} errors; {} shapes skipped (batch, heads or layers do not "
      "divide)\n",
      plan.global_batch, sim::format_bytes(sim::Bytes{plan.max_hbm_bytes}), plan.simulated.size() + plan.pruned.size(),
      plan.pruned.size(), results.size(), within, over_limit, infeasible, errors, plan.invalid);
  const std::vector<std::size_t> front = pareto_front(results);
  if (front.empty()) return out + "no strategy fits within the limits\n";
  const SearchResult& best = results[front.front()];
  out += fmt::format("fastest: {} on {} GPUs: {:.0f} tokens/s, {:.1f} TFLOPS per GPU, peak HBM {}\n",
                     best.candidate.label(), best.candidate.gpus, best.tokens_per_s, best.tflops_per_device,
                     sim::format_bytes(sim::Bytes{best.hbm_peak_bytes}));
  const std::string cost = limits.price_per_gpu_hour > 0.0 ? "cost / M tokens" : "GPU-h / M tokens";
  // tokens/s's 80% interval: the iteration time's inverted (tokens per iteration are fixed).
  const auto has_interval = [](const SearchResult& r) { return r.iteration_low_s > 0.0 && r.iteration_high_s > 0.0; };
  const auto tokens_low = [](const SearchResult& r) { return r.tokens_per_s * r.iteration_s / r.iteration_high_s; };
  const auto tokens_high = [](const SearchResult& r) { return r.tokens_per_s * r.iteration_s / r.iteration_low_s; };
  const auto overlaps_fastest = [&](const SearchResult& r) {
    return has_interval(r) && has_interval(best) && tokens_low(r) <= tokens_high(best) &&
           tokens_low(best) <= tokens_high(r);
  };
  sim::report::TextTable t({"Pareto front (throughput, cost, HBM)", "GPUs", "tokens/s", "80% interval", "TFLOPS/GPU",
                            "peak HBM", cost, "vs fastest"});
  std::size_t overlapping = 0;
  for (const std::size_t i : front) {
    const SearchResult& r = results[i];
    const bool overlap = i != front.front() && overlaps_fastest(r);
    overlapping += overlap ? 1 : 0;
    t.add_row({r.candidate.label(), std::to_string(r.candidate.gpus), fmt::format("{:.0f}", r.tokens_per_s),
               has_interval(r) ? fmt::format("{:.0f} to {:.0f}{}", tokens_low(r), tokens_high(r),
                                             overlap ? " (overlaps fastest)" : "")
                               : std::string("-"),
               fmt::format("{:.1f}", r.tflops_per_device), sim::format_bytes(sim::Bytes{r.hbm_peak_bytes}),
               fmt::format("{:.3g}", r.cost_per_million_tokens),
               fmt::format("{:+.1f}%", (r.tokens_per_s / best.tokens_per_s - 1.0) * 100.0)});
  }
  out += t.str();
  if (has_interval(best)) {
    out += overlapping > 0 ? fmt::format(
                                 "{} other point{} of the front overlap{} the fastest's 80% interval: at 80% "
                                 "the model cannot rank {} apart from the fastest\n",
                                 overlapping, overlapping == 1 ? "" : "s", overlapping == 1 ? "s" : "",
                                 overlapping == 1 ? "it" : "them")
                           : "no other point of the front overlaps the fastest's 80% interval\n";
  }
  out +=
      "(the model's mean error on its bounded validation rows is about 5%: points a few percent apart are ties; "
      "docs/validation.md)\n";
  return out;
}

}  // namespace offsim::models
