// nanoGPT's decoder-only transformer (karpathy/nanoGPT model.py; Radford et al. 2019, "Language
// Models are Unsupervised Multitask Learners", GPT-2) with nanoGPT's module names, so state_dict
// keys and safetensors files are interchangeable with a PyTorch nanoGPT model of the same config
// (tests/data/gpt/make_gpt_golden.py holds nanoGPT's definitions):
//   transformer.wte.weight [V, C]          token embedding, TIED to lm_head.weight
//   transformer.wpe.weight [block_size, C] position embedding
//   transformer.h.N.ln_1.{weight,bias}     transformer.h.N.attn.c_attn.{weight [3C, C], bias}
//   transformer.h.N.attn.c_proj.*          transformer.h.N.ln_2.*
//   transformer.h.N.mlp.c_fc.* [4C, C]     transformer.h.N.mlp.c_proj.* [C, 4C]
//   transformer.ln_f.*                     lm_head.weight [V, C] (no bias)
// (biases only with config.bias). No `attn.bias` mask buffer: nanoGPT under torch >= 2.0 uses
// scaled_dot_product_attention(is_causal=True) and registers none.
//
// Initialisation, nanoGPT's: every module is built with PyTorch's default init, then
// _init_weights (every Linear weight and Embedding weight N(0, 0.02), Linear biases 0, LayerNorm
// weight 1 and bias 0), then every `c_proj.weight` N(0, 0.02/√(2·n_layer)) (GPT-2's scaled
// residual projections), all drawn in nanoGPT's order from the default generator: after
// manual_seed(s) on an MT19937 default generator, torch.manual_seed(s)'s nanoGPT weights bit for
// bit. Block, CausalSelfAttention and MLP built alone keep PyTorch's default init (as nanoGPT's
// classes do); only GPT applies _init_weights.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "lockstep/nn/dropout.h"
#include "lockstep/nn/embedding.h"
#include "lockstep/nn/layer_norm.h"
#include "lockstep/nn/linear.h"
#include "lockstep/nn/module.h"

namespace lockstep::nn {

/// nanoGPT's GPTConfig. Defaults are its GPT-2 124M sizes, except `bias`: false, as nanoGPT's
/// train.py sets it (model.py's GPTConfig says true, GPT-2's own value).
struct GPTConfig {
  std::int64_t block_size = 1024;
  std::int64_t vocab_size = 50304;  ///< GPT-2's 50257 padded to a multiple of 64
  std::int64_t n_layer = 12;
  std::int64_t n_head = 12;
  std::int64_t n_embd = 768;
  double dropout = 0.0;
  bool bias = false;  ///< biases in every Linear (but lm_head) and LayerNorm
};

/// Multi-head causal self-attention: c_attn (Linear(C, 3C)) gives q, k, v, split into n_head
/// heads of size C/n_head, scaled_dot_product_attention(is_causal=True, dropout_p = dropout in
/// training, else 0), heads concatenated, c_proj (Linear(C, C)), residual dropout.
class CausalSelfAttention : public Cloneable<CausalSelfAttention> {
 public:
  /// ValueError naming the sizes when n_embd is not a positive multiple of n_head, or dropout
  /// is outside [0, 1].
  explicit CausalSelfAttention(const GPTConfig& config);
  /// x [B, T, C] float32/float64 -> [B, T, C]. ShapeError naming the layer for another rank or
  /// a last size other than n_embd.
  Tensor forward(const Tensor& x) override;
  void reset() override;
  std::string name() const override { return "CausalSelfAttention"; }

  GPTConfig config;
  std::shared_ptr<Linear> c_attn, c_proj;
  std::shared_ptr<Dropout> resid_dropout;
};

/// c_fc (Linear(C, 4C)), exact GELU (nn.GELU()), c_proj (Linear(4C, C)), dropout.
class MLP : public Cloneable<MLP> {
 public:
  /// ValueError for a non-positive n_embd or dropout outside [0, 1].
  explicit MLP(const GPTConfig& config);
  /// x [..., C] -> [..., C].
  Tensor forward(const Tensor& x) override;
  void reset() override;
  std::string name() const override { return "MLP"; }

