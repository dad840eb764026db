# Warnings for Strata's own targets only (never for third-party headers).
function(strata_warnings target)
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wpedantic -Wshadow -Wnon-virtual-dtor -Wno-unused-parameter>)
endfunction()

# One library per folder: sources under src/, public headers under include/strata/<folder>/.
function(strata_library name folder)
  file(GLOB_RECURSE _srcs CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/src/*.cpp)
  add_library(${name} STATIC ${_srcs})
  target_include_directories(${name} PUBLIC ${CMAKE_CURRENT_SOURCE_DIR}/include PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/src)
  strata_warnings(${name})
endfunction()

# Compute-bound sources are compiled at -O2 in a Debug sanitizer build, still instrumented: at -O0
# their Eigen loops took most of the sanitizer stage's test time (CLI scripts that profile or run).
function(strata_optimise_hot)
  if(STRATA_SANITIZE AND CMAKE_BUILD_TYPE STREQUAL "Debug")
    set_source_files_properties(${ARGN} DIRECTORY ${CMAKE_CURRENT_SOURCE_DIR} PROPERTIES COMPILE_OPTIONS -O2)
  endif()
endfunction()
