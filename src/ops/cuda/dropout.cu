// Training-mode dropout masks on the GPU, bit for bit the CPU's (see kernels.h): the same
// Philox4x32-10 function and the same word-to-mask rules (include/lockstep/core/detail/philox.h).
#include "lockstep/core/detail/philox.h"
#include "ops/cuda/launch.cuh"

namespace lockstep::kernels::cuda {

namespace {

// One thread per (row, group of 4 columns): one Philox block feeds up to four mask elements.
template <class T>
__global__ void dropout_keyed_kernel(T* mask, std::int64_t rows, std::int64_t cols,
                                     std::int64_t groups, std::uint64_t seed, std::uint64_t step,
                                     std::uint32_t call, std::int64_t sample_offset, double p,
                                     T scale) {
  LOCKSTEP_GRID_STRIDE(e, rows * groups) {
    ::lockstep::detail::dropout_keyed_group(mask, e, cols, groups, seed, step, call, sample_offset,
                                            p, scale);
  }
}

template <class T>
__global__ void dropout_stream_kernel(T* mask, std::int64_t n, std::uint64_t seed,
                                      std::uint64_t offset, double p, T scale) {
  LOCKSTEP_GRID_STRIDE(i, n) {
    const double u =
        ::lockstep::detail::philox_stream_double(seed, offset + 2 * static_cast<std::uint64_t>(i));
    mask[i] = ::lockstep::detail::dropout_mask_value<T>(u, p, scale);
  }
}

}  // namespace

template <class T>
void dropout_mask_keyed(T* mask, std::int64_t rows, std::int64_t cols, std::uint64_t seed,
                        std::uint64_t step, std::uint32_t call, std::int64_t sample_offset,
                        double p, T scale, Exec exec) {
  const std::int64_t groups = (cols + 3) / 4;
  detail::launch_n("dropout_mask_keyed", rows * groups, exec, dropout_keyed_kernel<T>, mask, rows,
                   cols, groups, seed, step, call, sample_offset, p, scale);
}

template <class T>
void dropout_mask_stream(T* mask, std::int64_t n, std::uint64_t seed, std::uint64_t offset,
                         double p, T scale, Exec exec) {
  detail::launch_n("dropout_mask_stream", n, exec, dropout_stream_kernel<T>, mask, n, seed, offset,
                   p, scale);
}

#define LOCKSTEP_INSTANTIATE(T)                                                                   \
  template void dropout_mask_keyed<T>(T*, std::int64_t, std::int64_t, std::uint64_t,              \
                                      std::uint64_t, std::uint32_t, std::int64_t, double, T,      \
                                      Exec);                                                      \
  template void dropout_mask_stream<T>(T*, std::int64_t, std::uint64_t, std::uint64_t, double, T, \
                                       Exec);
LOCKSTEP_INSTANTIATE(float)
LOCKSTEP_INSTANTIATE(double)
#undef LOCKSTEP_INSTANTIATE

}  // namespace lockstep::kernels::cuda
