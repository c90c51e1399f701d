# One static library per folder of src/ ("module"), with its dependencies declared, and the
# table of allowed #include edges that cmake/check_layers.cmake holds every source file to.
#
#   gpulet_module(NAME [DIR dir] [SOURCES file...] [EXTRA_SRCS file...]
#                 [DEPS module...] [LIBS target...])
#     Builds gpulet_NAME from DIR/*.cc (default src/NAME; tests and fuzz targets excluded),
#     or from SOURCES, plus EXTRA_SRCS. DEPS are other modules (linked PUBLIC and allowed as
#     include edges); LIBS are external targets (linked only).
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

function(gpulet_module name)
  cmake_parse_arguments(M "" "DIR" "SOURCES;EXTRA_SRCS;DEPS;LIBS" ${ARGN})
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
