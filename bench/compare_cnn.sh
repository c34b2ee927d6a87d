#!/usr/bin/env bash
# Issue 17: the CNN training step (bench/bench_cnn.cpp) on 1 and 2 CPU devices next to PyTorch
# (bench/pytorch_cnn.py) with 2 and 1 threads, interleaved over ROUNDS rounds, then a table of
# median samples/s and GFLOP/s as a share of the 2-core FMA peak.
#   bench/compare_cnn.sh [BUILD_DIR]     (env: PYTHON=../torch-venv/bin/python3 ROUNDS=3 BATCH=128)
# FLOPs per training sample: 2·MACs of the forward (conv1 225,792 + conv2 1,806,336 + fc1
# 401,408 + fc2 2,560 = 2.436 MFLOP) times 3 for forward + backward, less conv1's input
# gradient (not needed): 7.08 MFLOP. Peak: cores × GHz × FLOPs per cycle per core (32 for
# AVX2 with two FMA units, 64 with AVX-512 and two; PEAK_FLOPS_PER_CYCLE overrides).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${1:-$ROOT/build}"
PYTHON="${PYTHON:-$ROOT/../torch-venv/bin/python3}"
ROUNDS="${ROUNDS:-3}"
BATCH="${BATCH:-128}"
cmake --build "$BUILD" --target bench_cnn >/dev/null
out="$(mktemp)"
trap 'rm -f "$out"' EXIT
for r in $(seq "$ROUNDS"); do
  "$BUILD/bench/bench_cnn" --batch="$BATCH" --devices=1 --threads=2 >>"$out"
  "$BUILD/bench/bench_cnn" --batch="$BATCH" --devices=2 --threads=2 >>"$out"
  "$PYTHON" "$ROOT/bench/pytorch_cnn.py" 2 "$BATCH" >>"$out"
  "$PYTHON" "$ROOT/bench/pytorch_cnn.py" 1 "$BATCH" >>"$out"
done
cores=$(nproc)
ghz=$(awk -F: '/cpu MHz/ {print $2 / 1000; exit}' /proc/cpuinfo)
fpc="${PEAK_FLOPS_PER_CYCLE:-$(grep -q avx512f /proc/cpuinfo && echo 64 || echo 32)}"
echo "machine: $(awk -F: '/model name/ {print $2; exit}' /proc/cpuinfo), $cores cores, ${ghz} GHz, $fpc FLOP/cycle/core"
python3 - "$out" "$cores" "$ghz" "$fpc" <<'PY'
import re, statistics, sys
path, cores, ghz, fpc = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4])
peak = cores * ghz * fpc  # GFLOP/s
runs = {}
for line in open(path):
    f = dict(kv.split("=", 1) for kv in line.split()[1:])
    key = (f["framework"], f["devices"], f["threads"])
    runs.setdefault(key, []).append(float(f["samples_per_s"]))
print(f"2-core peak: {peak:.0f} GFLOP/s; 7.08 MFLOP per training sample")
print(f"{'framework':<24} {'devices':>7} {'threads':>7} {'samples/s':>10} {'range':>17} {'GFLOP/s':>8} {'% peak':>7}")
for (fw, d, t), v in runs.items():
    med = statistics.median(v)
    g = med * 7.08e-3
    print(f"{fw:<24} {d:>7} {t:>7} {med:>10.0f} {min(v):>8.0f}-{max(v):<8.0f} {g:>8.1f} {100 * g / peak:>6.1f}%")
PY
