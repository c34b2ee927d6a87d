// Issue 5, "Benchmarks": all_reduce (float32, sum) of the mpi ProcessGroup next to raw
// MPI_Allreduce (MPI_SUM on MPI_COMM_WORLD), from 4 KB to 64 MB. Run under mpirun (bench/
// compare_allreduce.sh runs it on 2 ranks). Prints, per size, the time per call (the slowest
// rank's, best of --reps repetitions), algbw = bytes / time and busbw = algbw * 2(n-1)/n, as
// NVIDIA/nccl-tests define them (doc/PERFORMANCE.md there) for all-reduce; and Lockstep's time
// without the argument check (MpiOptions::check_arguments = false), which is the check's cost.
//
//   mpirun -np 2 bench_allreduce [--min-bytes=4096] [--max-bytes=67108864] [--factor=4]
//                                [--min-time=0.2] [--reps=3]
#ifndef OMPI_SKIP_MPICXX
#define OMPI_SKIP_MPICXX 1
#endif
#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "lockstep/lockstep.h"

using namespace lockstep;

namespace {

double option(int argc, char** argv, const char* name, double fallback) {
  const std::string prefix = std::string("--") + name + "=";
  for (int i = 1; i < argc; ++i)
    if (std::strncmp(argv[i], prefix.c_str(), prefix.size()) == 0)
      return std::atof(argv[i] + prefix.size());
  return fallback;
}

// Seconds per call of `step`, the slowest rank's, best of `reps` repetitions of `iters` calls.
// Every rank runs the same number of calls: rank 0 picks `iters` and broadcasts it.
double time_per_call(const std::function<void()>& step, double min_time, int reps) {
  for (int i = 0; i < 3; ++i) step();  // warm-up: buffers, connections
  // A fixed number of probe calls on every rank (a collective per call: a count each rank chose
  // by its own clock would leave one rank calling it while another has moved on).
  constexpr int kProbe = 5;
  MPI_Barrier(MPI_COMM_WORLD);
  double t0 = MPI_Wtime();
  for (int i = 0; i < kProbe; ++i) step();
  const double per = (MPI_Wtime() - t0) / kProbe;
  int iters = std::clamp(static_cast<int>(min_time / std::max(per, 1e-7)), 3, 100000);
  MPI_Bcast(&iters, 1, MPI_INT, 0, MPI_COMM_WORLD);
  double best = 1e300;
  for (int r = 0; r < reps; ++r) {
    MPI_Barrier(MPI_COMM_WORLD);
    t0 = MPI_Wtime();
    for (int i = 0; i < iters; ++i) step();
    double mine = (MPI_Wtime() - t0) / iters, slowest = 0;
    MPI_Allreduce(&mine, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    best = std::min(best, slowest);
  }
  return best;
}

std::string human_bytes(std::int64_t b) {
  char buf[32];
  if (b >= (1 << 20))
    std::snprintf(buf, sizeof buf, "%lld MB", static_cast<long long>(b >> 20));
  else
    std::snprintf(buf, sizeof buf, "%lld KB", static_cast<long long>(b >> 10));
  return buf;
}

}  // namespace

int main(int argc, char** argv) {
  lockstep::reexec_with_openblas_kernels(argv);  // the CLI's kernels (lockstep/core/blas.h)
  const auto min_bytes = static_cast<std::int64_t>(option(argc, argv, "min-bytes", 4096));
  const auto max_bytes = static_cast<std::int64_t>(option(argc, argv, "max-bytes", 64 << 20));
  const auto factor = static_cast<std::int64_t>(option(argc, argv, "factor", 4));
  const double min_time = option(argc, argv, "min-time", 0.2);
  const int reps = static_cast<int>(option(argc, argv, "reps", 3));

  auto g = dist::init_mpi({.timeout_seconds = 600});
  const int n = g->size(), rank = g->rank();
  const double bus = 2.0 * (n - 1) / n;
  if (rank == 0) {
    int provided = 0;
    MPI_Query_thread(&provided);
    std::printf(
        "all_reduce float32 sum, %d ranks, best of %d x >= %.2f s per size; "
        "busbw = algbw * 2(n-1)/n (nccl-tests); MPI thread level %d\n\n",
        n, reps, min_time, provided);
    std::printf(
        "| size | Lockstep mpi µs | algbw GB/s | busbw GB/s | Lockstep, no arg check µs "
        "| check cost µs | MPI_Allreduce µs | algbw GB/s | busbw GB/s |\n");
    std::printf("|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  }
  for (std::int64_t bytes = min_bytes; bytes <= max_bytes; bytes *= factor) {
    const std::int64_t count = bytes / 4;
    Tensor t = zeros({count});  // zeros: sums stay 0, no overflow to inf over many calls
    std::vector<float> in(static_cast<std::size_t>(count), 0.0f), out(in.size());
    dist::init_mpi({.timeout_seconds = 600, .check_arguments = true});
    const double ls = time_per_call([&] { g->all_reduce(t); }, min_time, reps);
    dist::init_mpi({.timeout_seconds = 600, .check_arguments = false});
    const double ls_nocheck = time_per_call([&] { g->all_reduce(t); }, min_time, reps);
    dist::init_mpi({.timeout_seconds = 600, .check_arguments = true});
    const double raw = time_per_call(
        [&] {
          MPI_Allreduce(in.data(), out.data(), static_cast<int>(count), MPI_FLOAT, MPI_SUM,
                        MPI_COMM_WORLD);
        },
        min_time, reps);
    if (rank == 0) {
      const double b = static_cast<double>(bytes);
      std::printf("| %s | %.1f | %.2f | %.2f | %.1f | %.1f | %.1f | %.2f | %.2f |\n",
                  human_bytes(bytes).c_str(), ls * 1e6, b / ls / 1e9, b / ls / 1e9 * bus,
                  ls_nocheck * 1e6, (ls - ls_nocheck) * 1e6, raw * 1e6, b / raw / 1e9,
                  b / raw / 1e9 * bus);
      std::fflush(stdout);
    }
  }
  dist::finalize_mpi();
  return 0;
}
