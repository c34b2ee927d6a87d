// scaled_dot_product_attention (lockstep/ops/attention.h): on the CPU the fused kernel
// (src/ops/cpu/attention.cpp, one autograd node); otherwise, and in the reference kernel mode, a
// composition of differentiable ops — the fused kernel's oracle: scores = (q · kᵀ) · scale, plus
// an additive 0 / −inf causal mask, softmax along the last dimension, dropout, then · v.
// Autograd runs through each op (softmax's backward gives exactly 0 at the masked positions).
#include <cmath>
#include <limits>
#include <string>

#include "lockstep/ops/autocast.h"
#include "ops/batched_kernels.h"
#include "ops/op_utils.h"

namespace lockstep {

namespace {

constexpr const char* kSdpa = "scaled_dot_product_attention";

void check_inputs(const Tensor& q, const Tensor& k, const Tensor& v) {
  detail::check_same(kSdpa, q, k);
  detail::check_same(kSdpa, q, v);
  detail::check_floating(kSdpa, q);
  auto refuse = [&](const std::string& why) {
    throw ShapeError(std::string(kSdpa) + ": query " + q.shape().str() + ", key " +
                     k.shape().str() + " and value " + v.shape().str() + " do not fit (" + why +
                     ")");
  };
  if (q.dim() < 2 || k.dim() != q.dim() || v.dim() != q.dim())
    refuse(
        "expected [..., L, E], [..., S, E] and [..., S, Ev] with the same number of dimensions, "
        "at least 2");
  for (int i = 0; i + 2 < q.dim(); ++i)
    if (k.size(i) != q.size(i) || v.size(i) != q.size(i)) refuse("the leading dimensions differ");
  if (k.size(-1) != q.size(-1)) refuse("query and key have different embedding sizes E");
  if (v.size(-2) != k.size(-2)) refuse("key and value have different sequence lengths S");
}

// [L, S]: 0 where key position j ≤ query position i (torch's ones(L, S).tril()), −inf elsewhere.
Tensor causal_mask(std::int64_t l, std::int64_t s, const Tensor& like) {
  Tensor mask = zeros({l, s}, TensorOptions(like.dtype()));
  detail::visit_float(like.dtype(), [&](auto zero) {
    using T = decltype(zero);
    T* p = mask.data_ptr<T>();
    for (std::int64_t i = 0; i < l; ++i)
      for (std::int64_t j = i + 1; j < s; ++j) p[i * s + j] = -std::numeric_limits<T>::infinity();
  });
  // On like's device: a replica on cpu:1 adds it to scores on cpu:1.
  return mask.device() == like.device() ? mask : mask.to(like.device());
}

// The fused CPU kernel (kernels::cpu::attention_forward / _backward) with one autograd node;
// q, k, v saved as they are (as matmul's inputs), the rows' log-sum-exp saved for backward.
Tensor fused_attention(const Tensor& q, const Tensor& k, const Tensor& v, bool causal,
                       double scale) {
  const std::int64_t l = q.size(-2), e = q.size(-1), s = k.size(-2), ev = v.size(-1);
  std::int64_t slices = 1;  // the leading dimensions (batch · heads)
  for (int i = 0; i + 2 < q.dim(); ++i) slices *= q.size(i);
  Shape out_shape = q.shape();
  out_shape[q.dim() - 1] = ev;
  Tensor out = empty(out_shape, q.options());
  Tensor lse = empty({slices, l}, TensorOptions(kFloat64));
  detail::visit_float(q.dtype(), [&](auto zero) {
    using T = decltype(zero);
    kernels::cpu::attention_forward<T>(slices, l, s, e, ev, q.data_ptr<T>(), k.data_ptr<T>(),
                                       v.data_ptr<T>(), scale, causal, out.data_ptr<T>(),
                                       lse.data_ptr<double>());
  });
  if (autograd::needs_grad({&q, &k, &v}))
    autograd::record(
        "ScaledDotProductAttentionBackward", out, {&q, &k, &v},
        [q, k, v, lse, rq = q.requires_grad(), rk = k.requires_grad(), rv = v.requires_grad(),
         slices, l, s, e, ev, causal, scale](const Tensor& g) {
          Tensor gq = empty(q.shape(), q.options()), gk = empty(k.shape(), k.options()),
                 gv = empty(v.shape(), v.options());
          detail::visit_float(q.dtype(), [&](auto zero) {
            using T = decltype(zero);
            kernels::cpu::attention_backward<T>(
                slices, l, s, e, ev, q.data_ptr<T>(), k.data_ptr<T>(), v.data_ptr<T>(),
                lse.data_ptr<double>(), g.data_ptr<T>(), scale, causal, gq.data_ptr<T>(),
                gk.data_ptr<T>(), gv.data_ptr<T>());
          });
          return std::vector<Tensor>{rq ? gq : Tensor(), rk ? gk : Tensor(), rv ? gv : Tensor()};
        });
  return out;
}

}  // namespace

Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                    bool is_causal, double dropout_p, std::optional<double> scale) {
  check_inputs(q, k, v);
  if (!(dropout_p >= 0.0 && dropout_p <= 1.0))
    throw ValueError(std::string(kSdpa) + ": dropout_p must be in [0, 1], got " +
                     std::to_string(dropout_p));
  const double s = scale ? *scale : 1.0 / std::sqrt(static_cast<double>(q.size(-1)));
  // The fused kernel on the CPU in the fast kernel mode; the composition in the reference mode
  // (its oracle), on a GPU, with dropout, and under autocast (whose bf16 GEMMs it keeps).
  if (q.device().is_cpu() && dropout_p == 0.0 && !kernels::dispatch::reference() &&
      !is_autocast_enabled())
    return fused_attention(q, k, v, is_causal, s);
  Tensor scores = mul(matmul(q, transpose(k, -2, -1)), s);
  if (is_causal) scores = add(scores, causal_mask(q.size(-2), k.size(-2), q));
  Tensor weights = softmax(scores, -1);
  if (dropout_p > 0.0) weights = dropout(weights, dropout_p, /*training=*/true);
  return matmul(weights, v);
}

}  // namespace lockstep
