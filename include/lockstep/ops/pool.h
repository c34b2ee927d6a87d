// 2-d pooling (torch.nn.functional.max_pool2d, avg_pool2d, adaptive_avg_pool2d), NCHW or CHW,
// float32 and float64, differentiable in the input.
#pragma once

#include <optional>

#include "lockstep/ops/conv.h"

namespace lockstep {

/// torch.nn.functional.max_pool2d (dilation 1, ceil_mode false): x [N, C, H, W] or [C, H, W]
/// (float32/float64; N may be 0) -> [N, C, H_out, W_out] or [C, H_out, W_out]; stride defaults
/// to the kernel; H_out = floor((H + 2·padding[0] − kernel[0]) / stride[0]) + 1 (W alike);
/// padded positions never win (−inf). Each window is scanned in row-major order and an element
/// replaces the maximum when it is greater or NaN (PyTorch's cpu_max_pool,
/// aten/src/ATen/native/cpu/MaxPoolKernel.cpp, and DilatedMaxPool2d.cu): the gradient goes to
/// the FIRST maximum of each window (ties: a constant input sends it to each window's first
/// in-image element), a NaN is the maximum and the LAST NaN of a window takes the gradient, an
/// all −inf window's gradient goes to its first element. Gradients of overlapping windows add.
/// Differentiable once in x (the gradient is not itself differentiable).
/// Errors: ShapeError for x not 3-d/4-d, an empty C, H or W, or an empty output (input smaller
/// than the kernel); ValueError for kernel or stride < 1, padding < 0 or padding > kernel / 2
/// (PyTorch's "pad should be at most half of kernel size"); DTypeError for int64 x. All name the
/// shapes. On cuda:k the same bits as on the CPU (src/ops/pool_norm_bodies.h).
Tensor max_pool2d(const Tensor& x, Size2 kernel, std::optional<Size2> stride = std::nullopt,
                  Size2 padding = {0, 0});

/// torch.nn.functional.avg_pool2d with PyTorch's defaults (ceil_mode false, count_include_pad
/// true, no divisor_override): each output is its window's in-image elements summed in the
/// tensor's dtype in row-major order, divided by kernel[0]·kernel[1] (zero padding counted; with
/// ceil_mode false every window lies inside the padded image), as cpu_avg_pool
/// (aten/src/ATen/native/cpu/AvgPoolKernel.cpp). The gradient of an input is Σ g / (kH·kW) over
/// the windows holding it. Shapes, errors and differentiability as max_pool2d.
Tensor avg_pool2d(const Tensor& x, Size2 kernel, std::optional<Size2> stride = std::nullopt,
                  Size2 padding = {0, 0});

/// torch.nn.functional.adaptive_avg_pool2d: x [N, C, H, W] or [C, H, W] -> [..., oH, oW]; output
/// row i averages input rows [floor(i·H/oH), ceil((i+1)·H/oH)) (columns alike), PyTorch's
/// start_index/end_index (aten/src/ATen/native/AdaptivePooling.h): bins may overlap and oH may
/// exceed H. Each output is its bin's sum / kh / kw (two divisions, as cpu_adaptive_avg_pool,
/// aten/src/ATen/native/cpu/AdaptiveAvgPoolKernel.cpp). ShapeError for x not 3-d/4-d or an empty
/// C, H or W; ValueError for an output size < 1; DTypeError for int64 x. Differentiable once.
Tensor adaptive_avg_pool2d(const Tensor& x, Size2 output_size);

}  // namespace lockstep
