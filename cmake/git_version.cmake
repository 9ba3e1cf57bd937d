# Provenance: the git hash is stamped into every output (summary.json "offsim.git", --version).
# It is read at every build, not once at configure time: an incremental build after a commit names
# that commit. Included from CMakeLists.txt, this file defines the target offsim_git_hash, which runs
# it again as a script (cmake -P) to write build/generated/offsim_git_hash.hpp, rewritten only when
# the hash changes, so that nothing recompiles otherwise.
if(CMAKE_SCRIPT_MODE_FILE)
  set(hash "unknown")
  if(GIT_EXECUTABLE)
    execute_process(COMMAND ${GIT_EXECUTABLE} rev-parse --short=12 HEAD
      WORKING_DIRECTORY ${SOURCE_DIR}
      OUTPUT_VARIABLE git_hash OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET RESULT_VARIABLE git_rc)
    if(git_rc EQUAL 0 AND git_hash)
      set(hash "${git_hash}")
    endif()
  endif()
  set(text "#pragma once\n// Written at every build by cmake/git_version.cmake.\n#define OFFSIM_GIT_HASH \"${hash}\"\n")
  set(old "")
  if(EXISTS "${OUTPUT}")
    file(READ "${OUTPUT}" old)
  endif()
  if(NOT old STREQUAL text)
    file(WRITE "${OUTPUT}" "${text}")
  endif()
  return()
endif()

find_package(Git QUIET)
set(OFFSIM_GENERATED_DIR ${CMAKE_BINARY_DIR}/generated)
add_custom_target(offsim_git_hash
  COMMAND ${CMAKE_COMMAND} -DGIT_EXECUTABLE=${GIT_EXECUTABLE} -DSOURCE_DIR=${CMAKE_CURRENT_SOURCE_DIR}
          -DOUTPUT=${OFFSIM_GENERATED_DIR}/offsim_git_hash.hpp -P ${CMAKE_CURRENT_LIST_FILE}
  BYPRODUCTS ${OFFSIM_GENERATED_DIR}/offsim_git_hash.hpp
  VERBATIM)
