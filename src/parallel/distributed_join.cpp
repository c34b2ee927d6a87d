// DistributedDataParallel::join() (torch's Join context): a rank out of data shadows the others'
// steps until every rank has joined, then the lowest rank active in the last real step broadcasts
// its parameters and buffers. A shadow step contributes a count of 0 and zero gradients. Under a
// module without collectives it runs no forward; under one that runs collectives in forward or
// backward (nn::Module::runs_collectives(), SyncBatchNorm's kind) the others' replicas wait for
// this rank's in those collectives, so its replicas run on 0 rows shaped like the last batch this
// rank trained on, exactly as a replica without rows does (ReplicaSet::train_on, weight 0:
// forward, then a backward of zeros), and its reducers all-reduce zeros.
#include "lockstep/ops/ops.h"
#include "lockstep/parallel/distributed.h"

namespace lockstep::parallel {

namespace {

// `t` without rows: its shape with dim 0 = 0, its dtype and device (no memory, no graph).
Tensor no_rows(const Tensor& t) {
  Shape shape = t.shape();
  shape[0] = 0;
  return empty(shape, TensorOptions(t.device()).dtype(t.dtype()));
}

}  // namespace

void DistributedDataParallel::join() {
  joined_ = true;
  all_joined_ = false;
  // The shadow batch: without collectives any empty batch will do (no replica runs); with them,
  // the last batch's shapes, or, when this rank never trained one, an empty batch that
  // begin_step refuses on every rank (check_shadowable) before any replica runs.
  const bool shaped = module_->runs_collectives() && has_shadow_;
  const nn::Args x = shaped ? shadow_inputs_ : nn::Args{zeros({0})};
  const Tensor y = shaped ? shadow_target_ : zeros({0}, kInt64);
  const ArgsLossFn none = [](const std::vector<Tensor>&, const Tensor&) -> Tensor {
    throw Error("internal: a joined rank computed a loss");
  };
  try {
    while (!all_joined_) forward_backward(x, y, none);
  } catch (...) {
    joined_ = false;
    all_joined_ = false;
    throw;
  }
  joined_ = false;
  all_joined_ = false;
  broadcast_state(last_active_rank_);
}

void DistributedDataParallel::remember_shadow(const LocalStep& mine) {
  // Only a real step (not a shadow one), on the reducer path (which hands its batch over), and
  // only where a shadow step runs the replicas.
  if (joined_ || !mine.inputs || !mine.target || !module_->runs_collectives()) return;
  shadow_inputs_.clear();
  shadow_inputs_.reserve(mine.inputs->size());
  for (const nn::Arg& a : *mine.inputs) {
    if (const Tensor* t = nn::tensor_arg(a))
      shadow_inputs_.emplace_back(no_rows(*t));
    else
      shadow_inputs_.push_back(a);
  }
  shadow_target_ = no_rows(*mine.target);
  has_shadow_ = true;
}

void DistributedDataParallel::check_shadowable(const std::string& joined,
                                               const std::string& unshaped) const {
  const std::string what =
      "DistributedDataParallel: rank(s) " + joined +
      " called join() while the module runs collectives in forward or backward "
      "(nn::Module::runs_collectives(), e.g. SyncBatchNorm)";
  if (options().deterministic)
    throw ValueError(what +
                     " in deterministic mode, whose shard group needs a shard on every rank in "
                     "every step, and a joined rank has none: give every rank the same number "
                     "of batches, or train without deterministic mode (where a joined rank "
                     "shadows such a module)");
  if (!unshaped.empty())
    throw ValueError(what + ", and rank(s) " + unshaped +
                     " never trained a batch with forward_backward(): a joined rank shadows "
                     "such a module by running its replicas on 0 rows shaped like the last "
                     "batch it trained on, and these ranks know no shape; train at least one "
                     "batch on every rank before join()");
}

}  // namespace lockstep::parallel
