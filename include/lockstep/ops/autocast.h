// Autocast: bf16 compute with fp32 master weights (torch.autocast(device_type,
// dtype=torch.bfloat16)), without a bfloat16 tensor dtype.
//
// Source of the semantics: PyTorch's "Automatic Mixed Precision package - torch.amp" docs,
// sections "CPU Ops that can autocast to bfloat16" / "CUDA Ops that can autocast to float16"
// (the lower-precision list: linear, matmul, mm, addmm, ...) and "... that can autocast to
// float32" (softmax, log_softmax, cross_entropy, mse_loss, ...). Inside an autocast region
// PyTorch casts the float32 inputs of a lower-precision op to bfloat16, runs the op in bfloat16
// (a GEMM multiplies bf16 values and accumulates in fp32) and returns a bfloat16 tensor; the
// fp32 parameters stay fp32, and the cast's backward widens the bf16 gradient back to fp32.
//
// Lockstep keeps every value in a float32 tensor and rounds instead of casting. Under an
// enabled AutocastGuard, for float32 inputs only:
//   * linear(x, W, b) and matmul(a, b) — the ops of autocast's lower-precision list that
//     Lockstep has — round their operands (x, W, b; a, b) to bf16, multiply them with products
//     accumulated in fp32 (the bias added to the fp32 sum), and round the result to bf16 once.
//   * Their backward rounds the incoming gradient g to bf16 (the gradient of a bf16 output is
//     bf16 in PyTorch), computes each gradient GEMM with bf16-rounded operands and fp32
//     accumulation (the bias gradient: the fp32 column sum of the rounded g), and rounds each
//     result to bf16 before it reaches .grad (the cast node's backward widens it exactly).
//     Whether an op's backward is bf16 is decided when the forward runs (recorded in the graph),
//     so backward() may be called outside the region, as PyTorch recommends.
//   * Everything else runs as without autocast, in fp32: cross_entropy, mse_loss, softmax,
//     log_softmax and the reductions (autocast's float32 list), and the ops on neither list
//     (relu, tanh, add, ...). PyTorch runs the latter in the dtype of their input (bf16 after a
//     linear); for relu (and other exact ops) the values are identical, for tanh, sigmoid and
//     gelu PyTorch rounds their result to bf16 once more and Lockstep does not.
//   * float64 tensors are untouched (PyTorch's autocast only casts float32 inputs).
// Parameters, .grad and optimizer state stay float32: the fp32 "master" copy.
//
// CPU: an emulation (bf16-rounded copies of the operands, the fp32 OpenBLAS/own GEMM, the result
// rounded): a product of two bf16 values is exact in fp32, so this equals a bf16 GEMM with fp32
// accumulation up to the order of summation; it adds rounding passes and copies to the same fp32
// GEMM, so it costs more than fp32, never less (not benchmarked). CUDA: the operands are cast to
// bf16 in scratch memory and multiplied by cublasGemmEx (CUDA_R_16BF inputs, CUBLAS_COMPUTE_32F,
// fp32 output), the output rounded once.
//
// Note on PyTorch 1.13's CPU bf16 GEMM: without AVX-512 (no oneDNN bf16 path) only the x·Wᵀ
// layout of linear's forward accumulates in fp32; its other layouts (linear's backward, matmul)
// round every product and every partial sum to bf16 (checked against a sequential emulation).
// Lockstep implements the fp32-accumulation contract above (what cuBLAS does on PyTorch's CUDA
// path) on every device; tests/data/bf16/autocast.json records both PyTorch 1.13 CPU autocast
// and an exact emulation of this contract.
#pragma once

#include <bit>
#include <cstdint>

namespace lockstep {

/// Whether the calling thread is inside an enabled autocast region (torch.is_autocast_enabled;
/// false by default). Thread-local: DataParallel carries the caller's setting to its replica
/// worker threads for each call, as it does for grad mode.
bool is_autocast_enabled();
/// Sets the calling thread's autocast mode (torch.set_autocast_enabled). Prefer AutocastGuard.
void set_autocast_enabled(bool enabled);

/// RAII autocast region with dtype bfloat16 (`with torch.autocast(device_type,
/// dtype=torch.bfloat16, enabled=enabled):`) on the calling thread: applies to every device;
/// restores the previous mode on destruction, so regions nest (an inner AutocastGuard(false)
/// turns it off for its scope, as a nested `torch.autocast(..., enabled=False)` does).
class AutocastGuard {
 public:
  explicit AutocastGuard(bool enabled = true) : prev_(is_autocast_enabled()) {
    set_autocast_enabled(enabled);
  }
  ~AutocastGuard() { set_autocast_enabled(prev_); }
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;

 private:
  bool prev_;
};

/// x rounded to the nearest bfloat16 value (ties to even), returned as a float:
/// `torch.tensor(x).bfloat16().float()` (c10::BFloat16's round_to_nearest_even). NaN stays NaN
/// (any NaN becomes the quiet NaN 0x7fc00000, c10::BFloat16's scalar conversion; PyTorch's
/// vectorised CPU conversion gives 0xffff0000 instead: only NaN-ness is specified), ±inf stays
/// ±inf, values beyond the largest bf16 (≈ 3.3895e38) round to ±inf, subnormals round as any other
/// value (bf16 has float's exponent range), signs of zero kept.
inline float round_to_bfloat16(float x) {
  const auto bits = std::bit_cast<std::uint32_t>(x);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return std::bit_cast<float>(0x7fc00000u);  // NaN
  const std::uint32_t rounded = bits + 0x7fffu + ((bits >> 16) & 1u);
  return std::bit_cast<float>(rounded & 0xffff0000u);
}

}  // namespace lockstep
