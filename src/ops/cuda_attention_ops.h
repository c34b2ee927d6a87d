// Internal: the fused CUDA attention of scaled_dot_product_attention and qkv_attention
// (src/ops/attention.cpp), at the level of device pointers: the per-row bodies of
// src/ops/attention_bodies.h, one GPU thread per query row (forward; backward's D and query
// gradient) or key row (key and value gradients). Implemented by src/ops/cuda/attention.cu; in
// builds without CUDA src/ops/cuda_attention_stub.cpp stands in and throws DeviceError (no cuda:k
// tensor can exist there, so it is never reached). No CUDA header is included here.
// Every function enqueues its kernels on the device's compute stream and returns before they
// finish. Differences from the fused CPU kernel: each score is a double dot product (the CPU's
// comes from a float GEMM), and CUDA's exp/log: the same results to rounding, not bit for bit.
#pragma once

#include "ops/attention_bodies.h"

namespace lockstep::cuda_attention {

using kernels::shared::AttnArgs;

/// a.out and a.lse from a.q, a.k, a.v (batch·L threads).
template <class T>
void attention_forward(const AttnArgs<T>& a, int device);
/// a.gq, a.gk, a.gv (every element written) from a.q, a.k, a.v, a.lse and a.gout; a.d a
/// [batch, L] double scratch (batch·L threads, then batch·S threads).
template <class T>
void attention_backward(const AttnArgs<T>& a, int device);

}  // namespace lockstep::cuda_attention
