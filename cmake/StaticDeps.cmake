# Third-party libraries as gpulet links them: from Debian's static archives
# (GPULET_STATIC_DEPS=ON, the default) or from the shared libraries.
#
# Why static: every shared library a process maps costs its relocated data and the code
# pages its constructors and calls touch, and those count against the pod's memory as much
# as the heap does. Linked from archives with --gc-sections, only the members gpulet uses
# come in, and gRPC comes without TLS (grpc++_unsecure: the kubelet sockets are unix
# sockets). What Debian 12 ships no archive of stays dynamic: glibc. p11-kit, a dependency
# of GnuTLS (the TLS of the metrics server and the API client) without an archive, is left
# out (below).
#
# Sets, for the gpulet_module() LIBS lists:
#   GPULET_LIB_ABSL GPULET_LIB_GRPC GPULET_LIB_YAML GPULET_LIB_LIBYAML GPULET_LIB_SPDLOG GPULET_LIB_ELF
#   GPULET_LIB_MICROHTTPD GPULET_LIB_ZLIB GPULET_LIB_NETTLE GPULET_LIB_GNUTLS
#   GPULET_LIB_ABSL_KUBE (the Abseil components only the API client uses)
# each of which links, in whatever finally links it, the shared library, or, in a program
# with the target property GPULET_STATIC_LINK set, the static archives; and
# gpulet_link_static(TARGET), which sets that property and the link options that go with it.
#
# The `gpulet` program and the NVML simulator library are linked so. The tests and
# benchmarks link cpp-httplib, which Debian ships only as a shared library needing the shared
# libstdc++. The simulator library (loaded by --simulate and the tests) uses neither Abseil,
# whose archives cannot go into a shared library (built for executables: their
# thread-locals use the local-exec model), nor yaml-cpp, whose archive is not
# position-independent: it reads fixtures with libyaml, whose archive is. Under the
# sanitizers the option is off by default: that build checks behaviour, not size, and links
# faster shared.

set(GPULET_ABSL_COMPONENTS absl::status absl::statusor absl::strings absl::str_format
  absl::synchronization absl::time)

if(NOT GPULET_STATIC_DEPS)
  set(GPULET_LIB_ABSL ${GPULET_ABSL_COMPONENTS})
  set(GPULET_LIB_GRPC gRPC::grpc++ protobuf::libprotobuf)
  set(GPULET_LIB_YAML yaml-cpp)
  set(GPULET_LIB_LIBYAML PkgConfig::LIBYAML)
  set(GPULET_LIB_SPDLOG spdlog::spdlog)
  set(GPULET_LIB_ELF PkgConfig::LIBELF)
  set(GPULET_LIB_MICROHTTPD PkgConfig::MICROHTTPD)
  set(GPULET_LIB_ZLIB ZLIB::ZLIB)
  set(GPULET_LIB_NETTLE PkgConfig::NETTLE)
  set(GPULET_LIB_GNUTLS PkgConfig::GNUTLS)
  set(GPULET_LIB_ABSL_KUBE absl::random_random absl::cord)
  function(gpulet_link_static target)  # nothing to do: everything links shared
  endfunction()
  return()
endif()

# Sections per function and datum, so that --gc-sections drops what nothing calls.
add_compile_options(-ffunction-sections -fdata-sections)

# The archives, in one group so that the linker rescans them (gRPC, protobuf and Abseil
# refer to each other in both directions). Abseil's are all taken: which of its ~80
# archives gRPC needs is its business, and unused members are not pulled in.
set(GPULET_STATIC_ARCHIVE_NAMES grpc++_unsecure grpc_unsecure upb gpr address_sorting re2 cares
  protobuf-lite yaml-cpp yaml microhttpd gnutls hogweed nettle gmp tasn1 elf z)
set(GPULET_STATIC_ARCHIVES)
foreach(name IN LISTS GPULET_STATIC_ARCHIVE_NAMES)
  find_library(GPULET_ARCHIVE_${name} NAMES lib${name}.a REQUIRED)
  list(APPEND GPULET_STATIC_ARCHIVES ${GPULET_ARCHIVE_${name}})
