// Internal: how the fast CPU kernels of the pools and batch norm (src/ops/cpu/pool_norm.cpp,
// batch_norm.cpp) share work over the calling thread's intra-op team, and the fixed-order double
// sum they accumulate with. Neither changes a result with the thread count.
#pragma once

#include <algorithm>
#include <cstdint>

#include "lockstep/core/parallel.h"

namespace lockstep::kernels::cpu::detail {

// Below this many element visits a kernel runs on the calling thread alone.
constexpr std::int64_t kParallelWork = std::int64_t{1} << 16;

// f(begin, end) over [0, items), in contiguous ranges, one per helper when work pays.
template <class F>
inline void split(std::int64_t items, std::int64_t work, const F& f) {
  const int threads = get_num_threads();
  const std::int64_t parts = std::min<std::int64_t>(threads, items);
  if (parts <= 1 || work < kParallelWork) {
    if (items > 0) f(std::int64_t{0}, items);
    return;
  }
  parallel_run(static_cast<int>(parts),
               [&](int i) { f(items * i / parts, items * (i + 1) / parts); });
}

// Σ f(i) for i in [0, count) in double, in 8 interleaved partial sums added pairwise at the end:
// one fixed order (so the same bits on every thread count) that keeps 8 additions in flight
// instead of one dependency chain.
template <class F>
inline double sum8(std::int64_t count, const F& f) {
  double acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  std::int64_t i = 0;
  for (; i + 8 <= count; i += 8)
    for (int l = 0; l < 8; ++l) acc[l] += f(i + l);
  for (int l = 0; i < count; ++i, ++l) acc[l] += f(i);
  return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

}  // namespace lockstep::kernels::cpu::detail
