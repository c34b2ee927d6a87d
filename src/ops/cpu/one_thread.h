// Internal: an RAII scope with the calling thread's intra-op thread count at 1, for the CPU
// kernels that split work over the team themselves (conv2d's samples, the batched GEMM's batch).
#pragma once

#include "lockstep/core/parallel.h"

namespace lockstep::kernels::cpu {

/// The calling thread's intra-op count set to 1 for the scope: a task of parallel_run must not
/// start another on the same team (task 0 runs on the caller), and a GEMM run inside it is one
/// OpenBLAS call on this thread (no split over a team, so its bits do not depend on the team).
class OneThread {
 public:
  OneThread() : saved_(get_num_threads()) { set_num_threads(1); }
  ~OneThread() { set_num_threads(saved_); }
  OneThread(const OneThread&) = delete;
  OneThread& operator=(const OneThread&) = delete;

 private:
  int saved_;
};

}  // namespace lockstep::kernels::cpu
