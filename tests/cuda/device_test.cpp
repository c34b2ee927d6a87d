// cuda:k as a tensor device: what check_device_available accepts and refuses, what DataParallel
// refuses (also in deterministic mode, and the CLI's --deterministic on a GPU), and its default
// devices. These run with or without a GPU (the deterministic-mode test only without one).
#include <gtest/gtest.h>

#include <functional>
#include <string>

#include "cuda/cuda_test_util.h"
#include "e2e/cli_support.h"
#include "lockstep/lockstep.h"
#include "support/helpers.h"

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

// No GPU needed: CPU and CUDA devices are never mixed (refused before any device is touched),
// and without a GPU a CUDA device list is refused naming the missing device.
TEST(CudaDevice, DataParallelRefusesMixedOrMissingDevices) {
  auto model = std::make_shared<nn::Linear>(3, 2);
  std::string what = message_of([&] {
    parallel::DataParallel dp(model, {cpu(0), Device(DeviceType::CUDA, 0)});
  });
  EXPECT_NE(what.find("cpu:0 and cuda:0 are devices of different types"), std::string::npos)
      << what;
  what = message_of([&] {
    parallel::DataParallel dp(model, {Device(DeviceType::CUDA, 0), cpu(0)});
  });
  EXPECT_NE(what.find("different types"), std::string::npos) << what;
  const Device missing(DeviceType::CUDA, cuda::device_count());
  what = message_of([&] { parallel::DataParallel dp(model, {missing}); });
  EXPECT_NE(what.find(missing.str()), std::string::npos) << what;
}

// No GPU needed: deterministic mode is built on GPUs, so what stays refused is what is missing or
// not built around it: a missing GPU (DeviceError naming it, for DataParallel and the CLI's
// --deterministic --devices), several GPUs per DistributedDataParallel process (ValueError, before
// any device is touched), and --backend nccl without a GPU. None of them mentions deterministic
// mode any more.
TEST(CudaDevice, DeterministicModeRefusesOnlyWhatIsMissing) {
  if (cuda::device_count() > 0) GTEST_SKIP() << "a GPU is present; this probes the no-GPU path";
  auto model = std::make_shared<nn::Linear>(3, 2);
  const Device cuda0(DeviceType::CUDA, 0), cuda1(DeviceType::CUDA, 1);
  parallel::DataParallelOptions o;
  o.deterministic = true;
  const std::string what = message_of([&] { parallel::DataParallel dp(model, {cuda0}, {}, o); });
  EXPECT_NE(what.find("cuda:0"), std::string::npos) << what;
  EXPECT_EQ(what.find("deterministic"), std::string::npos) << what;
  parallel::DistributedDataParallelOptions d;
  d.deterministic = true;
  d.device_ids = {cuda0, cuda1};
  expect_error<ValueError>(
      [&] { parallel::DistributedDataParallel ddp(model, dist::new_thread_group(1)[0], d); },
      {"DistributedDataParallel on cuda:0,cuda:1", "one process per GPU"});
  EXPECT_TRUE(model->weight.device().is_cpu());
  e2e::TempDir dir;
  const std::string cli = e2e::expect_error(
      {"train", "--deterministic", "--devices", "cuda:0", "--save", dir / "w"}, {"cuda:0"});
  EXPECT_EQ(cli.find("deterministic"), std::string::npos) << cli;
  e2e::expect_usage_error({"train", "--deterministic", "--backend", "nccl"},
                          {"--backend nccl", "no usable GPU"});
  EXPECT_TRUE(dir.entries().empty());
}

// No GPU needed: default_devices() is every GPU where there is one (torch.nn.DataParallel's
// default), else one CPU device per usable core.
TEST(CudaDevice, DefaultDevicesAreTheGpusWhenThereAreAny) {
  const auto d = parallel::default_devices();
  const int gpus = cuda::device_count();
  if (gpus > 0) {
    ASSERT_EQ(static_cast<int>(d.size()), gpus);
    for (int k = 0; k < gpus; ++k)
      EXPECT_EQ(d[static_cast<std::size_t>(k)], Device(DeviceType::CUDA, k));
  } else {
    ASSERT_EQ(static_cast<int>(d.size()), usable_cores());
    for (const Device& x : d) EXPECT_TRUE(x.is_cpu()) << x.str();
  }
}

}  // namespace
}  // namespace lockstep::testing
