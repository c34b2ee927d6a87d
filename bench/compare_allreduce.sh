#!/usr/bin/env bash
# Issue 5, "Benchmarks": all_reduce algbw and busbw (busbw = algbw * 2(n-1)/n, as nccl-tests
# report it) from 4 KB to 64 MB, Lockstep's mpi backend next to raw MPI_Allreduce, on RANKS
# ranks (default 2) of this machine. Builds bench/bench_allreduce in Release (BUILD_DIR) and runs
# it once under mpirun; prints the machine, date, load and a Markdown table. Extra arguments go
# to bench_allreduce (--min-bytes=, --max-bytes=, --factor=, --min-time=, --reps=).
#
#   bench/compare_allreduce.sh
#   RANKS=2 BUILD_DIR=build-bench bench/compare_allreduce.sh --factor=2
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# OpenBLAS kernels for this CPU, the same for Lockstep and PyTorch (see the file).
source "$ROOT/bench/openblas_env.sh"
BUILD_DIR=${BUILD_DIR:-$ROOT/build-bench}
RANKS=${RANKS:-2}

echo "== machine"
echo "model: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) CPUs"
echo "date:  $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
echo "git:   $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo '?')"
echo "mpi:   $(mpirun --version 2>/dev/null | head -n 1)"

echo "== build (Release) in $BUILD_DIR"
cmake -S "$ROOT" -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release -DLOCKSTEP_MPI=ON \
  -DLOCKSTEP_BUILD_TESTS=OFF -DLOCKSTEP_BUILD_EXAMPLES=OFF -DLOCKSTEP_BUILD_BENCH=ON >/dev/null
cmake --build "$BUILD_DIR" --target bench_allreduce | tail -n 1

# Root is allowed (CI and containers); traffic stays on loopback; shared memory between ranks.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_btl=self,vader,tcp OMPI_MCA_btl_tcp_if_include=lo OMPI_MCA_oob_tcp_if_include=lo
echo "== load before: $(cut -d' ' -f1-3 /proc/loadavg)"
oversubscribe=()
[ "$RANKS" -gt "$(nproc)" ] && oversubscribe=(--oversubscribe)
mpirun -np "$RANKS" "${oversubscribe[@]}" "$BUILD_DIR/bench/bench_allreduce" "$@"
echo "== load after: $(cut -d' ' -f1-3 /proc/loadavg)"
