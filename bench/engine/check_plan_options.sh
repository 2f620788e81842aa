#!/bin/sh
# check_plan_options.sh ZF_PLAN: zf_plan refuses each bad option with exit status 2 and a message
# naming it, and plans nothing (no "bound" line on stdout); a good command line exits 0.
prog=$1
fails=0
good="--preset 7b --machine workstation --step-ms 1500"
check() { # check NAMED-TEXT ARGS...
  named=$1
  shift
  out=$("$prog" "$@" 2>&1)
  rc=$?
  if [ "$rc" -ne 2 ]; then
    echo "FAILED: $* exited $rc, not 2"; fails=$((fails + 1))
  elif ! printf '%s' "$out" | grep -q -- "$named"; then
    echo "FAILED: $* did not name $named: $out"; fails=$((fails + 1))
  elif printf '%s' "$out" | grep -q "^bound"; then
    echo "FAILED: $* planned anyway"; fails=$((fails + 1))
  else
    echo "refused, naming $named: $*"
  fi
}
# shellcheck disable=SC2086
check --bogus $good --bogus
check --preset --preset 8b --machine workstation --step-ms 1500
check --params --params -1 --layers 4 --machine workstation --step-ms 10
check --params --params 12abc --layers 4 --machine workstation --step-ms 10
check --layers --params 1e9 --layers 0 --machine workstation --step-ms 10
check --layers --params 1e9 --machine workstation --step-ms 10
check "--preset or --params" --machine workstation --step-ms 10
check "give one, not both" --preset 7b --params 1e9 --layers 4 --machine workstation --step-ms 10
check --machine --preset 7b --machine laptop --step-ms 10
check --host-gbps --preset 7b --host-gbps 0 --pcie-gbps 25 --step-ms 10
check --host-gbps --preset 7b --pcie-gbps 25 --step-ms 10
check --pcie-gbps --preset 7b --host-gbps 100 --pcie-gbps -3 --step-ms 10
check --step-ms --preset 7b --machine workstation --step-ms nan
check "--step-ms or --tokens" --preset 7b --machine workstation
check --gpus --preset 7b --machine workstation --step-ms 10 --gpus 1.5
check --topk-ratio --preset 7b --machine workstation --step-ms 10 --topk-ratio 1.2
check --update-interval --preset 7b --machine workstation --step-ms 10 --update-interval 0
check --moments --preset 7b --machine workstation --step-ms 10 --moments fp8
check --host-accumulators --preset 7b --machine workstation --step-ms 10 --host-accumulators 3
check --accumulate --preset 7b --machine workstation --step-ms 10 --accumulate gpu
check --mode --preset 7b --machine workstation --step-ms 10 --mode adam
check --upload --preset 7b --machine workstation --step-ms 10 --upload sometimes
check --ring-slot-bytes --preset 7b --machine workstation --step-ms 10 --ring-slot-bytes 1000
check "ring_slot_bytes" --params 1e8 --layers 1 --hidden 2 --machine workstation --step-ms 10 --ring-slot-bytes 4096
check --tokens --preset 7b --machine workstation --tokens 8192 --step-ms 10
check --zero --preset 7b --machine workstation --step-ms 10 --zero 1
check --reduce-bucket-bytes --preset 7b --machine workstation --step-ms 10 --reduce-bucket-bytes 1001
check --reduce-in-place --preset 7b --machine workstation --step-ms 10 --reduce-in-place maybe
check --shard-headroom --preset 7b --machine workstation --step-ms 10 --shard-headroom -1
check "reduce_bucket_bytes" --preset 7b --machine dgx-h100 --step-ms 10 --reduce-bucket-bytes 4096
# shellcheck disable=SC2086
if ! "$prog" $good > /dev/null; then
  echo "FAILED: $good did not exit 0"; fails=$((fails + 1))
fi
# shellcheck disable=SC2086
if ! "$prog" $good --json | python3 -c "import json, sys; json.load(sys.stdin)"; then
  echo "FAILED: $good --json is not JSON"; fails=$((fails + 1))
fi
# shellcheck disable=SC2086
if ! "$prog" $good --gpus 8 --zero 3 --json |
  python3 -c "import json, sys; j = json.load(sys.stdin); sys.exit(0 if j['plan']['zero'] == 3 else 1)"; then
  echo "FAILED: $good --gpus 8 --zero 3 --json does not plan ZeRO-3"; fails=$((fails + 1))
fi
[ "$fails" -eq 0 ] && echo "check_plan_options: every bad option refused by name, nothing planned"
exit "$fails"
