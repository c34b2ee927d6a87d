#!/usr/bin/env bash
# Issue 18: what SyncBatchNorm costs, and ResNet-20's training step next to PyTorch, in one run.
# bench/bench_cnn.cpp (global batch BATCH, Adam lr 1e-3, stepped on the calling thread) and
# bench/pytorch_cnn.py, interleaved over ROUNDS rounds of:
#   CNN       DataParallel cpu:0,cpu:1 (1 thread each)    BatchNorm, then SyncBatchNorm
#   CNN       DDP, mpirun -np 2 --bind-to core (1 thread) BatchNorm, then SyncBatchNorm
#   ResNet-20 plain module, 2 threads                     BatchNorm
#   ResNet-20 DataParallel cpu:0,cpu:1                    BatchNorm, then SyncBatchNorm
#   ResNet-20 PyTorch, TORCH_THREADS threads (each)       BatchNorm
# then a table of the medians over the rounds (samples/s, ms/step, the samples/s range) with
# SyncBN / BN and Lockstep / PyTorch (ratios of samples/s; < 1: slower).
#   bench/compare_sync_bn.sh [BUILD_DIR]
#   env: PYTHON=/work/torch-venv/bin/python3 ROUNDS=3 BATCH=128 WARMUP=3
#        CNN_STEPS=20 CNN_REPS=5 RESNET_STEPS=5 RESNET_REPS=3 TORCH_THREADS="2" (e.g. "2 1")
# Each run reports the median of its REPS rounds of STEPS steps (after WARMUP steps). Smoke test:
#   ROUNDS=1 WARMUP=1 CNN_STEPS=2 CNN_REPS=1 RESNET_STEPS=1 RESNET_REPS=1 bench/compare_sync_bn.sh
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${1:-$ROOT/build}"
PYTHON="${PYTHON:-/work/torch-venv/bin/python3}"
ROUNDS="${ROUNDS:-3}"
BATCH="${BATCH:-128}"
WARMUP="${WARMUP:-3}"
CNN_STEPS="${CNN_STEPS:-20}" CNN_REPS="${CNN_REPS:-5}"
RESNET_STEPS="${RESNET_STEPS:-5}" RESNET_REPS="${RESNET_REPS:-3}"
TORCH_THREADS="${TORCH_THREADS:-2}"
grep -q '^LOCKSTEP_MPI:BOOL=ON' "$BUILD/CMakeCache.txt" ||
  { echo "compare_sync_bn.sh: $BUILD is not an MPI build (LOCKSTEP_MPI=ON)" >&2; exit 2; }
cmake --build "$BUILD" --target bench_cnn >/dev/null
# Root is allowed (CI and containers); traffic stays on loopback; shared memory between ranks.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_btl=self,vader,tcp OMPI_MCA_btl_tcp_if_include=lo OMPI_MCA_oob_tcp_if_include=lo
mpi=(mpirun -np 2 --bind-to core)
[ "$(nproc)" -lt 2 ] && mpi+=(--oversubscribe)
out="$(mktemp)"
trap 'rm -f "$out"' EXIT
bench() { "$BUILD/bench/bench_cnn" --batch="$BATCH" --warmup="$WARMUP" "$@" >>"$out"; }
cnn=(--model=cnn --steps="$CNN_STEPS" --reps="$CNN_REPS")
res=(--model=resnet20 --steps="$RESNET_STEPS" --reps="$RESNET_REPS")
echo "machine: $(awk -F: '/model name/ {print $2; exit}' /proc/cpuinfo), $(nproc) cores;" \
  "git $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo '?')$(
  git -C "$ROOT" diff --quiet HEAD -- 2>/dev/null || echo ' (with uncommitted changes)');" \
  "$($PYTHON -c 'import torch; print("torch", torch.__version__)')"
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
for r in $(seq "$ROUNDS"); do
  for s in 0 1; do bench "${cnn[@]}" --devices=2 --threads=2 --sync-bn=$s; done
  for s in 0 1; do
    "${mpi[@]}" "$BUILD/bench/bench_cnn" --ddp=1 --batch="$BATCH" --warmup="$WARMUP" \
      "${cnn[@]}" --sync-bn=$s >>"$out"
  done
  bench "${res[@]}" --devices=1 --threads=2
  for s in 0 1; do bench "${res[@]}" --devices=2 --threads=2 --sync-bn=$s; done
  for t in $TORCH_THREADS; do
    "$PYTHON" "$ROOT/bench/pytorch_cnn.py" "$t" "$BATCH" "$RESNET_STEPS" "$WARMUP" \
      "$RESNET_REPS" resnet20 >>"$out"
  done
  echo "round $r of $ROUNDS done, load $(cut -d' ' -f1 /proc/loadavg)"
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
python3 - "$out" "$ROUNDS" <<'PY'
import statistics, sys
runs = {}  # (framework, model, devices, ranks, threads, sync_bn) -> [(samples/s, ms/step)]
for line in open(sys.argv[1]):
    if not line.startswith("RESULT "):
        continue
    f = dict(kv.split("=", 1) for kv in line.split()[1:])
    key = (f["framework"], f["model"], f["devices"], f["ranks"], f["threads"], f["sync_bn"])
    runs.setdefault(key, []).append((float(f["samples_per_s"]), float(f["ms_per_step"])))
med = {k: statistics.median(s for s, _ in v) for k, v in runs.items()}

def label(fw, model, d, r, t, s):
    name = {"cnn": "CNN", "resnet20": "ResNet-20"}[model]
    if not fw.startswith("lockstep"):
        return f"{name} {fw.replace('pytorch-', 'PyTorch ')}, {t} thread{'s' * (t != '1')}"
    where = (f"DDP {r} ranks x {d} device" if r != "1" else
             f"DataParallel {d} devices" if d != "1" else f"1 device, {t} threads")
    return f"{name} Lockstep {where}, {'SyncBatchNorm' if s == '1' else 'BatchNorm'}"

def ratio(a, b):
    return f"{med[a] / med[b]:.2f}x" if a in med and b in med and a != b else "-"

torch_ref = next((k for k in med if k[0].startswith("pytorch") and k[4] == "2"),
                 next((k for k in med if k[0].startswith("pytorch")), None))
print(f"median over {sys.argv[2]} rounds; ratios of median samples/s (< 1: slower); "
      "range: samples/s over the rounds")
print(f"{'configuration':<58} {'samples/s':>9} {'ms/step':>9} {'range':>15} "
      f"{'SyncBN/BN':>9} {'vs PyTorch':>10}")
for k, v in runs.items():
    bn = k[:5] + ("0",)
    lp = ratio(k, torch_ref) if k[1] == "resnet20" and k[0] == "lockstep" else "-"
    s = [x for x, _ in v]
    print(f"{label(*k):<58} {med[k]:>9.0f} {statistics.median(m for _, m in v):>9.1f} "
          f"{min(s):>7.0f}-{max(s):<7.0f} {ratio(k, bn) if k[5] == '1' else '-':>9} {lp:>10}")
PY
