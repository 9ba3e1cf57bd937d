// The CLI's exit codes (apps/offsim/exit_codes.hpp): which exception gives 2 (bad input), 3 (the
// simulation cannot be done: out of memory, an output that cannot be written, a simulation
// beyond the 64-bit clock) and 70 (an internal error asking for a bug report). No input reaches
// 70 by design, so the mapping is tested here directly; tests/cli/cli_test.sh runs 2 and 3.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <new>
#include <stdexcept>
#include <string>
#include <system_error>

#include "apps/offsim/commands.hpp"
#include "apps/offsim/exit_codes.hpp"
#include "sim/core/units.hpp"
#include "sim/report/atomic_file.hpp"

namespace offsim::app {
namespace {

template <class E>
ExitReport report_of(const E& e) {
  return report_exception(std::make_exception_ptr(e), "9.9.9 (abc123)");
}

std::string first_line(const std::string& s) {
  return s.substr(0, s.find('\n'));
}

TEST(ExitCodes, InternalErrorsExit70AndAskForABugReport) {
  for (const ExitReport& r :
       {report_of(sim::SimulationError("time may not go backwards")), report_of(std::logic_error("broken invariant")),
        report_of(std::domain_error("nan")), report_of(std::bad_exception()), report_of(42)}) {
    EXPECT_EQ(r.code, 70);
    EXPECT_EQ(r.message.rfind("internal error: ", 0), 0u) << r.message;
    EXPECT_NE(r.message.find("This is a bug in offsim 9.9.9 (abc123), not in your input: please report it with the "
                             "command line and the input files.\n"),
              std::string::npos)
        << r.message;
  }
  EXPECT_EQ(first_line(report_of(sim::SimulationError("time may not go backwards")).message),
            "internal error: simulation error: time may not go backwards");
  EXPECT_EQ(first_line(report_of(std::logic_error("broken invariant")).message), "internal error: broken invariant");
  EXPECT_EQ(first_line(report_of(42).message), "internal error: an exception of unknown type");
}

TEST(ExitCodes, BadInputExits2) {
  const ExitReport config = report_of(sim::config::ConfigError(
      {sim::config::Diagnostic{sim::config::Location{"x.yaml", 3, 7}, "training.micro_batch", "expected >= 1"}}));
  EXPECT_EQ(config.code, 2);
  EXPECT_EQ(config.message, "x.yaml:3:7: training.micro_batch: expected >= 1\n");
  for (const ExitReport& r : {report_of(std::invalid_argument("no such run")), report_of(topo::TopologyError("t")),
                              report_of(models::CalibrationError("c"))}) {
    EXPECT_EQ(r.code, 2);
    EXPECT_EQ(r.message.rfind("error: ", 0), 0u) << r.message;
  }
}

TEST(ExitCodes, SimulationLimitsOutOfMemoryAndOutputsExit3) {
  // A duration beyond the clock, from the units themselves.
  try {
    (void)sim::duration_of(1e9, 1e-300);
    FAIL() << "expected a SimulationLimit";
  } catch (const sim::SimulationLimit& e) {
    const ExitReport r = report_exception(std::current_exception(), "v");
    EXPECT_EQ(r.code, 3);
    EXPECT_EQ(first_line(r.message).rfind("error: cannot simulate: a duration of inf s (1e+09 B at 1e-300 B/s)", 0), 0u)
        << r.message;
  }
  const ExitReport memory = report_of(std::bad_alloc());
  EXPECT_EQ(memory.code, 3);
  EXPECT_EQ(memory.message.rfind("error: the simulation needs more memory than this machine has", 0), 0u);
  const ExitReport output =
      report_of(sim::report::OutputError("cannot write out/summary.json: No space left on device"));
  EXPECT_EQ(output.code, 3);
  EXPECT_EQ(output.message, "error: cannot write out/summary.json: No space left on device\n");
  EXPECT_EQ(report_of(std::runtime_error("cannot read x")).code, 3);
  EXPECT_EQ(report_of(std::filesystem::filesystem_error("cannot create directories", std::error_code())).code, 3);
}

// sweep and search turn their own runtime errors (an existing output without --resume) into bad
// input, but let a simulation limit and an output that cannot be written through to exit 3.
TEST(ExitCodes, SweepAndSearchKeepExit3ForOutputsAndLimits) {
  EXPECT_EQ(runtime_errors_are_bad_input([]() -> int { throw std::runtime_error("out.csv exists: give --resume"); }),
            2);
  EXPECT_THROW((void)runtime_errors_are_bad_input([]() -> int { throw sim::report::OutputError("cannot write"); }),
               sim::report::OutputError);
  EXPECT_THROW((void)runtime_errors_are_bad_input([]() -> int { throw sim::SimulationLimit("clock"); }),
               sim::SimulationLimit);
  EXPECT_THROW((void)runtime_errors_are_bad_input(
                   []() -> int { throw std::filesystem::filesystem_error("mkdir", std::error_code()); }),
               std::filesystem::filesystem_error);
}

TEST(ExitCodes, AReportThatCannotBeWrittenToStandardOutputExits3) {
  // /dev/full refuses every write (ENOSPC), as a full disk behind `offsim run ... > report.txt`
  // does.
  std::FILE* full = std::fopen("/dev/full", "w");
  if (full == nullptr) GTEST_SKIP() << "no /dev/full on this machine";
  std::fputs("iteration time 1.000 s\n", full);
  testing::internal::CaptureStderr();
  EXPECT_EQ(with_output_flushed(full, 0), kExitSimulationError);
  // (with the reason when the flush itself failed; stdio may have met the error at the write)
  EXPECT_TRUE(testing::internal::GetCapturedStderr().starts_with("error: cannot write the standard output"));
  // A command that failed keeps its own code.
  std::fputs("more\n", full);
  testing::internal::CaptureStderr();
  EXPECT_EQ(with_output_flushed(full, kExitBadInput), kExitBadInput);
  (void)testing::internal::GetCapturedStderr();
  std::fclose(full);
  // Written: the command's code.
  std::FILE* fine = std::tmpfile();
  ASSERT_NE(fine, nullptr);
  std::fputs("iteration time 1.000 s\n", fine);
  EXPECT_EQ(with_output_flushed(fine, 0), 0);
  std::fclose(fine);
}

}  // namespace
}  // namespace offsim::app
