// nanoGPT's CausalSelfAttention, MLP, Block and GPT (karpathy/nanoGPT model.py), its
// initialisation and weight tying; the loss of its forward(idx, targets).
#include "lockstep/nn/gpt.h"

#include <cmath>
#include <string>

#include "lockstep/autograd/grad_mode.h"
#include "lockstep/nn/init.h"
#include "lockstep/ops/attention.h"
#include "lockstep/ops/ops.h"

namespace lockstep::nn {

namespace {

void check_config(const GPTConfig& c, const char* who) {
  auto positive = [&](std::int64_t v, const char* field) {
    if (v < 1)
      throw ValueError(std::string(who) + ": config." + field + " must be positive, got " +
                       std::to_string(v));
  };
  positive(c.block_size, "block_size");
  positive(c.vocab_size, "vocab_size");
  positive(c.n_layer, "n_layer");
  positive(c.n_head, "n_head");
  positive(c.n_embd, "n_embd");
  if (c.n_embd % c.n_head != 0)
    throw ValueError(std::string(who) + ": config.n_embd (" + std::to_string(c.n_embd) +
                     ") must be a multiple of config.n_head (" + std::to_string(c.n_head) + ")");
  if (!(c.dropout >= 0 && c.dropout <= 1))
    throw ValueError(std::string(who) + ": config.dropout must be in [0, 1], got " +
                     std::to_string(c.dropout));
}

// nanoGPT's self.apply(self._init_weights): every module after its children, in registration
// order (torch.nn.Module.apply); Linear weight N(0, 0.02) and bias 0, Embedding weight N(0, 0.02).
// A tied weight is drawn once for each module that holds it, as in PyTorch.
void init_weights(Module& m) {
  for (auto& [name, child] : m.named_children()) init_weights(*child);
  if (auto* l = dynamic_cast<Linear*>(&m)) {
    init::normal_(l->weight, 0.0, 0.02);
    if (l->bias.defined()) {
      NoGradGuard no_grad;
      l->bias.zero_();
    }
  } else if (auto* e = dynamic_cast<Embedding*>(&m)) {
    init::normal_(e->weight, 0.0, 0.02);
  }
}

}  // namespace

CausalSelfAttention::CausalSelfAttention(const GPTConfig& c) : config(c) {
  if (c.n_head < 1 || c.n_embd < 1 || c.n_embd % c.n_head != 0)
    throw ValueError("CausalSelfAttention: n_embd (" + std::to_string(c.n_embd) +
                     ") must be a positive multiple of n_head (" + std::to_string(c.n_head) + ")");
  if (!(c.dropout >= 0 && c.dropout <= 1))
    throw ValueError("CausalSelfAttention: dropout must be in [0, 1], got " +
                     std::to_string(c.dropout));
  reset();
}

void CausalSelfAttention::reset() {
  const std::int64_t C = config.n_embd;
  c_attn = register_module("c_attn", std::make_shared<Linear>(C, 3 * C, config.bias));
  c_proj = register_module("c_proj", std::make_shared<Linear>(C, C, config.bias));
  resid_dropout = register_module("resid_dropout", std::make_shared<Dropout>(config.dropout));
}

Tensor CausalSelfAttention::forward(const Tensor& x) {
  const std::int64_t C = config.n_embd, nh = config.n_head;
  if (x.dim() != 3 || x.size(2) != C)
    throw ShapeError("CausalSelfAttention(n_embd=" + std::to_string(C) + ", n_head=" +
                     std::to_string(nh) + "): expected input [B, T, " + std::to_string(C) +
                     "], got " + x.shape().str());
  // q, k, v for all heads (split, each head a batch dim), causal attention, the heads re-assembled
  // side by side — nanoGPT's lines, which qkv_attention runs (on the CPU without their copies).
  const Tensor y = qkv_attention(c_attn->forward(x), nh, /*is_causal=*/true,
                                 is_training() ? config.dropout : 0.0);
  return resid_dropout->forward(c_proj->forward(y));
}

MLP::MLP(const GPTConfig& c) : config(c) {
  if (c.n_embd < 1)
    throw ValueError("MLP: n_embd must be positive, got " + std::to_string(c.n_embd));
  if (!(c.dropout >= 0 && c.dropout <= 1))
    throw ValueError("MLP: dropout must be in [0, 1], got " + std::to_string(c.dropout));
  reset();
}

void MLP::reset() {
  const std::int64_t C = config.n_embd;
  c_fc = register_module("c_fc", std::make_shared<Linear>(C, 4 * C, config.bias));
  c_proj = register_module("c_proj", std::make_shared<Linear>(4 * C, C, config.bias));
  dropout = register_module("dropout", std::make_shared<Dropout>(config.dropout));
}

Tensor MLP::forward(const Tensor& x) {
  return dropout->forward(c_proj->forward(gelu(c_fc->forward(x))));
}

Block::Block(const GPTConfig& c) : config(c) {
  check_config(c, "Block");
  reset();
}

void Block::reset() {
  ln_1 = register_module("ln_1", std::make_shared<LayerNorm>(config.n_embd, 1e-5, true,
                                                             config.bias));
  attn = register_module("attn", std::make_shared<CausalSelfAttention>(config));
  ln_2 = register_module("ln_2", std::make_shared<LayerNorm>(config.n_embd, 1e-5, true,
                                                             config.bias));
  mlp = register_module("mlp", std::make_shared<MLP>(config));
}

Tensor Block::forward(const Tensor& x) {
  const Tensor h = add(x, attn->forward(ln_1->forward(x)));
  return add(h, mlp->forward(ln_2->forward(h)));
}

GPT::GPT(const GPTConfig& c) : config(c) {
  check_config(c, "GPT");
  reset();
}

void GPT::reset() {
  const std::int64_t C = config.n_embd;
  // Registration order is nanoGPT's (transformer first, then lm_head), so named_parameters()
  // meets the tied tensor first as transformer.wte.weight, and state_dict keys come in PyTorch's
  // order. Construction draws what nanoGPT's does, in its order: every module's PyTorch default
  // (Embedding N(0, 1), Linear kaiming_uniform_ and bias), then the tie, then _init_weights over
  // the whole model, then the c_proj rule; so after the same seed on an MT19937 generator the
  // weights are nanoGPT's bits.
  transformer = register_module("transformer", std::make_shared<ModuleDict>());
  wte = std::make_shared<Embedding>(config.vocab_size, C);
  wpe = std::make_shared<Embedding>(config.block_size, C);
  drop = std::make_shared<Dropout>(config.dropout);
  h = std::make_shared<ModuleDict>();
  blocks.clear();
  for (std::int64_t i = 0; i < config.n_layer; ++i) {
    blocks.push_back(std::make_shared<Block>(config));
    h->insert(std::to_string(i), blocks.back());
  }
  ln_f = std::make_shared<LayerNorm>(C, 1e-5, true, config.bias);
  transformer->insert("wte", wte);
  transformer->insert("wpe", wpe);
  transformer->insert("drop", drop);
  transformer->insert("h", h);
  transformer->insert("ln_f", ln_f);
  lm_head = register_module("lm_head", std::make_shared<Linear>(C, config.vocab_size, false));
  // https://paperswithcode.com/method/weight-tying: self.transformer.wte.weight = lm_head.weight
  wte->weight = lm_head->weight;
  wte->tie_parameter("weight", lm_head->weight);
  init_weights(*this);
  // "apply special scaled init to the residual projections, per GPT-2 paper"
  const double proj_std = 0.02 / std::sqrt(2.0 * static_cast<double>(config.n_layer));
  for (auto& [name, p] : named_parameters())
    if (name.size() >= 13 && name.compare(name.size() - 13, 13, "c_proj.weight") == 0) {
      Tensor t = p;
      init::normal_(t, 0.0, proj_std);
    }
}

Tensor GPT::forward(const Tensor& idx) {
  if (idx.dim() != 2 || idx.size(1) < 1)
    throw ShapeError("GPT: expected token indices [B, T] with T >= 1, got " + idx.shape().str());
  const std::int64_t T = idx.size(1);
  if (T > config.block_size)
    throw ShapeError("GPT: Cannot forward sequence of length " + std::to_string(T) +
                     ", block size is only " + std::to_string(config.block_size));
  const Tensor pos = arange(T, TensorOptions(kInt64).device(idx.device()));
  // tok_emb [B, T, C] + pos_emb [T, C], broadcast over the batch.
  Tensor x = drop->forward(add(wte->forward(idx), wpe->forward(pos)));
  for (const auto& block : blocks) x = block->forward(x);
  return lm_head->forward(ln_f->forward(x));
}

std::int64_t GPT::get_num_params(bool non_embedding) const {
  std::int64_t n = 0;
  for (const Tensor& p : parameters()) n += p.numel();
  return non_embedding ? n - wpe->weight.numel() : n;
}

Tensor gpt_loss(const Tensor& logits, const Tensor& targets, std::int64_t ignore_index) {
  if (logits.dim() != 3 || targets.dim() != 2 || logits.size(0) != targets.size(0) ||
      logits.size(1) != targets.size(1))
    throw ShapeError("gpt_loss: expected logits [B, T, V] and targets [B, T], got " +
                     logits.shape().str() + " and " + targets.shape().str());
  const std::int64_t V = logits.size(2);
  return cross_entropy(reshape(logits, {logits.size(0) * logits.size(1), V}),
                       reshape(targets, {targets.numel()}), ignore_index);
}

std::int64_t count_targets(const Tensor& targets, std::int64_t ignore_index) {
  std::int64_t n = 0;
  for (const std::int64_t v : targets.to_vector<std::int64_t>()) n += v != ignore_index;
  return n;
}

}  // namespace lockstep::nn
