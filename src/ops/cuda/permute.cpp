// cuda_ops::permute (src/ops/cuda_ops.h): permute / transpose's copy as one strided-copy launch
// over the plan the CPU walks too (detail::permute_iter).
#include "ops/cuda/kernels.h"
#include "ops/cuda_ops.h"
#include "ops/strided_plan.h"

namespace lockstep::cuda_ops {

void permute(const Tensor& a, const std::vector<int>& dims, const Tensor& out) {
  if (out.numel() == 0) return;
  kernels::cuda::strided_copy(element_size(a.dtype()), out.device_raw_data(), 0,
                              a.device_raw_data(), 0, detail::permute_iter(a.shape(), dims),
                              out.numel(), kernels::cuda::on_device(a.device().index));
}

}  // namespace lockstep::cuda_ops
