// The fused CUDA attention's per-row bodies (src/ops/attention_bodies.h), run on the host one
// index at a time exactly as the GPU's threads run them, against the fused CPU kernel
// (src/ops/cpu/attention.cpp): outputs, log-sum-exps and the three gradients, float32 and
// float64, contiguous slices (L = S, L < S, L > S, T = 1, head size 1, causal or not) and
// nanoGPT's packed [B, T, 3C] layout. Without a GPU this is what checks the CUDA kernels' math.
#include <gtest/gtest.h>

#include <vector>

#include "lockstep/lockstep.h"
#include "ops/batched_kernels.h"
#include "lockstep/ops/detail/op_utils.h"
#include "support/tolerance.h"

namespace lockstep::testing {
namespace {

namespace sh = kernels::shared;

struct BodyCase {
  const char* name;
  std::int64_t batch, l, s, e, ev;
  bool causal;
  bool packed;  // q, k, v in one [B, T, 3C] tensor (heads = 2), out [B, T, C]
};

void PrintTo(const BodyCase& c, std::ostream* os) { *os << c.name; }

class AttentionBodies : public ::testing::TestWithParam<std::tuple<BodyCase, DType>> {};

TEST_P(AttentionBodies, EqualTheFusedCpuKernel) {
  const auto& [c, dt] = GetParam();
  const std::int64_t heads = c.packed ? 2 : 1, n = c.batch / heads;
  const std::int64_t C = heads * c.e;  // packed: e == ev, l == s
  sh::AttentionLayouts at;
  std::int64_t q_off = 0, k_off = 0, v_off = 0;
  Tensor q, k, v, out_cpu, out_rows;
  Generator gen(3);
  if (c.packed) {
    q = k = v = randn({n, c.l, 3 * C}, kFloat64, &gen).to(dt);
    const sh::SliceLayout in{heads, c.l * 3 * C, c.e, 3 * C}, o{heads, c.l * C, c.e, C};
    at = {in, in, in, o};
    k_off = C, v_off = 2 * C;
    out_cpu = zeros({n, c.l, C}, dt), out_rows = zeros({n, c.l, C}, dt);
  } else {
    q = randn({c.batch, c.l, c.e}, kFloat64, &gen).to(dt);
    k = randn({c.batch, c.s, c.e}, kFloat64, &gen).to(dt);
    v = randn({c.batch, c.s, c.ev}, kFloat64, &gen).to(dt);
    at = {sh::contiguous_slices(c.l, c.e), sh::contiguous_slices(c.s, c.e),
          sh::contiguous_slices(c.s, c.ev), sh::contiguous_slices(c.l, c.ev)};
    out_cpu = zeros({c.batch, c.l, c.ev}, dt), out_rows = zeros({c.batch, c.l, c.ev}, dt);
  }
  const Tensor gout = randn(out_cpu.shape(), kFloat64, &gen).to(dt);
  const double scale = 0.37;
  Tensor lse_cpu = zeros({c.batch, c.l}, kFloat64), lse_rows = zeros({c.batch, c.l}, kFloat64);
  Tensor d = zeros({c.batch, c.l}, kFloat64);
  auto grads = [&] {
    return std::vector<Tensor>{zeros(q.shape(), dt), zeros(k.shape(), dt), zeros(v.shape(), dt)};
  };
  std::vector<Tensor> g_cpu = grads(), g_rows = grads();
  detail::visit_float(dt, [&](auto zero) {
    using T = decltype(zero);
    const T *pq = q.data_ptr<T>() + q_off, *pk = k.data_ptr<T>() + k_off,
            *pv = v.data_ptr<T>() + v_off;
    // In the packed case the three gradients are one tensor; here three, each checked alone.
    auto gp = [&](std::vector<Tensor>& g, int i, std::int64_t off) {
      return g[i].data_ptr<T>() + off;
    };
    kernels::cpu::attention_forward<T>(c.batch, c.l, c.s, c.e, c.ev, at, pq, pk, pv, scale,
                                       c.causal, out_cpu.data_ptr<T>(), lse_cpu.data_ptr<double>());
    kernels::cpu::attention_backward<T>(c.batch, c.l, c.s, c.e, c.ev, at, pq, pk, pv,
                                        lse_cpu.data_ptr<double>(), gout.data_ptr<T>(), scale,
                                        c.causal, gp(g_cpu, 0, q_off), gp(g_cpu, 1, k_off),
                                        gp(g_cpu, 2, v_off));
    sh::AttnArgs<T> a;
    a.batch = c.batch, a.l = c.l, a.s = c.s, a.e = c.e, a.ev = c.ev, a.causal = c.causal;
    a.scale = scale, a.at = at, a.q = pq, a.k = pk, a.v = pv, a.gout = gout.data_ptr<T>();
    a.out = out_rows.data_ptr<T>(), a.lse = lse_rows.data_ptr<double>(), a.d = d.data_ptr<double>();
    a.gq = gp(g_rows, 0, q_off), a.gk = gp(g_rows, 1, k_off), a.gv = gp(g_rows, 2, v_off);
    for (std::int64_t i = 0; i < c.batch * c.l; ++i) sh::attn_forward_row(a, i);
    for (std::int64_t i = 0; i < c.batch * c.l; ++i) sh::attn_backward_query_row(a, i);
    for (std::int64_t j = 0; j < c.batch * c.s; ++j) sh::attn_backward_key_row(a, j);
  });
  const double tol = dt == kFloat32 ? 2e-5 : 1e-12;
  EXPECT_TRUE(AllClose(out_rows, out_cpu, tol, tol)) << "out";
  EXPECT_TRUE(AllClose(lse_rows, lse_cpu, tol, tol)) << "lse";
  const char* names[] = {"gq", "gk", "gv"};
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(AllClose(g_rows[i], g_cpu[i], tol, tol)) << names[i];
}

INSTANTIATE_TEST_SUITE_P(
    Cases, AttentionBodies,
    ::testing::Combine(::testing::Values(BodyCase{"causal", 3, 6, 6, 4, 4, true, false},
                                         BodyCase{"full", 2, 5, 5, 3, 2, false, false},
                                         BodyCase{"l_lt_s", 2, 3, 5, 4, 3, true, false},
                                         BodyCase{"l_gt_s", 2, 5, 3, 3, 3, true, false},
                                         BodyCase{"t1", 2, 1, 1, 3, 3, true, false},
                                         BodyCase{"hs1", 2, 6, 6, 1, 1, true, false},
                                         BodyCase{"packed", 4, 7, 7, 3, 3, true, true}),
                       ::testing::Values(kFloat32, kFloat64)),
    [](const auto& info) {
      return std::string(std::get<0>(info.param).name) + "_" + to_string(std::get<1>(info.param));
    });

}  // namespace
}  // namespace lockstep::testing
