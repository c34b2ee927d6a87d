// CUDA kernels of the reference workload (LOCKSTEP_CUDA=ON only), with a plain C++ interface:
// device pointers, sizes, and where to run (Exec: a device and a stream on it). They are the
// cuda:: family next to ref:: and cpu:: in src/ops/kernels.h, with the same semantics, and are
// tested against ref:: (tests/cuda/). The op layer reaches them through src/ops/cuda_ops.h.
//
// Conventions: every pointer is device memory of exec.device unless said otherwise; arrays are
// contiguous, row-major; sizes may be 0 (nothing is launched). Every function returns once the
// work is enqueued on exec.stream (asynchronous); a launch failure throws CudaError naming the
// device and the kernel, a cuBLAS failure CublasError; failures inside a kernel surface at the
// next synchronizing call (cuda::synchronize, copy_to_host). Each function makes exec.device
// current for its launches and restores the caller's device.
#pragma once

#include <cstddef>
#include <cstdint>

#include "lockstep/cuda/runtime.h"
#include "ops/device_ops.h"

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

/// C_i = op(A_i) op(B_i), i < batch, in ONE cuBLAS call (cublasSgemmStridedBatched /
/// cublasDgemmStridedBatched), the kernels::ref::gemm_batched contract of
/// src/ops/batched_kernels.h: contiguous row-major matrices, A_i = a + i·stride_a ([m, k], or
/// [k, m] when trans_a), B_i = b + i·stride_b ([k, n], or [n, k]), C_i = c + i·m·n; a stride of
/// 0 repeats one matrix (a broadcast operand); C not read (k == 0: zeros). ValueError when a
/// size exceeds INT32_MAX; CublasError naming the call and the shape.
template <class T>
void gemm_strided_batched(bool trans_a, bool trans_b, std::int64_t batch, std::int64_t m,
                          std::int64_t n, std::int64_t k, const T* a, std::int64_t stride_a,
                          const T* b, std::int64_t stride_b, T* c, Exec exec);

/// Linear's forward in ONE cuBLASLt call with a fused epilogue: y[r, j] = Σ_k x[r, k]·w[j, k] +
/// bias[j], and with `relu` then max(·, 0) (CUBLASLT_EPILOGUE_BIAS / CUBLASLT_EPILOGUE_RELU_BIAS;
/// cuBLASLt API reference, "cublasLtEpilogue_t"), for x [rows, in], w [out, in], bias [out],
/// y [rows, out], all contiguous; float (CUBLAS_COMPUTE_32F: no TF32) or double (COMPUTE_64F).
/// The unfused path it replaces is bias_rows + gemm (beta = 1) [+ relu_forward]: 2 or 3 launches.
/// Returns false, having enqueued nothing, where cuBLASLt offers no algorithm for the shape and
/// the pointers' alignments (the heuristic is asked with each pointer's real alignment, up to 256
/// bytes) or where the bias is not 16-byte aligned (an alignment cuBLASLt's bias epilogue is
/// known to need in practice); the caller then runs the unfused path. rows, out or in == 0:
/// false as well. The chosen algorithm is cached per (device, dtype, sizes, alignments, relu).
/// CublasError naming cublasLtMatmul and the shape when the call itself fails.
/// Not used by linear yet: bench_cuda measures it against the unfused path first (docs/cuda.md).
template <class T>
bool linear_epilogue(std::int64_t rows, std::int64_t out, std::int64_t in, const T* x, const T* w,
                     const T* bias, T* y, bool relu, Exec exec);

