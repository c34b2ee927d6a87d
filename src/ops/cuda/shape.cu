// Copies of the shape ops (see kernels.h): strided copies for t, narrow, cat and their backward;
// index_select and its backward. Elements are moved as 4- or 8-byte words (float, double, int64).
#include <string>

#include "lockstep/core/error.h"
#include "ops/cuda/launch.cuh"

namespace lockstep::kernels::cuda {

namespace {

template <class W>
__global__ void strided_copy_kernel(W* dst, std::int64_t dst_base, const W* src,
                                    std::int64_t src_base, StridedIter it, std::int64_t n) {
  LOCKSTEP_GRID_STRIDE(i, n) {
    std::int64_t od = 0, os = 0;
    shared::strided_offsets(it, i, od, os);
    dst[dst_base + od] = src[src_base + os];
  }
}

template <class W>
__global__ void index_select_kernel(const W* in, const std::int64_t* index, W* out,
                                    std::int64_t outer, std::int64_t r, std::int64_t k,
                                    std::int64_t inner) {
  LOCKSTEP_GRID_STRIDE(e, outer * k * inner) {
    out[e] = in[shared::index_select_source(index, e, r, k, inner)];
  }
}

// One thread per element of gi: the CPU adds g's rows into gi row by row (increasing i), so each
// element is +0 plus its contributions in increasing i, in T.
template <class T>
__global__ void index_select_backward_kernel(const T* g, const std::int64_t* index, T* gi,
                                             std::int64_t outer, std::int64_t r, std::int64_t k,
                                             std::int64_t inner) {
  LOCKSTEP_GRID_STRIDE(e, outer * r * inner) {
    gi[e] = shared::index_select_grad_one(g, index, e, r, k, inner);
  }
}

void check_elem(std::size_t elem_size, const char* op) {
  if (elem_size != 4 && elem_size != 8)
    throw ValueError(std::string(op) + ": element size " + std::to_string(elem_size) +
                     " (expected 4 or 8 bytes)");
}

}  // namespace

void strided_copy(std::size_t elem_size, void* dst, std::int64_t dst_base, const void* src,
                  std::int64_t src_base, const StridedIter& it, std::int64_t n, Exec exec) {
  check_elem(elem_size, "strided_copy");
  if (elem_size == 4)
    detail::launch_n("strided_copy", n, exec, strided_copy_kernel<std::uint32_t>,
                     static_cast<std::uint32_t*>(dst), dst_base,
                     static_cast<const std::uint32_t*>(src), src_base, it, n);
  else
    detail::launch_n("strided_copy", n, exec, strided_copy_kernel<std::uint64_t>,
                     static_cast<std::uint64_t*>(dst), dst_base,
                     static_cast<const std::uint64_t*>(src), src_base, it, n);
}

void index_select(std::size_t elem_size, const void* in, const std::int64_t* index, void* out,
                  std::int64_t outer, std::int64_t r, std::int64_t k, std::int64_t inner,
                  Exec exec) {
  check_elem(elem_size, "index_select");
  const std::int64_t n = outer * k * inner;
  if (elem_size == 4)
    detail::launch_n("index_select", n, exec, index_select_kernel<std::uint32_t>,
                     static_cast<const std::uint32_t*>(in), index, static_cast<std::uint32_t*>(out),
                     outer, r, k, inner);
  else
    detail::launch_n("index_select", n, exec, index_select_kernel<std::uint64_t>,
                     static_cast<const std::uint64_t*>(in), index, static_cast<std::uint64_t*>(out),
                     outer, r, k, inner);
}

template <class T>
void index_select_backward(const T* g, const std::int64_t* index, T* gi, std::int64_t outer,
                           std::int64_t r, std::int64_t k, std::int64_t inner, Exec exec) {
  detail::launch_n("index_select_backward", outer * r * inner, exec,
                   index_select_backward_kernel<T>, g, index, gi, outer, r, k, inner);
}

template void index_select_backward<float>(const float*, const std::int64_t*, float*, std::int64_t,
                                           std::int64_t, std::int64_t, std::int64_t, Exec);
template void index_select_backward<double>(const double*, const std::int64_t*, double*,
                                            std::int64_t, std::int64_t, std::int64_t, std::int64_t,
                                            Exec);

}  // namespace lockstep::kernels::cuda
