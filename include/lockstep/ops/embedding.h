// Embedding lookup (torch.nn.functional.embedding), float32 and float64 weights, differentiable
// in the weight.
#pragma once

#include "lockstep/core/tensor.h"

namespace lockstep {

/// torch.nn.functional.embedding(indices, weight) (note Lockstep's argument order: the weight
/// first): weight [V, D] (float32/float64), indices int64 of any shape [...] (0-d included)
/// with values in [0, V) -> [..., D] on weight's device, row i of the output the weight's row
/// indices[i] (no padding_idx, max_norm, scale_grad_by_freq or sparse gradients). Backward
/// (PyTorch's embedding_dense_backward_cpu, aten/src/ATen/native/Embedding.cpp): dweight
/// [V, D] = 0 plus, for every position i in index order (row-major over indices), the output
/// gradient's row i added to row indices[i], in the weight's dtype; rows never looked up get
/// zeros. The order is fixed by the indices alone, so repeated indices give the same bits on
/// every run, thread count and device (the CUDA kernel sums each row's contributions in the
/// same order, from a counting sort of the indices made on the host; no atomics).
/// Differentiable once in weight; indices get no gradient. The indices are checked (and saved
/// for backward) on a host copy: on cuda:k one synchronizing copy, as index_select.
/// Errors: ShapeError for weight not 2-d; DTypeError for an int64 weight or indices that are
/// not int64; DeviceError for indices and weight on different devices when either is a GPU
/// (cpu:k devices share host memory, as index_select); IndexError naming the first bad index,
/// its position, the indices' shape and V.
Tensor embedding(const Tensor& weight, const Tensor& indices);

}  // namespace lockstep
