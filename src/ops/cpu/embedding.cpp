// Fast CPU kernels of embedding (src/ops/layer_norm_embedding_kernels.h). The forward copies
// rows, split over the calling thread's intra-op team (src/ops/cpu/channel_split.h). The
// backward splits the embedding's columns: each part zeroes its columns of dw, then adds every
// gradient row's slice into its weight row for i = 0, 1, ... — each element of dw is the sum of
// its contributions in index order, in T, whoever computes it, so the bits do not depend on the
// thread count and equal the reference's scatter-add.
#include <algorithm>
#include <cstring>

#include "ops/cpu/channel_split.h"
#include "ops/layer_norm_embedding_kernels.h"

namespace lockstep::kernels::cpu {

template <class T>
void embedding(const T* weight, const std::int64_t* index, std::int64_t count, std::int64_t dim,
               T* y) {
  if (dim == 0) return;  // nothing to copy (and no null pointer reaches memcpy)
  detail::split(count, count * dim, [&](std::int64_t i0, std::int64_t i1) {
    for (std::int64_t i = i0; i < i1; ++i)
      std::memcpy(y + i * dim, weight + index[i] * dim, static_cast<std::size_t>(dim) * sizeof(T));
  });
}

template <class T>
void embedding_backward(const T* gy, const std::int64_t* index, std::int64_t count,
                        std::int64_t vocab, std::int64_t dim, T* dw) {
  detail::split(dim, (count + vocab) * dim, [&](std::int64_t j0, std::int64_t j1) {
    for (std::int64_t v = 0; v < vocab; ++v) std::fill(dw + v * dim + j0, dw + v * dim + j1, T(0));
    for (std::int64_t i = 0; i < count; ++i) {
      T* out = dw + index[i] * dim;
      const T* g = gy + i * dim;
      for (std::int64_t j = j0; j < j1; ++j) out[j] += g[j];
    }
  });
}

#define LOCKSTEP_INSTANTIATE(T)                                                                  \
  template void embedding<T>(const T*, const std::int64_t*, std::int64_t, std::int64_t, T*);     \
  template void embedding_backward<T>(const T*, const std::int64_t*, std::int64_t, std::int64_t, \
                                      std::int64_t, T*);
LOCKSTEP_INSTANTIATE(float)
LOCKSTEP_INSTANTIATE(double)
#undef LOCKSTEP_INSTANTIATE

}  // namespace lockstep::kernels::cpu
