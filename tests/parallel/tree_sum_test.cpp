// The fixed pairwise tree of deterministic mode (include/lockstep/ops/detail/tree_sum.h), pinned without a GPU:
// the CPU's tree_sum_columns / tree_sum and the CUDA kernel kernels::cuda::tree_sum_rows all walk
// for_each_tree_pair, so a change to the shared schedule fails here (and the kernel is compared
// with tree_sum_columns bit for bit on a GPU in tests/cuda/tree_sum_cuda_test.cpp). Expected
// values are written out by hand below, one association per row count.
#include "lockstep/ops/detail/tree_sum.h"

#include <gtest/gtest.h>

#include <bit>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace lockstep::testing {
namespace {

using parallel::detail::for_each_tree_pair;
using parallel::detail::tree_sum;
using parallel::detail::tree_sum_columns;

using Pairs = std::vector<std::pair<std::int64_t, std::int64_t>>;

Pairs pairs_of(std::int64_t rows) {
  Pairs out;
  for_each_tree_pair(rows, [&](std::int64_t dst, std::int64_t src) { out.emplace_back(dst, src); });
  return out;
}

// The (destination, source) pairs in order, level by level (stride 1, 2, 4, 8).
TEST(TreeSchedule, PairsForOneToNineRows) {
  EXPECT_EQ(pairs_of(0), Pairs{});
  EXPECT_EQ(pairs_of(1), Pairs{});
  EXPECT_EQ(pairs_of(2), (Pairs{{0, 1}}));
  EXPECT_EQ(pairs_of(3), (Pairs{{0, 1}, {0, 2}}));
  EXPECT_EQ(pairs_of(4), (Pairs{{0, 1}, {2, 3}, {0, 2}}));
  EXPECT_EQ(pairs_of(5), (Pairs{{0, 1}, {2, 3}, {0, 2}, {0, 4}}));
  EXPECT_EQ(pairs_of(6), (Pairs{{0, 1}, {2, 3}, {4, 5}, {0, 2}, {0, 4}}));
  EXPECT_EQ(pairs_of(7), (Pairs{{0, 1}, {2, 3}, {4, 5}, {0, 2}, {4, 6}, {0, 4}}));
  EXPECT_EQ(pairs_of(8), (Pairs{{0, 1}, {2, 3}, {4, 5}, {6, 7}, {0, 2}, {4, 6}, {0, 4}}));
  EXPECT_EQ(pairs_of(9), (Pairs{{0, 1}, {2, 3}, {4, 5}, {6, 7}, {0, 2}, {4, 6}, {0, 4}, {0, 8}}));
  for (std::int64_t rows = 1; rows <= 40; ++rows)
    EXPECT_EQ(static_cast<std::int64_t>(pairs_of(rows).size()), rows - 1) << rows << " rows";
}

// A value that records how it was summed: tree_sum_columns<Expr> writes the association.
struct Expr {
  std::string s;
  Expr& operator+=(const Expr& o) {
    s = "(" + s + "+" + o.s + ")";
    return *this;
  }
};

// tree_sum_columns itself (the function the CPU path calls), on every column of [rows, 3] and on
// a column range: the association of each row count, written out.
TEST(TreeSchedule, TreeSumColumnsAssociatesInTheTreeOrder) {
  const std::vector<std::string> expected = {
      "r0",
      "(r0+r1)",
      "((r0+r1)+r2)",
      "((r0+r1)+(r2+r3))",
      "(((r0+r1)+(r2+r3))+r4)",
      "(((r0+r1)+(r2+r3))+(r4+r5))",
      "(((r0+r1)+(r2+r3))+((r4+r5)+r6))",
      "(((r0+r1)+(r2+r3))+((r4+r5)+(r6+r7)))",
      "((((r0+r1)+(r2+r3))+((r4+r5)+(r6+r7)))+r8)",
  };
  const std::int64_t width = 3;
  for (std::int64_t rows = 1; rows <= 9; ++rows) {
    std::vector<Expr> buf(static_cast<std::size_t>(rows * width));
    for (std::int64_t r = 0; r < rows; ++r)
      for (std::int64_t j = 0; j < width; ++j)
        buf[static_cast<std::size_t>(r * width + j)].s = "r" + std::to_string(r);
    // Columns [1, 3) first, then [0, 1): as two device workers split them.
    tree_sum_columns(buf.data(), rows, width, 1, width);
    EXPECT_EQ(buf[0].s, "r0") << rows << " rows: column 0 is outside [1, 3)";
    tree_sum_columns(buf.data(), rows, width, 0, 1);
    for (std::int64_t j = 0; j < width; ++j)
      EXPECT_EQ(buf[static_cast<std::size_t>(j)].s, expected[static_cast<std::size_t>(rows - 1)])
          << rows << " rows, column " << j;
  }
}

// float values for which the association matters: the tree's result differs from the left fold
// for 4 to 9 rows (and from the right fold for 3). Found by a search in Python with numpy.float32
// (the tree, the left fold and the right fold of prefixes of candidate values).
constexpr float kV[9] = {-3.0f, 7.0f, -1e8f, 7.0f, 3.0f, 3.0f, -1e8f, -5e7f, -3.0f};

float hand_tree(int rows) {
  const float* v = kV;
  switch (rows) {
    case 1:
      return v[0];
    case 2:
      return v[0] + v[1];
    case 3:
      return (v[0] + v[1]) + v[2];
    case 4:
      return (v[0] + v[1]) + (v[2] + v[3]);
    case 5:
      return ((v[0] + v[1]) + (v[2] + v[3])) + v[4];
    case 6:
      return ((v[0] + v[1]) + (v[2] + v[3])) + (v[4] + v[5]);
    case 7:
      return ((v[0] + v[1]) + (v[2] + v[3])) + ((v[4] + v[5]) + v[6]);
    case 8:
      return ((v[0] + v[1]) + (v[2] + v[3])) + ((v[4] + v[5]) + (v[6] + v[7]));
    default:
      return (((v[0] + v[1]) + (v[2] + v[3])) + ((v[4] + v[5]) + (v[6] + v[7]))) + v[8];
  }
}

TEST(TreeSchedule, FloatSumsFollowTheTreeBitForBit) {
  for (int rows = 1; rows <= 9; ++rows) {
    // Two columns: kV, and kV negated (the sign must not change the order).
    std::vector<float> buf(static_cast<std::size_t>(rows) * 2);
    for (int r = 0; r < rows; ++r) {
      buf[static_cast<std::size_t>(r) * 2] = kV[r];
      buf[static_cast<std::size_t>(r) * 2 + 1] = -kV[r];
    }
    tree_sum_columns(buf.data(), rows, 2, 0, 2);
    const float want = hand_tree(rows);
    EXPECT_EQ(std::bit_cast<std::uint32_t>(buf[0]), std::bit_cast<std::uint32_t>(want))
        << rows << " rows: " << buf[0] << " vs " << want;
    EXPECT_EQ(std::bit_cast<std::uint32_t>(buf[1]), std::bit_cast<std::uint32_t>(-want))
        << rows << " rows, negated column";
    // The values do tell the orders apart: a left fold gives other bits from 4 rows on.
    float left = kV[0];
    for (int r = 1; r < rows; ++r) left += kV[r];
    if (rows >= 4) EXPECT_NE(left, want) << rows << " rows";
    if (rows == 3) EXPECT_NE(kV[0] + (kV[1] + kV[2]), want);
  }
}

// tree_sum (the shard losses) walks the same tree in double: equal to tree_sum_columns<double>
// for 1 to 9 values, and to the written-out tree for 9 values, which differs from the left fold
// for 4 to 9 values (double values found by the same search in Python).
TEST(TreeSchedule, TreeSumOfLossesFollowsTheTree) {
  EXPECT_EQ(tree_sum({}), 0.0);
  const std::vector<double> v = {7.0, 1.0, 0.5, 1e17, 0.5, 0.5, -5e16, -5e16, 1e17};
  for (std::size_t rows = 1; rows <= v.size(); ++rows) {
    std::vector<double> part(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(rows));
    std::vector<double> cols = part;
    tree_sum_columns(cols.data(), static_cast<std::int64_t>(rows), 1, 0, 1);
    EXPECT_EQ(std::bit_cast<std::uint64_t>(tree_sum(part)), std::bit_cast<std::uint64_t>(cols[0]))
        << rows << " rows";
    double left = part[0];
    for (std::size_t r = 1; r < rows; ++r) left += part[r];
    if (rows >= 4) EXPECT_NE(left, tree_sum(part)) << rows << " values";
  }
  const double nine = (((v[0] + v[1]) + (v[2] + v[3])) + ((v[4] + v[5]) + (v[6] + v[7]))) + v[8];
  EXPECT_EQ(std::bit_cast<std::uint64_t>(tree_sum(v)), std::bit_cast<std::uint64_t>(nine));
}

}  // namespace
}  // namespace lockstep::testing
