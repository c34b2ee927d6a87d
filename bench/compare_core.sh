#!/usr/bin/env bash
# Lockstep vs PyTorch on issue 2's three workloads, in one run (about 1–2 minutes on 2 cores):
# builds bench_core in Release, runs it with 1 and 2 intra-op threads (and OPENBLAS_NUM_THREADS
# 1 vs 2 at 2 threads), runs
# bench/pytorch_core.py (Debian's PyTorch via /usr/bin/python3, several thread configurations,
# each in its own process), and prints a side-by-side table (bench/compare_report.py).
#
#   bench/compare_core.sh                       # from the repository root or anywhere
#   RUNS=3 MIN_TIME=0.15 REPS=3 BUILD_DIR=build-bench OUT_DIR=/tmp/r bench/compare_core.sh
#
# RUNS: how many times the whole measurement (every Lockstep and PyTorch process) is repeated;
# step times differ between processes (the stack's random offset within its page: the reference
# step is ~5 or ~8 µs depending on the process, see RESULTS.md), so the table shows the median
# over runs with the [min–max] range.
# MIN_TIME: seconds per Google Benchmark repetition (PyTorch gets REPS*MIN_TIME per
# measurement, split in REPS rounds); REPS: repetitions within a run, the best is kept on both
# sides. Machine load spoils the numbers: the script prints the load average before and after
# each run and warns when something else is using the CPUs.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# OpenBLAS kernels for this CPU, the same for Lockstep and PyTorch (see the file).
source "$ROOT/bench/openblas_env.sh"
BUILD_DIR=${BUILD_DIR:-$ROOT/build-bench}
RUNS=${RUNS:-3}
MIN_TIME=${MIN_TIME:-0.15}
REPS=${REPS:-3}
OUT_DIR=${OUT_DIR:-$BUILD_DIR/bench-results}
PY=/usr/bin/python3  # Debian's python3-torch lives only here
mkdir -p "$OUT_DIR"
rm -rf "$OUT_DIR"/run*

echo "== machine"
echo "model: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) CPUs"
echo "date:  $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
echo "git:   $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo '?')$(git -C "$ROOT" diff --quiet HEAD -- src include 2>/dev/null || echo ' (src/include modified)')"
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
load1=$(cut -d' ' -f1 /proc/loadavg)
if awk -v l="$load1" -v n="$(nproc)" 'BEGIN { exit !(l > 0.5 * n) }'; then
  echo "WARNING: load average $load1 on $(nproc) CPUs: something else is running; timings will be low"
fi

# CPU seconds used by everything on the machine (from /proc/stat, USER_HZ=100 jiffies) and by
# this script's finished children: their difference over a run is what other processes took.
cpu_all() { awk '/^cpu /{ printf "%.2f", ($2 + $3 + $4 + $7 + $8 + $9) / 100 }' /proc/stat; }
# `times` must run in this shell, not in $(...) or a pipe (a fork has no children), so the
# result goes through a file into CHILD_CPU.
cpu_children() {
  times >"$OUT_DIR/.times"
  CHILD_CPU=$(awk 'NR == 2 { s = 0; for (i = 1; i <= NF; i++) { split($i, p, "m"); s += p[1] * 60 + p[2] }
                            printf "%.2f", s }' "$OUT_DIR/.times")
}

echo "== build (Release) in $BUILD_DIR"
cmake -S "$ROOT" -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DLOCKSTEP_BUILD_TESTS=OFF -DLOCKSTEP_BUILD_EXAMPLES=OFF -DLOCKSTEP_BUILD_BENCH=ON >/dev/null
ninja -C "$BUILD_DIR" bench_core | tail -1

for run in $(seq 1 "$RUNS"); do
  RUN_DIR=$OUT_DIR/run$run
  rm -rf "$RUN_DIR" && mkdir -p "$RUN_DIR"
  if [ "$run" -gt 1 ]; then echo "== run $run/$RUNS, load before: $(cut -d' ' -f1-3 /proc/loadavg)"; fi
  cpu_children; w0=$(date +%s.%N) a0=$(cpu_all) c0=$CHILD_CPU
  # Lockstep configurations: intra-op threads 1 and 2 (lockstep::set_num_threads) with
  # OPENBLAS_NUM_THREADS unset, then threads 2 with OPENBLAS_NUM_THREADS=1 and 2 to check that
  # OpenBLAS's own thread setting does not matter (Lockstep runs OpenBLAS single-threaded per call).
  for cfg in 1:unset 2:unset 2:1 2:2; do
    t=${cfg%%:*} ob=${cfg##*:}
    echo "== run $run/$RUNS: Lockstep bench_core --threads=$t, OPENBLAS_NUM_THREADS=$ob"
    (if [ "$ob" = unset ]; then unset OPENBLAS_NUM_THREADS; else export OPENBLAS_NUM_THREADS=$ob; fi
     "$BUILD_DIR/bench/bench_core" --threads="$t" --benchmark_min_time="$MIN_TIME" \
       --benchmark_repetitions="$REPS" --benchmark_display_aggregates_only=true \
       --benchmark_out="$RUN_DIR/lockstep_t${t}_ob${ob}.json" --benchmark_out_format=json 2>&1) |
      grep -E '^(lockstep_threads|openblas_threads)|_median ' || true
  done

  echo "== run $run/$RUNS: PyTorch bench/pytorch_core.py"
  PT_TIME=$(awk -v m="$MIN_TIME" -v r="$REPS" 'BEGIN { print m * r }')
  "$PY" "$ROOT/bench/pytorch_core.py" --min-time "$PT_TIME" --repeats "$REPS" | tee "$RUN_DIR/pytorch.txt" |
    grep -E '^(INFO torch_version|BEST)'
  cpu_children; w1=$(date +%s.%N) a1=$(cpu_all) c1=$CHILD_CPU
  awk -v w="$(echo "$w1 - $w0" | bc)" -v o="$(echo "($a1 - $a0) - ($c1 - $c0)" | bc)" \
    'BEGIN { printf "wall_s=%.1f other_cpu_s=%.1f other_cores=%.2f\n", w, o, o / w }' |
    tee "$RUN_DIR/contention.txt" | sed "s/^/== run $run\/$RUNS: other processes: /"
done

echo "== load after: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "== results ($OUT_DIR)"
"$PY" "$ROOT/bench/compare_report.py" "$OUT_DIR"/run* | tee "$OUT_DIR/table.md"
