# gpulet_embed_deploy(TARGET): compiles the YAML files under deploy/ into TARGET, so that
# `gpulet manifests` prints exactly what is in the tree (no second copy to drift).
#
# At build time cmake/embed_files.cmake writes ${CMAKE_BINARY_DIR}/generated/embedded_deploy.cc,
# one raw string literal per file, defining gpulet::EmbeddedDeployFiles() (declared in
# src/deploy/manifests.h). The file list is globbed with CONFIGURE_DEPENDS, so adding a
# manifest re-runs CMake, and editing one regenerates the .cc.
function(gpulet_embed_deploy target)
  file(GLOB_RECURSE _deploy_files CONFIGURE_DEPENDS
    ${CMAKE_SOURCE_DIR}/deploy/*.yaml ${CMAKE_SOURCE_DIR}/deploy/*.yml)
  set(_out ${CMAKE_BINARY_DIR}/generated/embedded_deploy.cc)
  add_custom_command(
    OUTPUT ${_out}
    COMMAND ${CMAKE_COMMAND} -DSOURCE_DIR=${CMAKE_SOURCE_DIR} -DOUTPUT=${_out}
            -P ${CMAKE_SOURCE_DIR}/cmake/embed_files.cmake
    DEPENDS ${_deploy_files} ${CMAKE_SOURCE_DIR}/cmake/embed_files.cmake
    COMMENT "Embedding deploy/ manifests"
    VERBATIM)
  target_sources(${target} PRIVATE ${_out})
endfunction()
