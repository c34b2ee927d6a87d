// Every CUDA kernel of the reference workload against the reference CPU kernels
// (kernels::ref, src/ops/reference/) or, where there is no ref:: kernel, the CPU op or optimizer
// itself; table-driven over odd shapes with empty and size-1 dimensions. Tolerance
// |cuda − ref| ≤ 1e-4 + 1e-4·|ref| (fp32).
#include "ops/cuda/kernels.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <vector>

#include "cuda/cuda_test_util.h"
#include "lockstep/core/error.h"
#include "lockstep/core/tensor.h"
#include "lockstep/ops/ops.h"
#include "lockstep/optim/sgd.h"
#include "ops/kernels.h"

namespace lockstep::testing {
namespace {

namespace kc = lockstep::kernels::cuda;
namespace kr = lockstep::kernels::ref;

const std::vector<std::int64_t> kDims = {0, 1, 7, 33};

Tensor host_tensor(const std::vector<float>& v, std::vector<std::int64_t> shape) {
  return tensor(std::span<const float>(v), Shape(std::span<const std::int64_t>(shape)));
}
std::vector<float> to_vector(const Tensor& t) {
  const float* p = t.data_ptr<float>();  // host tensors made here are contiguous
  return std::vector<float>(p, p + t.numel());
}

// ---- GEMM --------------------------------------------------------------------------------------

TEST(CudaKernels, GemmMatchesReference) {
  LOCKSTEP_REQUIRE_CUDA();
  const auto exec = kc::on_device(0);
  unsigned seed = 1;
  int cases = 0;
  for (std::int64_t m : kDims)
    for (std::int64_t n : kDims)
      for (std::int64_t k : kDims)
        for (bool ta : {false, true})
          for (bool tb : {false, true})
            for (auto [alpha, beta] : {std::pair{1.f, 0.f}, std::pair{0.5f, -1.5f}}) {
              // Row strides one wider than needed, so lda/ldb/ldc are really used.
              const std::int64_t lda = (ta ? m : k) + 1, ldb = (tb ? k : n) + 1, ldc = n + 2;
              const auto a = random_floats(std::size_t((ta ? k : m) * lda), seed++);
              const auto b = random_floats(std::size_t((tb ? n : k) * ldb), seed++);
              auto c = random_floats(std::size_t(m * ldc), seed++);
              if (beta == 0.f)  // not read when beta == 0: NaN must not leak through
                c.assign(c.size(), std::numeric_limits<float>::quiet_NaN());
              std::vector<float> expect = c;
              kr::gemm<float>(ta, tb, m, n, k, alpha, a.data(), lda, b.data(), ldb, beta,
                              expect.data(), ldc);
              DeviceArray<float> da(a), db(b), dc(c);
              kc::gemm<float>(ta, tb, m, n, k, alpha, da.get(), lda, db.get(), ldb, beta, dc.get(),
                              ldc, exec);
              auto got = dc.to_host();
              if (beta == 0.f)  // the padding columns of C are not written: compare [m, n] only
                for (std::int64_t i = 0; i < m; ++i)
                  for (std::int64_t j = n; j < ldc; ++j) got[i * ldc + j] = expect[i * ldc + j];
              ASSERT_TRUE(close(got, expect))
                  << "m=" << m << " n=" << n << " k=" << k << " ta=" << ta << " tb=" << tb
                  << " alpha=" << alpha << " beta=" << beta;
              ++cases;
            }
  EXPECT_EQ(cases, 4 * 4 * 4 * 4 * 2);
}

TEST(CudaKernels, GemmDoubleMatchesReference) {
  LOCKSTEP_REQUIRE_CUDA();
  const std::int64_t m = 33, n = 7, k = 33;
  std::vector<double> a(m * k), b(k * n), c(m * n, 0.0);
  for (std::size_t i = 0; i < a.size(); ++i) a[i] = std::sin(double(i));
  for (std::size_t i = 0; i < b.size(); ++i) b[i] = std::cos(double(i));
  std::vector<double> expect = c;
  kr::gemm<double>(false, false, m, n, k, 1.0, a.data(), k, b.data(), n, 0.0, expect.data(), n);
  DeviceArray<double> da(a), db(b), dc(c);
  kc::gemm<double>(false, false, m, n, k, 1.0, da.get(), k, db.get(), n, 0.0, dc.get(), n,
                   kc::on_device(0));
  EXPECT_TRUE(close(dc.to_host(), expect, 1e-12, 1e-12));
}

// linear_epilogue (one cuBLASLt call with the bias, and ReLU, fused) against the unfused path
// it would replace (bias_rows + gemm with beta 1, + relu_forward) and the CPU reference, on odd
// shapes; pointers at 16-byte offsets (cuBLASLt told their real alignment) and a bias that is not
// 16-byte aligned (refused: false, nothing written).
TEST(CudaKernels, LinearEpilogueMatchesTheUnfusedPath) {
  LOCKSTEP_REQUIRE_CUDA();
  const auto exec = kc::on_device(0);
  int fused = 0;
  for (std::int64_t rows : {1, 7, 32, 129})
    for (std::int64_t out : {1, 5, 64, 257})
      for (std::int64_t in : {1, 10, 33})
        for (bool relu : {false, true})
          for (std::int64_t offset : {0, 4}) {  // floats: 16-byte steps off the block start
            const auto x = random_floats(std::size_t(offset + rows * in), unsigned(rows * 7 + in));
            const auto w = random_floats(std::size_t(offset + out * in), unsigned(out * 3 + in));
            const auto b = random_floats(std::size_t(offset + out), unsigned(out + 11));
            DeviceArray<float> dx(x), dw(w), db(b),
                dy(std::vector<float>(std::size_t(offset + rows * out), -7.f)),
                ref(std::vector<float>(std::size_t(rows * out), 0.f));
            kc::bias_rows<float>(db.get() + offset, ref.get(), rows, out, exec);
            kc::gemm<float>(false, true, rows, out, in, 1.f, dx.get() + offset, in,
                            dw.get() + offset, in, 1.f, ref.get(), out, exec);
            if (relu) kc::relu_forward<float>(ref.get(), ref.get(), rows * out, exec);
            const bool ran =
                kc::linear_epilogue<float>(rows, out, in, dx.get() + offset, dw.get() + offset,
                                           db.get() + offset, dy.get() + offset, relu, exec);
            auto got = dy.to_host();
            got.erase(got.begin(), got.begin() + offset);
            if (!ran) {  // nothing written
              for (float v : got) ASSERT_EQ(v, -7.f);
              continue;
            }
            ++fused;
            ASSERT_TRUE(close(got, ref.to_host()))
                << "rows=" << rows << " out=" << out << " in=" << in << " relu=" << relu
                << " offset=" << offset;
          }
  // cuBLASLt has BIAS and RELU_BIAS epilogues for fp32 on sm_90: most of the 192 cases fuse.
  EXPECT_GT(fused, 96) << "cuBLASLt offered an algorithm for only " << fused << " of 192 cases";
  // A bias 4 bytes off a 16-byte boundary: refused, y untouched.
  DeviceArray<float> dx(random_floats(40, 1)), dw(random_floats(40, 2)), db(random_floats(8, 3)),
      dy(std::vector<float>(16, -7.f));
  EXPECT_FALSE(kc::linear_epilogue<float>(4, 4, 10, dx.get(), dw.get(), db.get() + 1, dy.get(),
                                          false, exec));
  for (float v : dy.to_host()) EXPECT_EQ(v, -7.f);
  EXPECT_FALSE(
      kc::linear_epilogue<float>(4, 4, 0, dx.get(), dw.get(), db.get(), dy.get(), false, exec));
}

// What the fused ReLU does with NaN decides whether linear may use it: torch.relu (and our
// relu_forward) keeps NaN, so a NaN pre-activation must stay NaN (else a diverging model would
// train on silently, its NaN loss hidden). Recorded here so the first GPU run says which it is.
TEST(CudaKernels, LinearEpilogueReluKeepsNaN) {
  LOCKSTEP_REQUIRE_CUDA();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  DeviceArray<float> dx(std::vector<float>{nan, 1.f, 1.f, 1.f}), dw(std::vector<float>{1.f, 1.f}),
      db(std::vector<float>{-5.f, 0.f, 0.f, 0.f}), dy(std::vector<float>(2, 0.f));
  // x [2, 2] = {{nan, 1}, {1, 1}}, w [1, 2] = {{1, 1}}, bias [1] = {-5}: y = {nan, -3} → relu.
  if (!kc::linear_epilogue<float>(2, 1, 2, dx.get(), dw.get(), db.get(), dy.get(), true,
                                  kc::on_device(0)))
    GTEST_SKIP() << "cuBLASLt offered no RELU_BIAS algorithm for [2,2]x[1,2]";
  const auto got = dy.to_host();
  EXPECT_TRUE(std::isnan(got[0])) << "cuBLASLt's RELU_BIAS epilogue turned NaN into " << got[0];
  EXPECT_EQ(got[1], 0.f);
}

// ---- elementwise -------------------------------------------------------------------------------

TEST(CudaKernels, AddMulReluMatchReference) {
  LOCKSTEP_REQUIRE_CUDA();
  const auto exec = kc::on_device(0);
  for (std::int64_t rows : kDims)
    for (std::int64_t cols : kDims) {
      const std::size_t n = std::size_t(rows * cols);
      const auto a = random_floats(n, unsigned(100 + rows * 40 + cols));
      const auto b = random_floats(n, unsigned(200 + rows * 40 + cols));
      const Tensor ta = host_tensor(a, {rows, cols}), tb = host_tensor(b, {rows, cols});
      DeviceArray<float> da(a), db(b), out(std::vector<float>(n, 0.f)),
          grad(std::vector<float>(n, 0.f));
      for (auto op : {kernels::BinaryOp::Add, kernels::BinaryOp::Mul}) {
        Tensor expect = empty({rows, cols});
        kr::binary(op, ta, tb, expect);
        if (op == kernels::BinaryOp::Add)
          kc::add<float>(da.get(), db.get(), out.get(), std::int64_t(n), exec);
        else
          kc::mul<float>(da.get(), db.get(), out.get(), std::int64_t(n), exec);
        ASSERT_TRUE(close(out.to_host(), to_vector(expect))) << rows << "x" << cols;
      }
      // ReLU forward and backward against the CPU op and its autograd (threshold_backward).
      kc::relu_forward<float>(da.get(), out.get(), std::int64_t(n), exec);
      kc::relu_backward<float>(db.get(), out.get(), grad.get(), std::int64_t(n), exec);
      if (n == 0) continue;  // nothing launched; nothing to compare
      Tensor x = ta.detach().requires_grad_(true);
      Tensor y = relu(x);
      y.backward(tb);
      ASSERT_TRUE(close(out.to_host(), to_vector(y.detach()))) << rows << "x" << cols;
      ASSERT_TRUE(close(grad.to_host(), to_vector(x.grad()))) << rows << "x" << cols;
    }
}

TEST(CudaKernels, ReluKeepsNaNAndZeroesNegatives) {
  LOCKSTEP_REQUIRE_CUDA();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  DeviceArray<float> x(std::vector<float>{-1.f, 0.f, 2.f, nan, -0.f}),
      y(std::vector<float>(5, 0.f));
  kc::relu_forward<float>(x.get(), y.get(), 5, kc::on_device(0));
  const auto got = y.to_host();
  EXPECT_EQ(got[0], 0.f);
  EXPECT_EQ(got[1], 0.f);
  EXPECT_EQ(got[2], 2.f);
  EXPECT_TRUE(std::isnan(got[3]));
  EXPECT_EQ(got[4], 0.f);
}

TEST(CudaKernels, BiasGradMatchesReferenceSumTo) {
  LOCKSTEP_REQUIRE_CUDA();
  for (std::int64_t rows : {0, 1, 7, 33, 1000})
    for (std::int64_t cols : kDims) {
      const auto g = random_floats(std::size_t(rows * cols), unsigned(rows * 7 + cols));
      Tensor expect = empty({cols});
      kr::sum_to(host_tensor(g, {rows, cols}), expect);
      DeviceArray<float> dg(g), out(random_floats(std::size_t(cols), 9));
      kc::bias_grad<float>(dg.get(), out.get(), rows, cols, kc::on_device(0));
      ASSERT_TRUE(close(out.to_host(), to_vector(expect))) << rows << "x" << cols;
    }
}

// ---- softmax + cross-entropy -------------------------------------------------------------------

TEST(CudaKernels, CrossEntropyMatchesReference) {
  LOCKSTEP_REQUIRE_CUDA();
  const auto exec = kc::on_device(0);
  for (std::int64_t n : kDims)
    for (std::int64_t c : {1, 2, 7, 33, 1000})
      for (std::int64_t ignore : {-100, 0}) {
        const auto logits = random_floats(std::size_t(n * c), unsigned(n * 1000 + c), -8.f, 8.f);
        std::vector<std::int64_t> target(static_cast<std::size_t>(n));
        for (std::int64_t i = 0; i < n; ++i) target[i] = (i * 5 + 3) % c;
        if (n > 1 && ignore == -100) target[1] = -100;  // an ignored row
        double loss_ref = 0;
        std::int64_t count_ref = 0;
        std::vector<float> prob_ref(logits.size());
        kr::cross_entropy<float>(logits.data(), target.data(), n, c, ignore, &loss_ref, &count_ref,
                                 prob_ref.data());

        DeviceArray<float> dl(logits), prob(std::vector<float>(logits.size())),
            terms(std::vector<float>(std::size_t(n), 0.f)), grad(std::vector<float>(logits.size()));
        DeviceArray<std::int64_t> dt(target), cnt(std::vector<std::int64_t>{-1}),
            bad(std::vector<std::int64_t>{-1});
        DeviceArray<double> sum(std::vector<double>{-1.0});
        DeviceArray<float> gout(std::vector<float>{0.75f});
        kc::cross_entropy_forward<float>(dl.get(), dt.get(), n, c, ignore, prob.get(), terms.get(),
                                         sum.get(), cnt.get(), bad.get(), exec);
        const std::string where = "n=" + std::to_string(n) + " c=" + std::to_string(c) +
                                  " ignore=" + std::to_string(ignore);
        ASSERT_TRUE(close(prob.to_host(), prob_ref)) << where;
        EXPECT_EQ(cnt.to_host()[0], count_ref) << where;
        EXPECT_EQ(bad.to_host()[0], 0) << where;
        ASSERT_TRUE(close(sum.to_host(), std::vector<double>{loss_ref})) << where;

        // Backward: (p − onehot) · g / count, zero on ignored rows (the CPU op's formula).
        kc::cross_entropy_backward<float>(prob.get(), dt.get(), n, c, ignore, cnt.get(), gout.get(),
                                          grad.get(), exec);
        std::vector<float> grad_ref(logits.size(), 0.f);
        const double scale = 0.75 / double(std::max<std::int64_t>(count_ref, 1));
        for (std::int64_t i = 0; i < n; ++i) {
          if (target[i] == ignore) continue;
          for (std::int64_t j = 0; j < c; ++j)
            grad_ref[i * c + j] =
                float((double(prob_ref[i * c + j]) - (j == target[i] ? 1.0 : 0.0)) * scale);
        }
        ASSERT_TRUE(close(grad.to_host(), grad_ref)) << where;
      }
}

TEST(CudaKernels, CrossEntropyAgreesWithTheCpuOpAndItsGradient) {
  LOCKSTEP_REQUIRE_CUDA();
  const std::int64_t n = 33, c = 7;
  const auto logits = random_floats(std::size_t(n * c), 77);
  std::vector<std::int64_t> target(n);
  for (std::int64_t i = 0; i < n; ++i) target[i] = (i * 3) % c;
  Tensor x = host_tensor(logits, {n, c}).requires_grad_(true);
  Tensor loss = cross_entropy(x, tensor(std::span<const std::int64_t>(target), {n}));
  loss.backward();

  DeviceArray<float> dl(logits), prob(std::vector<float>(logits.size())),
      terms(std::vector<float>(std::size_t(n), 0.f)), grad(std::vector<float>(logits.size()));
  DeviceArray<std::int64_t> dt(target), cnt(std::vector<std::int64_t>{0}),
      bad(std::vector<std::int64_t>{0});
  DeviceArray<double> sum(std::vector<double>{0});
  const auto exec = kc::on_device(0);
  kc::cross_entropy_forward<float>(dl.get(), dt.get(), n, c, -100, prob.get(), terms.get(),
                                   sum.get(), cnt.get(), bad.get(), exec);
  kc::cross_entropy_backward<float>(prob.get(), dt.get(), n, c, -100, cnt.get(), nullptr,
                                    grad.get(), exec);
  const double mean = sum.to_host()[0] / double(cnt.to_host()[0]);
  EXPECT_TRUE(close(std::vector<double>{mean}, std::vector<double>{loss.item()}));
  EXPECT_TRUE(close(grad.to_host(), to_vector(x.grad())));
}

TEST(CudaKernels, CrossEntropyInvalidTargetIsCountedAndNaN) {
  LOCKSTEP_REQUIRE_CUDA();
  const std::int64_t n = 3, c = 4;
  DeviceArray<float> dl(random_floats(12, 5)), prob(std::vector<float>(12)),
      terms(std::vector<float>(3, 0.f)), grad(std::vector<float>(12));
  DeviceArray<std::int64_t> dt(std::vector<std::int64_t>{1, 4, -1}),
      cnt(std::vector<std::int64_t>{0}), bad(std::vector<std::int64_t>{0});
  DeviceArray<double> sum(std::vector<double>{0});
  kc::cross_entropy_forward<float>(dl.get(), dt.get(), n, c, -100, prob.get(), terms.get(),
                                   sum.get(), cnt.get(), bad.get(), kc::on_device(0));
  EXPECT_EQ(bad.to_host()[0], 2);
  EXPECT_EQ(cnt.to_host()[0], 1);
  EXPECT_TRUE(std::isnan(sum.to_host()[0]));
  const auto t = terms.to_host();
  EXPECT_FALSE(std::isnan(t[0]));
  EXPECT_TRUE(std::isnan(t[1]));
  EXPECT_TRUE(std::isnan(t[2]));
}

// The optional outputs that spare the host a round trip (CUDA graphs): the mean in T, computed
// from the same sum and count as the host would, and the first invalid row with its target.
TEST(CudaKernels, CrossEntropyWritesTheMeanAndTheFirstBadRow) {
  LOCKSTEP_REQUIRE_CUDA();
  const std::int64_t n = 300, c = 5;  // more rows than the reduce kernel's 256 threads
  const auto exec = kc::on_device(0);
  for (const std::vector<std::int64_t>& bad_rows :
       {std::vector<std::int64_t>{}, {299}, {257, 3}, {0, 1, 256}}) {
    std::vector<std::int64_t> target(n);
    for (std::int64_t i = 0; i < n; ++i) target[i] = i % c;
    target[7] = -100;  // ignored
    for (std::size_t k = 0; k < bad_rows.size(); ++k)
      target[bad_rows[k]] = c + 10 + std::int64_t(k);
    DeviceArray<float> dl(random_floats(std::size_t(n * c), 9)), prob(std::vector<float>(n * c)),
        terms(std::vector<float>(n, 0.f)), loss(std::vector<float>{-1.f});
    DeviceArray<std::int64_t> dt(target), cnt(std::vector<std::int64_t>{0}),
        bad(std::vector<std::int64_t>{0}), first(std::vector<std::int64_t>{-5, -5});
    DeviceArray<double> sum(std::vector<double>{0});
    kc::cross_entropy_forward<float>(dl.get(), dt.get(), n, c, -100, prob.get(), terms.get(),
                                     sum.get(), cnt.get(), bad.get(), exec, loss.get(),
                                     first.get());
    const std::string where = std::to_string(bad_rows.size()) + " bad rows";
    const double s = sum.to_host()[0];
    const std::int64_t count = cnt.to_host()[0];
    const float mean = loss.to_host()[0];
    if (bad_rows.empty()) {
      EXPECT_EQ(mean, static_cast<float>(s / static_cast<double>(count))) << where;
      EXPECT_EQ(first.to_host(), (std::vector<std::int64_t>{-1, 0})) << where;
    } else {
      EXPECT_TRUE(std::isnan(mean)) << where;
      const std::int64_t lowest = *std::min_element(bad_rows.begin(), bad_rows.end());
      EXPECT_EQ(first.to_host(), (std::vector<std::int64_t>{lowest, target[lowest]})) << where;
    }
  }
  // Nothing counts: the mean is NaN (PyTorch's mean over no elements).
  DeviceArray<float> dl(random_floats(4, 1)), prob(std::vector<float>(4)),
      terms(std::vector<float>(2, 0.f)), loss(std::vector<float>{0.f});
  DeviceArray<std::int64_t> dt(std::vector<std::int64_t>{-100, -100}),
      cnt(std::vector<std::int64_t>{1}), bad(std::vector<std::int64_t>{1}),
      first(std::vector<std::int64_t>{0, 0});
  DeviceArray<double> sum(std::vector<double>{1});
  kc::cross_entropy_forward<float>(dl.get(), dt.get(), 2, 2, -100, prob.get(), terms.get(),
                                   sum.get(), cnt.get(), bad.get(), exec, loss.get(), first.get());
  EXPECT_TRUE(std::isnan(loss.to_host()[0]));
  EXPECT_EQ(cnt.to_host()[0], 0);
}

// ---- fused SGD over a flat buffer ---------------------------------------------------------------

struct SgdCase {
  optim::SGDOptions options;
  const char* name;
};

TEST(CudaKernels, FlatSgdMatchesCpuOptimizerWithHasGradRule) {
  LOCKSTEP_REQUIRE_CUDA();
  const std::vector<SgdCase> cases = {
      {{.lr = 0.1}, "plain"},
      {{.lr = 0.05, .weight_decay = 0.01}, "weight_decay"},
      {{.lr = 0.1, .momentum = 0.9}, "momentum"},
      {{.lr = 0.1, .momentum = 0.9, .dampening = 0.3, .weight_decay = 1e-3}, "dampening"},
      {{.lr = 0.1, .momentum = 0.9, .weight_decay = 1e-2, .nesterov = true}, "nesterov"},
  };
  // Parameter sizes (a flat buffer of 5 segments, one empty, one over two blocks) and which of
  // them have a gradient at each of 4 steps: segment 2 gets its first gradient only at step 2,
  // so its momentum buffer starts there (PyTorch's rule), segment 4 never has one. The table of
  // a step holds the segments with a gradient and elements (the caller's has-gradient rule).
  const std::vector<std::int64_t> sizes = {7, 1, kc::kFlatChunk + 33, 0, 5};
  const std::vector<std::vector<bool>> has = {{true, true, false, true, false},
                                              {true, false, false, true, false},
                                              {true, true, true, true, false},
                                              {false, true, true, true, false}};
  std::vector<std::int64_t> offsets{0};
  for (auto s : sizes) offsets.push_back(offsets.back() + s);
  const std::int64_t numel = offsets.back();
  const auto exec = kc::on_device(0);

  for (const auto& tc : cases) {
    auto init = random_floats(std::size_t(numel), 11);
    std::vector<Tensor> params;
    for (std::size_t s = 0; s < sizes.size(); ++s)
      params.push_back(
          host_tensor(std::vector<float>(init.begin() + offsets[s], init.begin() + offsets[s + 1]),
                      {sizes[s]})
              .requires_grad_(true));
    optim::SGD cpu(params, tc.options);

    DeviceArray<float> p(init), g(std::vector<float>(std::size_t(numel), 0.f)),
        buf(std::vector<float>(numel, 123.f));  // garbage: must be ignored before first use
    const kc::SgdHyper hyper{tc.options.lr, tc.options.momentum, tc.options.dampening,
                             tc.options.weight_decay, tc.options.nesterov};
    for (std::size_t step = 0; step < has.size(); ++step) {
      const auto grads = random_floats(std::size_t(numel), unsigned(1000 + step));
      std::vector<kc::FlatSegment<float>> table;
      for (std::size_t s = 0; s < sizes.size(); ++s) {
        if (has[step][s]) {
          params[s].set_grad(host_tensor(
              std::vector<float>(grads.begin() + offsets[s], grads.begin() + offsets[s + 1]),
              {sizes[s]}));
          kc::FlatSegment<float> e;
          e.param_offset = e.grad_offset = e.state_offset = offsets[s];
          e.numel = sizes[s];
          e.flags = cpu.state(s, "momentum_buffer").defined() ? 0u : kc::kFlatFirstStep;
          if (e.numel > 0) table.push_back(e);
        } else {
          params[s].set_grad(Tensor());
        }
      }
      const std::int64_t blocks = kc::assign_flat_blocks(table.data(), std::int64_t(table.size()));
      DeviceArray<kc::FlatSegment<float>> dev_table(table);
      cuda::copy_to_device(g.get(), grads.data(), grads.size() * sizeof(float), 0);
      cpu.step();
      kc::sgd_flat_step<float>(p.get(), g.get(), buf.get(), dev_table.get(),
                               std::int64_t(table.size()), blocks, hyper, exec);
      std::vector<float> expect;
      for (auto& t : params) {
        auto v = to_vector(t.detach());
        expect.insert(expect.end(), v.begin(), v.end());
      }
      ASSERT_TRUE(close(p.to_host(), expect)) << tc.name << " step " << step;
    }
    if (tc.options.momentum != 0) {
      const auto b = buf.to_host();
      for (std::size_t s = 0; s < sizes.size(); ++s) {
        Tensor st = cpu.state(s, "momentum_buffer");
        if (!st.defined()) continue;
        std::vector<float> dev(b.begin() + offsets[s], b.begin() + offsets[s + 1]);
        EXPECT_TRUE(close(dev, to_vector(st))) << tc.name << " momentum of segment " << s;
      }
    }
  }
}

// Blocks of a flat launch: ceil(numel / kFlatChunk) per segment, in order. Runs without a GPU.
TEST(CudaKernels, FlatBlocksAreAssignedInOrder) {
  std::vector<kc::FlatSegment<float>> t(4);
  t[0].numel = 1;
  t[1].numel = kc::kFlatChunk;
  t[2].numel = kc::kFlatChunk + 1;
  t[3].numel = 0;
  EXPECT_EQ(kc::assign_flat_blocks(t.data(), 4), 4);
  EXPECT_EQ(t[0].first_block, 0);
  EXPECT_EQ(t[1].first_block, 1);
  EXPECT_EQ(t[2].first_block, 2);
  EXPECT_EQ(t[3].first_block, 4);
  t[3].numel = -1;
  EXPECT_THROW(kc::assign_flat_blocks(t.data(), 4), ValueError);
  t[3].numel = kc::kFlatChunk * (std::int64_t{1} << 31);
  EXPECT_THROW(kc::assign_flat_blocks(t.data(), 4), ValueError);
}

// Runs with and without a GPU (without one, cuda:0 is the missing device).
TEST(CudaKernels, LaunchOnMissingDeviceIsCudaError) {
  const int n = cuda::device_count();
  try {
    kc::relu_forward<float>(nullptr, nullptr, 10, kc::Exec{n, nullptr});
    ADD_FAILURE() << "no error";
  } catch (const CudaError& e) {
    EXPECT_NE(std::string(e.what()).find("cuda:" + std::to_string(n)), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace lockstep::testing