/// Autocast's bf16 GEMM (lockstep/ops/autocast.h), same row-major contract as gemm<float> with
/// alpha = 1: A and B (fp32) are rounded to bf16 into scratch blocks from the caching allocator
/// (round_to_bfloat16_cast), multiplied by cublasGemmEx with CUDA_R_16BF inputs, CUDA_R_32F
/// output and CUBLAS_COMPUTE_32F (fp32 accumulation), C = A·B + beta·C in fp32, then C is
/// rounded to bf16 in place: one rounding of the fp32 result. beta is 0 or 1 (1: C holds the
/// bf16-rounded bias, as linear presets it); C is contiguous (ldc == n; ValueError otherwise,
/// since it is rounded as one block). Errors as gemm's (CublasError naming the call).
void gemm_bf16(bool trans_a, bool trans_b, std::int64_t m, std::int64_t n, std::int64_t k,
               const float* a, std::int64_t lda, const float* b, std::int64_t ldb, float beta,
               float* c, std::int64_t ldc, Exec exec);

/// The GEMM of gemm_bf16 alone, on operands already in bf16 storage (raw 16-bit words, as
/// cast_to_bfloat16 writes them): cublasGemmEx with CUDA_R_16BF A and B, CUDA_R_32F C,
/// CUBLAS_COMPUTE_32F; C = A·B + beta·C in fp32, not rounded (k == 0: C zeroed for beta 0, left
/// as it is for beta 1, without cuBLAS). beta must be 0 or 1 (ValueError otherwise). For
/// gemm_bf16 and the benchmark.
void gemm_bf16_operands(bool trans_a, bool trans_b, std::int64_t m, std::int64_t n, std::int64_t k,
                        const std::uint16_t* a, std::int64_t lda, const std::uint16_t* b,
                        std::int64_t ldb, float beta, float* c, std::int64_t ldc, Exec exec);

/// y[i] = the bf16 bits of x[i] rounded as round_to_bfloat16, i < n.
void cast_to_bfloat16(const float* x, std::uint16_t* y, std::int64_t n, Exec exec);

/// y[i] = x[i] rounded to the nearest bf16 (ties to even; NaN → 0x7fc00000, ±inf kept), as
/// round_to_bfloat16 in lockstep/ops/autocast.h, bit for bit; i < n (y may alias x).
void round_to_bfloat16(const float* x, float* y, std::int64_t n, Exec exec);

/// out[i] = a[i] + b[i], i < n (out may alias a or b).
template <class T>
void add(const T* a, const T* b, T* out, std::int64_t n, Exec exec);

/// out[i] = a[i] · b[i], i < n (out may alias a or b).
template <class T>
void mul(const T* a, const T* b, T* out, std::int64_t n, Exec exec);

/// y[i] = 0 if x[i] < 0 else x[i] (torch.relu: NaN and −0.0 pass through, as the CPU op), i < n.
template <class T>
void relu_forward(const T* x, T* y, std::int64_t n, Exec exec);

/// grad_in[i] = 0 if y[i] <= 0 else grad_out[i], where y = relu(x) is the forward's result
/// (PyTorch's threshold_backward on the result; a NaN result passes the gradient), i < n.
template <class T>
void relu_backward(const T* grad_out, const T* y, T* grad_in, std::int64_t n, Exec exec);

/// The elementwise binary ops of the op layer (kernels::BinaryOp in src/ops/kernels.h).
enum class Binary : std::uint8_t { Add, Sub, Mul, Div };

/// out[i] = a[i·sa] op b[i·sb], i < n, with sa, sb ∈ {0, 1}: a stride 0 broadcasts a
/// one-element operand (a tensor op a scalar). Each operation rounds on its own (no FMA), as the
/// CPU's `a op b` in T. out may alias a or b.
template <class T>
void binary(Binary op, const T* a, std::int64_t sa, const T* b, std::int64_t sb, T* out,
            std::int64_t n, Exec exec);

/// y[i] = y[i] + alpha·x[i·sx] (sx ∈ {0, 1}); when alpha == 1, y[i] + x[i·sx] without the
/// multiply (Tensor::add_ on the CPU), i < n.
template <class T>
void axpy(T alpha, const T* x, std::int64_t sx, T* y, std::int64_t n, Exec exec);

/// x[i] = x[i]·value (Tensor::mul_), i < n.
template <class T>
void scale(T* x, T value, std::int64_t n, Exec exec);

