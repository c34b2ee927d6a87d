// Fused softmax + cross-entropy, forward and backward (see kernels.h).
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>

#include "lockstep/cuda/detail/check.h"
#include "ops/cuda/kernels.h"

namespace lockstep::kernels::cuda {

namespace {

constexpr int kWarp = 32;
constexpr int kRowsPerBlock = 8;  // one warp per row
constexpr int kReduceThreads = 256;

template <class T>
__device__ T warp_max(T v) {
  for (int o = kWarp / 2; o > 0; o /= 2) v = max(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
template <class T>
__device__ T warp_sum(T v) {
  for (int o = kWarp / 2; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// Row i handled by one warp: max, sum of exp(x − max), then prob and the loss term. The
// log-sum-exp is accumulated in double (as the reference does) so that rows of many classes
// keep fp32 accuracy.
template <class T>
__global__ void ce_rows_kernel(const T* logits, const std::int64_t* target, std::int64_t n,
                               std::int64_t c, std::int64_t ignore_index, T* prob,
                               T* loss_terms) {
  const std::int64_t row = blockIdx.x * std::int64_t{kRowsPerBlock} + threadIdx.x / kWarp;
  const int lane = threadIdx.x % kWarp;
  if (row >= n) return;  // whole warps leave together: row is uniform within a warp
  const T* x = logits + row * c;
  double mx = -INFINITY;
  for (std::int64_t j = lane; j < c; j += kWarp) mx = fmax(mx, static_cast<double>(x[j]));
  mx = warp_max(mx);
  double s = 0;
  for (std::int64_t j = lane; j < c; j += kWarp) s += exp(static_cast<double>(x[j]) - mx);
  s = warp_sum(s);
  const double lse = mx + log(s);
  T* p = prob + row * c;
  for (std::int64_t j = lane; j < c; j += kWarp)
    p[j] = static_cast<T>(exp(static_cast<double>(x[j]) - lse));
  if (lane == 0) {
    const std::int64_t t = target[row];
    T term = T(0);
    if (t != ignore_index) {
      if (t >= 0 && t < c)
        term = static_cast<T>(lse - static_cast<double>(x[t]));
      else
        term = static_cast<T>(NAN);
    }
    loss_terms[row] = term;
  }
}

// One block: Σ loss terms (double), count and invalid, in a fixed order (each thread sums a
// strided slice in index order, then a fixed tree): the same bits on every run.
template <class T>
__global__ void ce_reduce_kernel(const T* loss_terms, const std::int64_t* target, std::int64_t n,
                                 std::int64_t c, std::int64_t ignore_index, double* loss_sum,
                                 std::int64_t* count, std::int64_t* invalid, T* loss_out,
                                 std::int64_t* first_bad) {
  __shared__ double s_sum[kReduceThreads];
  __shared__ long long s_cnt[kReduceThreads];
  __shared__ long long s_bad[kReduceThreads];
  __shared__ long long s_first[kReduceThreads];
  double sum = 0;
  long long cnt = 0, bad = 0;
  long long first = -1;  // this thread's first row with an invalid target (its rows ascend)
  for (std::int64_t i = threadIdx.x; i < n; i += kReduceThreads) {
    const std::int64_t t = target[i];
    if (t == ignore_index) continue;
    if (t < 0 || t >= c) {
      ++bad;
      sum += NAN;
      if (first < 0) first = i;
      continue;
    }
    ++cnt;
    sum += static_cast<double>(loss_terms[i]);
  }
  s_sum[threadIdx.x] = sum;
  s_cnt[threadIdx.x] = cnt;
  s_bad[threadIdx.x] = bad;
  s_first[threadIdx.x] = first;
  __syncthreads();
  for (int w = kReduceThreads / 2; w > 0; w /= 2) {
    if (threadIdx.x < w) {
      s_sum[threadIdx.x] += s_sum[threadIdx.x + w];
      s_cnt[threadIdx.x] += s_cnt[threadIdx.x + w];
      s_bad[threadIdx.x] += s_bad[threadIdx.x + w];
      const long long a = s_first[threadIdx.x], b = s_first[threadIdx.x + w];
      s_first[threadIdx.x] = a < 0 ? b : (b < 0 ? a : (a < b ? a : b));
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    *loss_sum = s_sum[0];
    *count = s_cnt[0];
    *invalid = s_bad[0];
    // The mean as the host computes it from the same sum and count: (sum / count) in double,
    // rounded to T once; NaN when nothing counts (PyTorch's mean over no elements).
    if (loss_out)
      *loss_out =
          s_cnt[0] ? static_cast<T>(s_sum[0] / static_cast<double>(s_cnt[0])) : static_cast<T>(NAN);
    if (first_bad) {
      first_bad[0] = s_first[0];
      first_bad[1] = s_first[0] >= 0 ? target[s_first[0]] : 0;
    }
  }
}

template <class T>
__global__ void ce_backward_kernel(const T* prob, const std::int64_t* target, std::int64_t n,
                                   std::int64_t c, std::int64_t ignore_index,
                                   const std::int64_t* count, const T* grad_output, T* gl) {
  const double g = grad_output ? static_cast<double>(*grad_output) : 1.0;
  const long long cnt = *count;
  const double scale = g / static_cast<double>(cnt > 1 ? cnt : 1);
  const std::int64_t total = n * c;
  for (std::int64_t idx = blockIdx.x * std::int64_t{blockDim.x} + threadIdx.x; idx < total;
       idx += std::int64_t{gridDim.x} * blockDim.x) {
    const std::int64_t i = idx / c, j = idx - i * c;
    const std::int64_t t = target[i];
    if (t == ignore_index || t < 0 || t >= c) {
      gl[idx] = T(0);
      continue;
    }
    const double onehot = j == t ? 1.0 : 0.0;
    gl[idx] = static_cast<T>((static_cast<double>(prob[idx]) - onehot) * scale);
  }
}

}  // namespace

template <class T>
void cross_entropy_forward(const T* logits, const std::int64_t* target, std::int64_t n,
                           std::int64_t c, std::int64_t ignore_index, T* prob, T* loss_terms,
                           double* loss_sum, std::int64_t* count, std::int64_t* invalid, Exec exec,
                           T* loss_out, std::int64_t* first_bad) {
  ::lockstep::cuda::DeviceGuard guard(exec.device);
  if (n > 0 && c > 0) {
    const auto blocks = static_cast<unsigned>((n + kRowsPerBlock - 1) / kRowsPerBlock);
    ce_rows_kernel<T><<<blocks, kRowsPerBlock * kWarp, 0, exec.stream>>>(
        logits, target, n, c, ignore_index, prob, loss_terms);
    LOCKSTEP_CUDA_CHECK_LAUNCH(exec.device, "cross_entropy_forward (rows)");
  }
  // Always launched, so the three outputs are written even for n == 0 (sum 0, count 0).
  ce_reduce_kernel<T><<<1, kReduceThreads, 0, exec.stream>>>(
      loss_terms, target, n, c, ignore_index, loss_sum, count, invalid, loss_out, first_bad);
  LOCKSTEP_CUDA_CHECK_LAUNCH(exec.device, "cross_entropy_forward (reduce)");
}

template <class T>
void cross_entropy_backward(const T* prob, const std::int64_t* target, std::int64_t n,
                            std::int64_t c, std::int64_t ignore_index, const std::int64_t* count,
                            const T* grad_output, T* grad_logits, Exec exec) {
  const std::int64_t total = n * c;
  if (total <= 0) return;
  ::lockstep::cuda::DeviceGuard guard(exec.device);
  const auto blocks =
      static_cast<unsigned>(std::min<std::int64_t>((total + 255) / 256, 65535 * 8));
  ce_backward_kernel<T><<<blocks, 256, 0, exec.stream>>>(prob, target, n, c, ignore_index, count,
                                                         grad_output, grad_logits);
  LOCKSTEP_CUDA_CHECK_LAUNCH(exec.device, "cross_entropy_backward");
}

#define LOCKSTEP_INSTANTIATE(T)                                                                  \
  template void cross_entropy_forward<T>(const T*, const std::int64_t*, std::int64_t,            \
                                         std::int64_t, std::int64_t, T*, T*, double*,            \
                                         std::int64_t*, std::int64_t*, Exec, T*, std::int64_t*); \
  template void cross_entropy_backward<T>(const T*, const std::int64_t*, std::int64_t,           \
                                          std::int64_t, std::int64_t, const std::int64_t*,       \
                                          const T*, T*, Exec);
LOCKSTEP_INSTANTIATE(float)
LOCKSTEP_INSTANTIATE(double)
#undef LOCKSTEP_INSTANTIATE

}  // namespace lockstep::kernels::cuda
