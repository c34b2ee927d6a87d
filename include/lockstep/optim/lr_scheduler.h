// Learning-rate schedulers stepped once per epoch (WarmupCosineLR: once per iteration), as torch.optim.lr_scheduler (PyTorch 1.13,
// torch/optim/lr_scheduler.py): the constructor records the optimizer's lr as base_lr and makes
// the initial step (last_epoch -1 -> 0, lr unchanged); each step() adds one to last_epoch and
// sets the optimizer's lr to compute_lr(), PyTorch's get_lr() in its recursive ("chainable")
// form: it reads the optimizer's current lr, so a change made to it between steps carries over,
// exactly as in PyTorch. The closed form (_get_closed_form_lr, used by PyTorch only for the
// deprecated step(epoch)) is not used.
//
//   scheduler = StepLR(optimizer, 30, 0.1);
//   for (epoch ...) { train(...); scheduler.step(); }
#pragma once

#include <cstdint>

#include "lockstep/core/state_dict.h"
#include "lockstep/optim/optimizer.h"

namespace lockstep::optim {

/// torch.optim.lr_scheduler._LRScheduler for an optimizer with one parameter group. The
/// optimizer must outlive the scheduler.
class LRScheduler {
 public:
  /// Records base_lr = optimizer.lr(), last_epoch = -1. Derived constructors make the initial
  /// step (last_epoch = 0) once their parameters are set, as PyTorch's constructors do.
  explicit LRScheduler(Optimizer& optimizer);
  virtual ~LRScheduler() = default;
  LRScheduler(const LRScheduler&) = delete;
  LRScheduler& operator=(const LRScheduler&) = delete;

  /// last_epoch += 1, then optimizer.set_lr(compute_lr()); get_last_lr() returns that lr.
  void step();
  /// The lr the last step() set (PyTorch's get_last_lr()[0]).
  double get_last_lr() const { return last_lr_; }
  /// Number of step() calls after the initial one (0 right after construction).
  std::int64_t last_epoch() const { return last_epoch_; }
  /// The optimizer's lr when the scheduler was built (PyTorch's base_lrs[0] / initial_lr).
  double base_lr() const { return base_lr_; }

  /// Keys "last_epoch" (0-d int64), "base_lr" and "last_lr" (0-d float64). The scheduler's own
  /// parameters (step_size, gamma, T_max, eta_min) are not saved: they come from its
  /// constructor (unlike PyTorch, whose state_dict holds every attribute).
  StateDict state_dict() const;
  /// Restores state_dict() output: a fresh scheduler built with the same parameters then steps
  /// exactly (bit-identically) as the saved one would have. Also sets the optimizer's lr to
  /// last_lr (PyTorch leaves that to the optimizer's own load_state_dict, which holds the same
  /// value), so restoring the scheduler alone resumes the schedule. StateDictError for a missing
  /// or unknown key, a tensor that is not a single element, last_epoch not a non-negative
  /// integer, or an lr that is negative or not finite; nothing is modified when it throws.
  void load_state_dict(const StateDict& state);

 protected:
  /// PyTorch's get_lr() for the current last_epoch (already advanced), in its recursive form.
  virtual double compute_lr() = 0;
  /// The constructor's initial step (PyTorch's _initial_step); derived constructors call it.
  void initial_step() { step(); }

  Optimizer& optimizer_;
  double base_lr_ = 0.0;
  double last_lr_ = 0.0;
  std::int64_t last_epoch_ = -1;
};

/// torch.optim.lr_scheduler.StepLR: multiplies the lr by gamma every step_size epochs. Recursive
/// form (get_lr): lr at last_epoch e is lr·gamma when e > 0 and e % step_size == 0, else lr
/// unchanged; from base lr l0 this gives l0·gamma^(e // step_size).
class StepLR : public LRScheduler {
 public:
  /// ValueError for step_size < 1, or gamma negative or not finite (the optimizer refuses a
  /// negative lr; PyTorch does not check these).
  StepLR(Optimizer& optimizer, std::int64_t step_size, double gamma = 0.1);
  std::int64_t step_size() const { return step_size_; }
  double gamma() const { return gamma_; }

 protected:
  double compute_lr() override;

 private:
  std::int64_t step_size_;
  double gamma_;
};

/// torch.optim.lr_scheduler.CosineAnnealingLR (SGDR without restarts, Loshchilov & Hutter 2016):
/// closed form eta_min + (l0 − eta_min)(1 + cos(π·e/T_max))/2, computed by PyTorch's recursive
/// get_lr(), which this reproduces operation by operation (e = last_epoch, lr = current lr):
///   e == 0:                          lr
///   (e − 1 − T_max) % (2·T_max) == 0: lr + (l0 − eta_min)(1 − cos(π/T_max))/2
///   otherwise:                       (1 + cos(π·e/T_max)) / (1 + cos(π·(e−1)/T_max))
///                                    · (lr − eta_min) + eta_min
/// Past T_max the lr rises again (a cosine of period 2·T_max), as in PyTorch. PyTorch's branch
/// for `_step_count == 1 and last_epoch > 0` only applies to a scheduler built with
/// last_epoch != -1, which this API does not offer.
class CosineAnnealingLR : public LRScheduler {
 public:
  /// ValueError for T_max < 1, or eta_min negative or not finite (the optimizer refuses a
  /// negative lr; PyTorch does not check these).
  CosineAnnealingLR(Optimizer& optimizer, std::int64_t T_max, double eta_min = 0.0);
  std::int64_t T_max() const { return T_max_; }
  double eta_min() const { return eta_min_; }

 protected:
  double compute_lr() override;

 private:
  std::int64_t T_max_;
  double eta_min_;
};

/// nanoGPT's schedule (karpathy/nanoGPT train.py, get_lr), stepped once per ITERATION: linear
/// warmup, then cosine decay to min_lr at lr_decay_iters, then min_lr. With l0 = base_lr (the
/// optimizer's lr at construction, nanoGPT's learning_rate) and it = last_epoch (0 right after
/// construction, the lr of iteration 0):
///   it < warmup_iters:     l0·(it + 1)/(warmup_iters + 1)
///   it > lr_decay_iters:   min_lr
///   otherwise:             min_lr + ½(1 + cos(π·r))·(l0 − min_lr),
///                          r = (it − warmup_iters)/(lr_decay_iters − warmup_iters)
/// in double precision, as Python computes it. A closed form: it ignores changes made to the
/// optimizer's lr between steps (nanoGPT sets the lr from get_lr before every step).
///   WarmupCosineLR sched(opt, 100, 5000, 6e-5);
///   for (it ...) { ...; opt.step(); sched.step(); }
class WarmupCosineLR : public LRScheduler {
 public:
  /// ValueError for warmup_iters < 0, lr_decay_iters <= warmup_iters (the cosine would have no
  /// length; nanoGPT asserts 0 <= r <= 1), or min_lr negative or not finite.
  WarmupCosineLR(Optimizer& optimizer, std::int64_t warmup_iters, std::int64_t lr_decay_iters,
                 double min_lr);
  /// get_lr(it) for this schedule (the lr of iteration `it`), whatever the current iteration.
  double lr_at(std::int64_t it) const;
  std::int64_t warmup_iters() const { return warmup_iters_; }
  std::int64_t lr_decay_iters() const { return lr_decay_iters_; }
  double min_lr() const { return min_lr_; }

 protected:
  double compute_lr() override { return lr_at(last_epoch_); }

 private:
  std::int64_t warmup_iters_, lr_decay_iters_;
  double min_lr_;
};

}  // namespace lockstep::optim
