#!/usr/bin/env bash
# Issue 3, "Speed it must measure": DataParallel on CPU devices vs the plain model and vs
# PyTorch DistributedDataParallel (gloo, 2 processes x 1 thread), in one script run.
# Builds bench/bench_parallel in Release, runs it and bench/pytorch_ddp.py (Debian's PyTorch,
# /usr/bin/python3) RUNS times, waiting before each run until the machine is quiet, and prints
# a side-by-side Markdown table with the issue's goals (median over runs of the best repetition
# within a run, [min-max] over runs).
#
#   bench/compare_parallel.sh
#   RUNS=3 MIN_TIME=0.3 REPS=3 PHASES=1 BUILD_DIR=build-pbench OUT_DIR=/tmp/r bench/compare_parallel.sh
#
# RUNS: repetitions of the whole measurement (separate processes); MIN_TIME: seconds per Google
# Benchmark repetition (PyTorch gets REPS*MIN_TIME per configuration, in REPS rounds); REPS:
# repetitions within a run, the best is kept on both sides. LOAD_MAX (default 0.5): before each
# run the script waits (at most MAX_WAIT seconds, default 1800) until the 1-minute load average
# is below it and the other processes used under 0.1 core over the last 3 s; it prints the load
# it measured under and the CPU other processes took during the run; a run during which other
# processes used more than OTHER_MAX cores (default 0.15) is discarded and repeated (at most
# MAX_TRIES attempts in all, default 12). PHASES=1 (default) also
# prints bench_parallel --phases=mlp (per-phase step breakdown, overlap off and on). Every
# DataParallel row steps the SGD after forward_backward on the calling thread, as the CLI does.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# OpenBLAS kernels for this CPU, the same for Lockstep and PyTorch (see the file).
source "$ROOT/bench/openblas_env.sh"
BUILD_DIR=${BUILD_DIR:-$ROOT/build-pbench}
RUNS=${RUNS:-3}
MIN_TIME=${MIN_TIME:-0.3}
REPS=${REPS:-3}
PHASES=${PHASES:-1}
LOAD_MAX=${LOAD_MAX:-0.5}
MAX_WAIT=${MAX_WAIT:-1800}
OTHER_MAX=${OTHER_MAX:-0.15}
MAX_TRIES=${MAX_TRIES:-12}
OUT_DIR=${OUT_DIR:-$BUILD_DIR/parallel-results}
PY=/usr/bin/python3  # Debian's python3-torch lives only here
mkdir -p "$OUT_DIR"
rm -rf "$OUT_DIR"/run* "$OUT_DIR"/try* "$OUT_DIR"/spoiled*

# CPU seconds used by everything on the machine (/proc/stat, USER_HZ=100) and by this script's
# finished children; their difference over a run is what other processes took.
cpu_all() { awk '/^cpu /{ printf "%.2f", ($2 + $3 + $4 + $7 + $8 + $9) / 100 }' /proc/stat; }
cpu_children() {  # `times` must run in this shell; result in CHILD_CPU
  times >"$OUT_DIR/.times"
  CHILD_CPU=$(awk 'NR == 2 { s = 0; for (i = 1; i <= NF; i++) { split($i, p, "m"); s += p[1] * 60 + p[2] }
                            printf "%.2f", s }' "$OUT_DIR/.times")
}
# Waits until the 1-minute load average < LOAD_MAX and the machine was idle for 3 s.
wait_quiet() {
  local start=$SECONDS busy load
  while :; do
    load=$(cut -d' ' -f1 /proc/loadavg)
    local a0; a0=$(cpu_all); sleep 3; busy=$(echo "($(cpu_all) - $a0) / 3" | bc -l)
    if awk -v l="$load" -v b="$busy" -v m="$LOAD_MAX" 'BEGIN { exit !(l < m && b < 0.1) }'; then
      printf '== quiet: load %s, other CPU over 3 s %.2f cores (waited %d s)\n' "$load" "$busy" $((SECONDS - start))
      return
    fi
    if [ $((SECONDS - start)) -ge "$MAX_WAIT" ]; then
      printf '== WARNING: still busy after %d s (load %s, %.2f cores busy): measuring anyway\n' \
        "$MAX_WAIT" "$load" "$busy"
      return
    fi
    sleep 10
  done
}

echo "== machine"
echo "model: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) CPUs ($(lscpu | sed -n 's/^Thread(s) per core: *//p') thread(s) per core)"
echo "date:  $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
echo "git:   $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo '?')$(git -C "$ROOT" diff --quiet HEAD -- src include 2>/dev/null || echo ' (src/include modified)')"

