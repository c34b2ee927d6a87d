#!/usr/bin/env bash
# Lockstep vs PyTorch on issue 2's three workloads, in one run (about 1–2 minutes on 2 cores):
# builds bench_core in Release, runs it with 1 and 2 intra-op threads (and OPENBLAS_NUM_THREADS
# 1 vs 2 at 2 threads), runs
# bench/pytorch_core.py (Debian's PyTorch via /usr/bin/python3, several thread configurations,
# each in its own process), and prints a side-by-side table (bench/compare_report.py).
#
#   bench/compare_core.sh                       # from the repository root or anywhere
#   MIN_TIME=0.5 REPS=3 BUILD_DIR=build-bench OUT_DIR=/tmp/r bench/compare_core.sh
#
# MIN_TIME: seconds per Google Benchmark repetition (PyTorch gets REPS*MIN_TIME per
# measurement, split in REPS rounds); REPS: repetitions, the best is kept on both sides.
# Machine load spoils the numbers: the script prints the load average before and after and
# warns when something else is using the CPUs.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD_DIR=${BUILD_DIR:-$ROOT/build-bench}
MIN_TIME=${MIN_TIME:-0.4}
REPS=${REPS:-3}
OUT_DIR=${OUT_DIR:-$BUILD_DIR/bench-results}
PY=/usr/bin/python3  # Debian's python3-torch lives only here
mkdir -p "$OUT_DIR"

echo "== machine"
echo "model: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) CPUs"
echo "date:  $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
echo "git:   $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo '?')$(git -C "$ROOT" diff --quiet HEAD -- src include 2>/dev/null || echo ' (src/include modified)')"
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
load1=$(cut -d' ' -f1 /proc/loadavg)
if awk -v l="$load1" -v n="$(nproc)" 'BEGIN { exit !(l > 0.5 * n) }'; then
  echo "WARNING: load average $load1 on $(nproc) CPUs: something else is running; timings will be low"
fi

echo "== build (Release) in $BUILD_DIR"
cmake -S "$ROOT" -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DLOCKSTEP_BUILD_TESTS=OFF -DLOCKSTEP_BUILD_EXAMPLES=OFF -DLOCKSTEP_BUILD_BENCH=ON >/dev/null
ninja -C "$BUILD_DIR" bench_core | tail -1

# Lockstep configurations: intra-op threads 1 and 2 (lockstep::set_num_threads) with
# OPENBLAS_NUM_THREADS unset, then threads 2 with OPENBLAS_NUM_THREADS=1 and 2 to check that
# OpenBLAS's own thread setting does not matter (Lockstep runs OpenBLAS single-threaded per call).
for cfg in 1:unset 2:unset 2:1 2:2; do
  t=${cfg%%:*} ob=${cfg##*:}
  echo "== Lockstep bench_core --threads=$t, OPENBLAS_NUM_THREADS=$ob"
  (if [ "$ob" = unset ]; then unset OPENBLAS_NUM_THREADS; else export OPENBLAS_NUM_THREADS=$ob; fi
   "$BUILD_DIR/bench/bench_core" --threads="$t" --benchmark_min_time="$MIN_TIME" \
     --benchmark_repetitions="$REPS" --benchmark_display_aggregates_only=true \
     --benchmark_out="$OUT_DIR/lockstep_t${t}_ob${ob}.json" --benchmark_out_format=json 2>&1) |
    grep -E '^(lockstep_threads|openblas_threads)|_median ' || true
done

echo "== PyTorch bench/pytorch_core.py"
PT_TIME=$(awk -v m="$MIN_TIME" -v r="$REPS" 'BEGIN { print m * r }')
"$PY" "$ROOT/bench/pytorch_core.py" --min-time "$PT_TIME" --repeats "$REPS" | tee "$OUT_DIR/pytorch.txt" |
  grep -E '^(INFO torch_version|BEST)'

echo "== load after: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "== results ($OUT_DIR)"
"$PY" "$ROOT/bench/compare_report.py" "$OUT_DIR" | tee "$OUT_DIR/table.md"
