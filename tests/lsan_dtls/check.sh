#!/usr/bin/env bash
# The minimal reproduction's three runs (NOTES.md), as cpu.sanitizers.lsan_dynamic_tls runs them
# in the asan build:
#   check.sh REPRO MODULE
# 1. the block at page offset 16, LeakSanitizer as the MPI tests run it (intercept_tls_get_addr=0):
#    exits 0;
# 2. the same block, LeakSanitizer's defaults: its tracer crashes (the bug; if it does not, this
#    runtime no longer misreads the block and the MPI tests' intercept_tls_get_addr=0 can go);
# 3. the control, the block elsewhere (--anywhere), the defaults: exits 0.
set -uo pipefail
repro=$1 module=$2
fails=0
run() { # run NAME EXPECT(clean|crash) LSAN_OPTIONS ARGS...
  local name=$1 expect=$2 options=$3 out rc offset
  shift 3
  out=$(LSAN_OPTIONS=$options "$repro" "$module" "$@" 2>&1)
  rc=$?
  offset=$(sed -n 's/^repro: .*page offset \([0-9]*\)$/\1/p' <<<"$out")
  local got=clean
  if grep -q "LeakSanitizer has encountered a fatal error" <<<"$out"; then
    got=crash
  elif ((rc != 0)); then
    got="exit $rc"
  fi
  local want_offset=16
  [ "$name" = control ] && want_offset=other
  if [ "$want_offset" = 16 ] && [ "$offset" != 16 ]; then
    echo "FAIL $name: the block is at page offset '${offset:-?}', not 16: the walk did not place it (the run proves nothing)"
    ((++fails))
  elif [ "$want_offset" = other ] && { [ -z "$offset" ] || [ "$offset" = 16 ]; }; then
    echo "FAIL $name: the block is at page offset '${offset:-?}': the control needs another one"
    ((++fails))
  elif [ "$got" != "$expect" ]; then
    echo "FAIL $name: expected $expect, got $got"
    ((++fails))
  else
    echo "ok   $name: block at page offset $offset, $got"
  fi
  [ "$got" = "$expect" ] || printf '%s\n' "$out" | tail -20
}
run workaround clean "intercept_tls_get_addr=0"
run bug crash ""
run control clean "" --anywhere
if ((fails)); then
  echo "lsan_dtls: $fails of 3 runs not as NOTES.md says"
  exit 1
fi
echo "lsan_dtls: the crash needs the block at page offset 16, and intercept_tls_get_addr=0 avoids it"
