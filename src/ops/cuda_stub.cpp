// src/ops/cuda_ops.h in a build without CUDA (LOCKSTEP_CUDA=OFF). No cuda:k tensor can be made
// in such a build (check_device_available refuses it), so the op layer never calls these; should
// one be reached anyway, it throws DeviceError instead of touching memory.
#include "lockstep/core/error.h"
#include "ops/cuda_not_built.h"
#include "ops/cuda_ops.h"

namespace lockstep::cuda_ops {

void copy(const Tensor&, const Tensor&) { not_built("copy"); }
void fill(const Tensor&, double) { not_built("fill"); }
void binary(kernels::BinaryOp, const Tensor&, const Tensor&, const Tensor&) { not_built("binary"); }
void add_(const Tensor&, const Tensor&, double) { not_built("add_"); }
void mul_(const Tensor&, double) { not_built("mul_"); }
void neg(const Tensor&, const Tensor&) { not_built("neg"); }
void relu(const Tensor&, const Tensor&) { not_built("relu"); }
void relu_backward(const Tensor&, const Tensor&, const Tensor&) { not_built("relu_backward"); }
void tanh(const Tensor&, const Tensor&) { not_built("tanh"); }
void tanh_backward(const Tensor&, const Tensor&, const Tensor&) { not_built("tanh_backward"); }
void sum_all(const Tensor&, double, const Tensor&) { not_built("sum"); }
void bias_grad(const Tensor&, const Tensor&) { not_built("bias_grad"); }
void tree_sum_rows(const Tensor&) { not_built("tree_sum_rows"); }
void gemm2d(const Tensor&, bool, const Tensor&, bool, const Tensor&, bool) { not_built("gemm"); }
void gemm_batched(const Tensor&, bool, std::int64_t, const Tensor&, bool, std::int64_t,
                  std::int64_t, std::int64_t, std::int64_t, std::int64_t, const Tensor&) {
  not_built("matmul");
}
void linear(const Tensor&, const Tensor&, const Tensor&, const Tensor&, std::int64_t, std::int64_t,
            std::int64_t, bool) {
  not_built("linear");
}
void round_to_bfloat16(const Tensor&, const Tensor&) { not_built("round_to_bfloat16"); }
void cross_entropy_forward(const Tensor&, const Tensor&, std::int64_t, const Tensor&, const Tensor&,
                           const Tensor&) {
  not_built("cross_entropy");
}
CrossEntropyStats cross_entropy_stats(const Tensor&) { not_built("cross_entropy"); }
void cross_entropy_backward(const Tensor&, const Tensor&, std::int64_t, const Tensor&,
                            const Tensor&, const Tensor&) {
  not_built("cross_entropy_backward");
}
int sgd_step(const Tensor&, const Tensor&, const Tensor&, bool, double, double, double, double,
             bool) {
  not_built("sgd_step");
}
int adam_step(const Tensor&, const Tensor&, const Tensor&, const Tensor&, double, double, double,
              double, double, double, bool) {
  not_built("adam_step");
}
int sgd_flat_step(const Tensor&, const Tensor&, const Tensor&,
                  const std::vector<FlatUpdateSegment>&, double, double, double, double, bool,
                  FlatMode, FlatGraphTable*) {
  not_built("sgd_flat_step");
}
int adam_flat_step(const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                   const std::vector<FlatUpdateSegment>&, double, double, double, double, double,
                   bool, FlatMode, FlatGraphTable*) {
  not_built("adam_flat_step");
}

void math(MathOp, const Tensor&, const Tensor&, double) { not_built("math"); }
void math_backward(MathOp, const Tensor&, const Tensor&, const Tensor&, double) {
  not_built("math_backward");
}
void compare(kernels::shared::Compare, const Tensor&, const Tensor&, const Tensor&) {
  not_built("compare");
}
void binary_broadcast(kernels::BinaryOp, const Tensor&, const Tensor&, const Tensor&) {
  not_built("binary_broadcast");
}
void sum_to(const Tensor&, const Tensor&) { not_built("sum_to"); }
void softmax(const Tensor&, int, bool, const Tensor&) { not_built("softmax"); }
void max_dim(const Tensor&, int, const Tensor&, const Tensor&) { not_built("max"); }
void max_dim_backward(const Tensor&, const Tensor&, int, const Tensor&) {
  not_built("max_backward");
}
void max_all(const Tensor&, bool, const Tensor&, const Tensor&) { not_built("max"); }
void max_all_backward(const Tensor&, const Tensor&, const Tensor&, const Tensor&) {
  not_built("max_backward");
}
void transpose2d(const Tensor&, const Tensor&) { not_built("t"); }
void permute(const Tensor&, const std::vector<int>&, const Tensor&) { not_built("permute"); }
void slice_out(const Tensor&, int, std::int64_t, const Tensor&) { not_built("narrow"); }
void slice_in(const Tensor&, int, std::int64_t, const Tensor&) { not_built("cat"); }
void index_select(const Tensor&, int, const Tensor&, const Tensor&) { not_built("index_select"); }
void index_select_backward(const Tensor&, int, const Tensor&, const Tensor&) {
  not_built("index_select_backward");
}
void dropout_mask_keyed(const Tensor&, std::int64_t, std::int64_t, std::uint64_t, std::uint64_t,
                        std::uint32_t, std::int64_t, double, double) {
  not_built("dropout");
}
void dropout_mask_stream(const Tensor&, std::uint64_t, std::uint64_t, double, double) {
  not_built("dropout");
}

}  // namespace lockstep::cuda_ops
