# Every public header must compile on its own: a .hpp with the host compiler alone, a .cuh with
# nvcc. (CMake's own VERIFY_INTERFACE_HEADER_SETS compiles every header as C++, which a .cuh is not.)
function(zenflow_verify_headers target headers)
  set(sources "")
  set(cuda_includes "")
  foreach(header IN LISTS headers)
    file(RELATIVE_PATH rel "${PROJECT_SOURCE_DIR}/include" "${header}")
    string(MAKE_C_IDENTIFIER "${rel}" id)
    get_filename_component(ext "${header}" LAST_EXT)
    # The communicators over MPI and NCCL need their library: checked when it is there.
    if((rel MATCHES "^zenflow/comm/.*mpi_" AND NOT TARGET zenflow_mpi)
       OR (rel MATCHES "^zenflow/comm/.*nccl_" AND NOT TARGET zenflow_nccl))
      continue()
    endif()
    if(ext STREQUAL ".cuh")
      if(NOT ZENFLOW_ENABLE_CUDA)
        continue()
      endif()
      set(src "${PROJECT_BINARY_DIR}/verify_headers/${id}.cu")
      string(APPEND cuda_includes "#include <${rel}>\n")
    else()
      set(src "${PROJECT_BINARY_DIR}/verify_headers/${id}.cpp")
    endif()
    file(CONFIGURE OUTPUT "${src}" CONTENT "#include <${rel}>\n")
    list(APPEND sources "${src}")
  endforeach()
  add_library(${target} OBJECT ${sources})
  # zenflow::json: the JSON reader's header is checked too.
  target_link_libraries(${target} PRIVATE zenflow::json)
  foreach(component IN ITEMS mpi nccl)
    if(TARGET zenflow_${component})
      target_link_libraries(${target} PRIVATE zenflow::${component})
    endif()
  endforeach()
  # A consumer that adds zenflow's include directory as a plain one (add_subdirectory) sees our
  # warnings under its own flags: no header may warn under the common strict set.
  target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wpedantic -Wshadow -Werror>)
  # Whether a header stands alone needs no optimizer: -O0 keeps the check's ~160 units cheap (the
  # test programs compile the same code optimized, with their warnings).
  target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-O0>)
  if(ZENFLOW_ENABLE_CUDA)
    # Declarations only: one architecture is enough to check that a header stands alone.
    list(GET CMAKE_CUDA_ARCHITECTURES 0 first_arch)
    set_target_properties(${target} PROPERTIES CUDA_ARCHITECTURES "${first_arch}")
    # Two .cu files of one program that include every CUDA header, linked (never run): a kernel
    # or device function defined in a header without template or inline linkage is a duplicate
    # symbol here, as it would be in a user's trainer.
    set(dir "${PROJECT_BINARY_DIR}/verify_headers")
    file(CONFIGURE OUTPUT "${dir}/two_units_a.cu" CONTENT "${cuda_includes}int zf_two_units_a() { return 0; }\n")
    file(CONFIGURE OUTPUT "${dir}/two_units_b.cu"
         CONTENT "${cuda_includes}int zf_two_units_a();\nint main() { return zf_two_units_a(); }\n")
    add_executable(${target}_two_units "${dir}/two_units_a.cu" "${dir}/two_units_b.cu")
    target_link_libraries(${target}_two_units PRIVATE zenflow::json)
    foreach(component IN ITEMS mpi nccl)
      if(TARGET zenflow_${component})
        target_link_libraries(${target}_two_units PRIVATE zenflow::${component})
      endif()
    endforeach()
    set_target_properties(${target}_two_units PROPERTIES CUDA_ARCHITECTURES "${first_arch}")
  endif()
endfunction()
