// cuda:k tensors through the public API: every op of the reference workload on cuda:0 against
// the same op on the CPU (forward and autograd gradients), table-driven over odd shapes with
// empty and size-1 dimensions; copies between devices; the data_ptr guard; ops without a CUDA
// path and mixed devices fail with DeviceError; an out-of-range label is IndexError. Tolerance
// |cuda − cpu| ≤ 1e-4 + 1e-4·|cpu| (close() in cuda_test_util.h). Tests that need a GPU skip
// without one, printing the reason; those marked "no GPU needed" run everywhere.
#include <gtest/gtest.h>

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
  bool positive = false;  // inputs drawn away from zero (div's denominator)
};

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
    std::vector<Tensor> cpu_in, cuda_in;
    for (const Shape& s : shapes) {
      Generator gen(seed++);
      Tensor x = randn(s, {}, &gen);
      if (op.positive) x = add(mul(x, x), 0.5);  // ≥ 0.5
      cpu_in.push_back(x.detach().requires_grad_());
      cuda_in.push_back(x.detach().to(kCuda0).requires_grad_());
    }
    std::string where = op.name;
    for (const Shape& s : shapes) where += " " + s.str();
    Tensor y_cpu = op.f(cpu_in, cpu()), y_cuda = op.f(cuda_in, kCuda0);
    ASSERT_EQ(y_cuda.device(), kCuda0) << where;
    ASSERT_EQ(y_cuda.shape(), y_cpu.shape()) << where;
    ASSERT_TRUE(close(host(y_cuda), host(y_cpu))) << where << " forward";
    Generator gen(seed++);
    Tensor g = randn(y_cpu.shape(), {}, &gen);
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

TEST(CudaTensor, OpsWithoutCudaPathThrowDeviceErrorNamingOpAndDevice) {
  LOCKSTEP_REQUIRE_CUDA();
  Tensor x = ones({3, 4}, kCuda0);
  const std::vector<std::pair<std::string, std::function<void()>>> cases = {
      {"softmax", [&] { softmax(x, 1); }},
      {"log_softmax", [&] { log_softmax(x, 1); }},
      {"exp", [&] { exp(x); }},
      {"sigmoid", [&] { sigmoid(x); }},
      {"sum (along a dimension)", [&] { sum(x, 0); }},
      {"argmax", [&] { argmax(x, 1); }},
      {"t", [&] { t(x); }},
      {"cat",
       [&] {
         cat({x, x}, 1);
       }},  // only dim 0 has a CUDA path
      {"dropout", [&] { dropout(x, 0.5, true); }},
      {"add", [&] { add(x, ones({4}, kCuda0)); }},  // broadcasting [3, 4] with [4]
  };
  for (const auto& [name, f] : cases) {
    try {
      f();
      ADD_FAILURE() << name << ": expected DeviceError";
    } catch (const DeviceError& e) {
      const std::string what = e.what();
      EXPECT_EQ(what.rfind(name + ":", 0), 0u) << what;
      EXPECT_NE(what.find("cuda:0"), std::string::npos) << what;
    }
  }
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
