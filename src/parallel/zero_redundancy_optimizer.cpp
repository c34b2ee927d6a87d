// ZeroRedundancyOptimizer (zero_redundancy_optimizer.h): construction, the shard's step and the
// all_gather of the updated parameters. Its checkpoint format: zero_state_dict.cpp.
#include "lockstep/parallel/zero_redundancy_optimizer.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "lockstep/autograd/grad_mode.h"
#include "lockstep/nn/utils.h"
#include "lockstep/ops/ops.h"

namespace lockstep::parallel {

namespace {

std::vector<Tensor> params_of(const std::vector<optim::ParamGroup>& groups) {
  std::vector<Tensor> out;
  for (const auto& g : groups) out.insert(out.end(), g.params.begin(), g.params.end());
  return out;
}

}  // namespace

ZeroRedundancyOptimizer::ZeroRedundancyOptimizer(std::vector<optim::ParamGroup> groups,
                                                 OptimizerFactory optimizer_class,
                                                 std::shared_ptr<dist::ProcessGroup> process_group,
                                                 ZeroLayout layout)
    : Optimizer(params_of(groups)), group_(std::move(process_group)) {
  if (!group_) throw ValueError("ZeroRedundancyOptimizer: null process group");
  if (!optimizer_class) throw ValueError("ZeroRedundancyOptimizer: no optimizer_class");
  rank_ = group_->rank();
  world_ = group_->size();
  const Tensor& p0 = params_.front();
  for (std::size_t i = 0; i < params_.size(); ++i) {
    const Tensor& p = params_[i];
    const std::string what = "ZeroRedundancyOptimizer: parameter " + std::to_string(i) + " is ";
    if (p.dtype() != p0.dtype())
      throw DTypeError(what + to_string(p.dtype()) + ", parameter 0 " + to_string(p0.dtype()));
    if (p.device() != p0.device())
      throw DeviceError(what + "on " + p.device().str() + ", parameter 0 on " + p0.device().str());
  }
  // A throwaway optimizer of one element per group checks the options and groups on every rank
  // (also one that owns nothing) and tells the lr and the state names.
  std::vector<optim::ParamGroup> probe_groups;
  for (const auto& g : groups) probe_groups.push_back({{zeros({1}, p0.options())}, g.weight_decay});
  {
    const auto probe = optimizer_class(probe_groups);
    names_ = probe->state_names();
    set_lr(probe->lr());
  }
  // Each optimizer parameter's place in the layout (by identity), and its group.
  std::vector<std::int64_t> numels, offsets;
  std::int64_t at = 0;
  for (std::size_t i = 0; i < params_.size(); ++i) {
    numels.push_back(params_[i].numel());
    if (layout.params.empty()) {
      offsets.push_back(at);
      at += params_[i].numel();
      continue;
    }
    std::size_t j = 0;
    while (j < layout.params.size() && !layout.params[j].is_same(params_[i])) ++j;
    if (j == layout.params.size() || j >= layout.offsets.size())
      throw ValueError("ZeroRedundancyOptimizer: parameter " + std::to_string(i) + " " +
                       params_[i].shape().str() +
                       " is not in the layout (zero_layout(dp) holds "
                       "the wrapped module's parameters)");
    offsets.push_back(layout.offsets[j]);
  }
  if (layout.params.empty()) layout = ZeroLayout{{}, {}, at, {{0, at}}};
  partition_ = partition_for_zero(numels, offsets, layout.numel, layout.buckets, world_);
  std::vector<std::size_t> group_of;
  for (std::size_t g = 0; g < groups.size(); ++g)
    group_of.insert(group_of.end(), groups[g].params.size(), g);
  std::vector<optim::ParamGroup> inner_groups;
  for (const ZeroPiece& piece : shard()) {
    pieces_.push_back(piece_of(params_[piece.param], piece));
    inner_groups.push_back({{pieces_.back()}, groups[group_of[piece.param]].weight_decay});
  }
  if (!pieces_.empty()) inner_ = optimizer_class(std::move(inner_groups));
}

ZeroRedundancyOptimizer::~ZeroRedundancyOptimizer() = default;

Tensor ZeroRedundancyOptimizer::piece_of(const Tensor& t, const ZeroPiece& p) const {
  return t.detach().reshape({t.numel()}).narrow(0, p.lo, p.hi - p.lo);
}

void ZeroRedundancyOptimizer::step() {
  NoGradGuard no_grad;
  if (inner_) {
    // The pieces' gradients are views of their parameters' (none where the parameter has none:
    // the inner step skips the piece, as the unsharded one skips the parameter); dropped after
    // the step, also when it throws.
    struct DropGrads {
      std::vector<Tensor>& pieces;
      ~DropGrads() {
        for (Tensor& p : pieces) p.set_grad(Tensor());
      }
    } drop{pieces_};
    for (std::size_t k = 0; k < pieces_.size(); ++k) {
      const ZeroPiece& piece = shard()[k];
      const Tensor g = params_[piece.param].grad();
      if (g.defined() && g.shape() != params_[piece.param].shape())
        throw ShapeError("ZeroRedundancyOptimizer: parameter " + std::to_string(piece.param) + " " +
                         params_[piece.param].shape().str() + " has a gradient " + g.shape().str());
      pieces_[k].set_grad(g.defined() ? piece_of(g, piece) : Tensor());
    }
    inner_->set_lr(lr());
    inner_->step();
  }
  const std::int64_t S = partition_.shard_numel;
  if (S == 0) return;  // no parameter has elements: nothing to gather on any rank
  const Tensor all = all_gather_shards([this](std::size_t k) { return pieces_[k]; });
  for (int r = 0; r < world_; ++r) {
    if (r == rank_) continue;
    for (const ZeroPiece& piece : partition_.pieces[static_cast<std::size_t>(r)])
      piece_of(params_[piece.param], piece)
          .copy_(all.narrow(0, r * S + piece.packed, piece.hi - piece.lo));
  }
}

Tensor ZeroRedundancyOptimizer::all_gather_shards(
    const std::function<Tensor(std::size_t k)>& value) const {
  const std::int64_t S = partition_.shard_numel;
  const TensorOptions options = params_.front().options();
  Tensor mine = zeros({S}, options);
  for (std::size_t k = 0; k < shard().size(); ++k) {
    const ZeroPiece& piece = shard()[k];
    const Tensor v = value(k);
    if (v.defined()) mine.narrow(0, piece.packed, piece.hi - piece.lo).copy_(v);
  }
  Tensor all = zeros({S * world_}, options);
  std::vector<Tensor> outputs;
  for (int r = 0; r < world_; ++r) outputs.push_back(all.narrow(0, r * S, S));
  group_->all_gather(outputs, mine);
  return all;
}

double ZeroRedundancyOptimizer::clip_grad_norm_(double max_norm, double norm_type) {
  NoGradGuard no_grad;
  const bool inf = std::isinf(norm_type);
  Tensor sums = zeros({static_cast<std::int64_t>(params_.size())}, kFloat64);
  double* s = sums.data_ptr<double>();
  std::vector<Tensor> grads;  // this rank's pieces of the gradients
  for (const ZeroPiece& piece : shard()) {
    const Tensor g = params_[piece.param].grad();
    if (!g.defined()) continue;
    grads.push_back(piece_of(g, piece));
    const double v = nn::utils::grad_power_sum(grads.back(), norm_type);
    s[piece.param] = inf ? std::max(s[piece.param], v) : s[piece.param] + v;
  }
  group_->all_reduce(sums, inf ? dist::ReduceOp::Max : dist::ReduceOp::Sum);
  std::vector<double> norms;
  for (std::size_t i = 0; i < params_.size(); ++i)
    if (params_[i].grad().defined())
      norms.push_back(nn::utils::norm_from_power_sum(s[i], norm_type));
  return nn::utils::clip_grads_with_norms_(grads, norms, max_norm, norm_type,
                                           params_.front().dtype() == kFloat32);
}

std::int64_t ZeroRedundancyOptimizer::state_bytes() const {
  return inner_ ? inner_->state_bytes() : 0;
}

}  // namespace lockstep::parallel
