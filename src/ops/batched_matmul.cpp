// matmul over leading batch dimensions (torch.matmul for [..., M, K] x [..., K, N]): one GEMM per
// batch index through kernels::dispatch::gemm_batched on the CPU (src/ops/batched_kernels.h), one
// strided-batched cuBLAS call on a GPU (one cuda_ops::gemm2d per batch index under autocast);
// backward by the same batched GEMM with a transposed operand, summed over the batch for a
// broadcast operand.
#include <algorithm>
#include <string>

#include "lockstep/core/error.h"
#include "ops/batched_kernels.h"
#include "ops/cuda_ops.h"
#include "lockstep/ops/detail/op_utils.h"

namespace lockstep::detail {

using autograd::needs_grad;
using autograd::record;

namespace {

// The shape of a batched product: the batch `count` (the broadcast batch's numel), each
// operand's element stride between batch indices (0: broadcast) and the output shape.
struct BatchedGeom {
  std::int64_t count = 1, m = 0, k = 0, n = 0, stride_a = 0, stride_b = 0;
  Shape out;
};

[[noreturn]] void refuse(const Tensor& a, const Tensor& b, const std::string& why) {
  throw ShapeError("matmul: cannot multiply " + a.shape().str() + " by " + b.shape().str() + " (" +
                   why + ")");
}

BatchedGeom geometry(const Tensor& a, const Tensor& b) {
  if (a.dim() < 2 || b.dim() < 2)
    refuse(a, b, "expected at least 2 dimensions each: [..., M, K] x [..., K, N]");
  BatchedGeom g;
  g.m = a.size(-2);
  g.k = a.size(-1);
  g.n = b.size(-1);
  if (b.size(-2) != g.k) refuse(a, b, "inner dimensions differ: [..., M, K] x [..., K, N]");
  // The batch dimensions broadcast as NumPy's (right-aligned); of the broadcasts only "identical"
  // and "one operand has a single batch element" are built.
  const int na = a.dim() - 2, nb = b.dim() - 2, nd = std::max(na, nb);
  std::int64_t count_a = 1, count_b = 1;
  for (int i = 0; i < nd; ++i) {
    const int ia = na - nd + i, ib = nb - nd + i;
    const std::int64_t da = ia >= 0 ? a.size(ia) : 1, db = ib >= 0 ? b.size(ib) : 1;
    if (da != db && da != 1 && db != 1) refuse(a, b, "batch dimensions do not broadcast");
    g.out.push_back(da == 1 ? db : da);
    count_a *= da;
    count_b *= db;
  }
  g.count = g.out.numel();
  if ((count_a != 1 && count_a != g.count) || (count_b != 1 && count_b != g.count))
    refuse(a, b,
           "batch dimensions must be equal or one operand's all 1; other broadcasting of batch "
           "dimensions is not implemented");
  g.stride_a = count_a == 1 ? 0 : g.m * g.k;
  g.stride_b = count_b == 1 ? 0 : g.k * g.n;
  g.out.push_back(g.m);
  g.out.push_back(g.n);
  return g;
}

// c (shaped `out`, count·m·n elements) = op(A_i) op(B_i) for i < count (the kernels' contract:
// A_i starts at element i·stride_a of a, and so on).
Tensor gemm_batched(const Tensor& a, bool ta, std::int64_t stride_a, const Tensor& b, bool tb,
                    std::int64_t stride_b, std::int64_t count, std::int64_t m, std::int64_t n,
                    std::int64_t k, const Shape& out, bool bf16) {
  Tensor c = empty(out, a.options());
  if (a.device().is_cuda() && !bf16) {
    // One cublas{S,D}gemmStridedBatched call for the whole batch.
    cuda_ops::gemm_batched(a, ta, stride_a, b, tb, stride_b, count, m, n, k, c);
    return c;
  }
  if (a.device().is_cuda()) {
    // Autocast: one bf16 cuBLAS GEMM per batch index on 2-d views (gemm2d's casts and rounding).
    const Shape sa = ta ? Shape{k, m} : Shape{m, k}, sb = tb ? Shape{n, k} : Shape{k, n};
    for (std::int64_t i = 0; i < count; ++i)
      cuda_ops::gemm2d(alias(a, a.impl().offset + i * stride_a, sa), ta,
                       alias(b, b.impl().offset + i * stride_b, sb), tb,
                       alias(c, c.impl().offset + i * m * n, {m, n}), bf16);
    return c;
  }
  if (bf16) {
    // Autocast, as gemm2d: operands rounded to bf16, fp32 products, the result rounded once.
    const Tensor ar = round_to_bfloat16(a), br = round_to_bfloat16(b);
    kernels::dispatch::gemm_batched<float>(ta, tb, count, m, n, k, ar.data_ptr<float>(), stride_a,
                                           br.data_ptr<float>(), stride_b, c.data_ptr<float>());
    round_to_bfloat16_(c);
    return c;
  }
  visit_float(a.dtype(), [&](auto zero) {
    using T = decltype(zero);
    kernels::dispatch::gemm_batched<T>(ta, tb, count, m, n, k, a.data_ptr<T>(), stride_a,
                                       b.data_ptr<T>(), stride_b, c.data_ptr<T>());
  });
  return c;
}

// A per-batch gradient [count, rows, cols] as the gradient of an operand of shape `shape`:
// the same elements when the operand was not broadcast, else summed over the batch.
Tensor reduce_batch(const Tensor& full, bool broadcast, const Shape& shape) {
  if (!broadcast) return reshape(full, shape);
  return reshape(sum(full, 0), shape);
}

}  // namespace

Tensor matmul_batched(const Tensor& a, const Tensor& b, bool bf16) {
  const BatchedGeom g = geometry(a, b);
  Tensor out =
      gemm_batched(a, false, g.stride_a, b, false, g.stride_b, g.count, g.m, g.n, g.k, g.out, bf16);
  if (needs_grad({&a, &b}))
    record("MatmulBackward", out, {&a, &b},
           // Saved as they are, as 2-d matmul's inputs (src/ops/linalg.cpp).
           [a, b, ra = a.requires_grad(), rb = b.requires_grad(), g, bf16](const Tensor& go) {
             const std::int64_t mn = g.m * g.n;
             const bool bcast_a = g.stride_a == 0 && g.count != 1;
             const bool bcast_b = g.stride_b == 0 && g.count != 1;
             Tensor ga, gb;
             if (ra)  // dA_i = dC_i · B_iᵀ
               ga = reduce_batch(gemm_batched(go, false, mn, b, true, g.stride_b, g.count, g.m, g.k,
                                              g.n, Shape{g.count, g.m, g.k}, bf16),
                                 bcast_a, a.shape());
             if (rb)  // dB_i = A_iᵀ · dC_i
               gb = reduce_batch(gemm_batched(a, true, g.stride_a, go, false, mn, g.count, g.k, g.n,
                                              g.m, Shape{g.count, g.k, g.n}, bf16),
                                 bcast_b, b.shape());
             return std::vector<Tensor>{ga, gb};
           });
  return out;
}

}  // namespace lockstep::detail
