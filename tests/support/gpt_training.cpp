#include "support/gpt_training.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <tuple>

#include "support/golden.h"
#include "support/helpers.h"
#include "support/json_data.h"
#include "support/tolerance.h"

namespace lockstep::testing {

namespace {

StateDict load_states(const std::string& file) {
  return safetensors::to_state_dict(safetensors::load_file(test_data_path("gpt/" + file)));
}

// A [4][16] nested list of integers as an int64 tensor.
Tensor int_tensor(const nlohmann::json& rows) {
  std::vector<std::int64_t> data;
  for (const auto& row : rows)
    for (const auto& v : row) data.push_back(v.get<std::int64_t>());
  return tensor(std::span<const std::int64_t>(data),
                Shape{static_cast<std::int64_t>(rows.size()),
                      static_cast<std::int64_t>(rows.at(0).size())});
}

std::vector<std::string> sorted_keys(const StateDict& s) {
  std::vector<std::string> k = s.keys();
  std::sort(k.begin(), k.end());
  return k;
}

// `want` comes from a safetensors file: the same keys, sorted by name.
void expect_states_close(const StateDict& mine, const StateDict& want, const std::string& what) {
  EXPECT_EQ(sorted_keys(mine), sorted_keys(want)) << what;
  for (const std::string& key : want.keys()) {
    const Tensor* m = mine.find(key);
    ASSERT_NE(m, nullptr) << what << ": " << key;
    ASSERT_EQ(m->shape(), want.at(key).shape()) << what << ": " << key;
    EXPECT_TRUE(AllClose(m->to_vector<double>(), want.at(key).to_vector<double>(), kGptRtol,
                         kGptAtol))
        << what << ": " << key;
  }
}

void expect_states_bit_equal(const StateDict& a, const StateDict& b, const std::string& what) {
  EXPECT_EQ(a.keys(), b.keys()) << what;
  for (const std::string& key : a.keys())
    if (const Tensor* y = b.find(key)) EXPECT_TRUE(BitEqual(a.at(key), *y)) << what << ": " << key;
}

}  // namespace

GptGolden load_gpt_golden(const std::string& name) {
  const nlohmann::json j = read_json_data("gpt/" + name + ".json");
  GptGolden g;
  g.name = name;
  const auto& c = j.at("config");
  g.config.block_size = c.at("block_size");
  g.config.vocab_size = c.at("vocab_size");
  g.config.n_layer = c.at("n_layer");
  g.config.n_head = c.at("n_head");
  g.config.n_embd = c.at("n_embd");
  g.config.dropout = c.at("dropout");
  g.config.bias = c.at("bias");
  g.parameter_count = j.at("parameter_count");
  g.decay_names = j.at("decay").get<std::vector<std::string>>();
  g.nodecay_names = j.at("nodecay").get<std::vector<std::string>>();
  g.state_dict_keys = j.at("state_dict_keys").get<std::vector<std::string>>();
  g.parameter_names = j.at("parameter_names").get<std::vector<std::string>>();
  const auto& o = j.at("optimizer");
  g.weight_decay = o.at("weight_decay");
  g.learning_rate = o.at("learning_rate");
  g.beta1 = o.at("betas").at(0);
  g.beta2 = o.at("betas").at(1);
  g.eps = o.at("eps");
  g.warmup_iters = o.at("warmup_iters");
  g.lr_decay_iters = o.at("lr_decay_iters");
  g.min_lr = o.at("min_lr");
  g.grad_clip = o.at("grad_clip");
  for (const auto& rows : j.at("idx")) g.idx.push_back(int_tensor(rows));
  for (const auto& rows : j.at("targets")) g.targets.push_back(int_tensor(rows));
  g.first_loss = j.at("first_loss");
  g.first_logits = json_tensor(j.at("first_logits"), kFloat32);
  for (const auto& s : j.at("steps")) {
    g.lrs.push_back(s.at("lr"));
    g.losses.push_back(s.at("loss"));
    g.grad_norms.push_back(s.at("grad_norm"));
  }
  g.initial = load_states(name + "_init.safetensors");
  g.first_grads = load_states(name + "_grads.safetensors");
  g.final_state = load_states(name + "_final.safetensors");
  return g;
}

GptTrained train_gpt(const GptGolden& g, const GptRun& run) {
  auto model = std::make_shared<nn::GPT>(g.config);
  model->load_state_dict(g.initial);
  std::unique_ptr<parallel::DataParallel> dp;
  const std::int64_t batch = g.idx.at(0).size(0);
  std::int64_t part_start = 0, part_rows = batch;
  if (run.group) {
    parallel::DistributedDataParallelOptions o;
    o.device_ids = cpus(run.devices);
    o.deterministic = run.options.deterministic;
    o.shard_size = run.options.shard_size;
    dp = std::make_unique<parallel::DistributedDataParallel>(model, run.group, o);
    const auto parts =
        parallel::split_batch(batch, run.group->size(), o.deterministic ? o.shard_size : 0);
    std::tie(part_start, part_rows) = parts[static_cast<std::size_t>(run.group->rank())];
  } else if (run.devices > 0) {
    dp = std::make_unique<parallel::DataParallel>(model, cpus(run.devices), std::nullopt,
                                                  run.options);
  }
  // nanoGPT's train.py: configure_optimizers, get_lr each iteration, clip_grad_norm_.
  auto opt = optim::configure_optimizers(*model, g.weight_decay, g.learning_rate,
                                         {g.beta1, g.beta2});
  optim::WarmupCosineLR schedule(*opt, g.warmup_iters, g.lr_decay_iters, g.min_lr);
  const std::vector<Tensor> params = model->parameters();
  GptTrained t;
  for (std::size_t s = 0; s < g.idx.size(); ++s) {
    const Tensor x = narrow(g.idx[s], 0, part_start, part_rows);
    const Tensor y = narrow(g.targets[s], 0, part_start, part_rows);
    opt->zero_grad();
    Tensor loss;
    if (dp) {
      loss = dp->forward_backward(
          x, y, [](const Tensor& logits, const Tensor& yk) { return nn::gpt_loss(logits, yk); },
          [](const Tensor& yk) { return nn::count_targets(yk); });
    } else {
      const Tensor logits = model->forward(x);
      loss = nn::gpt_loss(logits, y);
      loss.backward();
      if (s == 0) t.first_logits = logits.detach();
    }
    if (s == 0) {
      t.first_loss = loss.item();
      for (const auto& [name, p] : model->named_parameters())
        t.first_grads.insert(name, p.grad().clone());
    }
    t.lrs.push_back(opt->lr());
    t.losses.push_back(loss.item());
    t.grad_norms.push_back(nn::utils::clip_grad_norm_(params, g.grad_clip));
    opt->step();
    schedule.step();
  }
  t.final_state = model->state_dict();
  return t;
}

void expect_gpt_matches(const GptTrained& t, const GptGolden& g, const std::string& what) {
  if (t.first_logits.defined())
    EXPECT_TRUE(AllClose(t.first_logits.to_vector<double>(), g.first_logits.to_vector<double>(),
                         kGptRtol, kGptAtol))
        << what << ": first logits";
  EXPECT_TRUE(AllClose({t.first_loss}, {g.first_loss}, kGptRtol, kGptAtol)) << what;
  expect_states_close(t.first_grads, g.first_grads, what + ": first gradients");
  EXPECT_TRUE(AllClose(t.lrs, g.lrs, 1e-15, 0)) << what << ": lrs";
  EXPECT_TRUE(AllClose(t.losses, g.losses, kGptRtol, kGptAtol)) << what << ": losses";
  EXPECT_TRUE(AllClose(t.grad_norms, g.grad_norms, kGptRtol, kGptAtol)) << what << ": norms";
  expect_states_close(t.final_state, g.final_state, what + ": final state");
}

void expect_gpt_bits_equal(const GptTrained& a, const GptTrained& b, const std::string& what) {
  EXPECT_EQ(a.losses, b.losses) << what;
  EXPECT_EQ(a.grad_norms, b.grad_norms) << what;
  expect_states_bit_equal(a.first_grads, b.first_grads, what + ": first gradients");
  expect_states_bit_equal(a.final_state, b.final_state, what + ": final state");
}

}  // namespace lockstep::testing
