// --lr-schedule (see lr_schedule.h).
#include "train/lr_schedule.h"

#include <charconv>
#include <cmath>

#include "lockstep/core/error.h"

namespace lockstep::app {

LrSchedule parse_lr_schedule(const std::string& text) {
  const std::string usage =
      "expected constant, step:EVERY:GAMMA (EVERY an integer >= 1, GAMMA a number >= 0) or "
      "cosine, got '" +
      text + "'";
  LrSchedule s;
  if (text == "constant") return s;
  if (text == "cosine") {
    s.kind = LrSchedule::Kind::Cosine;
    return s;
  }
  if (text.rfind("step:", 0) != 0) throw ValueError(usage);
  const std::size_t colon = text.find(':', 5);
  if (colon == std::string::npos) throw ValueError(usage);
  const std::string every = text.substr(5, colon - 5), gamma = text.substr(colon + 1);
  auto [p1, e1] = std::from_chars(every.data(), every.data() + every.size(), s.every);
  auto [p2, e2] = std::from_chars(gamma.data(), gamma.data() + gamma.size(), s.gamma);
  if (every.empty() || e1 != std::errc() || p1 != every.data() + every.size() || s.every < 1 ||
      gamma.empty() || e2 != std::errc() || p2 != gamma.data() + gamma.size() ||
      !std::isfinite(s.gamma) || s.gamma < 0.0)
    throw ValueError(usage);
  s.kind = LrSchedule::Kind::Step;
  return s;
}

std::unique_ptr<optim::LRScheduler> make_scheduler(const LrSchedule& schedule,
                                                   optim::Optimizer& optimizer,
                                                   std::int64_t epochs) {
  switch (schedule.kind) {
    case LrSchedule::Kind::Constant:
      return nullptr;
    case LrSchedule::Kind::Step:
      return std::make_unique<optim::StepLR>(optimizer, schedule.every, schedule.gamma);
    case LrSchedule::Kind::Cosine:
      return std::make_unique<optim::CosineAnnealingLR>(optimizer, epochs);
  }
  return nullptr;
}

}  // namespace lockstep::app
