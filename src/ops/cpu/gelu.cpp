// The exact GELU's float32 CPU loops: the shared bodies of src/ops/device_ops.h (on
// float_math.h's straight-line exp and Φ) over a contiguous range, compiled three times — for the
// x86-64 baseline (SSE2, 4 lanes), AVX2 (8 lanes) and AVX-512F (16 lanes) — and picked by the
// CPU at run time, as small_gemm.h's kernels are. Each lane performs the scalar body's operations
// in its order, each rounded once (this file is compiled with -ffp-contract=off: the avx512f
// target enables FMA instructions, which GCC would otherwise contract a·b + c into): the same
// bits as the scalar body, which the CUDA kernel runs too (tests/ops/device_ops_test.cpp).
#include "ops/device_ops.h"
#include "ops/kernels.h"

namespace lockstep::kernels::cpu {

namespace {

namespace sh = kernels::shared;

[[gnu::always_inline]] inline void forward(const float* x, float* y, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) y[i] = sh::gelu_fwd(x[i]);
}
[[gnu::always_inline]] inline void backward(const float* g, const float* x, float* gi,
                                            std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) gi[i] = sh::gelu_bwd(g[i], x[i]);
}

void forward_sse2(const float* x, float* y, std::int64_t n) { forward(x, y, n); }
void backward_sse2(const float* g, const float* x, float* gi, std::int64_t n) {
  backward(g, x, gi, n);
}
[[gnu::target("avx2")]] void forward_avx2(const float* x, float* y, std::int64_t n) {
  forward(x, y, n);
}
[[gnu::target("avx2")]] void backward_avx2(const float* g, const float* x, float* gi,
                                           std::int64_t n) {
  backward(g, x, gi, n);
}

[[gnu::target("avx512f")]] void forward_avx512(const float* x, float* y, std::int64_t n) {
  forward(x, y, n);
}
[[gnu::target("avx512f")]] void backward_avx512(const float* g, const float* x, float* gi,
                                                std::int64_t n) {
  backward(g, x, gi, n);
}

enum class Isa { Sse2, Avx2, Avx512 };
Isa isa() {
  static const Isa best = __builtin_cpu_supports("avx512f") ? Isa::Avx512
                          : __builtin_cpu_supports("avx2") ? Isa::Avx2
                                                           : Isa::Sse2;
  return best;
}

}  // namespace

void gelu_f32(const float* x, float* y, std::int64_t n) {
  const Isa i = isa();
  i == Isa::Avx512 ? forward_avx512(x, y, n)
  : i == Isa::Avx2 ? forward_avx2(x, y, n)
                   : forward_sse2(x, y, n);
}

void gelu_backward_f32(const float* g, const float* x, float* gi, std::int64_t n) {
  const Isa i = isa();
  i == Isa::Avx512 ? backward_avx512(g, x, gi, n)
  : i == Isa::Avx2 ? backward_avx2(g, x, gi, n)
                   : backward_sse2(g, x, gi, n);
}

}  // namespace lockstep::kernels::cpu
