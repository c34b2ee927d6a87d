#!/usr/bin/env bash
# Issue 19: nanoGPT's training step (bench/bench_gpt.cpp: n_layer 4, n_head 4, n_embd 128,
# block 64, batch 12, vocab 65, bias off, dropout 0; zero_grad, forward, loss, backward,
# clip_grad_norm_(1.0), AdamW from configure_optimizers(0.1, 1e-3, (0.9, 0.99))) next to
# PyTorch's (bench/pytorch_gpt.py, nanoGPT's own model.py classes), in one script run. Each of
# ROUNDS rounds runs, as separate processes, alternating Lockstep and PyTorch:
#   PyTorch, 2 threads (torch.set_num_threads(2), its default here)
#   Lockstep, plain module (--devices=1), 2 intra-op threads
#   PyTorch, 1 thread
#   Lockstep, DataParallel cpu:0,cpu:1 (--devices=2; 1 thread per device worker, the clip and the
#             AdamW step on the calling thread's 2 threads)
# (every other round in the reverse order, so no configuration always follows the same one);
# each process reports the median of REPS rounds of STEPS steps after WARMUP steps. The table
# gives the median over the ROUNDS processes of ms/step (with its range), tokens/s, GFLOP/s (FLOPs
# per token from nanoGPT's estimate_mfu, 6N + 12·L·H·Q·T = 5.17 MFLOP), the share of the machine's
# FMA peak (bench_gpt.cpp's header: cores × cpu MHz × 32 FLOP/cycle/core, 64 on an Intel CPU with
# avx512f; PEAK_GFLOPS overrides) and tokens/s relative to PyTorch with 2 threads (> 1: faster).
#   bench/compare_gpt.sh [BUILD_DIR]      (default: build/ in the repository)
#   env: PYTHON=/work/torch-venv/bin/python3 (../torch-venv/bin/python3 from the repository)
#        ROUNDS=5 STEPS=20 REPS=3 WARMUP=3 BATCH=12 PEAK_GFLOPS= SKIP_BUILD=0
# SKIP_BUILD=1: use BUILD_DIR/bench/bench_gpt as it is (no cmake --build). Smoke test:
#   ROUNDS=1 STEPS=2 REPS=1 WARMUP=1 bench/compare_gpt.sh
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${1:-$ROOT/build}"
PYTHON="${PYTHON:-$ROOT/../torch-venv/bin/python3}"
ROUNDS="${ROUNDS:-5}" STEPS="${STEPS:-20}" REPS="${REPS:-3}" WARMUP="${WARMUP:-3}"
BATCH="${BATCH:-12}"
PEAK_GFLOPS="${PEAK_GFLOPS:-}"
[[ "${SKIP_BUILD:-0}" == 1 ]] || cmake --build "$BUILD" --target bench_gpt >/dev/null
BENCH="$BUILD/bench/bench_gpt"
[[ -x "$BENCH" ]] || { echo "compare_gpt.sh: no $BENCH (build the bench_gpt target)" >&2; exit 2; }
common=(--batch="$BATCH" --steps="$STEPS" --reps="$REPS" --warmup="$WARMUP")
[[ -n "$PEAK_GFLOPS" ]] && common+=(--peak-gflops="$PEAK_GFLOPS")
out="$(mktemp)"
trap 'rm -f "$out"' EXIT
run() {  # run NAME CMD...: appends CMD's RESULT line; a failed run stops the script
  "${@:2}" >>"$out" || { echo "compare_gpt.sh: $1 failed" >&2; exit 1; }
}
configs=(
  "pytorch-2:$PYTHON $ROOT/bench/pytorch_gpt.py --threads 2"
  "lockstep-1:$BENCH --devices=1 --threads=2"
  "pytorch-1:$PYTHON $ROOT/bench/pytorch_gpt.py --threads 1"
  "lockstep-2:$BENCH --devices=2 --threads=2"
)
echo "machine: $(awk -F: '/model name/ {print $2; exit}' /proc/cpuinfo), $(nproc) cores," \
  "$(awk -F: '/cpu MHz/ {print $2 / 1000; exit}' /proc/cpuinfo) GHz;" \
  "git $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo '?')$(
  git -C "$ROOT" diff --quiet HEAD -- 2>/dev/null || echo ' (with uncommitted changes)');" \
  "$("$PYTHON" -c 'import torch; print("torch", torch.__version__)')"
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
for r in $(seq "$ROUNDS"); do
  order=(0 1 2 3)
  ((r % 2 == 0)) && order=(3 2 1 0)
  for i in "${order[@]}"; do
    name="${configs[$i]%%:*}" cmd="${configs[$i]#*:}"
    # cmd is split into words on purpose (the paths in it must have no spaces)
    # shellcheck disable=SC2086
    run "$name" $cmd "${common[@]}"
  done
  echo "round $r of $ROUNDS done, load $(cut -d' ' -f1 /proc/loadavg)"
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
python3 - "$out" "$ROUNDS" <<'PY'
import statistics, sys
runs = {}  # (framework, devices, threads) -> [RESULT fields]
for line in open(sys.argv[1]):
    if line.startswith("RESULT "):
        f = dict(kv.split("=", 1) for kv in line.split()[1:])
        runs.setdefault((f["framework"], f["devices"], f["threads"]), []).append(f)

def med(rows, key):
    return statistics.median(float(r[key]) for r in rows)

def label(fw, d, t):
    if fw.startswith("pytorch"):
        return f"PyTorch {fw.split('-', 1)[1]}, {t} thread{'s' * (t != '1')}"
    if int(d) >= 2:
        return f"Lockstep DataParallel {d} devices (1 thread each)"
    return f"Lockstep 1 device, {t} thread{'s' * (t != '1')}"

first = next(iter(runs.values()))[0]
print(f"nanoGPT step: batch {first['batch']}, block {first['block']}, {first['layers']} layers, "
      f"{first['heads']} heads, n_embd {first['embd']}, vocab {first['vocab']}, "
      f"{int(first['params']):,} parameters (get_num_params); peak {float(first['peak_gflops']):.0f} "
      f"GFLOP/s; median over {sys.argv[2]} processes (range: their ms/step)")
ref = next((k for k in runs if k[0].startswith("pytorch") and k[2] == "2"), None)
ref_tps = med(runs[ref], "tokens_per_s") if ref else None
print(f"{'configuration':<46} {'ms/step':>8} {'range':>15} {'tokens/s':>9} {'GFLOP/s':>8} "
      f"{'% peak':>7} {'vs PyTorch 2 thr':>16}")
for k, rows in runs.items():
    ms = [float(r["ms_per_step"]) for r in rows]
    tps = med(rows, "tokens_per_s")
    peak = float(rows[0]["peak_gflops"])
    g = med(rows, "gflops")
    share = f"{100 * g / peak:.1f}%" if peak > 0 else "-"
    vs = f"{tps / ref_tps:.2f}x" if ref_tps else "-"
    print(f"{label(*k):<46} {statistics.median(ms):>8.1f} {min(ms):>7.1f}-{max(ms):<7.1f} "
          f"{tps:>9.0f} {g:>8.1f} {share:>7} {vs:>16}")
PY
