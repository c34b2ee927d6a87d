// GradientReducer (lockstep/parallel/gradient_reducer.h): the gradient buffer and its buckets,
// the hooks that mark a parameter's gradient ready during backward, and the end of a step
// (finalize / abandon: the remaining buckets and the flags). The flags are in
// gradient_reducer_flags.cpp, the buckets' collectives in gradient_reducer_collectives.cpp.
#include "lockstep/parallel/gradient_reducer.h"

#include <algorithm>

#include "lockstep/autograd/grad_mode.h"
#include "lockstep/autograd/node.h"
#include "lockstep/ops/ops.h"

namespace lockstep::parallel {

GradientReducer::GradientReducer(const FlatBuffer& flat, std::shared_ptr<dist::ProcessGroup> group,
                                 ReducerOptions options, int root)
    : flat_(flat), group_(std::move(group)), options_(options), root_(root) {
  if (!group_) throw ValueError("GradientReducer: null process group");
  if (options_.bucket_cap_bytes < 1)
    throw ValueError("GradientReducer: bucket_cap_bytes must be positive");
  if (root_ >= group_->size())
    throw ValueError("GradientReducer: root " + std::to_string(root_) + " out of range for " +
                     std::to_string(group_->size()) + " ranks");
  if (options_.compression == dist::WireFormat::BFloat16 && flat_.buffer.dtype() != DType::Float32)
    throw DTypeError(
        "GradientReducer: bfloat16 gradient compression takes float32 gradients, got " +
        to_string(flat_.buffer.dtype()));
  if (options_.scatter && options_.compression != dist::WireFormat::Native)
    throw ValueError(
        "GradientReducer: the reduce-scatter (ZeRO's) does not take bfloat16 compression");
  std::size_t n = flat_.params.size();
  // Flags (one per parameter, then the completion count) in front of the gradients, padded so
  // the gradients start on a 64-byte boundary.
  const auto es = static_cast<std::int64_t>(element_size(flat_.buffer.dtype()));
  const std::int64_t per_line = std::max<std::int64_t>(1, 64 / es);
  pad_ = (static_cast<std::int64_t>(n) + 1 + per_line - 1) / per_line * per_line;
  renew_buffer();
  bucket_of_.assign(n, -1);
  has_grad_.assign(n, 0);
  written_.assign(n, 0);
  // Buckets over parameters in reverse order; each is a contiguous element range.
  Bucket cur;
  bool open = false;
  for (std::size_t k = n; k-- > 0;) {
    std::int64_t lo = flat_.offsets[k], hi = lo + flat_.params[k].numel();
    if (open && (cur.hi - lo) * es > options_.bucket_cap_bytes) {
      buckets_.push_back(cur);
      open = false;
    }
    if (!open) {
      cur = Bucket{lo, hi, {}, 0};
      open = true;
    }
    cur.lo = lo;
    if (flat_.params[k].requires_grad()) {
      bucket_of_[k] = static_cast<int>(buckets_.size());
      cur.params.push_back(k);
    }
  }
  if (open) buckets_.push_back(cur);
  for (std::size_t k = 0; k < n; ++k) {
    if (bucket_of_[k] < 0) continue;
    Tensor p = flat_.params[k];
    hook_ids_.push_back(
        p.register_post_accumulate_grad_hook([this, k](Tensor&) { mark_ready(k); }));
  }
}

GradientReducer::~GradientReducer() {
  discard();
  std::size_t h = 0;
  for (std::size_t k = 0; k < flat_.params.size(); ++k)
    if (bucket_of_[k] >= 0) {
      Tensor p = flat_.params[k];
      p.remove_post_accumulate_grad_hook(hook_ids_[h++]);
      autograd::set_grad_destination(p, Tensor());
    }
}

void GradientReducer::renew_buffer() {
  grad_ = zeros({pad_ + flat_.numel}, flat_.buffer.options());
  grad_view_ = narrow(grad_, 0, pad_, flat_.numel);
}

void GradientReducer::prepare() {
  discard();  // what a failed step left behind
  waited_.clear();
  NoGradGuard no_grad;
  for (std::size_t k = 0; k < flat_.params.size(); ++k) {
    Tensor p = flat_.params[k];
    p.set_grad(Tensor());
    // Formulas that support it (linear's weight gradient) write straight into the slice.
    if (bucket_of_[k] >= 0) autograd::set_grad_destination(p, flat_.view_of(grad_view_, k));
    has_grad_[k] = 0;
    written_[k] = 0;
  }
  for (auto& b : buckets_) b.pending = b.params.size();
  next_bucket_ = 0;
  bytes_reduced_ = 0;
  active_ = true;
  completed_ = false;
}

void GradientReducer::seed(std::size_t i, const Tensor& grad) {
  NoGradGuard no_grad;
  Tensor view = flat_.view_of(grad_view_, i);
  view.copy_(grad);
  written_[i] = 1;
  autograd::set_grad_destination(flat_.params[i], Tensor());  // backward must add to the seed
}

void GradientReducer::mark_ready(std::size_t k) {
  if (!active_) return;  // outside a reducer step
  Tensor p = flat_.params[k];
  Tensor view = flat_.view_of(grad_view_, k);
  Tensor g = p.grad();
  if (g.defined()) {
    if (g.device_raw_data() != view.device_raw_data()) {
      // Backward's gradient in its own buffer (AccumulateGrad took it): into the slice.
      NoGradGuard no_grad;
      if (written_[k])
        view.add_(g);
      else
        view.copy_(g);
      p.set_grad(view);
    }  // else: written into the slice directly (gradient destination) or a repeated backward
    written_[k] = 1;
  }
  if (has_grad_[k]) return;  // a repeated backward: AccumulateGrad added into the slice
  has_grad_[k] = 1;
  --buckets_[static_cast<std::size_t>(bucket_of_[k])].pending;
  if (options_.overlap) start_ready_buckets();
}

void GradientReducer::start_ready_buckets() {
  // The last bucket waits for finalize() / abandon(): its reduction also says whether every rank
  // completed its backward.
  while (next_bucket_ + 1 < buckets_.size() && buckets_[next_bucket_].pending == 0)
    reduce_bucket(next_bucket_++);
}

void GradientReducer::abandon() {
  completed_ = false;
  reduce_rest();
}

void GradientReducer::finalize() {
  completed_ = true;
  reduce_rest();
}

void GradientReducer::reduce_rest() {
  NoGradGuard no_grad;
  active_ = false;
  try {
    if (!buckets_.empty()) {
      // Every bucket not started yet, then (with compression) the flags natively on their own;
      // all of them waited for before the flags are read.
      while (next_bucket_ < buckets_.size()) reduce_bucket(next_bucket_++);
      if (!flags_ride()) {
        write_flags();
        start(0, static_cast<std::int64_t>(flat_.params.size()) + 1, dist::WireFormat::Native);
      }
      wait_pending();
      read_flags();
    }
  } catch (...) {
    discard();  // no started reduction outlives the call
    throw;
  }
  for (std::size_t k = 0; k < flat_.params.size(); ++k) {
    Tensor p = flat_.params[k];
    p.set_grad(has_grad_[k] ? flat_.view_of(grad_view_, k) : Tensor());
    autograd::set_grad_destination(p, Tensor());
  }
}

}  // namespace lockstep::parallel
