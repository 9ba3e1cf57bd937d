#pragma once
// Transformer Engine's userbuffers overlap of the tensor-parallel collectives with the GEMMs
// (Megatron-Core / Megatron-Bridge `tp_comm_overlap`, NeMo's `ub_tp_comm_overlap`), under sequence
// parallelism. Source: NVIDIA/TransformerEngine v2.9, transformer_engine/pytorch/module/base.py
// (initialize_ub) and transformer_engine/common/comm_gemm_overlap/comm_gemm_overlap.cpp.
//
// Which GEMM overlaps which collective (initialize_ub's layer lists; layernorm_linear.py,
// linear.py, layernorm_mlp.py use them):
//   forward   qkv_fprop, fc1_fprop: the sequence-parallel all-gather of the normed input (FP8 when
//             training in FP8: fp8_buf) with the QKV / FC1 GEMM (default ring_exchange);
//             proj_fprop, fc2_fprop: the attention-output / FC2 GEMM with the reduce-scatter of
//             its output (default pipeline, 4 splits).
//   backward  proj_dgrad, fc2_dgrad: the all-gather of the output gradient (the reduce-scatter's
//             backward) with the dgrad GEMM (ring_exchange); the wgrad GEMM then reads the
//             gathered gradient, no collective;
//             qkv_dgrad, fc1_dgrad: the dgrad GEMM with the all-gather of the normed input the
//             wgrad needs (bulk); qkv_wgrad, fc1_wgrad: the wgrad GEMM with the reduce-scatter of
//             the dgrad's output (bulk).
//
// Each method as a split pipeline (chunk k of the GEMM, chunk k of the collective):
//   ring_exchange all-gather (split_overlap_ag, n = tp chunks of tokens / tp rows): GEMM chunk 0
//     on the local shard, chunk k once the k-th neighbour's shard has arrived (one ring step c of
//     the collective's own time each, chained on the copy engines):
//       e_0 = g',  e_k = max(e_{k-1}, k c) + g'  (total e_{n-1}; = n g' when g' >= c,
//       (n - 1) c + g' when c >= g'). aggregate: one step of c, then n = tp / 2 chunks of 2 shards
//       and steps of 2c.
//   ring_exchange reduce-scatter (split_overlap_rs, P2P): n = tp GEMM chunks back to back, chunk k's
//     partial output sent to its owner after it (sends chained, c each; the last chunk is the
//     rank's own), then the received partials summed (a memory pass over tp + 1 shards).
//   pipeline reduce-scatter (split_overlap_rs): n = num_splits GEMM chunks back to back, chunk k's
//     reduce-scatter r after chunk k and after chunk k-1's:
//       s_k = max((k + 1) g', s_{k-1}) + r  (total s_{n-1}; = n g' + r when g' >= r).
//   bulk: the whole collective c beside the whole GEMM g (bulk_overlap):
//       total = max(c, g + c (num_sm / SMs)): while the collective runs its kernel holds num_sm of
//       the device's SMs, so the GEMM advances at (SMs - num_sm) / SMs of its rate.
//   g' is the GEMM's time over the chunks (TE runs the chunks on 3 streams in turn, so the device
//   sees the whole GEMM's work at its rate), at SMs / (SMs - num_sm) of it where TE narrows the
//   GEMM to the SMs the communication leaves (set_sm_margin) or the communication's kernel holds
//   them for the whole split pipeline (pipeline); the ring exchange's copies take no SM.
// A collective's time is the calibrated ring of its kind over the tp ranks (the analytic model of
// models/collectives/communicator.hpp when uncontended): t = (g - 1) alpha + (g - 1) / g x S / B,
// at the measured bus bandwidth of S where the table has one; a ring step is 1 / (g - 1) of it.
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "models/cost/cost_model.hpp"
#include "models/transformer/transformer.hpp"
#include "sim/core/units.hpp"

namespace offsim::sim::config {
class Node;
}

namespace offsim::models {

struct IterationInputs;

/// One GEMM's userbuffers settings (initialize_ub's ub_cfgs entry).
struct UbGemmConfig {
  enum class Method { kRingExchange, kPipeline, kBulk };
  Method method = Method::kBulk;
  int num_sm = 0;
  int num_splits = 0;  // pipeline; the ring exchange splits in tp
  bool set_sm_margin = false;
  bool aggregate = false;  // ring exchange: 2 shards per GEMM chunk
  bool fp8_buf = false;    // the buffer in FP8 under FP8 training (all-gathers: always)
};

/// The ten overlapped GEMMs' settings, in initialize_ub's names.
struct TpCommOverlap {
  UbGemmConfig qkv_fprop, proj_fprop, fc1_fprop, fc2_fprop;
  UbGemmConfig proj_dgrad, fc2_dgrad, qkv_dgrad, fc1_dgrad, qkv_wgrad, fc1_wgrad;
  std::string source;  // where the settings come from (TE's defaults or the configuration file)
};

/// Transformer Engine's defaults by key ("qkv_fprop": its method, "pipeline_num_sm", ...): the
/// readers pass configs/defaults.yaml's te_userbuffers section.
using UbDefaults = std::function<std::string(const std::string& key)>;

/// Transformer Engine's defaults, overridden by the `tp_comm_overlap_cfg` mapping at `cfg` when
/// given (the format of NeMo's tp_overlap YAML files). Errors are recorded in the node's context.
[[nodiscard]] TpCommOverlap read_tp_comm_overlap(const sim::config::Node* cfg, const UbDefaults& defaults);

// The closed forms above, for tests. Times in picoseconds.
[[nodiscard]] sim::TimePs ring_all_gather_overlap(int n, sim::TimePs gemm_chunk, sim::TimePs step, bool aggregate);
[[nodiscard]] sim::TimePs ring_reduce_scatter_overlap(int n, sim::TimePs gemm_chunk, sim::TimePs step,
                                                      sim::TimePs reduce);
[[nodiscard]] sim::TimePs pipeline_reduce_scatter_overlap(int n, sim::TimePs gemm_chunk, sim::TimePs chunk_rs);
[[nodiscard]] sim::TimePs bulk_overlap(sim::TimePs gemm, sim::TimePs collective, int num_sm, int sms);

/// Per layer on one rank: the time the overlapped GEMM + collective pairs add to the layer's
/// kernels (kernel_times counts the GEMMs alone, at full rate), forward and backward, and the
/// GEMMs' and collectives' sums for the report.
struct TpOverlapTimes {
  sim::TimePs forward_extra{0}, backward_extra{0};
  sim::TimePs forward_collectives{0}, backward_collectives{0};  // the collectives alone
};

/// The layer's overlaps on a rank of a tensor-parallel group of `tp` (dense layers: qkv,
/// attention_out, mlp_up, mlp_down). Throws std::invalid_argument when the device table has no
/// SM count or the collectives table no all_gather / reduce_scatter.
[[nodiscard]] TpOverlapTimes tp_overlap_times(const IterationInputs& in, int tp, const TpCommOverlap& ub);

/// What the report says of the overlap.
[[nodiscard]] std::string tp_overlap_approximation(const TpCommOverlap& ub);

}  // namespace offsim::models
