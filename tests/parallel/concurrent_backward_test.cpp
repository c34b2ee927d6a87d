// backward() run from several threads into one shared leaf (torch: "Thread safety on autograd
// node": AccumulateGrad locks the leaf): no gradient update may be lost, and each
// post-accumulate-grad hook sees the gradient its own accumulation produced. In tests/parallel
// so that CI's ThreadSanitizer stage (labels parallel|dist) runs it.
#include <gtest/gtest.h>

#include <atomic>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "lockstep/lockstep.h"

namespace lockstep::testing {
namespace {

constexpr int kThreads = 8;
constexpr int kIterations = 500;

// Starts `body` on kThreads threads at once (a gate, so that they overlap) and joins them.
void run_threads(const std::function<void()>& body) {
  std::atomic<int> waiting{kThreads};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&] {
      waiting.fetch_sub(1);
      while (waiting.load() > 0) std::this_thread::yield();
      body();
    });
  for (auto& t : threads) t.join();
}

TEST(ConcurrentBackward, EveryThreadsGradientReachesTheSharedLeaf) {
  Tensor a = ones({256}, TensorOptions().requires_grad(true));
  run_threads([&] {
    for (int i = 0; i < kIterations; ++i) sum(mul(a, 2.0)).backward();
  });
  ASSERT_TRUE(a.grad().defined());
  const double want = 2.0 * kThreads * kIterations;
  EXPECT_EQ(a.grad().to_vector<double>(), std::vector<double>(256, want));
}

TEST(ConcurrentBackward, PostAccumulateHooksSeeEachAccumulationInTurn) {
  Tensor a = ones({1}, TensorOptions().requires_grad(true));
  std::vector<double> seen;  // written by the hooks, which run one at a time per leaf
  a.register_post_accumulate_grad_hook([&](Tensor& t) { seen.push_back(t.grad().item()); });
  run_threads([&] {
    for (int i = 0; i < kIterations / 5; ++i) sum(mul(a, 1.0)).backward();
  });
  const int n = kThreads * (kIterations / 5);
  ASSERT_EQ(static_cast<int>(seen.size()), n);
  for (int i = 0; i < n; ++i) EXPECT_EQ(seen[i], i + 1) << "hook " << i;
}

// Threads sharing part of a graph (retain_graph) each run their own backward through it.
TEST(ConcurrentBackward, SharedInteriorNodesWithRetainGraph) {
  Tensor b = ones({3}, TensorOptions().requires_grad(true));
  Tensor hb = mul(b, 3.0);
  Tensor shared = add(hb, 1.0);
  run_threads([&] {
    for (int i = 0; i < kIterations / 5; ++i) sum(shared).backward(Tensor(), true);
  });
  const double wb = 3.0 * kThreads * (kIterations / 5);
  EXPECT_EQ(b.grad().to_vector<double>(), (std::vector<double>{wb, wb, wb}));
}

}  // namespace
}  // namespace lockstep::testing