endforeach()
find_library(GPULET_ARCHIVE_absl_base NAMES libabsl_base.a REQUIRED)
get_filename_component(GPULET_ARCHIVE_DIR ${GPULET_ARCHIVE_absl_base} DIRECTORY)
file(GLOB GPULET_ABSL_STATIC_ARCHIVES ${GPULET_ARCHIVE_DIR}/libabsl_*.a)
list(APPEND GPULET_STATIC_ARCHIVES ${GPULET_ABSL_STATIC_ARCHIVES})
# GnuTLS's dependency without an archive in Debian 12, p11-kit, is answered by
# cmake/p11_kit_absent.c ("no PKCS#11 here", which says why) instead of its shared library:
# gpulet never takes the paths into it, and libp11-kit.so with its libffi was 1.3 MB of the
# image. Only its headers are used, so that the stand-ins' signatures are p11-kit's own. The
# same goes for GnuTLS's libidn2 and libunistring (cmake/unicode_absent.c: names that are not
# ASCII and password normalization, neither of which gpulet uses), whose archives were
# 0.3 MB of Unicode tables; they are not linked at all.
pkg_check_modules(P11KIT REQUIRED p11-kit-1)
add_library(gpulet_p11_kit_absent STATIC ${CMAKE_SOURCE_DIR}/cmake/p11_kit_absent.c
  ${CMAKE_SOURCE_DIR}/cmake/unicode_absent.c)
target_include_directories(gpulet_p11_kit_absent SYSTEM PRIVATE ${P11KIT_INCLUDE_DIRS})
set_target_properties(gpulet_p11_kit_absent PROPERTIES POSITION_INDEPENDENT_CODE ON)

add_library(gpulet_static_archives INTERFACE)
target_link_libraries(gpulet_static_archives INTERFACE
  -Wl,--start-group ${GPULET_STATIC_ARCHIVES} gpulet_p11_kit_absent -Wl,--end-group
  Threads::Threads ${CMAKE_DL_LIBS} atomic rt)

# gpulet_dep(NAME shared-target...): gpulet_dep_NAME, as described above.
function(gpulet_dep name)
  add_library(gpulet_dep_${name} INTERFACE)
  target_link_libraries(gpulet_dep_${name} INTERFACE
    "$<IF:$<BOOL:$<TARGET_PROPERTY:GPULET_STATIC_LINK>>,gpulet_static_archives,${ARGN}>")
endfunction()
gpulet_dep(absl ${GPULET_ABSL_COMPONENTS})
# The kubelet APIs are compiled for protobuf's lite runtime (proto/): statically, its own
# archive; shared, the full library, a superset that gRPC's CMake package links anyway.
gpulet_dep(grpc gRPC::grpc++ protobuf::libprotobuf)
gpulet_dep(yaml yaml-cpp)
gpulet_dep(libyaml PkgConfig::LIBYAML)
gpulet_dep(elf PkgConfig::LIBELF)
gpulet_dep(microhttpd PkgConfig::MICROHTTPD)
gpulet_dep(zlib ZLIB::ZLIB)
gpulet_dep(nettle PkgConfig::NETTLE)
# The Kubernetes API client's TLS (src/kube/), as the metrics server's: GnuTLS.
gpulet_dep(gnutls PkgConfig::GNUTLS)
# spdlog and fmt have no archive: spdlog is compiled header-only, in the one file that
# includes it (src/common/log.cc), and fmt's compiled part once, in cmake/fmt_impl.cc (it
# says why), so that every module is compiled one way.
add_library(gpulet_fmt STATIC ${CMAKE_SOURCE_DIR}/cmake/fmt_impl.cc)
add_library(gpulet_dep_spdlog INTERFACE)
target_compile_definitions(gpulet_dep_spdlog INTERFACE SPDLOG_FMT_EXTERNAL)
target_link_libraries(gpulet_dep_spdlog INTERFACE gpulet_fmt Threads::Threads)

set(GPULET_LIB_ABSL gpulet_dep_absl)
set(GPULET_LIB_GRPC gpulet_dep_grpc)
set(GPULET_LIB_YAML gpulet_dep_yaml)
set(GPULET_LIB_LIBYAML gpulet_dep_libyaml)
set(GPULET_LIB_SPDLOG gpulet_dep_spdlog)
set(GPULET_LIB_ELF gpulet_dep_elf)
set(GPULET_LIB_MICROHTTPD gpulet_dep_microhttpd)
set(GPULET_LIB_ZLIB gpulet_dep_zlib)
set(GPULET_LIB_NETTLE gpulet_dep_nettle)
set(GPULET_LIB_GNUTLS gpulet_dep_gnutls)
set(GPULET_LIB_ABSL_KUBE gpulet_dep_absl)  # every Abseil archive is in the group already

function(gpulet_link_static target)
  set_target_properties(${target} PROPERTIES GPULET_STATIC_LINK ON)
  # --as-needed: no NEEDED entry for a shared library that only unused archive members
  # wanted. pack-relative-relocs (DT_RELR, glibc 2.36): the loader reads every relative
  # relocation of a position-independent program at start, so their table (450 KiB as
  # RELA) is resident for good; packed, it is a few KiB.
  target_link_options(${target} PRIVATE -static-libstdc++ -static-libgcc LINKER:--gc-sections
    LINKER:--as-needed LINKER:-z,pack-relative-relocs)
endfunction()
