#include "lockstep/autograd/grad_mode.h"

#include "lockstep/ops/kernel_mode.h"

namespace lockstep {

namespace {
thread_local bool g_grad_enabled = true;
thread_local ops::KernelMode g_kernel_mode = ops::KernelMode::Fast;
}  // namespace

bool GradMode::is_enabled() { return g_grad_enabled; }
void GradMode::set_enabled(bool enabled) { g_grad_enabled = enabled; }

namespace ops {
KernelMode kernel_mode() { return g_kernel_mode; }
void set_kernel_mode(KernelMode m) { g_kernel_mode = m; }
}  // namespace ops

}  // namespace lockstep
