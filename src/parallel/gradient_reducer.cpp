#include "lockstep/parallel/gradient_reducer.h"

#include <cstring>

#include "lockstep/autograd/grad_mode.h"
#include "lockstep/ops/ops.h"

namespace lockstep::parallel {

GradientReducer::GradientReducer(const FlatBuffer& flat, std::shared_ptr<dist::ProcessGroup> group,
                                 ReducerOptions options)
    : flat_(flat), group_(std::move(group)), options_(options) {
  if (!group_) throw ValueError("GradientReducer: null process group");
  if (options_.bucket_cap_bytes < 1)
    throw ValueError("GradientReducer: bucket_cap_bytes must be positive");
  grad_ = zeros({flat_.numel}, flat_.buffer.options());
  std::size_t n = flat_.params.size();
  bucket_of_.assign(n, -1);
  has_grad_.assign(n, 0);
  // Buckets over parameters in reverse order; each is a contiguous element range.
  std::int64_t es = static_cast<std::int64_t>(element_size(flat_.buffer.dtype()));
  Bucket cur;
  bool open = false;
  for (std::size_t k = n; k-- > 0;) {
    std::int64_t lo = flat_.offsets[k], hi = lo + flat_.params[k].numel();
    if (open && (cur.hi - lo) * es > options_.bucket_cap_bytes) {
      buckets_.push_back(cur);
      open = false;
    }
    if (!open) {
      cur = Bucket{lo, hi, 0, 0};
      open = true;
    }
    cur.lo = lo;
    if (flat_.params[k].requires_grad()) {
      bucket_of_[k] = static_cast<int>(buckets_.size());
      ++cur.pending_init;
    }
  }
  if (open) buckets_.push_back(cur);
  for (std::size_t k = 0; k < n; ++k) {
    if (bucket_of_[k] < 0) continue;
    Tensor p = flat_.params[k];
    hook_ids_.push_back(p.register_post_accumulate_grad_hook([this, k](Tensor&) { mark_ready(k); }));
  }
}

GradientReducer::~GradientReducer() {
  std::size_t h = 0;
  for (std::size_t k = 0; k < flat_.params.size(); ++k)
    if (bucket_of_[k] >= 0) {
      Tensor p = flat_.params[k];
      p.remove_post_accumulate_grad_hook(hook_ids_[h++]);
    }
}

void GradientReducer::prepare() {
  NoGradGuard no_grad;
  grad_.zero_();
  for (std::size_t k = 0; k < flat_.params.size(); ++k) {
    Tensor p = flat_.params[k];
    p.set_grad(bucket_of_[k] >= 0 ? flat_.view_of(grad_, k) : Tensor());
    has_grad_[k] = 0;
  }
  for (auto& b : buckets_) b.pending = b.pending_init;
  next_bucket_ = 0;
  bytes_reduced_ = 0;
  active_ = true;
}

void GradientReducer::mark_ready(std::size_t k) {
  if (!active_ || has_grad_[k]) return;  // outside a reducer step, or a repeated backward
  has_grad_[k] = 1;
  --buckets_[static_cast<std::size_t>(bucket_of_[k])].pending;
  if (options_.overlap) reduce_ready_buckets();
}

void GradientReducer::reduce_ready_buckets() {
  while (next_bucket_ < buckets_.size() && buckets_[next_bucket_].pending == 0)
    reduce_bucket(next_bucket_++);
}

void GradientReducer::reduce_bucket(std::size_t b) {
  Tensor slice = narrow(grad_, 0, buckets_[b].lo, buckets_[b].hi - buckets_[b].lo);
  group_->all_reduce(slice, dist::ReduceOp::Sum);
  bytes_reduced_ += slice.numel() * static_cast<std::int64_t>(element_size(slice.dtype()));
}

void GradientReducer::finalize() {
  NoGradGuard no_grad;
  active_ = false;
  while (next_bucket_ < buckets_.size()) reduce_bucket(next_bucket_++);
  Tensor flags = tensor(std::span<const std::int64_t>(has_grad_));
  group_->all_reduce(flags, dist::ReduceOp::Max);
  auto agreed = flags.to_vector<std::int64_t>();
  for (std::size_t k = 0; k < flat_.params.size(); ++k) {
    has_grad_[k] = agreed[k];
    if (!agreed[k]) {
      Tensor p = flat_.params[k];
      p.set_grad(Tensor());
    }
  }
}

}  // namespace lockstep::parallel
