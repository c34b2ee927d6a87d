// Selects which kernel family runs the ops on this thread: the fast kernels (OpenBLAS GEMM,
// vectorised fast paths) or the plain-loop reference kernels that are the oracle in tests.
#pragma once

namespace lockstep::ops {

enum class KernelMode { Fast, Reference };

/// Mode of the calling thread (Fast by default).
KernelMode kernel_mode();
void set_kernel_mode(KernelMode m);

/// RAII: runs a scope with the given kernel mode on this thread.
class KernelModeGuard {
 public:
  explicit KernelModeGuard(KernelMode m) : prev_(kernel_mode()) { set_kernel_mode(m); }
  ~KernelModeGuard() { set_kernel_mode(prev_); }
  KernelModeGuard(const KernelModeGuard&) = delete;
  KernelModeGuard& operator=(const KernelModeGuard&) = delete;

 private:
  KernelMode prev_;
};

}  // namespace lockstep::ops
