#!/usr/bin/env bash
# The measurements of issue 35 (core placement; zenflow's CPU AdamW against DeepSpeed's), as run on
# 2026-11-28: bench/results/2026-11-28-cpu/run.sh BUILD_DIR DS_LIB OUT_DIR TAG
#   BUILD_DIR: a build of this repository (zf_host_sweep, zf_bench_host_placement)
#   DS_LIB:    libzf_ds_adam.so from bench/optim/deepspeed_baseline/build_deepspeed_baseline.sh
# Every JSON records /proc/loadavg; this script also logs it between the runs.
set -euo pipefail
build=${1:?BUILD_DIR}; ds=${2:?DS_LIB}; out=${3:?OUT_DIR}; tag=${4:?TAG}
sweep=$build/bench/optim/zf_host_sweep
place=$build/bench/engine/zf_bench_host_placement
mkdir -p "$out"
log() { echo "$(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg): $*" | tee -a "$out/load_$tag.log"; }
small=(--threads 2 --min 65536 --max 4194304 --factor 4 --rounds 11)

log "placement 4M"
"$place" --n 4194304 --rounds 9 --reps 10 --json "$out/placement_4M_$tag.json" | tee "$out/placement_4M_$tag.txt"
log "placement 16M"
"$place" --n 16777216 --rounds 7 --reps 4 --json "$out/placement_16M_$tag.json" | tee "$out/placement_16M_$tag.txt"

log "adamw alone: zenflow in its own process"
"$sweep" "${small[@]}" --cases zf_adamw --json "$out/adamw_alone_zf_$tag.json" | tee "$out/adamw_alone_zf_$tag.txt"
log "adamw alone: DeepSpeed in its own process"
"$sweep" "${small[@]}" --ds "$ds" --cases ds_adamw --json "$out/adamw_alone_ds_$tag.json" | tee "$out/adamw_alone_ds_$tag.txt"
log "adamw interleaved"
"$sweep" "${small[@]}" --ds "$ds" --cases zf_adamw,ds_adamw --json "$out/adamw_interleaved_$tag.json" |
  tee "$out/adamw_interleaved_$tag.txt"
log "adamw interleaved, OMP_WAIT_POLICY=passive"
OMP_WAIT_POLICY=passive "$sweep" "${small[@]}" --ds "$ds" --cases zf_adamw,ds_adamw \
  --json "$out/adamw_interleaved_passive_$tag.json" | tee "$out/adamw_interleaved_passive_$tag.txt"

log "64M: fp32 and bf16 states"
"$sweep" --threads 2 --min 67108864 --max 67108864 --rounds 5 --ds "$ds" \
  --cases zf_adamw,zf_adamw_bf16m,ds_adamw,ds_adamw_bf16,ds_adamw_bf16p --json "$out/adamw_64M_$tag.json" |
  tee "$out/adamw_64M_$tag.txt"

log "a whole host window: zenflow against DeepSpeed ZenFlow (S = 4, 90% of the channels on the host)"
"$sweep" --threads 2 --min 4194304 --max 67108864 --factor 4 --rounds 5 --ds "$ds" \
  --cases zf_window_work,ds_zenflow_host --json "$out/window_work_$tag.json" | tee "$out/window_work_$tag.txt"
log "done"
