// The NCCL group's started collectives and bfloat16 wire format (include/lockstep/dist/nccl.h).
// One GPU: groups of size 1, where every started collective must give the blocking call's bits
// and the bfloat16 all-reduce is exactly the rounding of each value (one rank: nothing to add).
// Two GPUs or more (compiled only until such a machine runs them): the bfloat16 all-reduce is
// allclose to the base class's emulation (NCCL rounds at every hop).
#include <gtest/gtest.h>

#include <span>
#include <thread>
#include <vector>

#include "cuda/cuda_test_util.h"
#include "lockstep/lockstep.h"
#include "support/helpers.h"

namespace lockstep::testing {
namespace {

Device gpu_k(int k) { return Device(DeviceType::CUDA, k); }
Tensor to_gpu(const std::vector<float>& v, int k = 0) {
  return tensor(std::span<const float>(v)).to(gpu_k(k));
}
float bf16(float x) { return dist::from_bfloat16_bits(dist::to_bfloat16_bits(x)); }

TEST(NcclAsync, SizeOneMatchesBlocking) {
  LOCKSTEP_REQUIRE_CUDA();
  auto g = dist::new_nccl_group({gpu_k(0)})[0];
  const std::vector<float> v = random_floats(1001, 3);
  Tensor a = to_gpu(v) * 3.0, b = to_gpu(v) * 3.0;  // produced by kernels on the compute stream
  auto w = g->all_reduce_async(a);
  g->all_reduce(b);
  w->wait();
  EXPECT_EQ(a.to(cpu()).to_vector<float>(), b.to(cpu()).to_vector<float>());
  EXPECT_TRUE(w->is_completed());  // the copy to the host waited for the compute stream

  Tensor r = to_gpu(v);
  g->reduce_async(r, 0)->wait();
  EXPECT_EQ(r.to(cpu()).to_vector<float>(), v);
  std::vector<Tensor> outs{to_gpu(std::vector<float>(v.size(), 0.f))};
  g->all_gather_async(outs, to_gpu(v))->wait();
  EXPECT_EQ(outs[0].to(cpu()).to_vector<float>(), v);
  Tensor out = to_gpu(std::vector<float>(v.size(), 0.f));
  g->reduce_scatter_async(out, {to_gpu(v)})->wait();
  EXPECT_EQ(out.to(cpu()).to_vector<float>(), v);
}

TEST(NcclAsync, SizeOneBFloat16RoundsEachValue) {
  LOCKSTEP_REQUIRE_CUDA();
  auto g = dist::new_nccl_group({gpu_k(0)})[0];
  std::vector<float> v = random_floats(4097, 5, -300.f, 300.f);
  v.push_back(1.00390625f);  // halfway between two bfloat16 values: ties to even (1.0)
  std::vector<float> want;
  for (float x : v) want.push_back(bf16(x));
  ASSERT_NE(want, v);
  Tensor a = to_gpu(v), b = to_gpu(v);
  auto wa = g->all_reduce_async(a, dist::ReduceOp::Sum, dist::WireFormat::BFloat16);
  auto wb = g->reduce_async(b, 0, dist::ReduceOp::Sum, dist::WireFormat::BFloat16);
  wa->wait();
  wb->wait();
  EXPECT_EQ(a.to(cpu()).to_vector<float>(), want);
  EXPECT_EQ(b.to(cpu()).to_vector<float>(), want);
  Tensor d = tensor(std::span<const double>(std::vector<double>{1.0, 2.0})).to(gpu_k(0));
  auto wd = g->all_reduce_async(d, dist::ReduceOp::Sum, dist::WireFormat::BFloat16);
  expect_error<DTypeError>([&] { wd->wait(); }, {"bfloat16", "float64"});
}

TEST(NcclAsync, SeveralGpusBFloat16IsCloseToTheEmulation) {
  LOCKSTEP_REQUIRE_CUDA();
  const int n = cuda::device_count();
  if (n < 2) GTEST_SKIP() << "needs two GPUs, found " << n;
  std::vector<Device> devices;
  for (int k = 0; k < n; ++k) devices.push_back(gpu_k(k));
  auto groups = dist::new_nccl_group(devices);
  const std::int64_t numel = 100003;
  std::vector<std::vector<float>> data;
  for (int k = 0; k < n; ++k) data.push_back(random_floats(numel, 11 + k));
  std::vector<float> want(numel);
  for (std::int64_t i = 0; i < numel; ++i) {
    float acc = bf16(data[0][i]);
    for (int k = 1; k < n; ++k) acc += bf16(data[k][i]);
    want[i] = bf16(acc);
  }
  std::vector<std::vector<float>> got(n);
  std::vector<std::thread> threads;
  for (int k = 0; k < n; ++k)
    threads.emplace_back([&, k] {
      Tensor t = to_gpu(data[k], k);
      groups[k]->all_reduce_async(t, dist::ReduceOp::Sum, dist::WireFormat::BFloat16)->wait();
      got[k] = t.to(cpu()).to_vector<float>();
    });
  for (auto& t : threads) t.join();
  for (int k = 0; k < n; ++k) {
    EXPECT_EQ(got[k], got[0]) << "rank " << k;
    for (std::int64_t i = 0; i < numel; i += 997)
      EXPECT_NEAR(got[k][i], want[i], 0.02 * (std::abs(want[i]) + 1)) << "element " << i;
  }
}

}  // namespace
}  // namespace lockstep::testing
