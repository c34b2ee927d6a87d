// scaled_dot_product_attention and qkv_attention (lockstep/ops/attention.h): a fused kernel with
// one autograd node — on the CPU src/ops/cpu/attention.cpp, on a GPU the per-row kernels of
// src/ops/cuda/attention.cu; with dropout, under autocast and in the reference kernel mode a
// composition of differentiable ops — the fused kernels' oracle: scores = (q · kᵀ) · scale, plus
// an additive 0 / −inf causal mask, softmax along the last dimension, dropout, then · v.
// Autograd runs through each op (softmax's backward gives exactly 0 at the masked positions).
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "lockstep/ops/autocast.h"
#include "ops/batched_kernels.h"
#include "ops/cuda_attention_ops.h"
#include "lockstep/ops/detail/op_utils.h"

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

// The fused kernels over `slices` slices with one autograd node — on the CPU
// kernels::cpu::attention_forward / _backward (src/ops/cpu/attention.cpp), on a GPU the per-row
// kernels of src/ops/cuda/attention.cu: q, k, v (possibly one tensor: qkv_attention's) saved as
// they are, the rows' log-sum-exp saved for backward. `out` is allocated by the caller; the
// gradients are laid out as their inputs (for a packed qkv, one [B, T, 3C] tensor holding gq,
// gk and gv).
Tensor fused_attention(const Tensor& q, const Tensor& k, const Tensor& v, Tensor out,
                       std::int64_t slices, std::int64_t l, std::int64_t s, std::int64_t e,
                       std::int64_t ev, const kernels::cpu::AttentionLayouts& at, std::int64_t q_off,
                       std::int64_t k_off, std::int64_t v_off, bool causal, double scale) {
  const TensorOptions dbl = TensorOptions(kFloat64).device(q.device());
  Tensor lse = empty({slices, l}, dbl);
  // The kernels' arguments; the gradients' pointers and D's scratch added by the backward.
  auto args = [=](auto zero, const Tensor& lse_t) {
    using T = decltype(zero);
    kernels::shared::AttnArgs<T> a;
    a.batch = slices, a.l = l, a.s = s, a.e = e, a.ev = ev, a.causal = causal, a.scale = scale;
    a.at = at;
    a.q = q.device_data_ptr<T>() + q_off;
    a.k = k.device_data_ptr<T>() + k_off;
    a.v = v.device_data_ptr<T>() + v_off;
    a.lse = lse_t.device_data_ptr<double>();
    return a;
  };
  detail::visit_float(q.dtype(), [&](auto zero) {
    using T = decltype(zero);
    auto a = args(zero, lse);
    a.out = out.device_data_ptr<T>();
    if (q.device().is_cuda())
      cuda_attention::attention_forward<T>(a, q.device().index);
    else
      kernels::cpu::attention_forward<T>(slices, l, s, e, ev, at, a.q, a.k, a.v, scale, causal,
                                         a.out, a.lse);
  });
  const bool packed = q.is_same(k) && q.is_same(v);
  if (packed ? autograd::needs_grad({&q}) : autograd::needs_grad({&q, &k, &v}))
    autograd::record(
        "ScaledDotProductAttentionBackward", out,
        packed ? std::vector<Tensor>{q} : std::vector<Tensor>{q, k, v},
        [q, k, v, lse, packed, rq = q.requires_grad(), rk = k.requires_grad(),
         rv = v.requires_grad(), args, q_off, k_off, v_off, dbl](const Tensor& g) {
          Tensor gq = empty(q.shape(), q.options());
          Tensor gk = packed ? gq : empty(k.shape(), k.options());
          Tensor gv = packed ? gq : empty(v.shape(), v.options());
          detail::visit_float(q.dtype(), [&](auto zero) {
            using T = decltype(zero);
            auto a = args(zero, lse);
            a.gout = g.device_data_ptr<T>();
            a.gq = gq.device_data_ptr<T>() + q_off;
            a.gk = gk.device_data_ptr<T>() + k_off;
            a.gv = gv.device_data_ptr<T>() + v_off;
            if (q.device().is_cuda()) {
              Tensor d = empty({a.batch, a.l}, dbl);
              a.d = d.device_data_ptr<double>();
              cuda_attention::attention_backward<T>(a, q.device().index);
            } else {
              kernels::cpu::attention_backward<T>(a.batch, a.l, a.s, a.e, a.ev, a.at, a.q, a.k,
                                                  a.v, a.lse, a.gout, a.scale, a.causal, a.gq,
                                                  a.gk, a.gv);
            }
          });
          if (packed) return std::vector<Tensor>{gq};
          return std::vector<Tensor>{rq ? gq : Tensor(), rk ? gk : Tensor(), rv ? gv : Tensor()};
        });
  return out;
}

