#!/usr/bin/env bash
# Issue 5, "Benchmarks": the MLP 784-256-256-10 on Fashion-MNIST, global batch 128, 2 ranks:
# Lockstep's DistributedDataParallel over the mpi backend (bench/bench_ddp, with and without
# overlap, and the other configurations it lists) next to PyTorch DDP with gloo
# (bench/pytorch_ddp_fashion.py, Debian's PyTorch at /usr/bin/python3), in one script run.
# Builds bench_ddp in Release (BUILD_DIR), runs it under mpirun -np 2 --bind-to core, then
# PyTorch with each rank pinned to one CPU as mpirun pins Lockstep's (and, with UNBOUND=1, the
# default, once more unpinned); 1 intra-op thread per rank and OPENBLAS_NUM_THREADS=1 on both
# sides. Prints the machine, date, git commit, the load before and after and the CPU that other
# processes used meanwhile, the raw RESULT lines and a Markdown table with the ratio
# Lockstep / PyTorch (samples/s).
#
#   bench/compare_ddp.sh
#   MIN_TIME=2 REPS=3 UNBOUND=1 WAIT=1 LOAD_MAX=0.5 MAX_WAIT=600 BUILD_DIR=build-ddp \
#     DATA=/usr/share/datasets/fashion-mnist bench/compare_ddp.sh
#
# MIN_TIME: seconds per timed round; REPS: rounds per configuration (the best is kept); both
# sides use the same values. WAIT=1 (default): before measuring, wait at most MAX_WAIT seconds
# until the 1-minute load average is below LOAD_MAX and the machine was idle for 3 s (WAIT=0:
# measure at once). Takes about 1.5 minutes on 2 cores after the build and the wait.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# OpenBLAS kernels for this CPU, the same for Lockstep and PyTorch (see the file).
source "$ROOT/bench/openblas_env.sh"
BUILD_DIR=${BUILD_DIR:-$ROOT/build-ddp}
MIN_TIME=${MIN_TIME:-2}
REPS=${REPS:-3}
UNBOUND=${UNBOUND:-1}
DATA=${DATA:-/usr/share/datasets/fashion-mnist}
WAIT=${WAIT:-1}
LOAD_MAX=${LOAD_MAX:-0.5}
MAX_WAIT=${MAX_WAIT:-600}
PY=/usr/bin/python3  # Debian's python3-torch lives only here
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT

echo "== machine"
echo "model: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) CPUs"
echo "date:  $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
echo "git:   $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo '?')$(
  git -C "$ROOT" diff --quiet HEAD -- 2>/dev/null || echo ' (with uncommitted changes)')"
echo "mpi:   $(mpirun --version 2>/dev/null | head -n 1)"
echo "torch: $($PY -c 'import torch; print(torch.__version__)' 2>/dev/null || echo 'not found')"

echo "== build (Release) in $BUILD_DIR"
cmake -S "$ROOT" -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release -DLOCKSTEP_MPI=ON \
  -DLOCKSTEP_BUILD_TESTS=OFF -DLOCKSTEP_BUILD_EXAMPLES=OFF -DLOCKSTEP_BUILD_BENCH=ON >/dev/null
cmake --build "$BUILD_DIR" --target bench_ddp | tail -n 1

# CPU seconds used by the whole machine (/proc/stat, USER_HZ = 100) and by this shell's finished
# children (bash `times`, second line; it must run in this shell, not in a $(...) subshell);
# their difference over a run is what other processes used.
cpu_all() { awk '/^cpu /{ printf "%.2f", ($2 + $3 + $4 + $7 + $8 + $9) / 100 }' /proc/stat; }
children_cpu() {  # result in CHILD_CPU
  times >"$OUT/times"
  CHILD_CPU=$(awk 'NR == 2 { s = 0; for (i = 1; i <= NF; i++) { split($i, p, "m"); s += p[1] * 60 + p[2] }
                            printf "%.2f", s }' "$OUT/times")
}
# Runs "$@" with its output into file $1, then prints that output, its wall time and the
# cores that other processes kept busy meanwhile.
measured() {
  local log=$1 a0 c0 t0 a1 t1
  shift
  a0=$(cpu_all) t0=$(date +%s.%N)
  children_cpu
  c0=$CHILD_CPU
  "$@" >"$log" 2>&1 || echo "== ERROR: $* exited with status $?" >>"$log"
  children_cpu
  a1=$(cpu_all) t1=$(date +%s.%N)
  cat "$log"
  awk -v a="$a0" -v A="$a1" -v c="$c0" -v C="$CHILD_CPU" -v t="$t0" -v T="$t1" \
    'BEGIN { o = ((A - a) - (C - c)) / (T - t); if (o < 0) o = 0
             printf "== %.1f s wall; other processes used %.2f cores meanwhile\n", T - t, o }'
}
# Waits (at most MAX_WAIT seconds) until the 1-minute load average is below LOAD_MAX and the
# machine was idle (< 0.1 core busy) for 3 s; prints what it measured.
wait_quiet() {
  local start=$SECONDS load a0 busy
  while :; do
    load=$(cut -d' ' -f1 /proc/loadavg)
    a0=$(cpu_all)
    sleep 3
    busy=$(awk -v a="$a0" -v A="$(cpu_all)" 'BEGIN { printf "%.2f", (A - a) / 3 }')
    if awk -v l="$load" -v b="$busy" -v m="$LOAD_MAX" 'BEGIN { exit !(l < m && b < 0.1) }'; then
      echo "== quiet: load $load, $busy cores busy over 3 s (waited $((SECONDS - start)) s)"
      return
    fi
    if [ $((SECONDS - start)) -ge "$MAX_WAIT" ]; then
      echo "== WARNING: not quiet after $MAX_WAIT s (load $load, $busy cores busy): measuring anyway"
      return
    fi
  done
}

