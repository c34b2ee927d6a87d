#!/usr/bin/env bash
# Issue 16, point 9: the CLI's training step on the reference program against the same program in
# PyTorch, as the difference of two run lengths (start-up, data creation and the first epoch's
# warm-up cancel out): per step = (T(LONG epochs) - T(SHORT epochs)) / ((LONG - SHORT) * 25),
# 25 steps of 32 rows per epoch of the 800 training rows, validation included in both (once per
# epoch, as the reference program does). Lockstep: `lockstep train` (synthetic data = the
# reference program's shapes, mlp:10,5,2, SGD lr 0.01, batch 32) on --devices cpu:0 and on the
# default devices; PyTorch: bench/pytorch_reference_steps.py (nn.DataParallel on the CPU, which
# runs the module directly) under the interpreter PY (default /usr/bin/python3, Debian's
# python3-torch). RUNS repetitions, medians and [min-max].
#   bench/compare_cli_step.sh
#   RUNS=5 SHORT=20 LONG=220 BUILD_DIR=build PY=../torch-venv/bin/python3 bench/compare_cli_step.sh
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
source "$ROOT/bench/openblas_env.sh"
BUILD_DIR=${BUILD_DIR:-$ROOT/build}
RUNS=${RUNS:-5}
SHORT=${SHORT:-20}
LONG=${LONG:-220}
PY=${PY:-/usr/bin/python3}
LOCKSTEP="$BUILD_DIR/lockstep"
[[ -x "$LOCKSTEP" ]] || { echo "no $LOCKSTEP: build first (scripts/test.sh)" >&2; exit 2; }
STEPS=$(( (LONG - SHORT) * 25 ))

wall() {  # seconds of a whole command
  local t0 t1
  t0=$(date +%s.%N); "$@" >/dev/null; t1=$(date +%s.%N)
  echo "$t1 - $t0" | bc -l
}
median() { sort -g | awk '{a[NR]=$1} END {m=(NR%2)?a[(NR+1)/2]:(a[NR/2]+a[NR/2+1])/2; printf "%.2f [%.2f-%.2f]", m, a[1], a[NR]}'; }

lock_run() {  # $1 epochs, $2.. devices flag
  local e=$1; shift
  wall "$LOCKSTEP" train --data synthetic --model mlp:10,5,2 --optimizer sgd --lr 0.01 \
    --batch-size 32 --epochs "$e" --quiet "$@"
}
py_run() { "$PY" "$ROOT/bench/pytorch_reference_steps.py" "$1" "$2"; }

declare -A per
for r in $(seq 1 "$RUNS"); do
  for dev in cpu:0 default; do
    flag=(); [[ $dev == cpu:0 ]] && flag=(--devices cpu:0)
    s=$(lock_run "$SHORT" "${flag[@]}"); l=$(lock_run "$LONG" "${flag[@]}")
    per[lockstep_$dev]+="$(echo "($l - $s) / $STEPS * 1000000" | bc -l)"$'\n'
  done
  for t in 1 2; do
    s=$(py_run "$SHORT" "$t"); l=$(py_run "$LONG" "$t")
    per[pytorch_$t]+="$(echo "($l - $s) / $STEPS * 1000000" | bc -l)"$'\n'
  done
  echo "run $r of $RUNS done (load $(cut -d' ' -f1 /proc/loadavg))" >&2
done
echo "PyTorch: $("$PY" -c 'import torch; print(torch.__version__, "threads", torch.get_num_threads())')"
echo "| program | µs per step, median [min-max] over $RUNS runs |"
echo "|---|---|"
echo "| lockstep train --devices cpu:0 | $(printf '%s' "${per[lockstep_cpu:0]}" | median) |"
echo "| lockstep train (default devices: $(nproc) CPU devices) | $(printf '%s' "${per[lockstep_default]}" | median) |"
echo "| PyTorch reference program, 1 thread | $(printf '%s' "${per[pytorch_1]}" | median) |"
echo "| PyTorch reference program, 2 threads | $(printf '%s' "${per[pytorch_2]}" | median) |"
