#!/usr/bin/env bash
# Records the real multi-rank CPU training profiles of tests/data/real_cpu/ with train_job.py (gloo, torchrun,
# one thread per rank): each planted run right after its clean twin, same settings. Rerunnable: every run folder
# is removed first. Needs torch on PY's python.
#
#   record_train.sh OUT [REPS] [RUN ...]     (default REPS=2, all runs)
#
# The first recording of a run goes to OUT/<run>/ (traces/, meta/, stdout_rank*.txt, scenario.json), the k-th
# (k > 1) to OUT/<run>/repeat<k>/ the same way. dp2_clean is recorded right before each of its three planted twins,
# so it has 3 recordings per repetition.
# Before each run the recorder waits until the machine is idle (5 s in a row under 10% CPU busy), and records how
# much CPU time other processes took during the run (other_cpu_s); a run where that exceeds MAX_OTHER_FRAC (3%) of
# the machine's CPU time, or that failed, is recorded again (up to TRIES=12 attempts, the discarded ones listed in
# scenario.json). Master ports: the first free one in 29600-29699.
set -euo pipefail
PY=${PY:-/work/torchvenv/bin/python}
OUT=${1:?usage: record_train.sh OUT [REPS] [RUN ...]}
REPS=${2:-2}
shift $(( $# >= 2 ? 2 : 1 ))
ONLY=" $* "
HERE=$(cd "$(dirname "$0")" && pwd)
JOB="$HERE/train_job.py"
mkdir -p "$OUT"
PORT=29600

COMMON2="--steps 40 --wait 12 --warmup 2 --profile-steps 5"
COMMON4="--steps 40 --wait 12 --warmup 2 --profile-steps 4"
COMMON8="--steps 30 --wait 12 --warmup 2 --profile-steps 1"

# name | nproc | planted (one line) | the job's arguments (train_job.py's, unless they start with another job script)
RUNS=(
  "dp2_clean|2|nothing (clean twin of dp2_slowrank, dp2_slowloader, dp2_late)|--dp 2 $COMMON2"
  "dp2_slowrank|2|rank 1 runs extra 384x384 matmuls after its forward, calibrated to ~20 ms per step|--dp 2 $COMMON2 --slow-rank 1 --extra-compute-ms 20"
  "dp2_clean|2|nothing (clean twin of dp2_slowrank, dp2_slowloader, dp2_late)|--dp 2 $COMMON2"
  "dp2_slowloader|2|rank 1's DataLoader (num_workers=0) does ~15 ms of CPU work (384x384 matmuls) in __getitem__ per batch|--dp 2 $COMMON2 --slow-loader-rank 1 --loader-ms 15"
  "dp2_clean|2|nothing (clean twin of dp2_slowrank, dp2_slowloader, dp2_late)|--dp 2 $COMMON2"
  "dp2_late|2|rank 0 sleeps 25 ms (time.sleep, host stall) before its forward every step|--dp 2 $COMMON2 --late-rank 0 --stall-ms 25"
  "dp4_clean|4|nothing (clean twin of dp4_slowrank)|--dp 4 $COMMON4"
  "dp4_slowrank|4|rank 2 runs extra 384x384 matmuls after its forward, calibrated to ~40 ms per step|--dp 4 $COMMON4 --slow-rank 2 --extra-compute-ms 40"
  "pp2_clean|2|nothing (clean twin of pp2_heavy)|--pp 2 --microbatches 4 $COMMON2"
  "pp2_heavy|2|stage 1 (rank 1) has 2.5x wider hidden layers (2.5x its compute)|--pp 2 --microbatches 4 $COMMON2 --heavy-stage 1 --stage-factor 2.5"
  "dp2pp2_clean|4|nothing (clean twin of dp2pp2_heavy)|--dp 2 --pp 2 --microbatches 4 $COMMON4"
  "dp2pp2_heavy|4|stage 1 (ranks 2, 3) has 2.5x wider hidden layers: half the ranks slow|--dp 2 --pp 2 --microbatches 4 $COMMON4 --heavy-stage 1 --stage-factor 2.5"
  "dp8_clean_1step|8|nothing (clean twin of dp8_slowrank_1step)|--dp 8 $COMMON8"
  "dp8_slowrank_1step|8|rank 3 runs extra 384x384 matmuls after its forward, calibrated to ~80 ms per step|--dp 8 $COMMON8 --slow-rank 3 --extra-compute-ms 80"
  "ddp2_ioclean|2|nothing (clean twin of ddp2_ioloader)|ddp_job.py"
  "ddp2_ioloader|2|rank 1's DataLoader (num_workers=0) waits 14 ms (time.sleep: a storage- or network-bound loader) in __getitem__ per batch|ddp_job.py --slow-loader-rank 1 --loader-sleep-ms 14"
  "ddp2_ioclean|2|nothing (clean twin of ddp2_ioloader)|ddp_job.py"
  "tp2dp2_clean|4|nothing (clean twin of tp2dp2_slowrank)|--tp 2 --dp 2 $COMMON4"
  "tp2dp2_slowrank|4|rank 3 (TP group [2,3], DP group [1,3]) runs extra 384x384 matmuls after its forward, calibrated to ~30 ms per step|--tp 2 --dp 2 $COMMON4 --slow-rank 3 --extra-compute-ms 30"
  "tp4_clean|4|nothing (clean twin of tp4_late)|--tp 4 $COMMON4"
  "tp4_late|4|rank 2 sleeps 25 ms (time.sleep, host stall) before its forward every step|--tp 4 $COMMON4 --late-rank 2 --stall-ms 25"
  "pp3_clean|3|nothing (clean twin of pp3_heavy)|--pp 3 --microbatches 4 $COMMON4"
  "pp3_heavy|3|the middle stage (rank 1 of 3) has 2.5x wider hidden layers (2.5x its compute)|--pp 3 --microbatches 4 $COMMON4 --heavy-stage 1 --stage-factor 2.5"
  "tp2pp2_clean|4|nothing (clean twin of tp2pp2_slowrank)|--tp 2 --pp 2 --microbatches 4 $COMMON4"
  "tp2pp2_slowrank|4|rank 1 (stage 0, TP group [0,1]) runs extra 384x384 matmuls after its forward, calibrated to ~30 ms per step|--tp 2 --pp 2 --microbatches 4 $COMMON4 --slow-rank 1 --extra-compute-ms 30"
  "pp2dp2_clean|4|nothing (clean twin of pp2dp2_late)|--dp 2 --pp 2 --microbatches 4 $COMMON4"
  "pp2dp2_late|4|rank 2 (stage 1, DP group [2,3]) sleeps 25 ms (time.sleep, host stall) before its forward every step|--dp 2 --pp 2 --microbatches 4 $COMMON4 --late-rank 2 --stall-ms 25"
  "dp4_loaderclean|4|nothing (clean twin of dp4_slowloader)|--dp 4 $COMMON4"
  "dp4_slowloader|4|rank 1's DataLoader (num_workers=0) does ~20 ms of CPU work (384x384 matmuls) in __getitem__ per batch|--dp 4 $COMMON4 --slow-loader-rank 1 --loader-ms 20"
  "tp2pp2dp2_clean_1step|8|nothing (clean twin of tp2pp2dp2_slowrank_1step)|--tp 2 --pp 2 --dp 2 --microbatches 2 $COMMON8"
  "tp2pp2dp2_slowrank_1step|8|rank 6 (stage 1, TP group [6,7], DP group [4,6]) runs extra 384x384 matmuls after its forward, calibrated to ~60 ms per step|--tp 2 --pp 2 --dp 2 --microbatches 2 $COMMON8 --slow-rank 6 --extra-compute-ms 60"
)

record_one() {  # dir name nproc planted [job.py] args...
  local dir=$1 name=$2 nproc=$3 planted=$4 job=$JOB; shift 4
  if [[ "${1:-}" == *.py ]]; then job="$HERE/$1"; shift; fi
  rm -rf "$dir"; mkdir -p "$dir"
  PORT=$(( PORT >= 29699 ? 29600 : PORT + 1 ))
  "$PY" - "$dir" "$name" "$nproc" "$planted" "$PORT" "$PY" "$job" "$@" <<'EOF'
import datetime, glob, json, os, resource, signal, socket, subprocess, sys, time
d, name, nproc, planted, port, py, job = sys.argv[1:8]
args = sys.argv[8:]
ncpu = os.cpu_count()

def busy():
    v = [int(x) for x in open("/proc/stat").readline().split()[1:]]
    return sum(v) - v[3] - v[4], sum(v)   # busy jiffies (all but idle, iowait), total

def cols():  # user+nice+system, irq+softirq, steal (jiffies, all CPUs)
    v = [int(x) for x in open("/proc/stat").readline().split()[1:]]
    return v[0] + v[1] + v[2], v[5] + v[6], v[7]

MAX_OTHER = float(os.environ.get("MAX_OTHER_FRAC", "0.03"))  # of the machine's CPU time during the run
TRIES = int(os.environ.get("TRIES", "12"))
hz = os.sysconf("SC_CLK_TCK")

def free_port(start):  # the first port from start (within 29600-29699) nothing listens on
    p = start
    for _ in range(100):
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", p)); return p
            except OSError:
                p = 29600 + (p - 29600 + 1) % 100
    return start

disturbed = []
port = int(port)
for attempt in range(1, TRIES + 1):
    t_idle = time.time(); quiet = 0
    while quiet < 5 and time.time() - t_idle < 600:  # 5 quiet seconds in a row (or give up after 10 min)
        b0, a0 = busy(); time.sleep(1.0); b1, a1 = busy()
        frac = (b1 - b0) / max(1, a1 - a0)
        quiet = quiet + 1 if frac < 0.10 else 0
    port = free_port(port if attempt == 1 else 29600 + (port - 29600 + 7) % 100)
    cmd = [py, "-m", "torch.distributed.run", "--nproc-per-node", nproc, "--master-port", str(port), job,
           "--out", d] + args
    for sub in ("traces", "meta"):
        subprocess.run(["rm", "-rf", f"{d}/{sub}"])
    for f in glob.glob(f"{d}/stdout_rank*.txt"):
        os.remove(f)
    c0 = cols(); r0 = resource.getrusage(resource.RUSAGE_CHILDREN); t0 = time.time()
    p = subprocess.Popen(cmd, stdout=open(f"{d}/torchrun.log", "w"), stderr=subprocess.STDOUT, start_new_session=True)
    try:
        rc = p.wait(timeout=600)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL); rc = p.wait()
    wall = time.time() - t0
    c1 = cols(); r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    own = (r1.ru_utime + r1.ru_stime) - (r0.ru_utime + r0.ru_stime)
    dc = [(y - x) / hz for x, y in zip(c0, c1)]
    other = max(0.0, dc[0] - own)
    if (rc == 0 and other <= MAX_OTHER * wall * ncpu) or attempt == TRIES:
        break
    disturbed.append({"attempt": attempt, "rc": rc, "other_cpu_s": round(other, 2), "wall_s": round(wall, 2)})
    print(f"{name}: attempt {attempt} rc {rc}, other processes took {other:.1f} CPU s in {wall:.1f} s: again",
          flush=True)
metas = sorted(glob.glob(f"{d}/meta/step_times_rank*.json"), key=lambda f: int(f.split("rank")[-1][:-5]))
m = [json.load(open(f)) for f in metas]
world = int(nproc)
dp = m[0].get("dp", int(nproc)) if m else None   # ddp_job.py is data-parallel only
pp = m[0].get("pp", 1) if m else None
tp = m[0].get("tp", 1) if m else None
have = {x["rank"] for x in m}
files = sorted(os.path.relpath(f, d) for f in glob.glob(f"{d}/traces/*") + metas)
sc = {
    "scenario": name, "planted": planted, "world_size": world, "dp": dp, "pp": pp, "tp": tp,
    "grid": [[(s * dp + i) * tp + t for i in range(dp) for t in range(tp)] for s in range(pp)] if m else None,
    "grid_note": "grid[stage] = the global ranks of that pipeline stage; rank = (stage * dp + dp_index) * tp + "
    "tp_index (tp = 1: stage * dp + dp_index, the stage's DP group)",
    "microbatches": m[0].get("microbatches") if m else None,
    "steps": len(m[0]["step_ms"]) if m else None, "profiled_steps": m[0]["profiled_steps"] if m else None,
    "rc": [rc if (rc != 0 or r not in have) else 0 for r in range(world)], "torchrun_rc": rc,
    "wall_s": round(wall, 2), "command": "torchrun --nproc-per-node %s --master-port %s evals/record/%s "
    "--out OUT %s" % (nproc, port, os.path.basename(job), " ".join(args)),
    "torch": m[0]["torch"] if m else None, "cpus": ncpu, "threads_per_rank": 1,
    "date_utc": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
    "busy_1s_before_run": round(frac, 3), "own_cpu_s": round(own, 2),
    "other_cpu_s": round(other, 2),
    "attempt": attempt, "discarded_attempts": disturbed,
    "disturbed": not (rc == 0 and other <= MAX_OTHER * wall * ncpu), "irq_softirq_cpu_s": round(dc[1], 2), "steal_cpu_s": round(dc[2], 2),
    "cpu_note": "own_cpu_s: user+system CPU of the job's processes; other_cpu_s: user+nice+system CPU of the machine "
    "during the run minus own (other processes); irq/softirq (loopback networking too) and steal counted apart",
    "files": files,
}
json.dump(sc, open(f"{d}/scenario.json", "w"), indent=1)
print(f"{name}: rc {rc} wall {wall:.1f} s, attempt {attempt}, other cpu {sc['other_cpu_s']} s -> {d}")
EOF
}

declare -A SEEN
for rep in $(seq 1 "$REPS"); do
  for spec in "${RUNS[@]}"; do
    IFS='|' read -r name nproc planted args <<< "$spec"
    [[ "$ONLY" =~ ^\ +$ || "$ONLY" == *" $name "* ]] || continue
    k=$(( ${SEEN[$name]:-0} + 1 )); SEEN[$name]=$k   # dp2_clean runs before each of its 3 twins
    dir="$OUT/$name"; [ "$k" -gt 1 ] && dir="$OUT/$name/repeat$k"
    # shellcheck disable=SC2086
    record_one "$dir" "$name" "$nproc" "$planted" $args
  done
done
