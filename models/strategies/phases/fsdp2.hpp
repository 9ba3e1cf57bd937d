#pragma once
// PyTorch's FSDP2 (torch.distributed.fsdp.fully_shard) as torchtitan applies it without pipelines,
// as a phase any data-parallel schedule can use (ZeroPolicy::fsdp2 says what is sharded).
//
// torchtitan (models/llama3/parallelize_llama.py at 820504e, apply_fsdp; torchtitan/distributed/
// fsdp.py today) calls fully_shard on every transformer block and then on the whole model, whose
// remaining parameters (the embedding, the final norm and the output projection) form the root
// unit. Each unit is one FSDPParamGroup: its parameters are all-gathered in one collective before
// its forward (foreach_all_gather: the unit's shards copied into one flat buffer), from the
// dp_shard ranks that hold the same tensor-parallel share (the 2-D mesh dp_shard x tp, tp
// innermost: ranks t + tp x d for tensor rank t), so each gathers 1/tp of its block:
//   bytes received per rank per unit = params_unit x w / (tp x dp_shard) x (dp_shard - 1)
// with w the bf16 parameter dtype (MixedPrecisionPolicy.param_dtype). The next unit's all-gather
// is issued while the current one computes (the all-gather stream; implicit forward prefetch and
// backward prefetch of the previous block): ParameterGather's one-module-ahead stream.
// reshard_after_forward (torchtitan's parallelism.fsdp_reshard_after_forward):
//   default: every block resharded after its forward and gathered again before its backward,
//            except the last block, whose backward comes right after (parallelize_llama.py:
//            "do not reshard after forward for the last transformer block since FSDP would
//            prefetch it immediately"); the root unit is never resharded after forward (FSDP2's
//            lazy init clears the root's post-forward resharding);
//   always:  every block resharded; never: none (then the backward gathers nothing).
// After a unit's backward its gradients (unsharded, bf16) are reduce-scattered in the reduce
// dtype (MixedPrecisionPolicy.reduce_dtype, torchtitan's mixed_precision_reduce: fp32) into the
// rank's fp32 gradient shard, one collective per unit, every micro-batch; the end of the
// backward waits for the last one (the root's post-backward final callback).
#include <cstdint>
#include <string>
#include <vector>

#include "models/strategies/phases/parameter_gather.hpp"
#include "models/transformer/transformer.hpp"

namespace offsim::models {

/// torchtitan's parallelism.fsdp_reshard_after_forward.
enum class ReshardAfterForward { kDefault, kAlways, kNever };

[[nodiscard]] const char* reshard_after_forward_name(ReshardAfterForward r);

/// The FSDP units in forward order for a rank holding `params` (its tensor-parallel share; with
/// expert parallelism its own experts, `experts_per_layer` of them per layer): the root's
/// embedding, each block (one gather; with ep > 1 its experts in a second gather over their own
/// data-parallel group), the root's final norm and output. Every parameter is sharded (no
/// persistence threshold); reshard_after_forward per the policy.
[[nodiscard]] std::vector<Module> fsdp2_units(const ModelSpec& m, const ParameterCounts& params,
                                              std::int64_t experts_per_layer, int ep, ReshardAfterForward policy);

/// The elements of the largest unit's gradients in the reduce dtype, in bf16 elements (`fp32`:
/// twice its count): the reduce-scatter input FSDP2 allocates per unit (foreach_reduce).
[[nodiscard]] std::int64_t fsdp2_reduce_buffer_elements(const std::vector<Module>& units, bool fp32);

/// What the report says of FSDP2.
[[nodiscard]] std::vector<std::string> fsdp2_approximations(ReshardAfterForward policy, int tp, int shard_ranks);

}  // namespace offsim::models
