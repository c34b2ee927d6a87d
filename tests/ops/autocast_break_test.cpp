// Breaker probes of autocast (include/lockstep/ops/autocast.h) with odd inputs: shapes matmul
// does not take, empty operands, 1-d and 3-d inputs of linear, mixed dtypes, gradient
// accumulation across two backward passes, the guard under exceptions and threads, and
// round_to_bfloat16 against an independent oracle and on tensors long enough to be rounded by
// the intra-op team.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <thread>
#include <vector>

#include "lockstep/ops/detail/op_utils.h"
#include "support/bf16_emulation.h"
#include "support/helpers.h"
#include "support/tolerance.h"

namespace lockstep::testing {
namespace {

std::uint32_t bits(float f) { return std::bit_cast<std::uint32_t>(f); }
float from_bits(std::uint32_t b) { return std::bit_cast<float>(b); }

// Independent oracle: the nearest of the two bf16 neighbours of a finite x, compared in double
// (exact for floats), ties to the one with an even last bf16 bit; beyond the largest bf16 value
// the rounding overflows to inf as IEEE's round-to-nearest does (halfway is 0x7f7f8000).
std::uint32_t oracle(std::uint32_t x) {
  const std::uint32_t sign = x & 0x80000000u, mag = x & 0x7fffffffu;
  const std::uint32_t lo = mag & 0xffff0000u, hi = lo + 0x10000u;  // hi may be 0x7f800000 (inf)
  const double v = std::bit_cast<float>(mag), a = std::bit_cast<float>(lo);
  const double b = hi == 0x7f800000u ? std::ldexp(1.0, 128) : double(std::bit_cast<float>(hi));
  std::uint32_t r;
  if (v - a < b - v)
    r = lo;
  else if (v - a > b - v)
    r = hi;
  else
    r = (lo & 0x10000u) ? hi : lo;
  return sign | r;
}

// Extra values checked against PyTorch 1.13 (the same command as in autocast_test.cpp, both its
// vectorised tensor conversion and the scalar one give these):
//   /usr/bin/python3 -c "import torch,struct; ... torch.tensor(fs).bfloat16().float() ..."
const std::pair<std::uint32_t, std::uint32_t> kMorePyTorch[] = {
    {0x3f7fffffu, 0x3f800000u}, {0xbf7fffffu, 0xbf800000u}, {0x00007fffu, 0x00000000u},
    {0x80008000u, 0x80000000u}, {0x80018000u, 0x80020000u}, {0x7f7effffu, 0x7f7f0000u},
    {0x0001ffffu, 0x00020000u}, {0x3f80ffffu, 0x3f810000u}, {0x33800000u, 0x33800000u},
    {0x4b7fffffu, 0x4b800000u}, {0xcb7fff80u, 0xcb800000u}, {0x7f7f0000u, 0x7f7f0000u},
    {0x807fffffu, 0x80800000u}, {0x00ff8000u, 0x01000000u}, {0x00fe8000u, 0x00fe0000u},
};

TEST(AutocastBreak, RoundToBfloat16MoreEdgeValuesMatchPyTorch) {
  for (const auto& [in, out] : kMorePyTorch) {
    EXPECT_EQ(bits(round_to_bfloat16(from_bits(in))), out) << std::hex << "input 0x" << in;
    EXPECT_EQ(oracle(in), out) << std::hex << "oracle, input 0x" << in;  // the oracle itself
  }
}

// A sweep over 2^32 / 4099 bit patterns (every sign, exponent and rounding case) against the
// oracle; NaN patterns only need to stay NaN.
TEST(AutocastBreak, RoundToBfloat16AgreesWithAnOracleOnASweep) {
  int checked = 0;
  for (std::uint64_t b = 0; b <= 0xffffffffull; b += 4099) {
    const auto x = static_cast<std::uint32_t>(b);
    const float r = round_to_bfloat16(from_bits(x));
    if ((x & 0x7fffffffu) > 0x7f800000u) {
      ASSERT_TRUE(std::isnan(r)) << std::hex << x;
      continue;
    }
    ASSERT_EQ(bits(r), oracle(x)) << std::hex << "input 0x" << x;
    ++checked;
  }
  EXPECT_GT(checked, 1000000);
}

// The tensor rounding splits long tensors over the intra-op team: every element, including those
// at the split boundaries, equals the scalar rounding, in place and out of place.
TEST(AutocastBreak, LongTensorRoundingEqualsScalarRounding) {
  const std::int64_t n = (std::int64_t{1} << 18) + 12345;
  std::vector<float> v(static_cast<std::size_t>(n));
  std::uint32_t s = 0x12345678u;
  for (auto& x : v) {
    s = s * 1664525u + 1013904223u;
    x = from_bits((s & 0x7f7fffffu) | ((s << 3) & 0x80000000u));  // finite, both signs
  }
  const Tensor t = tensor(std::span<const float>(v)), r = detail::round_to_bfloat16(t);
  Tensor in_place = t.clone();
  detail::round_to_bfloat16_(in_place);
  const auto got = r.to_vector<float>(), got2 = in_place.to_vector<float>();
  for (std::int64_t i = 0; i < n; ++i) {
    const auto k = static_cast<std::size_t>(i);
    ASSERT_EQ(bits(got[k]), bits(round_to_bfloat16(v[k]))) << "element " << i;
    ASSERT_EQ(bits(got2[k]), bits(got[k])) << "element " << i;
  }
  EXPECT_EQ(t.to_vector<float>(), v) << "the source was modified";
}

// matmul's 1-d forms and general batch broadcasting are not implemented: under autocast too
// they are ShapeErrors, not crashes.
TEST(AutocastBreak, MatmulOfOneAndThreeDimensionalShapesIsAShapeError) {
  AutocastGuard region;
  expect_error<ShapeError>([] { (void)matmul(ones({3}), ones({3})); }, {"matmul", "[3]"});
  expect_error<ShapeError>([] { (void)matmul(ones({2, 3}), ones({3})); }, {"matmul"});
  // [2, 2, 3] x [3, 4] is torch.matmul's batched product now (issue 19); batches that do not
  // broadcast are still refused.
  expect_error<ShapeError>([] { (void)matmul(ones({2, 2, 3}), ones({3, 3, 4})); }, {"matmul"});
  expect_error<ShapeError>([] { (void)matmul(ones({2, 3}), ones({4, 2})); }, {"[2, 3]", "[4, 2]"});
}

// Empty operands under autocast: an empty result, or (k = 0) zeros, and empty or zero gradients.
TEST(AutocastBreak, EmptyMatmulOperands) {
  for (const auto& [m, k, n] : {std::array<std::int64_t, 3>{0, 3, 2}, {2, 0, 3}, {2, 3, 0}}) {
    SCOPED_TRACE(::testing::Message() << m << "x" << k << "x" << n);
    Tensor a = full({m, k}, 1.5f).requires_grad_(true), b = full({k, n}, 2.5f).requires_grad_(true);
    Tensor y;
    {
      AutocastGuard region;
      y = matmul(a, b);
    }
    ASSERT_EQ(y.shape(), (Shape{m, n}));
    for (float v : y.to_vector<float>()) EXPECT_EQ(v, 0.0f);
    y.backward(ones({m, n}));
    ASSERT_EQ(a.grad().shape(), (Shape{m, k}));
    ASSERT_EQ(b.grad().shape(), (Shape{k, n}));
    for (float v : a.grad().to_vector<float>()) EXPECT_EQ(v, 0.0f);
    for (float v : b.grad().to_vector<float>()) EXPECT_EQ(v, 0.0f);
  }
}

// linear on [2, 3, in] under autocast is linear on the flattened [6, in], bit for bit, forward and
// backward; on a 1-d input it is the one-row case.
TEST(AutocastBreak, LinearOnThreeAndOneDimensionalInputs) {
  const std::int64_t in = 7, out = 5;
  const auto xv = bf16::dyadic(6 * in, 21), wv = bf16::dyadic(out * in, 22),
             bv = bf16::dyadic(out, 23), gv = bf16::dyadic(6 * out, 24);
  auto run = [&](const Shape& xs, const Shape& gs, std::int64_t rows) {
    std::vector<float> xr(xv.begin(), xv.begin() + rows * in),
        gr(gv.begin(), gv.begin() + rows * out);
    Tensor x = bf16::make(xr, xs).requires_grad_(true);
    Tensor w = bf16::make(wv, {out, in}).requires_grad_(true);
    Tensor b = bf16::make(bv, {out}).requires_grad_(true);
    Tensor y;
    {
      AutocastGuard region;
      y = linear(x, w, b);
    }
    y.backward(bf16::make(gr, gs));
    return std::vector<Tensor>{y.detach(), x.grad(), w.grad(), b.grad()};
  };
  const auto three = run({2, 3, in}, {2, 3, out}, 6), flat = run({6, in}, {6, out}, 6);
  EXPECT_EQ(three[0].shape(), (Shape{2, 3, out}));
  EXPECT_EQ(three[1].shape(), (Shape{2, 3, in}));
  EXPECT_EQ(three[0].to_vector<float>(), flat[0].to_vector<float>());
  EXPECT_EQ(three[1].to_vector<float>(), flat[1].to_vector<float>());
  EXPECT_TRUE(BitEqual(three[2], flat[2]));
  EXPECT_TRUE(BitEqual(three[3], flat[3]));
  EXPECT_TRUE(bf16::all_bf16(three[0]));

  const auto one = run({in}, {out}, 1), row = run({1, in}, {1, out}, 1);
  EXPECT_EQ(one[0].shape(), (Shape{out}));
  EXPECT_EQ(one[0].to_vector<float>(), row[0].to_vector<float>());
  EXPECT_EQ(one[1].to_vector<float>(), row[1].to_vector<float>());
  EXPECT_TRUE(BitEqual(one[2], row[2]));
  EXPECT_TRUE(BitEqual(one[3], row[3]));
  const auto e = bf16::linear(std::vector<float>(xv.begin(), xv.begin() + in), wv, bv,
                              std::vector<float>(gv.begin(), gv.begin() + out), 1, in, out);
  EXPECT_EQ(one[0].to_vector<float>(), e.y);
  EXPECT_EQ(one[2].to_vector<float>(), e.gw);
}

// A float64 input with float32 parameters (or the reverse) is refused under autocast as without
// it: autocast does not cast float64 (PyTorch leaves float64 alone too).
TEST(AutocastBreak, MixedDtypesAreRefusedAsWithoutAutocast) {
  AutocastGuard region;
  expect_error<DTypeError>([] { (void)linear(ones({2, 3}, kFloat64), ones({4, 3})); }, {"linear"});
  expect_error<DTypeError>(
      [] {
        (void)linear(ones({2, 3}), ones({4, 3}), ones({4}, kFloat64));
      },
      {"linear"});
  expect_error<DTypeError>([] { (void)matmul(ones({2, 3}), ones({3, 4}, kFloat64)); }, {"matmul"});
}

// Two backward passes of bf16 linears accumulate in the fp32 .grad: the sum of the two rounded
// gradients, rounded no further (PyTorch's AccumulateGrad on the fp32 leaf).
TEST(AutocastBreak, GradientsOfTwoPassesAccumulateInFp32) {
  const std::int64_t rows = 3, in = 9, out = 4;
  const auto xv = bf16::dyadic(rows * in, 31), wv = bf16::dyadic(out * in, 32),
             g1 = bf16::dyadic(rows * out, 33), g2 = bf16::dyadic(rows * out, 34);
  Tensor x = bf16::make(xv, {rows, in});
  Tensor w = bf16::make(wv, {out, in}).requires_grad_(true);
  for (const auto& g : {g1, g2}) {
    Tensor y;
    {
      AutocastGuard region;
      y = linear(x, w);
    }
    y.backward(bf16::make(g, {rows, out}));
  }
  const std::vector<float> zero(static_cast<std::size_t>(out), 0.0f);
  const auto e1 = bf16::linear(xv, wv, zero, g1, rows, in, out).gw,
             e2 = bf16::linear(xv, wv, zero, g2, rows, in, out).gw;
  std::vector<float> sum(e1.size());
  for (std::size_t i = 0; i < sum.size(); ++i) sum[i] = e1[i] + e2[i];
  EXPECT_EQ(w.grad().to_vector<float>(), sum);
}

// The guard restores the previous mode when the region is left by an exception, and regions of
// concurrent threads do not see each other.
TEST(AutocastBreak, GuardUnderExceptionsAndThreads) {
  try {
    AutocastGuard region;
    throw std::runtime_error("leave");
  } catch (const std::runtime_error&) {
  }
  EXPECT_FALSE(is_autocast_enabled());
  std::vector<std::thread> threads;
  std::vector<int> wrong(8, 0);
  for (int t = 0; t < 8; ++t)
    threads.emplace_back([t, &wrong] {
      for (int i = 0; i < 2000; ++i) {
        const bool on = (t + i) % 2 == 0;
        AutocastGuard region(on);
        if (is_autocast_enabled() != on) ++wrong[static_cast<std::size_t>(t)];
        {
          AutocastGuard inner(!on);
          if (is_autocast_enabled() == on) ++wrong[static_cast<std::size_t>(t)];
        }
        if (is_autocast_enabled() != on) ++wrong[static_cast<std::size_t>(t)];
      }
      if (is_autocast_enabled()) ++wrong[static_cast<std::size_t>(t)];
    });
  for (auto& th : threads) th.join();
  EXPECT_EQ(wrong, std::vector<int>(8, 0));
  EXPECT_FALSE(is_autocast_enabled());
}

}  // namespace
}  // namespace lockstep::testing
