// The CUDA kernel of embedding's backward (src/ops/cuda_layer_norm_embedding_ops.h): one thread
// per element of the weight gradient, summing its row's gradient rows in index order (the
// host's counting sort gives each row its positions in increasing order), in T from 0, with
// round-to-nearest adds: bit for bit the CPU's scatter-add, with no atomics. The forward is
// cuda_ops::index_select.
#include <cuda_runtime.h>

#include "ops/cuda/launch.cuh"
#include "ops/cuda_layer_norm_embedding_ops.h"

namespace lockstep::cuda_layer_norm_embedding {

namespace {

namespace kd = ::lockstep::kernels::cuda::detail;

template <class T>
__global__ void embedding_backward_kernel(const T* gy, const std::int64_t* order,
                                          const std::int64_t* offsets, std::int64_t dim, T* dw,
                                          std::int64_t n) {
  LOCKSTEP_GRID_STRIDE(e, n) {
    const std::int64_t v = e / dim, j = e - v * dim;
    T acc = T(0);
    for (std::int64_t p = offsets[v]; p < offsets[v + 1]; ++p)
      acc = kd::add_rn(acc, gy[order[p] * dim + j]);
    dw[e] = acc;
  }
}

}  // namespace

template <class T>
void embedding_backward(const T* gy, const std::int64_t* order, const std::int64_t* offsets,
                        std::int64_t vocab, std::int64_t dim, T* dw, int device) {
  const std::int64_t n = vocab * dim;
  kd::launch_n("embedding_backward", n, ::lockstep::kernels::cuda::on_device(device),
               embedding_backward_kernel<T>, gy, order, offsets, dim, dw, n);
}

template void embedding_backward<float>(const float*, const std::int64_t*, const std::int64_t*,
                                        std::int64_t, std::int64_t, float*, int);
template void embedding_backward<double>(const double*, const std::int64_t*, const std::int64_t*,
                                         std::int64_t, std::int64_t, double*, int);

}  // namespace lockstep::cuda_layer_norm_embedding
