# One static library per folder of src/ ("module"), with its dependencies declared, and the
# table of allowed #include edges that cmake/check_layers.cmake holds every source file to.
#
#   gpulet_module(NAME [NO_PCH] [SIZE] [DIR dir] [SOURCES file...] [EXTRA_SRCS file...]
#                 [DEPS module...] [LIBS target...])
#     Builds gpulet_NAME from DIR/*.cc (default src/NAME; tests and fuzz targets excluded),
#     or from SOURCES, plus EXTRA_SRCS. DEPS are other modules (linked PUBLIC and allowed as
#     include edges); LIBS are external targets (linked only). Compiled with the modules'
#     precompiled header (below) unless NO_PCH. SIZE: code that runs once or on a person's
#     command, never on the sampler's or a scrape's path (commands, doctor, manifests, the
#     cluster's and Talos' API calls), compiled for size (-Os) in optimised builds that are
#     not sanitized: about a third less code (2026-12-07, serve_command.cc 150 KB to 101 KB,
#     doctor.cc 74 KB to 40 KB), which keeps the image under its 20 MB.
#   gpulet_layer(NAME [DEPS module...])
#     Adds include edges only: for the top-level programs, header-only uses, and the
#     generated protobuf code (layer "proto").
#   gpulet_write_layers(FILE)
#     Writes the table ("name: dep dep ...", one line per call) for the check.

function(gpulet_layer name)
  cmake_parse_arguments(L "" "" "DEPS" ${ARGN})
  string(REPLACE ";" " " deps "${L_DEPS}")
  set_property(GLOBAL APPEND PROPERTY GPULET_LAYERS "${name}: ${deps}")
endfunction()

# The modules' precompiled header: the standard, Abseil and JSON headers that most of
# src/ includes (counted over its .cc and .h files), parsed once per build instead of once
# per file; about two seconds of compiler time a file. The first module made with it
# (common) builds it, the others reuse it, so every module is compiled with the same flags.
set(GPULET_MODULE_PCH <string> <vector> <optional> <algorithm> <map> <memory> <utility>
  <functional> <cstdint> <absl/strings/str_cat.h> <absl/strings/string_view.h>
  <absl/status/status.h> <absl/status/statusor.h> <absl/strings/match.h>
  <absl/strings/numbers.h> <absl/strings/str_split.h> <absl/strings/str_join.h>
  <absl/strings/ascii.h> <absl/time/time.h> <absl/synchronization/mutex.h>
  <nlohmann/json.hpp>)

# -Os for SIZE modules: only where the build optimises and is not sanitized (the sanitizers'
# builds keep one flag set, and one precompiled header, for every module).
if(CMAKE_BUILD_TYPE MATCHES "Rel" AND NOT GPULET_SANITIZE)
  set(GPULET_SIZE_MODULES ON)
else()
  set(GPULET_SIZE_MODULES OFF)
endif()

function(gpulet_module name)
  cmake_parse_arguments(M "NO_PCH;SIZE" "DIR" "SOURCES;EXTRA_SRCS;DEPS;LIBS" ${ARGN})
  if(NOT M_DIR)
    set(M_DIR ${CMAKE_SOURCE_DIR}/src/${name})
  endif()
  if(M_SOURCES)
    set(srcs ${M_SOURCES})
  else()
    file(GLOB srcs CONFIGURE_DEPENDS ${M_DIR}/*.cc)
    list(FILTER srcs EXCLUDE REGEX "_(test|fuzz)\\.cc$")
  endif()
  set(dep_targets)
  foreach(d IN LISTS M_DEPS)
    list(APPEND dep_targets gpulet_${d})
  endforeach()
  if(srcs OR M_EXTRA_SRCS)
    add_library(gpulet_${name} STATIC ${srcs} ${M_EXTRA_SRCS})
    target_include_directories(gpulet_${name} PUBLIC ${CMAKE_SOURCE_DIR}/src ${CMAKE_SOURCE_DIR})
    target_link_libraries(gpulet_${name} PUBLIC ${dep_targets} ${M_LIBS})
    # A precompiled header is only used with the flags it was built with: the modules
    # compiled for size share one of their own.
    set(pch_group GPULET_MODULE_PCH_OWNER)
    # GPULET_UNITY (make test's sanitizer build): a module's sources compiled as one unit,
    # which parses the headers they share once: 266 s of CPU for every module where file by
    # file took 448 s (two cores, 2026-12-08). `make lint` reads them so already, and the
    # private_names test holds each name private to a file unique in its folder, so joining
    # them changes no call (scripts/private_names.py).
    if(GPULET_UNITY)
      set_target_properties(gpulet_${name} PROPERTIES UNITY_BUILD ON UNITY_BUILD_BATCH_SIZE 0)
    endif()
    if(GPULET_FUZZ)  # CMakeLists.txt: the fuzz targets link these modules
      target_compile_options(gpulet_${name} PRIVATE -fsanitize=fuzzer-no-link)
    endif()
    if(M_SIZE AND GPULET_SIZE_MODULES)
      target_compile_options(gpulet_${name} PRIVATE -Os)
      set(pch_group GPULET_SIZE_MODULE_PCH_OWNER)
    endif()
    if(NOT M_NO_PCH)
      get_property(pch_owner GLOBAL PROPERTY ${pch_group})
      if(pch_owner)
        target_precompile_headers(gpulet_${name} REUSE_FROM ${pch_owner})
      else()
        target_precompile_headers(gpulet_${name} PRIVATE ${GPULET_MODULE_PCH})
        set_property(GLOBAL PROPERTY ${pch_group} gpulet_${name})
      endif()
    endif()
  else()  # headers only
    add_library(gpulet_${name} INTERFACE)
    target_include_directories(gpulet_${name} INTERFACE ${CMAKE_SOURCE_DIR}/src ${CMAKE_SOURCE_DIR})
    target_link_libraries(gpulet_${name} INTERFACE ${dep_targets} ${M_LIBS})
  endif()
  gpulet_layer(${name} DEPS ${M_DEPS})
endfunction()

function(gpulet_write_layers file)
  get_property(layers GLOBAL PROPERTY GPULET_LAYERS)
  string(REPLACE ";" "\n" text "${layers}")
  file(CONFIGURE OUTPUT ${file} CONTENT "${text}\n" @ONLY)
endfunction()