/// x[i] = value, i < n (float, double, int64).
template <class T>
void fill(T* x, T value, std::int64_t n, Exec exec);

/// Elementwise unary ops: Neg: y = −x; Tanh: y = tanh(x) (CUDA's tanh, within 2 ulp of the
/// CPU's std::tanh).
enum class Unary : std::uint8_t { Neg, Tanh };
template <class T>
void unary(Unary op, const T* x, T* y, std::int64_t n, Exec exec);

/// grad_in[i] = grad_out[i]·(1 − y[i]·y[i]), where y = tanh(x) is the forward's result, i < n.
template <class T>
void tanh_backward(const T* grad_out, const T* y, T* grad_in, std::int64_t n, Exec exec);

/// y[r, j] = bias[j] for r < rows, j < cols: Linear's output preset to the bias before the GEMM
/// with beta = 1 (kernels::linear_by_gemm, as addmm).
template <class T>
void bias_rows(const T* bias, T* y, std::int64_t rows, std::int64_t cols, Exec exec);

/// *out = (Σ_{i<n} x[i], accumulated in double) / divisor, converted to T: torch.sum
/// (divisor 1) and torch.mean (divisor n; NaN when n == 0) of a whole tensor. One block, a fixed
/// order: the same bits on every run. Always launched (writes *out even when n == 0).
template <class T>
void sum_all(const T* x, std::int64_t n, double divisor, T* out, Exec exec);

/// out[j] = Σ_i grad[i, j] over rows i < rows, for j < cols: the bias gradient of Linear (the
/// reduction kernels::ref::sum_to does from [rows, cols] to [cols]). Each column is summed in row
/// order by one thread (deterministic, independent of the launch). rows == 0 writes zeros.
template <class T>
void bias_grad(const T* grad, T* out, std::int64_t rows, std::int64_t cols, Exec exec);

/// The fixed pairwise tree of deterministic mode over the rows of base [rows, width] (row-major,
/// contiguous), per column: column j's total lands in base[j] (row 0), rows 1.. hold partial sums
/// afterwards — bit for bit what the CPU's parallel::detail::tree_sum_columns leaves (both walk
/// parallel::detail::for_each_tree_pair, include/lockstep/ops/detail/tree_sum.h; each addition rounds once,
/// without FMA). One thread per column, no atomics: the same bits on every run and launch shape.
/// Nothing is launched when rows ≤ 1 or width == 0.
template <class T>
void tree_sum_rows(T* base, std::int64_t rows, std::int64_t width, Exec exec);

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
/// Optional outputs (nullptr: not written), so no host round trip is needed:
///   *loss_out     = T(*loss_sum / *count) computed in double on the device (NaN when count is
///                   0): the same bits as the host's division of the same two numbers;
///   first_bad[0]  = the first row whose target is invalid (−1 when none), first_bad[1] = its
///                   target value (0 when none): what the CPU's IndexError names.
template <class T>
void cross_entropy_forward(const T* logits, const std::int64_t* target, std::int64_t n,
                           std::int64_t c, std::int64_t ignore_index, T* prob, T* loss_terms,
                           double* loss_sum, std::int64_t* count, std::int64_t* invalid, Exec exec,
                           T* loss_out = nullptr, std::int64_t* first_bad = nullptr);

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

/// torch.optim.Adam / AdamW hyper-parameters of one step (include/lockstep/optim/adam.h); step
/// is the 1-based step count after this update (per parameter; the flat step takes it from each
/// segment instead).
struct AdamHyper {
  double lr = 0.001;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.0;
  double step = 1;
  bool decoupled = false;  ///< AdamW: p ← p·(1 − lr·weight_decay) instead of g ← g + wd·p
};

// The optimizer kernels apply the per-element formulas of include/lockstep/ops/detail/update_rules.h (the same
// functions the CPU loops call: rules::sgd_element, rules::adam_element), with the step's scalars
// computed on the host by rules::sgd_scalars / rules::adam_scalars, so the per-parameter and the
// flat kernels (and the CPU) make the same operations in the same order, without FMA. Hyper-
// parameters are not re-validated here (the optimizers' constructors do that).

