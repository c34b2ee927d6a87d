// The flat-step planner (src/optim/flat_step.h): which layouts of parameters and gradients one
// optimizer launch may update, and the segment table it gets. Pure host code over addresses, so
// these run without a GPU; the launches themselves are tested on a GPU in
// tests/cuda/flat_optim_test.cpp.
#include "optim/flat_step.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "lockstep/lockstep.h"

namespace lockstep::testing {
namespace {

using optim::detail::FlatParamInfo;
using optim::detail::FlatPlan;
using optim::detail::kNoBase;
using optim::detail::plan_flat_step;

constexpr std::size_t kEs = 4;  // float32
// Two storages for parameters and two for gradients, identified by these addresses.
const char kParamStorage = 0, kOtherParamStorage = 0, kGradStorage = 0, kOtherGradStorage = 0;
constexpr std::uintptr_t kP = 0x10000, kG = 0x80000;

// Parameter of `numel` elements at element `at` of the parameter storage, with its gradient at
// element `grad_at` of the gradient storage (grad_at < 0: no gradient).
FlatParamInfo param(std::int64_t at, std::int64_t numel, std::int64_t grad_at) {
  FlatParamInfo p;
  p.storage = &kParamStorage;
  p.address = kP + static_cast<std::uintptr_t>(at) * kEs;
  p.numel = numel;
  if (grad_at >= 0) {
    p.has_grad = true;
    p.grad_storage = &kGradStorage;
    p.grad_address = kG + static_cast<std::uintptr_t>(grad_at) * kEs;
  }
  return p;
}

void expect_not_flat(const FlatPlan& plan, const std::string& why) {
  EXPECT_FALSE(plan.flat);
  EXPECT_NE(plan.reason.find(why), std::string::npos) << plan.reason;
  EXPECT_TRUE(plan.segments.empty());
}

struct Seg {
  std::int64_t param_offset, grad_offset, state_offset, numel;
  bool has_grad;
};
void expect_segments(const FlatPlan& plan, const std::vector<Seg>& want) {
  ASSERT_TRUE(plan.flat) << plan.reason;
  EXPECT_TRUE(plan.reason.empty());
  ASSERT_EQ(plan.segments.size(), want.size());
  for (std::size_t i = 0; i < want.size(); ++i) {
    const auto& s = plan.segments[i];
    EXPECT_EQ(s.index, i);
    EXPECT_EQ(s.param_offset, want[i].param_offset) << "segment " << i;
    EXPECT_EQ(s.grad_offset, want[i].grad_offset) << "segment " << i;
    EXPECT_EQ(s.state_offset, want[i].state_offset) << "segment " << i;
    EXPECT_EQ(s.numel, want[i].numel) << "segment " << i;
    EXPECT_EQ(s.has_grad, want[i].has_grad) << "segment " << i;
  }
}

// DataParallel's layout: adjacent views of one buffer, gradients laid out alike.
TEST(FlatStepPlan, AdjacentParametersAndGradients) {
  const FlatPlan plan = plan_flat_step({param(0, 6, 0), param(6, 3, 6), param(9, 10, 9)}, kEs);
  expect_segments(plan, {{0, 0, 0, 6, true}, {6, 6, 6, 3, true}, {9, 9, 9, 10, true}});
  EXPECT_EQ(plan.param_base_index, 0u);
  EXPECT_EQ(plan.grad_base_index, 0u);
  EXPECT_EQ(plan.state_numel, 19);
}

// A parameter without a gradient keeps its segment, marked, and its state place; the gradient
// base is the lowest gradient that exists.
TEST(FlatStepPlan, ParameterWithoutGradient) {
  const FlatPlan plan = plan_flat_step({param(0, 4, -1), param(4, 2, 4), param(6, 3, 6)}, kEs);
  expect_segments(plan, {{0, 0, 0, 4, false}, {4, 0, 4, 2, true}, {6, 2, 6, 3, true}});
  EXPECT_EQ(plan.param_base_index, 0u);
  EXPECT_EQ(plan.grad_base_index, 1u);
}

TEST(FlatStepPlan, NoGradientAtAll) {
  const FlatPlan plan = plan_flat_step({param(0, 4, -1), param(4, 2, -1)}, kEs);
  expect_segments(plan, {{0, 0, 0, 4, false}, {4, 0, 4, 2, false}});
  EXPECT_EQ(plan.grad_base_index, kNoBase);
}

// Gaps between parameters (an optimizer over some of a flat buffer's parameters): each segment
// has its own offset; the state is packed without the gaps.
TEST(FlatStepPlan, GapsBetweenParameters) {
  const FlatPlan plan = plan_flat_step({param(0, 4, 0), param(10, 2, 10), param(20, 3, 20)}, kEs);
  expect_segments(plan, {{0, 0, 0, 4, true}, {10, 10, 4, 2, true}, {20, 20, 6, 3, true}});
  EXPECT_EQ(plan.state_numel, 9);
}

// Optimizer order differs from memory order: bases are the lowest addresses, state follows the
// optimizer order.
TEST(FlatStepPlan, ReorderedParameters) {
  const FlatPlan plan = plan_flat_step({param(5, 3, 5), param(0, 5, 0), param(8, 2, 8)}, kEs);
  expect_segments(plan, {{5, 5, 0, 3, true}, {0, 0, 3, 5, true}, {8, 8, 8, 2, true}});
  EXPECT_EQ(plan.param_base_index, 1u);
  EXPECT_EQ(plan.grad_base_index, 1u);
}

// Gradients laid out differently from the parameters (another order, gaps) are fine: each
// segment has its own gradient offset.
TEST(FlatStepPlan, GradientsInAnotherOrder) {
  const FlatPlan plan = plan_flat_step({param(0, 3, 7), param(3, 4, 0), param(7, 2, 20)}, kEs);
  expect_segments(plan, {{0, 7, 0, 3, true}, {3, 0, 3, 4, true}, {7, 20, 7, 2, true}});
  EXPECT_EQ(plan.grad_base_index, 1u);
}

// Empty parameters take part (their state is an empty view) wherever their address points.
TEST(FlatStepPlan, EmptyParameters) {
  FlatParamInfo empty = param(0, 0, 0);
  empty.address = 0xdead;  // an empty tensor's address means nothing
  empty.storage = &kOtherParamStorage;
  empty.grad_storage = &kOtherGradStorage;
  const FlatPlan plan = plan_flat_step({empty, param(0, 4, 0), param(4, 0, -1)}, kEs);
  expect_segments(plan, {{0, 0, 0, 0, true}, {0, 0, 0, 4, true}, {0, 0, 4, 0, false}});
  EXPECT_EQ(plan.param_base_index, 1u);
  const FlatPlan only_empty = plan_flat_step({empty}, kEs);
  expect_segments(only_empty, {{0, 0, 0, 0, true}});
  EXPECT_EQ(only_empty.param_base_index, kNoBase);
  EXPECT_EQ(only_empty.grad_base_index, kNoBase);
}

TEST(FlatStepPlan, ParametersInTwoStoragesAreNotFlat) {
  FlatParamInfo other = param(4, 2, 4);
  other.storage = &kOtherParamStorage;
  expect_not_flat(plan_flat_step({param(0, 4, 0), other}, kEs),
                  "parameter 0 and parameter 1 lie in different storages");
}

TEST(FlatStepPlan, GradientsInTwoStoragesAreNotFlat) {
  FlatParamInfo other = param(4, 2, 4);
  other.grad_storage = &kOtherGradStorage;
  expect_not_flat(plan_flat_step({param(0, 4, 0), other}, kEs),
                  "the gradients of parameter 0 and parameter 1 lie in different storages");
}

TEST(FlatStepPlan, GradientInTheParameterStorageIsNotFlat) {
  FlatParamInfo p = param(0, 4, 0);
  p.grad_storage = p.storage;
  p.grad_address = kP + 100 * kEs;
  expect_not_flat(plan_flat_step({p}, kEs),
                  "the gradient of parameter 0 lies in the parameters' storage");
}

// Overlapping parameters (one tensor listed twice, or views sharing elements) would be updated
// twice by the per-parameter step but concurrently by one launch: not flat.
TEST(FlatStepPlan, OverlappingParametersAreNotFlat) {
  expect_not_flat(plan_flat_step({param(0, 4, 0), param(0, 4, 4)}, kEs), "overlap");
  expect_not_flat(plan_flat_step({param(0, 4, 0), param(3, 4, 4)}, kEs), "overlap");
  expect_not_flat(plan_flat_step({param(6, 4, 0), param(8, 1, 4)}, kEs), "overlap");
}

TEST(FlatStepPlan, MisalignedAddressesAreNotFlat) {
  FlatParamInfo p = param(4, 2, 4);
  p.address += 2;
  expect_not_flat(plan_flat_step({param(0, 4, 0), p}, kEs), "whole number of elements");
  FlatParamInfo g = param(4, 2, 4);
  g.grad_address += 1;
  expect_not_flat(plan_flat_step({param(0, 4, 0), g}, kEs), "whole number of elements");
}

TEST(FlatStepPlan, BadSizesAreNotFlat) {
  expect_not_flat(plan_flat_step({param(0, 4, 0)}, 0), "element size 0");
  expect_not_flat(plan_flat_step({param(0, -1, 0)}, kEs), "negative size");
  // A size whose bytes do not fit an address cannot end before the next parameter.
  expect_not_flat(plan_flat_step({param(0, INT64_MAX, -1), param(10, 1, -1)}, kEs), "overlap");
  // Two parameters of 2^62 one-byte elements each: their state would not fit an int64 count.
  FlatParamInfo e1 = param(0, std::int64_t{1} << 62, -1), e2 = e1;
  e2.address = e1.address + (std::uintptr_t{1} << 62);
  expect_not_flat(plan_flat_step({e1, e2}, 1), "more than 2^63 elements");
}

// An optimizer on the CPU never takes the flat path; last_cuda_step() says nothing happened on
// a GPU (the CPU build's check of the bookkeeping; the GPU side is in tests/cuda).
TEST(FlatStepPlan, CpuOptimizerReportsNoCudaLaunches) {
  Tensor a = ones({4}).requires_grad_(), b = ones({2}).requires_grad_();
  optim::SGD sgd({a, b}, {.lr = 0.5, .momentum = 0.9});
  a.set_grad(ones({4}));
  sgd.step();
  EXPECT_FALSE(sgd.last_cuda_step().flat);
  EXPECT_EQ(sgd.last_cuda_step().launches, 0);
  EXPECT_TRUE(sgd.last_cuda_step().fallback_reason.empty());
}

}  // namespace
}  // namespace lockstep::testing
