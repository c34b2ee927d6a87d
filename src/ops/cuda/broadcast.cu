// Broadcasting binary ops (see kernels.h): each output element's operand offsets from its
// linear index through the host-planned StridedIter (src/ops/strided_plan.h).
#include <type_traits>

#include "ops/wrapping.h"
#include "ops/cuda/launch.cuh"

namespace lockstep::kernels::cuda {

namespace {

template <class T>
__device__ inline T apply(Binary op, T a, T b) {
  if constexpr (std::is_floating_point_v<T>) {
    return detail::binary_rn(op, a, b);
  } else {
    // int64 wraps around as two's complement (the CPU's add/sub/mul); the op layer never asks
    // for an int64 division (div requires a float tensor).
    switch (op) {
      case Binary::Add:
        return ::lockstep::detail::wrapping_add(a, b);
      case Binary::Sub:
        return ::lockstep::detail::wrapping_sub(a, b);
      case Binary::Mul:
        return ::lockstep::detail::wrapping_mul(a, b);
      case Binary::Div:
        return b == 0 ? T(0) : a / b;
    }
    return a;
  }
}

template <class T>
__global__ void binary_strided_kernel(Binary op, const T* a, const T* b, T* out, StridedIter it,
                                      std::int64_t n) {
  LOCKSTEP_GRID_STRIDE(i, n) {
    std::int64_t oa = 0, ob = 0;
    shared::strided_offsets(it, i, oa, ob);
    out[i] = apply(op, a[oa], b[ob]);
  }
}

template <class T>
__global__ void compare_strided_kernel(shared::Compare op, const T* a, const T* b,
                                       std::int64_t* out, StridedIter it, std::int64_t n) {
  LOCKSTEP_GRID_STRIDE(i, n) {
    std::int64_t oa = 0, ob = 0;
    shared::strided_offsets(it, i, oa, ob);
    out[i] = shared::compare_one(op, a[oa], b[ob]);
  }
}

}  // namespace

template <class T>
void compare_strided(shared::Compare op, const T* a, const T* b, std::int64_t* out,
                     const StridedIter& it, std::int64_t n, Exec exec) {
  detail::launch_n("compare", n, exec, compare_strided_kernel<T>, op, a, b, out, it, n);
}

template void compare_strided<float>(shared::Compare, const float*, const float*, std::int64_t*,
                                     const StridedIter&, std::int64_t, Exec);
template void compare_strided<double>(shared::Compare, const double*, const double*,
                                      std::int64_t*, const StridedIter&, std::int64_t, Exec);
template void compare_strided<std::int64_t>(shared::Compare, const std::int64_t*,
                                            const std::int64_t*, std::int64_t*,
                                            const StridedIter&, std::int64_t, Exec);

template <class T>
void binary_strided(Binary op, const T* a, const T* b, T* out, const StridedIter& it,
                    std::int64_t n, Exec exec) {
  detail::launch_n("binary_strided", n, exec, binary_strided_kernel<T>, op, a, b, out, it, n);
}

template void binary_strided<float>(Binary, const float*, const float*, float*, const StridedIter&,
                                    std::int64_t, Exec);
template void binary_strided<double>(Binary, const double*, const double*, double*,
                                     const StridedIter&, std::int64_t, Exec);
template void binary_strided<std::int64_t>(Binary, const std::int64_t*, const std::int64_t*,
                                           std::int64_t*, const StridedIter&, std::int64_t, Exec);

}  // namespace lockstep::kernels::cuda
