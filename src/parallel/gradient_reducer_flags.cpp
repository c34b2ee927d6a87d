// GradientReducer's flags: one has-gradient flag per parameter and a completion flag, written in
// front of the gradients (so they are reduced with the last bucket, or on their own), and read
// back after the reduction; on the host, on a GPU, or inside a CUDA graph capture.
#include <span>
#include <vector>

#include "lockstep/autograd/grad_mode.h"
#include "lockstep/cuda/graph.h"
#include "lockstep/ops/ops.h"
#include "lockstep/parallel/gradient_reducer.h"
#include "lockstep/ops/detail/op_utils.h"

namespace lockstep::parallel {

// Writes this rank's has-grad flags and completion flag in front of the gradients.
void GradientReducer::write_flags() {
  const std::size_t n = flat_.params.size();
  if (!grad_.device().is_cpu() && cuda::is_current_stream_capturing(grad_.device().index)) {
    // Captured into a CUDA graph: no upload (a replay would re-read the staging buffer); each
    // flag is a fill with its value in the kernel's arguments, which the graph keeps.
    NoGradGuard no_grad;
    for (std::size_t k = 0; k <= n; ++k)
      narrow(grad_, 0, static_cast<std::int64_t>(k), 1)
          .fill_(k < n ? (has_grad_[k] ? 1.0 : 0.0) : (completed_ ? 1.0 : 0.0));
    return;
  }
  if (!grad_.device().is_cpu()) {
    // A GPU buffer: the flags are made on the host and copied in front of the gradients.
    std::vector<double> f(n + 1);
    for (std::size_t k = 0; k < n; ++k) f[k] = has_grad_[k] ? 1.0 : 0.0;
    f[n] = completed_ ? 1.0 : 0.0;
    NoGradGuard no_grad;
    narrow(grad_, 0, 0, static_cast<std::int64_t>(n) + 1)
        .copy_(tensor(std::span<const double>(f)).to(grad_.dtype()));
    return;
  }
  lockstep::detail::visit_float(grad_.dtype(), [&](auto zero) {
    using T = decltype(zero);
    T* f = grad_.data_ptr<T>();
    for (std::size_t k = 0; k < n; ++k) f[k] = has_grad_[k] ? T(1) : T(0);
    f[n] = completed_ ? T(1) : T(0);
  });
}

// After the flags' reduction: which parameters got a gradient on any rank, how many completed.
void GradientReducer::read_flags() {
  const std::size_t n = flat_.params.size();
  if (!grad_.device().is_cpu() && cuda::is_current_stream_capturing(grad_.device().index)) {
    // Captured into a CUDA graph (one rank only, see DataParallel's graph rules): the reduced
    // flags of a group of one are this rank's own, known on the host; nothing is read back.
    if (group_->size() != 1)
      throw ValueError(
          "GradientReducer: CUDA graph capture needs a process group of one rank "
          "(this one has " +
          std::to_string(group_->size()) +
          "): the has-gradient flags of other ranks would be read on the host");
    completed_ranks_ = completed_ ? 1 : 0;
    return;
  }
  if (!grad_.device().is_cpu()) {
    // A GPU buffer: one copy of the reduced flags to the host (waits for the reduction).
    const auto f = narrow(grad_, 0, 0, static_cast<std::int64_t>(n) + 1).to_vector<double>();
    for (std::size_t k = 0; k < n; ++k) has_grad_[k] = f[k] > 0 ? 1 : 0;
    completed_ranks_ = static_cast<int>(f[n] + 0.5);
    return;
  }
  lockstep::detail::visit_float(grad_.dtype(), [&](auto zero) {
    const auto* f = grad_.data_ptr<decltype(zero)>();
    for (std::size_t k = 0; k < n; ++k) has_grad_[k] = f[k] > 0 ? 1 : 0;
    completed_ranks_ = static_cast<int>(f[n] + 0.5);
  });
}

bool GradientReducer::flags_ride() const {
  return options_.compression == dist::WireFormat::Native && !options_.scatter;
}

}  // namespace lockstep::parallel
