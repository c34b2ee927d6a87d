// A rank-local ProcessGroup member that also reaches across ranks (internal): DataParallel's
// replica k on one rank of a DistributedDataParallel job reduces with its sibling replicas over
// the threads backend first, then replica 0 of each rank all-reduces the local result with the
// other ranks, then broadcasts it back to its siblings. The sum is therefore
// (Σ local replicas) summed over ranks in rank order — the same on every replica of every rank.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "lockstep/core/error.h"
#include "lockstep/dist/process_group.h"

namespace lockstep::parallel::detail {

class HybridGroup : public dist::ProcessGroup {
 public:
  HybridGroup(std::shared_ptr<dist::ProcessGroup> local, std::shared_ptr<dist::ProcessGroup> global)
      : local_(std::move(local)), global_(std::move(global)) {}
  int rank() const override { return global_->rank() * local_->size() + local_->rank(); }
  int size() const override { return global_->size() * local_->size(); }
  std::string backend() const override { return global_->backend() + "+" + local_->backend(); }

  void all_reduce(Tensor& tensor, dist::ReduceOp op) override {
    if (local_->size() > 1) local_->all_reduce(tensor, op);
    if (local_->rank() == 0) global_->all_reduce(tensor, op);
    if (local_->size() > 1) local_->broadcast(tensor, 0);
  }
  // dst 0 (what DataParallel's reducers use): the local replicas reduce into local replica 0,
  // which all-reduces with the other ranks; nothing is broadcast back to the siblings. Every
  // rank's replica 0 then holds the sum (more than reduce() promises), the same bits as
  // all_reduce. Other destinations fall back to all_reduce.
  using dist::ProcessGroup::reduce;  // the epilogue form: the default (reduce, then dst's part)
  void reduce(Tensor& tensor, int dst, dist::ReduceOp op) override {
    check_root("reduce", dst);
    if (dst != 0) return all_reduce(tensor, op);
    if (local_->size() > 1) local_->reduce(tensor, 0, op);
    if (local_->rank() == 0) global_->all_reduce(tensor, op);
  }
  void broadcast(Tensor&, int) override { unsupported("broadcast"); }
  void all_gather(std::vector<Tensor>&, const Tensor&) override { unsupported("all_gather"); }
  void reduce_scatter(Tensor&, const std::vector<Tensor>&, dist::ReduceOp) override {
    unsupported("reduce_scatter");
  }
  void barrier() override {
    local_->barrier();
    if (local_->rank() == 0) global_->barrier();
    local_->barrier();
  }

 private:
  [[noreturn]] static void unsupported(const char* op) {
    throw Error(std::string("internal: HybridGroup does not implement ") + op);
  }
  std::shared_ptr<dist::ProcessGroup> local_, global_;
};

}  // namespace lockstep::parallel::detail
