// --lr-schedule: which per-epoch LR scheduler (torch.optim.lr_scheduler) the run uses.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "lockstep/optim/lr_scheduler.h"

namespace lockstep::app {

struct LrSchedule {
  enum class Kind { Constant, Step, Cosine };
  Kind kind = Kind::Constant;
  /// step:EVERY:GAMMA — StepLR(step_size = every, gamma).
  std::int64_t every = 0;
  double gamma = 0.0;
};

/// Parses `constant`, `step:EVERY:GAMMA` (EVERY an integer >= 1, GAMMA a finite number >= 0) or
/// `cosine`. Throws ValueError naming the text.
LrSchedule parse_lr_schedule(const std::string& text);

/// The scheduler for `schedule` over `optimizer` (nullptr for constant): StepLR(every, gamma),
/// or CosineAnnealingLR(T_max = epochs, eta_min = 0). Stepped once after every epoch.
std::unique_ptr<optim::LRScheduler> make_scheduler(const LrSchedule& schedule,
                                                   optim::Optimizer& optimizer,
                                                   std::int64_t epochs);

}  // namespace lockstep::app
