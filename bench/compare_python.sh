#!/usr/bin/env bash
# The reference program's training step and a 10-element add, Lockstep's Python package against
# PyTorch, alternated ROUNDS times (bench/bench_python_step.py; each run prints medians of its own
# rounds); prints every run's line, then the median of each measure over the runs.
#   ROUNDS=3 TORCH_PY=../torch-venv/bin/python bash bench/compare_python.sh [build]
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${1:-$ROOT/build}"
ROUNDS="${ROUNDS:-3}"
TORCH_PY="${TORCH_PY:-$ROOT/../torch-venv/bin/python}"
LS_PY="${LS_PY:-$ROOT/.venv/bin/python}"
out=$(mktemp)
trap 'rm -f "$out"' EXIT
echo "# $(date -u +%FT%TZ) $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs); OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-unset}"
for ((r = 1; r <= ROUNDS; r++)); do
  for variant in "" "--no-dp"; do
    PYTHONPATH="$BUILD/python" "$LS_PY" "$ROOT/bench/bench_python_step.py" lockstep $variant | tee -a "$out"
    "$TORCH_PY" "$ROOT/bench/bench_python_step.py" torch $variant | tee -a "$out"
  done
done
echo "# medians over $ROUNDS runs (microseconds per call)"
python3 - "$out" <<'PY'
import statistics, sys, collections
vals = collections.defaultdict(list)
for line in open(sys.argv[1]):
    fw, measure, us = line.split()
    vals[(fw, measure)].append(float(us))
for (fw, measure), v in sorted(vals.items(), key=lambda kv: (kv[0][1], kv[0][0])):
    print(f"{measure:12s} {fw:9s} {statistics.median(v):9.2f}")
PY
