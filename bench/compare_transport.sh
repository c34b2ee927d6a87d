#!/usr/bin/env bash
# Issue 22: how much of a rank's one core a started all-reduce takes from the computation it
# overlaps, by the mpi backend's data path (bench/bench_transport.cpp): the group's TCP sockets
# (the default) against Open MPI's own transport (LOCKSTEP_MPI_DATA=mpi), one job per data path
# and size, ROUNDS rounds interleaved (each line: one job's medians). 2 namespace hosts x 1 rank
# (tests/multihost/hosts.sh), each rank pinned to one CPU (host1 -> CPU 0, host2 -> CPU 1),
# links shaped as bench/compare_overlap.sh shapes them (bench/shaped_hosts.sh: netem RATE + DELAY
# where the kernel has it, else tbf RATE with GSO capped at 32 KB and no delay). Root (network
# namespaces); a benchmark.
#   bench/compare_transport.sh [BUILD_DIR]
#   env: BYTES="851968 3407872" (the CNN's and the GPT's gradients) COMPUTE_MS=25 ITERS=15 ROUNDS=2
#        RATE=1gbit (none: unshaped) DELAY=0.2ms
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${1:-$ROOT/build}"
BYTES="${BYTES:-851968 3407872}" COMPUTE_MS="${COMPUTE_MS:-25}" ITERS="${ITERS:-15}"
ROUNDS="${ROUNDS:-2}"
RATE="${RATE:-1gbit}" DELAY="${DELAY:-0.2ms}"
source "$ROOT/bench/openblas_env.sh"
export OPENBLAS_NUM_THREADS=1
cmake --build "$BUILD" --target bench_transport >/dev/null
BENCH="$(realpath "$BUILD/bench/bench_transport")"
work="$(mktemp -d /tmp/lsh-transport.XXXXXX)"
source "$ROOT/tests/multihost/hosts.sh"
source "$ROOT/bench/shaped_hosts.sh"
mh_up 2
trap 'mh_down; rm -rf "$work"' EXIT
shaping=$(shape_links "$RATE" "$DELAY")
pin_ranks "$work" "OPENBLAS_CORETYPE OPENBLAS_NUM_THREADS LOCKSTEP_MPI_DATA"
echo "== $(date -u '+%Y-%m-%d %H:%M:%S UTC'); git $(git -C "$ROOT" rev-parse --short HEAD);" \
  "$(awk -F: '/model name/ {print $2; exit}' /proc/cpuinfo), $(nproc) cores, kernel $(uname -r)"
echo "== links: each host's egress: $shaping; ranks pinned, 1 thread"
header=--header=1
for round in $(seq "$ROUNDS"); do
  for b in $BYTES; do
    for path in sockets mpi; do
      LOCKSTEP_MPI_DATA=$path mh_mpirun host1,host2 2 "$work/pin.sh" "$BENCH" --bytes="$b" \
        --compute-ms="$COMPUTE_MS" --iters="$ITERS" $header 2>&1 | grep -v '^\['
      header=
    done
  done
done
