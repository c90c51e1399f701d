# Script mode (cmake -P): one namespace per folder. Every source file of src/NAME/, sim/ and
# bench/ opens its code in `namespace gpulet::NAME` (gpulet::sim, gpulet::bench); src/common/,
# the vocabulary every layer uses, is the root namespace `gpulet`. Nested namespaces inside
# (anonymous, `*_internal`) and aliases are not checked. Run as the folder_namespaces test.
# Pass -DSOURCE_DIR=...
cmake_minimum_required(VERSION 3.25)
file(GLOB_RECURSE sources RELATIVE ${SOURCE_DIR}
  ${SOURCE_DIR}/src/*/*.h ${SOURCE_DIR}/src/*/*.cc
  ${SOURCE_DIR}/sim/*.h ${SOURCE_DIR}/sim/*.cc ${SOURCE_DIR}/bench/*.h ${SOURCE_DIR}/bench/*.cc)
set(problems "")
set(checked 0)
foreach(f IN LISTS sources)
  if(f MATCHES "^src/([a-z_]+)/")
    set(folder ${CMAKE_MATCH_1})
  else()
    string(REGEX REPLACE "/.*" "" folder "${f}")
  endif()
  if(folder STREQUAL "common")
    set(want "gpulet")
  else()
    set(want "gpulet::${folder}")
  endif()
  file(STRINGS ${SOURCE_DIR}/${f} opened REGEX "^namespace gpulet[a-z_:]* {")
  foreach(line IN LISTS opened)
    string(REGEX REPLACE "^namespace ([a-z_:]+) {.*" "\\1" ns "${line}")
    if(NOT ns STREQUAL want)
      string(APPEND problems "\n  ${f} opens namespace ${ns}; its folder's namespace is ${want}")
    endif()
  endforeach()
  math(EXPR checked "${checked} + 1")
endforeach()
if(problems)
  message(FATAL_ERROR "A file is outside its folder's namespace:${problems}")
endif()
message(STATUS "all ${checked} files of src/, sim/ and bench/ are in their folder's namespace")
