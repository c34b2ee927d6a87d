// data::random_windows (nanoGPT's get_batch): the windows are consecutive tokens with targets
// shifted by one, offsets cover [0, N - block - 1] and nothing beyond, the same generator state
// gives the same windows, and bad sizes are refused.
#include <gtest/gtest.h>

#include <set>

#include "lockstep/lockstep.h"
#include "support/helpers.h"

namespace lockstep {
namespace {

TEST(RandomWindows, ConsecutiveTokensWithTargetsShiftedByOne) {
  const Tensor tokens = arange(100, 120);  // token i is 100 + i
  Generator gen(3);
  auto [x, y] = data::random_windows(tokens, 4, 400, gen);
  ASSERT_EQ(x.shape(), Shape({400, 4}));
  ASSERT_EQ(y.shape(), Shape({400, 4}));
  std::set<std::int64_t> starts;
  const auto xs = x.to_vector<std::int64_t>(), ys = y.to_vector<std::int64_t>();
  for (std::size_t b = 0; b < 400; ++b) {
    const std::int64_t first = xs[b * 4];
    starts.insert(first - 100);
    for (std::size_t j = 0; j < 4; ++j) {
      EXPECT_EQ(xs[b * 4 + j], first + static_cast<std::int64_t>(j));
      EXPECT_EQ(ys[b * 4 + j], first + static_cast<std::int64_t>(j) + 1);
    }
  }
  // randint(0, N - block): offsets 0 ... 15 for N = 20, block = 4 (the last window ends at 19).
  EXPECT_EQ(*starts.begin(), 0);
  EXPECT_EQ(*starts.rbegin(), 15);
  EXPECT_EQ(starts.size(), 16u);
  // The same state, the same windows; the generator advanced as randint's draws.
  Generator again(3);
  EXPECT_EQ(data::random_windows(tokens, 4, 400, again).first.to_vector<std::int64_t>(), xs);
  EXPECT_EQ(again.offset(), gen.offset());
  Generator same(3);
  randint(0, 16, {400}, kInt64, &same);
  EXPECT_EQ(same.offset(), gen.offset());
}

TEST(RandomWindows, RefusesBadSizes) {
  Generator gen(0);
  testing::expect_error<ValueError>([&] { data::random_windows(arange(5), 5, 1, gen); },
                                    {"5 tokens", "block + 1 = 6"});
  testing::expect_error<ValueError>([&] { data::random_windows(arange(5), 0, 1, gen); },
                                    {"block (0)"});
  testing::expect_error<ValueError>([&] { data::random_windows(arange(5), 2, 0, gen); },
                                    {"batch (0)"});
  testing::expect_error<DTypeError>([&] { data::random_windows(zeros({5}), 2, 1, gen); },
                                    {"1-d int64"});
}

}  // namespace
}  // namespace lockstep
