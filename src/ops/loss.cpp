// Losses (cross-entropy, MSE) and dropout.
#include <array>
#include <cmath>
#include <limits>

#include "lockstep/cuda/graph.h"
#include "ops/cuda_ops.h"
#include "ops/kernels.h"
#include "lockstep/ops/detail/op_utils.h"
#include "ops/torch_random.h"

namespace lockstep {

using autograd::needs_grad;
using autograd::record;
using cuda_ops::CrossEntropyStats;

namespace {

[[noreturn]] void throw_bad_target(std::int64_t target, std::int64_t row, std::int64_t c) {
  throw IndexError("cross_entropy: target " + std::to_string(target) + " at row " +
                   std::to_string(row) + " is out of range for " + std::to_string(c) +
                   " classes (expected 0 <= target < " + std::to_string(c) + ")");
}

// The fused softmax-cross-entropy kernels (checked inputs on one CUDA device). The forward
// computes the mean loss on the device; an invalid target is the CPU's IndexError, found from the
// kernel's invalid count and first bad (row, target), read back in one copy. While the device's
// stream is captured into a CUDA graph nothing is read back: the check is registered with the
// graph and runs after each replay (CUDAGraph::check_replay), with the same message.
void check_targets(const CrossEntropyStats& stats, std::int64_t c, const Device& device) {
  if (stats.invalid <= 0) return;
  if (stats.first_bad_row >= 0) throw_bad_target(stats.first_bad_value, stats.first_bad_row, c);
  throw IndexError("cross_entropy: " + std::to_string(stats.invalid) +
                   " target(s) out of range for " + std::to_string(c) + " classes on " +
                   device.str());
}

Tensor cross_entropy_cuda(const Tensor& logits, const Tensor& target, std::int64_t ignore_index) {
  const std::int64_t c = logits.size(1);
  const Device device = logits.device();
  Tensor prob = empty(logits.shape(), logits.options());
  Tensor scratch = empty({5}, TensorOptions(kInt64).device(device));
  Tensor out = empty(Shape{}, logits.options());
  cuda_ops::cross_entropy_forward(logits, target, ignore_index, prob, scratch, out);
  if (auto* graph = cuda::CUDAGraph::capturing_on(device.index)) {
    graph->add_replay_check(
        [scratch, c, device] { check_targets(cuda_ops::cross_entropy_stats(scratch), c, device); });
  } else {
    check_targets(cuda_ops::cross_entropy_stats(scratch), c, device);
  }
  if (needs_grad({&logits}))
    record("CrossEntropyBackward", out, {&logits},
           [prob, target, scratch, ignore_index](const Tensor& g) {
             Tensor gl = empty(prob.shape(), prob.options());
             cuda_ops::cross_entropy_backward(prob, target, ignore_index, scratch,
                                              g.device() == prob.device() ? g : g.to(prob.device()),
                                              gl);
             return std::vector<Tensor>{gl};
           });
  return out;
}

}  // namespace

Tensor cross_entropy(const Tensor& logits, const Tensor& target, std::int64_t ignore_index) {
  detail::check_floating("cross_entropy", logits);
  detail::check_defined("cross_entropy", target);
  if (logits.dim() != 2)
    throw ShapeError("cross_entropy: expected logits [N, C], got " + logits.shape().str());
  if (target.dtype() != kInt64)
    throw DTypeError("cross_entropy: expected int64 class indices, got " +
                     to_string(target.dtype()) + " " + target.shape().str());
  if (target.dim() != 1 || target.size(0) != logits.size(0))
    throw ShapeError("cross_entropy: target " + target.shape().str() + " does not match logits " +
                     logits.shape().str() + " (expected [" + std::to_string(logits.size(0)) + "])");
  if (target.device() != logits.device())
    throw DeviceError("cross_entropy: logits on " + logits.device().str() + ", target on " +
                      target.device().str());
  if (logits.device().is_cuda()) return cross_entropy_cuda(logits, target, ignore_index);
  std::int64_t n = logits.size(0), c = logits.size(1);
  const auto* pt = target.data_ptr<std::int64_t>();
  for (std::int64_t i = 0; i < n; ++i)
    if (pt[i] != ignore_index && (pt[i] < 0 || pt[i] >= c)) throw_bad_target(pt[i], i, c);
  Tensor prob = empty(logits.shape(), logits.options());
  double loss_sum = 0;
  std::int64_t count = 0;
  detail::visit_float(logits.dtype(), [&](auto zero) {
    using T = decltype(zero);
    kernels::dispatch::cross_entropy<T>(logits.data_ptr<T>(), pt, n, c, ignore_index, &loss_sum,
                                        &count, prob.data_ptr<T>());
  });
  double loss =
      count ? loss_sum / static_cast<double>(count) : std::numeric_limits<double>::quiet_NaN();
  Tensor out = scalar_tensor(loss, logits.options());
  if (needs_grad({&logits}))
    record("CrossEntropyBackward", out, {&logits},
           [prob, target = target, ignore_index, count](const Tensor& g) {
             // d loss / d logits = (softmax - onehot(target)) / count, zero on ignored rows
             Tensor gl = empty(prob.shape(), prob.options());
             std::int64_t n = prob.size(0), c = prob.size(1);
             const auto* pt = target.data_ptr<std::int64_t>();
             double scale = g.item() / static_cast<double>(std::max<std::int64_t>(count, 1));
             detail::visit_float(prob.dtype(), [&](auto zero) {
               using T = decltype(zero);
               const T* pp = prob.data_ptr<T>();
               T* po = gl.data_ptr<T>();
               T s = static_cast<T>(scale);
               for (std::int64_t i = 0; i < n; ++i) {
                 bool skip = pt[i] == ignore_index;
                 for (std::int64_t j = 0; j < c; ++j)
                   po[i * c + j] = skip ? T(0) : (pp[i * c + j] - T(j == pt[i])) * s;
               }
             });
             return std::vector<Tensor>{gl};
           });
  return out;
}

Tensor mse_loss(const Tensor& input, const Tensor& target) {
  detail::check_same("mse_loss", input, target);
  detail::check_floating("mse_loss", input);
  if (input.shape() != target.shape())
    throw ShapeError("mse_loss: input " + input.shape().str() + " and target " +
                     target.shape().str() + " must have the same shape");
  Tensor diff, out;
  {
    NoGradGuard g;
    diff = sub(input, target);
    out = mean(mul(diff, diff));
  }
  if (needs_grad({&input, &target}))
    record("MseLossBackward", out, {&input, &target}, [diff, n = input.numel()](const Tensor& g) {
      Tensor gi = mul(diff, 2.0 * g.item() / static_cast<double>(n));
      return std::vector<Tensor>{gi, neg(gi)};
    });
  return out;
}

namespace {
thread_local bool t_key_active = false;
thread_local DropoutKey t_key;
thread_local std::uint32_t t_key_calls = 0;
}  // namespace

DropoutKeyGuard::DropoutKeyGuard(const DropoutKey& key)
    : had_(t_key_active), prev_(t_key), prev_calls_(t_key_calls) {
  t_key_active = true;
  t_key = key;
  t_key_calls = 0;
}

DropoutKeyGuard::~DropoutKeyGuard() {
  t_key_active = had_;
  t_key = prev_;
  t_key_calls = prev_calls_;
}

Tensor dropout(const Tensor& x, double p, bool training, Generator* gen) {
  detail::check_floating("dropout", x);
  if (!(p >= 0.0 && p <= 1.0))
    throw ValueError("dropout: probability must be in [0, 1], got " + std::to_string(p));
  if (!training || p == 0.0) return x;
  // A captured mask would be frozen into the graph (keyed by the step counter at capture time)
  // and repeated by every replay.
  if (x.device().is_cuda() && cuda::is_current_stream_capturing(x.device().index))
    throw ValueError(
        "dropout in training mode under CUDA graph capture: its mask would be recorded once and "
        "repeated by every replay (not supported; use p = 0 or train without CUDA graphs)");
  Tensor mask = empty(x.shape(), x.options());
  double scale = p == 1.0 ? 0.0 : 1.0 / (1.0 - p);
  const bool on_gpu = x.device().is_cuda();
  if (t_key_active) {
    std::uint32_t call = t_key_calls++;
    std::int64_t rows = x.dim() == 0 ? 1 : x.size(0);
    std::int64_t cols = rows == 0 ? 0 : x.numel() / rows;
    if (on_gpu) {
      // The same Philox words and rule on the device (include/lockstep/core/detail/philox.h): the CPU's mask.
      cuda_ops::dropout_mask_keyed(mask, rows, cols, t_key.seed, t_key.step, call,
                                   t_key.sample_offset, p, scale);
    } else {
      std::array<std::uint32_t, 2> key{static_cast<std::uint32_t>(t_key.seed),
                                       static_cast<std::uint32_t>(t_key.seed >> 32)};
      detail::visit_float(x.dtype(), [&](auto zero) {
        using T = decltype(zero);
        T* pm = mask.data_ptr<T>();
        for (std::int64_t r = 0; r < rows; ++r) {
          auto row = static_cast<std::uint32_t>(t_key.sample_offset + r);
          std::array<std::uint32_t, 4> words{};
          for (std::int64_t j = 0; j < cols; ++j) {
            if (j % 4 == 0)
              words = philox4x32({row, static_cast<std::uint32_t>(t_key.step), call,
                                  static_cast<std::uint32_t>(j / 4)},
                                 key);
            double u = static_cast<double>(words[j % 4]) * 0x1.0p-32;
            pm[r * cols + j] = u < p ? T(0) : static_cast<T>(scale);
          }
        }
      });
    }
  } else {
    Generator& g = gen ? *gen : default_generator();
    std::unique_lock<std::mutex> lock(g.mutex(), std::defer_lock);
    if (!gen) lock.lock();
    if (g.engine() == Generator::Engine::MT19937) {
      // PyTorch's _dropout_impl (aten/src/ATen/native/Dropout.cpp): noise.bernoulli_(1 − p)
      // (the generator's path, not MKL's), noise.div_(1 − p) in the tensor's dtype; p == 1
      // draws nothing. Drawn on the host (and copied to a GPU).
      Tensor host = Tensor::empty(x.shape(), TensorOptions(x.dtype()));
      detail::visit_float(x.dtype(), [&](auto zero) {
        using T = decltype(zero);
        T* pm = host.data_ptr<T>();
        const T keep_scale = T(1) / static_cast<T>(1.0 - p);
        for (std::int64_t i = 0; i < x.numel(); ++i)
          pm[i] = p < 1.0 && torch_random::bernoulli(g, 1.0 - p) ? keep_scale : T(0);
      });
      mask.copy_(host);
    } else if (on_gpu) {
      // Element i takes the generator's doubles at stream positions offset + 2i (next_double
      // reads two words); the host generator is advanced past them, as the CPU loop leaves it.
      const std::uint64_t offset = g.offset();
      g.set_offset(offset + 2 * static_cast<std::uint64_t>(x.numel()));
      cuda_ops::dropout_mask_stream(mask, g.seed(), offset, p, scale);
    } else
      detail::visit_float(x.dtype(), [&](auto zero) {
        using T = decltype(zero);
        T* pm = mask.data_ptr<T>();
        for (std::int64_t i = 0; i < x.numel(); ++i)
          pm[i] = g.next_double() < p ? T(0) : static_cast<T>(scale);
      });
  }
  Tensor out;
  {
    NoGradGuard g;
    out = mul(x, mask);
  }
  if (needs_grad({&x}))
    record("DropoutBackward", out, {&x},
           [mask](const Tensor& g) { return std::vector<Tensor>{mul(g, mask)}; });
  return out;
}

}  // namespace lockstep
