// The GPT golden files (tests/data/gpt/, make_gpt_golden.py: nanoGPT's model.py run by PyTorch)
// and training nanoGPT's model the ways the tests compare with them: as a plain module, through
// DataParallel on several devices, or DistributedDataParallel over a process group, with
// configure_optimizers, WarmupCosineLR and clip_grad_norm_ as nanoGPT's train.py.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "lockstep/lockstep.h"
#include "lockstep/parallel/distributed.h"

namespace lockstep::testing {

// float32 through 2 blocks, then 5 AdamW steps at lr up to 1e-2 (sums in other orders than
// PyTorch's kernels).
constexpr double kGptRtol = 2e-4, kGptAtol = 2e-5;

struct GptGolden {
  std::string name;  // "gpt_nobias", "gpt_bias"
  nn::GPTConfig config;
  std::int64_t parameter_count = 0;
  std::vector<std::string> decay_names, nodecay_names;
  std::vector<std::string> state_dict_keys, parameter_names;  // PyTorch's order
  // safetensors files hold their tensors sorted by name, not in state_dict order.
  double weight_decay = 0, learning_rate = 0, beta1 = 0, beta2 = 0, eps = 0, min_lr = 0,
         grad_clip = 0;
  std::int64_t warmup_iters = 0, lr_decay_iters = 0;
  std::vector<Tensor> idx, targets;  // per step [B, T] int64
  double first_loss = 0;
  Tensor first_logits;              // [B, T, V]
  StateDict initial;                // both tied keys
  StateDict first_grads;            // named_parameters names (the tied tensor once)
  StateDict final_state;            // both tied keys
  std::vector<double> lrs, losses, grad_norms;
};

/// tests/data/gpt/<name>.json with its _init, _grads and _final safetensors files.
GptGolden load_gpt_golden(const std::string& name);

struct GptRun {
  int devices = 0;  // 0: the plain module; otherwise DataParallel (or DDP with a group)
  parallel::DataParallelOptions options{};
  std::shared_ptr<dist::ProcessGroup> group = nullptr;  // DDP, each rank its split_batch rows
};

struct GptTrained {
  Tensor first_logits;  // the plain module's train-mode forward of batch 0 (devices = 0 only)
  double first_loss = 0;
  StateDict first_grads;  // named_parameters names, before clipping
  std::vector<double> lrs, losses, grad_norms;
  StateDict final_state;
};

/// The golden run: the model loaded from g.initial, configure_optimizers + WarmupCosineLR,
/// steps over g.idx / g.targets with clip_grad_norm_(g.grad_clip).
GptTrained train_gpt(const GptGolden& g, const GptRun& run);

/// gtest expectations: t against g within kGptRtol / kGptAtol.
void expect_gpt_matches(const GptTrained& t, const GptGolden& g, const std::string& what);
/// gtest expectations: b's losses, norms, first gradients and final state have a's bits.
void expect_gpt_bits_equal(const GptTrained& a, const GptTrained& b, const std::string& what);

}  // namespace lockstep::testing
