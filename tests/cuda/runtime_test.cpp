// lockstep::cuda runtime and caching allocator on a real device: typed errors that name the
// device and operation, and reuse of freed blocks without cudaMalloc.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

#include "cuda/cuda_test_util.h"
#include "lockstep/core/error.h"

namespace lockstep::testing {
namespace {

// Runs with and without a GPU: without one, the runtime reports the reason instead of throwing.
TEST(CudaRuntime, DeviceCountIsConsistent) {
  const int n = cuda::device_count();
  EXPECT_GE(n, 0);
  EXPECT_EQ(cuda::is_available(), n > 0);
  if (n == 0) {
    const std::string reason = cuda::unavailable_reason();
    EXPECT_FALSE(reason.empty()) << "device_count() = 0 but no reason is given";
    std::printf("no CUDA device: %s\n", reason.c_str());
    EXPECT_THROW((void)cuda::get_device_properties(0), CudaError);
    EXPECT_THROW((void)cuda::compute_stream(0), CudaError);
    EXPECT_THROW(cuda::synchronize(0), CudaError);
    return;
  }
  EXPECT_TRUE(cuda::unavailable_reason().empty());
  const auto props = cuda::get_device_properties(0);
  EXPECT_FALSE(props.name.empty());
  EXPECT_GT(props.total_memory, 0u);
  std::printf("cuda:0 is %s, sm_%d%d, %zu MiB\n", props.name.c_str(), props.major, props.minor,
              props.total_memory >> 20);
  EXPECT_EQ(cuda::compute_stream(0), cuda::compute_stream(0));
}

// Runs with and without a GPU: with none, cuda:0 is the missing device and the message also
// carries unavailable_reason().
TEST(CudaRuntime, MissingDeviceIsCudaErrorNamingIt) {
  const int n = cuda::device_count();
  const std::string name = "cuda:" + std::to_string(n);
  for (auto call : {+[](int d) { cuda::check_device(d); }, +[](int d) { cuda::set_device(d); },
                    +[](int d) { (void)cuda::compute_stream(d); },
                    +[](int d) { (void)cuda::caching_allocator_alloc(64, d); }}) {
    try {
      call(n);
      ADD_FAILURE() << "no error for " << name;
    } catch (const CudaError& e) {
      EXPECT_NE(std::string(e.what()).find(name), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("device_count() = " + std::to_string(n)),
                std::string::npos)
          << e.what();
      if (n == 0) {
        EXPECT_NE(std::string(e.what()).find(cuda::unavailable_reason()), std::string::npos)
            << e.what();
      }
    }
  }
  EXPECT_THROW(cuda::check_device(-1), CudaError);
  // CudaError is a DeviceError: the CLI reports it like any other device problem.
  EXPECT_THROW(cuda::check_device(n), DeviceError);
}

TEST(CudaRuntime, FailedCudaCallIsCudaErrorWithCudaString) {
  LOCKSTEP_REQUIRE_CUDA();
  // An absurd allocation fails in cudaMalloc even after the out-of-memory retry.
  const std::size_t huge = std::size_t{1} << 52;  // 4 PiB
  try {
    (void)cuda::caching_allocator_alloc(huge, 0);
    ADD_FAILURE() << "a 4 PiB allocation succeeded";
  } catch (const CudaError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("cuda:0"), std::string::npos) << what;
    EXPECT_NE(what.find("cudaMalloc"), std::string::npos) << what;
    EXPECT_NE(what.find("cudaErrorMemoryAllocation"), std::string::npos) << what;
    EXPECT_NE(e.code(), 0);
  }
  // The device is still usable afterwards.
  void* p = cuda::caching_allocator_alloc(1024, 0);
  EXPECT_NE(p, nullptr);
  cuda::caching_allocator_delete(p);
  cuda::synchronize(0);
}

TEST(CudaAllocator, SizeClasses) {
  EXPECT_EQ(cuda::round_size(0), 0u);
  if (!cuda::is_available()) GTEST_SKIP() << "no CUDA device: " << cuda::unavailable_reason();
  EXPECT_EQ(cuda::round_size(1), 512u);
  EXPECT_EQ(cuda::round_size(512), 512u);
  EXPECT_EQ(cuda::round_size(513), 1024u);
  EXPECT_EQ(cuda::round_size(1 << 20), 1u << 20);
  EXPECT_EQ(cuda::round_size((1 << 20) + 1), 2u << 20);
  EXPECT_EQ(cuda::round_size((5u << 20) + 3), 6u << 20);
}

TEST(CudaAllocator, FreedBlocksAreReusedWithoutCudaMalloc) {
  LOCKSTEP_REQUIRE_CUDA();
  cuda::empty_cache();
  const auto before = cuda::memory_stats(0);
  void* a = cuda::caching_allocator_alloc(3000, 0);  // class 4096
  const auto s1 = cuda::memory_stats(0);
  EXPECT_EQ(s1.num_cuda_mallocs, before.num_cuda_mallocs + 1);
  EXPECT_EQ(s1.allocated_bytes, before.allocated_bytes + 4096);
  cuda::caching_allocator_delete(a);
  const auto s2 = cuda::memory_stats(0);
  EXPECT_EQ(s2.allocated_bytes, before.allocated_bytes);
  EXPECT_EQ(s2.cached_bytes, before.cached_bytes + 4096);

  void* b = cuda::caching_allocator_alloc(4000, 0);  // same class: the same block, no cudaMalloc
  const auto s3 = cuda::memory_stats(0);
  EXPECT_EQ(b, a);
  EXPECT_EQ(s3.num_cuda_mallocs, s1.num_cuda_mallocs);
  EXPECT_EQ(s3.num_allocs, s1.num_allocs + 1);
  EXPECT_EQ(s3.cached_bytes, before.cached_bytes);

  // Many allocate/free rounds of an op-sized buffer: one cudaMalloc in all.
  for (int i = 0; i < 100; ++i) {
    cuda::DeviceBuffer t(10000, 0);
    ASSERT_NE(t.data(), nullptr);
  }
  const auto s4 = cuda::memory_stats(0);
  EXPECT_EQ(s4.num_cuda_mallocs, s3.num_cuda_mallocs + 1);
  cuda::caching_allocator_delete(b);

  cuda::empty_cache();
  const auto s5 = cuda::memory_stats(0);
  EXPECT_EQ(s5.cached_bytes, 0);
  EXPECT_EQ(s5.reserved_bytes, s5.allocated_bytes);
  EXPECT_GE(s5.num_cuda_frees, before.num_cuda_frees + 2);
  EXPECT_THROW(cuda::caching_allocator_delete(b), CudaError);  // already given back
}

TEST(CudaAllocator, PinnedStagingUploads) {
  LOCKSTEP_REQUIRE_CUDA();
  cuda::PinnedStagingBuffer staging;
  std::vector<float> batch(1000), back(1000);
  DeviceArray<float> dev(std::vector<float>(1000, 0.f));
  for (int round = 0; round < 3; ++round) {
    for (std::size_t i = 0; i < batch.size(); ++i) batch[i] = float(round * 1000 + int(i));
    staging.upload(dev.get(), batch.data(), batch.size() * sizeof(float), 0);
    batch.assign(batch.size(), -1.f);  // the caller may reuse its memory at once
    cuda::copy_to_host(back.data(), dev.get(), back.size() * sizeof(float), 0);
    for (std::size_t i = 0; i < back.size(); ++i) ASSERT_EQ(back[i], float(round * 1000 + int(i)));
  }
  EXPECT_GE(staging.capacity(), 1000 * sizeof(float));
}

}  // namespace
}  // namespace lockstep::testing
