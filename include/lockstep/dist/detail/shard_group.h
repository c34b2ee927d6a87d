// The process group of deterministic mode's shards (internal): while shard s of a step runs,
// dist::current_group() is a ShardGroup whose members are the step's shards in global shard order
// (member s = shard s, counted over every rank's shards), so a collective inside forward or
// backward (SyncBatchNorm's) lines up the same way however the shards are spread over devices and
// ranks. Its results do not depend on that spread either: all_gather is exact, and all_reduce
// (Sum) adds the members' tensors in member order, x0 + x1 + x2 + ..., the same bits for any
// device or rank count; Max and Min are exact in any order.
//
// One rank's shards run at once, one thread each (ReplicaSet::run_shards), over an in-process
// threads group; across ranks the rank's first shard (its leader) exchanges with the other ranks'
// leaders over the process group, every rank's block padded to the widest rank's.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "lockstep/dist/process_group.h"

namespace lockstep::dist::detail {

class ShardGroup : public dist::ProcessGroup {
 public:
  // `local`: this shard's member of its rank's threads group (one member per local shard);
  // `global`: the ranks' process group (null: one process); `rank_shards[r]`: rank r's shards in
  // this step (one entry, this process's count, without `global`).
  ShardGroup(std::shared_ptr<dist::ProcessGroup> local, std::shared_ptr<dist::ProcessGroup> global,
             std::vector<std::int64_t> rank_shards);
  int rank() const override { return static_cast<int>(offset_) + local_->rank(); }
  int size() const override { return static_cast<int>(total_); }
  std::string backend() const override {
    return "shards:" + (global_ ? global_->backend() + "+" : std::string()) + local_->backend();
  }

  // Sum: every member's tensor added in member order; Max / Min: the elementwise extreme.
  void all_reduce(Tensor& tensor, dist::ReduceOp op) override;
  using dist::ProcessGroup::reduce;
  void reduce(Tensor& tensor, int dst, dist::ReduceOp op) override {
    check_root("reduce", dst);
    all_reduce(tensor, op);
  }
  void broadcast(Tensor& tensor, int root) override;
  // outputs[s] = shard s's input, exactly.
  void all_gather(std::vector<Tensor>& outputs, const Tensor& input) override;
  void reduce_scatter(Tensor& output, const std::vector<Tensor>& inputs,
                      dist::ReduceOp op) override;
  void barrier() override;
  // This rank's shards only; the other ranks time out (ProcessGroup::abort).
  void abort(const std::string& reason) override { local_->abort(reason); }
  void clear_abort() override { local_->clear_abort(); }

 private:
  // Every member's input, flattened, back to back in member order: [size() · numel].
  Tensor gather_flat(const Tensor& input);

  std::shared_ptr<dist::ProcessGroup> local_, global_;
  std::vector<std::int64_t> rank_shards_;
  std::int64_t offset_ = 0, total_ = 0, widest_ = 0;
};

// The group a shard finds in deterministic mode when its module does not declare
// nn::Module::runs_collectives(): the shards then run one after another on each device, so a
// collective could never meet its other members; each one throws an Error that names the fix
// instead of waiting forever. rank() and size() are the shard's place in the step.
class SequentialShardGroup : public dist::ProcessGroup {
 public:
  SequentialShardGroup(int rank, int size) : rank_(rank), size_(size) {}
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string backend() const override { return "shards:sequential"; }
  void all_reduce(Tensor&, dist::ReduceOp) override { refuse("all_reduce"); }
  void broadcast(Tensor&, int) override { refuse("broadcast"); }
  void all_gather(std::vector<Tensor>&, const Tensor&) override { refuse("all_gather"); }
  void reduce_scatter(Tensor&, const std::vector<Tensor>&, dist::ReduceOp) override {
    refuse("reduce_scatter");
  }
  void barrier() override { refuse("barrier"); }

 private:
  [[noreturn]] void refuse(const char* op) const;
  int rank_, size_;
};

// One group per local shard of a step (this process's `local_shards`, `rank_shards` as for
// ShardGroup): ShardGroups over a fresh threads group when `concurrent`, SequentialShardGroups
// otherwise. With `concurrent`, Error on every rank when some rank has no shard in the step (an
// empty batch, a rank that joined): a collective could not meet that rank's members.
std::vector<std::shared_ptr<dist::ProcessGroup>> shard_groups(
    std::size_t local_shards, const std::shared_ptr<dist::ProcessGroup>& global,
    const std::vector<std::int64_t>& rank_shards, bool concurrent);

}  // namespace lockstep::dist::detail