# Root is allowed (CI and containers); traffic stays on loopback; shared memory between ranks.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_btl=self,vader,tcp OMPI_MCA_btl_tcp_if_include=lo OMPI_MCA_oob_tcp_if_include=lo
export OPENBLAS_NUM_THREADS=1

[ "$WAIT" = 1 ] && wait_quiet
echo "== load before: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "== Lockstep: mpirun -np 2 --bind-to core bench_ddp --data=$DATA --min-time=$MIN_TIME --reps=$REPS"
measured "$OUT/lockstep.txt" mpirun -np 2 --bind-to core --report-bindings \
  "$BUILD_DIR/bench/bench_ddp" --data="$DATA" --min-time="$MIN_TIME" --reps="$REPS"
echo "== PyTorch: $PY bench/pytorch_ddp_fashion.py --bind 1 --min-time $MIN_TIME --repeats $REPS"
measured "$OUT/pytorch.txt" $PY "$ROOT/bench/pytorch_ddp_fashion.py" --data "$DATA" --bind 1 \
  --min-time "$MIN_TIME" --repeats "$REPS"
if [ "$UNBOUND" = 1 ]; then
  echo "== PyTorch: $PY bench/pytorch_ddp_fashion.py --bind 0 --min-time $MIN_TIME --repeats $REPS"
  measured "$OUT/pytorch-unbound.txt" $PY "$ROOT/bench/pytorch_ddp_fashion.py" --data "$DATA" \
    --bind 0 --min-time "$MIN_TIME" --repeats "$REPS"
fi
echo "== load after: $(cut -d' ' -f1-3 /proc/loadavg)"

echo
results=("$OUT/lockstep.txt" "$OUT/pytorch.txt")
[ "$UNBOUND" = 1 ] && results+=("$OUT/pytorch-unbound.txt")
$PY - "${results[@]}" <<'EOF'
import sys

rows = []
for path in sys.argv[1:]:
    for line in open(path):
        if line.startswith("RESULT "):
            rows.append(dict(kv.split("=", 1) for kv in line.split()[1:]))
torch_rows = [r for r in rows if r["framework"] == "pytorch"]
ref = next((r for r in torch_rows if r["config"].endswith("bind:1")), None)
if ref is None:
    sys.exit("no PyTorch DDP result: no table")
ref_sps = float(ref["samples_per_s"])
names = {"lockstep": "Lockstep DDP, mpi", "pytorch": "PyTorch DDP"}
print("2 ranks x 1 thread, global batch 128 (64 per rank), best of the rounds, slower rank's time;"
      " ratio = samples/s / PyTorch DDP (pinned) samples/s\n")
print("| framework | configuration | µs/step | samples/s | Lockstep / PyTorch | comm bytes/step "
      "(per rank) | buckets |")
print("|---|---|---:|---:|---:|---:|---:|")
for r in rows:
    sps = float(r["samples_per_s"])
    comm = f'{int(r["comm_bytes_per_step"]):,} ({r["comm"]})'
    print(f'| {names[r["framework"]]} | {r["config"]} | {float(r["us_per_step"]):,.0f} | '
          f'{sps:,.0f} | {sps / ref_sps:.2f}x | {comm} | {r.get("buckets", "?")} |')
EOF