echo "== build (Release) in $BUILD_DIR"
cmake -S "$ROOT" -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DLOCKSTEP_BUILD_TESTS=OFF -DLOCKSTEP_BUILD_EXAMPLES=OFF -DLOCKSTEP_BUILD_BENCH=ON >/dev/null
ninja -C "$BUILD_DIR" bench_parallel | tail -1

# One measurement: bench_parallel, then pytorch_ddp.py, into $1; prints other_cores.
measure() {
  local dir=$1 tag=$2
  mkdir -p "$dir"
  echo "== $tag: load before: $(cut -d' ' -f1-3 /proc/loadavg)" | tee "$dir/load.txt"
  cpu_children; local w0 a0 c0 w1 a1 c1; w0=$(date +%s.%N) a0=$(cpu_all) c0=$CHILD_CPU
  echo "== $tag: Lockstep bench_parallel"
  (unset OPENBLAS_NUM_THREADS
   "$BUILD_DIR/bench/bench_parallel" --benchmark_min_time="$MIN_TIME" \
     --benchmark_repetitions="$REPS" --benchmark_display_aggregates_only=true \
     --benchmark_out="$dir/lockstep.json" --benchmark_out_format=json 2>&1) |
    grep -E '_median ' || true
  # The machine's own ceiling for 2-way data parallelism: two independent single-threaded
  # processes (plain model, pinned to cpu 0 and cpu 1) at once vs one alone (pinned to cpu 0).
  local alone p0 p1
  alone=$(taskset -c 0 "$BUILD_DIR/bench/bench_parallel" --run=mlp/single/threads:1 --steps=800 | awk '{print $6}')
  taskset -c 0 "$BUILD_DIR/bench/bench_parallel" --run=mlp/single/threads:1 --steps=800 >"$dir/p0.txt" &
  taskset -c 1 "$BUILD_DIR/bench/bench_parallel" --run=mlp/single/threads:1 --steps=800 >"$dir/p1.txt"
  wait
  p0=$(awk '{print $6}' "$dir/p0.txt") p1=$(awk '{print $6}' "$dir/p1.txt")
  # The compute-only ceiling of 2-device DataParallel: two processes that each train the plain
  # model on half the batch (what one replica computes), pinned to cpu 0 / cpu 1, at once.
  taskset -c 0 "$BUILD_DIR/bench/bench_parallel" --run=mlp/half/threads:1 --steps=1600 >"$dir/h0.txt" &
  taskset -c 1 "$BUILD_DIR/bench/bench_parallel" --run=mlp/half/threads:1 --steps=1600 >"$dir/h1.txt"
  wait
  local h0 h1
  h0=$(awk '{print $6}' "$dir/h0.txt") h1=$(awk '{print $6}' "$dir/h1.txt")
  echo "alone=$alone p0=$p0 p1=$p1 h0=$h0 h1=$h1" | tee "$dir/ceiling.txt" | sed "s|^|== $tag: 2 independent processes, MLP samples/s: |"
  echo "== $tag: PyTorch bench/pytorch_ddp.py"
  "$PY" "$ROOT/bench/pytorch_ddp.py" --min-time "$PT_TIME" --repeats "$REPS" | tee "$dir/pytorch.txt"
  cpu_children; w1=$(date +%s.%N) a1=$(cpu_all) c1=$CHILD_CPU
  awk -v w="$(echo "$w1 - $w0" | bc)" -v o="$(echo "($a1 - $a0) - ($c1 - $c0)" | bc)" \
    'BEGIN { if (o < 0) o = 0; printf "wall_s=%.1f other_cpu_s=%.1f other_cores=%.2f\n", w, o, o / w }' >"$dir/contention.txt"
  echo "load_after=$(cut -d' ' -f1-3 /proc/loadavg | tr ' ' ,)" >>"$dir/contention.txt"
  sed "s|^|== $tag: other processes: |" "$dir/contention.txt" >&2
}

# RUNS measurements that other processes left alone (they used at most OTHER_MAX cores during
# the run); a spoiled attempt is kept as spoiled<i>/ and repeated, at most MAX_TRIES attempts.
PT_TIME=$(awk -v m="$MIN_TIME" -v r="$REPS" 'BEGIN { print m * r }')
good=0 attempt=0
while [ "$good" -lt "$RUNS" ] && [ "$attempt" -lt "$MAX_TRIES" ]; do
  attempt=$((attempt + 1))
  wait_quiet
  dir=$OUT_DIR/try$attempt
  rm -rf "$dir"
  measure "$dir" "attempt $attempt (run $((good + 1))/$RUNS)"
  other=$(sed -n 's/.*other_cores=\([0-9.]*\).*/\1/p' "$dir/contention.txt")
  if awk -v o="$other" -v m="$OTHER_MAX" 'BEGIN { exit !(o <= m) }'; then
    good=$((good + 1))
    mv "$dir" "$OUT_DIR/run$good"
  else
    echo "== attempt $attempt spoiled: other processes used $other cores (> $OTHER_MAX); repeating"
    mv "$dir" "$OUT_DIR/spoiled$attempt"
  fi
