// In-place samplers uniform_, normal_, random_, bernoulli_ (lockstep/ops/random.h): PyTorch's
// kernels (src/ops/torch_random.cpp) on an MT19937 generator, Lockstep's transformations on
// Philox; and multinomial, by inverse CDF on the same uniform draws.
#include "lockstep/ops/random.h"

#include <algorithm>
#include <cmath>
#include <mutex>
#include <numeric>
#include <string>
#include <vector>

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

Tensor multinomial(const Tensor& input, std::int64_t num_samples, bool replacement,
                   Generator* gen) {
  detail::check_defined("multinomial", input);
  if (!is_floating(input.dtype()))
    throw DTypeError("multinomial only supports floating-point dtypes for input, got: " +
                     to_string(input.dtype()));
  if (input.dim() < 1 || input.dim() > 2)
    throw ShapeError("multinomial: prob_dist must be 1 or 2 dim, got " + input.shape().str());
  if (num_samples <= 0)
    throw ValueError("multinomial: cannot sample n_sample <= 0 samples (got " +
                     std::to_string(num_samples) + ")");
  const std::int64_t cats = input.size(-1), rows = input.dim() == 1 ? 1 : input.size(0);
  if (!replacement && num_samples > cats)
    throw ValueError("multinomial: cannot sample n_sample > prob_dist.size(-1) samples without "
                     "replacement (" + std::to_string(num_samples) + " > " + std::to_string(cats) + ")");
  const std::vector<double> p = input.to(kFloat64).to_vector<double>();
  for (std::int64_t r = 0; r < rows; ++r) {
    double sum = 0;
    for (std::int64_t j = 0; j < cats; ++j) {
      const double v = p[static_cast<std::size_t>(r * cats + j)];
      if (!(v >= 0 && std::isfinite(v)))
        throw ValueError("multinomial: probability tensor contains either `inf`, `nan` or "
                         "element < 0 (row " + std::to_string(r) + ", column " + std::to_string(j) + ")");
      sum += v;
    }
    if (!(sum > 0))
      throw ValueError("multinomial: invalid multinomial distribution (sum of probabilities <= 0) "
                       "in row " + std::to_string(r));
  }
  const Shape shape = input.dim() == 1 ? Shape{num_samples} : Shape{rows, num_samples};
  Tensor out = Tensor::empty(shape, TensorOptions(kInt64));
  const bool torch = is_mt19937(gen);
  Generator& g = gen ? *gen : default_generator();
  std::unique_lock<std::mutex> lock(g.mutex(), std::defer_lock);
  if (!gen) lock.lock();
  std::int64_t* po = out.data_ptr<std::int64_t>();
  std::vector<double> w(static_cast<std::size_t>(cats)), cum(w.size());
  std::vector<char> taken(w.size());
  for (std::int64_t r = 0; r < rows; ++r) {
    std::copy_n(p.begin() + r * cats, cats, w.begin());
    std::fill(taken.begin(), taken.end(), 0);
    for (std::int64_t s = 0; s < num_samples; ++s) {
      std::partial_sum(w.begin(), w.end(), cum.begin());
      const double total = cum.back();
      std::int64_t k = 0;
      if (total > 0) {
        // The first category whose cumulative weight exceeds u·total (one of positive weight);
        // past the end only when u·total rounds up to total: the last positive one.
        const double u = torch ? torch_random::uniform_real(g, 0.0, 1.0) : g.next_double();
        k = std::upper_bound(cum.begin(), cum.end(), u * total) - cum.begin();
        while (k == cats || w[static_cast<std::size_t>(k)] == 0) --k;
      } else {  // without replacement and no positive weight left: the unchosen ones in order
        k = std::find(taken.begin(), taken.end(), 0) - taken.begin();
      }
      po[r * num_samples + s] = k;
      taken[static_cast<std::size_t>(k)] = 1;
      if (!replacement) w[static_cast<std::size_t>(k)] = 0;
    }
  }
  return input.device().is_cpu() ? out : out.to(input.device());
}

}  // namespace lockstep
