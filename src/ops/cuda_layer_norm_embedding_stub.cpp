// Without LOCKSTEP_CUDA: stand-ins for src/ops/cuda_layer_norm_embedding_ops.h (never reached:
// no cuda:k tensor can be made). Each throws DeviceError naming the op, as src/ops/cuda_stub.cpp.
#include "ops/cuda_layer_norm_embedding_ops.h"
#include "ops/cuda_not_built.h"

namespace lockstep::cuda_layer_norm_embedding {

using cuda_ops::not_built;

template <class T>
void layer_norm_forward(const T*, const T*, const T*, const LnGeom&, double, T*, double*, double*,
                        int) {
  not_built("layer_norm");
}
template <class T>
void layer_norm_backward(const T*, const T*, const double*, const double*, const T*, const LnGeom&,
                         T*, T*, T*, int) {
  not_built("layer_norm_backward");
}
template <class T>
void embedding_backward(const T*, const std::int64_t*, const std::int64_t*, std::int64_t,
                        std::int64_t, T*, int) {
  not_built("embedding_backward");
}

#define LOCKSTEP_INSTANTIATE(T)                                                                    \
  template void layer_norm_forward<T>(const T*, const T*, const T*, const LnGeom&, double, T*,     \
                                      double*, double*, int);                                      \
  template void layer_norm_backward<T>(const T*, const T*, const double*, const double*, const T*, \
                                       const LnGeom&, T*, T*, T*, int);                            \
  template void embedding_backward<T>(const T*, const std::int64_t*, const std::int64_t*,          \
                                      std::int64_t, std::int64_t, T*, int);
LOCKSTEP_INSTANTIATE(float)
LOCKSTEP_INSTANTIATE(double)
#undef LOCKSTEP_INSTANTIATE

}  // namespace lockstep::cuda_layer_norm_embedding
