// Without LOCKSTEP_CUDA: stand-ins for src/ops/cuda_pool_norm_ops.h (never reached: no cuda:k
// tensor can be made). Each throws DeviceError naming the op, as src/ops/cuda_stub.cpp.
#include <string>

#include "lockstep/core/error.h"
#include "ops/cuda_not_built.h"
#include "ops/cuda_pool_norm_ops.h"

namespace lockstep::cuda_pool_norm {

using cuda_ops::not_built;

template <class T>
void max_pool2d(const T*, T*, std::int64_t*, const PoolGeom&, int) {
  not_built("max_pool2d");
}
template <class T>
void max_pool2d_backward(const T*, const std::int64_t*, T*, const PoolGeom&, int) {
  not_built("max_pool2d_backward");
}
template <class T>
void avg_pool2d(const T*, T*, const PoolGeom&, int) {
  not_built("avg_pool2d");
}
template <class T>
void avg_pool2d_backward(const T*, T*, const PoolGeom&, int) {
  not_built("avg_pool2d_backward");
}
template <class T>
void adaptive_avg_pool2d(const T*, T*, const PoolGeom&, int) {
  not_built("adaptive_avg_pool2d");
}
template <class T>
void adaptive_avg_pool2d_backward(const T*, T*, const PoolGeom&, int) {
  not_built("adaptive_avg_pool2d_backward");
}
template <class T>
void batch_norm_train_stats(const T*, const BnGeom&, double, double, T*, T*, double*, double*,
                            int) {
  not_built("batch_norm");
}
template <class T>
void batch_norm_eval_stats(const T*, const T*, const BnGeom&, double, double*, double*, int) {
  not_built("batch_norm");
}
template <class T>
void batch_norm_apply(const T*, const double*, const double*, const T*, const T*, const BnGeom&, T*,
                      int) {
  not_built("batch_norm");
}
template <class T>
void batch_norm_backward(const T*, const T*, const double*, const double*, const T*, const BnGeom&,
                         bool, T*, T*, T*, int) {
  not_built("batch_norm_backward");
}
template <class T>
void batch_norm_stats(const T*, const BnGeom&, double*, double*, int) {
  not_built("batch_norm_stats");
}
template <class T>
void batch_norm_backward_reduce(const T*, const T*, const double*, const BnGeom&, double*, double*,
                                int) {
  not_built("batch_norm_backward_reduce");
}
template <class T>
void batch_norm_backward_elemt(const T*, const T*, const double*, const double*, const T*,
                               const double*, const double*, double, const BnGeom&, T*, int) {
  not_built("batch_norm_backward_elemt");
}

#define LOCKSTEP_INSTANTIATE(T)                                                                    \
  template void max_pool2d<T>(const T*, T*, std::int64_t*, const PoolGeom&, int);                  \
  template void max_pool2d_backward<T>(const T*, const std::int64_t*, T*, const PoolGeom&, int);   \
  template void avg_pool2d<T>(const T*, T*, const PoolGeom&, int);                                 \
  template void avg_pool2d_backward<T>(const T*, T*, const PoolGeom&, int);                        \
  template void adaptive_avg_pool2d<T>(const T*, T*, const PoolGeom&, int);                        \
  template void adaptive_avg_pool2d_backward<T>(const T*, T*, const PoolGeom&, int);               \
  template void batch_norm_train_stats<T>(const T*, const BnGeom&, double, double, T*, T*,         \
                                          double*, double*, int);                                  \
  template void batch_norm_eval_stats<T>(const T*, const T*, const BnGeom&, double, double*,       \
                                         double*, int);                                            \
  template void batch_norm_apply<T>(const T*, const double*, const double*, const T*, const T*,    \
                                    const BnGeom&, T*, int);                                       \
  template void batch_norm_backward<T>(const T*, const T*, const double*, const double*, const T*, \
                                       const BnGeom&, bool, T*, T*, T*, int);                      \
  template void batch_norm_stats<T>(const T*, const BnGeom&, double*, double*, int);               \
  template void batch_norm_backward_reduce<T>(const T*, const T*, const double*, const BnGeom&,    \
                                              double*, double*, int);                              \
  template void batch_norm_backward_elemt<T>(const T*, const T*, const double*, const double*,     \
                                             const T*, const double*, const double*, double,       \
                                             const BnGeom&, T*, int);
LOCKSTEP_INSTANTIATE(float)
LOCKSTEP_INSTANTIATE(double)
#undef LOCKSTEP_INSTANTIATE

}  // namespace lockstep::cuda_pool_norm