/// One fused SGD update of one parameter of `numel` elements (optim::SGD::step per parameter,
/// PyTorch's formulas): d = g + wd·p; with momentum: b = d when `first` (the buffer does not
/// exist yet; its contents are ignored) else b·momentum + (1 − dampening)·d, stored, then
/// d = d + momentum·b (nesterov) or b; p = p − lr·d. momentum_buf may be nullptr when
/// momentum == 0 (ValueError otherwise). The caller applies the has-gradient rule.
template <class T>
void sgd_step(T* param, const T* grad, T* momentum_buf, std::int64_t numel, bool first,
              const SgdHyper& hyper, Exec exec);

/// One fused Adam (or AdamW) update of one parameter of `numel` elements (optim::Adam::step per
/// parameter, PyTorch's formulas): with bc1 = 1 − beta1^step, bc2 = 1 − beta2^step (host,
/// double),
///   decoupled: p = p·(1 − lr·wd); else if wd ≠ 0: g = g + wd·p;
///   m = m·beta1 + (1 − beta1)·g;  v = v·beta2 + (1 − beta2)·g·g;
///   p = p − (lr / bc1)·(m / (sqrt(v) / sqrt(bc2) + eps)).
/// The caller applies the has-gradient rule (a parameter without a gradient is not passed).
template <class T>
void adam_step(T* param, const T* grad, T* exp_avg, T* exp_avg_sq, std::int64_t numel,
               const AdamHyper& hyper, Exec exec);

// ---- one launch over a flat parameter buffer ---------------------------------------------------

/// Bits of FlatSegment::flags: what the per-parameter step would find missing.
enum FlatFlag : std::uint32_t {
  kFlatFirstStep = 1,      ///< SGD: no momentum buffer yet (b = d; the buffer is not read)
  kFlatFreshExpAvg = 2,    ///< Adam: exp_avg not created yet (read as 0)
  kFlatFreshExpAvgSq = 4,  ///< Adam: exp_avg_sq not created yet (read as 0)
};

/// Elements one block of a flat launch updates (one segment's chunk).
inline constexpr std::int64_t kFlatChunk = 4096;

/// One parameter (segment) of a flat launch, in a device-memory table. Element k < numel of the
/// segment is param[param_offset + k], grad[grad_offset + k] and state[state_offset + k]; the
/// bases are the launch's pointers. Only parameters that have a gradient and elements are in the
/// table (the has-gradient rule is applied by whoever builds it).
template <class T>
struct FlatSegment {
  std::int64_t param_offset = 0;
  std::int64_t grad_offset = 0;
  std::int64_t state_offset = 0;
  std::int64_t numel = 0;
  /// Blocks of the segments before this one (assign_flat_blocks): block b of the launch updates
  /// chunk b − first_block of the last segment whose first_block ≤ b.
  std::int64_t first_block = 0;
  T step_size = 0;          ///< Adam: rules::adam_scalars<T>(…, step).step_size of this parameter
  T bc2_sqrt = 0;           ///< Adam: rules::adam_scalars<T>(…, step).bc2_sqrt of this parameter
  std::uint32_t flags = 0;  ///< FlatFlag bits
};

/// Sets first_block of each segment (in order, ceil(numel / kFlatChunk) blocks each) and returns
/// the launch's block count. ValueError for a negative numel or more than 2^31 − 1 blocks.
template <class T>
std::int64_t assign_flat_blocks(FlatSegment<T>* segments, std::int64_t count);

