// Intra-op parallelism (torch.set_num_threads / torch.get_num_threads). Each thread that runs ops
// — the main thread, or a DataParallel replica's worker — has its own thread count and team of
// helper threads; large GEMMs are split over that team. OpenBLAS itself always runs
// single-threaded inside each call, so N replicas on C cores each get exactly the threads they
// are given (max(1, C / N)) and never contend for one shared BLAS thread pool.
#pragma once

#include <functional>

namespace lockstep {

/// Intra-op threads of the calling thread. Default for a new thread: 1, except the process's
/// first caller (the main thread), which defaults to usable_cores().
int get_num_threads();
/// Sets the calling thread's intra-op thread count (>= 1; ValueError otherwise). Helper threads
/// are started lazily on first use.
void set_num_threads(int n);

/// Cores this process may run on (its CPU affinity mask; at least 1).
int usable_cores();

/// Runs f(i) for i in [0, n) on the calling thread's team: task 0 on the caller, the others on
/// helpers (n <= get_num_threads()). Blocks until all finish; the first exception is rethrown.
void parallel_run(int n, const std::function<void(int)>& f);

}  // namespace lockstep
