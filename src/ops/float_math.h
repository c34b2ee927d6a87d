// Internal: exp and the normal CDF Φ in float32, written ONCE for the host and the GPU (plain
// C++17, __host__ __device__ under nvcc) as straight-line code with no library call and no
// branch (every operation is computed before the selects: GCC does not if-convert a floating
// operation that may trap), so that
//   - the CPU loops that call them (the exact GELU of src/ops/elementwise.cpp) vectorise: the
//     compiler turns the selects into blends, and each vector lane performs the scalar body's
//     operations in the scalar body's order (every operation rounds once: IEEE add/sub/mul/div,
//     no FMA contraction, since x86-64 without -march has no FMA instruction), so the vector
//     loop and this scalar body give the same bits;
//   - the CUDA kernels run the same expressions through optim::rules (round-to-nearest
//     intrinsics that nvcc never fuses into an FMA): the same bits on a GPU as on the CPU.
// float64 keeps the C library (device_ops.h).
//
// Sources of the formulas:
//   - exp_f: Cephes' expf (S. L. Moshier, Cephes Math Library 2.2, expf.c; the coefficients
//     also of sse_mathfun's exp_ps): x = n·ln2 + r with ln2 split in two (Cody–Waite), e^r by a
//     degree-7 polynomial, 2^n put into the exponent bits; n rounded to nearest by adding and
//     subtracting 1.5·2^23. Measured: ≤ 1 ulp over [−87, 0] (against double exp).
//   - erfc_large_f: Numerical Recipes in C, 2nd ed., §6.2, erfcc: erfc(a) = t·exp(−a² + P(t)),
//     t = 1/(1 + a/2), P of degree 9 (Chebyshev fit, relative error < 1.2e-7 for every a ≥ 0).
//   - erf_small_f: the Maclaurin series erf(z) = 2/√π Σ (−1)^k z^(2k+1) / (k!(2k+1))
//     (Abramowitz & Stegun 7.1.5) to k = 7, for |z| < 0.5 (the next term is < 2e-11 of it).
// Measured in float32 against the C library in double (tests/ops/float_math_test.cpp bounds
// them): erf within 2.9 ulp over [−6, 6] (0.7 near 0); Φ(x) within 1.9 ulp for x ≥ −0.7, 31 ulp
// (relative 4e-6) for x > −4 and 130 ulp down to −9, its tail computed as erfc/2 where 1 + erf
// would cancel. PyTorch's CPU GELU evaluates the Abramowitz & Stegun 7.1.26 erf (absolute error
// 1.5e-7; aten/src/ATen/cpu/vec/vec256/vec256_float.h), so the two GELUs differ by up to about
// 1.5e-7·|x|, within the goldens' tolerance.
#pragma once

#include <cstdint>
#include <cstring>

#include "lockstep/ops/detail/update_rules.h"

