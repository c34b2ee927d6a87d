// The host half of the CUDA op paths, verified without a GPU: the per-element and per-line bodies
// the CUDA kernels run (src/ops/device_ops.h), the index plans their launches get
// (src/ops/strided_plan.h) and the Philox functions of the dropout kernels (include/lockstep/core/detail/philox.h)
// are run here on the host and compared with the CPU ops, bit for bit. On a GPU only the math
// library (exp, log, erf, pow: CUDA's, within a few ulp) and the launch itself differ;
// tests/cuda/tensor_ops_test.cpp compares the kernels with the CPU ops there.
#include "ops/device_ops.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <vector>

#include "lockstep/core/detail/philox.h"
#include "lockstep/lockstep.h"
#include "ops/kernels.h"
#include "lockstep/ops/detail/op_utils.h"
#include "ops/strided_plan.h"
#include "support/tolerance.h"

namespace lockstep::testing {
namespace {

namespace sh = kernels::shared;
using detail::StridedIter;

// Values that exercise every branch: signed zeros, a float denormal, ties, large magnitudes,
// infinities and NaN, then normal draws.
std::vector<double> edge_values(std::size_t extra, unsigned seed) {
  const double inf = std::numeric_limits<double>::infinity();
  std::vector<double> v = {-0.0,
                           0.0,
                           1e-40,
                           -1e-40,
                           0.5,
                           -0.5,
                           1.0,
                           -1.0,
                           2.25,
                           -3.5,
                           20,
                           -20,
                           88,
                           -88,
                           700,
                           -700,
                           inf,
                           -inf,
                           std::numeric_limits<double>::quiet_NaN(),
                           1e-3,
                           3.0,
                           3.0};
  std::mt19937 gen(seed);
  std::normal_distribution<double> dist(0.0, 2.0);
  for (std::size_t i = 0; i < extra; ++i) v.push_back(dist(gen));
  return v;
}

Tensor as_tensor(const std::vector<double>& v, DType dt, const Shape& s) {
  return tensor(v, s).to(dt);
}

// out[i] = f(x[i]) over a float tensor, through the shared body.
template <class F>
Tensor apply1(const Tensor& x, F f) {
  Tensor out = empty(x.shape(), x.options());
  detail::visit_float(x.dtype(), [&](auto zero) {
    using T = decltype(zero);
    for (std::int64_t i = 0; i < x.numel(); ++i) out.data_ptr<T>()[i] = f(x.data_ptr<T>()[i]);
  });
  return out;
}
template <class F>
Tensor apply2(const Tensor& g, const Tensor& s, F f) {
  Tensor out = empty(s.shape(), s.options());
  detail::visit_float(s.dtype(), [&](auto zero) {
    using T = decltype(zero);
    for (std::int64_t i = 0; i < s.numel(); ++i)
      out.data_ptr<T>()[i] = f(g.data_ptr<T>()[i], s.data_ptr<T>()[i]);
  });
  return out;
}

// ---- elementwise -------------------------------------------------------------------------------

struct UnaryCase {
  const char* name;
  std::function<Tensor(const Tensor&)> op;
  std::function<Tensor(const Tensor&)> shared_fwd;
  // the shared backward given (g, x, y); null when the op's backward composes from other ops
  std::function<Tensor(const Tensor&, const Tensor&, const Tensor&)> shared_bwd;
};

std::vector<UnaryCase> unary_cases() {
  std::vector<UnaryCase> c;
  c.push_back({"exp", [](const Tensor& x) { return exp(x); },
               [](const Tensor& x) { return apply1(x, [](auto v) { return sh::exp_fwd(v); }); },
               nullptr});
  c.push_back({"log", [](const Tensor& x) { return log(x); },
               [](const Tensor& x) { return apply1(x, [](auto v) { return sh::log_fwd(v); }); },
               nullptr});
  c.push_back({"sqrt", [](const Tensor& x) { return sqrt(x); },
               [](const Tensor& x) { return apply1(x, [](auto v) { return sh::sqrt_fwd(v); }); },
               [](const Tensor& g, const Tensor&, const Tensor& y) {
                 return apply2(g, y, [](auto gi, auto yi) { return sh::sqrt_bwd(gi, yi); });
               }});
  for (double p : {0.0, 1.0, 2.0, 0.5, -1.5, 3.0}) {
    c.push_back(
        {"pow", [p](const Tensor& x) { return pow(x, p); },
         [p](const Tensor& x) { return apply1(x, [p](auto v) { return sh::pow_fwd(v, p); }); },
         [p](const Tensor& g, const Tensor& x, const Tensor&) {
           return apply2(g, x, [p](auto gi, auto xi) { return sh::pow_bwd(gi, xi, p); });
         }});
  }
  c.push_back({"sigmoid", [](const Tensor& x) { return sigmoid(x); },
               [](const Tensor& x) { return apply1(x, [](auto v) { return sh::sigmoid_fwd(v); }); },
               [](const Tensor& g, const Tensor&, const Tensor& y) {
                 return apply2(g, y, [](auto gi, auto yi) { return sh::sigmoid_bwd(gi, yi); });
               }});
  c.push_back({"gelu", [](const Tensor& x) { return gelu(x); },
               [](const Tensor& x) { return apply1(x, [](auto v) { return sh::gelu_fwd(v); }); },
               [](const Tensor& g, const Tensor& x, const Tensor&) {
                 return apply2(g, x, [](auto gi, auto xi) { return sh::gelu_bwd(gi, xi); });
               }});
  return c;
}

TEST(DeviceOps, ElementwiseBodiesEqualTheCpuOpsBitForBit) {
  const auto values = edge_values(200, 1);
  const Shape s{static_cast<std::int64_t>(values.size())};
  for (DType dt : {kFloat32, kFloat64})
    for (const auto& c : unary_cases()) {
      Tensor x = as_tensor(values, dt, s).requires_grad_();
      Tensor y = c.op(x);
      EXPECT_TRUE(BitEqual(c.shared_fwd(x.detach()), y)) << c.name << " " << to_string(dt);
      if (!c.shared_bwd) continue;
      Tensor g = as_tensor(edge_values(values.size() - 22, 2), dt, s);
      y.backward(g);
      EXPECT_TRUE(BitEqual(c.shared_bwd(g, x.detach(), y.detach()), x.grad()))
          << c.name << " backward " << to_string(dt);
    }
}

// ---- along a dimension -------------------------------------------------------------------------

std::vector<Shape> along_shapes() {
  return {Shape{3, 5, 4}, Shape{1, 7}, Shape{6, 1}, Shape{2, 0, 3}, Shape{9}, Shape{2, 3, 1, 5}};
}

// Inputs with NaN, ties and signed zeros at fixed places (element 0 NaN in some lines).
Tensor tricky(const Shape& s, DType dt, unsigned seed) {
  std::mt19937 gen(seed);
  std::uniform_int_distribution<int> pick(0, 9);
  std::vector<double> v(static_cast<std::size_t>(s.numel()));
  for (auto& x : v) {
    const int k = pick(gen);
    x = k == 0   ? std::numeric_limits<double>::quiet_NaN()
        : k == 1 ? 2.0  // ties
        : k == 2 ? -0.0
        : k == 3 ? 0.0
                 : std::normal_distribution<double>(0, 3)(gen);
  }
  return tensor(v, s).to(dt);
}

TEST(DeviceOps, SoftmaxLineEqualsTheCpuOpBitForBit) {
  for (DType dt : {kFloat32, kFloat64})
    for (const Shape& s : along_shapes())
      for (int d = 0; d < s.size(); ++d)
        for (bool with_nan : {false, true}) {
          Generator gen(5);
          Tensor x = with_nan ? tricky(s, dt, 9) : mul(randn(s, dt, &gen), 10.0);
          for (bool lg : {false, true}) {
            Tensor want = lg ? log_softmax(x, d) : softmax(x, d);
            Tensor got = empty(s, x.options());
            const detail::DimSplit l = detail::split_at_dim(s, d);
            detail::visit_float(dt, [&](auto zero) {
              using T = decltype(zero);
              for (std::int64_t line = 0; line < l.outer * l.inner; ++line)  // the kernel's loop
                sh::softmax_line(x.data_ptr<T>(), got.data_ptr<T>(),
                                 sh::line_base(line, l.r, l.inner), l.r, l.inner, lg);
            });
            EXPECT_TRUE(BitEqual(got, want)) << s.str() << " dim " << d << (lg ? " log" : "");
          }
        }
}

TEST(DeviceOps, MaxLineAndItsBackwardEqualTheCpuMaxAlongADimension) {
  for (DType dt : {kFloat32, kFloat64})
    for (const Shape& s : along_shapes())
      for (int d = 0; d < s.size(); ++d) {
        if (s[d] == 0) continue;  // refused by the op (ShapeError) before any kernel
        Tensor x = tricky(s, dt, 11 + d).requires_grad_();
        auto [values, indices] = max(x, d);
        Tensor g = randn(values.shape(), dt);
        values.backward(g);
        const detail::DimSplit l = detail::split_at_dim(s, d);
        Tensor gi = zeros(s, dt);
        detail::visit_float(dt, [&](auto zero) {
          using T = decltype(zero);
          // the kernels' loops: one line per thread, then the scatter of the backward
          for (std::int64_t line = 0; line < l.outer * l.inner; ++line) {
            T v;
            std::int64_t k;
            sh::max_line(x.data_ptr<T>(), sh::line_base(line, l.r, l.inner), l.r, l.inner, v, k);
            EXPECT_EQ(k, indices.data_ptr<std::int64_t>()[line]) << s.str() << " dim " << d;
            const T want = values.data_ptr<T>()[line];
            EXPECT_EQ(std::memcmp(&v, &want, sizeof(T)), 0) << s.str() << " dim " << d;
            gi.data_ptr<T>()[sh::line_base(line, l.r, l.inner) + k * l.inner] =
                g.data_ptr<T>()[line];
          }
        });
        EXPECT_TRUE(BitEqual(gi, x.grad())) << s.str() << " dim " << d << " backward";
      }
}

TEST(DeviceOps, IndexSelectBodiesEqualTheCpuOpForwardAndBackward) {
  for (DType dt : {kFloat32, kFloat64})
    for (const Shape& s : along_shapes())
      for (int d = 0; d < s.size(); ++d) {
        const std::int64_t n = s[d];
        std::vector<std::int64_t> iv;
        if (n > 0) iv = {n - 1, 0, n / 2, n - 1, 0};
        Tensor index = tensor(iv);
        Generator gen(17);
        Tensor x = randn(s, dt, &gen).requires_grad_();
        Tensor y = index_select(x, d, index);
        Tensor g = randn(y.shape(), dt, &gen);
        y.backward(g);
        const detail::DimSplit l = detail::split_at_dim(s, d);
        const std::int64_t k = index.numel();
        const auto* pi = index.data_ptr<std::int64_t>();
        Tensor got = empty(y.shape(), dt), gi = empty(s, dt);
        detail::visit_float(dt, [&](auto zero) {
          using T = decltype(zero);
          for (std::int64_t e = 0; e < l.outer * k * l.inner; ++e)
            got.data_ptr<T>()[e] = x.data_ptr<T>()[sh::index_select_source(pi, e, l.r, k, l.inner)];
          for (std::int64_t e = 0; e < gi.numel(); ++e)
            gi.data_ptr<T>()[e] =
                sh::index_select_grad_one(g.data_ptr<T>(), pi, e, l.r, k, l.inner);
        });
        EXPECT_TRUE(BitEqual(got, y)) << s.str() << " dim " << d;
        EXPECT_TRUE(BitEqual(gi, x.grad())) << s.str() << " dim " << d << " backward";
      }
}

// The whole-tensor accumulator merged as the kernel does (thread t takes t, t + P, ...; then a
// tree), and in a random contiguous partition merged left to right: both equal the CPU ops.
template <class T>
sh::MaxAcc reduce_like_kernel(const T* x, std::int64_t n, int threads) {
  std::vector<sh::MaxAcc> acc(static_cast<std::size_t>(threads));
  for (int t = 0; t < threads; ++t)
    for (std::int64_t i = t; i < n; i += threads) sh::max_acc_push(x, acc[t], i);
  for (int w = threads / 2; w > 0; w /= 2)
    for (int t = 0; t < w; ++t) sh::max_acc_merge(x, acc[t], acc[t + w]);
  return acc[0];
}
template <class T>
sh::MaxAcc reduce_in_pieces(const T* x, std::int64_t n, unsigned seed) {
  std::mt19937 gen(seed);
  sh::MaxAcc total;
  for (std::int64_t start = 0; start < n;) {
    const std::int64_t len = std::uniform_int_distribution<std::int64_t>(1, 5)(gen);
    sh::MaxAcc piece;
    for (std::int64_t i = start; i < std::min(n, start + len); ++i) sh::max_acc_push(x, piece, i);
    sh::max_acc_merge(x, total, piece);
    start += len;
  }
  return total;
}

TEST(DeviceOps, WholeTensorMaxAndArgmaxAccumulatorEqualTheCpuOps) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  std::vector<std::vector<double>> inputs = {
      {1.0},       {nan},           {nan, 5.0, 1.0},      {5.0, nan, 7.0, nan, 2.0},
      {-0.0, 0.0}, {0.0, -0.0},     {3.0, 1.0, 3.0, 3.0}, {-1.0, -2.0, -1.0},
      {nan, nan},  {2.0, nan, 2.0}, {-0.0, nan, 0.0}};
  for (unsigned seed = 0; seed < 6; ++seed)
    inputs.push_back(tricky(Shape{1000 + seed * 37}, kFloat64, seed).to_vector<double>());
  for (DType dt : {kFloat32, kFloat64})
    for (const auto& v : inputs) {
      Tensor x = tensor(v, {static_cast<std::int64_t>(v.size())}).to(dt);
      const std::int64_t want_arg = argmax(x).item<std::int64_t>();
      Tensor want_max = max(x);
      detail::visit_float(dt, [&](auto zero) {
        using T = decltype(zero);
        const T* p = x.data_ptr<T>();
        const std::int64_t n = x.numel();
        for (const sh::MaxAcc& acc : {reduce_like_kernel(p, n, 256), reduce_like_kernel(p, n, 4),
                                      reduce_in_pieces(p, n, 3)}) {
          EXPECT_EQ(sh::max_acc_index(p, acc, sh::kRuleArgmax), want_arg) << x.str();
          const T got = p[sh::max_acc_index(p, acc, sh::kRuleMax)];
          const T want = want_max.data_ptr<T>()[0];
          EXPECT_EQ(std::memcmp(&got, &want, sizeof(T)), 0) << x.str();
        }
      });
    }
}

// ---- the strided plans --------------------------------------------------------------------------

// out = a − b through broadcast_iter, walked on the host as the kernel walks it.
template <class T>
Tensor run_broadcast(const Tensor& a, const Tensor& b, const Shape& out_shape) {
  Tensor out = empty(out_shape, a.options());
  const StridedIter it = detail::broadcast_iter(out_shape, a.shape(), b.shape());
  for (std::int64_t i = 0; i < out.numel(); ++i) {
    std::int64_t oa = 0, ob = 0;
    sh::strided_offsets(it, i, oa, ob);
    out.data_ptr<T>()[i] = a.data_ptr<T>()[oa] - b.data_ptr<T>()[ob];
  }
  return out;
}

std::vector<std::pair<Shape, Shape>> broadcast_pairs() {
  return {{Shape{3, 1, 5}, Shape{4, 1}},
          {Shape{2, 3, 4}, Shape{4}},
          {Shape{2, 3, 4}, Shape{3, 1}},
          {Shape{1}, Shape{2, 3}},
          {Shape{}, Shape{2, 3}},
          {Shape{5, 1, 1, 2}, Shape{1, 4, 3, 1}},
          {Shape{0, 3}, Shape{3}},
          {Shape{2, 1}, Shape{1, 0}},
          {Shape{7, 33}, Shape{7, 33}},
          {Shape{1, 1, 1}, Shape{}},
          {Shape{2, 1, 3, 1, 2}, Shape{4, 1, 5, 1}}};
}

TEST(StridedPlan, BroadcastIterEqualsTheReferenceBroadcasting) {
  for (DType dt : {kFloat32, kFloat64, kInt64})
    for (const auto& [sa, sb] : broadcast_pairs())
      for (bool swap : {false, true}) {
        const Shape& s1 = swap ? sb : sa;
        const Shape& s2 = swap ? sa : sb;
        Generator gen(3);
        Tensor a = mul(randn(s1, kFloat64, &gen), 100.0).to(dt);
        Tensor b = mul(randn(s2, kFloat64, &gen), 100.0).to(dt);
        const Shape out_shape = detail::broadcast_shapes("test", s1, s2);
        Tensor want = empty(out_shape, a.options());
        kernels::ref::binary(kernels::BinaryOp::Sub, a, b, want);
        Tensor got = dt == kInt64     ? run_broadcast<std::int64_t>(a, b, out_shape)
                     : dt == kFloat64 ? run_broadcast<double>(a, b, out_shape)
                                      : run_broadcast<float>(a, b, out_shape);
        EXPECT_TRUE(BitEqual(got, want)) << s1.str() << " - " << s2.str() << " " << to_string(dt);
      }
}

TEST(StridedPlan, CoalescesAndRefusesWhatDoesNotBroadcast) {
  // Same shapes: one dimension; a bias row: two; size-1 dimensions dropped.
  EXPECT_EQ(detail::broadcast_iter(Shape{6, 5, 4}, Shape{6, 5, 4}, Shape{6, 5, 4}).nd, 1);
  EXPECT_EQ(detail::broadcast_iter(Shape{6, 5, 4}, Shape{6, 5, 4}, Shape{5, 4}).nd, 2);
  EXPECT_EQ(detail::broadcast_iter(Shape{6, 1, 4}, Shape{6, 1, 4}, Shape{1}).nd, 1);
  const auto plan = detail::reduce_plan(Shape{6, 5, 4}, Shape{6, 1, 4});
  EXPECT_EQ(plan.kept.nd, 2);
  EXPECT_EQ(plan.reduced.nd, 1);
  EXPECT_EQ(plan.reduced_count, 5);
  EXPECT_EQ(plan.out_count, 24);
  EXPECT_THROW(detail::broadcast_iter(Shape{2, 3}, Shape{4}, Shape{3}), ValueError);
  EXPECT_THROW(detail::broadcast_iter(Shape{3}, Shape{2, 3}, Shape{3}), ValueError);
  EXPECT_THROW(detail::reduce_plan(Shape{3, 4}, Shape{2, 4}), ValueError);
  EXPECT_THROW(detail::reduce_plan(Shape{4}, Shape{1, 4, 1}), ValueError);
}

template <class T>
Tensor run_reduce(const Tensor& in, const Shape& out_shape) {
  using Acc = std::conditional_t<std::is_floating_point_v<T>, double, std::int64_t>;
  Tensor out = empty(out_shape, in.options());
  const auto plan = detail::reduce_plan(in.shape(), out_shape);
  EXPECT_EQ(plan.out_count, out.numel());
  for (std::int64_t o = 0; o < plan.out_count; ++o)
    out.data_ptr<T>()[o] = static_cast<T>(sh::reduce_sum_one<T, Acc>(in.data_ptr<T>(), plan, o));
  return out;
}
Tensor run_reduce_any(const Tensor& in, const Shape& out_shape) {
  if (in.dtype() == kInt64) return run_reduce<std::int64_t>(in, out_shape);
  if (in.dtype() == kFloat64) return run_reduce<double>(in, out_shape);
  return run_reduce<float>(in, out_shape);
}

TEST(StridedPlan, ReducePlanEqualsSumToAndSumAlongEveryDimension) {
  const std::vector<std::pair<Shape, Shape>> cases = {
      {Shape{3, 4, 5}, Shape{4, 1}},    {Shape{3, 4, 5}, Shape{1, 5}},
      {Shape{3, 4, 5}, Shape{3, 1, 1}}, {Shape{3, 4, 5}, Shape{}},
      {Shape{2, 3}, Shape{2, 3}},       {Shape{4, 0, 3}, Shape{1, 3}},
      {Shape{33, 7}, Shape{7}},         {Shape{1, 9}, Shape{9}},
      {Shape{5, 1, 2}, Shape{1, 1}}};
  for (DType dt : {kFloat32, kFloat64, kInt64}) {
    for (const auto& [in_shape, out_shape] : cases) {
      Generator gen(4);
      Tensor in = mul(randn(in_shape, kFloat64, &gen), 1000.0).to(dt);
      Tensor want = empty(out_shape, in.options());
      kernels::ref::sum_to(in, want);
      EXPECT_TRUE(BitEqual(run_reduce_any(in, out_shape), want))
          << in_shape.str() << " -> " << out_shape.str() << " " << to_string(dt);
    }
    for (const Shape& s : along_shapes())
      for (int d = 0; d < s.size(); ++d) {
        Generator gen(6);
        Tensor in = mul(randn(s, kFloat64, &gen), 1000.0).to(dt);
        Shape keep = s;
        keep[d] = 1;
        EXPECT_TRUE(BitEqual(run_reduce_any(in, keep), sum(in, d, true)))
            << s.str() << " dim " << d << " " << to_string(dt);
      }
  }
}

// The copy kernel's walk: dst[dst_base + off0(i)] = src[src_base + off1(i)].
Tensor run_copy(const Tensor& src, std::int64_t src_base, Tensor dst, std::int64_t dst_base,
                const StridedIter& it, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) {
    std::int64_t o0 = 0, o1 = 0;
    sh::strided_offsets(it, i, o0, o1);
    dst.data_ptr<double>()[dst_base + o0] = src.data_ptr<double>()[src_base + o1];
  }
  return dst;
}

