#pragma once
// Typed exceptions of the engine. Only the CLI's main maps them to exit codes
// (apps/offsim/commands.hpp: a SimulationError is an internal error, exit 70; a SimulationLimit
// is a simulation that cannot be done, exit 3).
#include <stdexcept>

namespace offsim::sim {

/// The simulation reached a state that cannot happen in a correct model (time going backwards,
/// a task graph that deadlocks, a resource used after its simulation ended).
class SimulationError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// A valid input whose simulation leaves offsim's limits: a duration or a time beyond the 64-bit
/// picosecond clock (2^63 - 1 ps, about 106.75 days; sim/core/units.hpp). Not a bug: the message
/// names the quantity, and the CLI exits 3.
class SimulationLimit : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace offsim::sim
