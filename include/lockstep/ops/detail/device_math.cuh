// Internal to the .cu files of src/ops/cuda/ (and update_rules.h beside it, under nvcc):
// round-to-nearest arithmetic that nvcc never fuses into an FMA (it contracts a * b + c by
// default), so each operation rounds as the CPU loop's separate operations do; and the launch
// shape shared by the grid-stride kernels.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

namespace lockstep::kernels::cuda::detail {

__device__ inline float add_rn(float a, float b) { return __fadd_rn(a, b); }
__device__ inline double add_rn(double a, double b) { return __dadd_rn(a, b); }
__device__ inline float sub_rn(float a, float b) { return __fsub_rn(a, b); }
__device__ inline double sub_rn(double a, double b) { return __dsub_rn(a, b); }
__device__ inline float mul_rn(float a, float b) { return __fmul_rn(a, b); }
__device__ inline double mul_rn(double a, double b) { return __dmul_rn(a, b); }
__device__ inline float div_rn(float a, float b) { return __fdiv_rn(a, b); }
__device__ inline double div_rn(double a, double b) { return __ddiv_rn(a, b); }
__device__ inline float sqrt_rn(float a) { return __fsqrt_rn(a); }
__device__ inline double sqrt_rn(double a) { return __dsqrt_rn(a); }

/// a op b for a floating T, each op rounded to nearest (the CPU loop's binary ops). Op is
/// kernels::cuda::Binary (a template parameter: kernels.h is not included here).
template <class Op, class T>
__device__ inline T binary_rn(Op op, T a, T b) {
  switch (op) {
    case Op::Add:
      return add_rn(a, b);
    case Op::Sub:
      return sub_rn(a, b);
    case Op::Mul:
      return mul_rn(a, b);
    case Op::Div:
      return div_rn(a, b);
  }
  return a;
}

constexpr int kThreads = 256;

/// Blocks for a grid-stride loop over n items (the grid is capped; every item is still visited).
inline unsigned blocks_for(std::int64_t n) {
  return static_cast<unsigned>(std::min<std::int64_t>((n + kThreads - 1) / kThreads, 65535 * 8));
}

}  // namespace lockstep::kernels::cuda::detail
