// PyTorch's CPU samplers over an MT19937 Generator (src/ops/torch_random.h says which PyTorch
// file each formula comes from). Compiled with -ffp-contract=off (CMakeLists.txt): the fused
// multiply-adds torch's AVX2/AVX-512 builds contract are written out as std::fma, and nothing
// else may be fused.
#include "ops/torch_random.h"

#include <cmath>
#include <limits>
#include <numbers>
#include <utility>

namespace lockstep::torch_random {

float uniform_real(Generator& g, float from, float to) {
  const float x = static_cast<float>(g.next_u32() & ((1u << 24) - 1)) * (1.0f / (1u << 24));
  return std::fma(x, to - from, from);
}

double uniform_real(Generator& g, double from, double to) {
  const double x = static_cast<double>(g.next_u64() & ((std::uint64_t{1} << 53) - 1)) *
                   (1.0 / static_cast<double>(std::uint64_t{1} << 53));
  return std::fma(x, to - from, from);
}

double normal_double(Generator& g, double mean, double std) {
  if (auto& cached = g.next_double_normal(); cached) {
    const double v = *cached;
    cached.reset();
    return std::fma(v, std, mean);
  }
  const double u1 = uniform_real(g, 0.0, 1.0);
  const double u2 = uniform_real(g, 0.0, 1.0);
  const double r = std::sqrt(-2.0 * std::log1p(-u2));
  const double theta = 2.0 * std::numbers::pi * u1;
  g.next_double_normal() = r * std::sin(theta);
  return std::fma(r * std::cos(theta), std, mean);
}

void uniform_fill(float* p, std::int64_t n, double from, double to, Generator& g) {
  const auto f = static_cast<float>(from), t = static_cast<float>(to);
  for (std::int64_t i = 0; i < n; ++i) p[i] = uniform_real(g, f, t);
}

void uniform_fill(double* p, std::int64_t n, double from, double to, Generator& g) {
  for (std::int64_t i = 0; i < n; ++i) p[i] = uniform_real(g, from, to);
}

namespace {

// normal_fill_16<double>: 8 cosines into data[0..8), 8 sines into data[8..16).
void normal_fill_16(double* data, double mean, double std) {
  for (int j = 0; j < 8; ++j) {
    const double u1 = 1 - data[j];
    const double u2 = data[j + 8];
    const double radius = std::sqrt(-2 * std::log(u1));
    const double theta = 2.0f * std::numbers::pi * u2;
    data[j] = std::fma(radius * std::cos(theta), std, mean);
    data[j + 8] = std::fma(radius * std::sin(theta), std, mean);
  }
}

// normal_fill / normal_fill_AVX2: uniforms for all n, blocks of 16, the last 16 redrawn.
template <class T, class Block>
void normal_fill_blocks(T* p, std::int64_t n, T mean, T std, Generator& g, Block block) {
  for (std::int64_t i = 0; i < n; ++i) p[i] = uniform_real(g, T(0), T(1));
  for (std::int64_t i = 0; i + 16 <= n; i += 16) block(p + i, mean, std);
  if (n % 16 != 0) {
    T* tail = p + n - 16;
    for (int i = 0; i < 16; ++i) tail[i] = uniform_real(g, T(0), T(1));
    block(tail, mean, std);
  }
}

}  // namespace

void normal_fill(float* p, std::int64_t n, double mean, double std, Generator& g) {
  if (n >= 16)
    return normal_fill_blocks(p, n, static_cast<float>(mean), static_cast<float>(std), g,
                              normal_fill_16_avx2);
  for (std::int64_t i = 0; i < n; ++i) p[i] = static_cast<float>(normal_double(g, mean, std));
}

void normal_fill(double* p, std::int64_t n, double mean, double std, Generator& g) {
  if (n >= 16) return normal_fill_blocks(p, n, mean, std, g, normal_fill_16);
  for (std::int64_t i = 0; i < n; ++i) p[i] = normal_double(g, mean, std);
}

std::int64_t random_from_to(Generator& g, std::uint64_t range, std::int64_t base) {
  // Public builds draw 64 bits from range 2^28 on ("allow approx 5% skew"); FBCODE_CAFFE2
  // builds from 2^32 for int64/float/double only.
  const std::uint64_t v = range >= (std::uint64_t{1} << 28) ? g.next_u64() : g.next_u32();
  return static_cast<std::int64_t>(v % range + static_cast<std::uint64_t>(base));
}

std::int64_t random_int64(Generator& g) {
  return static_cast<std::int64_t>(g.next_u64() % (std::uint64_t{1} << 63));
}

double random_float(Generator& g, bool single) {
  if (single) return static_cast<double>(g.next_u32() % ((std::uint64_t{1} << 24) + 1));
  return static_cast<double>(g.next_u64() % ((std::uint64_t{1} << 53) + 1));
}

bool bernoulli(Generator& g, double p) { return uniform_real(g, 0.0, 1.0) < p; }

void randperm(std::int64_t* p, std::int64_t n, Generator& g) {
  if (n < static_cast<std::int64_t>(std::numeric_limits<std::uint32_t>::max() / 20)) {
    for (std::int64_t i = 0; i < n; ++i) p[i] = i;
    for (std::int64_t i = 0; i < n - 1; ++i) {
      const auto z = static_cast<std::int64_t>(g.next_u32() % static_cast<std::uint64_t>(n - i));
      std::swap(p[i], p[z + i]);
    }
    return;
  }
  for (std::int64_t i = 0; i < n; ++i) {
    const auto z = static_cast<std::int64_t>(g.next_u64() % static_cast<std::uint64_t>(i + 1));
    p[i] = p[z];
    p[z] = i;
  }
}

}  // namespace lockstep::torch_random
