#pragma once
// DeepSpeed's pipeline engine (deepspeed/runtime/pipe, read at v0.10.0, f5c834a6 of 2023-07-17:
// the version line Dash et al.'s Megatron-DeepSpeed runs on Frontier used), as a schedule the
// Megatron builder runs over the same layer phases as Megatron's own 1F1B.
//
// What the engine launches per training batch (PipelineEngine.train_batch -> _exec_schedule):
// - TrainSchedule.steps() (schedule.py): 2 (m + p - 1) lock-step steps. Stage s runs the forward of
//   micro-batch k at step 2k + s and its backward at step 2k + 2p - 1 - s, so the order of a
//   stage's compute is the same as Megatron's 1F1B (p - s forwards, then one backward one forward,
//   then the remaining backwards). What differs is where the transfers sit: a step's
//   communication comes before its compute, and a result is sent in the *next* step. A forward
//   step runs SendGrad(previous step's backward) to s - 1, then RecvActivation from s - 1, then
//   the forward; a backward step runs RecvGrad from s + 1, then SendActivation(previous step's
//   forward) to s + 1, then the backward. After the last step: ReduceTiedGrads, ReduceGrads,
//   OptimizerStep.
// - p2p.send / p2p.recv (p2p.py): with torch >= 1.8 dist.send / dist.recv (before it, a broadcast
//   over a 2-rank group: the same pairing), `async_op` asserted False. On NCCL/RCCL the call queues
//   the transfer on the communication stream and makes the compute stream wait for it, and a
//   message larger than the channel buffers moves only once the peer has posted its side: each
//   send meets its recv (a rendezvous), the two ranks' compute waits for it, and a step's two
//   transfers run one after the other. BlockingPointToPoint builds exactly that: one transfer
//   after both ranks reach it, both ranks going on after it ends.
// - With tp > 1 (engine.py: is_pipe_partitioned = is_grad_partitioned = is_model_parallel) each
//   TP rank sends its 1/tp part of the tensor (PartitionedTensor) and the receiver all-gathers it
//   over the TP group before use: the forward's input, and in the backward the forward's output
//   (restored for autograd) and the received gradient (MegatronBuilder::gather_partitioned).
// - Neither the meta handshake of the first send (_send_tensor_meta: a few small tensors, once per
//   run, not per iteration) nor the host's instruction loop is costed: no measurement of the
//   engine's per-micro-batch host costs is in our sources.
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "models/collectives/communicator.hpp"
#include "models/strategies/phases/rank_timeline.hpp"
#include "models/strategies/phases/tied_embedding.hpp"
#include "models/transformer/phases.hpp"
#include "sim/core/units.hpp"
#include "sim/exec/task_graph.hpp"

