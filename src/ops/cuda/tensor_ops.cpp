// The CUDA paths of the Tensor ops (src/ops/cuda_ops.h) on top of kernels::cuda.
#include <cuda_runtime.h>

#include <cstring>
#include <utility>

#include "lockstep/cuda/detail/check.h"
#include "lockstep/cuda/allocator.h"
#include "lockstep/cuda/graph.h"
#include "lockstep/cuda/runtime.h"
#include "ops/cuda/kernels.h"
#include "ops/cuda_ops.h"
#include "lockstep/ops/detail/op_utils.h"
#include "ops/strided_plan.h"
#include "lockstep/ops/detail/update_rules.h"

namespace lockstep::cuda_ops {

namespace kc = ::lockstep::kernels::cuda;

namespace {

constexpr std::size_t kStagingLimit = std::size_t{64} << 20;

kc::Exec exec_of(const Tensor& t) { return kc::on_device(t.device().index); }

template <class T>
T* ptr(const Tensor& t) {
  return t.defined() ? t.device_data_ptr<T>() : nullptr;
}

// Uploads of this thread go through one pinned buffer (grows to the largest upload up to
// kStagingLimit, freed when the thread ends).
::lockstep::cuda::PinnedStagingBuffer& staging() {
  thread_local ::lockstep::cuda::PinnedStagingBuffer buffer;
  return buffer;
}

kc::Binary to_cuda(kernels::BinaryOp op) {
  switch (op) {
    case kernels::BinaryOp::Add:
      return kc::Binary::Add;
    case kernels::BinaryOp::Sub:
      return kc::Binary::Sub;
    case kernels::BinaryOp::Mul:
      return kc::Binary::Mul;
    case kernels::BinaryOp::Div:
      return kc::Binary::Div;
  }
  return kc::Binary::Add;
}

}  // namespace

void copy(const Tensor& src, const Tensor& dst) {
  const std::size_t bytes = static_cast<std::size_t>(src.numel()) * element_size(src.dtype());
  if (bytes == 0) return;
  const void* s = src.device_raw_data();
  void* d = dst.device_raw_data();
  const Device sd = src.device(), dd = dst.device();
  if (sd.is_cpu() && dd.is_cpu()) {
    std::memmove(d, s, bytes);
  } else if (sd.is_cpu()) {
    if (bytes <= kStagingLimit)
      staging().upload(d, s, bytes, dd.index);
    else
      ::lockstep::cuda::copy_to_device(d, s, bytes, dd.index);
  } else if (dd.is_cpu()) {
    ::lockstep::cuda::copy_to_host(d, s, bytes, sd.index);
  } else if (sd == dd) {
    if (s == d) return;
    ::lockstep::cuda::DeviceGuard guard(dd.index);
    LOCKSTEP_CUDA_CHECK(cudaMemcpyAsync(d, s, bytes, cudaMemcpyDeviceToDevice,
                                        ::lockstep::cuda::compute_stream(dd.index)),
                        dd.index,
                        "cudaMemcpyAsync(" + std::to_string(bytes) + " bytes, device to device)");
  } else {
    // Between GPUs: the source's pending writes finish first, and the copy finishes before
    // either block can be freed and reused by its own compute stream.
    ::lockstep::cuda::check_not_capturing(sd.index, "a copy from " + sd.str() + " to " + dd.str());
    ::lockstep::cuda::check_not_capturing(dd.index, "a copy from " + sd.str() + " to " + dd.str());
    auto s_stream = ::lockstep::cuda::compute_stream(sd.index);
    auto d_stream = ::lockstep::cuda::compute_stream(dd.index);
    LOCKSTEP_CUDA_CHECK(cudaStreamSynchronize(s_stream), sd.index,
                        "cudaStreamSynchronize (before a copy to " + dd.str() + ")");
    ::lockstep::cuda::DeviceGuard guard(dd.index);
    LOCKSTEP_CUDA_CHECK(
        cudaMemcpyPeerAsync(d, dd.index, s, sd.index, bytes, d_stream), dd.index,
        "cudaMemcpyPeerAsync(" + std::to_string(bytes) + " bytes from " + sd.str() + ")");
    LOCKSTEP_CUDA_CHECK(cudaStreamSynchronize(d_stream), dd.index,
                        "cudaStreamSynchronize (after a copy from " + sd.str() + ")");
  }
}

void fill(const Tensor& t, double value) {
  const auto exec = exec_of(t);
  switch (t.dtype()) {
    case DType::Float32:
      kc::fill<float>(ptr<float>(t), static_cast<float>(value), t.numel(), exec);
      break;
    case DType::Float64:
      kc::fill<double>(ptr<double>(t), value, t.numel(), exec);
      break;
    case DType::Int64:
      kc::fill<std::int64_t>(ptr<std::int64_t>(t), static_cast<std::int64_t>(value), t.numel(),
                             exec);
      break;
  }
}

void binary(kernels::BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out) {
  const std::int64_t n = out.numel();
  const std::int64_t sa = a.numel() == n ? 1 : 0, sb = b.numel() == n ? 1 : 0;
  detail::visit_float(out.dtype(), [&](auto zero) {
    using T = decltype(zero);
    kc::binary<T>(to_cuda(op), ptr<T>(a), sa, ptr<T>(b), sb, ptr<T>(out), n, exec_of(out));
  });
}

void add_(const Tensor& self, const Tensor& other, double alpha) {
  const std::int64_t n = self.numel();
  const std::int64_t sx = other.numel() == n ? 1 : 0;
  detail::visit_float(self.dtype(), [&](auto zero) {
    using T = decltype(zero);
    kc::axpy<T>(static_cast<T>(alpha), ptr<T>(other), sx, ptr<T>(self), n, exec_of(self));
  });
}

void mul_(const Tensor& self, double value) {
  detail::visit_float(self.dtype(), [&](auto zero) {
    using T = decltype(zero);
    kc::scale<T>(ptr<T>(self), static_cast<T>(value), self.numel(), exec_of(self));
  });
}

void neg(const Tensor& x, const Tensor& out) {
  detail::visit_float(x.dtype(), [&](auto zero) {
    using T = decltype(zero);
    kc::unary<T>(kc::Unary::Neg, ptr<T>(x), ptr<T>(out), x.numel(), exec_of(x));
  });
}

void relu(const Tensor& x, const Tensor& out) {
  detail::visit_float(x.dtype(), [&](auto zero) {
    using T = decltype(zero);
    kc::relu_forward<T>(ptr<T>(x), ptr<T>(out), x.numel(), exec_of(x));
  });
}

void relu_backward(const Tensor& grad_out, const Tensor& y, const Tensor& grad_in) {
  detail::visit_float(y.dtype(), [&](auto zero) {
    using T = decltype(zero);
    kc::relu_backward<T>(ptr<T>(grad_out), ptr<T>(y), ptr<T>(grad_in), y.numel(), exec_of(y));
  });
}

void tanh(const Tensor& x, const Tensor& out) {
  detail::visit_float(x.dtype(), [&](auto zero) {
    using T = decltype(zero);
    kc::unary<T>(kc::Unary::Tanh, ptr<T>(x), ptr<T>(out), x.numel(), exec_of(x));
  });
}

void tanh_backward(const Tensor& grad_out, const Tensor& y, const Tensor& grad_in) {
  detail::visit_float(y.dtype(), [&](auto zero) {
    using T = decltype(zero);
    kc::tanh_backward<T>(ptr<T>(grad_out), ptr<T>(y), ptr<T>(grad_in), y.numel(), exec_of(y));
  });
}

void sum_all(const Tensor& x, double divisor, const Tensor& out) {
  detail::visit_float(x.dtype(), [&](auto zero) {
    using T = decltype(zero);
    kc::sum_all<T>(ptr<T>(x), x.numel(), divisor, ptr<T>(out), exec_of(x));
  });
}

void round_to_bfloat16(const Tensor& src, const Tensor& dst) {
  kc::round_to_bfloat16(ptr<float>(src), ptr<float>(dst), src.numel(), exec_of(src));
}

void bias_grad(const Tensor& g, const Tensor& out) {
  detail::visit_float(g.dtype(), [&](auto zero) {
    using T = decltype(zero);
    kc::bias_grad<T>(ptr<T>(g), ptr<T>(out), g.size(0), g.size(1), exec_of(g));
  });
}

void tree_sum_rows(const Tensor& slots) {
  if (slots.dim() != 2)
    throw ShapeError("tree_sum_rows: expected a [rows, width] buffer, got " + slots.shape().str());
  detail::visit_float(slots.dtype(), [&](auto zero) {
    using T = decltype(zero);
    kc::tree_sum_rows<T>(ptr<T>(slots), slots.size(0), slots.size(1), exec_of(slots));
  });
}

void gemm2d(const Tensor& a, bool ta, const Tensor& b, bool tb, const Tensor& c, bool bf16) {
  const std::int64_t m = ta ? a.size(1) : a.size(0), k = ta ? a.size(0) : a.size(1);
  const std::int64_t n = tb ? b.size(0) : b.size(1);
  if (bf16) {
    kc::gemm_bf16(ta, tb, m, n, k, ptr<float>(a), a.size(1), ptr<float>(b), b.size(1), 0.0f,
                  ptr<float>(c), n, exec_of(a));
    return;
  }
  detail::visit_float(a.dtype(), [&](auto zero) {
    using T = decltype(zero);
    kc::gemm<T>(ta, tb, m, n, k, T(1), ptr<T>(a), a.size(1), ptr<T>(b), b.size(1), T(0), ptr<T>(c),
                n, exec_of(a));
  });
}

void gemm_batched(const Tensor& a, bool ta, std::int64_t stride_a, const Tensor& b, bool tb,
                  std::int64_t stride_b, std::int64_t count, std::int64_t m, std::int64_t n,
                  std::int64_t k, const Tensor& c) {
  detail::visit_float(a.dtype(), [&](auto zero) {
    using T = decltype(zero);
    kc::gemm_strided_batched<T>(ta, tb, count, m, n, k, ptr<T>(a), stride_a, ptr<T>(b), stride_b,
                                ptr<T>(c), exec_of(a));
  });
}

void linear(const Tensor& x, const Tensor& w, const Tensor& bias, const Tensor& y,
            std::int64_t rows, std::int64_t in, std::int64_t out, bool bf16) {
  const auto exec = exec_of(x);
  if (bf16) {
    // y preset to the bias rounded to bf16, then x̃·w̃ᵀ accumulated onto it in fp32 (beta = 1)
    // and the sum rounded once (gemm_bf16 rounds C after the GEMM).
    if (bias.defined()) {
      kc::bias_rows<float>(ptr<float>(bias), ptr<float>(y), rows, out, exec);
      kc::round_to_bfloat16(ptr<float>(y), ptr<float>(y), rows * out, exec);
    }
    kc::gemm_bf16(false, true, rows, out, in, ptr<float>(x), in, ptr<float>(w), in,
                  bias.defined() ? 1.0f : 0.0f, ptr<float>(y), out, exec);
    return;
  }
  detail::visit_float(x.dtype(), [&](auto zero) {
    using T = decltype(zero);
    // As kernels::linear_by_gemm: y preset to the bias, then one GEMM with beta = 1 (addmm).
    if (bias.defined()) kc::bias_rows<T>(ptr<T>(bias), ptr<T>(y), rows, out, exec);
    kc::gemm<T>(false, true, rows, out, in, T(1), ptr<T>(x), in, ptr<T>(w), in,
                bias.defined() ? T(1) : T(0), ptr<T>(y), out, exec);
  });
}

void cross_entropy_forward(const Tensor& logits, const Tensor& target, std::int64_t ignore_index,
                           const Tensor& prob, const Tensor& scratch, const Tensor& loss) {
  const std::int64_t n = logits.size(0), c = logits.size(1);
  const auto exec = exec_of(logits);
  Tensor terms = empty({n}, logits.options());
  auto* s = scratch.device_data_ptr<std::int64_t>();
  // scratch holds (loss_sum as a double, count, invalid, first bad row, its target).
  static_assert(sizeof(double) == sizeof(std::int64_t));
  detail::visit_float(logits.dtype(), [&](auto zero) {
    using T = decltype(zero);
    kc::cross_entropy_forward<T>(ptr<T>(logits), ptr<std::int64_t>(target), n, c, ignore_index,
                                 ptr<T>(prob), ptr<T>(terms), reinterpret_cast<double*>(s), s + 1,
                                 s + 2, exec, ptr<T>(loss), s + 3);
  });
}

CrossEntropyStats cross_entropy_stats(const Tensor& scratch) {
  std::int64_t host[5] = {0, 0, 0, -1, 0};
  ::lockstep::cuda::check_not_capturing(scratch.device().index, "cross_entropy's target check");
  ::lockstep::cuda::copy_to_host(host, scratch.device_raw_data(), sizeof host,
                                 scratch.device().index);
  CrossEntropyStats out;
  std::memcpy(&out.loss_sum, &host[0], sizeof(double));
  out.count = host[1];
  out.invalid = host[2];
  out.first_bad_row = host[3];
  out.first_bad_value = host[4];
  return out;
}

void cross_entropy_backward(const Tensor& prob, const Tensor& target, std::int64_t ignore_index,
                            const Tensor& scratch, const Tensor& g, const Tensor& grad_logits) {
  detail::visit_float(prob.dtype(), [&](auto zero) {
    using T = decltype(zero);
    kc::cross_entropy_backward<T>(
        ptr<T>(prob), ptr<std::int64_t>(target), prob.size(0), prob.size(1), ignore_index,
        scratch.device_data_ptr<std::int64_t>() + 1, ptr<T>(g), ptr<T>(grad_logits), exec_of(prob));
  });
}

int sgd_step(const Tensor& param, const Tensor& grad, const Tensor& momentum_buffer, bool first,
             double lr, double momentum, double dampening, double weight_decay, bool nesterov) {
  if (param.numel() == 0) return 0;
  const kc::SgdHyper hyper{lr, momentum, dampening, weight_decay, nesterov};
  detail::visit_float(param.dtype(), [&](auto zero) {
    using T = decltype(zero);
    kc::sgd_step<T>(ptr<T>(param), ptr<T>(grad), ptr<T>(momentum_buffer), param.numel(), first,
                    hyper, exec_of(param));
  });
  return 1;
}

int adam_step(const Tensor& param, const Tensor& grad, const Tensor& exp_avg,
              const Tensor& exp_avg_sq, double lr, double beta1, double beta2, double eps,
              double weight_decay, double step, bool decoupled) {
  if (param.numel() == 0) return 0;
  const kc::AdamHyper hyper{lr, beta1, beta2, eps, weight_decay, step, decoupled};
  detail::visit_float(param.dtype(), [&](auto zero) {
    using T = decltype(zero);
    kc::adam_step<T>(ptr<T>(param), ptr<T>(grad), ptr<T>(exp_avg), ptr<T>(exp_avg_sq),
                     param.numel(), hyper, exec_of(param));
  });
  return 1;
}

namespace {

// The host table of a flat step: the segments with elements; fill(host segment, table entry)
// sets the optimizer's own fields.
template <class T, class Fill>
std::vector<kc::FlatSegment<T>> flat_table(const std::vector<FlatUpdateSegment>& segments,
                                           Fill fill) {
  std::vector<kc::FlatSegment<T>> table;
  for (const FlatUpdateSegment& s : segments) {
    if (s.numel <= 0) continue;
    kc::FlatSegment<T> e;
    e.param_offset = s.param_offset;
    e.grad_offset = s.grad_offset;
    e.state_offset = s.state_offset;
    e.numel = s.numel;
    fill(s, e);
    table.push_back(e);
  }
  return table;
}

// The table copied to `device` through the pinned staging buffer (on its compute stream). The
// caller keeps the tensor until the launch is enqueued; freeing it after that is safe, since the
// allocator's blocks are ordered on the compute stream.
template <class T>
Tensor upload_table(const std::vector<kc::FlatSegment<T>>& table, Device device) {
  const std::size_t bytes = table.size() * sizeof(kc::FlatSegment<T>);
  Tensor dev =
      empty({static_cast<std::int64_t>((bytes + 7) / 8)}, TensorOptions(kInt64).device(device));
  staging().upload(dev.device_raw_data(), table.data(), bytes, device.index);
  return dev;
}

}  // namespace

namespace {

constexpr std::size_t kScalarsBytes = 256;  // the graph table's header: the step's scalars

// The structure of a table (what a replay's kernel depends on beyond the scalars).
template <class T>
std::vector<std::int64_t> table_layout(const std::vector<kc::FlatSegment<T>>& table) {
  std::vector<std::int64_t> l;
  for (const auto& e : table) {
    l.insert(l.end(), {e.param_offset, e.grad_offset, e.state_offset, e.numel, e.first_block,
                       static_cast<std::int64_t>(e.flags)});
  }
  return l;
}

// Runs one flat step in `mode` (cuda_ops.h): the host table (first_block assigned), the step's
// scalars, and the launch (a functor taking the device segments and device scalars pointers).
template <class T, class Scalars, class Launch>
int run_flat(std::vector<kc::FlatSegment<T>>& table, const Scalars& scalars, Device device,
             FlatMode mode, FlatGraphTable* graph, const char* who, Launch launch) {
  static_assert(sizeof(Scalars) <= kScalarsBytes);
  if (mode == FlatMode::Eager) {
    if (table.empty()) return 0;
    const std::int64_t blocks =
        kc::assign_flat_blocks<T>(table.data(), static_cast<std::int64_t>(table.size()));
    const Tensor dev = upload_table(table, device);
    launch(reinterpret_cast<const kc::FlatSegment<T>*>(dev.device_raw_data()),
           static_cast<std::int64_t>(table.size()), blocks, nullptr);
    return 1;
  }
  if (!graph) throw ValueError(std::string(who) + ": a CUDA graph step needs its device table");
  const std::int64_t blocks =
      kc::assign_flat_blocks<T>(table.data(), static_cast<std::int64_t>(table.size()));
  const std::size_t bytes = kScalarsBytes + table.size() * sizeof(kc::FlatSegment<T>);
  if (mode == FlatMode::Capture) {
    graph->buffer =
        empty({static_cast<std::int64_t>((bytes + 7) / 8)}, TensorOptions(kInt64).device(device));
    graph->layout = table_layout(table);
    graph->count = static_cast<std::int64_t>(table.size());
    graph->blocks = blocks;
    if (table.empty()) return 0;
    auto* base = static_cast<char*>(graph->buffer.device_raw_data());
    launch(reinterpret_cast<const kc::FlatSegment<T>*>(base + kScalarsBytes),
           static_cast<std::int64_t>(table.size()), blocks, base);
    return 1;
  }
  // Stage: this step's table and scalars into the captured buffer, nothing launched.
  if (!graph->buffer.defined() || graph->count != static_cast<std::int64_t>(table.size()) ||
      graph->blocks != blocks || graph->layout != table_layout(table))
    throw ValueError(std::string(who) +
                     ": this step's parameter layout (which parameters have a gradient, where "
                     "they lie, which state exists) differs from the one captured in the CUDA "
                     "graph; capture the step again");
  if (table.empty()) return 0;
  std::vector<unsigned char> host(static_cast<std::size_t>(graph->buffer.numel()) * 8, 0);
  std::memcpy(host.data(), &scalars, sizeof scalars);
  std::memcpy(host.data() + kScalarsBytes, table.data(), table.size() * sizeof(kc::FlatSegment<T>));
  staging().upload(graph->buffer.device_raw_data(), host.data(), host.size(), device.index);
  return 0;
}

}  // namespace

int sgd_flat_step(const Tensor& param_base, const Tensor& grad_base, const Tensor& momentum_buffer,
                  const std::vector<FlatUpdateSegment>& segments, double lr, double momentum,
                  double dampening, double weight_decay, bool nesterov, FlatMode mode,
                  FlatGraphTable* graph) {
  int launched = 0;
  const kc::SgdHyper hyper{lr, momentum, dampening, weight_decay, nesterov};
  detail::visit_float(param_base.dtype(), [&](auto zero) {
    using T = decltype(zero);
    auto table = flat_table<T>(segments, [](const FlatUpdateSegment& s, kc::FlatSegment<T>& e) {
      e.flags = s.first ? kc::kFlatFirstStep : 0u;
    });
    const auto scalars =
        optim::rules::sgd_scalars<T>(lr, momentum, dampening, weight_decay, nesterov);
    launched = run_flat<T>(table, scalars, param_base.device(), mode, graph, "SGD",
                           [&](const kc::FlatSegment<T>* dev, std::int64_t count,
                               std::int64_t blocks, const void* dev_scalars) {
                             kc::sgd_flat_step<T>(ptr<T>(param_base), ptr<T>(grad_base),
                                                  ptr<T>(momentum_buffer), dev, count, blocks,
                                                  hyper, exec_of(param_base), dev_scalars);
                           });
  });
  return launched;
}

int adam_flat_step(const Tensor& param_base, const Tensor& grad_base, const Tensor& exp_avg,
                   const Tensor& exp_avg_sq, const std::vector<FlatUpdateSegment>& segments,
                   double lr, double beta1, double beta2, double eps, double weight_decay,
                   bool decoupled, FlatMode mode, FlatGraphTable* graph) {
  int launched = 0;
  const kc::AdamHyper hyper{lr, beta1, beta2, eps, weight_decay, 1, decoupled};
  detail::visit_float(param_base.dtype(), [&](auto zero) {
    using T = decltype(zero);
    auto table = flat_table<T>(segments, [&](const FlatUpdateSegment& s, kc::FlatSegment<T>& e) {
      // The per-parameter step's scalars for this parameter's step count (one function).
      const auto scalars =
          optim::rules::adam_scalars<T>(lr, beta1, beta2, eps, weight_decay, s.step, decoupled);
      e.step_size = scalars.step_size;
      e.bc2_sqrt = scalars.bc2_sqrt;
      e.flags = (s.fresh_exp_avg ? kc::kFlatFreshExpAvg : 0u) |
                (s.fresh_exp_avg_sq ? kc::kFlatFreshExpAvgSq : 0u);
    });
    // What adam_flat_step computes from the hyper-parameters (step 1; each segment has its own
    // step_size and bc2_sqrt).
    const auto scalars =
        optim::rules::adam_scalars<T>(lr, beta1, beta2, eps, weight_decay, 1, decoupled);
    launched =
        run_flat<T>(table, scalars, param_base.device(), mode, graph, decoupled ? "AdamW" : "Adam",
                    [&](const kc::FlatSegment<T>* dev, std::int64_t count, std::int64_t blocks,
                        const void* dev_scalars) {
                      kc::adam_flat_step<T>(ptr<T>(param_base), ptr<T>(grad_base), ptr<T>(exp_avg),
                                            ptr<T>(exp_avg_sq), dev, count, blocks, hyper,
                                            exec_of(param_base), dev_scalars);
                    });
  });
  return launched;
}

// ---- the ops beyond the reference workload ------------------------------------------------------

namespace {

kc::Math to_cuda(MathOp op) {
  switch (op) {
    case MathOp::Exp:
      return kc::Math::Exp;
    case MathOp::Log:
      return kc::Math::Log;
    case MathOp::Sqrt:
      return kc::Math::Sqrt;
    case MathOp::Pow:
      return kc::Math::Pow;
    case MathOp::Sigmoid:
      return kc::Math::Sigmoid;
    case MathOp::Gelu:
      return kc::Math::Gelu;
    case MathOp::GeluTanh:
      return kc::Math::GeluTanh;
  }
  return kc::Math::Exp;
}

// f(zero) with a typed zero for float32, float64 and int64.
template <class F>
void visit_all(DType t, F&& f) {
  if (t == DType::Float64)
    f(double{});
  else if (t == DType::Int64)
    f(std::int64_t{});
  else
    f(float{});
}

}  // namespace

void math(MathOp op, const Tensor& x, const Tensor& y, double param) {
  detail::visit_float(x.dtype(), [&](auto zero) {
    using T = decltype(zero);
    kc::math_forward<T>(to_cuda(op), ptr<T>(x), ptr<T>(y), x.numel(), param, exec_of(x));
  });
}

void math_backward(MathOp op, const Tensor& g, const Tensor& saved, const Tensor& gi,
                   double param) {
  detail::visit_float(saved.dtype(), [&](auto zero) {
    using T = decltype(zero);
    kc::math_backward<T>(to_cuda(op), ptr<T>(g), ptr<T>(saved), ptr<T>(gi), saved.numel(), param,
                         exec_of(saved));
  });
}

void compare(kernels::shared::Compare op, const Tensor& a, const Tensor& b, const Tensor& out) {
  const std::int64_t n = out.numel();
  if (n == 0) return;
  const auto it = detail::broadcast_iter(out.shape(), a.shape(), b.shape());
  visit_all(a.dtype(), [&](auto zero) {
    using T = decltype(zero);
    kc::compare_strided<T>(op, ptr<T>(a), ptr<T>(b), ptr<std::int64_t>(out), it, n, exec_of(a));
  });
}

void binary_broadcast(kernels::BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out) {
  const std::int64_t n = out.numel();
  if (n == 0) return;
  const auto it = detail::broadcast_iter(out.shape(), a.shape(), b.shape());
  visit_all(out.dtype(), [&](auto zero) {
    using T = decltype(zero);
    kc::binary_strided<T>(to_cuda(op), ptr<T>(a), ptr<T>(b), ptr<T>(out), it, n, exec_of(out));
  });
}

void sum_to(const Tensor& in, const Tensor& out) {
  const auto plan = detail::reduce_plan(in.shape(), out.shape());
  visit_all(in.dtype(), [&](auto zero) {
    using T = decltype(zero);
    kc::sum_reduce<T>(ptr<T>(in), ptr<T>(out), plan, exec_of(in));
  });
}

void softmax(const Tensor& x, int d, bool log, const Tensor& y) {
  const detail::DimSplit l = detail::split_at_dim(x.shape(), d);
  detail::visit_float(x.dtype(), [&](auto zero) {
    using T = decltype(zero);
    kc::softmax_lines<T>(ptr<T>(x), ptr<T>(y), l.outer, l.r, l.inner, log, exec_of(x));
  });
}

void max_dim(const Tensor& x, int d, const Tensor& values, const Tensor& indices) {
  const detail::DimSplit l = detail::split_at_dim(x.shape(), d);
  visit_all(x.dtype(), [&](auto zero) {
    using T = decltype(zero);
    kc::max_dim<T>(ptr<T>(x), ptr<T>(values), ptr<std::int64_t>(indices), l.outer, l.r, l.inner,
                   exec_of(x));
  });
}

void max_dim_backward(const Tensor& g, const Tensor& indices, int d, const Tensor& gi) {
  const detail::DimSplit l = detail::split_at_dim(gi.shape(), d);
  detail::visit_float(gi.dtype(), [&](auto zero) {
    using T = decltype(zero);
    kc::max_dim_backward<T>(ptr<T>(g), ptr<std::int64_t>(indices), ptr<T>(gi), l.outer, l.r,
                            l.inner, exec_of(gi));
  });
}

void max_all(const Tensor& x, bool argmax_rule, const Tensor& value, const Tensor& index) {
  visit_all(x.dtype(), [&](auto zero) {
    using T = decltype(zero);
    kc::max_all<T>(ptr<T>(x), x.numel(),
                   argmax_rule ? kernels::shared::kRuleArgmax : kernels::shared::kRuleMax,
                   ptr<T>(value), ptr<std::int64_t>(index), exec_of(x));
  });
}

void max_all_backward(const Tensor& x, const Tensor& best, const Tensor& g, const Tensor& gi) {
  detail::visit_float(x.dtype(), [&](auto zero) {
    using T = decltype(zero);
    kc::max_all_backward<T>(ptr<T>(x), x.numel(), ptr<T>(best), ptr<T>(g), ptr<T>(gi), exec_of(x));
  });
}

void transpose2d(const Tensor& a, const Tensor& out) {
  if (out.numel() == 0) return;
  const std::int64_t rows = a.size(0), cols = a.size(1);
  kc::strided_copy(element_size(a.dtype()), out.device_raw_data(), 0, a.device_raw_data(), 0,
                   detail::transpose_iter(rows, cols), rows * cols, exec_of(a));
}

void slice_out(const Tensor& full, int d, std::int64_t start, const Tensor& slice) {
  if (slice.numel() == 0) return;
  std::int64_t base = 0;
  const auto it = detail::slice_iter(full.shape(), d, start, slice.size(d), &base);
  // operand 0 = the slice (destination), operand 1 = the full tensor (source)
  kc::strided_copy(element_size(full.dtype()), slice.device_raw_data(), 0, full.device_raw_data(),
                   base, it, slice.numel(), exec_of(full));
}

void slice_in(const Tensor& slice, int d, std::int64_t start, const Tensor& full) {
  if (slice.numel() == 0) return;
  std::int64_t base = 0;
  auto it = detail::slice_iter(full.shape(), d, start, slice.size(d), &base);
  // The copy's operand 0 is the destination: swap so the full tensor is written.
  for (int i = 0; i < it.nd; ++i) std::swap(it.strides[0][i], it.strides[1][i]);
  kc::strided_copy(element_size(full.dtype()), full.device_raw_data(), base,
                   slice.device_raw_data(), 0, it, slice.numel(), exec_of(full));
}

void index_select(const Tensor& a, int d, const Tensor& index, const Tensor& out) {
  if (out.numel() == 0) return;
  const detail::DimSplit l = detail::split_at_dim(a.shape(), d);
  kc::index_select(element_size(a.dtype()), a.device_raw_data(), ptr<std::int64_t>(index),
                   out.device_raw_data(), l.outer, l.r, index.numel(), l.inner, exec_of(a));
}

void index_select_backward(const Tensor& g, int d, const Tensor& index, const Tensor& gi) {
  const detail::DimSplit l = detail::split_at_dim(gi.shape(), d);
  detail::visit_float(gi.dtype(), [&](auto zero) {
    using T = decltype(zero);
    kc::index_select_backward<T>(ptr<T>(g), ptr<std::int64_t>(index), ptr<T>(gi), l.outer, l.r,
                                 index.numel(), l.inner, exec_of(gi));
  });
}

void dropout_mask_keyed(const Tensor& mask, std::int64_t rows, std::int64_t cols,
                        std::uint64_t seed, std::uint64_t step, std::uint32_t call,
                        std::int64_t sample_offset, double p, double scale) {
  detail::visit_float(mask.dtype(), [&](auto zero) {
    using T = decltype(zero);
    kc::dropout_mask_keyed<T>(ptr<T>(mask), rows, cols, seed, step, call, sample_offset, p,
                              static_cast<T>(scale), exec_of(mask));
  });
}

void dropout_mask_stream(const Tensor& mask, std::uint64_t seed, std::uint64_t offset, double p,
                         double scale) {
  detail::visit_float(mask.dtype(), [&](auto zero) {
    using T = decltype(zero);
    kc::dropout_mask_stream<T>(ptr<T>(mask), mask.numel(), seed, offset, p, static_cast<T>(scale),
                               exec_of(mask));
  });
}

}  // namespace lockstep::cuda_ops
