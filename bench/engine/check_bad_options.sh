#!/bin/sh
# check_bad_options.sh PROGRAM [EXTRA-BAD-FLAG VALUE]: a pipeline benchmark program (zf_bench_pipeline
# or zf_bench_pipeline_cuda) refuses each bad option with exit status 2 and a message naming it,
# before running anything: no JSON file is written. The options are read before any device is
# looked for, so the CUDA program is checked without a GPU too.
prog=$1
shift
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fails=0
check() { # check NAMED-FLAG ARGS...
  named=$1
  shift
  out=$("$prog" "$@" --json "$dir/out.json" 2>&1)
  rc=$?
  if [ "$rc" -ne 2 ]; then
    echo "FAILED: $* exited $rc, not 2"; fails=$((fails + 1))
  elif ! printf '%s' "$out" | grep -q -- "$named"; then
    echo "FAILED: $* did not name $named: $out"; fails=$((fails + 1))
  elif [ -e "$dir/out.json" ]; then
    echo "FAILED: $* wrote $dir/out.json"; fails=$((fails + 1))
  else
    echo "refused, naming $named: $*"
  fi
}
check --params --params -1
check --params --params 0
check --params --params 12abc
check --params --params 1e999
check --layers --layers 0
check --steps --steps 0
check --warmup --warmup -2
check --compute-ms --compute-ms -5
check --pcie-gbps --pcie-gbps -1
check --backward-share --backward-share 1.5
check --upload --upload sometimes
check --host-moments --host-moments fp8
check --accumulate --accumulate gpu
check --bogus --bogus
if [ "$#" -ge 2 ]; then
  check "$1" "$@"
fi
[ "$fails" -eq 0 ] && echo "check_bad_options: every bad option refused by name, nothing written"
exit "$fails"
