// In-place samplers uniform_, normal_, random_, bernoulli_ (lockstep/ops/random.h): PyTorch's
// kernels (src/ops/torch_random.cpp) on an MT19937 generator, Lockstep's transformations on
// Philox.
#include "lockstep/ops/random.h"

#include <cmath>
#include <mutex>
#include <string>

#include "lockstep/autograd/grad_mode.h"
#include "lockstep/ops/ops.h"
#include "lockstep/ops/detail/op_utils.h"
#include "ops/torch_random.h"

namespace lockstep {

namespace {

// Fills a host tensor of t's shape and dtype with fill(g, host) while holding the default
// generator's lock when `gen` is null, then copies it into t without recording autograd.
template <class F>
Tensor& draw_into(Tensor& t, Generator* gen, F fill) {
  Tensor host = Tensor::empty(t.shape(), TensorOptions(t.dtype()));
  {
    Generator& g = gen ? *gen : default_generator();
    std::unique_lock<std::mutex> lock(g.mutex(), std::defer_lock);
    if (!gen) lock.lock();
    fill(g, host);
  }
  NoGradGuard no_grad;
  t.copy_(host);
  return t;
}

bool is_mt19937(Generator* gen) {
  return (gen ? *gen : default_generator()).engine() == Generator::Engine::MT19937;
}

void check_float(const char* what, const Tensor& t) {
  if (!is_floating(t.dtype()))
    throw DTypeError(std::string(what) + ": expected a float dtype, got " + to_string(t.dtype()));
}

// Writes v(g) as t's dtype into every element of the host tensor.
template <class V>
void fill_each(Generator& g, Tensor& host, V v) {
  const std::int64_t n = host.numel();
  switch (host.dtype()) {
    case DType::Float32:
      for (std::int64_t i = 0; i < n; ++i) host.data_ptr<float>()[i] = static_cast<float>(v(g));
      break;
    case DType::Float64:
      for (std::int64_t i = 0; i < n; ++i) host.data_ptr<double>()[i] = static_cast<double>(v(g));
      break;
    case DType::Int64:
      for (std::int64_t i = 0; i < n; ++i)
        host.data_ptr<std::int64_t>()[i] = static_cast<std::int64_t>(v(g));
      break;
  }
}

}  // namespace

Tensor& uniform_(Tensor& t, double from, double to, Generator* gen) {
  check_float("uniform_", t);
  if (!is_mt19937(gen)) {
    NoGradGuard no_grad;
    t.copy_(add(mul(rand(t.shape(), t.options().requires_grad(false), gen), to - from), from));
    return t;
  }
  return draw_into(t, gen, [&](Generator& g, Tensor& h) {
    detail::visit_float(h.dtype(), [&](auto zero) {
      torch_random::uniform_fill(h.data_ptr<decltype(zero)>(), h.numel(), from, to, g);
    });
  });
}

Tensor& normal_(Tensor& t, double mean, double std, Generator* gen) {
  check_float("normal_", t);
  if (!(std >= 0.0)) throw ValueError("normal_: std must be >= 0, got " + std::to_string(std));
  if (!is_mt19937(gen)) {
    NoGradGuard no_grad;
    t.copy_(add(mul(randn(t.shape(), t.options().requires_grad(false), gen), std), mean));
    return t;
  }
  return draw_into(t, gen, [&](Generator& g, Tensor& h) {
    detail::visit_float(h.dtype(), [&](auto zero) {
      torch_random::normal_fill(h.data_ptr<decltype(zero)>(), h.numel(), mean, std, g);
    });
  });
}

Tensor& random_(Tensor& t, std::int64_t from, std::int64_t to, Generator* gen) {
  if (to <= from)
    throw ValueError("random_: expected from < to, got from=" + std::to_string(from) +
                     ", to=" + std::to_string(to));
  const auto range = static_cast<std::uint64_t>(to) - static_cast<std::uint64_t>(from);
  const bool torch = is_mt19937(gen);
  return draw_into(t, gen, [&](Generator& g, Tensor& h) {
    fill_each(g, h, [&](Generator& g) {
      return torch ? torch_random::random_from_to(g, range, from)
                   : from + static_cast<std::int64_t>(g.next_below(range));
    });
  });
}

Tensor& random_(Tensor& t, Generator* gen) {
  const bool torch = is_mt19937(gen);
  const bool single = t.dtype() == DType::Float32;
  return draw_into(t, gen, [&](Generator& g, Tensor& h) {
    if (h.dtype() == DType::Int64)
      fill_each(g, h, [&](Generator& g) {
        return torch ? torch_random::random_int64(g) : static_cast<std::int64_t>(g.next_u64() >> 1);
      });
    else
      fill_each(g, h, [&](Generator& g) {
        if (torch) return torch_random::random_float(g, single);
        return static_cast<double>(g.next_below((std::uint64_t{1} << (single ? 24 : 53)) + 1));
      });
  });
}

Tensor& bernoulli_(Tensor& t, double p, Generator* gen) {
  if (!(p >= 0.0 && p <= 1.0))
    throw ValueError("bernoulli_: p must be in [0, 1], got " + std::to_string(p));
  const bool torch = is_mt19937(gen);
  return draw_into(t, gen, [&](Generator& g, Tensor& h) {
    fill_each(g, h, [&](Generator& g) {
      return (torch ? torch_random::bernoulli(g, p) : g.next_double() < p) ? 1 : 0;
    });
  });
}

}  // namespace lockstep
