// ZeroRedundancyOptimizer: ZeRO stage 1 (Rajbhandari et al. 2020, "ZeRO: Memory Optimizations
// Toward Training Trillion Parameter Models", §5.1 P_os) under PyTorch's name and semantics
// (torch/distributed/optim/zero_redundancy_optimizer.py): an optimizer over every parameter whose
// state is sharded over the ranks of a process group. Each rank keeps the state (SGD's momentum
// buffers, Adam's moments and step counts) of its shard only, updates its shard's parameter
// elements from their gradients, and then every rank receives the other shards' updated elements
// (one all_gather per step), so all ranks end each step with the same full parameters.
//
// The shard: PyTorch's ZeRO gives each rank whole parameters (sorted-greedy); here, as in ZeRO's
// paper and DeepSpeed's stage 1, the partition is by elements of a flat layout (ZeroLayout: the
// parameters back to back, cut into buckets — DataParallel's master buffer and its gradient
// buckets, zero_layout()): each bucket of m elements is cut into `world` chunks of c = ⌈m/world⌉
// elements (the last ones short or empty), chunk r to rank r, so per bucket every rank sends and
// receives equal pieces (what reduce-scatter and all-gather need). A rank's shard buffer holds its
// chunks back to back (Σ c elements, padded). The inner optimizer — the same class with the same
// options (`optimizer_class`, PyTorch's optimizer_class + defaults) — is built over 1-D views of
// the parameter pieces this rank owns, one parameter group per piece with its parameter's group
// settings (AdamW's weight-decay groups), so its state is allocated for the shard only:
// state_bytes() ≈ the unsharded optimizer's / world.
//
// Bits: each element's update is the unsharded optimizer's elementwise formula (update_rules.h)
// with the same scalars (lr, its parameter's weight decay and step count), so with the same
// gradients the parameters after step() are bit-identical to the unsharded optimizer's — in
// DistributedDataParallel's deterministic mode, where every rank holds the same tree-summed
// gradient, the whole run is. A parameter without a gradient in a step is skipped (no update, no
// state, step count not advanced), as unsharded; every rank must agree on which parameters have
// one (DistributedDataParallel's has-grad agreement guarantees it).
//
// Use with DistributedDataParallel (how `lockstep train --zero` runs):
//   auto zero = std::make_shared<ZeroRedundancyOptimizer>(
//       groups, optimizer_class(optim::AdamWOptions{...}), ddp.process_group(), zero_layout(ddp));
//   zero->zero_grad(); ddp.forward_backward(x, y, criterion); zero->step();
// The DDP reducer either all-reduces the gradients as without ZeRO (every rank has the full
// gradient, so nn::utils::clip_grad_norm_ before step() works unchanged), or, with
// DistributedDataParallelOptions::reducer.scatter (one device per rank, no compression), reduce-
// scatters each bucket so every rank receives the sums of its own chunks only — the elements this
// optimizer's shard reads (zero_layout's buckets are the reducer's): the gradient reduce-scatter
// plus the parameter all-gather move what the all-reduce alone moves, and each element's sum is
// the same rank-order fold, so the bits are the same; clip such gradients with clip_grad_norm_
// below (nn::utils::clip_grad_norm_ would read the other ranks' chunks, which this rank does not
// have). With several local devices per rank the
// shard is per rank (process): the local replicas share the rank's master parameters.
//
// On GPUs (DDP over an NCCL group, `--backend nccl`) the pieces, the inner step (one flat launch:
// the pieces are views of the master buffer, their gradients of the reduced gradient buffer) and
// the all_gathers run on the rank's GPU, the state_dict metadata on the bootstrap group: compiled,
// not run on a GPU yet (tests/parallel/zero_test.cpp and tests/mpi_cli/zero_mpi_test.cpp are CPU).
//
// Collectives: step() and state_dict() are collectives over the process group: every rank calls
// them, in the same order as its other collectives (the constructor and load_state_dict() are
// not). join() (uneven inputs) is not supported: a joined rank makes no step, so the others wait
// in its all_gather until the group's timeout.
//
// Checkpoints: state_dict() gathers every shard into the unsharded optimizer's format
// (`state.<i>.<name>` shaped like parameter i, `param_groups.0.lr`), identical on every rank;
// load_state_dict() takes that full format (from a ZeRO run on any number of ranks, or from the
// unsharded optimizer) and keeps this rank's shard. Parameters with no elements have no shard
// and no state here.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "lockstep/dist/process_group.h"
#include "lockstep/optim/adam.h"
#include "lockstep/optim/optimizer.h"
#include "lockstep/optim/sgd.h"
#include "lockstep/parallel/data_parallel.h"

