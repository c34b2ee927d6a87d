// Issue 22's open question, measured: how much of a rank's one core does a started all-reduce
// take from the computation it overlaps, by the mpi backend's data path. Exactly two ranks under
// mpirun (bench/compare_transport.sh puts them on two namespace hosts, one core each, and runs
// the job once per data path, interleaved). Each iteration, after a barrier: a fixed computation
// on the main thread (float32 256x256 matmuls, calibrated on rank 0 to --compute-ms and
// broadcast), and an all_reduce_async of --bytes of float32 gradients on the group's
// communication thread, its data moved as LOCKSTEP_MPI_DATA says:
//   sockets  the group's TCP connections (src/dist/tcp/socket_mesh.h: non-blocking, asleep in
//            poll() between events, SO_RCVLOWAT; the default)
//   mpi      Open MPI's non-blocking collectives (its TCP transport, progressed by MPI_Test with
//            50 us sleeps: src/dist/mpi/mpi_wait.cpp)
// Prints one line of medians over --iters iterations of the slower rank: the computation alone,
// the all-reduce alone, and both started together (the computation's own time, and the time
// until both are done). A benchmark of the data paths, not a test.
//
//   LOCKSTEP_MPI_DATA=sockets|mpi mpirun -np 2 bench_transport [--bytes=851968] [--compute-ms=25]
//       [--iters=15] [--header]
#ifndef OMPI_SKIP_MPICXX
#define OMPI_SKIP_MPICXX 1
#endif
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "bench_args.h"
#include "lockstep/lockstep.h"

using namespace lockstep;
using Clock = std::chrono::steady_clock;

namespace {

double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

double slowest(double mine) {
  double out = 0;
  MPI_Allreduce(&mine, &out, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  auto group = dist::init_mpi({.timeout_seconds = 60});
  const int rank = group->rank();
  if (group->size() != 2) {
    if (rank == 0) std::fprintf(stderr, "bench_transport: run it on exactly 2 ranks\n");
    dist::finalize_mpi();
    return 2;
  }
  const std::int64_t elems = bench::arg(argc, argv, "bytes", 851968) / 4;
  const double compute_ms = static_cast<double>(bench::arg(argc, argv, "compute-ms", 25));
  const int iters = static_cast<int>(bench::arg(argc, argv, "iters", 15));
  const bool header = bench::arg(argc, argv, "header", 0) != 0;
  const char* path = std::getenv("LOCKSTEP_MPI_DATA");
  Tensor a = randn({256, 256}), b = randn({256, 256});
  auto matmuls = [&](int n) {
    for (int i = 0; i < n; ++i) (void)matmul(a, b);
  };
  // Calibrate: matmuls per --compute-ms on rank 0.
  matmuls(20);
  auto t0 = Clock::now();
  matmuls(100);
  int reps = static_cast<int>(compute_ms / (ms_since(t0) / 100));
  MPI_Bcast(&reps, 1, MPI_INT, 0, MPI_COMM_WORLD);

  if (rank == 0 && header)
    std::printf("data path | bytes | compute alone ms | all-reduce alone ms | compute with "
                "all-reduce ms | both done ms | compute slowed by ms\n");
  Tensor grads = ones({elems});
  std::vector<double> alone, xfer, with, both;
  for (int it = 0; it < iters + 2; ++it) {
    MPI_Barrier(MPI_COMM_WORLD);
    t0 = Clock::now();
    matmuls(reps);
    const double c = slowest(ms_since(t0));
    MPI_Barrier(MPI_COMM_WORLD);
    t0 = Clock::now();
    group->all_reduce_async(grads, dist::ReduceOp::Sum)->wait();
    const double x = slowest(ms_since(t0));
    MPI_Barrier(MPI_COMM_WORLD);
    t0 = Clock::now();
    auto work = group->all_reduce_async(grads, dist::ReduceOp::Sum);
    matmuls(reps);
    const double w = ms_since(t0);
    work->wait();
    const double wb = slowest(ms_since(t0));
    const double ws = slowest(w);
    if (it < 2) continue;  // warm-up: connections, buffers
    alone.push_back(c), xfer.push_back(x), with.push_back(ws), both.push_back(wb);
  }
  if (rank == 0)
    std::printf("%s | %lld | %.2f | %.2f | %.2f | %.2f | %.2f\n", path ? path : "sockets",
                static_cast<long long>(elems * 4), median(alone), median(xfer), median(with),
                median(both), median(with) - median(alone));
  group.reset();
  dist::finalize_mpi();
  return 0;
}
