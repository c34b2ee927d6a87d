// cuda:k tensors through the public API: every op of the reference workload on cuda:0 against
// the same op on the CPU (forward and autograd gradients), table-driven over odd shapes with
// empty and size-1 dimensions; copies between devices; the data_ptr guard; ops without a CUDA
// path and mixed devices fail with DeviceError; an out-of-range label is IndexError. Tolerance
// |cuda − cpu| ≤ 1e-4 + 1e-4·|cpu| (close() in cuda_test_util.h). Tests that need a GPU skip
// without one, printing the reason; those marked "no GPU needed" run everywhere.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <ostream>
#include <string>
#include <vector>

#include "cuda/cuda_test_util.h"
#include "lockstep/lockstep.h"
#include "support/tolerance.h"

namespace lockstep::testing {
namespace {

const Device kCuda0(DeviceType::CUDA, 0);

std::vector<double> host(const Tensor& t) { return t.to_vector<double>(); }

// ---- forward and backward of each op: CUDA against CPU -----------------------------------------

struct OpCase {
  std::string name;
  std::vector<std::vector<Shape>> shapes;  // each entry: the float inputs of one run
  std::function<Tensor(const std::vector<Tensor>&, Device)> f;
  bool positive = false;  // inputs drawn away from zero (div's denominator, log, sqrt)
  std::vector<DType> dtypes = {kFloat32};
};

// ---- the shapes of the ops beyond the reference workload ----------------------------------------

const std::vector<DType> kBoth = {kFloat32, kFloat64};

// Odd shapes of ranks 1 to 4 with empty and size-1 dimensions, for the along-a-dimension ops.
std::vector<Shape> along_shapes() {
  return {Shape{3, 5, 4}, Shape{1, 7}, Shape{6, 1},       Shape{2, 0, 3},
          Shape{9},       Shape{33},   Shape{2, 3, 1, 5}, Shape{0}};
}
// One-input runs of the shapes with a dimension d (and size(d) > 0 when nonempty_dim).
std::vector<std::vector<Shape>> with_dim(int d, bool nonempty_dim = false) {
  std::vector<std::vector<Shape>> out;
  for (const Shape& s : along_shapes())
    if (s.size() > d && !(nonempty_dim && s[d] == 0)) out.push_back({s});
  return out;
}
// Broadcasting pairs of any ranks (NumPy rules), both orders.
std::vector<std::vector<Shape>> broadcast_pairs() {
  std::vector<std::vector<Shape>> out;
  for (auto [a, b] :
       {std::pair{Shape{3, 1, 5}, Shape{4, 1}}, std::pair{Shape{2, 3, 4}, Shape{4}},
        std::pair{Shape{2, 3, 4}, Shape{3, 1}}, std::pair{Shape{1, 4}, Shape{3, 1}},
        std::pair{Shape{5, 1, 1, 2}, Shape{1, 4, 3, 1}}, std::pair{Shape{0, 3}, Shape{3}},
        std::pair{Shape{2, 1}, Shape{1, 0}}, std::pair{Shape{33, 7}, Shape{7}},
        std::pair{Shape{2, 1, 3, 1, 2}, Shape{4, 1, 5, 1}}}) {
    out.push_back({a, b});
    out.push_back({b, a});
  }
  return out;
}
// An index for dimension size n: repeats, out of order; empty when n == 0.
Tensor index_for(std::int64_t n, Device d) {
  std::vector<std::int64_t> v;
  if (n > 0) v = {n - 1, 0, n / 2, n - 1, 0};
  return tensor(v).to(d);
}

Shape sq(std::int64_t a, std::int64_t b) { return Shape{a, b}; }

// Odd 2-d shapes with empty and size-1 dimensions, and a 0-d and a 1-d one.
std::vector<std::vector<Shape>> same_shape_pairs() {
  std::vector<std::vector<Shape>> out;
  for (auto s : {sq(0, 5), sq(1, 1), sq(7, 33), sq(33, 7), sq(3, 0)}) out.push_back({s, s});
  out.push_back({Shape{}, Shape{}});
  out.push_back({Shape{13}, Shape{13}});
  return out;
}
std::vector<std::vector<Shape>> singles() {
  std::vector<std::vector<Shape>> out;
  for (auto& p : same_shape_pairs()) out.push_back({p[0]});
  return out;
}
std::vector<std::vector<Shape>> tensor_and_scalar() {
  return {{sq(7, 33), Shape{}}, {Shape{}, sq(1, 5)}, {sq(0, 3), Shape{}}, {Shape{13}, Shape{1}}};
}
// x [rows, in], w [out, in], b [out]
std::vector<std::vector<Shape>> linear_shapes() {
  std::vector<std::vector<Shape>> out;
  for (std::int64_t rows : {0, 1, 7, 33})
    for (auto [in, o] : {std::pair{1, 1}, std::pair{33, 7}, std::pair{7, 33}, std::pair{0, 4}})
      out.push_back({sq(rows, in), sq(o, in), Shape{o}});
  return out;
}

std::vector<OpCase> op_cases() {
  using V = const std::vector<Tensor>&;
  std::vector<OpCase> c;
  c.push_back({"add", same_shape_pairs(), [](V in, Device) { return add(in[0], in[1]); }});
  c.push_back({"sub", same_shape_pairs(), [](V in, Device) { return sub(in[0], in[1]); }});
  c.push_back({"mul", same_shape_pairs(), [](V in, Device) { return mul(in[0], in[1]); }});
  c.push_back({"div", same_shape_pairs(), [](V in, Device) { return div(in[0], in[1]); }, true});
  c.push_back(
      {"add_scalar_tensor", tensor_and_scalar(), [](V in, Device) { return add(in[0], in[1]); }});
  c.push_back(
      {"mul_scalar_tensor", tensor_and_scalar(), [](V in, Device) { return mul(in[0], in[1]); }});
  c.push_back({"div_scalar_tensor", tensor_and_scalar(),
               [](V in, Device) { return div(in[0], in[1]); }, true});
  // Shapes that differ only in size-1 dimensions: the gradient of the smaller one is a reshape.
  c.push_back({"add_size1_dims",
               {{Shape{1, 1, 3}, Shape{3}}, {Shape{1, 4}, Shape{4}}, {Shape{1}, Shape{}}},
               [](V in, Device) { return add(in[0], in[1]); }});
  c.push_back({"add_double", singles(), [](V in, Device) { return add(in[0], 1.5); }});
  c.push_back({"mul_double", singles(), [](V in, Device) { return mul(in[0], -2.5); }});
  c.push_back({"neg", singles(), [](V in, Device) { return neg(in[0]); }});
  c.push_back({"relu", singles(), [](V in, Device) { return relu(in[0]); }});
  c.push_back({"tanh", singles(), [](V in, Device) { return tanh(in[0]); }});
  c.push_back({"sum", singles(), [](V in, Device) { return sum(in[0]); }});
  c.push_back({"mean", singles(), [](V in, Device) { return mean(in[0]); }});
  c.push_back(
      {"mse_loss", same_shape_pairs(), [](V in, Device) { return mse_loss(in[0], in[1]); }});
  c.push_back(
      {"linear", linear_shapes(), [](V in, Device) { return linear(in[0], in[1], in[2]); }});
  c.push_back(
      {"linear_no_bias", linear_shapes(), [](V in, Device) { return linear(in[0], in[1]); }});
  c.push_back(
      {"matmul",
       {{sq(7, 33), sq(33, 5)}, {sq(0, 3), sq(3, 4)}, {sq(1, 1), sq(1, 1)}, {sq(5, 0), sq(0, 6)}},
       [](V in, Device) { return matmul(in[0], in[1]); }});
  // cat along dim 0 (DataParallel's gather): blocks of different lengths, empty ones included.
  c.push_back({"cat_dim0",
               {{sq(3, 5), sq(0, 5), sq(4, 5)}, {sq(1, 1), sq(2, 1)}, {Shape{5}, Shape{2}}},
               [](V in, Device) { return cat(in, 0); }});
  // A chain as the reference MLP builds it, so the engine sums gradients on the device.
  c.push_back({"mlp_chain", {{sq(9, 5), sq(6, 5), Shape{6}, sq(3, 6), Shape{3}}}, [](V in, Device) {
                 Tensor h = relu(linear(in[0], in[1], in[2]));
                 Tensor t = tanh(linear(h, in[3], in[4]));
                 return add(mul(t, t), t);
               }});
  // cross_entropy: logits [n, c], int64 targets drawn from a fixed generator (some ignored).
  for (std::int64_t ignore : {std::int64_t{-100}, std::int64_t{1}}) {
    c.push_back({ignore == -100 ? "cross_entropy" : "cross_entropy_ignore_1",
                 {{sq(7, 33)}, {sq(1, 1)}, {sq(33, 7)}, {sq(0, 4)}, {sq(2, 1)}, {sq(40, 1000)}},
                 [ignore](V in, Device d) {
                   Generator gen(7);
                   Tensor target = randint(0, in[0].size(1), {in[0].size(0)}, kInt64, &gen);
                   return cross_entropy(in[0], target.to(d), ignore);
                 }});
  }

  // ---- elementwise math (float32 and float64) ----
  using DT = std::vector<DType>;
  c.push_back({"exp", singles(), [](V in, Device) { return exp(in[0]); }, false, kBoth});
  c.push_back({"log", singles(), [](V in, Device) { return log(in[0]); }, true, kBoth});
  c.push_back({"sqrt", singles(), [](V in, Device) { return sqrt(in[0]); }, true, kBoth});
  c.push_back({"sigmoid", singles(), [](V in, Device) { return sigmoid(in[0]); }, false, kBoth});
  c.push_back({"gelu", singles(), [](V in, Device) { return gelu(in[0]); }, false, kBoth});
  c.push_back({"pow_2", singles(), [](V in, Device) { return pow(in[0], 2.0); }, false, kBoth});
  c.push_back({"pow_3", singles(), [](V in, Device) { return pow(in[0], 3.0); }, false, kBoth});
  c.push_back({"pow_0", singles(), [](V in, Device) { return pow(in[0], 0.0); }, false, kBoth});
  c.push_back({"pow_half", singles(), [](V in, Device) { return pow(in[0], 0.5); }, true, kBoth});
  c.push_back({"pow_neg", singles(), [](V in, Device) { return pow(in[0], -1.5); }, true, kBoth});
  c.push_back({"neg_f64", singles(), [](V in, Device) { return neg(in[0]); }, false, DT{kFloat64}});
  // ---- broadcasting of any ranks, forward and the sum_to of the gradients ----
  c.push_back({"add_broadcast", broadcast_pairs(), [](V in, Device) { return add(in[0], in[1]); },
               false, kBoth});
  c.push_back({"sub_broadcast", broadcast_pairs(), [](V in, Device) { return sub(in[0], in[1]); },
               false, kBoth});
  c.push_back({"mul_broadcast", broadcast_pairs(), [](V in, Device) { return mul(in[0], in[1]); },
               false, kBoth});
  c.push_back({"div_broadcast", broadcast_pairs(), [](V in, Device) { return div(in[0], in[1]); },
               true, kBoth});
  // ---- reductions along every dimension (and negative dims), with and without keepdim ----
  for (int d = 0; d < 4; ++d)
    for (bool keep : {false, true}) {
      const std::string suffix = std::to_string(d) + (keep ? "_keepdim" : "");
      c.push_back({"sum_dim" + suffix, with_dim(d),
                   [d, keep](V in, Device) { return sum(in[0], d, keep); }, false, kBoth});
      c.push_back({"mean_dim" + suffix, with_dim(d),
                   [d, keep](V in, Device) { return mean(in[0], d, keep); }, false, kBoth});
      c.push_back({"max_dim" + suffix, with_dim(d, true),
                   [d, keep](V in, Device) { return max(in[0], d, keep).first; }, false, kBoth});
    }
  c.push_back(
      {"sum_dim_neg1", with_dim(0), [](V in, Device) { return sum(in[0], -1); }, false, kBoth});
  std::vector<std::vector<Shape>> nonempty;
  for (const Shape& s : along_shapes())
    if (s.numel() > 0) nonempty.push_back({s});
  c.push_back({"max_all", nonempty, [](V in, Device) { return max(in[0]); }, false, kBoth});
  for (int d = 0; d < 4; ++d) {
    c.push_back({"softmax_dim" + std::to_string(d), with_dim(d),
                 [d](V in, Device) { return softmax(in[0], d); }, false, kBoth});
    c.push_back({"log_softmax_dim" + std::to_string(d), with_dim(d),
                 [d](V in, Device) { return log_softmax(in[0], d); }, false, kBoth});
  }
  c.push_back(
      {"softmax_neg1", with_dim(0), [](V in, Device) { return softmax(in[0], -1); }, false, kBoth});
  // ---- shape ops producing copies ----
  c.push_back({"t",
               {{sq(7, 33)}, {sq(1, 1)}, {sq(0, 5)}, {sq(3, 0)}, {sq(1, 9)}, {sq(9, 1)}},
               [](V in, Device) { return t(in[0]); },
               false,
               kBoth});
  for (int d = 0; d < 4; ++d) {
    c.push_back({"narrow_dim" + std::to_string(d), with_dim(d),
                 [d](V in, Device) {
                   const std::int64_t n = in[0].size(d);
                   return narrow(in[0], d, n / 3, n - n / 3 - n / 4);
                 },
                 false, kBoth});
    c.push_back(
        {"index_select_dim" + std::to_string(d), with_dim(d),
         [d](V in, Device dev) { return index_select(in[0], d, index_for(in[0].size(d), dev)); },
         false, kBoth});
  }
  for (int d = 1; d < 3; ++d) {
    // three inputs differing only along d (one empty there)
    std::vector<std::vector<Shape>> runs;
    for (const Shape& s : along_shapes()) {
      if (s.size() <= d) continue;
      Shape a = s, b = s, e = s;
      b[d] = s[d] + 2;
      e[d] = 0;
      runs.push_back({a, e, b});
    }
    c.push_back({"cat_dim" + std::to_string(d), runs, [d](V in, Device) { return cat(in, d); },
                 false, kBoth});
  }
  c.push_back({"cat_dim_neg1",
               {{sq(3, 5), sq(3, 2)}, {sq(0, 1), sq(0, 4)}},
               [](V in, Device) { return cat(in, -1); },
               false,
               kBoth});
  // a chain through the new ops, as a small attention-like block builds it
  c.push_back({"softmax_chain",
               {{Shape{4, 6}, Shape{6, 5}, Shape{5}}},
               [](V in, Device) {
                 Tensor s = softmax(mul(matmul(in[0], in[1]), 0.5), -1);
                 Tensor h = gelu(add(s, in[2]));
                 return sum(mul(h, sigmoid(t(t(h)))), 0);
               },
               false,
               kBoth});
  // ---- nanoGPT's attention ops (issue 19): batched matmul, transpose / permute, split, the
  // tanh GELU, scaled_dot_product_attention and qkv_attention (the fused CUDA kernel of
  // src/ops/cuda/attention.cu) ----
  c.push_back({"gelu_tanh", singles(), [](V in, Device) { return gelu(in[0], "tanh"); }, false,
               kBoth});
  c.push_back({"matmul_batched",
               {{Shape{2, 3, 5, 4}, Shape{2, 3, 4, 6}},
                {Shape{3, 1, 7}, Shape{3, 7, 1}},
                {Shape{0, 3, 4}, Shape{0, 4, 2}},
                {Shape{2, 3, 0}, Shape{2, 0, 4}},
                {Shape{2, 5, 4}, Shape{4, 3}},
                {Shape{5, 4}, Shape{3, 4, 6}}},
               [](V in, Device) { return matmul(in[0], in[1]); },
               false,
               kBoth});
  c.push_back({"permute_0213",
               {{Shape{2, 3, 4, 5}}, {Shape{1, 7, 1, 3}}, {Shape{2, 0, 3, 1}}},
               [](V in, Device) { return permute(in[0], {0, 2, 1, 3}); },
               false,
               kBoth});
  c.push_back({"transpose_neg",
               {{Shape{3, 5, 4}}, {Shape{1, 7}}, {Shape{2, 0, 3}}},
               [](V in, Device) { return transpose(in[0], -1, 0); },
               false,
               kBoth});
  c.push_back({"split_dim1",
               {{Shape{3, 7, 2}}, {Shape{2, 2}}},
               [](V in, Device) {
                 auto p = split(in[0], 2, 1);
                 return cat({mul(p.back(), 3.0), p.front()}, 1);
               },
               false,
               kBoth});
  for (bool causal : {false, true})
    c.push_back({causal ? "sdpa_causal" : "sdpa",
                 {{Shape{2, 3, 5, 4}, Shape{2, 3, 5, 4}, Shape{2, 3, 5, 4}},
                  {Shape{1, 1, 1, 3}, Shape{1, 1, 1, 3}, Shape{1, 1, 1, 3}},
                  {Shape{1, 2, 6, 1}, Shape{1, 2, 6, 1}, Shape{1, 2, 6, 1}},
                  {Shape{2, 3, 4}, Shape{2, 5, 4}, Shape{2, 5, 2}}},
                 [causal](V in, Device) {
                   return scaled_dot_product_attention(in[0], in[1], in[2], causal);
                 },
                 false,
                 kBoth});
  c.push_back({"qkv_attention",
               {{Shape{2, 5, 12}}, {Shape{1, 1, 6}}, {Shape{3, 4, 6}}},
               [](V in, Device) { return qkv_attention(in[0], 2); },
               false,
               kBoth});
  return c;
}

// gtest prints the parameter of a failing or skipped case: the op's name.
void PrintTo(const OpCase& op, std::ostream* os) { *os << op.name; }

class CudaOps : public ::testing::TestWithParam<OpCase> {};

TEST_P(CudaOps, ForwardAndGradientsMatchCpu) {
  LOCKSTEP_REQUIRE_CUDA();
  const OpCase& op = GetParam();
  std::uint64_t seed = 1;
  for (const auto& shapes : op.shapes) {
    for (DType dt : op.dtypes) {
      std::vector<Tensor> cpu_in, cuda_in;
      for (const Shape& s : shapes) {
        Generator gen(seed++);
        Tensor x = randn(s, dt, &gen);
        if (op.positive) x = add(mul(x, x), 0.5);  // ≥ 0.5
        cpu_in.push_back(x.detach().requires_grad_());
        cuda_in.push_back(x.detach().to(kCuda0).requires_grad_());
      }
      std::string where = op.name;
      where.append(" ").append(to_string(dt));
      for (const Shape& s : shapes) where.append(" ").append(s.str());
      Tensor y_cpu = op.f(cpu_in, cpu()), y_cuda = op.f(cuda_in, kCuda0);
      ASSERT_EQ(y_cuda.device(), kCuda0) << where;
      ASSERT_EQ(y_cuda.shape(), y_cpu.shape()) << where;
      ASSERT_TRUE(close(host(y_cuda), host(y_cpu))) << where << " forward";
      ASSERT_EQ(y_cuda.dtype(), y_cpu.dtype()) << where;
      Generator gen(seed++);
      Tensor g = randn(y_cpu.shape(), dt, &gen);
      y_cpu.backward(g);
      y_cuda.backward(g.to(kCuda0));
      for (std::size_t i = 0; i < cpu_in.size(); ++i) {
        const Tensor gc = cpu_in[i].grad(), gd = cuda_in[i].grad();
        ASSERT_EQ(gd.defined(), gc.defined()) << where << " input " << i;
        if (!gc.defined()) continue;
        ASSERT_EQ(gd.device(), kCuda0) << where << " input " << i;
        ASSERT_EQ(gd.shape(), gc.shape()) << where << " input " << i;
        EXPECT_TRUE(close(host(gd), host(gc))) << where << " gradient of input " << i;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Table, CudaOps, ::testing::ValuesIn(op_cases()),
                         [](const auto& info) { return info.param.name; });

TEST(CudaTensor, ReluAndTanhKeepEdgeValuesAsTheCpu) {
  LOCKSTEP_REQUIRE_CUDA();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  Tensor x = tensor({-1.f, 0.f, 2.f, nan, -0.f, 30.f, -30.f});
  for (auto f :
       {+[](const Tensor& t) { return relu(t); }, +[](const Tensor& t) { return tanh(t); }})
    EXPECT_TRUE(close(host(f(x.to(kCuda0))), host(f(x))));
}

TEST(CudaTensor, Float64OpsMatchCpu) {
  LOCKSTEP_REQUIRE_CUDA();
  Generator gen(3);
  Tensor x = randn({9, 5}, kFloat64, &gen), w = randn({4, 5}, kFloat64, &gen),
         b = randn({4}, kFloat64, &gen);
  Tensor xd = x.to(kCuda0), wd = w.to(kCuda0).requires_grad_(), bd = b.to(kCuda0);
  Tensor wc = w.detach().requires_grad_();
  Tensor target = tensor(std::vector<std::int64_t>{0, 3, 2, 1, 0, 3, 3, 2, 1});
  Tensor lc = cross_entropy(tanh(linear(x, wc, b)), target);
  Tensor ld = cross_entropy(tanh(linear(xd, wd, bd)), target.to(kCuda0));
  EXPECT_EQ(ld.dtype(), kFloat64);
  EXPECT_TRUE(close(host(ld), host(lc), 1e-12, 1e-12));
  lc.backward();
  ld.backward();
  EXPECT_TRUE(close(host(wd.grad()), host(wc.grad()), 1e-12, 1e-10));
}

// ---- copies, item, in-place ops
// ------------------------------------------------------------------

TEST(CudaTensor, ToAndItemRoundTrip) {
  LOCKSTEP_REQUIRE_CUDA();
  for (DType dt : {kFloat32, kFloat64, kInt64})
    for (const Shape& s : {Shape{0}, Shape{}, Shape{1}, Shape{7, 33}, Shape{3, 0, 2}}) {
      Tensor a = arange(0.0, static_cast<double>(s.numel()), 1.0, dt).reshape(s);
      Tensor d = a.to(kCuda0);
      EXPECT_EQ(d.device(), kCuda0);
      EXPECT_EQ(d.dtype(), dt);
      EXPECT_EQ(d.shape(), s);
      EXPECT_TRUE(d.to(kCuda0).is_same(d));  // already there: the tensor itself
      Tensor back = d.to(cpu());
      EXPECT_EQ(back.device(), cpu());
      EXPECT_TRUE(BitEqual(back, a)) << to_string(dt) << " " << s.str();
      EXPECT_EQ(d.to_vector<double>(), a.to_vector<double>());
      if (s.numel() == 1) {
        EXPECT_EQ(d.item(), a.item());
      }
    }
  EXPECT_EQ(scalar_tensor(-2.75, kCuda0).item(), -2.75);
  EXPECT_EQ(scalar_tensor(7, TensorOptions(kInt64).device(kCuda0)).item<std::int64_t>(), 7);
  EXPECT_THROW(zeros({2}, kCuda0).item(), ShapeError);
}

TEST(CudaTensor, LargeUploadBypassesStaging) {
  LOCKSTEP_REQUIRE_CUDA();
  const std::int64_t n = (std::int64_t{80} << 20) / 4;  // 80 MiB: above the 64 MiB staging limit
  Tensor a = arange(0.0, static_cast<double>(n), 1.0, kFloat32);
  Tensor back = a.to(kCuda0).to(cpu());
  EXPECT_EQ(back.data_ptr<float>()[0], 0.f);
  EXPECT_EQ(back.data_ptr<float>()[n - 1], static_cast<float>(n - 1));
  EXPECT_EQ(std::memcmp(back.data_ptr<float>(), a.data_ptr<float>(), std::size_t(n) * 4), 0);
}

TEST(CudaTensor, CloneFillCopyAddMulInPlace) {
  LOCKSTEP_REQUIRE_CUDA();
  Tensor a = tensor({1.f, 2.f, 3.f, 4.f}, {2, 2}).to(kCuda0);
  Tensor c = a.clone();
  c.fill_(5.0);
  EXPECT_EQ(a.to_vector<float>(), (std::vector<float>{1, 2, 3, 4}));  // a deep copy
  EXPECT_EQ(c.to_vector<float>(), (std::vector<float>(4, 5.f)));
  c.zero_();
  EXPECT_EQ(c.to_vector<float>(), (std::vector<float>(4, 0.f)));
  c.copy_(tensor({9.f, 8.f, 7.f, 6.f}, {2, 2}));  // host to device
  EXPECT_EQ(c.to_vector<float>(), (std::vector<float>{9, 8, 7, 6}));
  Tensor h = zeros({2, 2});
  h.copy_(c);  // device to host
  EXPECT_EQ(h.to_vector<float>(), (std::vector<float>{9, 8, 7, 6}));
  c.copy_(tensor(std::vector<double>{1.5, 2.5, 3.5, 4.5}, {2, 2}));  // converting copy
  EXPECT_EQ(c.to_vector<float>(), (std::vector<float>{1.5f, 2.5f, 3.5f, 4.5f}));
  c.copy_(a);  // device to device
  EXPECT_EQ(c.to_vector<float>(), (std::vector<float>{1, 2, 3, 4}));
  c.add_(a, 0.5);
  EXPECT_EQ(c.to_vector<float>(), (std::vector<float>{1.5f, 3, 4.5f, 6}));
  c.add_(scalar_tensor(1.0, kCuda0));
  EXPECT_EQ(c.to_vector<float>(), (std::vector<float>{2.5f, 4, 5.5f, 7}));
  c.mul_(2.0);
  EXPECT_EQ(c.to_vector<float>(), (std::vector<float>{5, 8, 11, 14}));
  EXPECT_THROW(c.add_(ones({2, 2})), DeviceError);  // other on the host
  Tensor i64 = full({3}, 4.0, TensorOptions(kInt64).device(kCuda0));
  EXPECT_EQ(i64.to_vector<std::int64_t>(), (std::vector<std::int64_t>{4, 4, 4}));
  Tensor d = a.to(kFloat64);
  EXPECT_EQ(d.device(), kCuda0);
  EXPECT_EQ(d.dtype(), kFloat64);
  EXPECT_EQ(d.to_vector<double>(), (std::vector<double>{1, 2, 3, 4}));
  EXPECT_NE(a.str().find("device=cuda:0"), std::string::npos) << a.str();
  Tensor r = randn({3, 4}, kCuda0);
  EXPECT_EQ(r.device(), kCuda0);
}

TEST(CudaTensor, ToIsDifferentiableAcrossDevices) {
  LOCKSTEP_REQUIRE_CUDA();
  Tensor x = tensor({1.f, -2.f, 3.f}).requires_grad_();
  Tensor y = sum(mul(x.to(kCuda0), 3.0));
  y.backward();
  ASSERT_TRUE(x.grad().defined());
  EXPECT_EQ(x.grad().device(), cpu());
  EXPECT_EQ(x.grad().to_vector<float>(), (std::vector<float>{3, 3, 3}));
}

TEST(CudaTensor, CopiesBetweenTwoGpus) {
  LOCKSTEP_REQUIRE_CUDA();
  if (cuda::device_count() < 2) GTEST_SKIP() << "needs two CUDA devices, this machine has one";
  const Device cuda1(DeviceType::CUDA, 1);
  Tensor a = arange(0.0, 1000.0, 1.0, kFloat32);
  Tensor b = a.to(kCuda0).to(cuda1);
  EXPECT_EQ(b.device(), cuda1);
  EXPECT_TRUE(BitEqual(b.to(cpu()), a));
  Tensor c = zeros({1000}, kCuda0);
  c.copy_(b);
  EXPECT_TRUE(BitEqual(c.to(cpu()), a));
}

TEST(CudaTensor, ModuleToMovesParametersAndBack) {
  LOCKSTEP_REQUIRE_CUDA();
  manual_seed(0);
  nn::Sequential model;
  model.push_back(std::make_shared<nn::Linear>(5, 4));
  model.push_back(std::make_shared<nn::ReLU>());
  model.push_back(std::make_shared<nn::Linear>(4, 3));
  StateDict before;
  for (const auto& [k, v] : model.state_dict()) before.insert(k, v.clone());
  Tensor x = randn({6, 5});
  Tensor y_cpu = model.forward(x);
  model.to(kCuda0);
  for (const Tensor& p : model.parameters()) EXPECT_EQ(p.device(), kCuda0);
  Tensor y_cuda = model.forward(x.to(kCuda0));
  EXPECT_TRUE(close(host(y_cuda), host(y_cpu)));
  model.to(cpu());
  for (const auto& [k, v] : model.state_dict()) EXPECT_TRUE(BitEqual(v, before.at(k))) << k;
}

// ---- the data_ptr guard, ops without a CUDA path, mixed devices, bad labels ---------------------

TEST(CudaTensor, DataPtrRefusesDeviceMemory) {
  LOCKSTEP_REQUIRE_CUDA();
  Tensor t = zeros({4}, kCuda0);
  try {
    (void)t.data_ptr<float>();
    FAIL() << "expected DeviceError";
  } catch (const DeviceError& e) {
    EXPECT_NE(std::string(e.what()).find("data_ptr: the tensor is on cuda:0 (device memory)"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW((void)t.raw_data(), DeviceError);
  EXPECT_NE(t.device_data_ptr<float>(), nullptr);
  EXPECT_EQ(t.device_raw_data(), static_cast<void*>(t.device_data_ptr<float>()));
  EXPECT_THROW((void)t.device_data_ptr<double>(), DTypeError);
  // A view along dim 0 points into the same block.
  EXPECT_EQ(t.narrow(0, 1, 2).device_data_ptr<float>(), t.device_data_ptr<float>() + 1);
}

TEST(CudaTensor, Int64InPlaceArithmeticMatchesTheCpu) {
  LOCKSTEP_REQUIRE_CUDA();
  // The last ops that refused cuda:k tensors (in-place int64 add_ / mul_), now exact.
  for (double alpha : {1.0, -3.0, 2.7}) {
    Tensor a = randint(-50, 50, {4, 6}, kInt64), b = randint(-50, 50, {24}, kInt64);
    Tensor ad = a.to(kCuda0), bd = b.to(kCuda0);
    a.add_(b, alpha);
    ad.add_(bd, alpha);
    EXPECT_EQ(ad.to_vector<std::int64_t>(), a.to_vector<std::int64_t>()) << alpha;
    Tensor one = full({1}, 7.0, TensorOptions(kInt64));
    a.add_(one, alpha);
    ad.add_(one.to(kCuda0), alpha);
    EXPECT_EQ(ad.to_vector<std::int64_t>(), a.to_vector<std::int64_t>()) << alpha;
    a.mul_(alpha);
    ad.mul_(alpha);
    EXPECT_EQ(ad.to_vector<std::int64_t>(), a.to_vector<std::int64_t>()) << alpha;
  }
  Tensor e = zeros({0, 3}, TensorOptions(kInt64).device(kCuda0));
  e.add_(e);
  e.mul_(2.0);
  EXPECT_EQ(e.shape(), (Shape{0, 3}));
}

TEST(CudaTensor, MixedDevicesThrowDeviceError) {
  LOCKSTEP_REQUIRE_CUDA();
  Tensor h = ones({2, 3}), d = ones({2, 3}, kCuda0);
  EXPECT_THROW(add(h, d), DeviceError);
  EXPECT_THROW(sub(d, h), DeviceError);
  EXPECT_THROW(mul(d, h), DeviceError);
  EXPECT_THROW(div(h, d), DeviceError);
  EXPECT_THROW(matmul(d, ones({3, 2})), DeviceError);
  EXPECT_THROW(linear(d, ones({4, 3})), DeviceError);
  EXPECT_THROW(linear(d, ones({4, 3}, kCuda0), ones({4})), DeviceError);
  EXPECT_THROW(mse_loss(d, h), DeviceError);
  EXPECT_THROW(cross_entropy(d, tensor(std::vector<std::int64_t>{0, 1})), DeviceError);
  EXPECT_THROW(index_select(d, 0, tensor(std::vector<std::int64_t>{0})), DeviceError);
  EXPECT_THROW(cat({d, h}, 1), DeviceError);
  EXPECT_THROW(eq(d, h), DeviceError);
  Tensor leaf = ones({2, 3}, kCuda0).requires_grad_();
  EXPECT_THROW(sum(leaf).backward(ones({})), DeviceError);  // a host gradient for a device output
}

TEST(CudaTensor, OutOfRangeLabelIsIndexErrorAsOnCpu) {
  LOCKSTEP_REQUIRE_CUDA();
  Tensor logits = randn({4, 3});
  for (std::int64_t bad : {std::int64_t{3}, std::int64_t{-1}}) {
    Tensor target = tensor(std::vector<std::int64_t>{0, bad, 1, 2});
    std::string cpu_msg, cuda_msg;
    try {
      cross_entropy(logits, target);
    } catch (const IndexError& e) {
      cpu_msg = e.what();
    }
    try {
      cross_entropy(logits.to(kCuda0), target.to(kCuda0));
    } catch (const IndexError& e) {
      cuda_msg = e.what();
    }
    EXPECT_FALSE(cuda_msg.empty()) << "no IndexError for target " << bad;
    EXPECT_EQ(cuda_msg, cpu_msg);
  }
  // ignore_index is not out of range
  Tensor target = tensor(std::vector<std::int64_t>{0, -100, 1, 2});
  EXPECT_NO_THROW(cross_entropy(logits.to(kCuda0), target.to(kCuda0)));
}

// ---- the ops beyond the reference workload: exact results --------------------------------------

// Inputs with NaN, ±inf, signed zeros and ties at fixed places.
Tensor edge_tensor(const Shape& s, DType dt, unsigned seed) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  const std::vector<double> pool = {nan, inf, -inf, -0.0, 0.0, 2.0, 2.0, -3.5, 1e-40, 88.0, -88.0};
  std::vector<double> v(static_cast<std::size_t>(s.numel()));
  Generator gen(seed);
  for (auto& x : v) {
    const auto k = gen.next_below(2 * pool.size());
    x = k < pool.size() ? pool[k] : gen.next_double() * 8 - 4;
  }
  return tensor(v, s).to(dt);
}

TEST(CudaTensor, ElementwiseMathKeepsEdgeValuesAsTheCpu) {
  LOCKSTEP_REQUIRE_CUDA();
  using F = std::function<Tensor(const Tensor&)>;
  const std::vector<std::pair<std::string, F>> ops = {
      {"exp", [](const Tensor& x) { return exp(x); }},
      {"log", [](const Tensor& x) { return log(x); }},
      {"sqrt", [](const Tensor& x) { return sqrt(x); }},
      {"pow", [](const Tensor& x) { return pow(x, 2.5); }},
      {"sigmoid", [](const Tensor& x) { return sigmoid(x); }},
      {"gelu", [](const Tensor& x) { return gelu(x); }}};
  for (DType dt : {kFloat32, kFloat64}) {
    Tensor x = edge_tensor({200}, dt, 3);
    for (const auto& [name, f] : ops) {
      const auto want = host(f(x)), got = host(f(x.to(kCuda0)));
      ASSERT_EQ(got.size(), want.size());
      for (std::size_t i = 0; i < want.size(); ++i) {
        // infinities and NaN exactly; −0.0 kept; finite values within the tolerance
        EXPECT_EQ(std::isnan(got[i]), std::isnan(want[i]))
            << name << " at " << x.to_vector<double>()[i];
        if (std::isinf(want[i]) || want[i] == 0) {
          EXPECT_EQ(got[i], want[i]) << name;
          EXPECT_EQ(std::signbit(got[i]), std::signbit(want[i])) << name;
        }
      }
      EXPECT_TRUE(close(got, want)) << name << " " << to_string(dt);
    }
  }
}

TEST(CudaTensor, EqMatchesTheCpuIncludingBroadcastingAndInt64) {
  LOCKSTEP_REQUIRE_CUDA();
  for (DType dt : {kFloat32, kFloat64, kInt64}) {
    Tensor a = dt == kInt64 ? randint(0, 3, {4, 5}, kInt64) : edge_tensor({4, 5}, dt, 5);
    Tensor b = dt == kInt64 ? randint(0, 3, {5}, kInt64) : edge_tensor({5}, dt, 6);
    for (auto [x, y] : {std::pair{a, a}, std::pair{a, b}, std::pair{b, a}}) {
      Tensor want = eq(x, y), got = eq(x.to(kCuda0), y.to(kCuda0));
      EXPECT_EQ(got.device(), kCuda0);
      EXPECT_EQ(got.dtype(), kInt64);
      EXPECT_EQ(got.shape(), want.shape());
      EXPECT_EQ(got.to_vector<std::int64_t>(), want.to_vector<std::int64_t>()) << to_string(dt);
    }
  }
  EXPECT_EQ(eq(zeros({0, 3}, kCuda0), zeros({3}, kCuda0)).shape(), (Shape{0, 3}));
}

TEST(CudaTensor, MaxAndArgmaxFollowTheCpuTieAndNanRules) {
  LOCKSTEP_REQUIRE_CUDA();
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const std::vector<std::vector<double>> rows = {
      {1, 3, 3, 2}, {nan, 5, 1}, {5, nan, 7, nan, 2}, {-0.0, 0.0}, {0.0, -0.0}, {nan, nan}, {4}};
  for (DType dt : {kFloat32, kFloat64, kInt64})
    for (const auto& v : rows) {
      if (dt == kInt64 && std::any_of(v.begin(), v.end(), [](double x) { return std::isnan(x); }))
        continue;
      Tensor x = tensor(v, {static_cast<std::int64_t>(v.size())}).to(dt);
      Tensor xd = x.to(kCuda0);
      EXPECT_EQ(argmax(xd).item<std::int64_t>(), argmax(x).item<std::int64_t>()) << x.str();
      EXPECT_EQ(argmax(xd, 0).item<std::int64_t>(), argmax(x, 0).item<std::int64_t>()) << x.str();
      EXPECT_TRUE(BitEqual(max(xd).to(cpu()), max(x))) << x.str();
      EXPECT_TRUE(BitEqual(max(xd, 0).first.to(cpu()), max(x, 0).first)) << x.str();
    }
  // along every dimension of tensors with NaN and ties, and the whole tensor
  for (DType dt : {kFloat32, kFloat64})
    for (const Shape& s : along_shapes()) {
      Tensor x = edge_tensor(s, dt, 8);
      Tensor xd = x.to(kCuda0);
      for (int d = 0; d < s.size(); ++d) {
        if (s[d] == 0) {
          EXPECT_THROW(argmax(xd, d), ShapeError);
          continue;
        }
        for (bool keep : {false, true}) {
          Tensor want = argmax(x, d, keep), got = argmax(xd, d, keep);
          EXPECT_EQ(got.shape(), want.shape());
          EXPECT_EQ(got.to_vector<std::int64_t>(), want.to_vector<std::int64_t>())
              << s.str() << " dim " << d;
        }
      }
      if (s.numel() == 0) {
        EXPECT_THROW(argmax(xd), ShapeError);
        EXPECT_THROW(max(xd), ShapeError);
        continue;
      }
      EXPECT_EQ(argmax(xd).item<std::int64_t>(), argmax(x).item<std::int64_t>()) << s.str();
      EXPECT_TRUE(BitEqual(max(xd).to(cpu()), max(x))) << s.str();
    }
  // a large tensor: many threads of the one-block reduction, the maximum tied at three places
  Tensor big = randn({100003}, kFloat64);
  for (std::int64_t i : {77, 5000, 99999}) big.data_ptr<double>()[i] = 10.0;
  EXPECT_EQ(argmax(big.to(kCuda0)).item<std::int64_t>(), 77);
  Tensor bd = big.to(kCuda0).requires_grad_();
  Tensor bc = big.detach().requires_grad_();
  max(bd).backward();
  max(bc).backward();
  EXPECT_TRUE(BitEqual(bd.grad().to(cpu()), bc.grad()));  // 1/3 at each tie, as the CPU
}

TEST(CudaTensor, SoftmaxOfLinesWithInfinityAndNanMatchesTheCpu) {
  LOCKSTEP_REQUIRE_CUDA();
  for (DType dt : {kFloat32, kFloat64})
    for (const Shape& s : along_shapes()) {
      Tensor x = edge_tensor(s, dt, 12);
      for (int d = 0; d < s.size(); ++d)
        for (bool lg : {false, true}) {
          Tensor want = lg ? log_softmax(x, d) : softmax(x, d);
          Tensor got = lg ? log_softmax(x.to(kCuda0), d) : softmax(x.to(kCuda0), d);
          EXPECT_TRUE(close(host(got), host(want))) << s.str() << " dim " << d;
        }
    }
}

TEST(CudaTensor, Int64ArithmeticAndSumsMatchTheCpuExactly) {
  LOCKSTEP_REQUIRE_CUDA();
  const TensorOptions i64(kInt64);
  for (auto [sa, sb] : {std::pair{Shape{4, 5}, Shape{4, 5}}, std::pair{Shape{4, 5}, Shape{5}},
                        std::pair{Shape{3, 1, 2}, Shape{4, 1}}, std::pair{Shape{0, 2}, Shape{2}}}) {
    Tensor a = randint(-1000, 1000, sa, kInt64), b = randint(-1000, 1000, sb, kInt64);
    Tensor ad = a.to(kCuda0), bd = b.to(kCuda0);
    EXPECT_EQ(add(ad, bd).to_vector<std::int64_t>(), add(a, b).to_vector<std::int64_t>());
    EXPECT_EQ(sub(ad, bd).to_vector<std::int64_t>(), sub(a, b).to_vector<std::int64_t>());
    EXPECT_EQ(mul(ad, bd).to_vector<std::int64_t>(), mul(a, b).to_vector<std::int64_t>());
    EXPECT_EQ(neg(ad).to_vector<std::int64_t>(), neg(a).to_vector<std::int64_t>());
    EXPECT_EQ(sum(ad).item<std::int64_t>(), sum(a).item<std::int64_t>());
    for (int d = 0; d < a.dim(); ++d)
      EXPECT_EQ(sum(ad, d).to_vector<std::int64_t>(), sum(a, d).to_vector<std::int64_t>());
    EXPECT_EQ(add(ad, bd).dtype(), kInt64);
  }
  // wrap-around as the CPU
  Tensor big = full({2}, 5e18, i64);
  EXPECT_EQ(add(big.to(kCuda0), big.to(kCuda0)).to_vector<std::int64_t>(),
            add(big, big).to_vector<std::int64_t>());
}

TEST(CudaTensor, IndexSelectChecksIndicesAsTheCpu) {
  LOCKSTEP_REQUIRE_CUDA();
  Tensor x = randn({4, 3});
  Tensor bad = tensor(std::vector<std::int64_t>{0, 4, 1});
  std::string cpu_msg, cuda_msg;
  try {
    index_select(x, 0, bad);
  } catch (const IndexError& e) {
    cpu_msg = e.what();
  }
  try {
    index_select(x.to(kCuda0), 0, bad.to(kCuda0));
  } catch (const IndexError& e) {
    cuda_msg = e.what();
  }
  EXPECT_FALSE(cpu_msg.empty());
  EXPECT_EQ(cuda_msg, cpu_msg);
  EXPECT_THROW(index_select(x.to(kCuda0), 0, tensor(std::vector<std::int64_t>{0})), DeviceError);
  EXPECT_THROW(index_select(x.to(kCuda0), 0, ones({2}, kCuda0)), DTypeError);
  // int64 data are copied too
  Tensor xi = randint(0, 100, {4, 3}, kInt64);
  Tensor idx = tensor(std::vector<std::int64_t>{2, 2, 0});
  EXPECT_EQ(index_select(xi.to(kCuda0), 1, idx.to(kCuda0)).to_vector<std::int64_t>(),
            index_select(xi, 1, idx).to_vector<std::int64_t>());
  EXPECT_EQ(t(xi.to(kCuda0)).to_vector<std::int64_t>(), t(xi).to_vector<std::int64_t>());
  EXPECT_EQ(narrow(xi.to(kCuda0), 1, 1, 2).to_vector<std::int64_t>(),
            narrow(xi, 1, 1, 2).to_vector<std::int64_t>());
}

// ---- dropout: the CPU's masks, bit for bit ------------------------------------------------------

TEST(CudaDropout, KeyedMasksAreTheCpuMasksBitForBit) {
  LOCKSTEP_REQUIRE_CUDA();
  const DropoutKey key{0x1234567890abULL, 7, 40};
  for (DType dt : {kFloat32, kFloat64})
    for (double p : {0.1, 0.5, 0.9, 1.0})
      for (const Shape& s : {Shape{5, 7}, Shape{1, 1}, Shape{4, 2, 3}, Shape{6}, Shape{0, 3},
                             Shape{}, Shape{33, 129}}) {
        Tensor x = randn(s, dt);
        std::vector<Tensor> cpu_out, cuda_out;
        {
          DropoutKeyGuard guard(key);
          for (int call = 0; call < 3; ++call) cpu_out.push_back(dropout(x, p, true));
        }
        {
          DropoutKeyGuard guard(key);
          for (int call = 0; call < 3; ++call)
            cuda_out.push_back(dropout(x.to(kCuda0), p, true).to(cpu()));
        }
        for (int call = 0; call < 3; ++call)
          EXPECT_TRUE(BitEqual(cuda_out[call], cpu_out[call]))
              << s.str() << " p=" << p << " call " << call << " " << to_string(dt);
      }
}

TEST(CudaDropout, DataParallelKeysGiveTheSameRowsWhateverTheSplit) {
  LOCKSTEP_REQUIRE_CUDA();
  // The whole batch on the CPU under (seed, step, offset 0) against two shards on the GPU, each
  // under its own sample offset, as DataParallel keys its replicas.
  Tensor x = randn({10, 13});
  Tensor whole;
  {
    DropoutKeyGuard guard({99, 3, 0});
    whole = dropout(x, 0.3, true);
  }
  std::vector<Tensor> parts;
  for (auto [start, len] : {std::pair<std::int64_t, std::int64_t>{0, 4}, {4, 6}}) {
    DropoutKeyGuard guard({99, 3, start});
    parts.push_back(dropout(narrow(x, 0, start, len).to(kCuda0), 0.3, true).to(cpu()));
  }
  EXPECT_TRUE(BitEqual(cat(parts, 0), whole));
}

TEST(CudaDropout, GeneratorMasksAreTheCpuMasksAndAdvanceTheGeneratorAlike) {
  LOCKSTEP_REQUIRE_CUDA();
  for (DType dt : {kFloat32, kFloat64}) {
    Generator gc(5), gd(5);
    gc.set_offset(3);
    gd.set_offset(3);
    Tensor x = randn({17, 9}, dt);
    for (int call = 0; call < 2; ++call) {
      Tensor want = dropout(x, 0.25, true, &gc);
      Tensor got = dropout(x.to(kCuda0), 0.25, true, &gd);
      EXPECT_TRUE(BitEqual(got.to(cpu()), want)) << to_string(dt) << " call " << call;
      EXPECT_EQ(gd.offset(), gc.offset());
    }
  }
  // the default generator too
  Tensor x = randn({6, 5});
  manual_seed(21);
  Tensor want = dropout(x, 0.5, true);
  const std::uint64_t after = default_generator().offset();
  manual_seed(21);
  Tensor got = dropout(x.to(kCuda0), 0.5, true);
  EXPECT_TRUE(BitEqual(got.to(cpu()), want));
  EXPECT_EQ(default_generator().offset(), after);
}

TEST(CudaDropout, GradientIsTheMaskTimesTheIncomingGradient) {
  LOCKSTEP_REQUIRE_CUDA();
  Tensor x = randn({8, 6});
  Tensor xc = x.detach().requires_grad_(), xd = x.to(kCuda0).requires_grad_();
  Tensor g = randn({8, 6});
  {
    DropoutKeyGuard guard({1, 2, 3});
    dropout(xc, 0.4, true).backward(g);
  }
  {
    DropoutKeyGuard guard({1, 2, 3});
    dropout(xd, 0.4, true).backward(g.to(kCuda0));
  }
  EXPECT_TRUE(BitEqual(xd.grad().to(cpu()), xc.grad()));
}

// ---- optimizers ---------------------------------------------------------------------------------

// Three steps of `make` over two parameters on `device` (the second has no gradient in step 2):
// the final parameters and the optimizer's state_dict.
template <class Make>
std::pair<std::vector<Tensor>, StateDict> optimizer_run(Make make, Device device) {
  Generator gen(11);
  std::vector<Tensor> params = {randn({7, 5}, {}, &gen).to(device).requires_grad_(),
                                randn({3}, {}, &gen).to(device).requires_grad_()};
  auto opt = make(params);
  for (int step = 0; step < 3; ++step) {
    opt->zero_grad();
    for (std::size_t i = 0; i < params.size(); ++i)
      if (!(step == 1 && i == 1)) params[i].set_grad(randn(params[i].shape(), {}, &gen).to(device));
    opt->step();
  }
  std::vector<Tensor> out;
  for (auto& p : params) out.push_back(p.detach().to(cpu()));
  return {out, opt->state_dict()};
}

TEST(CudaOptim, SgdAndAdamMatchCpu) {
  LOCKSTEP_REQUIRE_CUDA();
  using Make = std::function<std::unique_ptr<optim::Optimizer>(std::vector<Tensor>)>;
  std::vector<std::pair<std::string, Make>> cases;
  for (double momentum : {0.0, 0.9})
    for (double dampening : {0.0, 0.3})
      for (double wd : {0.0, 0.01})
        for (bool nesterov : {false, true}) {
          if (nesterov && (momentum == 0 || dampening != 0)) continue;
          optim::SGDOptions o{.lr = 0.1,
                              .momentum = momentum,
                              .dampening = dampening,
                              .weight_decay = wd,
                              .nesterov = nesterov};
          cases.push_back({"sgd m=" + std::to_string(momentum) + " d=" + std::to_string(dampening) +
                               " wd=" + std::to_string(wd) + (nesterov ? " nesterov" : ""),
                           [o](std::vector<Tensor> p) {
                             return std::make_unique<optim::SGD>(std::move(p), o);
                           }});
        }
  for (double wd : {0.0, 0.05}) {
    optim::AdamOptions o{.lr = 0.01, .weight_decay = wd};
    cases.push_back({"adam wd=" + std::to_string(wd), [o](std::vector<Tensor> p) {
                       return std::make_unique<optim::Adam>(std::move(p), o);
                     }});
    optim::AdamWOptions ow{.lr = 0.01, .weight_decay = wd};
    cases.push_back({"adamw wd=" + std::to_string(wd), [ow](std::vector<Tensor> p) {
                       return std::make_unique<optim::AdamW>(std::move(p), ow);
                     }});
  }
  for (const auto& [name, make] : cases) {
    auto [pc, sc] = optimizer_run(make, cpu());
    auto [pd, sd] = optimizer_run(make, kCuda0);
    for (std::size_t i = 0; i < pc.size(); ++i)
      EXPECT_TRUE(close(host(pd[i]), host(pc[i]), 1e-6, 1e-5)) << name << " param " << i;
    ASSERT_EQ(sd.size(), sc.size()) << name;
    for (const auto& [k, v] : sc) {
      const Tensor* got = sd.find(k);
      ASSERT_NE(got, nullptr) << name << " " << k;
      EXPECT_EQ(got->device(), cpu()) << name << " " << k;  // state_dict copies to the host
      EXPECT_TRUE(close(host(*got), host(v), 1e-6, 1e-5)) << name << " " << k;
    }
  }
}

TEST(CudaOptim, ParameterWithoutGradientIsSkippedAndGetsNoState) {
  LOCKSTEP_REQUIRE_CUDA();
  Tensor a = ones({4}, kCuda0).requires_grad_(), b = ones({2}, kCuda0).requires_grad_();
  optim::SGD sgd({a, b}, {.lr = 0.5, .momentum = 0.9});
  optim::Adam adam({a, b}, {.lr = 0.5});
  a.set_grad(ones({4}, kCuda0));
  sgd.step();
  adam.step();
  EXPECT_EQ(b.to_vector<float>(), (std::vector<float>{1, 1}));
  EXPECT_FALSE(sgd.state(1, "momentum_buffer").defined());
  EXPECT_FALSE(adam.state(1, "exp_avg").defined());
  EXPECT_EQ(sgd.state(0, "momentum_buffer").device(), kCuda0);  // state lives on the device
  EXPECT_EQ(adam.state(0, "exp_avg_sq").device(), kCuda0);
  // load_state_dict moves host state back to the parameter's device
  optim::SGD other({a, b}, {.lr = 0.5, .momentum = 0.9});
  other.load_state_dict(sgd.state_dict());
  EXPECT_EQ(other.state(0, "momentum_buffer").device(), kCuda0);
}

}  // namespace
}  // namespace lockstep::testing
