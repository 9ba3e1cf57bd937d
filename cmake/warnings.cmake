# One INTERFACE target carries the warning flags so every offsim target gets the same set.
add_library(offsim_warnings INTERFACE)
target_compile_options(offsim_warnings INTERFACE
  -Wall -Wextra -Wpedantic -Wshadow -Wconversion -Wno-sign-conversion -Wnon-virtual-dtor
  -Wold-style-cast -Woverloaded-virtual -Wimplicit-fallthrough)
if(OFFSIM_WERROR)
  target_compile_options(offsim_warnings INTERFACE -Werror)
endif()
