// The unit test binary's own environment, so that running build/tests/offsim_unit_tests directly
// (from any folder, e.g. under a debugger) behaves as it does under ctest.
//
// Many tests write experiments to temporary folders that !include the repository's configs and
// tests/data by absolute path; the include boundary (sim/config/config_reader.hpp) refuses that
// unless OFFSIM_ALLOW_INCLUDE_OUTSIDE is set. ctest sets it (tests/CMakeLists.txt); before this,
// a direct run failed 52 tests on that refusal. The tests of the refusal itself unset it around
// their reads, as they do under ctest. An explicit value in the caller's environment is kept.
#include <cstdlib>

#include <gtest/gtest.h>

namespace {

class AllowTestIncludesOutsideTheirFolder : public ::testing::Environment {
 public:
  void SetUp() override { ::setenv("OFFSIM_ALLOW_INCLUDE_OUTSIDE", "1", /*overwrite=*/0); }
};

// gtest_main runs the registered environments before the first test.
[[maybe_unused]] ::testing::Environment* const kRegistered =
    ::testing::AddGlobalTestEnvironment(new AllowTestIncludesOutsideTheirFolder);

}  // namespace
