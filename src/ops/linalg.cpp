// matmul, linear and transpose: GEMM through kernels::dispatch (OpenBLAS or the reference loop),
// in bf16 under autocast (lockstep/ops/autocast.h).
#include <cstring>

#include "lockstep/ops/autocast.h"
#include "ops/batched_kernels.h"
#include "ops/cuda_ops.h"
#include "ops/kernels.h"
#include "lockstep/ops/detail/op_utils.h"

namespace lockstep {

using autograd::needs_grad;
using autograd::record;

namespace {

// Whether an op with these float inputs computes in bf16: autocast on and float32 (autocast
// leaves float64 alone).
bool autocast_bf16(const Tensor& a) { return is_autocast_enabled() && a.dtype() == kFloat32; }

// C = op(A) op(B) for 2-d tensors; A is [m, k] (or [k, m] when ta), B is [k, n] (or [n, k]).
// Into `into` when it is given ([m, n], A's dtype and device: a gradient destination).
// bf16 (float32 only): autocast's GEMM — A and B rounded to bf16, products accumulated in fp32,
// C rounded to bf16 once. On the CPU by rounded copies and the fp32 GEMM (exact products), on a
// GPU by cublasGemmEx on bf16 copies.
Tensor gemm2d(const Tensor& a, bool ta, const Tensor& b, bool tb, bool bf16,
              Tensor into = Tensor()) {
  std::int64_t m = ta ? a.size(1) : a.size(0), k = ta ? a.size(0) : a.size(1);
  std::int64_t n = tb ? b.size(0) : b.size(1);
  Tensor c = into.defined() && into.dim() == 2 && into.size(0) == m && into.size(1) == n &&
                     into.dtype() == a.dtype() && into.device() == a.device()
                 ? std::move(into)
                 : empty({m, n}, a.options());
  if (a.device().is_cuda()) {
    cuda_ops::gemm2d(a, ta, b, tb, c, bf16);
    return c;
  }
  if (bf16) {
    const Tensor ar = detail::round_to_bfloat16(a), br = detail::round_to_bfloat16(b);
    kernels::dispatch::gemm<float>(ta, tb, m, n, k, 1.0f, ar.data_ptr<float>(), a.size(1),
                                   br.data_ptr<float>(), b.size(1), 0.0f, c.data_ptr<float>(), n);
    detail::round_to_bfloat16_(c);
    return c;
  }
  detail::visit_float(a.dtype(), [&](auto zero) {
    using T = decltype(zero);
    kernels::dispatch::gemm<T>(ta, tb, m, n, k, T(1), a.data_ptr<T>(), a.size(1), b.data_ptr<T>(),
                               b.size(1), T(0), c.data_ptr<T>(), n);
  });
  return c;
}

}  // namespace

Tensor matmul(const Tensor& a, const Tensor& b) {
  detail::check_same("matmul", a, b);
  detail::check_floating("matmul", a);
  if (a.dim() != 2 || b.dim() != 2) return detail::matmul_batched(a, b, autocast_bf16(a));
  if (a.size(1) != b.size(0))
    throw ShapeError("matmul: cannot multiply " + a.shape().str() + " by " + b.shape().str() +
                     " (expected [M, K] x [K, N])");
  const bool bf16 = autocast_bf16(a);
  Tensor out = gemm2d(a, false, b, false, bf16);
  if (needs_grad({&a, &b}))
    record("MatmulBackward", out, {&a, &b},
           // Inputs are saved as they are, not detached: backward runs under no_grad and only
           // reads them, and neither can hold this node (it is not their grad_fn), so no cycle.
           // Under autocast the saved fp32 inputs are rounded again in backward (the same values
           // as PyTorch's saved bf16 casts), as is g.
           [a, b, ra = a.requires_grad(), rb = b.requires_grad(), bf16](const Tensor& g) {
             return std::vector<Tensor>{ra ? gemm2d(g, false, b, true, bf16) : Tensor(),
                                        rb ? gemm2d(a, true, g, false, bf16) : Tensor()};
           });
  return out;
}

Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  detail::check_same("linear", x, weight);
  detail::check_floating("linear", x);
  if (weight.dim() != 2 || x.dim() < 1 || x.size(-1) != weight.size(1))
    throw ShapeError("linear: input " + x.shape().str() + " does not match weight " +
                     weight.shape().str() +
                     " (expected input [..., in_features] and weight "
                     "[out_features, in_features])");
  std::int64_t in = weight.size(1), outf = weight.size(0);
  if (bias.defined()) {
    detail::check_same("linear", x, bias);
    if (bias.dim() != 1 || bias.size(0) != outf)
      throw ShapeError("linear: bias " + bias.shape().str() + " does not match weight " +
                       weight.shape().str() + " (expected [" + std::to_string(outf) + "])");
  }
  std::int64_t rows = 1;  // leading dimensions flattened
  Shape out_shape;
  for (int i = 0; i + 1 < x.dim(); ++i) {
    rows *= x.size(i);
    out_shape.push_back(x.size(i));
  }
  out_shape.push_back(outf);
  Tensor out = empty(out_shape, x.options());
  const bool bf16 = autocast_bf16(x);
  if (x.device().is_cuda()) {
    cuda_ops::linear(x, weight, bias, out, rows, in, outf, bf16);
  } else if (bf16) {
    // Autocast: x, W and b rounded to bf16, x·Wᵀ + b summed in fp32, the result rounded once.
    const Tensor xr = detail::round_to_bfloat16(x), wr = detail::round_to_bfloat16(weight);
    const Tensor br = bias.defined() ? detail::round_to_bfloat16(bias) : Tensor();
    kernels::dispatch::linear<float>(xr.data_ptr<float>(), wr.data_ptr<float>(),
                                     br.defined() ? br.data_ptr<float>() : nullptr,
                                     out.data_ptr<float>(), rows, in, outf);
    detail::round_to_bfloat16_(out);
  } else {
    detail::visit_float(x.dtype(), [&](auto zero) {
      using T = decltype(zero);
      kernels::dispatch::linear<T>(x.data_ptr<T>(), weight.data_ptr<T>(),
                                   bias.defined() ? bias.data_ptr<T>() : nullptr, out.data_ptr<T>(),
                                   rows, in, outf);
    });
  }
  if (needs_grad({&x, &weight, &bias}))
    record("LinearBackward", out, {&x, &weight, &bias},
           // Saved without detach() (one TensorImpl less each), as in matmul above.
           [x, w = weight, rx = x.requires_grad(), rw = weight.requires_grad(),
            rb = bias.defined() && bias.requires_grad(), rows, in, outf, bf16](const Tensor& g) {
             const bool flat = x.dim() == 2;
             Tensor g2 = flat ? g : reshape(g, {rows, outf});
             Tensor gx, gw, gb;
             // Under autocast gemm2d rounds g, W and x to bf16 and its result (autocast.h).
             if (rx) gx = gemm2d(g2, false, w, false, bf16);
             if (rx && !flat) gx = reshape(gx, x.shape());
             // dW straight into the weight's gradient destination when it has one (a
             // GradientReducer bucket slice): no copy of the gradient afterwards.
             if (rw)
               gw = gemm2d(g2, true, flat ? x : reshape(x, {rows, in}), false, bf16,
                           autograd::take_grad_destination(w));
             // Under autocast: the fp32 column sum of the bf16-rounded g, rounded to bf16.
             if (rb)
               gb = bf16 ? detail::round_to_bfloat16(
                               detail::sum_to(detail::round_to_bfloat16(g2), {outf}))
                         : detail::sum_to(g2, {outf});
             return std::vector<Tensor>{gx, gw, gb};
           });
  return out;
}

Tensor t(const Tensor& a) {
  detail::check_defined("t", a);
  if (a.dim() != 2) throw ShapeError("t: expected a 2-d tensor, got " + a.shape().str());
  std::int64_t r = a.size(0), c = a.size(1);
  Tensor out = empty({c, r}, a.options());
  if (a.device().is_cuda()) {
    cuda_ops::transpose2d(a, out);
    if (needs_grad({&a}))
      record("TBackward", out, {&a}, [](const Tensor& g) { return std::vector<Tensor>{t(g)}; });
    return out;
  }
  std::size_t es = element_size(a.dtype());
  const char* src = static_cast<const char*>(a.raw_data());
  char* dst = static_cast<char*>(out.raw_data());
  for (std::int64_t i = 0; i < r; ++i)
    for (std::int64_t j = 0; j < c; ++j)
      std::memcpy(dst + (j * r + i) * es, src + (i * c + j) * es, es);
  if (needs_grad({&a}))
    record("TBackward", out, {&a}, [](const Tensor& g) { return std::vector<Tensor>{t(g)}; });
  return out;
}

}  // namespace lockstep