/// One launch updating every segment of `segments` (device memory, `count` entries, first_block
/// set by assign_flat_blocks, `blocks` = its result) exactly as sgd_step does each parameter
/// (first = kFlatFirstStep), bit for bit. momentum_buf (the flat state) may be nullptr when
/// momentum == 0 (ValueError otherwise). Nothing is launched when blocks == 0.
/// device_scalars (CUDA graphs): nullptr, or device memory holding the step's
/// optim::rules::SgdScalars<T> (include/lockstep/ops/detail/update_rules.h), which the kernel then reads instead of
/// computing them from `hyper`, so a captured launch uses the values written there before each
/// replay (the learning rate may change between replays).
template <class T>
void sgd_flat_step(T* param, const T* grad, T* momentum_buf, const FlatSegment<T>* segments,
                   std::int64_t count, std::int64_t blocks, const SgdHyper& hyper, Exec exec,
                   const void* device_scalars = nullptr);

/// One launch updating every segment exactly as adam_step does each parameter, bit for bit, with
/// each segment's own step_size and bc2_sqrt (its own step count; hyper.step is not used) and
/// exp_avg / exp_avg_sq read as 0 where kFlatFreshExpAvg / kFlatFreshExpAvgSq (as the zeros the
/// per-parameter step creates). Nothing is launched when blocks == 0.
/// device_scalars: as for sgd_flat_step, an optim::rules::AdamScalars<T> in device memory (its
/// step_size and bc2_sqrt are still each segment's own).
template <class T>
void adam_flat_step(T* param, const T* grad, T* exp_avg, T* exp_avg_sq,
                    const FlatSegment<T>* segments, std::int64_t count, std::int64_t blocks,
                    const AdamHyper& hyper, Exec exec, const void* device_scalars = nullptr);

// ---- the ops beyond the reference workload (docs/cuda.md) --------------------------------------
// Their per-element and per-line bodies are src/ops/device_ops.h, shared with the host tests;
// every kernel is deterministic (no atomics; each output written by one thread or one block in
// a fixed order) and indexes with 64-bit integers.

using shared::ReducePlan;
using shared::StridedIter;

/// Elementwise math: y[i] = f(x[i]), i < n, f the CPU op's formula (device_ops.h): Exp, Log,
/// Sqrt (exact), Pow (x^param in double), Sigmoid, Gelu (erf form, in double), GeluTanh (the tanh
/// approximation, in double).
enum class Math : std::uint8_t { Exp, Log, Sqrt, Pow, Sigmoid, Gelu, GeluTanh };
template <class T>
void math_forward(Math op, const T* x, T* y, std::int64_t n, double param, Exec exec);

/// Their backward: gi[i] = df(g[i], saved[i]) where saved is the forward's result y (Sqrt,
/// Sigmoid) or its input x (Pow, Gelu, GeluTanh); Exp and Log compose from mul / div on the device.
template <class T>
void math_backward(Math op, const T* g, const T* saved, T* gi, std::int64_t n, double param,
                   Exec exec);

/// out[i] = compare_one(op, a[off0(i)], b[off1(i)]) (int64 0/1) for i < n, the iteration space
/// of `it` (broadcast_iter): torch.eq/ne/lt/le/gt/ge, as the CPU's loop over the same plan.
/// float, double, int64.
template <class T>
void compare_strided(shared::Compare op, const T* a, const T* b, std::int64_t* out,
                     const StridedIter& it, std::int64_t n, Exec exec);

/// out[i] = a[off0(i)] op b[off1(i)] for i < n = the iteration space's size (broadcasting; `it`
/// from broadcast_iter); float, double and int64 (Add, Sub, Mul; Div for floats). Each
/// operation rounds on its own. out must not alias a or b.
template <class T>
void binary_strided(Binary op, const T* a, const T* b, T* out, const StridedIter& it,
                    std::int64_t n, Exec exec);

/// out[o] = Σ in over plan's reduced positions of output o (reduce_sum_one: double accumulation
/// for floats, int64 for int64, in increasing input index), o < plan.out_count, then divided by
/// nothing (sum). One thread per output; a plan with reduced_count == 0 writes zeros.
template <class T>
void sum_reduce(const T* in, T* out, const ReducePlan& plan, Exec exec);

