#!/bin/sh
# gpu_or_skip.sh EXPECT COMMAND...: runs a gpu-labelled ctest command (an example under mpiexec).
# Exit 77 (the test's SKIP_RETURN_CODE) when the command reports no usable device, unless
# ZENFLOW_REQUIRE_GPU=1 (then a failure), or fewer GPUs than it has ranks (a skip either way: the
# machine, not the code); otherwise the command's exit code, and 1 when its output lacks the
# regular expression EXPECT.
expect="$1"
shift
out=$("$@" 2>&1)
rc=$?
printf '%s\n' "$out"
if printf '%s' "$out" | grep -qE 'run one rank per GPU'; then
  echo "gpu_or_skip: skipped, fewer GPUs than ranks"
  exit 77
fi
if printf '%s' "$out" | grep -qE 'cudaErrorInsufficientDriver|cudaErrorNoDevice'; then
  if [ "${ZENFLOW_REQUIRE_GPU:-0}" = 1 ]; then
    echo "gpu_or_skip: no usable GPU, and ZENFLOW_REQUIRE_GPU=1"
    exit 1
  fi
  echo "gpu_or_skip: skipped, no usable GPU"
  exit 77
fi
if [ "$rc" -ne 0 ]; then
  exit "$rc"
fi
if ! printf '%s' "$out" | grep -qE "$expect"; then
  echo "gpu_or_skip: the output lacks: $expect"
  exit 1
fi
