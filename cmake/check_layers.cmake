# Checks every #include "dir/..." in gpulet's sources against the allowed edges that
# CMakeLists.txt declares (gpulet_module / gpulet_layer, written to TABLE):
#   cmake -DSOURCE_DIR=<tree> -DTABLE=<build>/layers.txt -P cmake/check_layers.cmake
#
# A file's layer is its folder (src/<folder>/, or sim/), or the program's name for
# src/main.cc and src/nvml_worker_main.cc. It may include its own folder, the folders its
# layer lists, and theirs, transitively. Includes of folders that are not layers (absl/,
# yaml-cpp/, ...) are external and not checked. Tests (*_test.cc) and fuzz targets
# (*_fuzz.cc) may also include src/testing/ and anything their folder may; nothing else may
# include src/testing/. Exits non-zero listing every wrong-way include with file and line.
cmake_minimum_required(VERSION 3.25)
if(NOT SOURCE_DIR OR NOT TABLE)
  message(FATAL_ERROR "usage: cmake -DSOURCE_DIR=<tree> -DTABLE=<layers.txt> -P check_layers.cmake")
endif()

file(STRINGS ${TABLE} lines)
set(layers)
foreach(line IN LISTS lines)
  if(NOT line MATCHES "^([a-z_]+):(.*)$")
    continue()
  endif()
  set(name ${CMAKE_MATCH_1})
  string(STRIP "${CMAKE_MATCH_2}" deps)
  separate_arguments(deps UNIX_COMMAND "${deps}")
  list(APPEND layers ${name})
  list(APPEND direct_${name} ${deps})
endforeach()
list(REMOVE_DUPLICATES layers)

# Transitive closure of each layer's edges.
foreach(name IN LISTS layers)
  set(closure ${direct_${name}})
  set(frontier ${direct_${name}})
  while(frontier)
    list(POP_FRONT frontier d)
    foreach(dd IN LISTS direct_${d})
      if(NOT dd IN_LIST closure)
        list(APPEND closure ${dd})
        list(APPEND frontier ${dd})
      endif()
    endforeach()
  endwhile()
  set(allowed_${name} ${name} ${closure})
endforeach()

file(GLOB_RECURSE files RELATIVE ${SOURCE_DIR}
  ${SOURCE_DIR}/src/*.h ${SOURCE_DIR}/src/*.cc ${SOURCE_DIR}/sim/*.h ${SOURCE_DIR}/sim/*.cc)
set(errors 0)
set(checked 0)
foreach(f IN LISTS files)
  if(f MATCHES "^src/([a-z_]+)/[^/]+$")
    set(layer ${CMAKE_MATCH_1})
  elseif(f MATCHES "^sim/[^/]+$")
    set(layer sim)
  elseif(f MATCHES "^src/([a-z_]+)\\.cc$")
    set(layer ${CMAKE_MATCH_1})
  else()
    continue()
  endif()
  if(NOT layer IN_LIST layers)
    message(SEND_ERROR "${f}: folder '${layer}' is not a module; declare it in CMakeLists.txt "
                       "with gpulet_module() and its dependencies")
    math(EXPR errors "${errors} + 1")
    continue()
  endif()
  set(allowed ${allowed_${layer}})
  if(f MATCHES "_(test|fuzz)\\.cc$")
    list(APPEND allowed testing ${allowed_testing})
  endif()
  file(STRINGS ${SOURCE_DIR}/${f} includes REGEX "^#include \"[a-z_]+/")
  set(n 0)
  foreach(inc IN LISTS includes)
    string(REGEX REPLACE "^#include \"([a-z_]+)/.*$" "\\1" target "${inc}")
    if(NOT target IN_LIST layers)
      continue()  # external: absl/, yaml-cpp/, grpcpp/, ...
    endif()
    math(EXPR checked "${checked} + 1")
    if(NOT target IN_LIST allowed)
      string(REGEX REPLACE "^#include \"([^\"]*)\".*$" "\\1" header "${inc}")
      set(shown ${allowed})
      list(REMOVE_DUPLICATES shown)
      string(REPLACE ";" ", " shown "${shown}")
      message("${f}: includes ${header}, but ${layer}/ may not depend on ${target}/ "
              "(allowed: ${shown}). Move the code to the right layer, or declare the "
              "dependency in CMakeLists.txt if it is one.")
      math(EXPR errors "${errors} + 1")
    endif()
  endforeach()
endforeach()
if(errors GREATER 0)
  message(FATAL_ERROR "${errors} wrong-way include(s)")
endif()
list(LENGTH files nfiles)
message("layers: ${nfiles} files, ${checked} includes of gpulet modules, all allowed")
