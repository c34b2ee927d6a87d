// Internal: conv2d's CUDA path (lockstep/ops/conv.h) at the level of tensors, on cuDNN. The op
// (src/ops/conv.cpp) checks shapes, dtypes and devices and records the autograd node as on the
// CPU, then calls these for cuda:k tensors. Implemented in src/ops/cuda/conv.cpp; in builds
// without CUDA src/ops/cuda_conv_stub.cpp stands in (never reached: no cuda:k tensor can be
// made there; it throws DeviceError if it is). No CUDA header is included here.
//
// Conventions as src/ops/cuda_ops.h: contiguous NCHW / OIHW tensors on one device, float32 or
// float64, outputs allocated by the caller; everything is enqueued on the device's compute
// stream (asynchronous). cuDNN failures throw CudaError naming the device, the call and the
// geometry. Zero-size batches enqueue no cuDNN call (the weight gradient is zero-filled).
#pragma once

#include "lockstep/core/tensor.h"
#include "ops/conv_kernels.h"

namespace lockstep::cuda_conv_ops {

/// y = conv2d(x, w) + bias (bias may be undefined): cudnnConvolutionForward, then
/// cudnnAddTensor for the bias.
void conv2d_forward(const kernels::Conv2dGeom& g, const Tensor& x, const Tensor& w,
                    const Tensor& bias, const Tensor& y);
/// gx = ∂L/∂x: cudnnConvolutionBackwardData.
void conv2d_backward_input(const kernels::Conv2dGeom& g, const Tensor& gy, const Tensor& w,
                           const Tensor& gx);
/// gw = ∂L/∂w (cudnnConvolutionBackwardFilter) and gb = ∂L/∂bias
/// (cudnnConvolutionBackwardBias), each skipped when undefined.
void conv2d_backward_weight(const kernels::Conv2dGeom& g, const Tensor& gy, const Tensor& x,
                            const Tensor& gw, const Tensor& gb);

}  // namespace lockstep::cuda_conv_ops
