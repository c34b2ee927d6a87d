// CUDA graph step pieces that run without a GPU: the host policy of which steps warm up, capture,
// replay or run eagerly (GraphStepPlanner), CUDAGraphStep's refusals, and the CUDA graph API's
// errors where no device exists (a build without CUDA: "not built"). The GPU behaviour is tested
// in tests/cuda/cuda_graph_test.cpp.
#include <gtest/gtest.h>

#include "lockstep/cuda/graph.h"
#include "lockstep/lockstep.h"

namespace lockstep {
namespace {

using parallel::GraphStepAction;
using parallel::GraphStepPlanner;

std::string names(const std::vector<GraphStepAction>& actions) {
  std::string s;
  for (auto a : actions)
    s += a == GraphStepAction::Eager     ? "E"
         : a == GraphStepAction::Warmup  ? "W"
         : a == GraphStepAction::Capture ? "C"
                                         : "R";
  return s;
}

TEST(GraphStepPlanner, WarmsUpThenCapturesThenReplays) {
  GraphStepPlanner p(2);
  std::vector<GraphStepAction> got;
  for (int i = 0; i < 5; ++i) got.push_back(p.next({32, 4}, {32}));
  EXPECT_EQ(names(got), "WWCRR");
  EXPECT_TRUE(p.captured());
  ASSERT_TRUE(p.static_shapes());
  EXPECT_EQ(p.static_shapes()->first, Shape({32, 4}));
}

TEST(GraphStepPlanner, OtherShapesRunEagerlyWithoutDisturbingTheCapture) {
  GraphStepPlanner p(1);
  std::vector<GraphStepAction> got;
  // Epoch 1: 3 full batches and a partial one; epoch 2 the same.
  for (int epoch = 0; epoch < 2; ++epoch) {
    for (int i = 0; i < 3; ++i) got.push_back(p.next({23, 4}, {23}));
    got.push_back(p.next({7, 4}, {7}));
  }
  EXPECT_EQ(names(got), "WCRERRRE");
  // A partial batch during the warm-up does not count towards it.
  GraphStepPlanner q(2);
  got.clear();
  for (const std::int64_t rows : {23, 7, 23, 7, 23, 23}) got.push_back(q.next({rows, 4}, {rows}));
  EXPECT_EQ(names(got), "WEWECR");
  // The target's shape is part of the static shapes.
  GraphStepPlanner r(1);
  got.clear();
  got.push_back(r.next({8, 4}, {8}));
  got.push_back(r.next({8, 4}, {8, 1}));
  got.push_back(r.next({8, 4}, {8}));
  EXPECT_EQ(names(got), "WEC");
}

TEST(GraphStepPlanner, ALargerBatchBeforeTheCaptureBecomesTheStaticShape) {
  // A run that starts at an epoch's last (partial) batch, e.g. resumed there.
  GraphStepPlanner p(2);
  std::vector<GraphStepAction> got;
  for (const std::int64_t rows : {7, 23, 23, 23, 7, 23, 30})
    got.push_back(p.next({rows, 4}, {rows}));
  EXPECT_EQ(names(got), "WWWCERE");  // after the capture a larger batch runs eagerly
  EXPECT_EQ(p.static_shapes()->first, Shape({23, 4}));
}

TEST(GraphStepPlanner, ResetWarmsUpAgainAndZeroWarmupIsRefused) {
  GraphStepPlanner p(1);
  (void)p.next({4, 2}, {4});
  (void)p.next({4, 2}, {4});
  ASSERT_TRUE(p.captured());
  p.reset();
  EXPECT_FALSE(p.captured());
  EXPECT_EQ(p.next({4, 2}, {4}), GraphStepAction::Warmup);
  EXPECT_EQ(p.next({4, 2}, {4}), GraphStepAction::Capture);
  try {
    GraphStepPlanner bad(0);
    FAIL() << "warmup 0 accepted";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("warmup_steps must be at least 1"), std::string::npos)
        << e.what();
  }
}

TEST(CUDAGraphStep, RefusesCpuDevicesAndSeveralDevices) {
  for (const std::vector<Device>& devices :
       {std::vector<Device>{cpu(0)}, std::vector<Device>{cpu(0), cpu(1)}}) {
    auto model = std::make_shared<nn::Sequential>();
    model->push_back(std::make_shared<nn::Linear>(4, 3));
    nn::DataParallel dp(model, devices);
    std::shared_ptr<optim::Optimizer> opt =
        std::make_shared<optim::SGD>(dp.parameters(), optim::SGDOptions{.lr = 0.1});
    try {
      parallel::CUDAGraphStep step(dp, opt);
      FAIL() << "accepted a DataParallel on CPU devices";
    } catch (const ValueError& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("exactly one GPU"), std::string::npos) << what;
      EXPECT_NE(what.find("cpu:0"), std::string::npos) << what;
    }
  }
}

TEST(CUDAGraph, WithoutADeviceCaptureIsACudaErrorAndNothingCaptures) {
  if (cuda::is_available()) GTEST_SKIP() << "this machine has a GPU (see tests/cuda)";
  EXPECT_FALSE(cuda::is_current_stream_capturing(0));
  EXPECT_NO_THROW(cuda::check_not_capturing(0, "a test read"));
  cuda::CUDAGraph g;
  try {
    g.capture_begin(0);
    FAIL() << "capture_begin(0) without a device";
  } catch (const CudaError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("cuda:0"), std::string::npos) << what;
    EXPECT_NE(what.find(cuda::unavailable_reason()), std::string::npos) << what;
  }
  EXPECT_FALSE(g.captured());
  EXPECT_FALSE(g.capturing());
  EXPECT_THROW(g.replay(), CudaError);
  EXPECT_THROW(g.capture_end(), CudaError);
  EXPECT_EQ(cuda::CUDAGraph::capturing_on(0), nullptr);
  EXPECT_NO_THROW(g.reset());
}

}  // namespace
}  // namespace lockstep
