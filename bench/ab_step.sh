#!/usr/bin/env bash
# Issue 38's A/B, "one visible step": the optimizer update made on the device workers inside the
# last gradient reduction (DataParallel::register_fused_optim, --step=fused) against
# forward_backward followed by optimizer->step() on the calling thread (--step=explicit), for the
# CNN (bench_cnn: Adam, batch 128) and the GPT (bench_gpt: nanoGPT's CPU configuration, AdamW,
# no clipping: with --clip-grad-norm the fused step already ran on the calling thread), on 2
# devices (threads, one process) and on 2 ranks (mpirun -np 2, DistributedDataParallel, one device
# each: there the fused step always ran at the end of forward_backward). Both sides alternate
# (ROUNDS rounds, the order flipping each round); prints per case the median over rounds of each
# run's median ms per step, [min-max] over rounds, and explicit/fused. Needs the commit that had
# both modes (see bench/RESULTS.md, "Issue 38").
#   BUILD_DIR=build ROUNDS=5 bench/ab_step.sh
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
source "$ROOT/bench/openblas_env.sh"
B=${BUILD_DIR:-$ROOT/build}/bench
ROUNDS=${ROUNDS:-5}
STEPS=${STEPS:-10}
REPS=${REPS:-5}
MPI=(mpirun -np 2 --bind-to core)
[[ $(id -u) == 0 ]] && MPI+=(--allow-run-as-root)
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
declare -A CMD=(
  [cnn_2dev]="$B/bench_cnn --model=cnn --devices=2"
  [cnn_2rank]="${MPI[*]} $B/bench_cnn --model=cnn --ddp=1 --devices=1"
  [gpt_2dev]="$B/bench_gpt --devices=2 --clip=0"
  [gpt_2rank]="${MPI[*]} $B/bench_gpt --ddp=1 --devices=1 --clip=0"
)
CASES=(cnn_2dev cnn_2rank gpt_2dev gpt_2rank)
run() {  # $1 case, $2 mode: appends the run's median ms per step
  ${CMD[$1]} --step="$2" --steps="$STEPS" --reps="$REPS" |
    sed -n 's/.*ms_per_step=\([0-9.]*\).*/\1/p' >>"$TMP/$1.$2"
}
for r in $(seq 1 "$ROUNDS"); do
  for c in "${CASES[@]}"; do
    if (( r % 2 )); then run "$c" fused; run "$c" explicit; else run "$c" explicit; run "$c" fused; fi
  done
  echo "round $r of $ROUNDS done (load $(cut -d' ' -f1 /proc/loadavg))" >&2
done
stat() { sort -g "$1" |
  awk '{a[NR]=$1} END {m=(NR%2)?a[(NR+1)/2]:(a[NR/2]+a[NR/2+1])/2; printf "%.2f %.2f %.2f", m, a[1], a[NR]}'; }
echo "| case | command | fused ms/step | explicit ms/step | explicit/fused | per-round ratios (median) |"
echo "|---|---|---|---|---|---|"
for c in "${CASES[@]}"; do
  read -r fm flo fhi <<<"$(stat "$TMP/$c.fused")"
  read -r em elo ehi <<<"$(stat "$TMP/$c.explicit")"
  ratio=$(awk -v e="$em" -v f="$fm" 'BEGIN {printf "%.3f", e/f}')
  paste "$TMP/$c.explicit" "$TMP/$c.fused" | awk '{printf "%.3f\n", $1/$2}' >"$TMP/$c.ratio"
  rounds=$(paste -sd' ' "$TMP/$c.ratio")
  read -r rm _ _ <<<"$(stat "$TMP/$c.ratio")"
  echo "| $c | \`${CMD[$c]#"$B/"}\` | $fm [$flo–$fhi] | $em [$elo–$ehi] | $ratio | $rounds ($rm) |"
done
