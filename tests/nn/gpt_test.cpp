// nanoGPT's modules (lockstep/nn/gpt.h): state_dict names and order as nanoGPT's, the tied
// embedding (one parameter, both keys, kept through load, clone and DataParallel), loading
// PyTorch's safetensors files (save_file with both keys, save_model with one), the
// initialisation's distributions, dropout, and the errors for bad configurations and inputs.
// The numbers against PyTorch: tests/golden/gpt_golden_test.cpp.
#include <gtest/gtest.h>

#include <cmath>

#include "lockstep/lockstep.h"
#include "lockstep/parallel/data_parallel.h"
#include "support/golden.h"
#include "support/gpt_training.h"
#include "support/helpers.h"
#include "support/tolerance.h"

namespace lockstep::testing {
namespace {

nn::GPTConfig tiny(bool bias = false) {
  return {.block_size = 16, .vocab_size = 20, .n_layer = 2, .n_head = 2, .n_embd = 32,
          .dropout = 0.0, .bias = bias};
}

std::vector<std::string> names(const std::vector<std::pair<std::string, Tensor>>& items) {
  std::vector<std::string> out;
  for (const auto& [k, v] : items) out.push_back(k);
  return out;
}

TEST(Gpt, StateDictKeysAreNanoGptsInItsOrder) {
  for (const char* file : {"gpt_nobias", "gpt_bias"}) {
    const GptGolden g = load_gpt_golden(file);
    nn::GPT model(g.config);
    EXPECT_EQ(model.state_dict().keys(), g.state_dict_keys) << file;
    EXPECT_EQ(names(model.named_parameters()), g.parameter_names) << file;
    EXPECT_EQ(model.get_num_params(false), g.parameter_count) << file;
    EXPECT_EQ(model.get_num_params(), g.parameter_count - 16 * 32) << file;
  }
}

TEST(Gpt, TiedEmbeddingIsOneParameterUnderTwoKeys) {
  nn::GPT model(tiny());
  EXPECT_TRUE(model.wte->weight.is_same(model.lm_head->weight));
  const auto named = names(model.named_parameters());
  EXPECT_EQ(named.front(), "transformer.wte.weight");
  EXPECT_EQ(std::count(named.begin(), named.end(), "lm_head.weight"), 0);
  const StateDict sd = model.state_dict();
  ASSERT_TRUE(sd.contains("lm_head.weight"));
  EXPECT_TRUE(sd.at("lm_head.weight").is_same(sd.at("transformer.wte.weight")));
  EXPECT_EQ(model.parameters().size(), sd.size() - 1);
}

TEST(Gpt, OptimizerGroupsAreNanoGpts) {
  for (const char* file : {"gpt_nobias", "gpt_bias"}) {
    const GptGolden g = load_gpt_golden(file);
    nn::GPT model(g.config);
    const auto groups = optim::weight_decay_groups(model, 0.1);
    ASSERT_EQ(groups.size(), 2u);
    const auto named = model.named_parameters();
    auto group_names = [&](const optim::ParamGroup& group) {
      std::vector<std::string> out;
      for (const Tensor& p : group.params)
        for (const auto& [k, v] : named)
          if (v.is_same(p)) out.push_back(k);
      return out;
    };
    EXPECT_EQ(group_names(groups[0]), g.decay_names) << file;
    EXPECT_EQ(group_names(groups[1]), g.nodecay_names) << file;
    EXPECT_EQ(groups[0].weight_decay, 0.1);
    EXPECT_EQ(groups[1].weight_decay, 0.0);
  }
}

TEST(Gpt, LoadsPyTorchsSaveFileAndSaveModelFilesAndStaysTied) {
  const GptGolden g = load_gpt_golden("gpt_nobias");
  // save_file of the state_dict: both keys.
  nn::GPT a(g.config);
  a.load_state_dict(g.initial);
  // save_model: one of the two keys, the alias in its metadata.
  const auto file =
      safetensors::load_file(test_data_path("gpt/gpt_nobias_init_save_model.safetensors"));
  const StateDict one_key = safetensors::to_state_dict(file);
  ASSERT_EQ(one_key.size(), g.initial.size() - 1);
  nn::GPT b(g.config);
  b.load_state_dict(one_key);  // strict
  for (nn::GPT* m : {&a, &b}) {
    EXPECT_TRUE(m->wte->weight.is_same(m->lm_head->weight));
    for (const std::string& key : g.initial.keys())
      EXPECT_TRUE(BitEqual(m->state_dict().at(key), g.initial.at(key))) << key;
  }
  // Neither key: still missing, named.
  StateDict neither;
  for (const auto& [k, v] : g.initial)
    if (k != "lm_head.weight" && k != "transformer.wte.weight") neither.insert(k, v);
  try {
    b.load_state_dict(neither);
    FAIL() << "no error";
  } catch (const StateDictError& e) {
    EXPECT_NE(std::string(e.what()).find("'transformer.wte.weight'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("'lm_head.weight'"), std::string::npos) << e.what();
  }
}

TEST(Gpt, WritesBothTiedKeysToSafetensors) {
  nn::GPT model(tiny());
  const StateDict sd = model.state_dict();
  const safetensors::TensorList items(sd.begin(), sd.end());
  const StateDict back = safetensors::to_state_dict(
      safetensors::deserialize(safetensors::serialize(items), "gpt_tied.safetensors"));
  EXPECT_EQ(back.keys(), model.state_dict().keys());
  EXPECT_TRUE(BitEqual(back.at("lm_head.weight"), back.at("transformer.wte.weight")));
  nn::GPT other(tiny());
  other.load_state_dict(back);
  EXPECT_TRUE(BitEqual(other.lm_head->weight, model.lm_head->weight));
  EXPECT_TRUE(other.wte->weight.is_same(other.lm_head->weight));
}

TEST(Gpt, CloneAndReplicasKeepTheTie) {
  auto model = std::make_shared<nn::GPT>(tiny());
  auto copy = std::dynamic_pointer_cast<nn::GPT>(model->clone());
  ASSERT_TRUE(copy);
  EXPECT_TRUE(copy->wte->weight.is_same(copy->lm_head->weight));
  EXPECT_FALSE(copy->wte->weight.is_same(model->wte->weight));
  EXPECT_TRUE(BitEqual(copy->wte->weight, model->wte->weight));
  parallel::DataParallel dp(model, cpus(2));
  for (std::size_t r = 0; r < 2; ++r) {
    auto replica = std::dynamic_pointer_cast<nn::GPT>(dp.replica(r));
    ASSERT_TRUE(replica) << r;
    EXPECT_TRUE(replica->wte->weight.is_same(replica->lm_head->weight)) << r;
  }
  EXPECT_EQ(dp.parameters().size(), model->parameters().size());
}

TEST(Gpt, TiedGradientIsTheSumOfBothUses) {
  // The gradient of the tied tensor against an untied twin: embedding and head separately.
  manual_seed(3);
  nn::GPT model(tiny());
  const Tensor idx = randint(0, 20, {2, 8});
  const Tensor y = randint(0, 20, {2, 8});
  nn::gpt_loss(model.forward(idx), y).backward();
  const Tensor tied = model.wte->weight.grad().clone();
  model.zero_grad();
  // Untie: a copy of the weight in lm_head, so each use gets its own gradient.
  Tensor head = model.lm_head->weight.detach().clone();
  head.requires_grad_(true);
  model.lm_head->weight = head;
  nn::gpt_loss(model.forward(idx), y).backward();
  EXPECT_TRUE(AllClose(tied, add(model.wte->weight.grad(), head.grad()), 1e-6, 1e-7));
}

TEST(Gpt, InitialisationIsNanoGpts) {
  manual_seed(0);
  nn::GPTConfig c{.block_size = 64, .vocab_size = 256, .n_layer = 4, .n_head = 4, .n_embd = 64,
                  .dropout = 0.0, .bias = true};
  nn::GPT model(c);
  auto stddev = [](const Tensor& t) {
    const auto v = t.to_vector<double>();
    double s = 0, s2 = 0;
    for (double x : v) s += x, s2 += x * x;
    const double m = s / v.size();
    return std::sqrt(s2 / v.size() - m * m);
  };
  const double proj = 0.02 / std::sqrt(2.0 * 4);
  for (const auto& [name, p] : model.named_parameters()) {
    const bool is_proj = name.ends_with("c_proj.weight");
    if (name.ends_with(".bias")) {
      EXPECT_EQ(stddev(p), 0.0) << name;
      EXPECT_EQ(p.to_vector<double>()[0], 0.0) << name;
    } else if (name.find(".ln_") != std::string::npos || name.find("ln_f") != std::string::npos) {
      EXPECT_EQ(p.to_vector<double>(), std::vector<double>(p.numel(), 1.0)) << name;
    } else {
      EXPECT_NEAR(stddev(p), is_proj ? proj : 0.02, 0.1 * (is_proj ? proj : 0.02)) << name;
    }
  }
}

TEST(Gpt, DropoutActsInTrainingOnly) {
  nn::GPTConfig c = tiny();
  c.dropout = 0.2;
  nn::GPT model(c);
  const Tensor idx = randint(0, 20, {2, 8});
  const Tensor a = model.forward(idx), b = model.forward(idx);
  EXPECT_FALSE(BitEqual(a, b));
  model.eval();
  EXPECT_TRUE(BitEqual(model.forward(idx), model.forward(idx)));
}

TEST(Gpt, TrainsUnderBf16Autocast) {
  // torch.autocast(dtype=torch.bfloat16) as nanoGPT's train.py uses it: the matmuls in bf16, the
  // loss and gradients float32 and near the float32 ones (bf16 keeps 8 significant bits).
  const GptGolden g = load_gpt_golden("gpt_nobias");
  nn::GPT model(g.config);
  model.load_state_dict(g.initial);
  const Tensor loss32 = nn::gpt_loss(model.forward(g.idx[0]), g.targets[0]);
  loss32.backward();
  const Tensor grad32 = model.wte->weight.grad().clone();
  model.zero_grad();
  Tensor loss16;
  {
    AutocastGuard bf16;
    loss16 = nn::gpt_loss(model.forward(g.idx[0]), g.targets[0]);
  }
  loss16.backward();
  EXPECT_EQ(loss16.dtype(), kFloat32);
  EXPECT_NEAR(loss16.item(), loss32.item(), 2e-2);
  EXPECT_NE(loss16.item(), loss32.item());  // the region did round
  EXPECT_EQ(model.wte->weight.grad().dtype(), kFloat32);
  EXPECT_TRUE(AllClose(model.wte->weight.grad(), grad32, 5e-2, 5e-3));
}

TEST(Gpt, RefusesBadConfigurationsAndInputs) {
  auto throws = [](nn::GPTConfig c, const std::string& needle) {
    try {
      nn::GPT model(c);
      ADD_FAILURE() << "no error for " << needle;
    } catch (const ValueError& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  nn::GPTConfig c = tiny();
  c.n_head = 3;
  throws(c, "multiple of config.n_head");
  c = tiny();
  c.vocab_size = 0;
  throws(c, "config.vocab_size must be positive");
  c = tiny();
  c.dropout = 1.5;
  throws(c, "config.dropout");

  nn::GPT model(tiny());
  EXPECT_THROW(model.forward(randint(0, 20, {2, 17})), ShapeError);
  try {
    model.forward(randint(0, 20, {2, 17}));
  } catch (const ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find("Cannot forward sequence of length 17, block size is "
                                         "only 16"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(model.forward(randint(0, 20, {16})), ShapeError);
  EXPECT_THROW(model.forward(full({1, 4}, 20, kInt64)), IndexError);
  EXPECT_THROW(model.forward(zeros({1, 4})), DTypeError);
  EXPECT_THROW(nn::gpt_loss(zeros({2, 4, 20}), zeros({2, 5}, kInt64)), ShapeError);
  EXPECT_THROW(model.lm_head->tie_parameter("bias", model.wte->weight), ValueError);
  EXPECT_THROW(model.lm_head->tie_parameter("weight", zeros({3, 3})), ValueError);
}

}  // namespace
}  // namespace lockstep::testing
