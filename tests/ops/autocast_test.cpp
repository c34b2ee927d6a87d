// Autocast (include/lockstep/ops/autocast.h): the bf16 rounding against PyTorch's values, the
// guard's scoping, and linear/matmul under autocast against a hand-written emulation
// (tests/support/bf16_emulation.h), on both kernel families; float64 untouched.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <thread>

#include "support/bf16_emulation.h"
#include "support/tolerance.h"

namespace lockstep::testing {
namespace {

using ops::KernelMode;
using ops::KernelModeGuard;

float from_bits(std::uint32_t b) { return std::bit_cast<float>(b); }
std::uint32_t bits(float f) { return std::bit_cast<std::uint32_t>(f); }

// (input bits, PyTorch's result bits), from PyTorch 1.13 on CPU:
//   /usr/bin/python3 -c "import torch, struct; vals = [...]; \
//     t = torch.tensor(vals, dtype=torch.float32).bfloat16().float(); \
//     [print('{0x%08xu, 0x%08xu},' % (struct.unpack('<I', struct.pack('<f', v))[0], \
//       struct.unpack('<I', struct.pack('<f', o))[0])) \
//      for v, o in zip(torch.tensor(vals).tolist(), t.tolist())]"
const std::pair<std::uint32_t, std::uint32_t> kPyTorch[] = {
    {0x00000000u, 0x00000000u},  // 0
    {0x80000000u, 0x80000000u},  // -0 keeps its sign
    {0x3f800000u, 0x3f800000u},  // 1
    {0xbf800000u, 0xbf800000u},  // -1
    {0x3dcccccdu, 0x3dcd0000u},  // 0.1
    {0xbdcccccdu, 0xbdcd0000u},  // -0.1
    {0x3eaaaaabu, 0x3eab0000u},  // 1/3
    {0x40490fdbu, 0x40490000u},  // pi
    {0x477fe000u, 0x47800000u},  // 65504 rounds up to 65536
    {0x3a83126fu, 0x3a830000u},  // 1e-3
    {0x47f12065u, 0x47f10000u},  // 123456.789
    {0xc93db280u, 0xc93e0000u},  // -7.77e5
    {0x3f808000u, 0x3f800000u},  // tie, lower neighbour even: down
    {0x3f818000u, 0x3f820000u},  // tie, upper neighbour even: up
    {0x3f808001u, 0x3f810000u},  // just above a tie: up
    {0x3f817fffu, 0x3f810000u},  // just below a tie: down
    {0x00000001u, 0x00000000u},  // smallest subnormal: to 0
    {0x00008000u, 0x00000000u},  // subnormal tie to even (0)
    {0x00018000u, 0x00020000u},  // subnormal tie to even (up)
    {0x007fffffu, 0x00800000u},  // largest subnormal rounds up to the smallest normal
    {0x80010000u, 0x80010000u},  // negative subnormal that is a bf16 value
    {0x00800000u, 0x00800000u},  // smallest normal
    {0x7f7fffffu, 0x7f800000u},  // max float overflows to +inf
    {0xff7fffffu, 0xff800000u},  // -max float to -inf
    {0x7f7f7fffu, 0x7f7f0000u},  // just below the overflow tie: largest bf16
    {0x7f7f8000u, 0x7f800000u},  // the overflow tie (odd neighbour): +inf
    {0x7f800000u, 0x7f800000u},  // +inf
    {0xff800000u, 0xff800000u},  // -inf
};

TEST(RoundToBfloat16, MatchesPyTorch) {
  for (const auto& [in, out] : kPyTorch)
    EXPECT_EQ(bits(round_to_bfloat16(from_bits(in))), out) << std::hex << "input 0x" << in;
}

TEST(RoundToBfloat16, NaNStaysNaN) {
  // PyTorch 1.13 gives 0xffff0000 for each of these (its vectorised conversion); c10's scalar
  // conversion 0x7fc00000, which Lockstep returns. Either way a NaN.
  for (std::uint32_t in : {0x7fc00000u, 0xffc00000u, 0x7f800001u, 0xffc12345u}) {
    const float r = round_to_bfloat16(from_bits(in));
    EXPECT_TRUE(std::isnan(r)) << std::hex << in;
    EXPECT_EQ(bits(r), 0x7fc00000u);
  }
}

TEST(AutocastGuard, NestsAndRestores) {
  EXPECT_FALSE(is_autocast_enabled());
  {
    AutocastGuard on;
    EXPECT_TRUE(is_autocast_enabled());
    {
      AutocastGuard off(false);
      EXPECT_FALSE(is_autocast_enabled());
      {
        AutocastGuard again;
        EXPECT_TRUE(is_autocast_enabled());
      }
      EXPECT_FALSE(is_autocast_enabled());
    }
    EXPECT_TRUE(is_autocast_enabled());
  }
  EXPECT_FALSE(is_autocast_enabled());
  // Thread-local: another thread starts outside any region.
  AutocastGuard on;
  bool other = true;
  std::thread([&] { other = is_autocast_enabled(); }).join();
  EXPECT_FALSE(other);
}

struct Dims {
  std::int64_t rows, in, out;
  KernelMode mode;
};

class AutocastLinear : public ::testing::TestWithParam<Dims> {};

// Dyadic inputs: the library must equal the emulation bit for bit (see bf16_emulation.h), and
// the same call without autocast must not.
TEST_P(AutocastLinear, ForwardAndGradientsEqualEmulation) {
  const auto [rows, in, out, mode] = GetParam();
  KernelModeGuard kernels(mode);
  const auto xv = bf16::dyadic(rows * in, 1), wv = bf16::dyadic(out * in, 2),
             bv = bf16::dyadic(out, 3), gv = bf16::dyadic(rows * out, 4);
  const auto expected = bf16::linear(xv, wv, bv, gv, rows, in, out);
  auto run = [&](bool autocast) {
    Tensor x = bf16::make(xv, {rows, in}).requires_grad_(true);
    Tensor w = bf16::make(wv, {out, in}).requires_grad_(true);
    Tensor b = bf16::make(bv, {out}).requires_grad_(true);
    Tensor y;
    {
      AutocastGuard region(autocast);
      y = linear(x, w, b);
    }
    // backward outside the region: the graph remembers that the forward ran under autocast.
    y.backward(bf16::make(gv, {rows, out}));
    return std::vector<Tensor>{y.detach(), x.grad(), w.grad(), b.grad()};
  };
  const auto got = run(true);
  EXPECT_TRUE(BitEqual(got[0], bf16::make(expected.y, {rows, out})));
  EXPECT_TRUE(BitEqual(got[1], bf16::make(expected.gx, {rows, in})));
  EXPECT_TRUE(BitEqual(got[2], bf16::make(expected.gw, {out, in})));
  EXPECT_TRUE(BitEqual(got[3], bf16::make(expected.gb, {out})));
  for (const auto& t : got) EXPECT_EQ(t.dtype(), kFloat32);
  if (rows == 0 || in == 0) return;  // empty results: nothing that could differ
  const auto fp32 = run(false);
  EXPECT_FALSE(BitEqual(fp32[0], got[0]));
  EXPECT_FALSE(BitEqual(fp32[1], got[1]));
  EXPECT_FALSE(BitEqual(fp32[2], got[2]));
  EXPECT_FALSE(BitEqual(fp32[3], got[3]));
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, AutocastLinear,
    ::testing::Values(Dims{7, 33, 5, KernelMode::Fast}, Dims{7, 33, 5, KernelMode::Reference},
                      Dims{64, 65, 70, KernelMode::Fast}, Dims{64, 65, 70, KernelMode::Reference},
                      Dims{1, 1, 1, KernelMode::Fast}, Dims{0, 4, 3, KernelMode::Fast},
                      Dims{3, 0, 2, KernelMode::Fast}, Dims{3, 0, 2, KernelMode::Reference}));

TEST(AutocastMatmul, ForwardAndGradientsEqualEmulation) {
  const std::int64_t m = 9, k = 40, n = 6;
  const auto av = bf16::dyadic(m * k, 5), bv = bf16::dyadic(k * n, 6), gv = bf16::dyadic(m * n, 7);
  Tensor a = bf16::make(av, {m, k}).requires_grad_(true);
  Tensor b = bf16::make(bv, {k, n}).requires_grad_(true);
  Tensor y;
  {
    AutocastGuard region;
    y = matmul(a, b);
  }
  y.backward(bf16::make(gv, {m, n}));
  EXPECT_TRUE(BitEqual(y.detach(), bf16::make(bf16::gemm(av, bv, m, k, n), {m, n})));
  EXPECT_TRUE(
      BitEqual(a.grad(), bf16::make(bf16::gemm(gv, bf16::transpose(bv, k, n), m, n, k), {m, k})));
  EXPECT_TRUE(
      BitEqual(b.grad(), bf16::make(bf16::gemm(bf16::transpose(av, m, k), gv, k, m, n), {k, n})));
  EXPECT_FALSE(BitEqual(matmul(a, b).detach(), y.detach()));
}

// Normal inputs: every result is a bf16 value, within bf16 rounding of the fp32 result, and
// within one bf16 step of the emulation (the sums' order may differ from the emulation's double
// sums, which can move a result across a rounding boundary).
TEST(AutocastLinear, NormalInputsGiveBf16ValuesNearFp32) {
  manual_seed(0);
  const std::int64_t rows = 32, in = 300, out = 17;
  Tensor x = randn({rows, in}).requires_grad_(true), w = randn({out, in}).requires_grad_(true),
         b = randn({out}).requires_grad_(true);
  Tensor g = randn({rows, out});
  Tensor y;
  {
    AutocastGuard region;
    y = linear(x, w, b);
  }
  y.backward(g);
  EXPECT_TRUE(bf16::all_bf16(y));
  EXPECT_TRUE(bf16::all_bf16(x.grad()));
  EXPECT_TRUE(bf16::all_bf16(w.grad()));
  EXPECT_TRUE(bf16::all_bf16(b.grad()));
  EXPECT_FALSE(bf16::all_bf16(linear(x, w, b)));
  const auto e = bf16::linear(x.to_vector<float>(), w.to_vector<float>(), b.to_vector<float>(),
                              g.to_vector<float>(), rows, in, out);
  // One bf16 step is 2^-7 relative at most; the absolute part covers sums that cancel to near 0
  // (operand rounding errors of 2^-9 relative times |x||w| summed over `in` terms).
  const double step = std::ldexp(1.0, -7), abs = 0.05;
  EXPECT_TRUE(AllClose(y.detach(), bf16::make(e.y, {rows, out}), step, abs));
  EXPECT_TRUE(AllClose(x.grad(), bf16::make(e.gx, {rows, in}), step, abs));
  EXPECT_TRUE(AllClose(w.grad(), bf16::make(e.gw, {out, in}), step, abs));
  EXPECT_TRUE(AllClose(b.grad(), bf16::make(e.gb, {out}), step, abs));
  EXPECT_TRUE(AllClose(y.detach(), linear(x, w, b).detach(), 3 * step, 0.5));
}

TEST(AutocastLinear, Float64IsUntouched) {
  manual_seed(1);
  Tensor x = randn({5, 11}, kFloat64).requires_grad_(true);
  Tensor w = randn({3, 11}, kFloat64).requires_grad_(true);
  Tensor b = randn({3}, kFloat64).requires_grad_(true);
  Tensor y_ref = linear(x, w, b);
  y_ref.sum().backward();
  const Tensor gx_ref = x.grad().clone(), gw_ref = w.grad().clone();
  x.set_grad(Tensor());
  w.set_grad(Tensor());
  b.set_grad(Tensor());
  Tensor y, z;
  {
    AutocastGuard region;
    y = linear(x, w, b);
    z = matmul(x, w.t());
  }
  y.sum().backward();
  EXPECT_EQ(y.dtype(), kFloat64);
  auto same = [](const Tensor& a, const Tensor& b) {
    return a.to_vector<double>() == b.to_vector<double>();
  };
  EXPECT_TRUE(same(y.detach(), y_ref.detach()));
  EXPECT_TRUE(same(x.grad(), gx_ref));
  EXPECT_TRUE(same(w.grad(), gw_ref));
  EXPECT_TRUE(same(z.detach(), matmul(x, w.t()).detach()));
}

// The graph, not the thread's mode at backward time, decides: a forward outside the region keeps
// its fp32 backward even when backward() runs inside one.
TEST(AutocastLinear, BackwardFollowsTheForwardsMode) {
  const auto xv = bf16::dyadic(4 * 6, 8), wv = bf16::dyadic(3 * 6, 9), gv = bf16::dyadic(12, 10);
  Tensor x = bf16::make(xv, {4, 6}), w = bf16::make(wv, {3, 6}).requires_grad_(true);
  Tensor y = linear(x, w);
  AutocastGuard region;
  y.backward(bf16::make(gv, {4, 3}));
  const Tensor g = w.grad().clone();
  NoGradGuard no_grad;
  {
    AutocastGuard off(false);
    // fp32: gW = gᵀ x without any rounding.
    EXPECT_TRUE(BitEqual(g, matmul(bf16::make(gv, {4, 3}).t(), x)));
  }
  EXPECT_FALSE(bf16::all_bf16(g));
}

TEST(Autocast, Fp32ListOpsUnchanged) {
  manual_seed(2);
  Tensor logits = randn({6, 4}), target = randint(0, 4, {6}, kInt64);
  Tensor a = cross_entropy(logits, target), r = relu(logits), s = softmax(logits);
  AutocastGuard region;
  EXPECT_TRUE(BitEqual(cross_entropy(logits, target), a));
  EXPECT_TRUE(BitEqual(relu(logits), r));
  EXPECT_TRUE(BitEqual(softmax(logits), s));
}

}  // namespace
}  // namespace lockstep::testing
