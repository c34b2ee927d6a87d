// conv2d on cuDNN (src/ops/cuda_conv_ops.h): the legacy convolution API
// (cudnnConvolutionForward / BackwardData / BackwardFilter / BackwardBias, <cudnn_cnn.h>) on the
// device's compute stream, one cuDNN handle per device (created on first use, never destroyed,
// bound to the stream per call, as src/ops/cuda/gemm.cpp does with cuBLAS), workspaces from the
// caching allocator (lockstep/cuda/allocator.h: stream-ordered, so freeing after enqueueing is
// safe).
//
// Numerics and algorithm choice (documented choice, not benchmarked):
// - CUDNN_FMA_MATH on every descriptor: fp32 stays fp32 (no TF32 tensor-core rounding, which
//   CUDNN_DEFAULT_MATH permits on Ampere and later), matching cuBLAS's CUBLAS_DEFAULT_MATH here.
// - Fixed algorithms, never cudnnFind (timing-based, may change run to run): forward
//   IMPLICIT_PRECOMP_GEMM, else IMPLICIT_GEMM; backward data ALGO_1; backward filter ALGO_1. All
//   are deterministic (cuDNN developer guide, "Reproducibility (Determinism)": only
//   BWD_DATA_ALGO_0 and BWD_FILTER_ALGO_0/_3 are not). An algorithm is taken when its
//   cudnnGet*WorkspaceSize succeeds for the geometry; if none of the list does, the first
//   CUDNN_DETERMINISTIC result of cudnnGet*Algorithm_v7 (heuristics only, so the same choice for
//   the same shapes, GPU and cuDNN version) is used; otherwise CudaError.
#include <cuda_runtime.h>
#include <cudnn.h>

#include <array>
#include <climits>
#include <mutex>
#include <string>

#include "lockstep/cuda/detail/check.h"
#include "lockstep/cuda/allocator.h"
#include "lockstep/cuda/runtime.h"
#include "ops/cuda_conv_ops.h"

namespace lockstep::cuda_conv_ops {

namespace {

using kernels::Conv2dGeom;
using ::lockstep::cuda::kMaxDevices;

std::string geom_text(const Conv2dGeom& g) {
  auto s = [](std::int64_t v) { return std::to_string(v); };
  return "x [" + s(g.n) + ", " + s(g.c_in) + ", " + s(g.h) + ", " + s(g.w) + "], weight [" +
         s(g.c_out) + ", " + s(g.cin_g()) + ", " + s(g.kh) + ", " + s(g.kw) + "], stride (" +
         s(g.stride_h) + ", " + s(g.stride_w) + "), padding (" + s(g.pad_h) + ", " + s(g.pad_w) +
         "), dilation (" + s(g.dil_h) + ", " + s(g.dil_w) + "), groups " + s(g.groups);
}

void check(cudnnStatus_t status, int device, const char* call, const Conv2dGeom& g) {
  if (status == CUDNN_STATUS_SUCCESS) return;
  throw CudaError("cuDNN error on " + ::lockstep::cuda::detail::device_name(device) + " in " +
                      call + " (conv2d " + geom_text(g) + "): " + cudnnGetErrorString(status),
                  static_cast<int>(status));
}

cudnnHandle_t handle_for(int device, const Conv2dGeom& g) {
  static std::mutex mutex;
  static std::array<cudnnHandle_t, kMaxDevices> handles{};
  if (device < 0 || device >= kMaxDevices)
    throw CudaError("cuDNN: " + ::lockstep::cuda::detail::device_name(device) +
                    " is outside the devices Lockstep supports");
  std::lock_guard<std::mutex> lock(mutex);
  if (!handles[device]) check(cudnnCreate(&handles[device]), device, "cudnnCreate", g);
  return handles[device];
}

// cuDNN's descriptors take int sizes.
int to_int(std::int64_t v) {
  if (v > INT_MAX)
    throw ValueError("conv2d on cuda: size " + std::to_string(v) +
                     " exceeds cuDNN's INT32_MAX limit for descriptors");
  return static_cast<int>(v);
}

// The descriptors of one call, and the handle bound to the compute stream. The caller has made
// the device current.
struct Call {
  int device;
  const Conv2dGeom& g;
  cudnnHandle_t handle = nullptr;
  cudnnDataType_t dtype;
  cudnnTensorDescriptor_t x = nullptr, y = nullptr, bias = nullptr;
  cudnnFilterDescriptor_t w = nullptr;
  cudnnConvolutionDescriptor_t conv = nullptr;

