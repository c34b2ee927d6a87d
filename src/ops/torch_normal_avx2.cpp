// normal_fill_16_AVX2 (PyTorch, aten/src/ATen/native/cpu/DistributionTemplates.h) with the
// log256_ps and sincos256_ps of aten/src/ATen/native/cpu/avx_mathfun.h (Giovanni Garberoglio's
// AVX port of Julien Pommier's sse_mathfun, after Cephes), written lane by lane in scalar C++:
// every vector instruction becomes the same IEEE float operation on one lane, so the bits are
// the AVX2 kernel's on any CPU. PyTorch's wheels are built by GCC, which contracts a vector
// multiply whose only use is an add or subtract into an FMA (-ffp-contract=fast; _mm256_mul_ps
// and _mm256_add_ps are plain vector arithmetic to it): every such pair is std::fma here, as is
// the explicit _mm256_fmadd_ps, and this file is compiled with -ffp-contract=off (CMakeLists.txt)
// so that nothing else is fused. Checked against torch 2.15's randn of 200,000 floats: no bit
// differs (without the contractions about 1% of the values differ by an ulp).
#include <bit>
#include <cmath>
#include <cstdint>

#include "ops/torch_random.h"

namespace lockstep::torch_random {

namespace {

float from_bits(std::uint32_t u) { return std::bit_cast<float>(u); }
std::uint32_t bits(float f) { return std::bit_cast<std::uint32_t>(f); }
// _mm256_cvttps_epi32: truncation; out of range and NaN give INT32_MIN.
std::int32_t cvtt(float f) {
  if (!(f > -2147483648.0f && f < 2147483648.0f)) return INT32_MIN;
  return static_cast<std::int32_t>(f);
}

// log256_ps: Cephes logf; NaN for x <= 0.
float log_ps(float x) {
  const bool invalid = x <= 0.0f;
  x = x > from_bits(0x00800000u) ? x : from_bits(0x00800000u);  // _mm256_max_ps(x, min_norm_pos)
  auto imm0 = static_cast<std::int32_t>(bits(x) >> 23);
  x = from_bits((bits(x) & ~0x7f800000u) | bits(0.5f));
  imm0 -= 0x7f;
  float e = static_cast<float>(imm0);
  e = e + 1.0f;
  const bool mask = x < static_cast<float>(0.707106781186547524);
  const float tmp0 = mask ? x : 0.0f;
  x = x - 1.0f;
  e = e - (mask ? 1.0f : 0.0f);
  x = x + tmp0;
  const float z = x * x;
  static constexpr double kP[9] = {7.0376836292E-2,  -1.1514610310E-1, 1.1676998740E-1,
                                   -1.2420140846E-1, +1.4249322787E-1, -1.6668057665E-1,
                                   +2.0000714765E-1, -2.4999993993E-1, +3.3333331174E-1};
  float y = static_cast<float>(kP[0]);
  for (int k = 1; k < 9; ++k) y = std::fma(y, x, static_cast<float>(kP[k]));
  y = y * x;
  y = std::fma(y, z, e * static_cast<float>(-2.12194440e-4));
  y = std::fma(-z, 0.5f, y);
  x = std::fma(e, static_cast<float>(0.693359375), x + y);
  return invalid ? from_bits(bits(x) | 0xffffffffu) : x;
}

// sincos256_ps: Cephes sinf/cosf with the extended-precision reduction by π/4.
void sincos_ps(float x, float* s, float* c) {
  std::uint32_t sign_bit_sin = bits(x) & 0x80000000u;
  x = from_bits(bits(x) & 0x7fffffffu);
  float y = x * static_cast<float>(1.27323954473516);
  std::int32_t imm2 = cvtt(y);
  imm2 = static_cast<std::int32_t>(static_cast<std::uint32_t>(imm2) + 1u) & ~1;
  y = static_cast<float>(imm2);
  std::int32_t imm4 = imm2;
  const std::uint32_t swap_sign_bit_sin = (static_cast<std::uint32_t>(imm2) & 4u) << 29;
  const std::uint32_t poly_mask = (imm2 & 2) == 0 ? 0xffffffffu : 0u;
  x = std::fma(y, static_cast<float>(-0.78515625), x);
  x = std::fma(y, static_cast<float>(-2.4187564849853515625e-4), x);
  x = std::fma(y, static_cast<float>(-3.77489497744594108e-8), x);
  imm4 = static_cast<std::int32_t>(static_cast<std::uint32_t>(imm4) - 2u);
  const std::uint32_t sign_bit_cos = (~static_cast<std::uint32_t>(imm4) & 4u) << 29;
  sign_bit_sin ^= swap_sign_bit_sin;

  const float z = x * x;
  float yc = std::fma(static_cast<float>(2.443315711809948E-005), z,
                      static_cast<float>(-1.388731625493765E-003));
  yc = std::fma(yc, z, static_cast<float>(4.166664568298827E-002));
  yc = yc * z;
  yc = std::fma(yc, z, -(z * 0.5f));
  yc = yc + 1.0f;

  float ys = std::fma(static_cast<float>(-1.9515295891E-4), z, static_cast<float>(8.3321608736E-3));
  ys = std::fma(ys, z, static_cast<float>(-1.6666654611E-1));
  ys = ys * z;
  ys = std::fma(ys, x, x);

  const float ysin2 = from_bits(poly_mask & bits(ys));
  const float ysin1 = from_bits(~poly_mask & bits(yc));
  ys = ys - ysin2;
  yc = yc - ysin1;
  *s = from_bits(bits(ysin1 + ysin2) ^ sign_bit_sin);
  *c = from_bits(bits(yc + ys) ^ sign_bit_cos);
}

}  // namespace

void normal_fill_16_avx2(float* data, float mean, float std) {
  const auto two_pi = static_cast<float>(2.0f * 3.14159265358979323846);  // c10::pi<double>
  for (int j = 0; j < 8; ++j) {
    const float u1 = 1.0f - data[j];
    const float u2 = data[j + 8];
    const float radius = std::sqrt(-2.0f * log_ps(u1));
    const float theta = two_pi * u2;
    float sintheta, costheta;
    sincos_ps(theta, &sintheta, &costheta);
    data[j] = std::fma(radius * costheta, std, mean);
    data[j + 8] = std::fma(radius * sintheta, std, mean);
  }
}

}  // namespace lockstep::torch_random
