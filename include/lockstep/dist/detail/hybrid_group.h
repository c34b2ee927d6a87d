// A rank-local ProcessGroup member that also reaches across ranks (internal): DataParallel's
// replica k on one rank of a DistributedDataParallel job reduces with its sibling replicas over
// the threads backend first, then replica 0 of each rank all-reduces the local result with the
// other ranks, then broadcasts it back to its siblings. The sum is therefore
// (Σ local replicas) summed over ranks in rank order — the same on every replica of every rank.
// Member r · L + l is rank r's local replica l (L local replicas per rank); broadcast, all_gather
// and reduce_scatter follow that numbering (hybrid_group.cpp), so dist::current_group() can hand
// it to a module's own collectives (SyncBatchNorm).
//
// Started collectives (hybrid_group.cpp): with one local replica every *_async is the global
// group's own. With several, reduce_async(dst 0) reduces locally at once (shared memory) and
// replica 0 starts the global all_reduce_async, whose Work it returns (the siblings get a
// completed one); all_reduce_async does the same with all_reduce and leaves the broadcast back to
// the siblings (a local collective) to wait(), or to the member's next collective of this group,
// whichever comes first, oldest first, so every sibling runs the local collectives in the same
// order; all_gather_async and reduce_scatter_async are the blocking defaults. The bfloat16 wire
// format applies between ranks: each rank's local sum (float32, exact order) is what is rounded.
#pragma once

#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "lockstep/core/error.h"
#include "lockstep/dist/process_group.h"

namespace lockstep::dist::detail {

// Every member of `local`'s input, flattened, back to back in member order ([size · numel]).
Tensor gather_local(dist::ProcessGroup& local, const Tensor& input);

class HybridGroup : public dist::ProcessGroup {
 public:
  HybridGroup(std::shared_ptr<dist::ProcessGroup> local, std::shared_ptr<dist::ProcessGroup> global)
      : local_(local), global_(std::move(global)), pending_(std::make_shared<Pending>(local)) {}
  int rank() const override { return global_->rank() * local_->size() + local_->rank(); }
  int size() const override { return global_->size() * local_->size(); }
  std::string backend() const override { return global_->backend() + "+" + local_->backend(); }

  void all_reduce(Tensor& tensor, dist::ReduceOp op) override {
    pending_->finish();
    if (local_->size() > 1) local_->all_reduce(tensor, op);
    if (local_->rank() == 0) global_->all_reduce(tensor, op);
    if (local_->size() > 1) local_->broadcast(tensor, 0);
  }
  // dst 0 (what DataParallel's reducers use): the local replicas reduce into local replica 0,
  // which all-reduces with the other ranks; nothing is broadcast back to the siblings. Every
  // rank's replica 0 then holds the sum (more than reduce() promises), the same bits as
  // all_reduce. Other destinations fall back to all_reduce.
  void reduce(Tensor& tensor, int dst, dist::ReduceOp op) override {
    check_root("reduce", dst);
    if (dst != 0) return all_reduce(tensor, op);
    pending_->finish();
    if (local_->size() > 1) local_->reduce(tensor, 0, op);
    if (local_->rank() == 0) global_->all_reduce(tensor, op);
  }
  // Member root = r · L + l (L local replicas per rank): on rank r, local replica l sends to its
  // siblings; every rank's replica 0 takes part in the broadcast from rank r; then each rank's
  // replica 0 sends to its siblings.
  void broadcast(Tensor& tensor, int root) override {
    check_root("broadcast", root);
    pending_->finish();
    const int L = local_->size(), root_rank = root / L, root_local = root % L;
    if (L > 1 && global_->rank() == root_rank && root_local != 0)
      local_->broadcast(tensor, root_local);
    if (local_->rank() == 0) global_->broadcast(tensor, root_rank);
    if (L > 1) local_->broadcast(tensor, 0);
  }
  // outputs[r · L + l] = member (r, l)'s input: a local all_gather, the ranks' packed blocks
  // gathered by each rank's replica 0, then handed to its siblings (with one local replica: the
  // global group's all_gather).
  void all_gather(std::vector<Tensor>& outputs, const Tensor& input) override;
  // The reduction of every member's inputs[rank()] (an all_reduce of the packed inputs; each
  // member keeps its slice; with one local replica: the global group's reduce_scatter).
  void reduce_scatter(Tensor& output, const std::vector<Tensor>& inputs,
                      dist::ReduceOp op) override;
  void barrier() override {
    pending_->finish();
    local_->barrier();
    if (local_->rank() == 0) global_->barrier();
    local_->barrier();
  }
  std::shared_ptr<dist::Work> all_reduce_async(Tensor& tensor, dist::ReduceOp op,
                                               dist::WireFormat wire) override;
  std::shared_ptr<dist::Work> reduce_async(Tensor& tensor, int dst, dist::ReduceOp op,
                                           dist::WireFormat wire) override;
  std::shared_ptr<dist::Work> all_gather_async(std::vector<Tensor>& outputs,
                                               const Tensor& input) override;
  std::shared_ptr<dist::Work> reduce_scatter_async(Tensor& output,
                                                   const std::vector<Tensor>& inputs,
                                                   dist::ReduceOp op) override;
  // The local siblings only; the other ranks time out (ProcessGroup::abort).
  void abort(const std::string& reason) override { local_->abort(reason); }
  void clear_abort() override { local_->clear_abort(); }

 private:
  // The all_reduce_async calls whose broadcast back to the siblings is still to come, oldest
  // first; shared with their Works (which may outlive the group).
  struct Pending {
    struct Entry {
      Tensor tensor;
      std::shared_ptr<dist::Work> global;  // replica 0's global all_reduce
      bool done = false;
      std::exception_ptr error;
    };
    explicit Pending(std::shared_ptr<dist::ProcessGroup> l) : local(std::move(l)) {}
    // Finishes the entries up to and including `last` (all when null): each waits for its
    // global part and broadcasts from replica 0; an error is kept for its Work.
    void finish(const Entry* last = nullptr);
    std::shared_ptr<dist::ProcessGroup> local;
    std::deque<std::shared_ptr<Entry>> entries;
  };
  class AllReduceWork;

  std::shared_ptr<dist::ProcessGroup> local_, global_;
  std::shared_ptr<Pending> pending_;
};

}  // namespace lockstep::dist::detail
