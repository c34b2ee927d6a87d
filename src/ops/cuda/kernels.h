// CUDA kernels of the reference workload (LOCKSTEP_CUDA=ON only), with a plain C++ interface:
// device pointers, sizes, and where to run (Exec: a device and a stream on it). They are the
// cuda:: family next to ref:: and cpu:: in src/ops/kernels.h, with the same semantics, and are
// tested against ref:: (tests/cuda/). Not yet called by Tensor ops (see docs/cuda.md).
//
// Conventions: every pointer is device memory of exec.device unless said otherwise; arrays are
// contiguous, row-major; sizes may be 0 (nothing is launched). Every function returns once the
// work is enqueued on exec.stream (asynchronous); a launch failure throws CudaError naming the
// device and the kernel, a cuBLAS failure CublasError; failures inside a kernel surface at the
// next synchronizing call (cuda::synchronize, copy_to_host). Each function makes exec.device
// current for its launches and restores the caller's device.
#pragma once

#include <cstdint>

#include "lockstep/cuda/runtime.h"

namespace lockstep::kernels::cuda {

using ::lockstep::cuda::Stream;

/// Where a kernel runs: a device and a stream that belongs to it.
struct Exec {
  int device = 0;
  Stream stream = nullptr;
};

/// {device, compute_stream(device)}: the stream every Lockstep allocation is ordered on.
Exec on_device(int device);

/// C[M,N] = alpha · op(A) op(B) + beta · C, row-major, op(X) = Xᵀ when trans (the CPU
/// kernels::cpu::gemm contract): A is [M,K] (trans_a: [K,M]) with row stride lda, B is [K,N]
/// (trans_b: [N,K]) with row stride ldb, C is [M,N] with row stride ldc. When beta == 0, C is not
/// read. float → cublasSgemm (fp32 math, no TF32), double → cublasDgemm, through the
/// row-major = transposed column-major identity Cᵀ = op(B)ᵀ op(A)ᵀ. ValueError when a size or
/// stride exceeds INT32_MAX. One cuBLAS handle per device, bound to exec.stream per call.
template <class T>
void gemm(bool trans_a, bool trans_b, std::int64_t m, std::int64_t n, std::int64_t k, T alpha,
          const T* a, std::int64_t lda, const T* b, std::int64_t ldb, T beta, T* c,
          std::int64_t ldc, Exec exec);

/// out[i] = a[i] + b[i], i < n (out may alias a or b).
template <class T>
void add(const T* a, const T* b, T* out, std::int64_t n, Exec exec);

/// out[i] = a[i] · b[i], i < n (out may alias a or b).
template <class T>
void mul(const T* a, const T* b, T* out, std::int64_t n, Exec exec);

/// y[i] = max(x[i], 0) (torch.relu; NaN stays NaN), i < n.
template <class T>
void relu_forward(const T* x, T* y, std::int64_t n, Exec exec);

/// grad_in[i] = grad_out[i] if y[i] > 0 else 0, where y = relu(x) is the forward's result
/// (PyTorch's threshold_backward on the result), i < n.
template <class T>
void relu_backward(const T* grad_out, const T* y, T* grad_in, std::int64_t n, Exec exec);

/// out[j] = Σ_i grad[i, j] over rows i < rows, for j < cols: the bias gradient of Linear (the
/// reduction kernels::ref::sum_to does from [rows, cols] to [cols]). Each column is summed in row
/// order by one thread (deterministic, independent of the launch). rows == 0 writes zeros.
template <class T>
void bias_grad(const T* grad, T* out, std::int64_t rows, std::int64_t cols, Exec exec);

/// Fused softmax + cross-entropy forward over logits [n, c] and int64 targets [n]
/// (torch.nn.functional.cross_entropy, reduction='mean', ignore_index):
///   prob[i, :]    = softmax(logits[i, :])                          (kept for the backward)
///   loss_terms[i] = −log softmax(logits[i])[target[i]], 0 for ignored rows
///   *loss_sum     = Σ_i loss_terms[i]  (device double, summed in row order)
///   *count        = number of rows whose target is not ignore_index (device int64)
///   *invalid      = number of rows whose target is outside [0, c) and not ignore_index
///                   (device int64); such rows get loss term NaN, so the mean is NaN, never a
///                   silently wrong number. The op layer checks *invalid and throws IndexError.
/// The mean loss is *loss_sum / *count (PyTorch: NaN when count is 0). c must be ≥ 1 when n > 0.
template <class T>
void cross_entropy_forward(const T* logits, const std::int64_t* target, std::int64_t n,
                           std::int64_t c, std::int64_t ignore_index, T* prob, T* loss_terms,
                           double* loss_sum, std::int64_t* count, std::int64_t* invalid,
                           Exec exec);

/// Backward of the mean cross-entropy: grad_logits[i, j] = (prob[i, j] − [j == target[i]]) ·
/// g / max(count, 1), 0 on ignored rows (and on rows with an invalid target), where g =
/// *grad_output (a device scalar; nullptr means 1) and count the device int64 from the forward.
template <class T>
void cross_entropy_backward(const T* prob, const std::int64_t* target, std::int64_t n,
                            std::int64_t c, std::int64_t ignore_index, const std::int64_t* count,
                            const T* grad_output, T* grad_logits, Exec exec);

/// torch.optim.SGD's hyper-parameters (include/lockstep/optim/sgd.h).
struct SgdHyper {
  double lr = 0.01;
  double momentum = 0.0;
  double dampening = 0.0;
  double weight_decay = 0.0;
  bool nesterov = false;
};

/// Flags of one parameter (segment) of a flat buffer, as the CPU optimizer keeps them.
enum SegmentFlag : std::uint8_t {
  kHasGrad = 1,         ///< the parameter has a gradient this step (else it is skipped)
  kHasMomentumBuf = 2,  ///< its momentum buffer exists (set by sgd_step after the first update)
};

/// One fused SGD step over a flat parameter buffer of `numel` elements made of `segments`
/// parameters: segment s is [offsets[s], offsets[s+1]) (device int64, offsets[0] = 0,
/// offsets[segments] = numel, non-decreasing); flags[s] (device uint8) holds SegmentFlag bits.
/// Exactly what optim::SGD::step does per parameter (src/optim/sgd.cpp, PyTorch's formulas):
///   segment without kHasGrad: param and momentum_buf untouched, no state created;
///   otherwise d = g + weight_decay·p; if momentum ≠ 0: b = d when the buffer does not exist yet,
///   else momentum·b + (1 − dampening)·d; b is stored; d = d + momentum·b (nesterov) or b;
///   p = p − lr·d.
/// After the update (same stream) every segment with kHasGrad gets kHasMomentumBuf when
/// momentum ≠ 0. momentum_buf may be nullptr when momentum == 0. Hyper-parameters are not
/// re-validated here (optim::SGD's constructor does that).
template <class T>
void sgd_step(T* param, const T* grad, T* momentum_buf, std::int64_t numel,
              const std::int64_t* offsets, std::uint8_t* flags, std::int64_t segments,
              const SgdHyper& hyper, Exec exec);

}  // namespace lockstep::kernels::cuda