namespace lockstep::parallel {

/// Builds an optimizer over parameter groups (PyTorch's optimizer_class with its defaults).
using OptimizerFactory =
    std::function<std::unique_ptr<optim::Optimizer>(std::vector<optim::ParamGroup> groups)>;

/// torch.optim.SGD with `options` (one group: ValueError when a group sets its own weight_decay,
/// SGD takes none), Adam and AdamW with `options` and the groups' weight decays.
OptimizerFactory optimizer_class(const optim::SGDOptions& options);
OptimizerFactory optimizer_class(const optim::AdamOptions& options);
OptimizerFactory optimizer_class(const optim::AdamWOptions& options);

/// The flat element space ZeRO partitions: `params` back to back (parameter j's elements are
/// [offsets[j], offsets[j] + numel_j)) and `buckets`, element ranges [lo, hi) that tile
/// [0, numel) in any order. Empty: the optimizer's parameters in their order, one bucket.
struct ZeroLayout {
  std::vector<Tensor> params;
  std::vector<std::int64_t> offsets;
  std::int64_t numel = 0;
  std::vector<std::pair<std::int64_t, std::int64_t>> buckets;
};

/// `dp`'s master parameter buffer and gradient buckets (DataParallel::flat_parameters(),
/// gradient_buckets()).
ZeroLayout zero_layout(const DataParallel& dp);

/// One piece of a parameter a rank owns: elements [lo, hi) of optimizer parameter `param`
/// (flat, row-major), at `packed` in that rank's shard buffer.
struct ZeroPiece {
  std::size_t param = 0;
  std::int64_t lo = 0, hi = 0;
  std::int64_t packed = 0;
};

/// The partition of optimizer parameters `numels` (parameter i at flat offset `offsets[i]`)
/// over `world` ranks by `buckets` (see the file comment): per rank its pieces (bucket by bucket
/// in the given order, in flat order within a bucket) and the shard buffer's length (the same for
/// every rank). ValueError for world < 1, buckets that do not tile [0, numel) or a parameter
/// outside it.
struct ZeroPartition {
  std::vector<std::vector<ZeroPiece>> pieces;  ///< [world][...]
  std::int64_t shard_numel = 0;
};
ZeroPartition partition_for_zero(const std::vector<std::int64_t>& numels,
                                 const std::vector<std::int64_t>& offsets, std::int64_t numel,
                                 std::vector<std::pair<std::int64_t, std::int64_t>> buckets,
                                 int world);

class ZeroRedundancyOptimizer : public optim::Optimizer {
 public:
  /// `groups` as the unsharded optimizer takes them (their parameters in group order are this
  /// optimizer's params(); state indices follow that order), `optimizer_class` the inner
  /// optimizer's factory (its options' lr is this optimizer's lr), `process_group` the ranks
  /// sharing the state, `layout` the flat space to partition (empty: see ZeroLayout). Every
  /// parameter must be in the layout and share one dtype and device. Errors: ValueError for a
  /// null group, an empty or repeated parameter list, a parameter not in the layout, a bad
  /// layout; DTypeError / DeviceError for mixed dtypes /
  /// devices; the factory's errors (bad options). Not a collective.
  ZeroRedundancyOptimizer(std::vector<optim::ParamGroup> groups, OptimizerFactory optimizer_class,
                          std::shared_ptr<dist::ProcessGroup> process_group,
                          ZeroLayout layout = {});
  ~ZeroRedundancyOptimizer() override;

  /// The shard's step (the inner optimizer over this rank's pieces that have a gradient, at
  /// lr()), then an all_gather of every rank's updated elements into params(). A collective.
  /// DistError / TimeoutError from it; the inner optimizer's errors (a gradient of the wrong
  /// shape or dtype).
  void step() override;
  /// The full state, gathered (see the file comment): a collective, every rank gets the same.
  StateDict state_dict() const override;
  /// Keeps this rank's shard of a full state (any world size, ZeRO or not). StateDictError as
  /// Optimizer::load_state_dict (unknown key, index out of range, shape mismatch); nothing is
  /// modified when it throws. Not a collective.
  void load_state_dict(const StateDict& state) override;
  /// nn::utils::clip_grad_norm_ over params() when each rank holds only its shard's gradient
  /// sums (DistributedDataParallel with reducer.scatter): each parameter's power sum over this
  /// rank's pieces, all-reduced (Sum; Max for norm_type = inf) in float64, gives its norm, and
  /// this rank's pieces of the gradients are scaled (nn::utils::clip_grads_with_norms_). A
  /// collective; the same total norm on every rank, allclose to clip_grad_norm_'s over the whole
  /// gradient (the sums are added in another order). ValueError as clip_grad_norm_.
  double clip_grad_norm_(double max_norm, double norm_type = 2.0);
  /// The bytes of state this rank holds: its shard's (≈ 1/world of the unsharded optimizer's).
  std::int64_t state_bytes() const override;
  std::vector<std::string> state_names() const override { return names_; }

  const std::shared_ptr<dist::ProcessGroup>& process_group() const { return group_; }
  /// This rank's pieces (see ZeroPiece) and the inner optimizer over them (null when this rank
  /// owns no element).
  const std::vector<ZeroPiece>& shard() const { return partition_.pieces[rank_]; }
  const optim::Optimizer* inner() const { return inner_.get(); }
  /// Elements of parameters an all_gather moved in the last step (every rank's shard buffer).
  std::int64_t gathered_numel() const { return partition_.shard_numel * world_; }

 private:
  // Packs `value(piece)` (a 1-D tensor of the piece's elements, or undefined: zeros) of rank
  // `rank_`'s pieces into a shard buffer and all_gathers every rank's: [world · shard_numel].
  Tensor all_gather_shards(const std::function<Tensor(std::size_t k)>& value) const;
  // The elements [lo, hi) of parameter i, flat (a view).
  Tensor piece_of(const Tensor& t, const ZeroPiece& p) const;

  std::shared_ptr<dist::ProcessGroup> group_;
  int rank_ = 0, world_ = 1;
  ZeroPartition partition_;
  std::vector<std::string> names_;
  // The inner optimizer over views of this rank's pieces (pieces_[k] is its parameter k).
  std::unique_ptr<optim::Optimizer> inner_;
  std::vector<Tensor> pieces_;
};

}  // namespace lockstep::parallel