  GPTConfig config;
  std::shared_ptr<Linear> c_fc, c_proj;
  std::shared_ptr<Dropout> dropout;
};

/// Pre-norm transformer block: x = x + attn(ln_1(x)); x = x + mlp(ln_2(x)).
class Block : public Cloneable<Block> {
 public:
  explicit Block(const GPTConfig& config);
  /// x [B, T, C] -> [B, T, C]; errors as CausalSelfAttention's.
  Tensor forward(const Tensor& x) override;
  void reset() override;
  std::string name() const override { return "Block"; }

  GPTConfig config;
  std::shared_ptr<LayerNorm> ln_1, ln_2;
  std::shared_ptr<CausalSelfAttention> attn;
  std::shared_ptr<MLP> mlp;
};

/// Children under names (PyTorch's nn.ModuleDict / nn.ModuleList: a container without forward,
/// there for the state_dict names `transformer.wte`, `transformer.h.0`, ...). Its owner builds
/// it in reset(), so it is cloned with its owner (its own clone() throws).
class ModuleDict : public Module {
 public:
  /// Registers `module` as `key` (ValueError for an empty key, one with a '.', or a null module).
  void insert(const std::string& key, std::shared_ptr<Module> module) {
    register_child(key, std::move(module));
  }
  std::string name() const override { return "ModuleDict"; }
};

/// nanoGPT's GPT: token + position embeddings, dropout, n_layer Blocks, ln_f, lm_head, with
/// lm_head.weight and transformer.wte.weight one tensor (weight tying, Press & Wolf 2017):
/// parameters() lists it once, as `transformer.wte.weight`; its gradient is the sum of the
/// embedding's scatter-add and lm_head's matmul; state_dict() has both keys; load_state_dict
/// takes either or both (Module::load_state_dict); clone() and DataParallel replicas keep it tied.
class GPT : public Cloneable<GPT> {
 public:
  /// ValueError naming the field for a non-positive size, n_embd not a multiple of n_head, or
  /// dropout outside [0, 1].
  explicit GPT(const GPTConfig& config);

  /// idx [B, T] int64 token indices -> logits [B, T, vocab_size] float32 for EVERY position
  /// (nanoGPT's forward(idx, targets) form; with targets=None it keeps only the last position).
  /// ShapeError naming the model for idx of another rank, T = 0 or T > block_size ("Cannot
  /// forward sequence of length T, block size is only ..."); IndexError from transformer.wte
  /// for a token outside [0, vocab_size); DTypeError for idx that are not int64.
  Tensor forward(const Tensor& idx) override;
  void reset() override;
  std::string name() const override { return "GPT"; }

  /// nanoGPT's get_num_params: parameters() summed (the tied tensor once), minus
  /// transformer.wpe.weight when non_embedding.
  std::int64_t get_num_params(bool non_embedding = true) const;

  GPTConfig config;
  std::shared_ptr<ModuleDict> transformer;  // wte, wpe, h, ln_f (and drop, without parameters)
  std::shared_ptr<Embedding> wte, wpe;
  std::shared_ptr<Dropout> drop;
  std::shared_ptr<ModuleDict> h;  // "0" ... "n_layer-1"
  std::vector<std::shared_ptr<Block>> blocks;
  std::shared_ptr<LayerNorm> ln_f;
  std::shared_ptr<Linear> lm_head;
};

/// nanoGPT's loss: F.cross_entropy(logits.view(-1, V), targets.view(-1), ignore_index=-1), the
/// mean over the targets that are not ignore_index. logits [B, T, V] float, targets [B, T]
/// int64. ShapeError naming both shapes when they do not fit; IndexError as cross_entropy's.
Tensor gpt_loss(const Tensor& logits, const Tensor& targets, std::int64_t ignore_index = -1);

/// The number of targets that are not ignore_index: the weight DataParallel's reducer path gives
/// a chunk's gpt_loss (DataParallel::forward_backward's LossCount), so the weighted sum is the
/// global mean however the ignored targets fall.
std::int64_t count_targets(const Tensor& targets, std::int64_t ignore_index = -1);

}  // namespace lockstep::nn
