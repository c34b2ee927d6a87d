// Shared helpers of the CUDA tests: skip without a device, device buffers, host comparisons.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "lockstep/cuda/allocator.h"
#include "lockstep/cuda/runtime.h"

namespace lockstep::testing {

/// First statement of every CUDA test: skips it, with the reason, where no device is usable.
#define LOCKSTEP_REQUIRE_CUDA()                                                     \
  do {                                                                              \
    if (::lockstep::cuda::device_count() == 0)                                      \
      GTEST_SKIP() << "no CUDA device: " << ::lockstep::cuda::unavailable_reason(); \
  } while (0)

/// A device copy of a host vector on cuda:0 (the caching allocator), and back.
template <class T>
struct DeviceArray {
  cuda::DeviceBuffer buffer;
  std::size_t count = 0;
  DeviceArray() = default;
  explicit DeviceArray(const std::vector<T>& host, int device = 0)
      : buffer(host.size() * sizeof(T), device), count(host.size()) {
    cuda::copy_to_device(buffer.data(), host.data(), host.size() * sizeof(T), device);
  }
  T* get() const { return buffer.data_as<T>(); }
  std::vector<T> to_host() const {
    std::vector<T> out(count);
    cuda::copy_to_host(out.data(), buffer.data(), count * sizeof(T), buffer.device());
    return out;
  }
};

/// |a − b| ≤ 1e-4 + 1e-4·|b| elementwise (b is the reference); NaN only where b is NaN, an
/// infinity only where b is the same infinity.
template <class T>
::testing::AssertionResult close(const std::vector<T>& a, const std::vector<T>& b,
                                 double atol = 1e-4, double rtol = 1e-4) {
  if (a.size() != b.size())
    return ::testing::AssertionFailure() << "sizes " << a.size() << " vs " << b.size();
  for (std::size_t i = 0; i < a.size(); ++i) {
    const double x = a[i], y = b[i];
    if (std::isnan(y) && std::isnan(x)) continue;
    if (x == y) continue;  // equal infinities (their difference is NaN)
    if (!(std::fabs(x - y) <= atol + rtol * std::fabs(y)))
      return ::testing::AssertionFailure()
             << "element " << i << ": cuda " << x << " vs reference " << y;
  }
  return ::testing::AssertionSuccess();
}

inline std::vector<float> random_floats(std::size_t n, unsigned seed, float lo = -2.f,
                                        float hi = 2.f) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(gen);
  return v;
}

}  // namespace lockstep::testing
