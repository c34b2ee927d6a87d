#!/usr/bin/env bash
# The main job (issue 4) next to PyTorch on the same data, model and settings, in one run:
#   lockstep train --data fashion-mnist --model mlp:784,256,10 --optimizer adam --lr 0.001
#                  --batch-size 64 --epochs 10            (default devices: one per usable core)
#   /usr/bin/python3 bench/pytorch_fashion.py              (PyTorch default threads)
# Each is run RUNS times (default 2), alternating; prints every run's per-epoch lines and final
# line, then a summary with the best wall time of each and the final test accuracies.
#
#   bench/compare_fashion.sh [BUILD_DIR] [RUNS]
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# OpenBLAS kernels for this CPU, the same for Lockstep and PyTorch (see the file).
source "$ROOT/bench/openblas_env.sh"
BUILD="${1:-$ROOT/build}"
RUNS="${2:-2}"
LOCKSTEP="$BUILD/lockstep"
[[ -x "$LOCKSTEP" ]] || { echo "compare_fashion: $LOCKSTEP not built" >&2; exit 1; }

echo "INFO date=$(date -u +%Y-%m-%dT%H:%M:%SZ) host=$(hostname) cpu=\"$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')\" nproc=$(nproc) commit=$(git -C "$ROOT" rev-parse --short HEAD)"
FLAGS=(--data fashion-mnist --model mlp:784,256,10 --optimizer adam --lr 0.001 --batch-size 64 --epochs 10)
for run in $(seq 1 "$RUNS"); do
  echo "== run $run: lockstep train ${FLAGS[*]}"
  t0=$(date +%s.%N)
  "$LOCKSTEP" train "${FLAGS[@]}"
  t1=$(date +%s.%N)
  echo "WALL lockstep run=$run seconds=$(awk "BEGIN{printf \"%.1f\", $t1 - $t0}")"
  echo "== run $run: /usr/bin/python3 bench/pytorch_fashion.py"
  t0=$(date +%s.%N)
  /usr/bin/python3 "$ROOT/bench/pytorch_fashion.py"
  t1=$(date +%s.%N)
  echo "WALL pytorch run=$run seconds=$(awk "BEGIN{printf \"%.1f\", $t1 - $t0}")"
done