done
if [ "$good" -lt "$RUNS" ]; then
  echo "== WARNING: only $good clean run(s) in $MAX_TRIES attempts; spoiled ones are in $OUT_DIR/spoiled*"
fi

if [ "$PHASES" = 1 ]; then
  wait_quiet
  echo "== per-phase breakdown (bench_parallel --phases=mlp), load $(cut -d' ' -f1-3 /proc/loadavg)"
  for o in 0 1; do
    "$BUILD_DIR/bench/bench_parallel" --phases=mlp --steps=300 --overlap=$o
  done |
    tee "$OUT_DIR/phases.txt"
fi

echo "== load after: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "== results ($OUT_DIR)"
"$PY" - $(ls -d "$OUT_DIR"/run* 2>/dev/null || ls -d "$OUT_DIR"/spoiled*) <<'EOF' | tee "$OUT_DIR/table.md"
import json, os, statistics, sys

BATCH = {"ref": 32, "mlp": 128}
LS = [("single/threads:1", "(a) plain model, 1 thread"),
      ("single/threads:2", "(b) plain model, 2 threads (GEMMs split over both cores)"),
      ("dp1/threads:1", "(c) DataParallel, 1 device x 1 thread"),
      ("dp1/threads:2", "(c) DataParallel, 1 device x 2 threads (default threads_per_device; the CLI's path)"),
      ("dp2/overlap:1", "(d) DataParallel, 2 devices x 1 thread, overlap on (the CLI's path)"),
      ("dp2/overlap:0", "(d) DataParallel, 2 devices x 1 thread, overlap off"),
      ("dp2/overlap:1/bucket:64KB", "(d) DataParallel, 2 devices, overlap on, 64 KiB buckets"),
      ("dp2/deterministic", "(e) DataParallel, 2 devices, deterministic"),
      ("dp2/gather", "DataParallel, 2 devices, gather path (dp(x) + loss.backward())")]
PT = [("single/threads:1", "PyTorch 1 process, 1 thread"),
      ("single/threads:2", "PyTorch 1 process, torch threads 2, OPENBLAS_NUM_THREADS=1"),
      ("single/openblas:2", "PyTorch 1 process, torch threads 1, OPENBLAS_NUM_THREADS=2"),
      ("ddp2", "PyTorch DDP gloo, 2 processes x 1 thread")]

ls = {}   # (workload, config) -> [seconds per step, one per run]
moved = {}
pt = {}
info = {}
cont = []
for i, d in enumerate(sys.argv[1:], 1):
    p = os.path.join(d, "lockstep.json")
    if os.path.exists(p):
        best = {}
        for b in json.load(open(p))["benchmarks"]:
            if b.get("run_type") != "iteration":
                continue
            name = b.get("run_name", b["name"]).replace("/real_time", "")
            w, cfg = name.split("/", 1)
            sec = b["step_time"]  # seconds per step (kIsRate|kInvert counter)
            best[(w, cfg)] = min(sec, best.get((w, cfg), float("inf")))
            moved[(w, cfg)] = b.get("bytes_moved", 0)
        for k, v in best.items():
            ls.setdefault(k, []).append(v)
    p = os.path.join(d, "pytorch.txt")
    if os.path.exists(p):
        for line in open(p):
            parts = line.split()
            if not parts:
                continue
            kv = dict(x.split("=", 1) for x in parts[1:] if "=" in x)
            if parts[0] == "INFO":
                info.update(kv)
            elif parts[0] == "RESULT":
                pt.setdefault((kv["workload"], kv["config"]), []).append(float(kv["us_per_step"]) * 1e-6)
    p = os.path.join(d, "contention.txt")
    if os.path.exists(p):
        kv = dict(x.split("=", 1) for x in open(p).read().split() if "=" in x)
        lb = open(os.path.join(d, "load.txt")).read().split("before:")[-1].strip()
        cont.append(f"run {i}: load before {lb}, other processes {float(kv['other_cores']):.2f} "
                    f"cores over {kv['wall_s']} s")