  Call(int dev, const Conv2dGeom& geom, DType dt)
      : device(dev), g(geom), dtype(dt == DType::Float64 ? CUDNN_DATA_DOUBLE : CUDNN_DATA_FLOAT) {
    try {
      describe();
    } catch (...) {
      destroy();  // the destructor does not run for a constructor that throws
      throw;
    }
  }
  ~Call() { destroy(); }
  Call(const Call&) = delete;
  Call& operator=(const Call&) = delete;

  void describe() {
    handle = handle_for(device, g);
    check(cudnnSetStream(handle, ::lockstep::cuda::compute_stream(device)), device,
          "cudnnSetStream", g);
    check(cudnnCreateTensorDescriptor(&x), device, "cudnnCreateTensorDescriptor", g);
    check(cudnnCreateTensorDescriptor(&y), device, "cudnnCreateTensorDescriptor", g);
    check(cudnnCreateTensorDescriptor(&bias), device, "cudnnCreateTensorDescriptor", g);
    check(cudnnCreateFilterDescriptor(&w), device, "cudnnCreateFilterDescriptor", g);
    check(cudnnCreateConvolutionDescriptor(&conv), device, "cudnnCreateConvolutionDescriptor", g);
    check(cudnnSetTensor4dDescriptor(x, CUDNN_TENSOR_NCHW, dtype, to_int(g.n), to_int(g.c_in),
                                     to_int(g.h), to_int(g.w)),
          device, "cudnnSetTensor4dDescriptor (input)", g);
    check(cudnnSetTensor4dDescriptor(y, CUDNN_TENSOR_NCHW, dtype, to_int(g.n), to_int(g.c_out),
                                     to_int(g.out_h), to_int(g.out_w)),
          device, "cudnnSetTensor4dDescriptor (output)", g);
    check(cudnnSetTensor4dDescriptor(bias, CUDNN_TENSOR_NCHW, dtype, 1, to_int(g.c_out), 1, 1),
          device, "cudnnSetTensor4dDescriptor (bias)", g);
    check(cudnnSetFilter4dDescriptor(w, dtype, CUDNN_TENSOR_NCHW, to_int(g.c_out),
                                     to_int(g.cin_g()), to_int(g.kh), to_int(g.kw)),
          device, "cudnnSetFilter4dDescriptor", g);
    check(cudnnSetConvolution2dDescriptor(conv, to_int(g.pad_h), to_int(g.pad_w),
                                          to_int(g.stride_h), to_int(g.stride_w), to_int(g.dil_h),
                                          to_int(g.dil_w), CUDNN_CROSS_CORRELATION, dtype),
          device, "cudnnSetConvolution2dDescriptor", g);
    check(cudnnSetConvolutionGroupCount(conv, to_int(g.groups)), device,
          "cudnnSetConvolutionGroupCount", g);
    check(cudnnSetConvolutionMathType(conv, CUDNN_FMA_MATH), device, "cudnnSetConvolutionMathType",
          g);
    int n = 0, c = 0, h = 0, wd = 0;
    check(cudnnGetConvolution2dForwardOutputDim(conv, x, w, &n, &c, &h, &wd), device,
          "cudnnGetConvolution2dForwardOutputDim", g);
    if (h != g.out_h || wd != g.out_w || c != g.c_out)
      throw CudaError("cuDNN: conv2d " + geom_text(g) + ": cuDNN's output " + std::to_string(h) +
                      "x" + std::to_string(wd) + " differs from PyTorch's " +
                      std::to_string(g.out_h) + "x" + std::to_string(g.out_w));
  }
  void destroy() {
    if (conv) cudnnDestroyConvolutionDescriptor(conv);
    if (w) cudnnDestroyFilterDescriptor(w);
    if (bias) cudnnDestroyTensorDescriptor(bias);
    if (y) cudnnDestroyTensorDescriptor(y);
    if (x) cudnnDestroyTensorDescriptor(x);
  }

