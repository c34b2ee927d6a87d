// ProcessGroup::reduce with an epilogue (what the fused optimizer runs inside the last gradient
// reduction): every element reaches exactly one epilogue call, on the rank that summed it on the
// threads backend, with its final value already in dst's buffer; an epilogue's exception comes
// out on its own rank after the collective, and the group stays usable.
#include <gtest/gtest.h>

#include <mutex>
#include <thread>

#include "support/helpers.h"
#include "support/tolerance.h"

namespace lockstep::testing {
namespace {

// Runs body(rank, group) on `size` threads; returns each rank's error message ("" for none).
std::vector<std::string> on_ranks(int size,
                                  const std::function<void(int, dist::ProcessGroup&)>& body) {
  std::vector<std::string> errors;
  for (const auto& e : run_thread_ranks(size, [&](int r, const auto&g) { body(r, *g); }))
    errors.push_back(exception_message(e));
  return errors;
}

TEST(ReduceEpilogue, EveryElementOnceOnTheRankThatSummedItWithItsFinalValue) {
  for (int size : {1, 2, 3})
    for (int dst = 0; dst < size; ++dst) {
      const std::int64_t n = 40013;  // several 8192-element blocks per rank, uneven slices
      std::vector<Tensor> bufs;
      for (int r = 0; r < size; ++r) bufs.push_back(full({n}, r + 1.0));
      // seen[i]: which rank's epilogue got element i (-1: none yet; -2: more than one)
      std::vector<int> seen(static_cast<std::size_t>(n), -1);
      std::vector<char> right(static_cast<std::size_t>(n), 0);
      std::mutex mu;
      const float expected = static_cast<float>(size * (size + 1) / 2);
      auto errors = on_ranks(size, [&](int r, dist::ProcessGroup& g) {
        Tensor& t = bufs[static_cast<std::size_t>(r)];
        g.reduce(t, dst, dist::ReduceOp::Sum, [&](std::int64_t lo, std::int64_t hi) {
          const float* d = bufs[static_cast<std::size_t>(dst)].data_ptr<float>();
          std::lock_guard<std::mutex> lock(mu);
          for (std::int64_t i = lo; i < hi; ++i) {
            auto& s = seen[static_cast<std::size_t>(i)];
            s = s == -1 ? r : -2;
            right[static_cast<std::size_t>(i)] = d[i] == expected;
          }
        });
      });
      for (int r = 0; r < size; ++r) EXPECT_EQ(errors[static_cast<std::size_t>(r)], "");
      for (std::int64_t i = 0; i < n; ++i) {
        // Rank r sums elements [n·r/size, n·(r+1)/size).
        const int want = [&] {
          for (int r = 0; r < size; ++r)
            if (i >= n * r / size && i < n * (r + 1) / size) return r;
          return -1;
        }();
        ASSERT_EQ(seen[static_cast<std::size_t>(i)], want)
            << size << " ranks, dst " << dst << ", element " << i;
        ASSERT_TRUE(right[static_cast<std::size_t>(i)]) << size << " ranks, element " << i;
      }
      EXPECT_TRUE(BitEqual(bufs[static_cast<std::size_t>(dst)], full({n}, expected)));
    }
}

TEST(ReduceEpilogue, AnEpiloguesErrorComesOutOnItsRankAfterTheCollective) {
  auto errors = on_ranks(2, [](int r, dist::ProcessGroup& g) {
    Tensor t = full({20000}, 1.0);
    g.reduce(t, 0, dist::ReduceOp::Sum, [r](std::int64_t, std::int64_t) {
      if (r == 1) throw ValueError("epilogue failed on rank 1");
    });
  });
  EXPECT_EQ(errors[0], "");
  EXPECT_EQ(errors[1], "epilogue failed on rank 1");
  // After an epilogue threw, the ranks are still in step: the next collective works on both.
  auto next = on_ranks(2, [](int r, dist::ProcessGroup& g) {
    Tensor t = full({1000}, 1.0);
    try {
      g.reduce(t, 1, dist::ReduceOp::Sum, [r](std::int64_t, std::int64_t) {
        if (r == 0) throw ValueError("first");
      });
    } catch (const ValueError&) {
    }
    Tensor u = full({5}, r + 1.0);
    g.all_reduce(u);
    if (u.to_vector<float>() != std::vector<float>(5, 3.0f)) throw Error("all_reduce after it");
  });
  EXPECT_EQ(next[0], "");
  EXPECT_EQ(next[1], "");
}

}  // namespace
}  // namespace lockstep::testing