namespace offsim::models {

/// One instruction of TrainSchedule for one stage (LoadMicroBatch and the end-of-batch reduce and
/// step instructions are the caller's: the first has no device cost here, the others are the
/// data-parallel step after the schedule).
struct PipeInstruction {
  enum class Kind { kSendGrad, kRecvActivation, kForward, kRecvGrad, kSendActivation, kBackward };
  Kind kind = Kind::kForward;
  int micro_batch = 0;
  [[nodiscard]] bool compute() const { return kind == Kind::kForward || kind == Kind::kBackward; }
  [[nodiscard]] bool forward() const { return kind == Kind::kForward; }
  /// A transfer with the next stage (activations out, gradients in); otherwise with the previous.
  [[nodiscard]] bool with_next_stage() const { return kind == Kind::kRecvGrad || kind == Kind::kSendActivation; }
  [[nodiscard]] bool sends() const { return kind == Kind::kSendGrad || kind == Kind::kSendActivation; }
  [[nodiscard]] bool carries_activation() const {
    return kind == Kind::kRecvActivation || kind == Kind::kSendActivation;
  }
  friend bool operator==(const PipeInstruction&, const PipeInstruction&) = default;
};

/// The report's note on what of the engine is costed and what is not (the first of a
/// Megatron-DeepSpeed pipeline run's approximations).
[[nodiscard]] std::string deepspeed_pipeline_approximation();

/// The readers' error at strategy.schedule: interleaved asked for under DeepSpeed's engine.
[[nodiscard]] std::string interleaved_under_deepspeed();

/// TrainSchedule(micro_batches = m, stages, stage_id = stage).steps(), flattened in order.
[[nodiscard]] std::vector<PipeInstruction> deepspeed_train_schedule(int stages, int stage, int m);

/// DeepSpeed's blocking point-to-point between pipeline stages: each rank posts its sends and
/// recvs in its program order (post), and connect() adds one transfer per matched send and recv,
/// after both posts, which both ranks wait for before their next task.
class BlockingPointToPoint {
 public:
  /// One message: activations (forward) or their gradients of micro-batch mb, from rank `from` to
  /// rank `to` (job ranks); `stage`: the sender's virtual stage (for the task's name).
  struct Message {
    bool activation = true;
    int micro_batch = 0;
    int from = 0;
    int to = 0;
    int stage = 0;
    friend auto operator<=>(const Message&, const Message&) = default;
  };
  /// The transfer of a message: its route and bytes.
  using MakeTransfer = std::function<sim::TransferTask(const Message&)>;

  explicit BlockingPointToPoint(sim::TaskGraph& graph) : graph_(graph) {}

  /// Rank `prefix` reaches its side of `message` after `previous`; returns the task its program
  /// goes on from (a barrier that connect() makes wait for the transfer).
  sim::TaskId post(const std::string& prefix, const Message& message, bool sender, sim::TaskId previous);

  /// The transfers of every message both sides posted (a side whose peer is not simulated goes on
  /// at once: the same as the schedules that only take transfers between simulated ranks).
  void connect(const MakeTransfer& make, const char* phase);

 private:
  struct Sides {
    sim::TaskId send_at{};
    sim::TaskId send_done{};
    sim::TaskId recv_at{};
    sim::TaskId recv_done{};
    bool sent = false;
    bool received = false;
  };
  sim::TaskGraph& graph_;
  std::map<Message, Sides> messages_;
};

/// One TP group of one stage running TrainSchedule: its members (simulated ranks) in the order the
/// callbacks index them; compute adds a forward or backward after each member's task and returns
/// each member's last task; peer gives the job rank of member i's counterpart on a stage.
struct TrainScheduleRun {
  struct Member {
    int rank = 0;        // job rank
    std::string prefix;  // its tasks' prefix ("r<rank>")
    sim::TaskId ready{};
  };
  int stages = 1;
  int stage = 0;
  int micro_batches = 1;
  std::vector<Member> members;
  std::function<std::vector<sim::TaskId>(const PipeInstruction&, std::vector<sim::TaskId>)> compute;
  std::function<int(std::size_t member, int peer_stage)> peer;
};

/// The group's instructions in order: computes through run.compute, each send and recv posted to
/// p2p. Returns each member's last task (a send's end where the stage ends with one).
std::vector<sim::TaskId> run_train_schedule(const TrainScheduleRun& run, BlockingPointToPoint& p2p);

/// With tp > 1 the engine sends each pipeline tensor partitioned over the TP group
/// (is_pipe_partitioned = is_grad_partitioned = is_model_parallel, engine.py) and gathers it whole
/// before use (PartitionedTensor.full(): an all-gather over the TP group): a forward after the first
/// stage gathers its input, a backward before the last stage its forward's output (restored for
/// autograd) and then the received gradient. `at`: each member's task before; returns after.
std::vector<sim::TaskId> gather_partitioned(Communicator& tp_group, const std::string& prefix, int stages, int stage,
                                            const PipeInstruction& ins, std::int64_t elements,
                                            const CollectivePlan& plan, std::vector<sim::TaskId> at);

}  // namespace offsim::models
