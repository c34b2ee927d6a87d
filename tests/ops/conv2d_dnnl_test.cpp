// The oneDNN conv2d kernels (kernels::dnnl::, src/ops/cpu/conv_dnnl.cpp) over the table of
// tests/ops/conv_cases.h, float32, called directly: (a) against the reference loops with the
// float32 tolerance of conv2d_test.cpp's FastMatchesReference; (b) the same bits run twice, and
// from two threads at once with one intra-op thread each (as DataParallel's replicas, sharing
// the cached primitives); (c) the im2col family's float32 bits independent of the thread count
// (through the op conv2d_test.cpp now reaches oneDNN for float32); (d) batches of several
// chunks run in parallel, against the reference and bit-identical at 1, 2 and 3 threads.
// Without oneDNN (LOCKSTEP_DNNL=OFF) all but (c) skip, printing why.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <thread>

#include "conv_cases.h"
#include "ops/conv_kernels.h"
#include "support/tolerance.h"

namespace lockstep::testing {
namespace {

using kernels::Conv2dGeom;

Conv2dGeom geom(const ConvCase& c) {
  Conv2dGeom g;
  g.n = c.n, g.c_in = c.c_in, g.h = c.h, g.w = c.w;
  g.c_out = c.c_out, g.kh = c.kh, g.kw = c.kw;
  g.stride_h = c.stride[0], g.stride_w = c.stride[1];
  g.pad_h = c.padding[0], g.pad_w = c.padding[1];
  g.dil_h = c.dilation[0], g.dil_w = c.dilation[1];
  g.groups = c.groups;
  const Shape out = expected_out(c);
  g.out_h = out[2], g.out_w = out[3];
  return g;
}

// Inputs x, w, b and the upstream gradient gy, N(0, 1) in float32.
struct Buffers {
  std::vector<float> x, w, b, gy;
};
Buffers make_buffers(const ConvCase& c, const Conv2dGeom& g, unsigned seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> nd;
  auto fill = [&](std::int64_t n) {
    std::vector<float> v(static_cast<std::size_t>(n));
    for (auto& e : v) e = nd(gen);
    return v;
  };
  return {fill(g.x_numel()), fill(g.w_numel()), c.bias ? fill(g.c_out) : std::vector<float>(),
          fill(g.y_numel())};
}

// y, gx, gw, gb (gb empty without bias) of one family.
struct Results {
  std::vector<float> y, gx, gw, gb;
};

enum class Family { Ref, Cpu, Dnnl };

// False when the dnnl family declined a call (its `handled` result).
bool compute(Family f, const ConvCase& c, const Conv2dGeom& g, const Buffers& in, Results& r) {
  r.y.assign(static_cast<std::size_t>(g.y_numel()), -7.f);
  r.gx.assign(static_cast<std::size_t>(g.x_numel()), -7.f);
  r.gw.assign(static_cast<std::size_t>(g.w_numel()), -7.f);
  r.gb.assign(c.bias ? static_cast<std::size_t>(g.c_out) : 0, -7.f);
  const float* b = c.bias ? in.b.data() : nullptr;
  float* gb = c.bias ? r.gb.data() : nullptr;
  switch (f) {
    case Family::Ref:
      kernels::ref::conv2d_forward<float>(g, in.x.data(), in.w.data(), b, r.y.data());
      kernels::ref::conv2d_backward_input<float>(g, in.gy.data(), in.w.data(), r.gx.data());
      kernels::ref::conv2d_backward_weight<float>(g, in.gy.data(), in.x.data(), r.gw.data(), gb);
      return true;
    case Family::Cpu:
      kernels::cpu::conv2d_forward<float>(g, in.x.data(), in.w.data(), b, r.y.data());
      kernels::cpu::conv2d_backward_input<float>(g, in.gy.data(), in.w.data(), r.gx.data());
      kernels::cpu::conv2d_backward_weight<float>(g, in.gy.data(), in.x.data(), r.gw.data(), gb);
      return true;
    case Family::Dnnl: {
      bool ok = kernels::dnnl::conv2d_forward(g, in.x.data(), in.w.data(), b, r.y.data());
      ok = kernels::dnnl::conv2d_backward_input(g, in.gy.data(), in.w.data(), r.gx.data()) && ok;
      ok = kernels::dnnl::conv2d_backward_weight(g, in.gy.data(), in.x.data(), r.gw.data(), gb) &&
           ok;
      return ok;
    }
  }
  return false;
}

// conv2d_test.cpp's agree(): rtol `tol` plus atol = tol × the largest reference magnitude.
::testing::AssertionResult agree(const std::vector<float>& fast, const std::vector<float>& ref,
                                 double tol) {
  double mag = 0;
  for (float v : ref) mag = std::max(mag, std::abs(double(v)));
  return AllClose(std::vector<double>(fast.begin(), fast.end()),
                  std::vector<double>(ref.begin(), ref.end()), tol, tol * std::max(mag, 1e-30));
}

bool bits_equal(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() &&
         (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

// The calling thread's intra-op count for the scope.
class Threads {
 public:
  explicit Threads(int n) : saved_(get_num_threads()) { set_num_threads(n); }
  ~Threads() { set_num_threads(saved_); }

 private:
  int saved_;
};

#define SKIP_WITHOUT_DNNL()                                                                    \
  if (!kernels::dnnl::available())                                                             \
  GTEST_SKIP() << "built without oneDNN (LOCKSTEP_DNNL=OFF or libdnnl-dev not installed): "   \
                  "float32 conv2d uses im2col"

class Conv2dDnnl : public ::testing::TestWithParam<ConvCase> {};

// (a) Batch 0 is declined (im2col writes the zero gradients); every other case is handled.
TEST_P(Conv2dDnnl, MatchesReference) {
  SKIP_WITHOUT_DNNL();
  const ConvCase& c = GetParam();
  const Conv2dGeom g = geom(c);
  const Buffers in = make_buffers(c, g, 31);
  Results ref, dn;
  compute(Family::Ref, c, g, in, ref);
  const bool handled = compute(Family::Dnnl, c, g, in, dn);
  if (g.n == 0) {
    EXPECT_FALSE(handled) << "batch 0 should fall back to im2col";
    return;
  }
  ASSERT_TRUE(handled) << "oneDNN declined " << c.name;
  const double tol = 1e-5;  // conv2d_test.cpp's float32 tolerance
  EXPECT_TRUE(agree(dn.y, ref.y, tol)) << "output";
  EXPECT_TRUE(agree(dn.gx, ref.gx, tol)) << "grad x";
  EXPECT_TRUE(agree(dn.gw, ref.gw, tol)) << "grad weight";
  EXPECT_TRUE(agree(dn.gb, ref.gb, tol)) << "grad bias";
}

// (b) The same thread count gives the same bits: twice at 3 threads, and two threads at once
// with 1 intra-op thread each (the cached primitives shared) against one such thread alone.
TEST_P(Conv2dDnnl, SameBitsForSameThreadCount) {
  SKIP_WITHOUT_DNNL();
  const ConvCase& c = GetParam();
  const Conv2dGeom g = geom(c);
  if (g.n == 0) GTEST_SKIP() << "batch 0 is im2col's";
  const Buffers in = make_buffers(c, g, 32);
  {
    Threads t(3);
    Results a, b;
    ASSERT_TRUE(compute(Family::Dnnl, c, g, in, a));
    ASSERT_TRUE(compute(Family::Dnnl, c, g, in, b));
    EXPECT_TRUE(bits_equal(a.y, b.y) && bits_equal(a.gx, b.gx) && bits_equal(a.gw, b.gw) &&
                bits_equal(a.gb, b.gb))
        << "3 threads, twice";
  }
  // Replica k has its own inputs (seed 40 + k), as DataParallel's shards of one batch.
  const Buffers shard[2] = {make_buffers(c, g, 40), make_buffers(c, g, 41)};
  Results alone[2];
  {
    Threads t(1);
    for (int k = 0; k < 2; ++k) ASSERT_TRUE(compute(Family::Dnnl, c, g, shard[k], alone[k]));
  }
  Results r[2];
  bool ok[2] = {true, true};
  auto replica = [&](int k) {
    set_num_threads(1);  // a new thread's default, as a replica with threads_per_device 1
    for (int rep = 0; rep < 20; ++rep) {
      ok[k] = compute(Family::Dnnl, c, g, shard[k], r[k]) && ok[k];
      ok[k] = ok[k] && bits_equal(alone[k].y, r[k].y) && bits_equal(alone[k].gx, r[k].gx) &&
              bits_equal(alone[k].gw, r[k].gw) && bits_equal(alone[k].gb, r[k].gb);
    }
  };
  std::thread t0(replica, 0), t1(replica, 1);
  t0.join();
  t1.join();
  for (int k = 0; k < 2; ++k)
    EXPECT_TRUE(ok[k]) << "replica " << k << ": other bits than on one thread alone";
}

// (c) The im2col family, float32, bit-identical at 1 and 3 threads.
TEST_P(Conv2dDnnl, Im2colFloat32BitsIndependentOfThreadCount) {
  const ConvCase& c = GetParam();
  const Conv2dGeom g = geom(c);
  const Buffers in = make_buffers(c, g, 33);
  Results one, three;
  {
    Threads t(1);
    compute(Family::Cpu, c, g, in, one);
  }
  {
    Threads t(3);
    compute(Family::Cpu, c, g, in, three);
  }
  EXPECT_TRUE(bits_equal(one.y, three.y)) << "output";
  EXPECT_TRUE(bits_equal(one.gx, three.gx)) << "grad x";
  EXPECT_TRUE(bits_equal(one.gw, three.gw)) << "grad weight";
  EXPECT_TRUE(bits_equal(one.gb, three.gb)) << "grad bias";
}

// Batches of several chunks (of 16) run in parallel: the reference CNN's layers at batch 37 and
// 64, against the reference and bit-identical at 1, 2 and 3 threads.
TEST(Conv2dDnnlChunks, ParallelChunksMatchReferenceAndThreadCount) {
  SKIP_WITHOUT_DNNL();
  for (const ConvCase& c :
       {ConvCase{"layer1_b37", 37, 1, 28, 28, 16, 3, 3, {1, 1}, {1, 1}},
        ConvCase{"layer2_b64", 64, 16, 14, 14, 32, 3, 3, {1, 1}, {1, 1}},
        ConvCase{"layer2_b37_nobias", 37, 16, 14, 14, 32, 3, 3, {1, 1}, {1, 1}, {1, 1}, 1,
                 false}}) {
    const Conv2dGeom g = geom(c);
    const Buffers in = make_buffers(c, g, 50);
    Results ref, r[3];
    compute(Family::Ref, c, g, in, ref);
    for (int t = 1; t <= 3; ++t) {
      Threads threads(t);
      ASSERT_TRUE(compute(Family::Dnnl, c, g, in, r[t - 1])) << c.name;
    }
    EXPECT_TRUE(agree(r[0].y, ref.y, 1e-5)) << c.name << " output";
    EXPECT_TRUE(agree(r[0].gx, ref.gx, 1e-5)) << c.name << " grad x";
    EXPECT_TRUE(agree(r[0].gw, ref.gw, 1e-5)) << c.name << " grad weight";
    EXPECT_TRUE(agree(r[0].gb, ref.gb, 1e-5)) << c.name << " grad bias";
    for (int t = 2; t <= 3; ++t)
      EXPECT_TRUE(bits_equal(r[0].y, r[t - 1].y) && bits_equal(r[0].gx, r[t - 1].gx) &&
                  bits_equal(r[0].gw, r[t - 1].gw) && bits_equal(r[0].gb, r[t - 1].gb))
          << c.name << ": 1 vs " << t << " threads";
  }
}

INSTANTIATE_TEST_SUITE_P(Table, Conv2dDnnl, ::testing::ValuesIn(conv_cases()),
                         [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace lockstep::testing
