// Grad mode: whether ops record autograd history on the calling thread (torch.no_grad).
#pragma once

namespace lockstep {

struct GradMode {
  static bool is_enabled();
  static void set_enabled(bool enabled);
};

/// RAII guard that disables gradient recording in its scope (torch.no_grad / torch::NoGradGuard).
class NoGradGuard {
 public:
  NoGradGuard() : prev_(GradMode::is_enabled()) { GradMode::set_enabled(false); }
  ~NoGradGuard() { GradMode::set_enabled(prev_); }
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool prev_;
};

/// PyTorch's spelling: `lockstep::no_grad guard;`.
using no_grad = NoGradGuard;

/// RAII guard that enables gradient recording in its scope (torch.enable_grad).
class EnableGradGuard {
 public:
  EnableGradGuard() : prev_(GradMode::is_enabled()) { GradMode::set_enabled(true); }
  ~EnableGradGuard() { GradMode::set_enabled(prev_); }
  EnableGradGuard(const EnableGradGuard&) = delete;
  EnableGradGuard& operator=(const EnableGradGuard&) = delete;

 private:
  bool prev_;
};

/// RAII guard that sets gradient recording on or off in its scope (LibTorch's
/// `torch::AutoGradMode(enabled)`), restoring the previous mode when it ends.
class AutoGradMode {
 public:
  explicit AutoGradMode(bool enabled) : prev_(GradMode::is_enabled()) {
    GradMode::set_enabled(enabled);
  }
  ~AutoGradMode() { GradMode::set_enabled(prev_); }
  AutoGradMode(const AutoGradMode&) = delete;
  AutoGradMode& operator=(const AutoGradMode&) = delete;

 private:
  bool prev_;
};

}  // namespace lockstep
