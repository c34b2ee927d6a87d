// ShardGroup's collectives (shard_group.h): every one is built on one exact gather of the
// members' tensors, so the arithmetic is done in member order on every member alike.
#include "lockstep/dist/detail/shard_group.h"

#include <algorithm>

#include "lockstep/autograd/grad_mode.h"
#include "lockstep/core/error.h"
#include "lockstep/ops/ops.h"
#include "lockstep/dist/detail/hybrid_group.h"

namespace lockstep::dist::detail {

namespace {

// Where this rank's shards start among the step's, how many there are, the most one rank has.
struct Span {
  std::int64_t offset = 0, total = 0, widest = 0;
};
Span span_of(const std::vector<std::int64_t>& rank_shards, const dist::ProcessGroup* global) {
  const int me = global ? global->rank() : 0;
  Span s;
  for (std::size_t r = 0; r < rank_shards.size(); ++r) {
    if (static_cast<int>(r) < me) s.offset += rank_shards[r];
    s.total += rank_shards[r];
    s.widest = std::max(s.widest, rank_shards[r]);
  }
  return s;
}

}  // namespace

ShardGroup::ShardGroup(std::shared_ptr<dist::ProcessGroup> local,
                       std::shared_ptr<dist::ProcessGroup> global,
                       std::vector<std::int64_t> rank_shards)
    : local_(std::move(local)), global_(std::move(global)), rank_shards_(std::move(rank_shards)) {
  const Span span = span_of(rank_shards_, global_.get());
  offset_ = span.offset;
  total_ = span.total;
  widest_ = span.widest;
}

Tensor ShardGroup::gather_flat(const Tensor& input) {
  NoGradGuard no_grad;
  const std::int64_t n = input.numel();
  const int L = local_->size();
  const Tensor locals = gather_local(*local_, input);
  Tensor all = zeros({total_ * n}, input.options());
  if (!global_) {
    all.copy_(locals);
  } else if (local_->rank() == 0) {
    // The leaders: every rank's shards padded to the widest rank's count, then unpadded.
    Tensor mine = zeros({widest_ * n}, input.options());
    narrow(mine, 0, 0, L * n).copy_(locals);
    std::vector<Tensor> blocks;
    for (int r = 0; r < global_->size(); ++r)
      blocks.push_back(zeros({widest_ * n}, input.options()));
    global_->all_gather(blocks, mine);
    std::int64_t at = 0;
    for (std::size_t r = 0; r < blocks.size(); ++r) {
      const std::int64_t len = rank_shards_[r] * n;
      if (len > 0) narrow(all, 0, at, len).copy_(narrow(blocks[r], 0, 0, len));
      at += len;
    }
  }
  if (global_ && L > 1) local_->broadcast(all, 0);
  return all;
}

void ShardGroup::all_gather(std::vector<Tensor>& outputs, const Tensor& input) {
  if (outputs.size() != static_cast<std::size_t>(total_))
    throw ValueError("all_gather over the step's shards: expected " + std::to_string(total_) +
                     " outputs (one per shard), got " + std::to_string(outputs.size()));
  const Tensor all = gather_flat(input);
  NoGradGuard no_grad;
  const std::int64_t n = input.numel();
  for (std::int64_t m = 0; m < total_; ++m) {
    Tensor& out = outputs[static_cast<std::size_t>(m)];
    if (out.numel() != n)
      throw ShapeError("all_gather over the step's shards: output " + std::to_string(m) + " " +
                       out.shape().str() + " does not match the input " + input.shape().str());
    out.copy_(narrow(all, 0, m * n, n).reshape(out.shape()));
  }
}

void ShardGroup::all_reduce(Tensor& tensor, dist::ReduceOp op) {
  if (op != dist::ReduceOp::Sum) {
    // Max and Min are exact whatever the grouping: over this rank's shards, then the ranks.
    if (local_->size() > 1) local_->all_reduce(tensor, op);
    if (global_ && local_->rank() == 0) global_->all_reduce(tensor, op);
    if (global_ && local_->size() > 1) local_->broadcast(tensor, 0);
    return;
  }
  const Tensor all = gather_flat(tensor);
  NoGradGuard no_grad;
  const std::int64_t n = tensor.numel();
  Tensor acc = narrow(all, 0, 0, n).clone();
  for (std::int64_t m = 1; m < total_; ++m) acc.add_(narrow(all, 0, m * n, n));
  tensor.copy_(acc.reshape(tensor.shape()));
}

void ShardGroup::broadcast(Tensor& tensor, int root) {
  check_root("broadcast", root);
  const Tensor all = gather_flat(tensor);
  NoGradGuard no_grad;
  const std::int64_t n = tensor.numel();
  tensor.copy_(narrow(all, 0, root * n, n).reshape(tensor.shape()));
}

void ShardGroup::reduce_scatter(Tensor& output, const std::vector<Tensor>& inputs,
                                dist::ReduceOp op) {
  if (inputs.size() != static_cast<std::size_t>(total_))
    throw ValueError("reduce_scatter over the step's shards: expected " + std::to_string(total_) +
                     " inputs (one per shard), got " + std::to_string(inputs.size()));
  NoGradGuard no_grad;
  const std::int64_t n = output.numel();
  std::vector<Tensor> flat;
  for (const Tensor& t : inputs) {
    if (t.numel() != n)
      throw ShapeError("reduce_scatter over the step's shards: input " + t.shape().str() +
                       " does not match the output " + output.shape().str());
    flat.push_back(t.reshape({n}));
  }
  Tensor packed = cat(flat, 0);
  all_reduce(packed, op);
  output.copy_(narrow(packed, 0, rank() * n, n).reshape(output.shape()));
}

void ShardGroup::barrier() {
  local_->barrier();
  if (global_ && local_->rank() == 0) global_->barrier();
  local_->barrier();
}

std::vector<std::shared_ptr<dist::ProcessGroup>> shard_groups(
    std::size_t local_shards, const std::shared_ptr<dist::ProcessGroup>& global,
    const std::vector<std::int64_t>& rank_shards, bool concurrent) {
  for (std::size_t r = 0; concurrent && r < rank_shards.size(); ++r)
    if (rank_shards[r] == 0)
      throw Error("DataParallel deterministic mode with a module that runs collectives: rank " +
                  std::to_string(r) +
                  " has no shard in this step (an empty local batch, or it joined), so a "
                  "collective inside forward could not meet its members; give every rank at "
                  "least one sample per step");
  std::vector<std::shared_ptr<dist::ProcessGroup>> out;
  if (!concurrent) {
    const Span span = span_of(rank_shards, global.get());
    for (std::size_t s = 0; s < local_shards; ++s)
      out.push_back(std::make_shared<SequentialShardGroup>(
          static_cast<int>(span.offset + static_cast<std::int64_t>(s)),
          static_cast<int>(span.total)));
    return out;
  }
  for (auto& local : dist::new_thread_group(static_cast<int>(local_shards)))
    out.push_back(std::make_shared<ShardGroup>(local, global, rank_shards));
  return out;
}

void SequentialShardGroup::refuse(const char* op) const {
  throw Error(std::string("dist::current_group()->") + op + " in deterministic mode: shard " +
              std::to_string(rank_) + " of " + std::to_string(size_) +
              " runs one after another with its device's other shards, so its collective could "
              "never meet them; a module that runs collectives in forward or backward must say "
              "so by overriding nn::Module::runs_collectives() to return true (then the shards "
              "run at once, one thread each)");
}

}  // namespace lockstep::dist::detail