namespace lockstep::kernels::shared {

namespace fr = ::lockstep::optim::rules;

LOCKSTEP_HOST_DEVICE inline std::int32_t float_bits(float x) {
#if defined(__CUDA_ARCH__)
  return __float_as_int(x);
#else
  std::int32_t b;
  std::memcpy(&b, &x, sizeof b);
  return b;
#endif
}

LOCKSTEP_HOST_DEVICE inline float bits_float(std::int32_t b) {
#if defined(__CUDA_ARCH__)
  return __int_as_float(b);
#else
  float x;
  std::memcpy(&x, &b, sizeof x);
  return x;
#endif
}

/// e^x for x ≤ 88 (the callers pass x ≤ ~0); 0 for x < −87 (e^−87 ≈ 1.6e-38, near FLT_MIN:
/// no denormal results); NaN stays NaN.
LOCKSTEP_HOST_DEVICE inline float exp_f(float x) {
  constexpr float kLow = -87.0f, kShift = 12582912.0f;  // 1.5·2^23
  const float xc = x < kLow ? kLow : x;
  const float shifted = fr::add(fr::mul(xc, 1.44269504088896341f), kShift);
  const float n = fr::sub(shifted, kShift);  // round(x·log2 e), |n| ≤ 127
  float r = fr::sub(xc, fr::mul(n, 0.693359375f));  // n·C1 exact (C1 has 9 bits)
  r = fr::sub(r, fr::mul(n, -2.12194440e-4f));
  float p = 1.9875691500e-4f;
  p = fr::add(fr::mul(p, r), 1.3981999507e-3f);
  p = fr::add(fr::mul(p, r), 8.3334519073e-3f);
  p = fr::add(fr::mul(p, r), 4.1665795894e-2f);
  p = fr::add(fr::mul(p, r), 1.6666665459e-1f);
  p = fr::add(fr::mul(p, r), 5.0000001201e-1f);
  const float y = fr::add(fr::add(fr::mul(p, fr::mul(r, r)), r), 1.0f);
  // n as an integer; 2^n from its biased exponent (unsigned: a NaN's garbage must not overflow)
  const std::int32_t k = float_bits(shifted) - float_bits(kShift);
  const float scale = bits_float(static_cast<std::int32_t>(static_cast<std::uint32_t>(k + 127) << 23));
  const float e = fr::mul(y, scale);
  return x < kLow ? 0.0f : e;
}

/// erfc(a) for a ≥ 0 (Numerical Recipes' erfcc).
LOCKSTEP_HOST_DEVICE inline float erfc_large_f(float a) {
  const float t = fr::div(1.0f, fr::add(1.0f, fr::mul(0.5f, a)));
  float p = 0.17087277f;
  p = fr::add(fr::mul(p, t), -0.82215223f);
  p = fr::add(fr::mul(p, t), 1.48851587f);
  p = fr::add(fr::mul(p, t), -1.13520398f);
  p = fr::add(fr::mul(p, t), 0.27886807f);
  p = fr::add(fr::mul(p, t), -0.18628806f);
  p = fr::add(fr::mul(p, t), 0.09678418f);
  p = fr::add(fr::mul(p, t), 0.37409196f);
  p = fr::add(fr::mul(p, t), 1.00002368f);
  p = fr::add(fr::mul(p, t), -1.26551223f);
  return fr::mul(t, exp_f(fr::add(-fr::mul(a, a), p)));
}

/// erf(z) for |z| < 0.5 (the Maclaurin series to z^15; coefficients 2/√π·(−1)^k/(k!(2k+1)),
/// rounded to float), as z + z·(2/√π − 1 + …) (fdlibm's form: the leading coefficient's own
/// rounding no longer costs an ulp near 0).
LOCKSTEP_HOST_DEVICE inline float erf_small_f(float z) {
  const float s = fr::mul(z, z);
  float p = -1.49256502e-5f;                    // k = 7: −(2/√π)/75600
  p = fr::add(fr::mul(p, s), 1.20553326e-4f);    // k = 6: (2/√π)/9360
  p = fr::add(fr::mul(p, s), -8.54832702e-4f);   // k = 5
  p = fr::add(fr::mul(p, s), 5.22397785e-3f);    // k = 4
  p = fr::add(fr::mul(p, s), -2.68661715e-2f);   // k = 3
  p = fr::add(fr::mul(p, s), 1.12837918e-1f);    // k = 2
  p = fr::add(fr::mul(p, s), -3.76126379e-1f);   // k = 1
  p = fr::add(fr::mul(p, s), 1.28379166e-1f);   // k = 0: 2/√π − 1
  return fr::add(z, fr::mul(z, p));
}

/// erf(z) in float: the series below |z| = 0.5, 1 − erfc(|z|) with z's sign above.
LOCKSTEP_HOST_DEVICE inline float erf_f(float z) {
  const float a = z < 0.0f ? -z : z;
  const float small = erf_small_f(z), large = fr::sub(1.0f, erfc_large_f(a));
  return a < 0.5f ? small : (z < 0.0f ? -large : large);
}

/// Φ(x) = (1 + erf(x/√2))/2 in float; for x/√2 ≤ −0.5 as erfc(|x|/√2)/2, which keeps its
/// relative accuracy in the tail where 1 + erf cancels.
LOCKSTEP_HOST_DEVICE inline float normal_cdf_f(float x) {
  const float z = fr::mul(x, 0.70710678118654752f);
  const float a = z < 0.0f ? -z : z;
  const float half_erfc = fr::mul(0.5f, erfc_large_f(a));
  const float small = fr::add(0.5f, fr::mul(0.5f, erf_small_f(z)));
  const float upper = fr::sub(1.0f, half_erfc);
  return a < 0.5f ? small : (z < 0.0f ? half_erfc : upper);
}

}  // namespace lockstep::kernels::shared
