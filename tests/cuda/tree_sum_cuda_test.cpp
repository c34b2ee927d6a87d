// Deterministic mode's tree on a GPU (kernels::cuda::tree_sum_rows and cuda_ops::tree_sum_rows)
// against the CPU's parallel::detail::tree_sum_columns, bit for bit: float and double random data,
// 1 to 17 rows, widths 0, 1 and odd ones (some wider than one block of threads). The whole buffer
// is compared, partial sums in rows 1.. included. The schedule itself is pinned without a GPU in
// tests/parallel/tree_sum_test.cpp. Needs a GPU (skips with the reason otherwise).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "cuda/cuda_test_util.h"
#include "lockstep/lockstep.h"
#include "ops/cuda/kernels.h"
#include "ops/cuda_ops.h"
#include "lockstep/ops/detail/tree_sum.h"

namespace lockstep::testing {
namespace {

namespace kc = lockstep::kernels::cuda;

const std::vector<std::int64_t> kWidths = {0, 1, 3, 31, 257, 1001};

// Values spread over many magnitudes and both signs, so the association shows in the bits.
template <class T>
std::vector<T> spread(std::size_t n, unsigned seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<double> mantissa(-1.0, 1.0);
  std::uniform_int_distribution<int> exponent(-20, 20);
  std::vector<T> v(n);
  for (auto& x : v) x = static_cast<T>(std::ldexp(mantissa(gen), exponent(gen)));
  return v;
}

template <class T>
bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

template <class T>
void check_kernel(const char* type) {
  const auto exec = kc::on_device(0);
  unsigned seed = 11;
  int cases = 0;
  for (std::int64_t rows = 1; rows <= 17; ++rows)
    for (std::int64_t width : kWidths) {
      const std::vector<T> host = spread<T>(static_cast<std::size_t>(rows * width), seed++);
      std::vector<T> expect = host;
      parallel::detail::tree_sum_columns(expect.data(), rows, width, 0, width);
      std::vector<T> got = host;
      if (!host.empty()) {
        DeviceArray<T> d(host);
        kc::tree_sum_rows<T>(d.get(), rows, width, exec);
        got = d.to_host();
      }
      EXPECT_TRUE(same_bits(got, expect)) << type << " rows=" << rows << " width=" << width;
      ++cases;
    }
  EXPECT_EQ(cases, 17 * static_cast<int>(kWidths.size()));
}

TEST(CudaTreeSum, KernelEqualsTheCpuTreeFloat) {
  LOCKSTEP_REQUIRE_CUDA();
  check_kernel<float>("float");
}

TEST(CudaTreeSum, KernelEqualsTheCpuTreeDouble) {
  LOCKSTEP_REQUIRE_CUDA();
  check_kernel<double>("double");
}

// Through the tensor entry point DataParallel calls (a [rows, width] buffer on cuda:0), and
// twice the same bits.
TEST(CudaTreeSum, TensorEntryPointEqualsTheCpuTree) {
  LOCKSTEP_REQUIRE_CUDA();
  const std::int64_t rows = 13, width = 77;
  const std::vector<float> host = spread<float>(static_cast<std::size_t>(rows * width), 5);
  std::vector<float> expect = host;
  parallel::detail::tree_sum_columns(expect.data(), rows, width, 0, width);
  for (int run = 0; run < 2; ++run) {
    Tensor slots =
        tensor(std::span<const float>(host)).reshape({rows, width}).to(Device(DeviceType::CUDA, 0));
    cuda_ops::tree_sum_rows(slots);
    EXPECT_TRUE(same_bits(slots.to(cpu()).to_vector<float>(), expect)) << "run " << run;
  }
}

}  // namespace
}  // namespace lockstep::testing