TEST(StridedPlan, SliceAndTransposeItersEqualNarrowCatAndT) {
  for (const Shape& s : along_shapes())
    for (int d = 0; d < s.size(); ++d) {
      Tensor x = arange(0.0, static_cast<double>(s.numel()), 1.0, kFloat64).reshape(s);
      const std::int64_t n = s[d];
      for (auto [start, len] : {std::pair<std::int64_t, std::int64_t>{0, n},
                                {n / 3, n / 2},
                                {n > 0 ? n - 1 : 0, n > 0 ? 1 : 0},
                                {0, 0}}) {
        if (start + len > n || len < 0) continue;
        Tensor want = narrow(x, d, start, len).clone();
        std::int64_t base = 0;
        const StridedIter it = detail::slice_iter(s, d, start, len, &base);
        // narrow: operand 0 the slice (destination), operand 1 the full tensor at base
        Tensor got = run_copy(x, base, zeros(want.shape(), kFloat64), 0, it, want.numel());
        EXPECT_TRUE(BitEqual(got, want))
            << s.str() << " dim " << d << " [" << start << ", +" << len << ")";
        // the way back (slice_in): into a zero tensor of the full shape, as cat places it
        StridedIter back = it;
        for (int i = 0; i < back.nd; ++i) std::swap(back.strides[0][i], back.strides[1][i]);
        Tensor placed = run_copy(want, 0, zeros(s, kFloat64), base, back, want.numel());
        Shape before = s, after = s;
        before[d] = start;
        after[d] = n - start - len;
        EXPECT_TRUE(
            BitEqual(placed, cat({zeros(before, kFloat64), want, zeros(after, kFloat64)}, d)))
            << s.str() << " dim " << d;
      }
    }
  for (auto [r, c] :
       {std::pair{3, 5}, std::pair{1, 7}, std::pair{7, 1}, std::pair{1, 1}, std::pair{33, 17}}) {
    Tensor x = arange(0.0, static_cast<double>(r * c), 1.0, kFloat64).reshape({r, c});
    Tensor got = run_copy(x, 0, zeros({c, r}, kFloat64), 0, detail::transpose_iter(r, c), r * c);
    EXPECT_TRUE(BitEqual(got, t(x))) << r << "x" << c;
  }
}

