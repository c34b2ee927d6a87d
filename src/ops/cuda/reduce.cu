// Reductions along a dimension and of the whole tensor beyond sum/mean (see kernels.h): sum_to /
// sum(dim), softmax / log_softmax, max / argmax along a dimension and of the whole tensor, and
// the backward kernels of max. The per-output bodies are src/ops/device_ops.h.
#include <type_traits>

#include "ops/cuda/launch.cuh"

namespace lockstep::kernels::cuda {

namespace {

namespace sh = ::lockstep::kernels::shared;

template <class T>
using Acc = std::conditional_t<std::is_floating_point_v<T>, double, std::int64_t>;

template <class T>
__global__ void sum_reduce_kernel(const T* in, T* out, ReducePlan plan) {
  LOCKSTEP_GRID_STRIDE(o, plan.out_count) {
    out[o] = static_cast<T>(sh::reduce_sum_one<T, Acc<T>>(in, plan, o));
  }
}

template <class T>
__global__ void softmax_kernel(const T* x, T* y, std::int64_t outer, std::int64_t r,
                               std::int64_t inner, bool log) {
  LOCKSTEP_GRID_STRIDE(line, outer * inner) {
    sh::softmax_line(x, y, sh::line_base(line, r, inner), r, inner, log);
  }
}

template <class T>
__global__ void max_dim_kernel(const T* x, T* values, std::int64_t* indices, std::int64_t outer,
                               std::int64_t r, std::int64_t inner) {
  LOCKSTEP_GRID_STRIDE(line, outer * inner) {
    T v;
    std::int64_t k;
    sh::max_line(x, sh::line_base(line, r, inner), r, inner, v, k);
    if (values) values[line] = v;
    indices[line] = k;
  }
}

template <class T>
__global__ void max_dim_backward_kernel(const T* g, const std::int64_t* indices, T* gi,
                                        std::int64_t outer, std::int64_t r, std::int64_t inner) {
  LOCKSTEP_GRID_STRIDE(line, outer * inner) {
    gi[sh::line_base(line, r, inner) + indices[line] * inner] = g[line];
  }
}

// One block: thread t pushes elements t, t + kThreads, ...; then a fixed tree of merges. The
// accumulator's result does not depend on the partition (device_ops.h), so it is the CPU's.
template <class T>
__global__ void max_all_kernel(const T* x, std::int64_t n, int rule, T* value,
                               std::int64_t* index) {
  // Raw shared storage: a __shared__ array may not have a (non-trivial) initializer.
  __shared__ alignas(sh::MaxAcc) unsigned char raw[sizeof(sh::MaxAcc) * detail::kThreads];
  auto* acc = reinterpret_cast<sh::MaxAcc*>(raw);
  sh::MaxAcc mine;
  for (std::int64_t i = threadIdx.x; i < n; i += detail::kThreads) sh::max_acc_push(x, mine, i);
  acc[threadIdx.x] = mine;
  __syncthreads();
  for (int w = detail::kThreads / 2; w > 0; w /= 2) {
    if (threadIdx.x < w) sh::max_acc_merge(x, acc[threadIdx.x], acc[threadIdx.x + w]);
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    const std::int64_t k = sh::max_acc_index(x, acc[0], rule);
    *index = k;
    if (value) *value = x[k];
  }
}

// One block: the tie count (integers: the same in any order), then every element written.
template <class T>
__global__ void max_all_backward_kernel(const T* x, std::int64_t n, const T* best, const T* g,
                                        T* gi) {
  __shared__ std::int64_t count[detail::kThreads];
  const double b = static_cast<double>(*best);
  std::int64_t mine = 0;
  for (std::int64_t i = threadIdx.x; i < n; i += detail::kThreads)
    mine += static_cast<double>(x[i]) == b ? 1 : 0;
  count[threadIdx.x] = mine;
  __syncthreads();
  for (int w = detail::kThreads / 2; w > 0; w /= 2) {
    if (threadIdx.x < w) count[threadIdx.x] += count[threadIdx.x + w];
    __syncthreads();
  }
  const std::int64_t ties = count[0] > 1 ? count[0] : 1;
  const T share =
      static_cast<T>(detail::div_rn(static_cast<double>(*g), static_cast<double>(ties)));
  for (std::int64_t i = threadIdx.x; i < n; i += detail::kThreads)
    gi[i] = static_cast<double>(x[i]) == b ? share : T(0);
}

}  // namespace

template <class T>
void sum_reduce(const T* in, T* out, const ReducePlan& plan, Exec exec) {
  detail::launch_n("sum_reduce", plan.out_count, exec, sum_reduce_kernel<T>, in, out, plan);
}

template <class T>
void softmax_lines(const T* x, T* y, std::int64_t outer, std::int64_t r, std::int64_t inner,
                   bool log, Exec exec) {
  if (r <= 0) return;
  detail::launch_n(log ? "log_softmax" : "softmax", outer * inner, exec, softmax_kernel<T>, x, y,
                   outer, r, inner, log);
}

template <class T>
void max_dim(const T* x, T* values, std::int64_t* indices, std::int64_t outer, std::int64_t r,
             std::int64_t inner, Exec exec) {
  if (r <= 0) return;
  detail::launch_n("max_dim", outer * inner, exec, max_dim_kernel<T>, x, values, indices, outer, r,
                   inner);
}

template <class T>
void max_dim_backward(const T* g, const std::int64_t* indices, T* gi, std::int64_t outer,
                      std::int64_t r, std::int64_t inner, Exec exec) {
  if (r <= 0) return;
  detail::launch_n("max_dim_backward", outer * inner, exec, max_dim_backward_kernel<T>, g, indices,
                   gi, outer, r, inner);
}

template <class T>
void max_all(const T* x, std::int64_t n, int rule, T* value, std::int64_t* index, Exec exec) {
  if (n <= 0) return;
  detail::launch_one_block("max_all", exec, max_all_kernel<T>, x, n, rule, value, index);
}

template <class T>
void max_all_backward(const T* x, std::int64_t n, const T* best, const T* g, T* gi, Exec exec) {
  if (n <= 0) return;
  detail::launch_one_block("max_all_backward", exec, max_all_backward_kernel<T>, x, n, best, g, gi);
}

#define LOCKSTEP_INSTANTIATE_ALL(T)                                                               \
  template void sum_reduce<T>(const T*, T*, const ReducePlan&, Exec);                             \
  template void max_dim<T>(const T*, T*, std::int64_t*, std::int64_t, std::int64_t, std::int64_t, \
                           Exec);                                                                 \
  template void max_all<T>(const T*, std::int64_t, int, T*, std::int64_t*, Exec);
#define LOCKSTEP_INSTANTIATE_FLOAT(T)                                                              \
  template void softmax_lines<T>(const T*, T*, std::int64_t, std::int64_t, std::int64_t, bool,     \
                                 Exec);                                                            \
  template void max_dim_backward<T>(const T*, const std::int64_t*, T*, std::int64_t, std::int64_t, \
                                    std::int64_t, Exec);                                           \
  template void max_all_backward<T>(const T*, std::int64_t, const T*, const T*, T*, Exec);
LOCKSTEP_INSTANTIATE_ALL(float)
LOCKSTEP_INSTANTIATE_ALL(double)
LOCKSTEP_INSTANTIATE_ALL(std::int64_t)
LOCKSTEP_INSTANTIATE_FLOAT(float)
LOCKSTEP_INSTANTIATE_FLOAT(double)
#undef LOCKSTEP_INSTANTIATE_ALL
#undef LOCKSTEP_INSTANTIATE_FLOAT

}  // namespace lockstep::kernels::cuda
