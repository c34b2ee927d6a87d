// The fused CUDA attention (src/ops/cuda_attention_ops.h): grid-stride kernels running the
// per-row bodies of src/ops/attention_bodies.h, one thread per query row or key row. Simple
// rather than fast (no tiling in shared memory); the point is one launch per pass and no
// [B, H, L, S] tensors, with the arithmetic the host tests check against the CPU kernel.
#include <cuda_runtime.h>

#include "ops/cuda/launch.cuh"
#include "ops/cuda_attention_ops.h"

namespace lockstep::cuda_attention {

namespace {

namespace kd = ::lockstep::kernels::cuda::detail;
namespace sh = ::lockstep::kernels::shared;

template <class T>
__global__ void forward_kernel(AttnArgs<T> a, std::int64_t n) {
  LOCKSTEP_GRID_STRIDE(idx, n) { sh::attn_forward_row(a, idx); }
}
template <class T>
__global__ void query_grad_kernel(AttnArgs<T> a, std::int64_t n) {
  LOCKSTEP_GRID_STRIDE(idx, n) { sh::attn_backward_query_row(a, idx); }
}
template <class T>
__global__ void key_grad_kernel(AttnArgs<T> a, std::int64_t n) {
  LOCKSTEP_GRID_STRIDE(idx, n) { sh::attn_backward_key_row(a, idx); }
}

}  // namespace

template <class T>
void attention_forward(const AttnArgs<T>& a, int device) {
  kd::launch_n("attention_forward", a.batch * a.l, ::lockstep::kernels::cuda::on_device(device),
               forward_kernel<T>, a, a.batch * a.l);
}

template <class T>
void attention_backward(const AttnArgs<T>& a, int device) {
  const auto exec = ::lockstep::kernels::cuda::on_device(device);
  // Both on the compute stream: every D_i is written before the key pass reads it.
  kd::launch_n("attention_backward (queries)", a.batch * a.l, exec, query_grad_kernel<T>, a,
               a.batch * a.l);
  kd::launch_n("attention_backward (keys)", a.batch * a.s, exec, key_grad_kernel<T>, a,
               a.batch * a.s);
}

template void attention_forward<float>(const AttnArgs<float>&, int);
template void attention_forward<double>(const AttnArgs<double>&, int);
template void attention_backward<float>(const AttnArgs<float>&, int);
template void attention_backward<double>(const AttnArgs<double>&, int);

}  // namespace lockstep::cuda_attention
