# Provenance: the git hash is stamped into every output (summary.json "offsim.git").
find_package(Git QUIET)
set(OFFSIM_GIT_HASH "unknown")
if(GIT_FOUND)
  execute_process(COMMAND ${GIT_EXECUTABLE} rev-parse --short=12 HEAD
    WORKING_DIRECTORY ${CMAKE_CURRENT_SOURCE_DIR}
    OUTPUT_VARIABLE _offsim_git OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET RESULT_VARIABLE _offsim_git_rc)
  if(_offsim_git_rc EQUAL 0 AND _offsim_git)
    set(OFFSIM_GIT_HASH "${_offsim_git}")
  endif()
endif()