/// softmax (log = false) or log_softmax of each line of x viewed as [outer, r, inner] along r,
/// into y (shared::softmax_line; one thread per line).
template <class T>
void softmax_lines(const T* x, T* y, std::int64_t outer, std::int64_t r, std::int64_t inner,
                   bool log, Exec exec);

/// max along r of x viewed as [outer, r, inner] (r ≥ 1): values [outer, inner] and int64 indices
/// (shared::max_line: the CPU's first-index and NaN rules). values may be nullptr.
template <class T>
void max_dim(const T* x, T* values, std::int64_t* indices, std::int64_t outer, std::int64_t r,
             std::int64_t inner, Exec exec);

/// The backward of max along r: gi[(o·r + indices[o, i])·inner + i] = g[o, i]; gi zeroed by the
/// caller (each output position written by one thread).
template <class T>
void max_dim_backward(const T* g, const std::int64_t* indices, T* gi, std::int64_t outer,
                      std::int64_t r, std::int64_t inner, Exec exec);

/// Whole-tensor max (rule shared::kRuleMax) or argmax (kRuleArgmax) of x[0, n), n ≥ 1: one
/// block, shared::MaxAcc merged in a fixed tree. *index ← the index, *value ← x[index] (value
/// may be nullptr).
template <class T>
void max_all(const T* x, std::int64_t n, int rule, T* value, std::int64_t* index, Exec exec);

/// The whole-tensor max backward (src/ops/reduce.cpp): with ties = #{i : x[i] == *best} (in
/// double), gi[i] = T(*g / max(ties, 1)) where x[i] == *best, else 0. One block.
template <class T>
void max_all_backward(const T* x, std::int64_t n, const T* best, const T* g, T* gi, Exec exec);

/// dst[dst_base + off0(i)] = src[src_base + off1(i)] for i < n, elements of `elem_size` bytes
/// (4 or 8: float, double, int64) — t, narrow, cat and their backward.
void strided_copy(std::size_t elem_size, void* dst, std::int64_t dst_base, const void* src,
                  std::int64_t src_base, const StridedIter& it, std::int64_t n, Exec exec);

/// out[(o·k + i)·inner + j] = in[(o·r + index[i])·inner + j] (index_select; indices already
/// checked to lie in [0, r)), elements of elem_size bytes (4 or 8).
void index_select(std::size_t elem_size, const void* in, const std::int64_t* index, void* out,
                  std::int64_t outer, std::int64_t r, std::int64_t k, std::int64_t inner,
                  Exec exec);

/// The backward of index_select: gi[(o·r + q)·inner + j] = Σ_{i : index[i] == q} g[(o·k + i)·
/// inner + j] summed in T in increasing i from +0 (the CPU's order), one thread per element of
/// gi (all of gi is written).
template <class T>
void index_select_backward(const T* g, const std::int64_t* index, T* gi, std::int64_t outer,
                           std::int64_t r, std::int64_t k, std::int64_t inner, Exec exec);

/// Keyed dropout mask (lockstep::dropout under a DropoutKeyGuard) of a [rows, cols] view:
/// mask[row·cols + j] = 0 where word (j % 4) of Philox(counter (sample_offset + row, step, call,
/// j / 4), key seed) · 2^-32 < p, else scale — bit for bit the CPU's mask (include/lockstep/core/detail/philox.h).
template <class T>
void dropout_mask_keyed(T* mask, std::int64_t rows, std::int64_t cols, std::uint64_t seed,
                        std::uint64_t step, std::uint32_t call, std::int64_t sample_offset,
                        double p, T scale, Exec exec);

/// Sequential dropout mask: mask[i] = 0 where the Generator's next_double at stream position
/// offset + 2i (of `seed`) is < p, else scale — the CPU's per-element loop over the stream.
template <class T>
void dropout_mask_stream(T* mask, std::int64_t n, std::uint64_t seed, std::uint64_t offset,
                         double p, T scale, Exec exec);

}  // namespace lockstep::kernels::cuda
