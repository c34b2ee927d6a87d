// Without LOCKSTEP_CUDA: stand-ins for src/ops/cuda_attention_ops.h (never reached: no cuda:k
// tensor can be made). Each throws DeviceError naming the op, as src/ops/cuda_stub.cpp.
#include "ops/cuda_attention_ops.h"
#include "ops/cuda_not_built.h"

namespace lockstep::cuda_attention {

template <class T>
void attention_forward(const AttnArgs<T>&, int) {
  cuda_ops::not_built("scaled_dot_product_attention");
}
template <class T>
void attention_backward(const AttnArgs<T>&, int) {
  cuda_ops::not_built("scaled_dot_product_attention backward");
}

template void attention_forward<float>(const AttnArgs<float>&, int);
template void attention_forward<double>(const AttnArgs<double>&, int);
template void attention_backward<float>(const AttnArgs<float>&, int);
template void attention_backward<double>(const AttnArgs<double>&, int);

}  // namespace lockstep::cuda_attention
