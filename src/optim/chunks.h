// Splitting an optimizer's elementwise update over the calling thread's intra-op team
// (internal). Each element's update depends only on that element, so the result has the same
// bits whatever the split; only large tensors are split, where the team's wake-up pays off.
#pragma once

#include <algorithm>
#include <cstdint>

#include "lockstep/core/parallel.h"

namespace lockstep::optim::detail {

/// Elements per thread below which an update stays on the calling thread.
inline constexpr std::int64_t kMinElementsPerThread = 32768;

/// Calls f(lo, hi) on disjoint ranges covering [0, n): one range on the calling thread when n is
/// small or get_num_threads() is 1, otherwise up to get_num_threads() ranges (boundaries on
/// multiples of 16 elements, 64 bytes for float) run by parallel_run.
template <class F>
void for_chunks(std::int64_t n, F&& f) {
  const auto threads =
      static_cast<int>(std::min<std::int64_t>(get_num_threads(), n / kMinElementsPerThread));
  if (threads <= 1) {
    f(std::int64_t{0}, n);
    return;
  }
  auto bound = [&](int i) {
    return i == threads ? n : (n * i / threads) & ~std::int64_t{15};
  };
  parallel_run(threads, [&](int i) { f(bound(i), bound(i + 1)); });
}

}  // namespace lockstep::optim::detail
