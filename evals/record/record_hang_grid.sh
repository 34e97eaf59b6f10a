#!/usr/bin/env bash
# Records real Flight Recorder dumps (gloo) and py-spy stack snapshots of the jobs evals/record/hang_grid.py plants,
# one folder per scenario: OUT/<scenario>/{fr/,stacks/,torchrun.log,fr_trace.txt}.  Rerunnable: each scenario
# folder is removed and recorded afresh.  Needs torch and py-spy: PY=python of a venv with torch (default python3),
# py-spy next to it or on PATH.  Usage: record_hang_grid.sh OUT [SCENARIO...]   (default: every scenario)
#
#   grid16_stuck    16 ranks, 4x4 grid (DP column groups, TP row groups); rank 6 sleeps before its step-3 TP all_reduce
#   grid16_died     same grid; rank 9 calls os._exit(1) before its step-3 TP all_reduce
#   order_swap8     8 ranks; rank 3 issues broadcast before all_reduce in step 2
#   size_mismatch8  8 ranks; rank 2's all_reduce has 8192 floats instead of 4096 in step 3
#   pp_deadlock4    4 pipeline stages, send/recv; stage 1 does not send its last micro-batch's activation in step 1
#   clean8          the order_swap8 job without a plant; recorded after its final barrier
#
# torchrun runs with --monitor-interval 3600 so that its agent does not tear the survivors down when a worker dies
# (grid16_died; size_mismatch8, where gloo aborts a rank) before they are recorded; this script ends every job.
# The 16-rank grids write dumps and stacks into per-node folders (ranks 0-7 node0/, 8-15 node1/).  Each scenario's
# fr_trace.txt holds what torch's own analyzer (torch.distributed.flight_recorder.fr_trace) says about its fr/.
set -euo pipefail
PY=${PY:-python3}
OUT=${1:?usage: record_hang_grid.sh OUT [SCENARIO...]}
shift
HERE=$(cd "$(dirname "$0")" && pwd)
PYSPY=${PYSPY:-$(dirname "$(command -v "$PY")")/py-spy}
[ -x "$PYSPY" ] || PYSPY=py-spy
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
PREFIX=gloo_fr_trace_rank_

trim() {  # FILE MAXBYTES: keep the head and the tail of FILE, whole lines, under MAXBYTES
  "$PY" - "$1" "$2" <<'EOF'
import sys
path, cap = sys.argv[1], int(sys.argv[2])
data = open(path, "rb").read()
if len(data) > cap:
    half = (cap - 200) // 2
    head = data[:half].rsplit(b"\n", 1)[0]
    tail = data[-half:].split(b"\n", 1)[-1]
    cut = len(data) - len(head) - len(tail)
    open(path, "wb").write(head + b"\n[... %d bytes trimmed by record_hang_grid.sh ...]\n" % cut + tail)
EOF
}

alive() { local st; st=$(ps -o stat= -p "$1" 2>/dev/null) && [ -n "$st" ] && [ "${st#Z}" = "$st" ]; }

ndumps() { find "$1/fr" -type f -name "$PREFIX*" ! -name "*.tmp" | wc -l; }

