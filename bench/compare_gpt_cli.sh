#!/usr/bin/env bash
# Issue 20: nanoGPT's CPU configuration trained through the CLI on the fortunes corpus
# (scripts/fortunes-corpus.sh), next to PyTorch's train.py loop on the same text
# (bench/pytorch_gpt_train.py), in one script run: 4 layers, 4 heads, 128 wide, block 64,
# batch 12, AdamW lr 1e-3 betas 0.9,0.99, weight decay 0.1 (>= 2-d tensors), warmup 100, cosine
# to 1e-4 at lr-decay-iters (default: the run's length), clipping 1.0. Each of ROUNDS rounds runs,
# as separate processes, alternating (every other round reversed):
#   PyTorch, 2 threads (its default here)
#   lockstep train --devices cpu:0          (2 intra-op threads)
#   lockstep train --devices cpu:0,cpu:1    (DataParallel, 1 thread per device)
# each for ITERS iterations with one evaluation at the end (EVAL_ITERS batches of each part).
# tokens/s: batch x block x iterations over the training loop's time (evaluation excluded; the
# CLI's summary line, PyTorch's loop timer). The table gives the median over the rounds, its
# range, and the final validation losses.
#   bench/compare_gpt_cli.sh [BUILD_DIR]          (default: build/ in the repository)
#   env: PYTHON=../torch-venv/bin/python3 ROUNDS=3 ITERS=200 EVAL_ITERS=20 TEXT=(made here)
#        DECAY= (lr-decay-iters; default ITERS) SKIP_BUILD=0
# The issue's quality check: ROUNDS=1 ITERS=2000 EVAL_ITERS=200 bench/compare_gpt_cli.sh
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${1:-$ROOT/build}"
PYTHON="${PYTHON:-$ROOT/../torch-venv/bin/python3}"
ROUNDS="${ROUNDS:-3}" ITERS="${ITERS:-200}" EVAL_ITERS="${EVAL_ITERS:-20}"
DECAY="${DECAY:-$ITERS}"
[[ "${SKIP_BUILD:-0}" == 1 ]] || cmake --build "$BUILD" --target lockstep >/dev/null
CLI="$BUILD/lockstep"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
TEXT="${TEXT:-$work/fortunes.txt}"
[[ -f "$TEXT" ]] || "$ROOT/scripts/fortunes-corpus.sh" "$TEXT"
out="$work/results"
lockstep_run() {  # lockstep_run DEVICES
  local line
  line="$("$CLI" train --data "text:$TEXT" --model gpt:layers=4,heads=4,embd=128,block=64 \
    --batch-size 12 --max-iters "$ITERS" --eval-interval "$ITERS" --eval-iters "$EVAL_ITERS" \
    --lr 1e-3 --betas 0.9,0.99 --weight-decay 0.1 --lr-schedule cosine --warmup-iters 100 \
    --min-lr 1e-4 --lr-decay-iters "$DECAY" --clip-grad-norm 1 --seed 1337 --devices "$1" \
    --quiet)" || { echo "compare_gpt_cli.sh: lockstep on $1 failed" >&2; exit 1; }
  echo "$line"
  echo "$line" | sed -E 's/.*val_loss ([0-9.na\/]+), ([0-9.]+) s, tokens\/s ([0-9]+).*/RESULT framework=lockstep devices='"$1"' tokens_per_s=\3 seconds=\2 val_loss=\1/' >>"$out"
}
pytorch_run() {
  "$PYTHON" "$ROOT/bench/pytorch_gpt_train.py" --text "$TEXT" --threads 2 --max-iters "$ITERS" \
    --lr-decay-iters "$DECAY" --eval-iters "$EVAL_ITERS" | tee -a "$out"
}
echo "machine: $(awk -F: '/model name/ {print $2; exit}' /proc/cpuinfo), $(nproc) cores;" \
  "git $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo '?')$(
  git -C "$ROOT" diff --quiet HEAD -- 2>/dev/null || echo ' (with uncommitted changes)');" \
  "$("$PYTHON" -c 'import torch; print("torch", torch.__version__)'); text $TEXT" \
  "($(wc -c <"$TEXT") bytes)"
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
for r in $(seq "$ROUNDS"); do
  runs=(pytorch_run "lockstep_run cpu:0" "lockstep_run cpu:0,cpu:1")
  ((r % 2 == 0)) && runs=("lockstep_run cpu:0,cpu:1" "lockstep_run cpu:0" pytorch_run)
  for cmd in "${runs[@]}"; do $cmd; done
  echo "round $r of $ROUNDS done, load $(cut -d' ' -f1 /proc/loadavg)"
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
python3 - "$out" "$ITERS" <<'PY'
import statistics, sys
runs = {}
for line in open(sys.argv[1]):
    if line.startswith("RESULT "):
        f = dict(kv.split("=", 1) for kv in line.split()[1:])
        key = f["framework"] + (" " + f["devices"] if "devices" in f else ", 2 threads")
        runs.setdefault(key, []).append(f)
ref = next(k for k in runs if k.startswith("pytorch"))
ref_tps = statistics.median(float(r["tokens_per_s"]) for r in runs[ref])
print(f"{sys.argv[2]} iterations, median over the rounds")
print(f"{'configuration':<34} {'tokens/s':>9} {'range':>15} {'vs PyTorch':>10} {'val_loss':>22}")
for k, rows in runs.items():
    t = [float(r["tokens_per_s"]) for r in rows]
    v = " ".join(r["val_loss"] for r in rows)
    print(f"{k:<34} {statistics.median(t):>9.0f} {min(t):>7.0f}-{max(t):<7.0f} "
          f"{statistics.median(t) / ref_tps:>9.2f}x {v:>22}")
PY
