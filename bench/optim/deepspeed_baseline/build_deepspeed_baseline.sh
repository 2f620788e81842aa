#!/usr/bin/env bash
# Builds DeepSpeed's CPU Adam as a small shared library for bench/optim/zf_host_sweep, from a
# DeepSpeed checkout you already have (this script downloads nothing), with the flags of
# DeepSpeed's op builder (op_builder/builder.py, TorchCPUOpBuilder + CPUAdamBuilder):
# -O3 -std=c++20 -march=native -fopenmp and -D__AVX512__ / -D__AVX256__ from the CPU's flags.
#
#   bench/optim/deepspeed_baseline/build_deepspeed_baseline.sh /path/to/DeepSpeed /tmp/ds-build
#   ZF_DEEPSPEED_ADAM=/tmp/ds-build/libzf_ds_adam.so build/cpu/bench/optim/zf_host_sweep ...
#
# The build folder gets copies of csrc/includes/{cpu_adam.h,simd.h} (keep it out of this repo).
set -euo pipefail
ds=${1:?usage: $0 DEEPSPEED_CHECKOUT OUT_DIR}
out=${2:?usage: $0 DEEPSPEED_CHECKOUT OUT_DIR}
here=$(cd "$(dirname "$0")" && pwd)
for f in csrc/includes/cpu_adam.h csrc/includes/simd.h; do
  [[ -f "$ds/$f" ]] || { echo "error: $ds/$f not found (is '$ds' a DeepSpeed checkout?)" >&2; exit 2; }
done
case "$(realpath -m "$out")/" in
  "$(realpath "$here/../../..")"/*) echo "error: OUT_DIR must be outside the zenflow repository" >&2; exit 2 ;;
esac
mkdir -p "$out/torch"
cp "$ds/csrc/includes/cpu_adam.h" "$ds/csrc/includes/simd.h" "$out/"
cp "$here/torch_shim.hpp" "$out/torch/extension.h"
simd=-D__SCALAR__
if grep -qw avx512f /proc/cpuinfo; then simd=-D__AVX512__; elif grep -qw avx2 /proc/cpuinfo; then simd=-D__AVX256__; fi
flags=(-O3 -std=c++20 -march=native -fopenmp "$simd" -fPIC -shared)
${CXX:-g++} "${flags[@]}" -I"$out" "$here/driver.cpp" -o "$out/libzf_ds_adam.so"
git -C "$ds" rev-parse HEAD > "$out/deepspeed_commit.txt" 2>/dev/null || echo unknown > "$out/deepspeed_commit.txt"
echo "${flags[*]}" > "$out/flags.txt"
echo "built $out/libzf_ds_adam.so (DeepSpeed $(cat "$out/deepspeed_commit.txt"), flags: ${flags[*]})"
