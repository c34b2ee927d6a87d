#!/usr/bin/env bash
# Instruction-level hotspots of one training step (valgrind --tool=callgrind on profile_step):
# the reference workload (2000 steps) and the 784-256-256-10 MLP (20 steps), one intra-op
# thread, OpenBLAS single-threaded. Instruction counts do not depend on machine load, so this is
# repeatable on a busy machine (the MLP run takes a few minutes under valgrind).
#
#   bench/profile_core.sh                 # both workloads
#   REF_STEPS=2000 MLP_STEPS=20 BUILD_DIR=build-bench OUT_DIR=/tmp/p bench/profile_core.sh [reference|mlp]
#
# Raw profiles are left in OUT_DIR (callgrind.reference, callgrind.mlp) for callgrind_annotate or
# kcachegrind.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# No bench/openblas_env.sh here: under valgrind OpenBLAS sees valgrind's CPU (no AVX-512; its
# SkylakeX kernels end in SIGILL), and profile_step does not restart itself under valgrind.
BUILD_DIR=${BUILD_DIR:-$ROOT/build-bench}
OUT_DIR=${OUT_DIR:-$BUILD_DIR/profile-results}
REF_STEPS=${REF_STEPS:-2000}
MLP_STEPS=${MLP_STEPS:-20}
mkdir -p "$OUT_DIR"

cmake -S "$ROOT" -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DLOCKSTEP_BUILD_TESTS=OFF -DLOCKSTEP_BUILD_EXAMPLES=OFF -DLOCKSTEP_BUILD_BENCH=ON >/dev/null
ninja -C "$BUILD_DIR" profile_step | tail -1
echo "git: $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo '?')$(git -C "$ROOT" diff --quiet HEAD -- src include 2>/dev/null || echo ' (src/include modified)')"

for w in ${1:-reference mlp}; do
  steps=$REF_STEPS
  [ "$w" = mlp ] && steps=$MLP_STEPS
  echo "== $w: $steps steps under callgrind"
  OPENBLAS_NUM_THREADS=1 valgrind --tool=callgrind --collect-atstart=no \
    --callgrind-out-file="$OUT_DIR/callgrind.$w" "$BUILD_DIR/bench/profile_step" "$w" "$steps" 1 \
    2>"$OUT_DIR/valgrind.$w.log"
  /usr/bin/python3 "$ROOT/bench/callgrind_summary.py" "$OUT_DIR/callgrind.$w" "$steps" 15 |
    tee "$OUT_DIR/summary.$w.md"
done
