// Fused optimizer steps (see kernels.h): SGD and Adam/AdamW over one parameter, and over every
// parameter of a flat buffer in one launch. The per-element formulas are those of
// include/lockstep/ops/detail/update_rules.h, shared with the CPU loops (src/optim/sgd.cpp, src/optim/adam.cpp).
#include <cuda_runtime.h>

#include <algorithm>
#include <limits>
#include <string>

#include "lockstep/cuda/detail/check.h"
#include "lockstep/core/error.h"
#include "lockstep/ops/detail/device_math.cuh"
#include "ops/cuda/kernels.h"
#include "lockstep/ops/detail/update_rules.h"

namespace lockstep::kernels::cuda {

namespace rules = ::lockstep::optim::rules;
using detail::blocks_for;
using detail::kThreads;

namespace {

// ---- one parameter -----------------------------------------------------------------------------

template <class T>
__global__ void sgd_kernel(T* p, const T* g, T* buf, std::int64_t n, bool first,
                           rules::SgdScalars<T> s) {
  for (std::int64_t i = blockIdx.x * std::int64_t{blockDim.x} + threadIdx.x; i < n;
       i += std::int64_t{gridDim.x} * blockDim.x)
    p[i] = rules::sgd_element(p[i], g[i], buf ? buf + i : nullptr, first, s);
}

template <class T>
__global__ void adam_kernel(T* p, const T* g, T* m, T* v, std::int64_t n, rules::AdamScalars<T> s) {
  for (std::int64_t i = blockIdx.x * std::int64_t{blockDim.x} + threadIdx.x; i < n;
       i += std::int64_t{gridDim.x} * blockDim.x) {
    T mi = m[i], vi = v[i];
    p[i] = rules::adam_element(p[i], g[i], mi, vi, s);
    m[i] = mi;
    v[i] = vi;
  }
}

// ---- flat buffer: block b updates one chunk of one segment --------------------------------------

// The segment of block b: the last one whose first_block <= b (segments are in first_block
// order, each with at least one block).
template <class T>
__device__ inline FlatSegment<T> segment_of_block(const FlatSegment<T>* segments,
                                                  std::int64_t count, std::int64_t b) {
  std::int64_t lo = 0, hi = count - 1;
  while (lo < hi) {
    const std::int64_t mid = (lo + hi + 1) / 2;
    if (segments[mid].first_block <= b)
      lo = mid;
    else
      hi = mid - 1;
  }
  return segments[lo];
}

template <class T>
__global__ void sgd_flat_kernel(T* p, const T* g, T* buf, const FlatSegment<T>* segments,
                                std::int64_t count, rules::SgdScalars<T> s_arg,
                                const rules::SgdScalars<T>* s_dev) {
  const rules::SgdScalars<T> s = s_dev ? *s_dev : s_arg;
  const std::int64_t b = blockIdx.x;
  const FlatSegment<T> seg = segment_of_block(segments, count, b);
  const std::int64_t begin = (b - seg.first_block) * kFlatChunk;
  const std::int64_t end = std::min(seg.numel, begin + kFlatChunk);
  T* ps = p + seg.param_offset;
  const T* gs = g + seg.grad_offset;
  T* bs = buf ? buf + seg.state_offset : nullptr;
  const bool first = (seg.flags & kFlatFirstStep) != 0;
  for (std::int64_t i = begin + threadIdx.x; i < end; i += blockDim.x)
    ps[i] = rules::sgd_element(ps[i], gs[i], bs ? bs + i : nullptr, first, s);
}

template <class T>
__global__ void adam_flat_kernel(T* p, const T* g, T* m, T* v, const FlatSegment<T>* segments,
                                 std::int64_t count, rules::AdamScalars<T> s_arg,
                                 const rules::AdamScalars<T>* s_dev) {
  rules::AdamScalars<T> s = s_dev ? *s_dev : s_arg;
  const std::int64_t b = blockIdx.x;
  const FlatSegment<T> seg = segment_of_block(segments, count, b);
  const std::int64_t begin = (b - seg.first_block) * kFlatChunk;
  const std::int64_t end = std::min(seg.numel, begin + kFlatChunk);
  s.step_size = seg.step_size;  // this parameter's own step count
  s.bc2_sqrt = seg.bc2_sqrt;
  const bool fresh_m = (seg.flags & kFlatFreshExpAvg) != 0;
  const bool fresh_v = (seg.flags & kFlatFreshExpAvgSq) != 0;
  T* ps = p + seg.param_offset;
  const T* gs = g + seg.grad_offset;
  T* ms = m + seg.state_offset;
  T* vs = v + seg.state_offset;
  for (std::int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
    // New state is the zeros the per-parameter step would create (+0.0).
    T mi = fresh_m ? T(0) : ms[i];
    T vi = fresh_v ? T(0) : vs[i];
    ps[i] = rules::adam_element(ps[i], gs[i], mi, vi, s);
    ms[i] = mi;
    vs[i] = vi;
  }
}

}  // namespace

template <class T>
void sgd_step(T* param, const T* grad, T* momentum_buf, std::int64_t numel, bool first,
              const SgdHyper& h, Exec exec) {
  if (numel <= 0) return;
  if (h.momentum != 0 && !momentum_buf)
    throw ValueError("cuda sgd_step: momentum " + std::to_string(h.momentum) +
                     " needs a momentum buffer, got nullptr");
  ::lockstep::cuda::DeviceGuard guard(exec.device);
  const auto s = rules::sgd_scalars<T>(h.lr, h.momentum, h.dampening, h.weight_decay, h.nesterov);
  sgd_kernel<T>
      <<<blocks_for(numel), kThreads, 0, exec.stream>>>(param, grad, momentum_buf, numel, first, s);
  LOCKSTEP_CUDA_CHECK_LAUNCH(exec.device, "sgd_step");
}

template <class T>
void adam_step(T* param, const T* grad, T* exp_avg, T* exp_avg_sq, std::int64_t numel,
               const AdamHyper& h, Exec exec) {
  if (numel <= 0) return;
  ::lockstep::cuda::DeviceGuard guard(exec.device);
  const auto s =
      rules::adam_scalars<T>(h.lr, h.beta1, h.beta2, h.eps, h.weight_decay, h.step, h.decoupled);
  adam_kernel<T>
      <<<blocks_for(numel), kThreads, 0, exec.stream>>>(param, grad, exp_avg, exp_avg_sq, numel, s);
  LOCKSTEP_CUDA_CHECK_LAUNCH(exec.device, "adam_step");
}

template <class T>
std::int64_t assign_flat_blocks(FlatSegment<T>* segments, std::int64_t count) {
  std::int64_t blocks = 0;
  for (std::int64_t k = 0; k < count; ++k) {
    if (segments[k].numel < 0)
      throw ValueError("cuda flat optimizer step: segment " + std::to_string(k) +
                       " has a negative size " + std::to_string(segments[k].numel));
    segments[k].first_block = blocks;
    blocks += (segments[k].numel + kFlatChunk - 1) / kFlatChunk;
    if (blocks > std::numeric_limits<int>::max())
      throw ValueError("cuda flat optimizer step: more than 2^31 - 1 blocks of " +
                       std::to_string(kFlatChunk) + " elements");
  }
  return blocks;
}

template <class T>
void sgd_flat_step(T* param, const T* grad, T* momentum_buf, const FlatSegment<T>* segments,
                   std::int64_t count, std::int64_t blocks, const SgdHyper& h, Exec exec,
                   const void* device_scalars) {
  if (blocks <= 0 || count <= 0) return;
  if (h.momentum != 0 && !momentum_buf)
    throw ValueError("cuda sgd_flat_step: momentum " + std::to_string(h.momentum) +
                     " needs a momentum buffer, got nullptr");
  ::lockstep::cuda::DeviceGuard guard(exec.device);
  const auto s = rules::sgd_scalars<T>(h.lr, h.momentum, h.dampening, h.weight_decay, h.nesterov);
  sgd_flat_kernel<T><<<static_cast<unsigned>(blocks), kThreads, 0, exec.stream>>>(
      param, grad, momentum_buf, segments, count, s,
      static_cast<const rules::SgdScalars<T>*>(device_scalars));
  LOCKSTEP_CUDA_CHECK_LAUNCH(exec.device, "sgd_flat_step");
}

template <class T>
void adam_flat_step(T* param, const T* grad, T* exp_avg, T* exp_avg_sq,
                    const FlatSegment<T>* segments, std::int64_t count, std::int64_t blocks,
                    const AdamHyper& h, Exec exec, const void* device_scalars) {
  if (blocks <= 0 || count <= 0) return;
  ::lockstep::cuda::DeviceGuard guard(exec.device);
  // step_size and bc2_sqrt come from each segment.
  const auto s =
      rules::adam_scalars<T>(h.lr, h.beta1, h.beta2, h.eps, h.weight_decay, 1, h.decoupled);
  adam_flat_kernel<T><<<static_cast<unsigned>(blocks), kThreads, 0, exec.stream>>>(
      param, grad, exp_avg, exp_avg_sq, segments, count, s,
      static_cast<const rules::AdamScalars<T>*>(device_scalars));
  LOCKSTEP_CUDA_CHECK_LAUNCH(exec.device, "adam_flat_step");
}

#define LOCKSTEP_OPTIM_INSTANTIATE(T)                                                        \
  template void sgd_step<T>(T*, const T*, T*, std::int64_t, bool, const SgdHyper&, Exec);    \
  template void adam_step<T>(T*, const T*, T*, T*, std::int64_t, const AdamHyper&, Exec);    \
  template std::int64_t assign_flat_blocks<T>(FlatSegment<T>*, std::int64_t);                \
  template void sgd_flat_step<T>(T*, const T*, T*, const FlatSegment<T>*, std::int64_t,      \
                                 std::int64_t, const SgdHyper&, Exec, const void*);          \
  template void adam_flat_step<T>(T*, const T*, T*, T*, const FlatSegment<T>*, std::int64_t, \
                                  std::int64_t, const AdamHyper&, Exec, const void*);
LOCKSTEP_OPTIM_INSTANTIATE(float)
LOCKSTEP_OPTIM_INSTANTIATE(double)
#undef LOCKSTEP_OPTIM_INSTANTIATE

}  // namespace lockstep::kernels::cuda
