// Internal: PyTorch's CPU samplers over an MT19937 Generator (the caller holds its lock), each
// the formula of the PyTorch file named beside it. Pointers are contiguous arrays of n elements.
// The bits match torch on CPUs where torch dispatches its distribution kernels to AVX2 or AVX-512
// (torch.backends.cpu.get_cpu_capability() "AVX2" / "AVX512": the kernels are compiled with FMA
// contraction, reproduced here with std::fma; normal_ is never dispatched to AVX-512, see
// DistributionKernels.cpp, so float32 normal_ of >= 16 elements takes normal_fill_AVX2).
#pragma once

#include <cstdint>

#include "lockstep/core/generator.h"

namespace lockstep::torch_random {

/// uniform_real_distribution<T>(from, to) (DistributionsHelper.h) with TransformationHelper.h's
/// uniform_real: float takes 24 bits of random(), double 53 of random64();
/// x · (to − from) + from as one fused multiply-add.
float uniform_real(Generator& g, float from, float to);
double uniform_real(Generator& g, double from, double to);

/// normal_distribution<double>(mean, std) (DistributionsHelper.h): Box-Muller on two doubles,
/// r·sin(θ) cached in g.next_double_normal() for the next call; val · std + mean fused.
double normal_double(Generator& g, double mean, double std);

/// uniform_kernel (native/cpu/DistributionTemplates.h): element by element.
void uniform_fill(float* p, std::int64_t n, double from, double to, Generator& g);
void uniform_fill(double* p, std::int64_t n, double from, double to, Generator& g);

/// normal_kernel (native/cpu/DistributionTemplates.h): n >= 16 fills n uniforms, transforms
/// blocks of 16 (8 cosines then 8 sines) and redraws and redoes the last 16 when n % 16 != 0;
/// float takes normal_fill_16_AVX2 (torch_normal_avx2.cpp), double normal_fill_16 with libm;
/// n < 16 draws normal_double per element (cast to float for float32).
void normal_fill(float* p, std::int64_t n, double mean, double std, Generator& g);
void normal_fill(double* p, std::int64_t n, double mean, double std, Generator& g);

/// normal_fill_16_AVX2 (native/cpu/DistributionTemplates.h) lane by lane with avx_mathfun.h's
/// log256_ps and sincos256_ps: data[0..16) uniforms in [0, 1) become 16 normals.
void normal_fill_16_avx2(float* data, float mean, float std);

/// uniform_int_from_to_distribution (DistributionsHelper.h): random() % range + base, or
/// random64() when range >= 2^28 (the threshold of PyTorch's public builds, any dtype).
std::int64_t random_from_to(Generator& g, std::uint64_t range, std::int64_t base);

/// uniform_int_distribution (random_() without bounds), as a double for float dtypes:
/// int64 random64() % 2^63; float random() % (2^24 + 1); double random64() % (2^53 + 1).
std::int64_t random_int64(Generator& g);
double random_float(Generator& g, bool single);

/// bernoulli_distribution<double>(p) (bernoulli_scalar_kernel_default): uniform double < p.
bool bernoulli(Generator& g, double p);

/// randperm_cpu (native/TensorFactories.cpp): 0..n−1, then for i < n − 1 swap i with
/// i + random() % (n − i) (n below 2^32 / 20; larger n: the inside-out shuffle on random64()).
void randperm(std::int64_t* p, std::int64_t n, Generator& g);

}  // namespace lockstep::torch_random
