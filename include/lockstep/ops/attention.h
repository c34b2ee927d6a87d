// Scaled dot-product attention (torch.nn.functional.scaled_dot_product_attention): a fused CPU
// kernel, and as its reference a composition of differentiable ops (batched matmul, transpose, an
// additive causal mask, softmax along the last dimension, dropout). Included by
// lockstep/ops/ops.h.
#pragma once

#include <cstdint>
#include <optional>

#include "lockstep/core/tensor.h"

namespace lockstep {

/// softmax(q·kᵀ·scale + mask)·v for q [..., L, E], k [..., S, E], v [..., S, Ev] with identical
/// leading dimensions (e.g. [B, H, T, head size]) -> [..., L, Ev], float32 or float64, as
/// torch.nn.functional.scaled_dot_product_attention without attn_mask:
///   - scale defaults to 1/√E;
///   - is_causal: query position i attends key positions j ≤ i (torch's top-left aligned
///     ones(L, S).tril() mask, added as 0 / −inf before the softmax);
///   - dropout_p > 0 drops attention weights with that probability, as torch does whatever
///     the module's mode (nanoGPT passes dropout_p = 0 in eval); ops' dropout (and its
///     DropoutKey, keyed by dim 0) draws the mask, so the bits are not PyTorch's.
/// ShapeError naming the three shapes when they do not
/// fit; ValueError for dropout_p outside [0, 1]; DTypeError / DeviceError for mixed dtypes or
/// devices. Under is_causal every query row keeps key 0, so no row is
/// fully masked (for S ≥ 1).
/// Without dropout or autocast, in the fast kernel mode, a fused kernel computes it per batch·head
/// slice with one autograd node: on the CPU src/ops/cpu/attention.cpp (the scores of a slice in a
/// scratch block, the backward recomputing the weights from each row's saved log-sum-exp), on a
/// GPU src/ops/cuda/attention.cu (one thread per query or key row on the shared bodies of
/// src/ops/attention_bodies.h, no [L, S] block; compile-checked, not yet run on a GPU); in the
/// reference kernel mode, with dropout or under autocast the composition runs, and it is the
/// fused kernels' oracle (tests/ops/attention_test.cpp, attention_bodies_test.cpp). Not built:
/// a tiled (FlashAttention) CUDA kernel.
Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                    bool is_causal = false, double dropout_p = 0.0,
                                    std::optional<double> scale = std::nullopt);

/// nanoGPT's CausalSelfAttention between c_attn and c_proj, on c_attn's packed output: qkv
/// [B, T, 3·C] (q, k, v side by side, each C = n_head·hs wide) -> [B, T, C], float32 or float64,
/// exactly nanoGPT's (model.py)
///   q, k, v = qkv.split(C, dim=2); each .view(B, T, n_head, hs).transpose(1, 2)
///   y = scaled_dot_product_attention(q, k, v, is_causal=is_causal, dropout_p=dropout_p)
///   y.transpose(1, 2).contiguous().view(B, T, C)
/// which is what runs in the reference kernel mode, with dropout and under autocast. Otherwise
/// the fused kernel (CPU or GPU, as scaled_dot_product_attention's) reads each head's q, k, v
/// straight from qkv's rows and writes its output into columns h·hs.. of the result, and its
/// backward writes the gradients of q, k and v into one [B, T, 3·C] tensor: none of the split,
/// transpose and reshape copies (one autograd node; scale 1/√hs). ValueError for n_head < 1 or dropout_p outside [0, 1];
/// ShapeError unless qkv is 3-d with its last size divisible by 3·n_head; DTypeError unless
/// floating.
Tensor qkv_attention(const Tensor& qkv, std::int64_t n_head, bool is_causal = true,
                     double dropout_p = 0.0);

}  // namespace lockstep
