# cpu.examples.charlm_zero3_mpi_np2: charlm_train under mpiexec with 2 ranks, `--zero 2` then
# `--zero 3` with the same flags: both must end with identical replicas and write the same loss at
# every step, bit for bit (ZeRO-3's shards are ZeRO-2's rows: one rank's on the mean gradient).
# gpu.examples.charlm_zero3_nccl_np1 runs it with NP=1 and --backend cuda (one NCCL rank: both
# reductions are the identity, so the bits must agree there too).
# Inputs (-D): MPIEXEC, NP_FLAG, MPI_FLAGS ('|'-separated), TRAIN, OUT, ARGS ('|'-separated), NP
# (ranks, default 2).
string(REPLACE "|" ";" mpi_flags "${MPI_FLAGS}")
string(REPLACE "|" ";" args "${ARGS}")
if(NOT DEFINED NP)
  set(NP 2)
endif()
foreach(z 2 3)
  execute_process(COMMAND "${MPIEXEC}" ${NP_FLAG} ${NP} ${mpi_flags} "${TRAIN}" --zero ${z} --losses-out
                          "${OUT}/charlm_zero${z}_np${NP}_losses.txt" ${args}
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0 OR NOT out MATCHES "replicas identical")
    message(FATAL_ERROR "--zero ${z}: exit ${rc}\n${out}\n${err}")
  endif()
endforeach()
file(READ "${OUT}/charlm_zero2_np${NP}_losses.txt" two)
file(READ "${OUT}/charlm_zero3_np${NP}_losses.txt" three)
if(NOT two STREQUAL three OR two STREQUAL "")
  message(FATAL_ERROR "--zero 3's losses differ from --zero 2's:\n${two}\n---\n${three}")
endif()
message(STATUS "--zero 3: the same losses as --zero 2, bit for bit")
