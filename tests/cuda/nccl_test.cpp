// The NCCL ProcessGroup (include/lockstep/dist/nccl.h). The refusals run with and without a GPU;
// the collectives need one GPU and run as groups of size 1 (one process, ncclCommInitAll) and
// through a bootstrap group (ncclCommInitRank); paths with two or more GPUs are compiled only
// until a machine with several GPUs runs these tests (see docs/cuda.md).
#include <gtest/gtest.h>

#include <span>
#include <string>
#include <thread>
#include <vector>

#include "cuda/cuda_test_util.h"
#include "lockstep/lockstep.h"
#include "support/helpers.h"

namespace lockstep::testing {
namespace {

Device gpu(int k) { return Device(DeviceType::CUDA, k); }

TEST(Nccl, BackendIsBuilt) {
  EXPECT_TRUE(dist::nccl_available());
  const std::string v = dist::nccl_version();
  EXPECT_NE(v.find('.'), std::string::npos) << v;
  std::printf("NCCL %s\n", v.c_str());
}

// NCCL cannot place two ranks on one GPU: refused before any device is touched, so this runs
// without a GPU too.
TEST(Nccl, OneGpuListedTwiceIsRefused) {
  expect_error<ValueError>(
      [] {
        (void)dist::new_nccl_group({gpu(0), gpu(0)});
      },
      {"cuda:0 is listed twice", "positions 0 and 1", "two ranks on one GPU"});
  expect_error<ValueError>(
      [] {
        (void)dist::new_nccl_group({gpu(1), gpu(0), gpu(1)});
      },
      {"cuda:1 is listed twice", "positions 0 and 2"});
}

TEST(Nccl, BadDeviceListsAreRefused) {
  expect_error<ValueError>([] { (void)dist::new_nccl_group(std::vector<Device>{}); }, {"empty"});
  expect_error<DeviceError>([] { (void)dist::new_nccl_group({cpu(0)}); },
                            {"cpu:0", "not a CUDA device"});
  dist::NcclOptions bad;
  bad.timeout_seconds = 0;
  expect_error<ValueError>([&] { (void)dist::new_nccl_group({gpu(0)}, bad); }, {"timeout_seconds"});
}

// A device that does not exist (every device on a machine without a GPU) is a CudaError naming it.
TEST(Nccl, MissingDeviceIsCudaErrorNamingIt) {
  const int missing = cuda::device_count();
  const std::string name = "cuda:" + std::to_string(missing);
  expect_error<CudaError>([&] { (void)dist::new_nccl_group({gpu(missing)}); }, {name});
}

// Through a bootstrap group: a rank whose device is unusable throws its own DeviceError; the
// others learn it through the bootstrap all_gather instead of waiting in NCCL. With a GPU, two
// ranks on cuda:0 are refused on both ranks.
TEST(Nccl, BootstrapRefusesAnUnusableOrSharedDevice) {
  auto boot = dist::new_thread_group(2);
  std::vector<std::string> errors(2);
  std::vector<std::thread> threads;
  const bool have_gpu = cuda::device_count() > 0;
  for (int r = 0; r < 2; ++r)
    threads.emplace_back([&, r] {
      try {
        (void)dist::new_nccl_group(boot[static_cast<std::size_t>(r)], gpu(0));
        errors[static_cast<std::size_t>(r)] = "no exception";
      } catch (const ValueError& e) {
        errors[static_cast<std::size_t>(r)] = std::string("ValueError: ") + e.what();
      } catch (const DeviceError& e) {
        errors[static_cast<std::size_t>(r)] = std::string("DeviceError: ") + e.what();
      } catch (const std::exception& e) {
        errors[static_cast<std::size_t>(r)] = std::string("other: ") + e.what();
      }
    });
  for (auto& t : threads) t.join();
  for (const auto& e : errors) {
    if (have_gpu) {
      EXPECT_NE(e.find("ValueError"), std::string::npos) << e;
      EXPECT_NE(e.find("rank 0 and rank 1 use the same GPU"), std::string::npos) << e;
    } else {
      EXPECT_NE(e.find("DeviceError"), std::string::npos) << e;
      EXPECT_NE(e.find("cuda:0"), std::string::npos) << e;
    }
  }
}

// ---- on a GPU ---------------------------------------------------------------------------------

Tensor on_gpu(const std::vector<float>& v) { return tensor(std::span<const float>(v)).to(gpu(0)); }

std::vector<float> host(const Tensor& t) { return t.to(cpu()).to_vector<float>(); }

// Every collective on a group of one: the result is the rank's own data, reached through the
// NCCL stream and the events that order it after the producing op and before the reader.
void size_one_collectives(dist::ProcessGroup& g) {
  EXPECT_EQ(g.backend(), "nccl");
  EXPECT_EQ(g.size(), 1);
  EXPECT_EQ(g.rank(), 0);
  const std::vector<float> v{1.5f, -2.f, 3.25f, 0.f, 7.f};
  std::vector<float> twice;
  for (float x : v) twice.push_back(2 * x);

  Tensor t = on_gpu(v) * 2.0;  // produced by a kernel on the compute stream
  g.all_reduce(t);
  EXPECT_EQ(host(t), twice);
  g.all_reduce(t, dist::ReduceOp::Max);
  EXPECT_EQ(host(t), twice);
  g.reduce(t, 0);
  EXPECT_EQ(host(t), twice);
  g.broadcast(t, 0);
  EXPECT_EQ(host(t), twice);

  std::vector<Tensor> outs{on_gpu(std::vector<float>(v.size(), 0.f))};
  g.all_gather(outs, t);
  EXPECT_EQ(host(outs[0]), twice);
  Tensor out = on_gpu(std::vector<float>(v.size(), 0.f));
  g.reduce_scatter(out, {t});
  EXPECT_EQ(host(out), twice);
  g.barrier();

  Tensor d = tensor(std::span<const double>(std::vector<double>{1e300, -0.5})).to(gpu(0));
  g.all_reduce(d);
  EXPECT_EQ(d.to(cpu()).to_vector<double>(), (std::vector<double>{1e300, -0.5}));
  Tensor i =
      tensor(std::span<const std::int64_t>(std::vector<std::int64_t>{1LL << 40, -3})).to(gpu(0));
  g.all_reduce(i);
  EXPECT_EQ(i.to(cpu()).to_vector<std::int64_t>(), (std::vector<std::int64_t>{1LL << 40, -3}));

  Tensor empty = on_gpu({});
  g.all_reduce(empty);
  EXPECT_EQ(empty.numel(), 0);
}

TEST(Nccl, SizeOneGroupFromCommInitAll) {
  LOCKSTEP_REQUIRE_CUDA();
  auto groups = dist::new_nccl_group({gpu(0)});
  ASSERT_EQ(groups.size(), 1u);
  size_one_collectives(*groups[0]);
}

TEST(Nccl, SizeOneGroupFromABootstrapGroup) {
  LOCKSTEP_REQUIRE_CUDA();
  auto boot = dist::new_thread_group(1);
  auto g = dist::new_nccl_group(boot[0], gpu(0));
  size_one_collectives(*g);
}

// A tensor on the wrong device is refused with a DeviceError naming both devices, with and
// without the argument check; the group stays usable afterwards.
TEST(Nccl, TensorOnAnotherDeviceIsRefused) {
  LOCKSTEP_REQUIRE_CUDA();
  for (bool check : {true, false}) {
    dist::NcclOptions options;
    options.check_arguments = check;
    auto g = dist::new_nccl_group({gpu(0)}, options);
    Tensor on_host = tensor({1.f, 2.f});
    expect_error<DeviceError>([&] { g[0]->all_reduce(on_host); },
                              {"nccl all_reduce", "cuda:0 (rank 0 of 1)", "cpu:0"});
    std::vector<Tensor> too_many{on_gpu({1.f}), on_gpu({1.f})};
    expect_error<ValueError>([&] { g[0]->all_gather(too_many, on_gpu({1.f})); },
                             {"outputs has 2 tensors", "1 ranks"});
    Tensor t = on_gpu({4.f, 5.f});
    g[0]->all_reduce(t);
    EXPECT_EQ(host(t), (std::vector<float>{4.f, 5.f})) << "check_arguments=" << check;
  }
}

}  // namespace
}  // namespace lockstep::testing
