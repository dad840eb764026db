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
  # CI's budget is two cores: a library's files are compiled four to a translation unit, so that
  # each batch parses the headers they share once (as the CLI's; files keep their private names in
  # namespace blocks of their own).
  set_target_properties(${name} PROPERTIES UNITY_BUILD ON UNITY_BUILD_BATCH_SIZE 4)
  strata_warnings(${name})
endfunction()

# Compute-bound sources are compiled at -O2 in a Debug sanitizer build, still instrumented: at -O0
# their Eigen loops took most of the sanitizer stage's test time (CLI scripts that profile or run).
function(strata_optimise_hot)
  if(STRATA_SANITIZE AND CMAKE_BUILD_TYPE STREQUAL "Debug")
    set_source_files_properties(${ARGN} DIRECTORY ${CMAKE_CURRENT_SOURCE_DIR} PROPERTIES COMPILE_OPTIONS -O2)
  endif()
endfunction()
