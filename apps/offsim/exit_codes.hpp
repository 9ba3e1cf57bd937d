#pragma once
// How the CLI turns an exception into its exit code and message (docs/fuzzing.md, README):
//   2  bad input: a configuration error (every problem located file:line:col: key: why), a
//      calibration or machine the command cannot use, an argument that names nothing;
//   3  the simulation cannot be done on this machine: out of memory, an output that cannot be
//      written, a simulation beyond offsim's limits (a time past the 64-bit picosecond clock);
//   70 an internal error, a bug in offsim (sysexits' EX_SOFTWARE): a broken invariant
//      (std::logic_error), the engine in a state a correct model cannot reach (SimulationError).
// main() calls report_exception from its only catch; tests/unit/exit_codes_test.cpp checks the
// mapping for each kind of exception, which no valid or invalid input should reach for 70.
#include <fmt/format.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <exception>
#include <new>
#include <stdexcept>
#include <string>
#include <string_view>

#include "models/cost/calibration.hpp"
#include "sim/config/config_reader.hpp"
#include "sim/core/errors.hpp"
#include "topologies/topology.hpp"

namespace offsim::app {

inline constexpr int kExitBadInput = 2;
inline constexpr int kExitSimulationError = 3;
inline constexpr int kExitInternalError = 70;

struct ExitReport {
  int code = 0;
  std::string message;  // for stderr, one or more lines, each ending in a newline
};

/// A bug in offsim, not in the user's input: exit 70 with a request for a report. `version` is
/// offsim's version and commit, as `offsim --version` prints them.
inline ExitReport internal_error(const std::string& what, std::string_view version) {
  return {kExitInternalError,
          fmt::format("internal error: {}\nThis is a bug in offsim {}, not in your input: please report it with the "
                      "command line and the input files.\n",
                      what, version)};
}

/// The exit code and message for an exception that left a command.
inline ExitReport report_exception(const std::exception_ptr& error, std::string_view version) {
  try {
    std::rethrow_exception(error);
  } catch (const sim::config::ConfigError& e) {
    return {kExitBadInput, fmt::format("{}\n", e.what())};
  } catch (const models::CalibrationError& e) {
    return {kExitBadInput, fmt::format("error: {}\n", e.what())};
  } catch (const topo::TopologyError& e) {
    return {kExitBadInput, fmt::format("error: {}\n", e.what())};
  } catch (const sim::SimulationLimit& e) {
    // A valid input whose simulation leaves the clock: not a bug, not bad input.
    return {kExitSimulationError, fmt::format("error: cannot simulate: {}\n", e.what())};
  } catch (const sim::SimulationError& e) {
    // The engine reached a state a correct model cannot reach (a deadlock, time going backwards).
    return internal_error(fmt::format("simulation error: {}", e.what()), version);
  } catch (const std::invalid_argument& e) {
    // What the input asks for cannot be done (a missing run to diff, a strategy the machine
    // cannot host): bad input.
    return {kExitBadInput, fmt::format("error: {}\n", e.what())};
  } catch (const std::bad_alloc&) {
    return {kExitSimulationError,
            "error: the simulation needs more memory than this machine has: simulate fewer nodes, layers or "
            "micro-batches (rank symmetry is on unless --all-ranks), or run where there is more memory\n"};
  } catch (const std::logic_error& e) {
    return internal_error(e.what(), version);  // a broken invariant of offsim's own
  } catch (const std::runtime_error& e) {
    // The environment: an output that cannot be written, a file that cannot be read.
    return {kExitSimulationError, fmt::format("error: {}\n", e.what())};
  } catch (const std::exception& e) {
    return internal_error(e.what(), version);
  } catch (...) {
    return internal_error("an exception of unknown type", version);
  }
}

/// `code` once `out` (standard output) is flushed, or 3 with a message on stderr when what the
/// command printed could not all be written: `offsim run ... > file` on a full disk otherwise
/// exits 0 with the report lost in stdio's buffer. A failing command keeps its own code.
inline int with_output_flushed(std::FILE* out, int code) {
  errno = 0;
  const bool flushed = std::fflush(out) == 0;
  if (flushed && std::ferror(out) == 0) return code;
  const int why = errno;
  fmt::print(stderr, "error: cannot write the standard output{}\n",
             !flushed && why != 0 ? fmt::format(": {}", std::strerror(why)) : std::string());
  return code == 0 ? kExitSimulationError : code;
}

}  // namespace offsim::app
