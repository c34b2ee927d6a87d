// Row-major GEMM on cuBLAS (see kernels.h): fp32/fp64, autocast's bf16 GEMM on cublasGemmEx,
// linear's forward with a fused bias (+ ReLU) epilogue on cuBLASLt; and on_device().
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <array>
#include <climits>
#include <cstdint>
#include <map>
#include <mutex>
#include <tuple>
#include <type_traits>

#include "lockstep/cuda/detail/check.h"
#include "lockstep/cuda/allocator.h"
#include "ops/cuda/kernels.h"

namespace lockstep::kernels::cuda {

namespace {

using ::lockstep::cuda::kMaxDevices;

// One handle of a library per device, created on first use by `create(device)`; never destroyed
// (a handle destroyed during static destruction may outlive the CUDA context).
template <class Handle, class Create>
Handle handle_of(int device, const char* library, Create create) {
  static std::mutex mutex;
  static std::array<Handle, kMaxDevices> handles{};
  if (device < 0 || device >= kMaxDevices)
    throw CudaError(std::string(library) + ": " + ::lockstep::cuda::detail::device_name(device) +
                    " is outside the devices Lockstep supports");
  std::lock_guard<std::mutex> lock(mutex);
  if (!handles[device]) handles[device] = create(device);
  return handles[device];
}

cublasHandle_t handle_for(int device) {
  return handle_of<cublasHandle_t>(device, "cuBLAS", [](int d) {
    cublasHandle_t h = nullptr;
    LOCKSTEP_CUBLAS_CHECK(cublasCreate(&h), d, "cublasCreate");
    // fp32 stays fp32: no TF32 tensor-core rounding unless asked for later (bf16 is issue 6.4).
    LOCKSTEP_CUBLAS_CHECK(cublasSetMathMode(h, CUBLAS_DEFAULT_MATH), d, "cublasSetMathMode");
    return h;
  });
}

int to_int(std::int64_t v, const char* what) {
  if (v < 0 || v > INT_MAX)
    throw ValueError(std::string("cuda gemm: ") + what + " = " + std::to_string(v) +
                     " is outside [0, INT32_MAX]");
  return static_cast<int>(v);
}

cublasStatus_t scal(cublasHandle_t h, int n, const float* alpha, float* x) {
  return cublasSscal(h, n, alpha, x, 1);
}
cublasStatus_t scal(cublasHandle_t h, int n, const double* alpha, double* x) {
  return cublasDscal(h, n, alpha, x, 1);
}

cublasStatus_t call(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                    int k, const float* alpha, const float* a, int lda, const float* b, int ldb,
                    const float* beta, float* c, int ldc) {
  return cublasSgemm(h, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}
cublasStatus_t call(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                    int k, const double* alpha, const double* a, int lda, const double* b, int ldb,
                    const double* beta, double* c, int ldc) {
  return cublasDgemm(h, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

cublasStatus_t call_batched(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m,
                            int n, int k, const float* alpha, const float* a, int lda,
                            long long sa, const float* b, int ldb, long long sb, const float* beta,
                            float* c, int ldc, long long sc, int count) {
  return cublasSgemmStridedBatched(h, ta, tb, m, n, k, alpha, a, lda, sa, b, ldb, sb, beta, c, ldc,
                                   sc, count);
}
cublasStatus_t call_batched(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m,
                            int n, int k, const double* alpha, const double* a, int lda,
                            long long sa, const double* b, int ldb, long long sb,
                            const double* beta, double* c, int ldc, long long sc, int count) {
  return cublasDgemmStridedBatched(h, ta, tb, m, n, k, alpha, a, lda, sa, b, ldb, sb, beta, c, ldc,
                                   sc, count);
}

// The handle of exec.device bound to exec.stream, pointer mode host (alpha/beta are host
// values). The caller holds a DeviceGuard for exec.device.
cublasHandle_t bound_handle(Exec exec) {
  cublasHandle_t h = handle_for(exec.device);
  LOCKSTEP_CUBLAS_CHECK(cublasSetStream(h, exec.stream), exec.device, "cublasSetStream");
  LOCKSTEP_CUBLAS_CHECK(cublasSetPointerMode(h, CUBLAS_POINTER_MODE_HOST), exec.device,
                        "cublasSetPointerMode");
  return h;
}

// cuBLAS's int sizes of a row-major GEMM; cuBLAS checks that every leading dimension is at
// least 1, even one it never reads.
struct IntDims {
  int m, n, k, lda, ldb, ldc;
};
IntDims int_dims(std::int64_t m, std::int64_t n, std::int64_t k, std::int64_t lda, std::int64_t ldb,
                 std::int64_t ldc) {
  return {to_int(m, "m"),
          to_int(n, "n"),
          to_int(k, "k"),
          std::max(1, to_int(lda, "lda")),
          std::max(1, to_int(ldb, "ldb")),
          to_int(ldc, "ldc")};
}

// C[m, n] (row stride ldc) = 0 on exec.stream: a GEMM with k == 0 and beta == 0, which does not
// reach cuBLAS (it does not document k == 0; PyTorch does not call it with k == 0 either).
template <class T>
void zero_rows(T* c, const IntDims& d, Exec exec, const char* what) {
  LOCKSTEP_CUDA_CHECK(cudaMemset2DAsync(c, sizeof(T) * static_cast<std::size_t>(d.ldc), 0,
                                        sizeof(T) * static_cast<std::size_t>(d.n),
                                        static_cast<std::size_t>(d.m), exec.stream),
                      exec.device, std::string("cudaMemset2DAsync (") + what + " with k = 0)");
}

std::string shape_text(std::int64_t m, std::int64_t n, std::int64_t k, bool trans_a, bool trans_b) {
  return "row-major m=" + std::to_string(m) + " n=" + std::to_string(n) +
         " k=" + std::to_string(k) + (trans_a ? " Aᵀ" : "") + (trans_b ? " Bᵀ" : "");
}

}  // namespace

Exec on_device(int device) { return Exec{device, ::lockstep::cuda::compute_stream(device)}; }

template <class T>
void gemm(bool trans_a, bool trans_b, std::int64_t m, std::int64_t n, std::int64_t k, T alpha,
          const T* a, std::int64_t lda, const T* b, std::int64_t ldb, T beta, T* c,
          std::int64_t ldc, Exec exec) {
  if (m == 0 || n == 0) return;
  ::lockstep::cuda::DeviceGuard guard(exec.device);
  cublasHandle_t h = bound_handle(exec);
  // Row-major C[M,N] is column-major Cᵀ[N,M] with the same leading dimension, so
  // Cᵀ = op(B)ᵀ · op(A)ᵀ: cuBLAS gets (B, A) swapped, N and M swapped, the same transposes.
  const IntDims d = int_dims(m, n, k, lda, ldb, ldc);
  if (k == 0) {
    // C = beta·C, done here; with beta == 0 C must become zeros whatever it held.
    if (beta == T(0)) {
      zero_rows(c, d, exec, "gemm");
    } else if (beta != T(1)) {
      for (int i = 0; i < d.m; ++i)
        LOCKSTEP_CUBLAS_CHECK(scal(h, d.n, &beta, c + static_cast<std::int64_t>(i) * d.ldc),
                              exec.device, "cublas scal (gemm with k = 0)");
    }
    return;
  }
  const cublasOperation_t op_b = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_a = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  LOCKSTEP_CUBLAS_CHECK(
      call(h, op_b, op_a, d.n, d.m, d.k, &alpha, b, d.ldb, a, d.lda, &beta, c, d.ldc), exec.device,
      std::string(sizeof(T) == 4 ? "cublasSgemm" : "cublasDgemm") + " (" +
          shape_text(m, n, k, trans_a, trans_b) + ")");
}

template <class T>
void gemm_strided_batched(bool trans_a, bool trans_b, std::int64_t batch, std::int64_t m,
                          std::int64_t n, std::int64_t k, const T* a, std::int64_t stride_a,
                          const T* b, std::int64_t stride_b, T* c, Exec exec) {
  if (batch == 0 || m == 0 || n == 0) return;
  ::lockstep::cuda::DeviceGuard guard(exec.device);
  // Contiguous matrices: the row strides of op(A) [m, k] / A [k, m], op(B) and C.
  const IntDims d = int_dims(m, n, k, trans_a ? m : k, trans_b ? k : n, n);
  const int count = to_int(batch, "batch");
  if (k == 0) {  // every C_i = 0: one block of batch·m rows
    zero_rows(c, int_dims(batch * m, n, 0, 1, 1, n), exec, "gemm_strided_batched");
    return;
  }
  cublasHandle_t h = bound_handle(exec);
  const T alpha = T(1), beta = T(0);
  // The row-major = transposed column-major swap of gemm, with each operand's batch stride.
  LOCKSTEP_CUBLAS_CHECK(
      call_batched(h, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, trans_a ? CUBLAS_OP_T : CUBLAS_OP_N,
                   d.n, d.m, d.k, &alpha, b, d.ldb, stride_b, a, d.lda, stride_a, &beta, c, d.ldc,
                   static_cast<long long>(m * n), count),
      exec.device,
      std::string(sizeof(T) == 4 ? "cublasSgemmStridedBatched" : "cublasDgemmStridedBatched") +
          " (batch " + std::to_string(batch) + ", " + shape_text(m, n, k, trans_a, trans_b) + ")");
}

void gemm_bf16_operands(bool trans_a, bool trans_b, std::int64_t m, std::int64_t n, std::int64_t k,
                        const std::uint16_t* a, std::int64_t lda, const std::uint16_t* b,
                        std::int64_t ldb, float beta, float* c, std::int64_t ldc, Exec exec) {
  if (m == 0 || n == 0) return;
  if (beta != 0.0f && beta != 1.0f)
    throw ValueError("cuda gemm_bf16: beta = " + std::to_string(beta) + " (0 or 1 expected)");
  ::lockstep::cuda::DeviceGuard guard(exec.device);
  cublasHandle_t h = bound_handle(exec);
  // The same row-major = transposed column-major swap as gemm above.
  const IntDims d = int_dims(m, n, k, lda, ldb, ldc);
  if (k == 0) {
    // C = beta·C without cuBLAS: zeros for beta 0, unchanged for beta 1.
    if (beta == 0.0f) zero_rows(c, d, exec, "gemm_bf16");
    return;
  }
  const float alpha = 1.0f;
  LOCKSTEP_CUBLAS_CHECK(
      cublasGemmEx(h, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, d.n,
                   d.m, d.k, &alpha, b, CUDA_R_16BF, d.ldb, a, CUDA_R_16BF, d.lda, &beta, c,
                   CUDA_R_32F, d.ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
      exec.device,
      "cublasGemmEx (bf16 inputs, fp32 accumulation; " + shape_text(m, n, k, trans_a, trans_b) +
          ")");
}

void gemm_bf16(bool trans_a, bool trans_b, std::int64_t m, std::int64_t n, std::int64_t k,
               const float* a, std::int64_t lda, const float* b, std::int64_t ldb, float beta,
               float* c, std::int64_t ldc, Exec exec) {
  if (m == 0 || n == 0) return;
  // C is rounded as one block of m·n elements, so its rows must be back to back.
  if (ldc != n)
    throw ValueError("cuda gemm_bf16: ldc = " + std::to_string(ldc) +
                     " for n = " + std::to_string(n) + " (a contiguous C expected)");
  // A is [M,K] (trans_a: [K,M]) and B [K,N] (trans_b: [N,K]), each with its row stride: the
  // elements from the first to the last one read (the last row is only as long as a row).
  auto span = [](std::int64_t rows, std::int64_t cols, std::int64_t ld) {
    return rows == 0 || cols == 0 ? std::int64_t{0} : (rows - 1) * ld + cols;
  };
  const std::int64_t a_elems = trans_a ? span(k, m, lda) : span(m, k, lda);
  const std::int64_t b_elems = trans_b ? span(n, k, ldb) : span(k, n, ldb);
  // Scratch from the caching allocator, ordered on the compute stream: given back when this
  // returns, reusable by the next op on the same stream once the GEMM has read it.
  ::lockstep::cuda::DeviceBuffer a16(sizeof(std::uint16_t) * static_cast<std::size_t>(a_elems),
                                     exec.device);
  ::lockstep::cuda::DeviceBuffer b16(sizeof(std::uint16_t) * static_cast<std::size_t>(b_elems),
                                     exec.device);
  cast_to_bfloat16(a, a16.data_as<std::uint16_t>(), a_elems, exec);
  cast_to_bfloat16(b, b16.data_as<std::uint16_t>(), b_elems, exec);
  gemm_bf16_operands(trans_a, trans_b, m, n, k, a16.data_as<std::uint16_t>(), lda,
                     b16.data_as<std::uint16_t>(), ldb, beta, c, ldc, exec);
  round_to_bfloat16(c, c, m * n, exec);
}

namespace {

cublasLtHandle_t lt_handle_for(int device) {
  return handle_of<cublasLtHandle_t>(device, "cuBLASLt", [](int d) {
    cublasLtHandle_t h = nullptr;
    LOCKSTEP_CUBLAS_CHECK(cublasLtCreate(&h), d, "cublasLtCreate");
    return h;
  });
}

// The largest power of two up to 256 dividing the address (cuBLASLt's alignment preferences).
std::uint32_t alignment_of(const void* p) {
  const auto a = reinterpret_cast<std::uintptr_t>(p);
  std::uint32_t al = 256;
  while (al > 1 && a % al != 0) al /= 2;
  return al;
}

// The descriptors of one call, destroyed on every path out.
struct LtDescriptors {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulPreference_t pref = nullptr;
  LtDescriptors() = default;
  LtDescriptors(const LtDescriptors&) = delete;
  LtDescriptors& operator=(const LtDescriptors&) = delete;
  ~LtDescriptors() {
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    if (c) cublasLtMatrixLayoutDestroy(c);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (op) cublasLtMatmulDescDestroy(op);
  }
};

// The algorithm cuBLASLt's heuristic chose for one key, or none (found == false).
struct LtChoice {
  bool found = false;
  cublasLtMatmulAlgo_t algo{};
  std::size_t workspace = 0;
};
using LtKey = std::tuple<int, int, std::int64_t, std::int64_t, std::int64_t, std::uint32_t,
                         std::uint32_t, std::uint32_t, std::uint32_t, bool>;

// Workspace cuBLASLt may use (NVIDIA recommends 32 MiB on Hopper); taken from the caching
// allocator per call, ordered on the compute stream like every other scratch block.
constexpr std::uint64_t kLtWorkspaceBytes = 32ull << 20;

}  // namespace

template <class T>
bool linear_epilogue(std::int64_t rows, std::int64_t out, std::int64_t in, const T* x, const T* w,
                     const T* bias, T* y, bool relu, Exec exec) {
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>);
  if (rows <= 0 || out <= 0 || in <= 0 || bias == nullptr) return false;
  if (alignment_of(bias) < 16) return false;
  ::lockstep::cuda::DeviceGuard guard(exec.device);
  // Row-major y[rows, out] is column-major yᵀ[out, rows] (ld out) = W · xᵀ with W stored as
  // column-major [in, out] (ld in, op T) and x as column-major [in, rows] (ld in, op N): m = out,
  // n = rows, k = in; the bias (length m) runs along yᵀ's rows, broadcast over its columns.
  const IntDims d = int_dims(rows, out, in, in, in, out);
  constexpr bool is_float = std::is_same_v<T, float>;
  const cudaDataType_t type = is_float ? CUDA_R_32F : CUDA_R_64F;
  const cublasComputeType_t compute = is_float ? CUBLAS_COMPUTE_32F : CUBLAS_COMPUTE_64F;
  const std::string what = std::string(relu ? "RELU_BIAS" : "BIAS") + " epilogue, " +
                           (is_float ? "float" : "double") + ", " +
                           shape_text(rows, out, in, false, true);
  const int dev = exec.device;
  LtDescriptors ds;
  LOCKSTEP_CUBLAS_CHECK(cublasLtMatmulDescCreate(&ds.op, compute, type), dev,
                        "cublasLtMatmulDescCreate (" + what + ")");
  const cublasOperation_t op_t = CUBLAS_OP_T, op_n = CUBLAS_OP_N;
  const cublasLtEpilogue_t epilogue = relu ? CUBLASLT_EPILOGUE_RELU_BIAS : CUBLASLT_EPILOGUE_BIAS;
  const void* bias_ptr = bias;
  auto set = [&](cublasLtMatmulDescAttributes_t attr, const void* v, std::size_t size) {
    LOCKSTEP_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(ds.op, attr, v, size), dev,
                          "cublasLtMatmulDescSetAttribute (" + what + ")");
  };
  set(CUBLASLT_MATMUL_DESC_TRANSA, &op_t, sizeof op_t);
  set(CUBLASLT_MATMUL_DESC_TRANSB, &op_n, sizeof op_n);
  set(CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof epilogue);
  set(CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias_ptr, sizeof bias_ptr);
  LOCKSTEP_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&ds.a, type, d.k, d.n, d.k), dev,
                        "cublasLtMatrixLayoutCreate (W, " + what + ")");
  LOCKSTEP_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&ds.b, type, d.k, d.m, d.k), dev,
                        "cublasLtMatrixLayoutCreate (x, " + what + ")");
  LOCKSTEP_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&ds.c, type, d.n, d.m, d.n), dev,
                        "cublasLtMatrixLayoutCreate (y, " + what + ")");
  cublasLtHandle_t lt = lt_handle_for(dev);
  const std::uint32_t al_w = alignment_of(w), al_x = alignment_of(x), al_y = alignment_of(y),
                      al_b = alignment_of(bias);
  LtChoice choice;
  {
    static std::mutex mutex;
    static std::map<LtKey, LtChoice> cache;
    const LtKey key{dev, is_float ? 4 : 8, rows, out, in, al_w, al_x, al_y, al_b, relu};
    std::lock_guard<std::mutex> lock(mutex);
    auto it = cache.find(key);
    if (it == cache.end()) {
      LOCKSTEP_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&ds.pref), dev,
                            "cublasLtMatmulPreferenceCreate (" + what + ")");
      auto pref = [&](cublasLtMatmulPreferenceAttributes_t attr, const void* v, std::size_t size) {
        LOCKSTEP_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(ds.pref, attr, v, size), dev,
                              "cublasLtMatmulPreferenceSetAttribute (" + what + ")");
      };
      pref(CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &kLtWorkspaceBytes, sizeof kLtWorkspaceBytes);
      pref(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al_w, sizeof al_w);
      pref(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al_x, sizeof al_x);
      pref(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al_y, sizeof al_y);
      pref(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al_y, sizeof al_y);
      cublasLtMatmulHeuristicResult_t result{};
      int returned = 0;
      const cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(lt, ds.op, ds.a, ds.b, ds.c, ds.c,
                                                               ds.pref, 1, &result, &returned);
      // NOT_SUPPORTED (or no result) is an answer, "no algorithm": the unfused path runs.
      if (st != CUBLAS_STATUS_NOT_SUPPORTED)
        LOCKSTEP_CUBLAS_CHECK(st, dev, "cublasLtMatmulAlgoGetHeuristic (" + what + ")");
      LtChoice c;
      if (st == CUBLAS_STATUS_SUCCESS && returned > 0 && result.state == CUBLAS_STATUS_SUCCESS) {
        c.found = true;
        c.algo = result.algo;
        c.workspace = result.workspaceSize;
      }
      it = cache.emplace(key, c).first;
    }
    choice = it->second;
  }
  if (!choice.found) return false;
  ::lockstep::cuda::DeviceBuffer workspace(choice.workspace, dev);
  const T alpha = 1, beta = 0;
  LOCKSTEP_CUBLAS_CHECK(
      cublasLtMatmul(lt, ds.op, &alpha, w, ds.a, x, ds.b, &beta, y, ds.c, y, ds.c, &choice.algo,
                     workspace.data(), choice.workspace, exec.stream),
      dev, "cublasLtMatmul (" + what + ")");
  return true;
}

template bool linear_epilogue<float>(std::int64_t, std::int64_t, std::int64_t, const float*,
                                     const float*, const float*, float*, bool, Exec);
template bool linear_epilogue<double>(std::int64_t, std::int64_t, std::int64_t, const double*,
                                      const double*, const double*, double*, bool, Exec);

template void gemm<float>(bool, bool, std::int64_t, std::int64_t, std::int64_t, float, const float*,
                          std::int64_t, const float*, std::int64_t, float, float*, std::int64_t,
                          Exec);
template void gemm<double>(bool, bool, std::int64_t, std::int64_t, std::int64_t, double,
                           const double*, std::int64_t, const double*, std::int64_t, double,
                           double*, std::int64_t, Exec);
template void gemm_strided_batched<float>(bool, bool, std::int64_t, std::int64_t, std::int64_t,
                                          std::int64_t, const float*, std::int64_t, const float*,
                                          std::int64_t, float*, Exec);
template void gemm_strided_batched<double>(bool, bool, std::int64_t, std::int64_t, std::int64_t,
                                           std::int64_t, const double*, std::int64_t,
                                           const double*, std::int64_t, double*, Exec);

}  // namespace lockstep::kernels::cuda
