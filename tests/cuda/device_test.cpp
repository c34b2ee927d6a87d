// cuda:k as a tensor device: what check_device_available accepts and refuses, and that
// DataParallel refuses GPUs until the NCCL group exists. These run with or without a GPU.
#include <gtest/gtest.h>

#include <functional>
#include <string>

#include "cuda/cuda_test_util.h"
#include "lockstep/lockstep.h"

namespace lockstep::testing {
namespace {

std::string message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const DeviceError& e) {
    return e.what();
  }
  return "";
}

// No GPU needed.
TEST(CudaDevice, CheckDeviceAvailableAcceptsExactlyTheVisibleDevices) {
  const int count = cuda::device_count();
  for (int k = 0; k < count; ++k)
    EXPECT_NO_THROW(check_device_available(Device(DeviceType::CUDA, k)));
  // The first index past the visible devices (cuda:0 on a machine without a GPU).
  const Device missing(DeviceType::CUDA, count);
  const std::string what = message_of([&] { check_device_available(missing); });
  ASSERT_FALSE(what.empty()) << "expected DeviceError for " << missing.str();
  EXPECT_NE(what.find(missing.str()), std::string::npos) << what;
  if (count == 0) {
    EXPECT_NE(what.find(cuda::unavailable_reason()), std::string::npos) << what;
  }
  // Allocation goes through the same check.
  EXPECT_FALSE(message_of([&] { zeros({2}, missing); }).empty());
  EXPECT_FALSE(message_of([&] { (void)ones({2}).to(missing); }).empty());
}

// No GPU needed: the refusal comes before any device is touched.
TEST(CudaDevice, DataParallelOnGpusIsRefusedClearly) {
  auto model = std::make_shared<nn::Linear>(3, 2);
  const std::string what =
      message_of([&] { parallel::DataParallel dp(model, {Device(DeviceType::CUDA, 0)}); });
  EXPECT_NE(what.find("cuda:0"), std::string::npos) << what;
  EXPECT_NE(what.find("NCCL"), std::string::npos) << what;
}

}  // namespace
}  // namespace lockstep::testing