med = lambda v: statistics.median(v)

ceil = []
half_ceil = []
for d in sys.argv[1:]:
    p = os.path.join(d, "ceiling.txt")
    if os.path.exists(p):
        kv = dict(x.split("=", 1) for x in open(p).read().split() if "=" in x)
        try:
            ceil.append((float(kv["p0"]) + float(kv["p1"])) / float(kv["alone"]))
            half_ceil.append((float(kv["h0"]) + float(kv["h1"])) / float(kv["alone"]))
        except (KeyError, ValueError, ZeroDivisionError):
            pass

def cell(w, v):
    if not v:
        return "–", "–"
    m = med(v)
    rng = f" [{min(v) * 1e6:,.0f}–{max(v) * 1e6:,.0f}]" if len(v) > 1 else ""
    return f"{m * 1e6:,.1f}{rng}", f"{BATCH[w] / m:,.0f}"

print(f"{len(sys.argv) - 1} run(s). PyTorch {info.get('torch_version', '?')} ({info.get('python', '?')}), "
      "gloo backend. Cells: median over runs of the best repetition within a run, [min–max] over runs.")
print()
print("Load: " + "; ".join(cont) + ".")
for w in ("ref", "mlp"):
    base = ls.get((w, "single/threads:1"))
    ddp = pt.get((w, "ddp2"))
    print()
    print(f"### {w} (global batch {BATCH[w]})")
    print()
    print("| configuration | µs/step | samples/s | vs (a) 1 dev 1 thread | vs PyTorch DDP 2×1 | bytes moved/step |")
    print("|---|---|---|---|---|---|")
    for key, label, src in [(k, l, "ls") for k, l in LS] + [(k, l, "pt") for k, l in PT]:
        v = (ls if src == "ls" else pt).get((w, key))
        if not v:
            continue
        t, s = cell(w, v)
        r1 = f"{med(base) / med(v):.2f}×" if base else "–"
        rd = f"{med(ddp) / med(v):.2f}×" if ddp else "–"
        mb = f"{moved.get((w, key), 0):,.0f}" if src == "ls" else "–"
        print(f"| {label} | {t} | {s} | {r1} | {rd} | {mb} |")

if ceil:
    print()
    print("Machine ceiling for 2-way data parallelism on the MLP: two independent single-threaded "
          "processes (plain model, pinned to cpu 0 / cpu 1) together reach "
          f"{med(ceil):.2f}× [{min(ceil):.2f}–{max(ceil):.2f}] the samples/s of one alone.")
if half_ceil:
    print()
    print("Compute-only ceiling of 2-device DataParallel on the MLP: two processes that each train "
          "the plain model on half the batch (64 rows, what one replica computes), pinned to cpu 0 "
          "/ cpu 1, together reach "
          f"{med(half_ceil):.2f}× [{min(half_ceil):.2f}–{max(half_ceil):.2f}] the samples/s of one "
          "process on the whole batch alone: the most 2 devices can reach with nothing copied, "
          "reduced or waited for.")
print()
print("### Goals (MLP 784-256-256-10, batch 128; DataParallel 2 devices x 1 thread, reducer path "
      "and the step on the calling thread, as the CLI runs it)")
print()
print("| goal | measured | met |")
print("|---|---|---|")
g = lambda d, k: med(d[("mlp", k)]) if ("mlp", k) in d else None
a, b = g(ls, "single/threads:1"), g(ls, "single/threads:2")
d_on, d_off, ddp = g(ls, "dp2/overlap:1"), g(ls, "dp2/overlap:0"), g(pt, "ddp2")
if None not in (a, b, d_on, d_off):
    d = min(d_on, d_off)
    which = "overlap on" if d == d_on else "overlap off"
    rows = [("2 devices ≥ 1.8× samples/s of 1 single-threaded device", a / d, 1.8),
            ("2 devices no slower than 1 device using both cores (≥ 1.0×)", b / d, 1.0)]
    if ddp is not None:
        rows.append(("2 devices ≥ 2× PyTorch DDP (gloo, 2 × 1 thread)", ddp / d, 2.0))
    for name, r, goal in rows:
        print(f"| {name} | {r:.2f}× ({which}) | {'yes' if r >= goal else '**no**'} |")
    if half_ceil:
        print()
        print(f"2 devices ({which}) reach {a / d:.2f}× the samples/s of (a); the compute-only "
              f"ceiling measured in the same runs is {med(half_ceil):.2f}×, so DataParallel gets "
              f"{a / d / med(half_ceil) * 100:.0f} % of it.")
EOF