  // alpha/beta: host values of the compute type (double for double data, float otherwise).
  const void* one() const {
    return dtype == CUDNN_DATA_DOUBLE ? static_cast<const void*>(&d1) : &f1;
  }
  const void* zero() const {
    return dtype == CUDNN_DATA_DOUBLE ? static_cast<const void*>(&d0) : &f0;
  }
  double d1 = 1.0, d0 = 0.0;
  float f1 = 1.0f, f0 = 0.0f;
};

// The first algorithm of `preferred` whose workspace query succeeds, else the first
// deterministic heuristic result; its workspace size in `bytes`.
template <class Algo, class Perf, class SizeFn, class HeuristicFn>
Algo pick(const Call& c, std::initializer_list<Algo> preferred, SizeFn size_of,
          HeuristicFn heuristics, std::size_t& bytes, const char* what) {
  for (Algo a : preferred)
    if (size_of(a, &bytes) == CUDNN_STATUS_SUCCESS) return a;
  constexpr int kMax = 16;
  Perf perf[kMax];
  int returned = 0;
  check(heuristics(kMax, &returned, perf), c.device, what, c.g);
  for (int i = 0; i < returned; ++i)
    if (perf[i].status == CUDNN_STATUS_SUCCESS && perf[i].determinism == CUDNN_DETERMINISTIC &&
        size_of(perf[i].algo, &bytes) == CUDNN_STATUS_SUCCESS)
      return perf[i].algo;
  throw CudaError(std::string("cuDNN: no deterministic algorithm for ") + what + " of conv2d " +
                  geom_text(c.g) + " on " + ::lockstep::cuda::detail::device_name(c.device));
}

void zero_fill(const Tensor& t, int device, const Conv2dGeom& g) {
  if (!t.defined() || t.numel() == 0) return;
  LOCKSTEP_CUDA_CHECK(cudaMemsetAsync(t.device_raw_data(), 0,
                                      static_cast<std::size_t>(t.numel()) * element_size(t.dtype()),
                                      ::lockstep::cuda::compute_stream(device)),
                      device, "cudaMemsetAsync (conv2d " + geom_text(g) + ")");
}

// cuDNN refuses descriptors with a zero dimension; an input of C_in = 0 (with samples) is left
// to the CPU.
void refuse_no_channels(const Conv2dGeom& g, int device) {
  if (g.c_in == 0)
    throw DeviceError("conv2d: an input with C_in = 0 channels (" + geom_text(g) +
                      ") is not implemented on " + ::lockstep::cuda::detail::device_name(device) +
                      " (cuDNN refuses zero-size descriptors; run it on the CPU)");
}

}  // namespace

void conv2d_forward(const Conv2dGeom& g, const Tensor& x, const Tensor& w, const Tensor& bias,
                    const Tensor& y) {
  if (g.y_numel() == 0) return;
  const int device = x.device().index;
  ::lockstep::cuda::DeviceGuard guard(device);
  refuse_no_channels(g, device);
  Call c(device, g, x.dtype());
  {
    std::size_t bytes = 0;
    const auto algo = pick<cudnnConvolutionFwdAlgo_t, cudnnConvolutionFwdAlgoPerf_t>(
        c,
        {CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM,
         CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM},
        [&](cudnnConvolutionFwdAlgo_t a, std::size_t* b) {
          return cudnnGetConvolutionForwardWorkspaceSize(c.handle, c.x, c.w, c.conv, c.y, a, b);
        },
        [&](int n, int* r, cudnnConvolutionFwdAlgoPerf_t* p) {
          return cudnnGetConvolutionForwardAlgorithm_v7(c.handle, c.x, c.w, c.conv, c.y, n, r, p);
        },
        bytes, "cudnnGetConvolutionForwardAlgorithm_v7");
    ::lockstep::cuda::DeviceBuffer ws(bytes, device);
    check(cudnnConvolutionForward(c.handle, c.one(), c.x, x.device_raw_data(), c.w,
                                  w.device_raw_data(), c.conv, algo, ws.data(), bytes, c.zero(),
                                  c.y, y.device_raw_data()),
          device, "cudnnConvolutionForward", g);
  }
  if (bias.defined())
    check(cudnnAddTensor(c.handle, c.one(), c.bias, bias.device_raw_data(), c.one(), c.y,
                         y.device_raw_data()),
          device, "cudnnAddTensor (bias)", g);
}

void conv2d_backward_input(const Conv2dGeom& g, const Tensor& gy, const Tensor& w,
                           const Tensor& gx) {
  if (g.x_numel() == 0) return;
  const int device = gx.device().index;
  ::lockstep::cuda::DeviceGuard guard(device);
  if (g.c_out == 0) return zero_fill(gx, device, g);  // no output: x does not matter
  refuse_no_channels(g, device);
  Call c(device, g, gx.dtype());
  std::size_t bytes = 0;
  const auto algo = pick<cudnnConvolutionBwdDataAlgo_t, cudnnConvolutionBwdDataAlgoPerf_t>(
      c, {CUDNN_CONVOLUTION_BWD_DATA_ALGO_1},
      [&](cudnnConvolutionBwdDataAlgo_t a, std::size_t* b) {
        return cudnnGetConvolutionBackwardDataWorkspaceSize(c.handle, c.w, c.y, c.conv, c.x, a, b);
      },
      [&](int n, int* r, cudnnConvolutionBwdDataAlgoPerf_t* p) {
        return cudnnGetConvolutionBackwardDataAlgorithm_v7(c.handle, c.w, c.y, c.conv, c.x, n, r,
                                                           p);
      },
      bytes, "cudnnGetConvolutionBackwardDataAlgorithm_v7");
  ::lockstep::cuda::DeviceBuffer ws(bytes, device);
  check(cudnnConvolutionBackwardData(c.handle, c.one(), c.w, w.device_raw_data(), c.y,
                                     gy.device_raw_data(), c.conv, algo, ws.data(), bytes, c.zero(),
                                     c.x, gx.device_raw_data()),
        device, "cudnnConvolutionBackwardData", g);
}

void conv2d_backward_weight(const Conv2dGeom& g, const Tensor& gy, const Tensor& x,
                            const Tensor& gw, const Tensor& gb) {
  const int device = x.device().index;
  ::lockstep::cuda::DeviceGuard guard(device);
  if (g.y_numel() == 0) {  // no sample (or no output channel): zero sums
    zero_fill(gw, device, g);
    return zero_fill(gb, device, g);
  }
  refuse_no_channels(g, device);
  Call c(device, g, x.dtype());
  if (gw.defined()) {
    std::size_t bytes = 0;
    const auto algo = pick<cudnnConvolutionBwdFilterAlgo_t, cudnnConvolutionBwdFilterAlgoPerf_t>(
        c, {CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1},
        [&](cudnnConvolutionBwdFilterAlgo_t a, std::size_t* b) {
          return cudnnGetConvolutionBackwardFilterWorkspaceSize(c.handle, c.x, c.y, c.conv, c.w, a,
                                                                b);
        },
        [&](int n, int* r, cudnnConvolutionBwdFilterAlgoPerf_t* p) {
          return cudnnGetConvolutionBackwardFilterAlgorithm_v7(c.handle, c.x, c.y, c.conv, c.w, n,
                                                               r, p);
        },
        bytes, "cudnnGetConvolutionBackwardFilterAlgorithm_v7");
    ::lockstep::cuda::DeviceBuffer ws(bytes, device);
    check(cudnnConvolutionBackwardFilter(c.handle, c.one(), c.x, x.device_raw_data(), c.y,
                                         gy.device_raw_data(), c.conv, algo, ws.data(), bytes,
                                         c.zero(), c.w, gw.device_raw_data()),
          device, "cudnnConvolutionBackwardFilter", g);
  }
  if (gb.defined())
    check(cudnnConvolutionBackwardBias(c.handle, c.one(), c.y, gy.device_raw_data(), c.zero(),
                                       c.bias, gb.device_raw_data()),
          device, "cudnnConvolutionBackwardBias", g);
}

}  // namespace lockstep::cuda_conv_ops
