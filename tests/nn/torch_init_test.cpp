// PyTorch's initialisation through the MT19937 generator: after manual_seed(0) each module's
// initial state_dict is torch.manual_seed(0)'s bit for bit (tests/data/torch_rng/torch_rng.json,
// "modules": every entry's shape, dtype and FNV-1a 64 hash of its bytes), and construction
// consumes exactly what PyTorch's does (the next randint drawn afterwards agrees).
#include <gtest/gtest.h>

#include <functional>
#include <map>
#include <string>

#include "lockstep/lockstep.h"
#include "support/torch_rng.h"

namespace lockstep {
namespace {

using testing::torch_rng;
using testing::torch_values;
using TorchInit = testing::TorchStreams;

std::map<std::string, std::function<std::shared_ptr<nn::Module>()>> makers() {
  const auto& c = torch_rng()["gpt_config"];
  nn::GPTConfig gpt{c["block_size"], c["vocab_size"], c["n_layer"], c["n_head"],
                    c["n_embd"],     c["dropout"],    c["bias"]};
  return {
      {"linear_10_5", [] { return std::make_shared<nn::Linear>(10, 5); }},
      {"linear_7_3_nobias", [] { return std::make_shared<nn::Linear>(7, 3, false); }},
      {"conv2d_3_4_k3", [] { return std::make_shared<nn::Conv2d>(3, 4, 3); }},
      {"conv2d_2_6_k5_s2_p1", [] { return std::make_shared<nn::Conv2d>(2, 6, 5, 2, 1); }},
      {"embedding_11_6", [] { return std::make_shared<nn::Embedding>(11, 6); }},
      {"embedding_2_3", [] { return std::make_shared<nn::Embedding>(2, 3); }},
      {"layer_norm_8", [] { return std::make_shared<nn::LayerNorm>(8); }},
      {"batch_norm2d_4", [] { return std::make_shared<nn::BatchNorm2d>(4); }},
      {"sequential_mlp",
       [] {
         return std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
             std::make_shared<nn::Linear>(4, 16), std::make_shared<nn::ReLU>(),
             std::make_shared<nn::Linear>(16, 3)});
       }},
      {"gpt_small", [gpt] { return std::make_shared<nn::GPT>(gpt); }},
      {"resnet20", [] { return nn::resnet20(1, 10); }},
  };
}

TEST_F(TorchInit, EveryModulesInitialStateDictIsTorchsBitwise) {
  const auto all = makers();
  for (const auto& [name, want] : torch_rng()["modules"].items()) {
    SCOPED_TRACE(name);
    ASSERT_TRUE(all.count(name)) << "no maker for " << name;
    manual_seed(0);
    auto m = all.at(name)();
    auto sd = m->state_dict();
    std::size_t entries = 0;
    for (const auto& [key, e] : want.items()) {
      if (key.rfind("__", 0) == 0) continue;
      ++entries;
      const Tensor* t = sd.find(key);
      ASSERT_NE(t, nullptr) << key;
      EXPECT_EQ(Shape(e["shape"].get<std::vector<std::int64_t>>()), t->shape()) << key;
      EXPECT_EQ(testing::torch_dtype(e["dtype"]), t->dtype()) << key;
      EXPECT_EQ(testing::torch_fnv1a64(*t), e["fnv1a64"].get<std::string>())
          << key << ": first values "
          << torch_values(t->reshape({-1}).narrow(0, 0, std::min<std::int64_t>(4, t->numel())))
          << ", torch's " << e["first"];
    }
    EXPECT_EQ(entries, sd.size());
    EXPECT_EQ(torch_values(randint(0, 1 << 30, {2})), want["__next_randint"]);
  }
}

TEST_F(TorchInit, LinearTenFiveIsTorchsValueByValue) {
  manual_seed(0);
  nn::Linear l(10, 5);
  const auto& want = torch_rng()["modules"]["linear_10_5"];
  EXPECT_EQ(torch_values(l.weight), want["weight"]["values"]);
  EXPECT_EQ(torch_values(l.bias), want["bias"]["values"]);
}

}  // namespace
}  // namespace lockstep