// The fused kernels apply: the fast kernel mode, no dropout, no autocast (on the CPU or a GPU).
bool fused_applies(double dropout_p) {
  return dropout_p == 0.0 && !kernels::dispatch::reference() && !is_autocast_enabled();
}

}  // namespace

Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                    bool is_causal, double dropout_p, std::optional<double> scale) {
  check_inputs(q, k, v);
  if (!(dropout_p >= 0.0 && dropout_p <= 1.0))
    throw ValueError(std::string(kSdpa) + ": dropout_p must be in [0, 1], got " +
                     std::to_string(dropout_p));
  const double s = scale ? *scale : 1.0 / std::sqrt(static_cast<double>(q.size(-1)));
  // The fused kernels (CPU or GPU) in the fast kernel mode; the composition in the reference
  // mode (their oracle), with dropout, and under autocast (whose bf16 GEMMs it keeps).
  if (fused_applies(dropout_p)) {
    const std::int64_t l = q.size(-2), e = q.size(-1), sk = k.size(-2), ev = v.size(-1);
    std::int64_t slices = 1;  // the leading dimensions (batch · heads)
    for (int i = 0; i + 2 < q.dim(); ++i) slices *= q.size(i);
    Shape out_shape = q.shape();
    out_shape[q.dim() - 1] = ev;
    const kernels::cpu::AttentionLayouts at{
        kernels::cpu::contiguous_slices(l, e), kernels::cpu::contiguous_slices(sk, e),
        kernels::cpu::contiguous_slices(sk, ev), kernels::cpu::contiguous_slices(l, ev)};
    return fused_attention(q, k, v, empty(out_shape, q.options()), slices, l, sk, e, ev, at, 0, 0,
                           0, is_causal, s);
  }
  Tensor scores = mul(matmul(q, transpose(k, -2, -1)), s);
  if (is_causal) scores = add(scores, causal_mask(q.size(-2), k.size(-2), q));
  Tensor weights = softmax(scores, -1);
  if (dropout_p > 0.0) weights = dropout(weights, dropout_p, /*training=*/true);
  return matmul(weights, v);
}

Tensor qkv_attention(const Tensor& qkv, std::int64_t n_head, bool is_causal, double dropout_p) {
  if (n_head < 1)
    throw ValueError("qkv_attention: n_head must be positive, got " + std::to_string(n_head));
  if (qkv.dim() != 3 || qkv.size(2) % (3 * n_head) != 0)
    throw ShapeError("qkv_attention: expected qkv [B, T, 3·C] with C divisible by n_head=" +
                     std::to_string(n_head) + ", got " + qkv.shape().str());
  if (!(dropout_p >= 0.0 && dropout_p <= 1.0))
    throw ValueError("qkv_attention: dropout_p must be in [0, 1], got " +
                     std::to_string(dropout_p));
  detail::check_floating("qkv_attention", qkv);
  const std::int64_t B = qkv.size(0), T = qkv.size(1), C = qkv.size(2) / 3, hs = C / n_head;
  if (!fused_applies(dropout_p)) {  // nanoGPT's own lines (model.py)
    const std::vector<Tensor> parts = split(qkv, C, 2);
    auto heads = [&](const Tensor& t) { return transpose(reshape(t, {B, T, n_head, hs}), 1, 2); };
    const Tensor y = scaled_dot_product_attention(heads(parts[0]), heads(parts[1]),
                                                  heads(parts[2]), is_causal, dropout_p);
    return reshape(transpose(y, 1, 2), {B, T, C});
  }
  // Head h of q, k, v: columns h·hs, C + h·hs, 2C + h·hs of c_attn's rows; of the output:
  // columns h·hs of [B, T, C].
  const kernels::cpu::SliceLayout in{n_head, T * 3 * C, hs, 3 * C}, out{n_head, T * C, hs, C};
  return fused_attention(qkv, qkv, qkv, empty({B, T, C}, qkv.options()), B * n_head, T, T, hs, hs,
                         {in, in, in, out}, 0, C, 2 * C, is_causal, 1.0 / std::sqrt(double(hs)));
}

}  // namespace lockstep
