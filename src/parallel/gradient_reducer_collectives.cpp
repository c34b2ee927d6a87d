// GradientReducer's collectives: a bucket's reduction (all-reduce, reduce to the root, or the
// reduce-scatter of ZeRO, in chunks padded to one size), started asynchronously (blocking inside
// a CUDA graph capture), and the wait for the started ones.
#include <algorithm>
#include <exception>

#include "lockstep/autograd/grad_mode.h"
#include "lockstep/cuda/graph.h"
#include "lockstep/ops/ops.h"
#include "lockstep/parallel/gradient_reducer.h"

namespace lockstep::parallel {

void GradientReducer::reduce_bucket(std::size_t b) {
  NoGradGuard no_grad;
  const Bucket& bucket = buckets_[b];
  // Slices that got no gradient on this rank contribute zeros.
  for (std::size_t k : bucket.params)
    if (!written_[k]) {
      flat_.view_of(grad_view_, k).zero_();
      written_[k] = 1;
    }
  // The last bucket may carry the flags, which sit just in front of it (flags_ride()).
  const bool flags = b + 1 == buckets_.size() && flags_ride();
  if (flags) write_flags();
  const std::int64_t lo = flags ? 0 : pad_ + bucket.lo, hi = pad_ + bucket.hi;
  if (options_.scatter) return start_scatter(bucket.lo, bucket.hi);
  start(lo, hi, options_.compression);
}

void GradientReducer::start(std::int64_t lo, std::int64_t hi, dist::WireFormat wire) {
  Tensor slice = narrow(grad_, 0, lo, hi - lo);
  if (!grad_.device().is_cpu() && cuda::is_current_stream_capturing(grad_.device().index)) {
    // Captured into a CUDA graph: the blocking call, so that nothing started is left pending
    // across the capture (the graph holds what it enqueued on this stream).
    if (wire != dist::WireFormat::Native)
      throw ValueError(
          "GradientReducer: bfloat16 gradient compression is not captured into CUDA graphs");
    if (root_ < 0)
      group_->all_reduce(slice, dist::ReduceOp::Sum);
    else
      group_->reduce(slice, root_, dist::ReduceOp::Sum);
  } else {
    pending_.push_back({root_ < 0 ? group_->all_reduce_async(slice, dist::ReduceOp::Sum, wire)
                                  : group_->reduce_async(slice, root_, dist::ReduceOp::Sum, wire),
                        slice});
  }
  if (group_->size() > 1)  // a group of one moves nothing
    bytes_reduced_ += slice.numel() * dist::ProcessGroup::wire_bytes(slice.dtype(), wire);
}

void GradientReducer::start_scatter(std::int64_t lo, std::int64_t hi) {
  const int n = group_->size();
  const std::int64_t c = (hi - lo + n - 1) / n;
  Pending p;
  for (int j = 0; j < n; ++j) {
    const std::int64_t a = std::min(hi, lo + j * c), e = std::min(hi, a + c);
    Tensor in = narrow(grad_view_, 0, a, e - a);
    if (j == group_->rank()) p.chunk = in;
    if (e - a < c) {  // a short chunk travels padded with zeros
      Tensor padded = zeros({c}, grad_view_.options());
      narrow(padded, 0, 0, e - a).copy_(in);
      in = padded;
    }
    p.inputs.push_back(in);
  }
  // The output is a buffer of its own: this member's input chunk stays intact until the wait.
  p.slice = zeros({c}, grad_view_.options());
  p.work = group_->reduce_scatter_async(p.slice, p.inputs, dist::ReduceOp::Sum);
  pending_.push_back(std::move(p));
  if (n > 1) bytes_reduced_ += (hi - lo) * static_cast<std::int64_t>(element_size(grad_.dtype()));
}

void GradientReducer::wait_pending() {
  std::exception_ptr first;
  for (Pending& p : pending_) try {
      p.work->wait();
      if (p.chunk.defined()) {  // a reduce-scatter: the chunk into its place in the buffer
        NoGradGuard no_grad;
        p.chunk.copy_(narrow(p.slice, 0, 0, p.chunk.numel()));
      }
    } catch (...) {
      if (!first) first = std::current_exception();
    }
  // Kept until the next step: an error object is shared with the thread that ran the collective,
  // and the caller still reads it after this call (ThreadSanitizer cannot see the uninstrumented
  // exception_ptr's count; dropping the Work here could leave its last release to that thread).
  for (Pending& p : pending_) waited_.push_back(std::move(p.work));
  pending_.clear();
  if (first) std::rethrow_exception(first);
}

void GradientReducer::discard() {
  if (pending_.empty()) return;
  try {
    wait_pending();
  } catch (...) {
  }
}

}  // namespace lockstep::parallel
