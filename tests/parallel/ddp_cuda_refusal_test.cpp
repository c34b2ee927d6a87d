// DistributedDataParallel on CUDA devices: what it refuses before touching a device, so these run
// in every build, with or without a GPU (the GPU runs are tests/cuda/ddp_cuda_test.cpp). One GPU
// per process and an NCCL group on it are required (include/lockstep/parallel/distributed.h).
#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "lockstep/dist/nccl.h"
#include "lockstep/parallel/distributed.h"
#include "support/helpers.h"
#include "support/tolerance.h"

namespace lockstep::testing {
namespace {

const Device kCuda0(DeviceType::CUDA, 0);
const Device kCuda1(DeviceType::CUDA, 1);

std::shared_ptr<nn::Linear> model() {
  manual_seed(3);
  return std::make_shared<nn::Linear>(3, 2);
}

// Several GPUs in one process of a DDP job (the hybrid layout) is not built: ValueError naming
// the devices and what to do instead; the module is left as it was, on the host.
TEST(DdpCudaRefusal, SeveralGpusPerProcessAreRefused) {
  auto m = model();
  const Tensor w = m->weight.detach().clone();
  auto group = dist::new_thread_group(1)[0];
  parallel::DistributedDataParallelOptions o;
  o.device_ids = {kCuda0, kCuda1};
  expect_error<ValueError>(
      [&] { parallel::DistributedDataParallel ddp(m, group, o); },
      {"DistributedDataParallel on cuda:0,cuda:1", "one GPU", "one process per GPU"});
  EXPECT_TRUE(m->weight.device().is_cpu());
  EXPECT_TRUE(BitEqual(m->weight, w));
}

// A group whose collectives take CPU tensors (threads here; mpi alike) cannot reduce gradients
// on a GPU: DeviceError naming the backend, the device and the NCCL group to make instead.
TEST(DdpCudaRefusal, AGroupThatIsNotNcclIsRefused) {
  auto m = model();
  auto group = dist::new_thread_group(1)[0];
  parallel::DistributedDataParallelOptions o;
  o.device_ids = {kCuda0};
  expect_error<DeviceError>([&] { parallel::DistributedDataParallel ddp(m, group, o); },
                            {"DistributedDataParallel on cuda:0", "backend is 'threads'",
                             "new_nccl_group(bootstrap, cuda:0)"});
  // The same refusal through DataParallel's own process_group option.
  parallel::DataParallelOptions dp;
  dp.process_group = group;
  expect_error<DeviceError>([&] { parallel::DataParallel d(m, {kCuda1}, std::nullopt, dp); },
                            {"cuda:1", "backend is 'threads'"});
  // The module still trains on the CPU afterwards.
  parallel::DistributedDataParallel ddp(m, group);
  EXPECT_EQ(ddp.forward(ones({4, 3})).shape(), Shape({4, 2}));
}

// The functions that tell an NCCL group apart say "not one" for other groups, in every build.
TEST(DdpCudaRefusal, NcclQueriesOnOtherGroups) {
  auto group = dist::new_thread_group(2);
  EXPECT_FALSE(dist::nccl_device(*group[0]).has_value());
  EXPECT_EQ(dist::nccl_bootstrap(*group[1]), nullptr);
}

}  // namespace
}  // namespace lockstep::testing
