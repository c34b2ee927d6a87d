// Without LOCKSTEP_CUDA: stand-ins for src/ops/cuda_conv_ops.h (never reached: no cuda:k tensor
// can be made).
#include <string>

#include "lockstep/core/error.h"
#include "ops/cuda_not_built.h"
#include "ops/cuda_conv_ops.h"

namespace lockstep::cuda_conv_ops {

using cuda_ops::not_built;

void conv2d_forward(const kernels::Conv2dGeom&, const Tensor&, const Tensor&, const Tensor&,
                    const Tensor&) {
  not_built("conv2d");
}
void conv2d_backward_input(const kernels::Conv2dGeom&, const Tensor&, const Tensor&,
                           const Tensor&) {
  not_built("conv2d backward");
}
void conv2d_backward_weight(const kernels::Conv2dGeom&, const Tensor&, const Tensor&, const Tensor&,
                            const Tensor&) {
  not_built("conv2d backward");
}

}  // namespace lockstep::cuda_conv_ops
