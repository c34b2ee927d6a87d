// nn::Module: PyTorch parameter names, state_dict round trips and load errors, Linear's default
// init, train/eval, Dropout, clone() and to(device).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "support/tolerance.h"

namespace lockstep::testing {
namespace {

using nn::Linear;
using nn::Module;

// The reference program's model: members fc1, fc2 registered under those names.
struct Net : nn::Cloneable<Net> {
  std::shared_ptr<Linear> fc1, fc2;
  Net() { reset(); }
  void reset() override {
    fc1 = register_module("fc1", std::make_shared<Linear>(10, 5));
    fc2 = register_module("fc2", std::make_shared<Linear>(5, 2));
    register_buffer("steps", zeros({1}, kInt64));
  }
  Tensor forward(const Tensor& x) override { return fc2->forward(relu(fc1->forward(x))); }
  std::string name() const override { return "Net"; }
};

std::shared_ptr<nn::Sequential> mlp() {
  return std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<Module>>{
      std::make_shared<Linear>(4, 3), std::make_shared<nn::ReLU>(),
      std::make_shared<Linear>(3, 2, false), std::make_shared<nn::Dropout>(0.5)});
}

std::vector<std::string> names(const std::vector<std::pair<std::string, Tensor>>& items) {
  std::vector<std::string> out;
  for (auto& [k, v] : items) out.push_back(k);
  return out;
}
std::vector<double> V(const Tensor& t) { return t.to_vector<double>(); }

TEST(Module, SequentialNamesFollowPyTorch) {
  auto m = mlp();
  EXPECT_EQ(names(m->named_parameters()),
            (std::vector<std::string>{"0.weight", "0.bias", "2.weight"}));
  EXPECT_EQ(m->parameters().size(), 3u);
  EXPECT_EQ(m->parameters()[0].shape(), (Shape{3, 4}));
  EXPECT_EQ(m->named_parameters(false).size(), 0u);
  EXPECT_EQ(m->children().size(), 4u);
}

TEST(Module, UserModuleNamesFollowMembers) {
  Net net;
  EXPECT_EQ(names(net.named_parameters()),
            (std::vector<std::string>{"fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"}));
  EXPECT_EQ(names(net.named_buffers()), (std::vector<std::string>{"steps"}));
  EXPECT_EQ(net.state_dict().keys(), (std::vector<std::string>{"steps", "fc1.weight", "fc1.bias",
                                                                "fc2.weight", "fc2.bias"}));
  EXPECT_TRUE(net.named_parameters()[0].second.is_same(net.fc1->weight));
  for (auto& p : net.parameters()) EXPECT_TRUE(p.requires_grad());
}

TEST(Module, StateDictRoundTrip) {
  Net a, b;
  ASSERT_NE(V(a.fc1->weight), V(b.fc1->weight));
  b.load_state_dict(a.state_dict());
  for (auto& [k, v] : a.state_dict()) EXPECT_EQ(V(v), V(b.state_dict().at(k))) << k;
  // copied, not shared: changing a afterwards leaves b alone
  {
    no_grad g;
    a.fc1->weight.fill_(9.0);
  }
  EXPECT_NE(V(b.fc1->weight)[0], 9.0);
  Tensor x = randn({3, 10});
  b.load_state_dict(a.state_dict());
  EXPECT_EQ(V(a.forward(x)), V(b.forward(x)));
}

// Builds a state dict from `src` with `edit` applied, loads it into a fresh Net and checks that
// StateDictError names every string in `must_name` and that nothing was modified.
void expect_load_error(const std::function<void(StateDict&)>& edit,
                       const std::vector<std::string>& must_name) {
  Net src, dst;
  StateDict sd = src.state_dict();
  edit(sd);
  StateDict before;
  for (auto& [k, v] : dst.state_dict()) before.insert(k, v.clone());
  try {
    dst.load_state_dict(sd);
    ADD_FAILURE() << "expected StateDictError";
  } catch (const StateDictError& e) {
    for (auto& s : must_name)
      EXPECT_NE(std::string(e.what()).find(s), std::string::npos) << s << " in: " << e.what();
  }
  for (auto& [k, v] : dst.state_dict()) EXPECT_EQ(V(v), V(before.at(k))) << k << " modified";
}

TEST(Module, LoadStateDictErrors) {
  expect_load_error(
      [](StateDict& sd) {
        StateDict out;
        for (auto& [k, v] : sd)
          if (k != "fc2.bias") out.insert(k, v);
        sd = out;
      },
      {"missing", "fc2.bias"});
  expect_load_error([](StateDict& sd) { sd.insert("fc3.weight", zeros({2, 2})); },
                    {"unexpected", "fc3.weight"});
  expect_load_error([](StateDict& sd) { sd.insert("fc1.weight", zeros({5, 9})); },
                    {"fc1.weight", "[5, 9]", "[5, 10]"});
  // a wrong shape listed after valid keys must not leave the earlier keys half-loaded
  expect_load_error([](StateDict& sd) { sd.insert("fc2.bias", zeros({3})); },
                    {"fc2.bias", "[3]", "[2]"});
}

TEST(Module, LinearDefaultInitBounds) {
  manual_seed(3);
  Linear lin(16, 2000);
  const double bound = 1.0 / std::sqrt(16.0);
  for (const Tensor& t : {lin.weight, lin.bias}) {
    auto v = V(t);
    auto [lo, hi] = std::minmax_element(v.begin(), v.end());
    EXPECT_GE(*lo, -bound);
    EXPECT_LE(*hi, bound);
    // the whole interval is used (2000 uniform draws come within 1% of each end)
    EXPECT_LT(*lo, -0.99 * bound);
    EXPECT_GT(*hi, 0.99 * bound);
  }
  EXPECT_EQ(lin.weight.shape(), (Shape{2000, 16}));
  EXPECT_EQ(lin.bias.shape(), (Shape{2000}));
  EXPECT_THROW(lin.forward(ones({3, 15})), ShapeError);
  EXPECT_EQ(lin.forward(ones({2, 5, 16})).shape(), (Shape{2, 5, 2000}));
}

TEST(Module, TrainEvalPropagates) {
  auto outer = std::make_shared<nn::Sequential>();
  auto inner = mlp();
  outer->push_back(inner);
  EXPECT_TRUE((*inner)[3]->is_training());
  outer->eval();
  EXPECT_FALSE(outer->is_training());
  EXPECT_FALSE(inner->is_training());
  EXPECT_FALSE((*inner)[3]->is_training());
  outer->train();
  EXPECT_TRUE((*inner)[3]->is_training());
}

TEST(Module, DropoutTrainAndEval) {
  Generator g(11);
  nn::Dropout drop(0.3, &g);
  Tensor x = full({100000}, 2.0);
  drop.eval();
  EXPECT_EQ(V(drop.forward(x)), V(x));
  drop.train();
  auto y = V(drop.forward(x));
  std::int64_t zeros_count = 0;
  for (double v : y) {
    if (v == 0.0)
      ++zeros_count;
    else
      ASSERT_NEAR(v, 2.0 / 0.7, 1e-6);  // survivors scaled by 1/(1-p)
  }
  EXPECT_NEAR(static_cast<double>(zeros_count) / y.size(), 0.3, 0.006);  // ~4 std errors
  EXPECT_NE(V(drop.forward(x)), y);  // a fresh mask each call
  EXPECT_THROW(nn::Dropout(1.5), ValueError);
}

TEST(Module, CloneIsEqualButIndependent) {
  manual_seed(21);
  auto net = std::make_shared<Net>();
  net->eval();
  auto offset_before = default_generator().offset();
  auto copy = std::dynamic_pointer_cast<Net>(net->clone());
  ASSERT_TRUE(copy);
  EXPECT_EQ(default_generator().offset(), offset_before);  // clone draws nothing visible
  EXPECT_FALSE(copy->is_training());
  EXPECT_FALSE(copy->fc1->is_training());
  EXPECT_NE(copy->fc1.get(), net->fc1.get());
  auto np = net->named_parameters(), cp = copy->named_parameters();
  ASSERT_EQ(names(np), names(cp));
  for (std::size_t i = 0; i < np.size(); ++i) {
    EXPECT_EQ(V(np[i].second), V(cp[i].second)) << np[i].first;
    EXPECT_NE(np[i].second.raw_data(), cp[i].second.raw_data()) << np[i].first;
    EXPECT_TRUE(cp[i].second.requires_grad());
  }
  Tensor x = randn({4, 10});
  EXPECT_EQ(V(net->forward(x)), V(copy->forward(x)));
  {
    no_grad g;
    copy->fc2->bias.add_(ones({2}));
  }
  EXPECT_NE(V(net->forward(x)), V(copy->forward(x)));  // the copy's members are its own
  EXPECT_NE(V(net->fc2->bias), V(copy->fc2->bias));

  auto seq = mlp();
  auto seq_copy = seq->clone();
  EXPECT_EQ(names(seq->named_parameters()), names(seq_copy->named_parameters()));
  EXPECT_EQ(V(seq->parameters()[2]), V(seq_copy->parameters()[2]));
}

TEST(Module, ToDeviceKeepsTensorIdentity) {
  Net net;
  optim::SGD opt(net.parameters(), {.lr = 0.1});
  net.to(cpu(1));
  for (std::size_t i = 0; i < opt.params().size(); ++i) {
    EXPECT_TRUE(opt.params()[i].is_same(net.parameters()[i]));
    EXPECT_EQ(opt.params()[i].device(), cpu(1));
  }
  EXPECT_EQ(net.named_buffers()[0].second.device(), cpu(1));
  Tensor x = randn({3, 10}).to(cpu(1));
  Tensor before = net.fc1->weight.clone();
  sum(net.forward(x)).backward();
  EXPECT_EQ(net.fc1->weight.grad().device(), cpu(1));
  opt.step();
  EXPECT_EQ(net.fc1->weight.device(), cpu(1));
  EXPECT_NE(V(net.fc1->weight), V(before));  // the optimizer updated the moved tensor
  EXPECT_THROW(net.to(Device::parse("cuda:0")), DeviceError);
}

}  // namespace
}  // namespace lockstep::testing