record() {  # NAME NPROC PORT NODE_SIZE WAIT_FOR(planted|done) SETTLE_S JOB_ARGS...
  local name=$1 nproc=$2 port=$3 node_size=$4 wait_for=$5 settle=$6
  shift 6
  local d="$OUT/$name" run job r pid sdir expect=0
  echo "== $name"
  rm -rf "$d"
  mkdir -p "$d/fr" "$d/stacks"
  run=$(mktemp -d "${TMPDIR:-/tmp}/hang_grid.$name.XXXXXX")  # pids and flag files, not part of the recording
  # --monitor-interval 3600: the elastic agent does not end the job when a worker dies; this script ends it
  TORCH_FR_BUFFER_SIZE=2000 TORCH_FR_DUMP_TEMP_FILE="$d/fr/$PREFIX" \
    setsid "$PY" -m torch.distributed.run --nproc-per-node "$nproc" --master-port "$port" --monitor-interval 3600 \
    "$HERE/hang_grid.py" --out "$run" --node-size "$node_size" "$@" > "$d/torchrun.log" 2>&1 &
  job=$!
  for _ in $(seq 600); do [ "$(ls "$run/pids" 2>/dev/null | wc -l)" -ge "$nproc" ] && break; sleep 1; done
  if [ "$wait_for" = done ]; then
    for _ in $(seq 600); do [ "$(ls "$run/done" 2>/dev/null | wc -l)" -ge "$nproc" ] && break; sleep 1; done
  else
    for _ in $(seq 600); do [ -e "$run/planted" ] && break; sleep 1; done
  fi
  sleep "$settle"  # every rank reaches where it hangs
  for f in "$run"/pids/*; do
    r=$(basename "$f")
    sdir="$d/stacks"
    [ "$node_size" -gt 0 ] && sdir="$d/stacks/node$((r / node_size))"
    mkdir -p "$sdir"
    if ! "$PYSPY" dump --json --pid "$(cat "$f")" > "$sdir/pyspy_rank_$r.json" 2>> "$d/pyspy.log"; then
      echo "rank $r (pid $(cat "$f")): py-spy dump failed, no stack recorded" >> "$d/pyspy.log"
      rm -f "$sdir/pyspy_rank_$r.json"
    fi
  done
  [ -s "$d/pyspy.log" ] || rm -f "$d/pyspy.log"
  for f in "$run"/pids/*; do if alive "$(cat "$f")"; then expect=$((expect + 1)); fi; done  # a dead rank: no dump
  touch "$run/dump_now"
  for _ in $(seq 180); do [ "$(ndumps "$d")" -ge "$expect" ] && break; sleep 1; done
  sleep 2
  echo "   $(ndumps "$d") dumps ($expect ranks alive of $nproc)"
  kill -TERM -- "-$job" 2>/dev/null || true
  for _ in $(seq 30); do alive "$job" || break; sleep 1; done
  kill -KILL -- "-$job" 2>/dev/null || true
  wait "$job" 2>/dev/null || true
  for f in "$run"/pids/*; do  # a worker the agent did not end (each torchrun worker has its own session)
    pid=$(cat "$f")
    if alive "$pid" && grep -q hang_grid.py "/proc/$pid/cmdline" 2>/dev/null; then
      kill -KILL "$pid" 2>/dev/null || true
    fi
  done
  trim "$d/torchrun.log" 19000
  analyze "$d" "$(ndumps "$d")" "$nproc" "$run"
  rm -rf "$run"
}

analyze() {  # DIR NDUMPS NPROC RUN: torch's analyzer on DIR/fr, output (with the commands) to DIR/fr_trace.txt
  local d=$1 ndump=$2 nproc=$3 run=$4 extra="" opts filled
  if [ "$ndump" -lt "$nproc" ]; then extra="--allow-incomplete-ranks"; fi
  # a copy of the dumps, all in one folder, whose pg_config is filled in from each rank's own group objects
  filled=$(mktemp -d "${TMPDIR:-/tmp}/hang_grid.filled.XXXXXX")
  "$PY" - "$d/fr" "$run/groups" "$filled" <<'EOF' || echo "could not fill in pg_config" >&2
import json, os, pickle, re, sys
src, groups, dst = sys.argv[1:]
for root, _, files in os.walk(src):
    for f in files:
        rank = int(re.search(r"(\d+)$", f).group(1))
        with open(os.path.join(root, f), "rb") as fh:
            dump = pickle.load(fh)
        with open(os.path.join(groups, f"{rank}.json")) as fh:
            dump["pg_config"] = json.load(fh)
        with open(os.path.join(dst, f), "wb") as fh:
            pickle.dump(dump, fh)
EOF
  {
    echo "# torch $("$PY" -c 'import torch; print(torch.__version__)' 2>/dev/null) flight_recorder analyzer on $(basename "$d")/fr"
    echo "# (fr_trace walks sub-folders with os.walk, so a per-node layout needs no copying, but then it"
    echo "#  cannot infer the file prefix from the top folder: -p is given)"
    for opts in "" "-j"; do
      echo
      echo "\$ cd $(basename "$d") && python -m torch.distributed.flight_recorder.fr_trace fr -p $PREFIX${extra:+ $extra}${opts:+ $opts}"
      # shellcheck disable=SC2086
      (cd "$d" && "$PY" -m torch.distributed.flight_recorder.fr_trace fr -p "$PREFIX" $extra $opts 2>&1) \
        && echo "[exit status 0]" || echo "[exit status $?]"
    done
    echo
    echo "# ---- NOT the recorded dumps: the same analyzer on a temporary copy FILLED/ (all dumps in one folder) in"
    echo "# ---- which each dump's pg_config, empty under gloo, was replaced by the rank's own groups as"
    echo "# ---- ProcessGroupNCCL records them ({group_name: {name, desc, ranks}}, from group_name, group_desc and"
    echo "# ---- get_process_group_ranks of the job's group objects); entries and pg_status unchanged"
    for opts in "" "-j"; do
      echo
      echo "\$ python -m torch.distributed.flight_recorder.fr_trace FILLED -p $PREFIX${extra:+ $extra}${opts:+ $opts}"
      # shellcheck disable=SC2086
      (cd "$filled" && "$PY" -m torch.distributed.flight_recorder.fr_trace . -p "$PREFIX" $extra $opts 2>&1) \
        && echo "[exit status 0]" || echo "[exit status $?]"
    done
  } > "$d/fr_trace.txt"
  rm -rf "$filled"
  trim "$d/fr_trace.txt" 19000
}

SCEN=("$@")
selected() { [ ${#SCEN[@]} -eq 0 ] && return 0; local s; for s in "${SCEN[@]}"; do [ "$s" = "$1" ] && return 0; done; return 1; }

selected grid16_stuck && record grid16_stuck 16 29621 8 planted 20 \
  --job grid --plant stuck --bad-rank 6 --bad-step 3
selected grid16_died && record grid16_died 16 29622 8 planted 20 \
  --job grid --plant died --bad-rank 9 --bad-step 3
selected order_swap8 && record order_swap8 8 29623 0 planted 12 \
  --job flat --plant order_swap --bad-rank 3 --bad-step 2
selected size_mismatch8 && record size_mismatch8 8 29624 0 planted 12 \
  --job flat --plant size_mismatch --bad-rank 2 --bad-step 3 --mismatch-numel 8192
selected pp_deadlock4 && record pp_deadlock4 4 29625 0 planted 8 \
  --job pipeline --plant pp_deadlock --bad-rank 1 --bad-step 1 --steps 2
selected clean8 && record clean8 8 29626 0 done 3 \
  --job flat --plant none
echo "done: $OUT"

