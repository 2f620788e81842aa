# FindNCCL: NCCL's header and library, looked for beside the CUDA toolkit (the toolkit's lib/ and
# lib64/, where NVIDIA's packages put it) and on the usual system paths; NCCL_ROOT overrides (a
# pip wheel's nvidia/nccl folder works too: its library is libnccl.so.2 alone, with no libnccl.so).
# Defines NCCL_FOUND, NCCL_INCLUDE_DIR, NCCL_LIBRARY, NCCL_VERSION and the target NCCL::NCCL.
set(_zf_nccl_hints "")
foreach(_zf_dir IN ITEMS "${NCCL_ROOT}" "$ENV{NCCL_ROOT}" "${CUDAToolkit_LIBRARY_ROOT}" "${CUDAToolkit_TARGET_DIR}")
  if(_zf_dir)
    list(APPEND _zf_nccl_hints "${_zf_dir}")
  endif()
endforeach()
if(CUDAToolkit_INCLUDE_DIRS)
  foreach(_zf_dir IN LISTS CUDAToolkit_INCLUDE_DIRS)
    get_filename_component(_zf_parent "${_zf_dir}" DIRECTORY)
    list(APPEND _zf_nccl_hints "${_zf_parent}")
  endforeach()
endif()
find_path(NCCL_INCLUDE_DIR nccl.h HINTS ${_zf_nccl_hints} ${CUDAToolkit_INCLUDE_DIRS} PATH_SUFFIXES include)
find_library(NCCL_LIBRARY NAMES nccl libnccl.so.2 HINTS ${_zf_nccl_hints} ${CUDAToolkit_LIBRARY_DIR} PATH_SUFFIXES lib lib64
                                                                                                  lib/x86_64-linux-gnu)
if(NCCL_INCLUDE_DIR AND EXISTS "${NCCL_INCLUDE_DIR}/nccl.h")
  file(STRINGS "${NCCL_INCLUDE_DIR}/nccl.h" _zf_nccl_version_lines REGEX "^#define NCCL_(MAJOR|MINOR|PATCH) ")
  foreach(_zf_part IN ITEMS MAJOR MINOR PATCH)
    string(REGEX REPLACE ".*#define NCCL_${_zf_part} ([0-9]+).*" "\\1" _zf_nccl_${_zf_part} "${_zf_nccl_version_lines}")
  endforeach()
  set(NCCL_VERSION "${_zf_nccl_MAJOR}.${_zf_nccl_MINOR}.${_zf_nccl_PATCH}")
endif()
include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(NCCL REQUIRED_VARS NCCL_LIBRARY NCCL_INCLUDE_DIR VERSION_VAR NCCL_VERSION)
if(NCCL_FOUND AND NOT TARGET NCCL::NCCL)
  add_library(NCCL::NCCL UNKNOWN IMPORTED)
  set_target_properties(NCCL::NCCL PROPERTIES IMPORTED_LOCATION "${NCCL_LIBRARY}" INTERFACE_INCLUDE_DIRECTORIES
                                                                                    "${NCCL_INCLUDE_DIR}")
endif()
mark_as_advanced(NCCL_INCLUDE_DIR NCCL_LIBRARY)
