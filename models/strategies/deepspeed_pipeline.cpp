// DeepSpeed's pipeline engine's schedule and blocking point-to-point (deepspeed_pipeline.hpp).
#include "models/strategies/deepspeed_pipeline.hpp"

#include <fmt/format.h>

namespace offsim::models {

namespace {

using Kind = PipeInstruction::Kind;

// TrainSchedule._step_to_micro_batch: the micro-batch of a step and whether it is a forward step
// (even steps forward on even stages, odd steps on odd stages).
struct StepWork {
  int micro_batch = 0;
  bool forward = true;
};
[[nodiscard]] StepWork step_work(int step, int stages, int stage) {
  const bool even_step = step % 2 == 0;
  const bool even_stage = stage % 2 == 0;
  if (even_step && even_stage) return {step / 2 - stage / 2, true};
  if (!even_step && !even_stage) return {(step - 1) / 2 - stage / 2, true};
  if (even_step && !even_stage) return {step / 2 - stages + (stage + 1) / 2, false};
  return {((step - 1) / 2) - stages + 1 + stage / 2, false};
}

}  // namespace

std::string deepspeed_pipeline_approximation() {
  return "largest uncertainty of Megatron-DeepSpeed's pipeline, not measured: DeepSpeed's pipeline engine "
         "(runtime/pipe of v0.10.0) is costed as its TrainSchedule with blocking send/recv (each transfer a "
         "rendezvous that holds both stages' compute, a step's two transfers one after the other; with tp > 1 "
         "each tensor sent as 1/tp per TP rank and all-gathered over the TP group before use); not costed, "
         "for want of any measurement in our sources: the engine's per-micro-batch host work (its Python "
         "instruction loop, the input clones, the partitioning copies, DeepSpeed's activation checkpointing); "
         "the tied embedding's gradient all-reduce between the first and last stage (ReduceTiedGrads) runs as "
         "a two-rank ring of flows, without a collective efficiency table";
}

std::string interleaved_under_deepspeed() {
  return "interleaved is Megatron's own schedule; DeepSpeed's pipeline engine (strategy.pipeline_engine: deepspeed, "
         "the default with optimizer: deepspeed or training.framework: deepspeed-megatron and pp > 1) runs only "
         "TrainSchedule, one stage per rank (runtime/pipe/schedule.py): use schedule: 1f1b, or pipeline_engine: "
         "megatron";
}

std::vector<PipeInstruction> deepspeed_train_schedule(int stages, int stage, int m) {
  std::vector<PipeInstruction> out;
  const auto valid = [m](int mb) { return mb >= 0 && mb < m; };
  const bool has_previous = stage > 0;
  const bool has_next = stage < stages - 1;
  int previous_mb = -1;
  const int total_steps = 2 * (m + stages - 1);
  for (int step = 0; step < total_steps; ++step) {
    const StepWork w = step_work(step, stages, stage);
    if (w.forward) {
      if (valid(previous_mb) && has_previous) out.push_back({Kind::kSendGrad, previous_mb});
      if (valid(w.micro_batch) && has_previous) out.push_back({Kind::kRecvActivation, w.micro_batch});
    } else {
      if (valid(w.micro_batch) && has_next) out.push_back({Kind::kRecvGrad, w.micro_batch});
      if (valid(previous_mb) && has_next) out.push_back({Kind::kSendActivation, previous_mb});
    }
    if (valid(w.micro_batch)) out.push_back({w.forward ? Kind::kForward : Kind::kBackward, w.micro_batch});
    previous_mb = w.micro_batch;
  }
  return out;
}

sim::TaskId BlockingPointToPoint::post(const std::string& prefix, const Message& message, bool sender,
                                       sim::TaskId previous) {
  const std::string what =
      fmt::format("{}.{}{}.mb{}", prefix, message.activation ? "act" : "grad", message.stage, message.micro_batch);
  Sides& sides = messages_[message];
  const sim::TaskId at = graph_.add(what + (sender ? ".send" : ".recv"), "pipeline", sim::BarrierTask{}, {previous});
  const sim::TaskId done = graph_.add(what + (sender ? ".sent" : ".received"), "pipeline", sim::BarrierTask{}, {at});
  if (sender) {
    sides.send_at = at;
    sides.send_done = done;
    sides.sent = true;
  } else {
    sides.recv_at = at;
    sides.recv_done = done;
    sides.received = true;
  }
  return done;
}

void BlockingPointToPoint::connect(const MakeTransfer& make, const char* phase) {
  for (const auto& [message, sides] : messages_) {
    if (!sides.sent || !sides.received) continue;
    const auto name = fmt::format("p2p.{}{}.mb{}.r{}to{}", message.activation ? "act" : "grad", message.stage,
                                  message.micro_batch, message.from, message.to);
    const sim::TaskId transfer = graph_.add(name, phase, make(message), {sides.send_at, sides.recv_at});
    graph_.add_dependency(sides.send_done, transfer);
    graph_.add_dependency(sides.recv_done, transfer);
  }
}

}  // namespace offsim::models

namespace offsim::models {

std::vector<sim::TaskId> run_train_schedule(const TrainScheduleRun& run, BlockingPointToPoint& p2p) {
  std::vector<sim::TaskId> at;
  for (const auto& member : run.members) at.push_back(member.ready);
  for (const PipeInstruction& ins : deepspeed_train_schedule(run.stages, run.stage, run.micro_batches)) {
    if (ins.compute()) {
      at = run.compute(ins, std::move(at));
      continue;
    }
    const int peer_stage = ins.with_next_stage() ? run.stage + 1 : run.stage - 1;
    for (std::size_t i = 0; i < run.members.size(); ++i) {
      const int self = run.members[i].rank;
      const int peer = run.peer(i, peer_stage);
      const bool sends = ins.sends();
      const BlockingPointToPoint::Message message{ins.carries_activation(), ins.micro_batch, sends ? self : peer,
                                                  sends ? peer : self, sends ? run.stage : peer_stage};
      at[i] = p2p.post(run.members[i].prefix, message, sends, at[i]);
    }
  }
  return at;
}

std::vector<sim::TaskId> gather_partitioned(Communicator& tp_group, const std::string& prefix, int stages, int stage,
                                            const PipeInstruction& ins, std::int64_t elements,
                                            const CollectivePlan& plan, std::vector<sim::TaskId> at) {
  std::vector<const char*> gathers;
  if (ins.forward() && stage > 0) gathers = {"input"};
  if (!ins.forward() && stage < stages - 1) gathers = {"output", "grad"};
  for (const char* what : gathers) {
    std::vector<std::vector<sim::TaskId>> deps(at.size());
    for (std::size_t i = 0; i < at.size(); ++i) deps[i] = {at[i]};
    const auto name =
        fmt::format("{}.{}{}.mb{}.gather.{}", prefix, ins.forward() ? "F" : "B", stage, ins.micro_batch, what);
    at = tp_group.add(CollectiveKind::kAllGather, name, elements, plan, deps);
  }
  return at;
}

}  // namespace offsim::models
