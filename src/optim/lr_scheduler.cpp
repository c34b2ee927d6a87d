#include "lockstep/optim/lr_scheduler.h"

#include <cmath>
#include <numbers>
#include <string>

#include "lockstep/core/format.h"

namespace lockstep::optim {

namespace {

// The single element of state[key]; StateDictError when missing or not one element.
const Tensor& single(const StateDict& state, const std::string& key) {
  const Tensor* t = state.find(key);
  if (t == nullptr) throw StateDictError("LRScheduler load_state_dict: missing key '" + key + "'");
  if (!t->defined() || t->numel() != 1)
    throw StateDictError("LRScheduler load_state_dict: key '" + key +
                         "': expected a single-element tensor, got " +
                         (t->defined() ? t->shape().str() : std::string("undefined")));
  return *t;
}

double lr_value(const StateDict& state, const std::string& key) {
  double v = single(state, key).item();
  if (!std::isfinite(v) || v < 0)
    throw StateDictError("LRScheduler load_state_dict: key '" + key + "': learning rate " + exact_string(v) +
                         " is negative or not finite");
  return v;
}

}  // namespace

LRScheduler::LRScheduler(Optimizer& optimizer)
    : optimizer_(optimizer), base_lr_(optimizer.lr()), last_lr_(optimizer.lr()) {}

void LRScheduler::step() {
  ++last_epoch_;
  try {
    optimizer_.set_lr(compute_lr());
  } catch (...) {
    --last_epoch_;  // a refused lr leaves the scheduler as it was
    throw;
  }
  last_lr_ = optimizer_.lr();
}

StateDict LRScheduler::state_dict() const {
  StateDict sd;
  sd.insert("last_epoch", scalar_tensor(static_cast<double>(last_epoch_), kInt64));
  sd.insert("base_lr", scalar_tensor(base_lr_, kFloat64));
  sd.insert("last_lr", scalar_tensor(last_lr_, kFloat64));
  return sd;
}

void LRScheduler::load_state_dict(const StateDict& state) {
  for (const auto& [key, value] : state)
    if (key != "last_epoch" && key != "base_lr" && key != "last_lr")
      throw StateDictError("LRScheduler load_state_dict: unknown key '" + key +
                           "' (expected last_epoch, base_lr, last_lr)");
  const double epoch = single(state, "last_epoch").item();
  if (!(epoch >= 0) || epoch != std::floor(epoch) || epoch > 9.0e15)
    throw StateDictError("LRScheduler load_state_dict: key 'last_epoch': " + exact_string(epoch) +
                         " is not a non-negative integer");
  const double base = lr_value(state, "base_lr");
  const double last = lr_value(state, "last_lr");
  optimizer_.set_lr(last);
  last_epoch_ = static_cast<std::int64_t>(epoch);
  base_lr_ = base;
  last_lr_ = last;
}

// ---- StepLR ----------------------------------------------------------------------------------

StepLR::StepLR(Optimizer& optimizer, std::int64_t step_size, double gamma)
    : LRScheduler(optimizer), step_size_(step_size), gamma_(gamma) {
  if (step_size < 1)
    throw ValueError("StepLR: step_size must be at least 1, got " + std::to_string(step_size));
  if (!std::isfinite(gamma) || gamma < 0)
    throw ValueError("StepLR: gamma must be finite and non-negative, got " + exact_string(gamma));
  initial_step();
}

double StepLR::compute_lr() {
  const double lr = optimizer_.lr();
  if (last_epoch_ == 0 || last_epoch_ % step_size_ != 0) return lr;
  return lr * gamma_;
}

// ---- CosineAnnealingLR -----------------------------------------------------------------------

CosineAnnealingLR::CosineAnnealingLR(Optimizer& optimizer, std::int64_t T_max, double eta_min)
    : LRScheduler(optimizer), T_max_(T_max), eta_min_(eta_min) {
  if (T_max < 1)
    throw ValueError("CosineAnnealingLR: T_max must be at least 1, got " + std::to_string(T_max));
  if (!std::isfinite(eta_min) || eta_min < 0)
    throw ValueError("CosineAnnealingLR: eta_min must be finite and non-negative, got " +
                     exact_string(eta_min));
  initial_step();
}

double CosineAnnealingLR::compute_lr() {
  // Each expression keeps Python's evaluation order (left to right for * and /), so the result
  // has the same rounding as PyTorch's get_lr().
  constexpr double pi = std::numbers::pi;  // math.pi
  const double lr = optimizer_.lr();
  const auto e = static_cast<double>(last_epoch_);
  const auto T = static_cast<double>(T_max_);
  if (last_epoch_ == 0) return lr;
  // Python's % differs from C++'s for negative operands, but both are 0 exactly when
  // 2·T_max divides (e − 1 − T_max).
  if ((last_epoch_ - 1 - T_max_) % (2 * T_max_) == 0)
    return lr + (base_lr_ - eta_min_) * (1 - std::cos(pi / T)) / 2;
  return (1 + std::cos(pi * e / T)) / (1 + std::cos(pi * (e - 1) / T)) * (lr - eta_min_) + eta_min_;
}

WarmupCosineLR::WarmupCosineLR(Optimizer& optimizer, std::int64_t warmup_iters,
                               std::int64_t lr_decay_iters, double min_lr)
    : LRScheduler(optimizer),
      warmup_iters_(warmup_iters),
      lr_decay_iters_(lr_decay_iters),
      min_lr_(min_lr) {
  if (warmup_iters < 0)
    throw ValueError("WarmupCosineLR: warmup_iters must be non-negative, got " +
                     std::to_string(warmup_iters));
  if (lr_decay_iters <= warmup_iters)
    throw ValueError("WarmupCosineLR: lr_decay_iters (" + std::to_string(lr_decay_iters) +
                     ") must be greater than warmup_iters (" + std::to_string(warmup_iters) +
                     "): the cosine decay runs from one to the other");
  if (!std::isfinite(min_lr) || min_lr < 0)
    throw ValueError("WarmupCosineLR: min_lr must be finite and non-negative, got " +
                     exact_string(min_lr));
  initial_step();
}

double WarmupCosineLR::lr_at(std::int64_t it) const {
  // nanoGPT's get_lr, expression by expression (Python evaluates * and / left to right).
  const double lr = base_lr_;
  if (it < warmup_iters_)
    return lr * static_cast<double>(it + 1) / static_cast<double>(warmup_iters_ + 1);
  if (it > lr_decay_iters_) return min_lr_;
  const double decay_ratio = static_cast<double>(it - warmup_iters_) /
                             static_cast<double>(lr_decay_iters_ - warmup_iters_);
  const double coeff = 0.5 * (1.0 + std::cos(std::numbers::pi * decay_ratio));
  return min_lr_ + coeff * (lr - min_lr_);
}

}  // namespace lockstep::optim
