#!/usr/bin/env bash
# Records real Flight Recorder dumps (gloo) and py-spy stack snapshots of an 8-rank job that hangs, in both
# ways hang_job.py plants. Needs torch and py-spy on PATH's python (PY=...). Output: OUT/{skip,stuck}/.
set -euo pipefail
PY=${PY:-python3}
OUT=${1:?usage: record_hangs.sh OUT}
HERE=$(cd "$(dirname "$0")" && pwd)
for mode in skip stuck; do
  d="$OUT/$mode"; rm -rf "$d"; mkdir -p "$d/fr" "$d/stacks"
  TORCH_FR_BUFFER_SIZE=2000 TORCH_FR_DUMP_TEMP_FILE="$d/fr/gloo_fr_trace_rank_" \
    setsid "$PY" -m torch.distributed.run --nproc-per-node 8 --master-port 29541 \
    "$HERE/hang_job.py" --mode "$mode" --out "$d" > "$d/torchrun.log" 2>&1 &
  job=$!
  for _ in $(seq 300); do [ "$(ls "$d/pids" 2>/dev/null | wc -l)" -ge 8 ] && break; sleep 1; done
  sleep 8    # every rank reaches the hang
  for f in "$d"/pids/*; do
    r=$(basename "$f")
    py-spy dump --json --pid "$(cat "$f")" > "$d/stacks/pyspy_rank_$r.json" 2>> "$d/stacks/pyspy.log" || true
  done
  touch "$d/dump_now"
  for _ in $(seq 120); do [ "$(ls "$d/fr" | wc -l)" -ge 8 ] && break; sleep 1; done
  sleep 1
  kill -TERM -- "-$job" 2>/dev/null || true
  wait "$job" 2>/dev/null || true
  rm -rf "$d/pids" "$d/dump_now"
done