// ---- Philox and the dropout masks
// ----------------------------------------------------------------

TEST(DevicePhilox, KnownAnswerVectors) {
  // Random123's DEShawResearch/random123:tests/kat_vectors, the three "philox4x32 10" lines:
  // counter[4] key[2] -> result[4].
  struct Kat {
    std::uint32_t c[4], k[2], want[4];
  };
  const Kat kats[] = {{{0, 0, 0, 0}, {0, 0}, {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
                      {{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff},
                       {0xffffffff, 0xffffffff},
                       {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
                      {{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344},
                       {0xa4093822, 0x299f31d0},
                       {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}}};
  for (const Kat& kat : kats) {
    std::uint32_t c[4] = {kat.c[0], kat.c[1], kat.c[2], kat.c[3]};
    detail::philox4x32_10(c, kat.k[0], kat.k[1]);
    for (int i = 0; i < 4; ++i) EXPECT_EQ(c[i], kat.want[i]) << i;
    const auto pub = philox4x32({kat.c[0], kat.c[1], kat.c[2], kat.c[3]}, {kat.k[0], kat.k[1]});
    for (int i = 0; i < 4; ++i) EXPECT_EQ(pub[static_cast<std::size_t>(i)], kat.want[i]) << i;
  }
}

TEST(DevicePhilox, StreamFunctionsEqualTheGenerator) {
  for (std::uint64_t seed :
       {std::uint64_t{0}, std::uint64_t{42}, std::uint64_t{0x123456789abcdefULL}}) {
    Generator g(seed);
    g.set_offset(5);  // not at a block boundary
    for (std::uint64_t off = 5; off < 40; ++off)
      EXPECT_EQ(g.next_u32(), detail::philox_stream_word(seed, off));
    for (std::uint64_t off = 40; off < 80; off += 2)
      EXPECT_EQ(g.next_double(), detail::philox_stream_double(seed, off));
  }
  // a position past 2^32 words: the block counter's high word
  Generator g(7);
  const std::uint64_t far = (std::uint64_t{1} << 34) + 3;
  g.set_offset(far);
  EXPECT_EQ(g.next_u32(), detail::philox_stream_word(7, far));
}

// The mask the keyed dropout kernel writes: its loop over (row, column group) items, each
// through the shared per-item function; unwritten elements would stay NaN.
template <class T>
std::vector<T> keyed_mask(const DropoutKey& key, std::uint32_t call, std::int64_t rows,
                          std::int64_t cols, double p) {
  const T scale = static_cast<T>(p == 1.0 ? 0.0 : 1.0 / (1.0 - p));
  std::vector<T> m(static_cast<std::size_t>(rows * cols), std::numeric_limits<T>::quiet_NaN());
  const std::int64_t groups = (cols + 3) / 4;
  for (std::int64_t e = 0; e < rows * groups; ++e)
    detail::dropout_keyed_group(m.data(), e, cols, groups, key.seed, key.step, call,
                                key.sample_offset, p, scale);
  return m;
}

TEST(DevicePhilox, KeyedDropoutMaskIsTheCpuMask) {
  const DropoutKey key{0x1234567890abULL, 3, 40};
  for (double p : {0.3, 0.5, 1.0})
    for (const Shape& s : {Shape{5, 7}, Shape{1, 1}, Shape{4, 2, 3}, Shape{6}, Shape{0, 3}}) {
      Tensor x = ones(s, kFloat64);
      DropoutKeyGuard guard(key);
      for (std::uint32_t call = 0; call < 2; ++call) {
        const std::vector<double> got = dropout(x, p, true).to_vector<double>();  // 1 · mask
        const std::int64_t rows = s.size() == 0 ? 1 : s[0];
        const std::int64_t cols = rows == 0 ? 0 : s.numel() / rows;
        EXPECT_EQ(got, keyed_mask<double>(key, call, rows, cols, p)) << s.str() << " call " << call;
      }
    }
}

TEST(DevicePhilox, StreamDropoutMaskIsTheCpuMaskAndAdvancesTheGenerator) {
  for (DType dt : {kFloat32, kFloat64}) {
    Generator g(99);
    g.set_offset(6);
    Tensor x = ones({3, 5}, dt);
    const std::vector<double> got = dropout(x, 0.4, true, &g).to_vector<double>();
    EXPECT_EQ(g.offset(), 6u + 2u * 15u);
    const double scale = 1.0 / (1.0 - 0.4);
    for (std::size_t i = 0; i < got.size(); ++i) {
      const double u = detail::philox_stream_double(99, 6 + 2 * i);
      const double want = dt == kFloat32 ? static_cast<double>(detail::dropout_mask_value<float>(
                                               u, 0.4, static_cast<float>(scale)))
                                         : detail::dropout_mask_value<double>(u, 0.4, scale);
      EXPECT_EQ(got[i], want) << i;
    }
  }
}

}  // namespace
}  // namespace lockstep::testing
