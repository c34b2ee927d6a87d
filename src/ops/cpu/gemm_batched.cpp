// The batched GEMM (src/ops/batched_kernels.h): cpu::gemm per batch index, the batch split over
// the calling thread's team, every GEMM on one thread.
#include <algorithm>

#include "lockstep/core/parallel.h"
#include "ops/batched_kernels.h"
#include "ops/cpu/one_thread.h"

namespace lockstep::kernels::cpu {

namespace {
// Below this many multiply-adds in all the batch runs on the calling thread.
constexpr std::int64_t kBatchParallelMacs = std::int64_t(1) << 18;
}  // namespace

template <class T>
void gemm_batched(bool ta, bool tb, std::int64_t batch, std::int64_t m, std::int64_t n,
                  std::int64_t k, const T* a, std::int64_t stride_a, const T* b,
                  std::int64_t stride_b, T* c) {
  // Each GEMM under OneThread: one OpenBLAS call (or the small-GEMM loop) on one thread, never
  // split over a team, so a batch index's bits are the same whichever task runs it.
  auto range = [&](std::int64_t lo, std::int64_t hi) {
    OneThread one;
    gemm_batch_range<T>(&gemm<T>, ta, tb, lo, hi, m, n, k, a, stride_a, b, stride_b, c);
  };
  const int parts = static_cast<int>(std::min<std::int64_t>(get_num_threads(), batch));
  if (parts <= 1 || batch * m * n * k < kBatchParallelMacs) return range(0, batch);
  parallel_run(parts, [&](int t) { range(batch * t / parts, batch * (t + 1) / parts); });
}

template void gemm_batched<float>(bool, bool, std::int64_t, std::int64_t, std::int64_t,
                                  std::int64_t, const float*, std::int64_t, const float*,
                                  std::int64_t, float*);
template void gemm_batched<double>(bool, bool, std::int64_t, std::int64_t, std::int64_t,
                                   std::int64_t, const double*, std::int64_t, const double*,
                                   std::int64_t, double*);

}  // namespace lockstep::kernels::cpu
