#pragma once
// The phases of a training iteration, as tasks are grouped (the second argument of TaskGraph::add)
// and as spans report them (PhaseSpan, summary.json's *_s keys, the report's phase table). One
// definition of each name for the builders that write them and the figures, validation and reports
// that read them.
namespace offsim::models::phase {

inline constexpr const char* kForward = "forward";
inline constexpr const char* kBackward = "backward";
inline constexpr const char* kOptimizer = "optimizer";
inline constexpr const char* kCommunication = "communication";  // collectives and their buffers
// Spans only: the parts of an iteration beyond the three compute phases.
inline constexpr const char* kCollective = "collective";  // a collective benchmark's one operation
inline constexpr const char* kExposedCommunication = "exposed_communication";
inline constexpr const char* kGradientReduction = "gradient_reduction";
inline constexpr const char* kParameterAllgather = "parameter_allgather";
inline constexpr const char* kPipelineBubble = "pipeline_bubble";
inline constexpr const char* kNvmeGradientFlush = "nvme_gradient_flush";

}  // namespace offsim::models::phase
