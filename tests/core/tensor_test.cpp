// Tensor basics: factories, dtype/device tags, Device::parse, Generator, views and indexing,
// splitting, reshape, broadcasting and reductions, each checked against hand-computed values.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "lockstep/core/blas.h"
#include "lockstep/cuda/runtime.h"
#include "support/tolerance.h"

namespace lockstep::testing {
namespace {

Tensor F(std::vector<double> v, Shape s) { return tensor(std::span<const double>(v), s, kFloat32); }
std::vector<double> V(const Tensor& t) { return t.to_vector<double>(); }
std::vector<std::int64_t> I(const Tensor& t) { return t.to_vector<std::int64_t>(); }
std::vector<std::int64_t> dim0_sizes(const std::vector<Tensor>& ts) {
  std::vector<std::int64_t> out;
  for (const auto& t : ts) out.push_back(t.size(0));
  return out;
}

TEST(TensorFactories, ZerosOnesFull) {
  Tensor z = zeros({2, 3});
  EXPECT_EQ(z.shape(), (Shape{2, 3}));
  EXPECT_EQ(z.dtype(), kFloat32);
  EXPECT_EQ(V(z), std::vector<double>(6, 0.0));
  EXPECT_EQ(V(ones({4}, kFloat64)), std::vector<double>(4, 1.0));
  EXPECT_EQ(ones({4}, kFloat64).dtype(), kFloat64);
  EXPECT_EQ(V(full({3}, 2.5)), (std::vector<double>{2.5, 2.5, 2.5}));
  EXPECT_EQ(full({2}, 7, kInt64).dtype(), kInt64);
  EXPECT_EQ(I(full({2}, 7, kInt64)), (std::vector<std::int64_t>{7, 7}));
  EXPECT_EQ(scalar_tensor(3.0).dim(), 0);
  EXPECT_EQ(scalar_tensor(3.0).item(), 3.0);
  EXPECT_THROW(zeros({2, -1}), ValueError);
}

TEST(TensorFactories, Arange) {
  EXPECT_EQ(arange(5).dtype(), kInt64);
  EXPECT_EQ(I(arange(5)), (std::vector<std::int64_t>{0, 1, 2, 3, 4}));
  EXPECT_EQ(V(arange(1, 2, 0.25, kFloat64)), (std::vector<double>{1, 1.25, 1.5, 1.75}));
  EXPECT_EQ(I(arange(5, 0, -2)), (std::vector<std::int64_t>{5, 3, 1}));
  EXPECT_EQ(arange(3, 3).numel(), 0);
  EXPECT_THROW(arange(0, 1, 0), ValueError);
}

TEST(TensorFactories, RandomFactoriesHaveTheRightDistribution) {
  Generator g(123);
  Tensor n = randn({20000}, kFloat64, &g);
  auto v = V(n);
  double mean = std::accumulate(v.begin(), v.end(), 0.0) / v.size(), var = 0;
  for (double x : v) var += (x - mean) * (x - mean);
  var /= v.size();
  EXPECT_NEAR(mean, 0.0, 0.03);  // 4 standard errors (1/sqrt(20000) = 0.007)
  EXPECT_NEAR(var, 1.0, 0.05);

  auto u = V(rand({20000}, kFloat32, &g));
  EXPECT_GE(*std::min_element(u.begin(), u.end()), 0.0);
  EXPECT_LT(*std::max_element(u.begin(), u.end()), 1.0);
  EXPECT_NEAR(std::accumulate(u.begin(), u.end(), 0.0) / u.size(), 0.5, 0.01);

  auto r = I(randint(-2, 3, {1000}, kInt64, &g));
  std::vector<int> counts(5, 0);
  for (auto x : r) {
    ASSERT_GE(x, -2);
    ASSERT_LT(x, 3);
    ++counts[static_cast<std::size_t>(x + 2)];
  }
  for (int c : counts) EXPECT_GT(c, 150);  // every value drawn (expected 200)
  EXPECT_THROW(randint(3, 3, {2}), ValueError);
  EXPECT_THROW(randn({2}, kInt64), DTypeError);

  auto p = I(randperm(50, &g));
  auto sorted = p;
  std::sort(sorted.begin(), sorted.end());
  std::vector<std::int64_t> iota(50);
  std::iota(iota.begin(), iota.end(), 0);
  EXPECT_EQ(sorted, iota);
  EXPECT_NE(p, iota);  // shuffled (the chance of the identity is 1/50!)
}

TEST(TensorFactories, ShapesTooLargeToHoldAreRefused) {
  // 2^32 · 2^32 float32 elements: the byte count overflows 64 bits, which once wrapped to a
  // tiny allocation that kernels then wrote past.
  const std::int64_t big = std::int64_t{1} << 32;
  try {
    (void)empty({big, big});
    ADD_FAILURE() << "no exception";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("[4294967296, 4294967296]"), std::string::npos) << e.what();
  }
  EXPECT_THROW((void)zeros({big, big / 2, 4}), ValueError);  // exactly 2^65 bytes
  EXPECT_EQ(empty({big, big, 0}).numel(), 0);  // a zero dimension holds nothing
}

TEST(TensorFactories, FromVector) {
  Tensor t = F({1, 2, 3, 4, 5, 6}, {2, 3});
  EXPECT_EQ(t.shape(), (Shape{2, 3}));
  EXPECT_EQ(V(t), (std::vector<double>{1, 2, 3, 4, 5, 6}));
  Tensor flat = tensor({1.5f, -2.f});
  EXPECT_EQ(flat.shape(), (Shape{2}));
  std::vector<std::int64_t> iv{4, 5};
  EXPECT_EQ(tensor(std::span<const std::int64_t>(iv)).dtype(), kInt64);
  EXPECT_THROW(F({1, 2, 3}, {2, 2}), ShapeError);
}

TEST(TensorFactories, ZeroSizeDimensions) {
  Tensor e = zeros({0, 5});
  EXPECT_EQ(e.shape(), (Shape{0, 5}));
  EXPECT_EQ(e.numel(), 0);
  EXPECT_EQ(sum(e).item(), 0.0);
  EXPECT_EQ(sum(e, 0).shape(), (Shape{5}));
  EXPECT_EQ(V(sum(e, 0)), std::vector<double>(5, 0.0));
  EXPECT_EQ(sum(e, 1).shape(), (Shape{0}));
  EXPECT_TRUE(std::isnan(mean(e).item()));
  EXPECT_EQ(add(e, ones({5})).shape(), (Shape{0, 5}));
  EXPECT_EQ(matmul(zeros({3, 0}), zeros({0, 4})).shape(), (Shape{3, 4}));
  EXPECT_EQ(V(matmul(ones({3, 0}), ones({0, 4}))), std::vector<double>(12, 0.0));
  EXPECT_EQ(cat({ones({2, 5}), e}, 0).shape(), (Shape{2, 5}));
  EXPECT_THROW(max(e), ShapeError);
}

TEST(TensorTags, DTypeAndDevice) {
  EXPECT_EQ(to_string(kFloat32), "float32");
  EXPECT_EQ(to_string(kFloat64), "float64");
  EXPECT_EQ(to_string(kInt64), "int64");
  EXPECT_EQ(element_size(kFloat32), 4u);
  EXPECT_EQ(element_size(kInt64), 8u);
  EXPECT_EQ(zeros({1}).device(), cpu(0));
  Tensor t = zeros({2}, cpu(3));
  EXPECT_EQ(t.device().str(), "cpu:3");
  EXPECT_EQ(t.to(cpu(1)).device(), cpu(1));
  EXPECT_EQ(V(ones({2}).to(cpu(2))), (std::vector<double>{1, 1}));
  EXPECT_EQ(F({1.5, 2}, {2}).to(kInt64).dtype(), kInt64);
}

TEST(DeviceParse, ValidStrings) {
  EXPECT_EQ(Device::parse("cpu"), cpu(0));
  EXPECT_EQ(Device::parse("cpu:3"), cpu(3));
  Device c = Device::parse("cuda:1");
  EXPECT_TRUE(c.is_cuda());
  EXPECT_EQ(c.index, 1);
  EXPECT_EQ(c.str(), "cuda:1");
  EXPECT_EQ(Device::parse("cuda"), Device(DeviceType::CUDA, 0));
}

TEST(DeviceParse, CudaTensorsAreRefused) {
  try {
    zeros({2}, Device::parse("cuda:1"));
    FAIL() << "expected DeviceError";
  } catch (const DeviceError& e) {
    EXPECT_NE(std::string(e.what()).find("cuda:1"), std::string::npos) << e.what();
  }
  // Where a GPU is present cuda:0 is real (tests/cuda); without one it is refused too.
  if (cuda::device_count() == 0) {
    EXPECT_THROW(ones({2}).to(Device::parse("cuda:0")), DeviceError);
  }
}

TEST(GeneratorTest, SameSeedSameStream) {
  Generator a(42), b(42), c(43);
  std::vector<std::uint32_t> va, vb, vc;
  for (int i = 0; i < 16; ++i) {
    va.push_back(a.next_u32());
    vb.push_back(b.next_u32());
    vc.push_back(c.next_u32());
  }
  EXPECT_EQ(va, vb);
  EXPECT_NE(va, vc);
  a.manual_seed(42);
  EXPECT_EQ(a.offset(), 0u);
  EXPECT_EQ(a.next_u32(), va[0]);
  Generator g1(7), g2(7);
  auto r1 = V(randn({5}, {}, &g1));
  EXPECT_EQ(r1, V(randn({5}, {}, &g2)));
  EXPECT_NE(r1, V(randn({5}, {}, &g1)));  // the stream advances
}

TEST(GeneratorTest, GlobalManualSeed) {
  manual_seed(5);
  auto first = V(randn({6}));
  auto second = V(randn({6}));
  EXPECT_NE(first, second);
  manual_seed(5);
  EXPECT_EQ(V(randn({6})), first);
  EXPECT_EQ(V(randn({6})), second);
}

TEST(Indexing, NarrowDim0IsAView) {
  Tensor base = F({0, 1, 2, 3, 4, 5, 6, 7}, {4, 2});
  Tensor mid = base.narrow(0, 1, 2);
  EXPECT_EQ(mid.shape(), (Shape{2, 2}));
  EXPECT_EQ(V(mid), (std::vector<double>{2, 3, 4, 5}));
  mid.data_ptr<float>()[0] = 100;  // writes through to the base storage
  EXPECT_EQ(V(base)[2], 100.0);
  EXPECT_EQ(V(narrow(base, 1, 0, 1)), (std::vector<double>{0, 100, 4, 6}));
  EXPECT_EQ(V(narrow(base, 0, -1, 1)), (std::vector<double>{6, 7}));  // negative start
  EXPECT_EQ(base.narrow(0, 4, 0).numel(), 0);
  EXPECT_THROW(base.narrow(0, 3, 2), IndexError);
}

TEST(Indexing, IndexSelect) {
  Tensor a = F({0, 1, 2, 3, 4, 5}, {3, 2});
  std::vector<std::int64_t> idx{2, 0, 2};
  Tensor i = tensor(std::span<const std::int64_t>(idx));
  EXPECT_EQ(V(index_select(a, 0, i)), (std::vector<double>{4, 5, 0, 1, 4, 5}));
  std::vector<std::int64_t> cols{1, 1, 0};
  Tensor c = tensor(std::span<const std::int64_t>(cols));
  Tensor s = index_select(a, 1, c);
  EXPECT_EQ(s.shape(), (Shape{3, 3}));
  EXPECT_EQ(V(s), (std::vector<double>{1, 1, 0, 3, 3, 2, 5, 5, 4}));
  std::vector<std::int64_t> bad{3};
  EXPECT_THROW(index_select(a, 0, tensor(std::span<const std::int64_t>(bad))), IndexError);
}

TEST(Indexing, Cat) {
  Tensor a = F({1, 2, 3, 4}, {2, 2}), b = F({5, 6}, {1, 2});
  EXPECT_EQ(V(cat({a, b}, 0)), (std::vector<double>{1, 2, 3, 4, 5, 6}));
  Tensor c = F({7, 8}, {2, 1});
  Tensor ac = cat({a, c}, 1);
  EXPECT_EQ(ac.shape(), (Shape{2, 3}));
  EXPECT_EQ(V(ac), (std::vector<double>{1, 2, 7, 3, 4, 8}));
  EXPECT_THROW(cat({a, c}, 0), ShapeError);
}

TEST(Splitting, ChunkFollowsTorchChunk) {
  Tensor x = arange(9);
  EXPECT_EQ(dim0_sizes(chunk(x, 4)), (std::vector<std::int64_t>{3, 3, 3}));
  EXPECT_EQ(dim0_sizes(chunk(arange(10), 4)), (std::vector<std::int64_t>{3, 3, 3, 1}));
  EXPECT_EQ(dim0_sizes(chunk(arange(6), 4)), (std::vector<std::int64_t>{2, 2, 2}));
  EXPECT_EQ(dim0_sizes(chunk(arange(2), 4)), (std::vector<std::int64_t>{1, 1}));
  EXPECT_EQ(I(chunk(x, 4)[2]), (std::vector<std::int64_t>{6, 7, 8}));
}

TEST(Splitting, TensorSplitSizesDifferByAtMostOneLargerFirst) {
  EXPECT_EQ(dim0_sizes(tensor_split(arange(9), 4)), (std::vector<std::int64_t>{3, 2, 2, 2}));
  EXPECT_EQ(dim0_sizes(tensor_split(arange(13), 4)), (std::vector<std::int64_t>{4, 3, 3, 3}));
  EXPECT_EQ(dim0_sizes(tensor_split(arange(3), 4)), (std::vector<std::int64_t>{1, 1, 1, 0}));
  EXPECT_EQ(split_sizes(9, 4), (std::vector<std::int64_t>{3, 2, 2, 2}));
  auto parts = tensor_split(arange(9), 4);
  std::vector<std::int64_t> joined;
  for (auto& p : parts)
    for (auto v : I(p)) joined.push_back(v);
  EXPECT_EQ(joined, I(arange(9)));  // nothing dropped or duplicated, order kept
  auto cols = tensor_split(F({0, 1, 2, 3, 4, 5, 6, 7, 8, 9}, {2, 5}), 2, 1);
  EXPECT_EQ(V(cols[0]), (std::vector<double>{0, 1, 2, 5, 6, 7}));
  EXPECT_EQ(V(cols[1]), (std::vector<double>{3, 4, 8, 9}));
}

TEST(ShapeOps, ReshapeWithInferredDimension) {
  Tensor x = arange(12);
  EXPECT_EQ(x.reshape({3, -1}).shape(), (Shape{3, 4}));
  EXPECT_EQ(x.reshape({-1, 2, 3}).shape(), (Shape{2, 2, 3}));
  EXPECT_EQ(I(x.reshape({3, -1}).narrow(0, 1, 1)), (std::vector<std::int64_t>{4, 5, 6, 7}));
  EXPECT_THROW(x.reshape({-1, -1}), ShapeError);
  EXPECT_THROW(x.reshape({5, -1}), ShapeError);
  EXPECT_THROW(x.reshape({5, 2}), ShapeError);
  EXPECT_EQ(zeros({0, 5}).reshape({-1, 5}).shape(), (Shape{0, 5}));
  EXPECT_EQ(V(t(F({1, 2, 3, 4, 5, 6}, {2, 3}))), (std::vector<double>{1, 4, 2, 5, 3, 6}));
}

TEST(Broadcasting, ShapesAndValues) {
  Tensor col = F({1, 2}, {2, 1}), row = F({10, 20, 30}, {3});
  Tensor s = add(col, row);
  EXPECT_EQ(s.shape(), (Shape{2, 3}));
  EXPECT_EQ(V(s), (std::vector<double>{11, 21, 31, 12, 22, 32}));
  EXPECT_EQ(V(sub(row, scalar_tensor(1))), (std::vector<double>{9, 19, 29}));
  EXPECT_EQ(V(mul(F({2}, {1}), row)), (std::vector<double>{20, 40, 60}));
  EXPECT_TRUE(AllClose(div(F({1, 2, 3, 4, 5, 6}, {2, 3}), row),
                       F({0.1, 0.1, 0.1, 0.4, 0.25, 0.2}, {2, 3})));
  EXPECT_EQ(add(zeros({2, 1, 4}), zeros({3, 1})).shape(), (Shape{2, 3, 4}));
  EXPECT_THROW(add(zeros({2, 3}), zeros({2})), ShapeError);
  EXPECT_EQ(I(eq(F({1, 2, 3}, {3}), F({1, 0, 3}, {3}))), (std::vector<std::int64_t>{1, 0, 1}));
}

// torch.eq(inf, inf) and torch.eq(-inf, -inf) are True; eq computed as a − b == 0 alone said 0
// (inf − inf is NaN). Values from PyTorch 1.13:
//   torch.eq(torch.tensor([inf, -inf, inf, nan, 0., 1e38]), torch.tensor([inf, -inf, -inf, nan,
//   -0., 1e38]))
//   -> [True, True, False, False, True, True]; broadcast [[inf], [1]] vs [inf, 1, -inf]
//   -> [[True, False, False], [False, True, False]]
TEST(Broadcasting, EqHoldsForEqualInfinities) {
  const double inf = std::numeric_limits<double>::infinity(), nan = std::nan("");
  for (DType dt : {kFloat32, kFloat64}) {
    Tensor a = F({inf, -inf, inf, nan, 0.0, 1e38}, {6}).to(dt);
    Tensor b = F({inf, -inf, -inf, nan, -0.0, 1e38}, {6}).to(dt);
    EXPECT_EQ(I(eq(a, b)), (std::vector<std::int64_t>{1, 1, 0, 0, 1, 1})) << to_string(dt);
    EXPECT_EQ(I(eq(F({inf, 1}, {2, 1}).to(dt), F({inf, 1, -inf}, {3}).to(dt))),
              (std::vector<std::int64_t>{1, 0, 0, 0, 1, 0}))
        << to_string(dt);
    EXPECT_EQ(I(eq(F({inf}, {1}).to(dt), F({nan}, {1}).to(dt))), (std::vector<std::int64_t>{0}));
  }
  const std::int64_t big = std::numeric_limits<std::int64_t>::max();
  Tensor ia = tensor(std::vector<std::int64_t>{big, -big - 1, 3}),
         ib = tensor(std::vector<std::int64_t>{big, big, 3});
  EXPECT_EQ(I(eq(ia, ib)), (std::vector<std::int64_t>{1, 0, 1}));
}

// int64 arithmetic wraps modulo 2^64 as PyTorch's does (torch.tensor([2**63 - 1]) + 1 ==
// -2**63); it was C++ signed overflow, undefined behaviour that UBSan reported in eq's int64
// difference. Expected values: Python integers reduced modulo 2^64 into [-2^63, 2^63).
TEST(Int64Arithmetic, OverflowWrapsAsTwosComplement) {
  const std::int64_t M = std::numeric_limits<std::int64_t>::max(), m = -M - 1;
  using V = std::vector<std::int64_t>;
  const Tensor a = tensor(V{M, m, 3}), b = tensor(V{1, -1, M});
  EXPECT_EQ(I(add(a, b)), (V{m, M, -9223372036854775806}));
  EXPECT_EQ(I(sub(a, b)), (V{9223372036854775806, -9223372036854775807, -9223372036854775804}));
  EXPECT_EQ(I(mul(a, b)), (V{M, m, 9223372036854775805}));
  EXPECT_EQ(I(neg(a)), (V{-9223372036854775807, m, -3}));
  EXPECT_EQ(I(sum(a)), (V{2}));
  EXPECT_EQ(I(sum(tensor(V{M, 1, 1, M}).reshape({2, 2}), 0)), (V{m, m}));
  EXPECT_EQ(I(add(tensor(V{M, M}).reshape({2, 1}), tensor(V{1, 2, 3}))),  // broadcasting kernel
            (V{m, m + 1, m + 2, m, m + 1, m + 2}));
  Tensor c = a.clone();
  c.add_(b);
  EXPECT_EQ(I(c), (V{m, M, -9223372036854775806}));
  c = a.clone();
  c.add_(b, 3.0);
  EXPECT_EQ(I(c), (V{-9223372036854775806, 9223372036854775805, m}));
  c = a.clone();
  c.mul_(2.0);
  EXPECT_EQ(I(c), (V{-2, 0, 6}));
  EXPECT_EQ(I(eq(a, b)), (V{0, 0, 0}));  // M − 1 ≠ 0 and m − (−1) ≠ 0, not an overflow
}

// An int64 tensor and a scalar no int64 holds: torch.tensor([1, 2]) + 1.5 is tensor([2.5, 3.5])
// (float32, PyTorch 1.13's type promotion), and torch.tensor([3]) / 2 is tensor([1.5]); the
// scalar was truncated (x + 1.5 gave [2, 3], x / 2 gave [0, 1]), and a scalar beyond int64's range
// was converted to int64 (undefined behaviour). In place, PyTorch refuses: x.add_(y, alpha=1.5)
// and x.mul_(1.5) raise; here DTypeError naming the op, and x is unchanged.
TEST(Int64Arithmetic, NonIntegralScalarsPromoteToFloat32) {
  using V = std::vector<std::int64_t>;
  const Tensor x = tensor(V{1, 2});
  Tensor r = add(x, 1.5);
  EXPECT_EQ(r.dtype(), kFloat32);
  EXPECT_EQ(r.to_vector<double>(), (std::vector<double>{2.5, 3.5}));
  r = x / 2.0;
  EXPECT_EQ(r.dtype(), kFloat32);
  EXPECT_EQ(r.to_vector<double>(), (std::vector<double>{0.5, 1.0}));
  r = mul(x, 1e30);
  EXPECT_EQ(r.dtype(), kFloat32);
  EXPECT_EQ(r.to_vector<double>(), (std::vector<double>{1e30f, 2e30f}));
  EXPECT_TRUE(std::isnan(add(x, std::nan("")).to_vector<double>()[0]));
  r = x + 2.0;  // an integral scalar keeps int64, as LibTorch's `x + 2`
  EXPECT_EQ(r.dtype(), kInt64);
  EXPECT_EQ(I(r), (V{3, 4}));
  EXPECT_EQ(I(x - 1.0), (V{0, 1}));
  Tensor y = x.clone();
  EXPECT_THROW(y.add_(x, 1.5), DTypeError);
  EXPECT_THROW(y.mul_(0.5), DTypeError);
  try {
    y.mul_(1e30);
    ADD_FAILURE() << "mul_(1e30) on int64 was accepted";
  } catch (const DTypeError& e) {
    EXPECT_NE(std::string(e.what()).find("mul_"), std::string::npos) << e.what();
  }
  EXPECT_EQ(I(y), (V{1, 2}));
  y.add_(x, 2.0);
  EXPECT_EQ(I(y), (V{3, 6}));
}

// torch's `/` is true division: an int64 tensor divided by any scalar is float32, also when the
// reciprocal is an integer (x / 1, x / 0.5, x / -1 stayed int64 here, as a · (1/s)), and the
// quotient is the float32 division, not a product with a rounded reciprocal (-7 / 3 gave
// -2.33333349). PyTorch 1.13, x = torch.tensor([3, -7, 0, 16777217]):
//   x / 1    -> float32 [3.0, -7.0, 0.0, 16777216.0]
//   x / 0.5  -> float32 [6.0, -14.0, 0.0, 33554432.0]
//   x / -1   -> float32 [-3.0, 7.0, -0.0, -16777216.0]
//   x / 3    -> float32 [1.0, -2.3333332538604736, 0.0, 5592405.5]
//   x / 10   -> float32 [0.30000001192092896, -0.699999988079071, 0.0, 1677721.625]
TEST(Int64Arithmetic, DivisionByAScalarIsTrueDivisionInFloat32) {
  const Tensor x = tensor(std::vector<std::int64_t>{3, -7, 0, 16777217});
  const std::vector<std::pair<double, std::vector<double>>> cases = {
      {1.0, {3.0, -7.0, 0.0, 16777216.0}},
      {0.5, {6.0, -14.0, 0.0, 33554432.0}},
      {-1.0, {-3.0, 7.0, -0.0, -16777216.0}},
      {3.0, {1.0, -2.3333332538604736, 0.0, 5592405.5}},
      {10.0, {0.30000001192092896, -0.699999988079071, 0.0, 1677721.625}}};
  for (const auto& [s, want] : cases) {
    const Tensor r = x / s;
    EXPECT_EQ(r.dtype(), kFloat32) << "x / " << s;
    EXPECT_EQ(r.to_vector<double>(), want) << "x / " << s;
  }
}

// a - s for an int64 tensor follows add's rule for s itself: -2^63 is an int64 (the difference
// wraps), 2^63 is not (float32). It was a + (-s): x - (-2^63) gave float32 and x - 2^63 int64.
// PyTorch 1.13, x = torch.tensor([3, -7, 0]):
//   x - (-2**63)  -> int64 [-9223372036854775805, 9223372036854775801, -9223372036854775808]
//   x - 2.0**63   -> float32 [-9.223372036854776e+18] * 3
TEST(Int64Arithmetic, SubtractingTwoToThe63FollowsTheScalarsOwnRule) {
  using V = std::vector<std::int64_t>;
  const Tensor x = tensor(V{3, -7, 0});
  Tensor r = x - (-0x1p63);
  EXPECT_EQ(r.dtype(), kInt64);
  EXPECT_EQ(I(r), (V{-9223372036854775805, 9223372036854775801,
                     std::numeric_limits<std::int64_t>::min()}));
  r = x - 0x1p63;
  EXPECT_EQ(r.dtype(), kFloat32);
  EXPECT_EQ(r.to_vector<double>(), (std::vector<double>(3, -0x1p63)));
}

// torch.zeros(2, dtype=torch.long).fill_(1e30) raises "value cannot be converted to type int64_t
// without overflow" (NaN too); fill_ converted the double, undefined behaviour in C++ (it gave
// -2^63 here). A fraction truncates toward zero as in PyTorch (fill_(-1.5) gives -1).
TEST(Int64Arithmetic, FillWithAValueOutsideInt64IsRefused) {
  using V = std::vector<std::int64_t>;
  for (double bad : {1e30, -1e30, 0x1p63, std::nan(""), std::numeric_limits<double>::infinity()}) {
    Tensor t = zeros({2}, kInt64);
    EXPECT_THROW(t.fill_(bad), ValueError) << bad;
    EXPECT_EQ(I(t), (V{0, 0}));
    EXPECT_THROW(full({2}, bad, kInt64), ValueError) << bad;
  }
  EXPECT_EQ(I(full({2}, -0x1p63, kInt64)), (V{std::numeric_limits<std::int64_t>::min(),
                                             std::numeric_limits<std::int64_t>::min()}));
  EXPECT_EQ(I(zeros({1}, kInt64).fill_(-1.5)), (V{-1}));
}

// torch.tensor([-7., 1., 10., 0.1]) / 3 in PyTorch 1.13 (float32): [-2.3333332538604736,
// 0.3333333432674408, 3.3333332538604736, 0.03333333507180214], a true division; `/` was the
// product with the rounded reciprocal 1/3, which gives -2.3333334922790527 and 3.3333334922790527.
// Its gradient is g / 3 (DivBackward), also as PyTorch's.
TEST(Broadcasting, FloatDivisionByAScalarIsATrueDivision) {
  Tensor x = F({-7, 1, 10, 0.1}, {4});
  EXPECT_EQ(V(x / 3.0), (std::vector<double>{-2.3333332538604736, 0.3333333432674408,
                                             3.3333332538604736, 0.03333333507180214}));
  x.requires_grad_(true);
  sum(x / 3.0).backward();
  EXPECT_EQ(V(x.grad()), (std::vector<double>(4, static_cast<double>(1.0f / 3.0f))));
}

// When the CLI restarts with OPENBLAS_CORETYPE (lockstep/core/blas.h): only when the user set
// none, OpenBLAS fell back to its generic Prescott kernels, and the CPU has better ones.
TEST(OpenBlasKernels, RestartOnlyReplacesPrescottWhenTheUserSetNothing) {
  EXPECT_EQ(openblas_coretype_to_set(false, "Prescott", "Cooperlake"), "Cooperlake");
  EXPECT_EQ(openblas_coretype_to_set(false, "PRESCOTT", "Haswell"), "Haswell");
  EXPECT_EQ(openblas_coretype_to_set(true, "Prescott", "Cooperlake"), "");  // the user's choice
  EXPECT_EQ(openblas_coretype_to_set(false, "Zen", "Haswell"), "");         // recognised CPU
  EXPECT_EQ(openblas_coretype_to_set(false, "Cooperlake", "Cooperlake"), "");
  EXPECT_EQ(openblas_coretype_to_set(false, "Prescott", ""), "");  // SSE3 only: Prescott is right
  EXPECT_FALSE(openblas_core().empty());
  const std::string c = openblas_coretype_for_cpu();
  EXPECT_TRUE(c.empty() || c == "Cooperlake" || c == "SkylakeX" || c == "Haswell" ||
              c == "SandyBridge")
      << c;
}

// torch.max(x, dim) and torch.argmax propagate NaN with the first NaN's index; max along a
// dimension kept a NaN only at index 0 (and argmax of the whole tensor, max along dim 0 of the
// flattened tensor, with it). Values from PyTorch 1.13 for
//   x = torch.tensor([[1., nan, 3., nan], [2., 2., 1., 0.], [nan, 5., nan, 1.]]):
//   torch.max(x, 1) -> values [nan, 2, nan], indices [1, 0, 0]
//   torch.max(x, 0) -> values [nan, nan, nan, nan], indices [2, 0, 2, 0]
//   torch.argmax(x) -> 1; torch.argmax(x.t().contiguous()) -> 2; argmax(x, 1, keepdim) ->
//   [[1],[0],[0]]
TEST(Reductions, MaxAndArgmaxPropagateTheFirstNan) {
  const double nan = std::nan("");
  for (DType dt : {kFloat32, kFloat64}) {
    Tensor x = F({1, nan, 3, nan, 2, 2, 1, 0, nan, 5, nan, 1}, {3, 4}).to(dt);
    auto [v1, i1] = max(x, 1);
    EXPECT_EQ(I(i1), (std::vector<std::int64_t>{1, 0, 0})) << to_string(dt);
    EXPECT_TRUE(std::isnan(V(v1)[0]) && V(v1)[1] == 2 && std::isnan(V(v1)[2])) << to_string(dt);
    auto [v0, i0] = max(x, -2);
    EXPECT_EQ(I(i0), (std::vector<std::int64_t>{2, 0, 2, 0})) << to_string(dt);
    for (double v : V(v0)) EXPECT_TRUE(std::isnan(v)) << to_string(dt);
    EXPECT_EQ(argmax(x).item<std::int64_t>(), 1) << to_string(dt);
    EXPECT_EQ(argmax(t(x)).item<std::int64_t>(), 2) << to_string(dt);
    Tensor k = argmax(x, 1, true);
    EXPECT_EQ(k.shape(), (Shape{3, 1}));
    EXPECT_EQ(I(k), (std::vector<std::int64_t>{1, 0, 0})) << to_string(dt);
    // the gradient of max along a dimension goes to the NaN's position
    Tensor xg = x.detach().requires_grad_();
    sum(max(xg, 1).first).backward();
    EXPECT_EQ(V(xg.grad()), (std::vector<double>{0, 1, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0}));
  }
}

TEST(Reductions, SumMeanMaxArgmaxWithKeepdim) {
  Tensor x = F({1, 5, 3, 4, 2, 6}, {2, 3});
  EXPECT_EQ(sum(x).item(), 21.0);
  EXPECT_EQ(V(sum(x, 0)), (std::vector<double>{5, 7, 9}));
  EXPECT_EQ(sum(x, 1, true).shape(), (Shape{2, 1}));
  EXPECT_EQ(V(sum(x, -1, true)), (std::vector<double>{9, 12}));
  EXPECT_EQ(mean(x).item(), 3.5);
  EXPECT_EQ(V(mean(x, 0)), (std::vector<double>{2.5, 3.5, 4.5}));
  EXPECT_EQ(mean(x, 1, true).shape(), (Shape{2, 1}));
  EXPECT_EQ(V(mean(x, 1, true)), (std::vector<double>{3, 4}));
  EXPECT_EQ(max(x).item(), 6.0);
  auto [vals, idx] = max(x, 1);
  EXPECT_EQ(V(vals), (std::vector<double>{5, 6}));
  EXPECT_EQ(I(idx), (std::vector<std::int64_t>{1, 2}));
  auto [v0, i0] = max(x, 0, true);
  EXPECT_EQ(v0.shape(), (Shape{1, 3}));
  EXPECT_EQ(V(v0), (std::vector<double>{4, 5, 6}));
  EXPECT_EQ(I(i0), (std::vector<std::int64_t>{1, 0, 1}));
  EXPECT_EQ(I(argmax(x, 0)), (std::vector<std::int64_t>{1, 0, 1}));
  EXPECT_EQ(argmax(x, 1, true).shape(), (Shape{2, 1}));
  EXPECT_EQ(argmax(x).item(), 5.0);
  EXPECT_EQ(I(argmax(F({2, 7, 7}, {3}), 0)), (std::vector<std::int64_t>{1}));  // first on ties
  EXPECT_EQ(sum(arange(5)).dtype(), kInt64);
  EXPECT_EQ(sum(arange(5)).item(), 10.0);
}

TEST(Reductions, ResultsStayOnTheInputsDevice) {
  // Regression: max(a, dim) created its indices on the default device, so argmax of a replica's
  // logits on cpu:3 came back tagged cpu:0.
  const Device d = Device::parse("cpu:3");
  Tensor x = F({1, 5, 3, 4, 2, 6}, {2, 3}).to(d);
  auto [vals, idx] = max(x, 1);
  EXPECT_EQ(vals.device(), d);
  EXPECT_EQ(idx.device(), d);
  EXPECT_EQ(argmax(x, 1).device(), d);
  EXPECT_EQ(argmax(x).device(), d);
  EXPECT_EQ(sum(x, 0).device(), d);
  EXPECT_EQ(mean(x).device(), d);
  EXPECT_EQ(max(x).device(), d);
}

TEST(LinearAlgebra, MatmulMatchesHandComputation) {
  Tensor a = F({1, 2, 3, 4, 5, 6}, {2, 3}), b = F({7, 8, 9, 10, 11, 12}, {3, 2});
  // [[1*7+2*9+3*11, 1*8+2*10+3*12], [4*7+5*9+6*11, 4*8+5*10+6*12]]
  Tensor c = matmul(a, b);
  EXPECT_EQ(c.shape(), (Shape{2, 2}));
  EXPECT_EQ(V(c), (std::vector<double>{58, 64, 139, 154}));
  std::vector<double> ad{1, 2, 3, 4, 5, 6}, bd{1, 0, -1};
  Tensor cd = matmul(tensor(std::span<const double>(ad), {2, 3}),
                     tensor(std::span<const double>(bd), {3, 1}));
  EXPECT_EQ(cd.dtype(), kFloat64);
  EXPECT_EQ(V(cd), (std::vector<double>{-2, -2}));
  EXPECT_THROW(matmul(a, a), ShapeError);
}

}  // namespace
}  // namespace lockstep::testing
