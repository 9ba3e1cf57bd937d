#pragma once
// Typed exceptions of the engine. Only the CLI's main maps them to exit codes
// (apps/offsim/commands.hpp: a SimulationError is an internal error, exit 70).
#include <stdexcept>

namespace offsim::sim {

/// The simulation reached a state that cannot happen in a correct model (time going backwards,
/// a task graph that deadlocks, a resource used after its simulation ended).
class SimulationError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace offsim::sim
