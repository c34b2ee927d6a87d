// HybridGroup's gathers (hybrid_group.h).
#include "lockstep/dist/detail/hybrid_group.h"

#include "lockstep/autograd/grad_mode.h"
#include "lockstep/ops/ops.h"

namespace lockstep::dist::detail {

namespace {

void check_count(const char* op, std::size_t got, int want) {
  if (got != static_cast<std::size_t>(want))
    throw ValueError(std::string(op) + ": expected " + std::to_string(want) +
                     " tensors (one per member), got " + std::to_string(got));
}

}  // namespace

Tensor gather_local(dist::ProcessGroup& local, const Tensor& input) {
  NoGradGuard no_grad;
  const std::int64_t n = input.numel();
  if (local.size() == 1) return input.reshape({n}).clone();
  std::vector<Tensor> blocks;
  for (int l = 0; l < local.size(); ++l) blocks.push_back(zeros({n}, input.options()));
  local.all_gather(blocks, input.reshape({n}));
  return cat(blocks, 0);
}

void HybridGroup::all_gather(std::vector<Tensor>& outputs, const Tensor& input) {
  check_count("all_gather", outputs.size(), size());
  pending_->finish();
  if (local_->size() == 1) return global_->all_gather(outputs, input);
  NoGradGuard no_grad;
  const int L = local_->size(), G = global_->size();
  const std::int64_t n = input.numel();
  const Tensor locals = gather_local(*local_, input);
  // Every member: [G · L · n], rank r's block at r · L · n.
  Tensor all = zeros({static_cast<std::int64_t>(G) * L * n}, input.options());
  if (local_->rank() == 0) {
    std::vector<Tensor> blocks;
    for (int r = 0; r < G; ++r) blocks.push_back(zeros({L * n}, input.options()));
    global_->all_gather(blocks, locals);
    all.copy_(G > 1 ? cat(blocks, 0) : blocks[0]);
  }
  if (L > 1) local_->broadcast(all, 0);
  for (int m = 0; m < size(); ++m)
    outputs[static_cast<std::size_t>(m)].copy_(
        narrow(all, 0, m * n, n).reshape(outputs[static_cast<std::size_t>(m)].shape()));
}

void HybridGroup::reduce_scatter(Tensor& output, const std::vector<Tensor>& inputs,
                                 dist::ReduceOp op) {
  check_count("reduce_scatter", inputs.size(), size());
  if (local_->size() == 1) {  // the same bits: the ranks' inputs[rank()] in rank order
    pending_->finish();
    return global_->reduce_scatter(output, inputs, op);
  }
  NoGradGuard no_grad;
  const std::int64_t n = output.numel();
  std::vector<Tensor> flat;
  for (const Tensor& t : inputs) {
    if (t.numel() != n)
      throw ShapeError("reduce_scatter: input " + t.shape().str() + " does not match output " +
                       output.shape().str());
    flat.push_back(t.reshape({n}));
  }
  Tensor packed = cat(flat, 0);
  all_reduce(packed, op);
  output.copy_(narrow(packed, 0, rank() * n, n).reshape(output.shape()));
}

// ---- started collectives (hybrid_group.h) ---------------------------------------------------

class HybridGroup::AllReduceWork final : public dist::Work {
 public:
  AllReduceWork(std::shared_ptr<Pending> pending, std::shared_ptr<Pending::Entry> entry)
      : pending_(std::move(pending)), entry_(std::move(entry)) {}
  void wait() override {
    pending_->finish(entry_.get());
    if (entry_->error) std::rethrow_exception(entry_->error);
  }
  // The broadcast back is a local collective that only wait() (or the next collective) runs.
  bool is_completed() override { return entry_->done; }

 private:
  std::shared_ptr<Pending> pending_;
  std::shared_ptr<Pending::Entry> entry_;
};

void HybridGroup::Pending::finish(const Entry* last) {
  if (last && last->done) return;
  while (!entries.empty()) {
    const std::shared_ptr<Entry> e = std::move(entries.front());
    entries.pop_front();
    try {
      if (e->global) e->global->wait();
      local->broadcast(e->tensor, 0);
    } catch (...) {
      e->error = std::current_exception();
    }
    e->done = true;
    if (e.get() == last) return;
  }
}

namespace {

// Runs a started collective's local part now: null, or a completed Work with its error.
template <class F>
std::shared_ptr<dist::Work> hybrid_local_part(F&& local_part) {
  try {
    local_part();
  } catch (...) {
    return dist::completed_work(std::current_exception());
  }
  return nullptr;
}

}  // namespace

std::shared_ptr<dist::Work> HybridGroup::all_reduce_async(Tensor& tensor, dist::ReduceOp op,
                                                          dist::WireFormat wire) {
  if (local_->size() == 1) return global_->all_reduce_async(tensor, op, wire);
  if (auto failed = hybrid_local_part([&] {
        pending_->finish();
        local_->all_reduce(tensor, op);
      }))
    return failed;
  auto entry = std::make_shared<Pending::Entry>();
  entry->tensor = tensor;
  if (local_->rank() == 0) entry->global = global_->all_reduce_async(tensor, op, wire);
  pending_->entries.push_back(entry);
  return std::make_shared<AllReduceWork>(pending_, std::move(entry));
}

std::shared_ptr<dist::Work> HybridGroup::reduce_async(Tensor& tensor, int dst, dist::ReduceOp op,
                                                      dist::WireFormat wire) {
  if (dst != 0) return ProcessGroup::reduce_async(tensor, dst, op, wire);
  if (auto failed = hybrid_local_part([&] {
        pending_->finish();
        if (local_->size() > 1) local_->reduce(tensor, 0, op);
      }))
    return failed;
  if (local_->rank() != 0) return dist::completed_work();
  return global_->all_reduce_async(tensor, op, wire);
}

// With one local replica the members are the ranks: the global group's own (as the blocking
// forms are). Otherwise the blocking default (which finishes the pending all_reduce_async calls
// first).
std::shared_ptr<dist::Work> HybridGroup::all_gather_async(std::vector<Tensor>& outputs,
                                                          const Tensor& input) {
  if (local_->size() == 1) return global_->all_gather_async(outputs, input);
  return ProcessGroup::all_gather_async(outputs, input);
}

std::shared_ptr<dist::Work> HybridGroup::reduce_scatter_async(Tensor& output,
                                                              const std::vector<Tensor>& inputs,
                                                              dist::ReduceOp op) {
  if (local_->size() == 1) return global_->reduce_scatter_async(output, inputs, op);
  return ProcessGroup::reduce_scatter_async(output, inputs, op);
}

}  // namespace lockstep::dist::detail
