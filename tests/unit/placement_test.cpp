// One rank's model states per memory tier (models/placement/state_placement.hpp) against closed
// forms. P parameters held by the rank, sharded over g ranks; bf16 mixed precision with Adam:
// w = kBf16Bytes = 2, f = kFp32Bytes = 4, o = kOptimizerStateBytesPerParam = 12 (fp32 master, m,
// v). P is a multiple of g so that every share P / g is exact, except in the rounding test.
#include <gtest/gtest.h>

#include <optional>

#include "models/placement/state_placement.hpp"
#include "models/strategies/phases/zero_policy.hpp"

namespace offsim::models {
namespace {

constexpr StatePrecision kMixed{kBf16Bytes, kFp32Bytes, kOptimizerStateBytesPerParam};
constexpr std::int64_t P = 8'000'000;
constexpr int G = 8;

StateCounts zero(int stage, int shard_ranks = G) {
  StateCounts c;
  c.held = P;
  c.sharded = P;
  c.partitioned = ZeroPolicy::partitioning_of_stage(stage);
  c.shard_ranks = shard_ranks;
  return c;
}

// Nothing in host memory or on the NVMe.
void expect_gpu_only(const StatePlacement& s) {
  for (const TierBytes* t : {&s.parameters, &s.gradients, &s.optimizer, &s.secondary, &s.reduce_bucket,
                             &s.gradient_buffer, &s.swap_buffers}) {
    EXPECT_EQ(t->host, 0);
    EXPECT_EQ(t->nvme, 0);
  }
}

// ZeRO-0, replicated: w P + w P + o P = 2P + 2P + 12P = 16 B per parameter on the GPU.
TEST(Placement, ZeroStage0IsSixteenBytesPerParameter) {
  const StatePlacement s = place_model_states(zero(0), kMixed);
  EXPECT_EQ(s.parameters.gpu, 2 * P);
  EXPECT_EQ(s.gradients.gpu, 2 * P);
  EXPECT_EQ(s.optimizer.gpu, 12 * P);
  EXPECT_EQ(s.gpu_model_states(), 16 * P);
  EXPECT_EQ(s.updated_elements, P);
  EXPECT_EQ(s.reduce_bucket.gpu, 0);  // stages 0-1 all-reduce in place
  expect_gpu_only(s);
}

// bf16 training's fp32 gradient buffers at stages 0-1: Megatron's main_grad replaces the bf16
// gradients (f P = 4P); DeepSpeed's BF16_Optimizer keeps both (f P + w P = 6P); at stages 2-3 the
// choice does not apply (w P / g).
TEST(Placement, GradientBuffersOfTheFrameworksAtStagesZeroAndOne) {
  StateCounts c = zero(0);
  c.gradient_buffers = GradientBuffers::kFp32;
  EXPECT_EQ(place_model_states(c, kMixed).gradients.gpu, 4 * P);
  EXPECT_EQ(place_model_states(c, kMixed).gpu_model_states(), 18 * P);
  c.gradient_buffers = GradientBuffers::kFp32AndWorking;
  EXPECT_EQ(place_model_states(c, kMixed).gradients.gpu, 6 * P);
  EXPECT_EQ(place_model_states(c, kMixed).gpu_model_states(), 20 * P);
  c = zero(1);
  c.gradient_buffers = GradientBuffers::kFp32;
  EXPECT_EQ(place_model_states(c, kMixed).gpu_model_states(), 6 * P + 12 * P / G);
  c = zero(2);
  c.gradient_buffers = GradientBuffers::kFp32AndWorking;
  EXPECT_EQ(place_model_states(c, kMixed).gradients.gpu, 2 * P / G);
  // Under optimizer offload the GPU keeps fp32 gradients of its own subgroups only, whatever the framework.
  c = zero(1);
  c.gradient_buffers = GradientBuffers::kFp32AndWorking;
  c.optimizer_offload = true;
  c.offloaded_elements = P / G;
  EXPECT_EQ(place_model_states(c, kMixed).gradients.gpu, 0);
  // The frameworks' choices.
  const auto deepspeed = [](int stage, std::optional<bool> fp32_accum) {
    return ZeroPolicy::deepspeed(stage, fp32_accum, false);
  };
  EXPECT_EQ(deepspeed(0, std::nullopt).gradient_buffers(), GradientBuffers::kFp32AndWorking);  // default: fp32 at 0
  EXPECT_EQ(deepspeed(1, std::nullopt).gradient_buffers(), GradientBuffers::kWorking);         // and bf16 under ZeRO
  EXPECT_EQ(deepspeed(1, true).gradient_buffers(), GradientBuffers::kFp32AndWorking);
  EXPECT_EQ(deepspeed(0, false).gradient_buffers(), GradientBuffers::kWorking);
  EXPECT_TRUE(deepspeed(0, true).partitioned().optimizer);  // BF16_Optimizer partitions as ZeRO-1
  EXPECT_FALSE(deepspeed(0, true).partitioned().gradients);
  EXPECT_FALSE(deepspeed(0, false).partitioned().optimizer);
  EXPECT_TRUE(deepspeed(2, true).partitioned().gradients);
  EXPECT_FALSE(deepspeed(2, true).partitioned().parameters);
  EXPECT_EQ(ZeroPolicy::megatron(0, std::nullopt).gradient_buffers(), GradientBuffers::kFp32);
}

// How each framework's optimizer treats the gradients (ZeroPolicy): reduction dtype (in the
// communicator's bf16 elements: fp32 counts twice), reduce-scatter to owners or all-reduce, what is
// partitioned, the buffers, the engine.
TEST(Placement, GradientHandlingOfTheFrameworks) {
  const ZeroPolicy bf16_optimizer = ZeroPolicy::deepspeed(0, std::nullopt, false);
  EXPECT_TRUE(bf16_optimizer.bf16_optimizer());
  EXPECT_EQ(bf16_optimizer.reduced_elements(1000), 2000);
  EXPECT_FALSE(bf16_optimizer.reduce_to_owners());  // engine.py allreduce_gradients
  EXPECT_EQ(bf16_optimizer.gradient_reduction(), CollectiveKind::kAllReduce);
  EXPECT_TRUE(bf16_optimizer.gathers_updated_parameters());
  EXPECT_FALSE(bf16_optimizer.reduces_every_micro_batch());
  const ZeroPolicy zero1 = ZeroPolicy::deepspeed(1, std::nullopt, false);
  EXPECT_EQ(zero1.engine(), OptimizerEngine::kZeroStage1And2);
  EXPECT_EQ(zero1.reduced_elements(1000), 1000);
  EXPECT_TRUE(zero1.reduce_to_owners());
  EXPECT_EQ(zero1.gradient_reduction(), CollectiveKind::kReduceScatter);
  EXPECT_EQ(zero1.gradient_buffers(), GradientBuffers::kWorking);
  const ZeroPolicy replicated = ZeroPolicy::deepspeed(0, false, false);
  EXPECT_EQ(replicated.engine(), OptimizerEngine::kReplicated);
  EXPECT_FALSE(replicated.reduce_to_owners());
  EXPECT_FALSE(replicated.gathers_updated_parameters());
  EXPECT_EQ(replicated.updated_parameters(6, 10, 4), 6);
  const ZeroPolicy zero2 = ZeroPolicy::deepspeed(2, std::nullopt, false);
  EXPECT_TRUE(zero2.reduces_every_micro_batch());
  EXPECT_TRUE(zero2.gathers_updated_parameters());
  EXPECT_FALSE(zero2.gathers_parameters_before_use());
  EXPECT_FALSE(zero2.deepspeed_default_overlap_comm());
  const ZeroPolicy zero3 = ZeroPolicy::deepspeed(3, std::nullopt, true);
  EXPECT_EQ(zero3.engine(), OptimizerEngine::kZeroStage3);
  EXPECT_EQ(zero3.reduced_elements(1000), 2000);
  EXPECT_TRUE(zero3.gathers_parameters_before_use());
  EXPECT_FALSE(zero3.gathers_updated_parameters());
  EXPECT_TRUE(zero3.deepspeed_default_overlap_comm());
  EXPECT_EQ(ZeroPolicy::deepspeed(3, std::nullopt, false).reduced_elements(1000), 1000);
  EXPECT_THROW((void)ZeroPolicy::deepspeed(4, std::nullopt, false), std::invalid_argument);
  const ZeroPolicy megatron = ZeroPolicy::megatron(1, std::nullopt);
  EXPECT_EQ(megatron.reduced_elements(1000), 2000);
  EXPECT_TRUE(megatron.reduce_to_owners());
  EXPECT_EQ(megatron.gradient_buffers(), GradientBuffers::kFp32);
  EXPECT_EQ(ZeroPolicy::megatron(0, false).gradient_buffers(), GradientBuffers::kWorking);
  EXPECT_STREQ(megatron.gradient_tenant(), "gradients (fp32 main_grad)");
  // Stage 2 under the pipeline schedule: FSDP2 as torch.distributed.pipelining runs it, gradients
  // accumulated whole (fp32: 4 bytes each) and reduce-scattered once into an fp32 partition.
  const ZeroPolicy fsdp = ZeroPolicy::megatron(2, std::nullopt);
  EXPECT_EQ(fsdp.engine(), OptimizerEngine::kFsdpUnderPipeline);
  EXPECT_EQ(fsdp.gradient_reduction(), CollectiveKind::kReduceScatter);
  EXPECT_EQ(fsdp.reduced_elements(1000), 2000);
  EXPECT_FALSE(fsdp.reduces_every_micro_batch());
  EXPECT_TRUE(fsdp.accumulates_whole_gradients());
  EXPECT_EQ(fsdp.whole_gradient_buffer_bytes(1000), 4000);
  EXPECT_EQ(ZeroPolicy::megatron(2, false).whole_gradient_buffer_bytes(1000), 2000);
  EXPECT_EQ(megatron.whole_gradient_buffer_bytes(1000), 0);
  EXPECT_TRUE(fsdp.gathers_updated_parameters());
  EXPECT_FALSE(fsdp.gathers_parameters_before_use());
  EXPECT_STREQ(fsdp.gradient_tenant(), "gradient partition (fp32)");
  EXPECT_THROW((void)ZeroPolicy::megatron(3, std::nullopt), std::invalid_argument);
}

// ZeRO-1 (and Megatron's distributed optimizer over dp = g): 2P + 2P + 12P / g.
TEST(Placement, ZeroStage1PartitionsTheOptimizerStates) {
  const StatePlacement s = place_model_states(zero(1), kMixed);
  EXPECT_EQ(s.gpu_model_states(), 4 * P + 12 * P / G);
  EXPECT_EQ(s.optimizer.gpu, 12 * P / G);
  EXPECT_EQ(s.updated_elements, P / G);
  expect_gpu_only(s);
}

// ZeRO-2: 2P + (2 + 12) P / g, and a bf16 reduce bucket of min(B, P) elements: 2 min(B, P).
TEST(Placement, ZeroStage2PartitionsTheGradientsAndKeepsOneBucket) {
  StateCounts c = zero(2);
  c.reduce_bucket_elements = 500'000;
  const StatePlacement s = place_model_states(c, kMixed);
  EXPECT_EQ(s.gradients.gpu, 2 * P / G);
  EXPECT_EQ(s.gpu_model_states(), 2 * P + 14 * P / G);
  EXPECT_EQ(s.reduce_bucket.gpu, 2 * 500'000);
  c.reduce_bucket_elements = 2 * P;  // a bucket larger than the model holds the model: 2P
  EXPECT_EQ(place_model_states(c, kMixed).reduce_bucket.gpu, 2 * P);
  expect_gpu_only(s);
}

// FSDP2's gradient partition under a pipeline schedule is fp32 (its sharded parameters' dtype),
// with no reduce bucket: 2P + 4P / g + 12P / g.
TEST(Placement, AnFp32GradientPartitionTakesFourBytes) {
  StateCounts c = zero(2);
  c.fp32_gradient_partition = true;
  const StatePlacement s = place_model_states(c, kMixed);
  EXPECT_EQ(s.gradients.gpu, 4 * P / G);
  EXPECT_EQ(s.gpu_model_states(), 2 * P + 16 * P / G);
  EXPECT_EQ(s.reduce_bucket.gpu, 0);
  expect_gpu_only(s);
}

// ZeRO-3 over g ranks: 16 P / g; with Q persistent parameters kept whole on every rank the
// parameters are 2 ((P - Q) / g + Q), the rest unchanged: 16 P / g + 2 Q (1 - 1 / g).
TEST(Placement, ZeroStage3PartitionsEverything) {
  const StatePlacement s = place_model_states(zero(3), kMixed);
  EXPECT_EQ(s.gpu_model_states(), 16 * P / G);
  EXPECT_EQ(s.parameter_elements, P / G);
  StateCounts c = zero(3);
  constexpr std::int64_t Q = 800'000;
  c.persistent = Q;
  const StatePlacement q = place_model_states(c, kMixed);
  EXPECT_EQ(q.parameters.gpu, 2 * ((P - Q) / G + Q));
  EXPECT_EQ(q.gpu_model_states(), 16 * P / G + 2 * Q - 2 * Q / G);
  expect_gpu_only(q);
}

// ZeRO-3 with the optimizer on the CPU (ratio 1: C = U = P / g updated on the host): the GPU keeps
// its bf16 parameter partition 2P / g and nothing else; the host keeps the 12 B/param optimizer
// states 12P / g, the fp32 gradients 4P / g and a bf16 buffer of the gradient partition 2P / g.
TEST(Placement, CpuOptimizerOffloadMovesStatesAndFp32GradientsToTheHost) {
  StateCounts c = zero(3);
  c.optimizer_offload = true;
  c.offloaded_elements = P / G;
  const StatePlacement s = place_model_states(c, kMixed);
  EXPECT_EQ(s.gpu_model_states(), 2 * P / G);
  EXPECT_EQ(s.optimizer.host, 12 * P / G);
  EXPECT_EQ(s.gradients.host, 4 * P / G);
  EXPECT_EQ(s.gradient_buffer.host, 2 * P / G);
  EXPECT_EQ(s.optimizer.nvme + s.gradients.nvme + s.swap_buffers.host, 0);
  // ZeRO-2 keeps no bf16 host buffer, and its parameters whole on the GPU: 2P there, nothing else.
  c.partitioned = ZeroPolicy::partitioning_of_stage(2);
  const StatePlacement two = place_model_states(c, kMixed);
  EXPECT_EQ(two.gradient_buffer.host, 0);
  EXPECT_EQ(two.gpu_model_states(), 2 * P);
}

// Twin-Flow: of U = P / g updated parameters C = U / 4 on the CPU. GPU: fp32 gradients and
// optimizer states of the rest, (4 + 12)(U - C); host: (12 + 4) C; together 16 U as without offload
// except that the gradients are fp32 (4 B, not 2).
TEST(Placement, TwinFlowSplitsTheOptimizerBetweenGpuAndHost) {
  constexpr std::int64_t U = P / G;
  constexpr std::int64_t C = U / 4;
  StateCounts c = zero(3);
  c.optimizer_offload = true;
  c.offloaded_elements = C;
  const StatePlacement s = place_model_states(c, kMixed);
  EXPECT_EQ(s.gradients.gpu, 4 * (U - C));
  EXPECT_EQ(s.optimizer.gpu, 12 * (U - C));
  EXPECT_EQ(s.optimizer.host + s.gradients.host, 16 * C);
  EXPECT_EQ(s.gradients.total() + s.optimizer.total(), 16 * U);
}

// ZeRO-Infinity: the CPU's optimizer states and fp32 gradients on the NVMe, (12 + 4) C; the host
// keeps the pinned swap buffers, 4 B per buffered element (buffer_count x largest subgroup).
// Parameter offload puts the bf16 parameter partition 2P / g in host memory: nothing on the GPU.
TEST(Placement, NvmeAndParameterOffload) {
  constexpr std::int64_t U = P / G;
  StateCounts c = zero(3);
  c.optimizer_offload = true;
  c.offloaded_elements = U;
  c.nvme = true;
  c.swap_buffer_elements = 4 * 100'000;
  c.parameter_offload = true;
  const StatePlacement s = place_model_states(c, kMixed);
  EXPECT_EQ(s.optimizer.nvme, 12 * U);
  EXPECT_EQ(s.gradients.nvme, 4 * U);
  EXPECT_EQ(s.optimizer.host + s.gradients.host, 0);
  EXPECT_EQ(s.swap_buffers.host, 4 * 4 * 100'000);
  EXPECT_EQ(s.parameters.host, 2 * U);
  EXPECT_EQ(s.parameters.gpu, 0);
  EXPECT_EQ(s.gpu_model_states(), 0);
}

// hpZ: a secondary partition of S elements adds 2S to the GPU's model states.
TEST(Placement, HpzSecondaryPartitionCountsOnTheGpu) {
  StateCounts c = zero(3);
  c.secondary_elements = P / 2;
  EXPECT_EQ(place_model_states(c, kMixed).gpu_model_states(), 16 * P / G + 2 * (P / 2));
}

// A rank's share of a sharded tensor rounds up: 10 elements over 4 ranks is 3 per rank, so ZeRO-3
// holds 16 x 3 = 48 B. With expert parallelism a rank holds fewer (P = 6) than ZeRO shards
// (P_model = 10): stages 0-1 keep the held gradients, 2 x 6, stages 2-3 the shard, 2 x 3.
TEST(Placement, SharesRoundUpAndFollowTheShardedCount) {
  StateCounts c;
  c.held = 6;
  c.sharded = 10;
  c.shard_ranks = 4;
  c.partitioned = ZeroPolicy::partitioning_of_stage(3);
  EXPECT_EQ(place_model_states(c, kMixed).gpu_model_states(), 48);
  c.partitioned = ZeroPolicy::partitioning_of_stage(1);
  EXPECT_EQ(place_model_states(c, kMixed).gradients.gpu, 12);
  EXPECT_EQ(place_model_states(c, kMixed).updated_elements, 3);
  c.partitioned = ZeroPolicy::partitioning_of_stage(2);
  EXPECT_EQ(place_model_states(c, kMixed).gradients.gpu, 6);
  EXPECT_EQ(updated_parameters(ZeroPolicy::partitioning_of_stage(0), 6, 10, 4), 6);
}

}  // namespace
}  // namespace offsim::models
