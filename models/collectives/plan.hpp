#pragma once
// How a collective runs: the hierarchy bands of its stages, the algorithm and the wire format.
// The semantics are in models/collectives/communicator.hpp.
#include <cstdint>
#include <string>
#include <vector>

namespace offsim::models {

/// A band of the rank hierarchy: subgroups of hi/lo ranks with stride lo.
struct Band {
  std::string name;
  int lo = 1;
  int hi = 1;
  [[nodiscard]] int group() const { return hi / lo; }
};

/// Bytes on the wire per element: bf16 (2 B) when bits is 16; otherwise bits/8 per element plus
/// one scale of scale_bytes per group_elements elements.
struct Quantization {
  int bits = 16;
  std::int64_t group_elements = 0;
  std::int64_t scale_bytes = 0;
  std::string source;
  [[nodiscard]] bool quantized() const { return bits < 16; }
  [[nodiscard]] std::int64_t wire_bytes(std::int64_t elements) const;
};

enum class StageAlgorithm { kRing, kAllToAll, kTree };  // tree: all-reduce only

/// How one collective runs: its stages in order, the algorithm and the quantization of the wire.
struct CollectivePlan {
  std::vector<Band> stages;
  StageAlgorithm algorithm = StageAlgorithm::kRing;
  Quantization quantization;
};

enum class CollectiveKind { kReduceScatter, kAllGather, kAllReduce };

enum class Fidelity { kFlow, kAnalytic };

struct CollectiveOptions {
  Fidelity fidelity = Fidelity::kFlow;
  int max_ring_steps = 0;  // 0: every ring step; n: steps merged into at most n (latency kept)
  int channels = 1;        // parallel rings, each entering and leaving the nodes at other devices
  // Analytic transfers list the links their flows cross (TransferTask::accounted), for link
  // statistics only; off when the run reports none (a sweep: IterationInputs::link_statistics).
  bool link_statistics = true;
  friend bool operator==(const CollectiveOptions&, const CollectiveOptions&) = default;
};

}  // namespace offsim::models
