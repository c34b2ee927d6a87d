// The autocast mode (lockstep/ops/autocast.h) and the bf16 rounding of whole tensors.
#include "lockstep/ops/autocast.h"

#include "lockstep/core/parallel.h"
#include "ops/cuda_ops.h"
#include "lockstep/ops/detail/op_utils.h"

namespace lockstep {

namespace {
thread_local bool g_autocast_enabled = false;
}  // namespace

bool is_autocast_enabled() { return g_autocast_enabled; }
void set_autocast_enabled(bool enabled) { g_autocast_enabled = enabled; }

namespace detail {

void round_to_bfloat16_into(const Tensor& src, const Tensor& dst) {
  if (src.device().is_cuda()) {
    cuda_ops::round_to_bfloat16(src, dst);
    return;
  }
  const float* s = src.data_ptr<float>();
  float* d = dst.data_ptr<float>();
  const std::int64_t n = src.numel();
  // A memory-bound loop: split over the intra-op team only when it is long.
  constexpr std::int64_t kGrain = std::int64_t(1) << 16;
  const int parts = static_cast<int>(std::min<std::int64_t>(get_num_threads(), n / kGrain));
  auto run = [&](std::int64_t lo, std::int64_t hi) {
    for (std::int64_t i = lo; i < hi; ++i) d[i] = ::lockstep::round_to_bfloat16(s[i]);
  };
  if (parts <= 1) return run(0, n);
  parallel_run(parts, [&](int i) { run(n * i / parts, n * (i + 1) / parts); });
}

Tensor round_to_bfloat16(const Tensor& t) {
  Tensor out = empty(t.shape(), t.options());
  round_to_bfloat16_into(t, out);
  return out;
}

void round_to_bfloat16_(const Tensor& t) { round_to_bfloat16_into(t, t); }

}  // namespace detail

}  // namespace lockstep
