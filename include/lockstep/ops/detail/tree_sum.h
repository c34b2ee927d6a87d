// Internal: the fixed pairwise tree of deterministic mode (docs/design.md, "Deterministic mode"),
// written once for every place that sums in it, so they cannot drift apart:
//   - tree_sum_columns (below): the CPU sum of a [rows, width] buffer of shard gradients;
//   - tree_sum (below): the shard losses on the host;
//   - the CUDA kernel kernels::cuda::tree_sum_rows (src/ops/cuda/elementwise.cu), the same sum of
//     a buffer on a GPU, one thread per column.
// All three walk for_each_tree_pair, so for a given number of rows every column is associated in
// exactly the same order on the host and on a GPU; each addition is one IEEE round-to-nearest
// addition in T (the GPU's through __fadd_rn / __dadd_rn, which nvcc never contracts). The pinned
// schedule is tested by tests/parallel/tree_sum_test.cpp (without a GPU), the kernel against
// tree_sum_columns by tests/cuda/kernels_test.cpp (on a GPU).
//
// In src/ops/, the lowest layer that sums in it (the CUDA kernel), so that ops need not include
// parallel (docs/design.md, "Layers"); the namespace is still parallel::detail, its main user's.
//
// Compiled by the host compiler (C++20) and by nvcc (C++17): nothing newer than C++17 here.
#pragma once

#include <cstdint>
#include <vector>

#if defined(__CUDACC__)
#define LOCKSTEP_TREE_HOST_DEVICE __host__ __device__
#else
#define LOCKSTEP_TREE_HOST_DEVICE
#endif

namespace lockstep::parallel::detail {

/// The pairing schedule of the tree over rows [0, rows): levels with stride 1, 2, 4, … (while
/// stride < rows); within a level, for i = 0, 2·stride, 4·stride, … while i + stride < rows,
/// row i ← row i + row (i + stride). Calls f(i, i + stride) for each pair in that order (the
/// pairs of one level are independent; levels are not). The total ends in row 0; it depends on
/// `rows` alone. Examples (rK: row K's value before the sum):
///   rows 3: (r0 + r1) + r2
///   rows 5: ((r0 + r1) + (r2 + r3)) + r4
///   rows 6: ((r0 + r1) + (r2 + r3)) + (r4 + r5)
/// rows ≤ 1: no pair.
#if defined(__CUDACC__)
#pragma nv_exec_check_disable
#endif
template <class F>
LOCKSTEP_TREE_HOST_DEVICE inline void for_each_tree_pair(std::int64_t rows, F&& f) {
  for (std::int64_t stride = 1; stride < rows; stride *= 2)
    for (std::int64_t i = 0; i + stride < rows; i += 2 * stride) f(i, i + stride);
}

/// The tree over rows [0, rows) of the row-major [rows, width] buffer `base`, for columns
/// [lo, hi): column j's total lands in base[j] (row 0); rows 1.. hold partial sums afterwards.
/// The bits of a column depend only on `rows` and its values, not on who sums which columns (the
/// CPU splits the columns over the device workers; the GPU kernel gives each column a thread).
template <class T>
void tree_sum_columns(T* base, std::int64_t rows, std::int64_t width, std::int64_t lo,
                      std::int64_t hi) {
  for_each_tree_pair(rows, [&](std::int64_t dst, std::int64_t src) {
    T* d = base + dst * width;
    const T* s = base + src * width;
    for (std::int64_t j = lo; j < hi; ++j) d[j] += s[j];
  });
}

/// The tree over the values of `v` (0 for none): the losses of a step's shards.
inline double tree_sum(std::vector<double> v) {
  for_each_tree_pair(static_cast<std::int64_t>(v.size()), [&](std::int64_t dst, std::int64_t src) {
    v[static_cast<std::size_t>(dst)] += v[static_cast<std::size_t>(src)];
  });
  return v.empty() ? 0.0 : v[0];
}

}  // namespace lockstep::parallel::detail
