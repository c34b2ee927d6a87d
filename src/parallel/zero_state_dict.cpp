// ZeroRedundancyOptimizer's checkpoint format (zero_redundancy_optimizer.h): state_dict()
// gathers every rank's shard into the unsharded optimizer's state_dict; load_state_dict() keeps
// this rank's shard of one.
#include <algorithm>
#include <string>

#include "lockstep/autograd/grad_mode.h"
#include "lockstep/ops/ops.h"
#include "lockstep/parallel/zero_redundancy_optimizer.h"

namespace lockstep::parallel {

namespace {
// What a rank holds of (parameter, state name), in the metadata state_dict() gathers.
enum Held : int { kNotOwned = 0, kAbsent = 1, kElements = 2, kScalar = 3 };
}  // namespace

StateDict ZeroRedundancyOptimizer::state_dict() const {
  NoGradGuard no_grad;
  const std::size_t P = params_.size(), K = names_.size();
  // Per (parameter, name): what this rank holds (Held) and a scalar's value; every rank's, in
  // one all_gather of [P · K · 2] float64 values.
  Tensor meta = zeros({static_cast<std::int64_t>(P * K * 2)}, kFloat64);
  double* m = meta.data_ptr<double>();
  for (std::size_t k = 0; k < shard().size(); ++k) {
    const std::size_t i = shard()[k].param;
    for (std::size_t n = 0; n < K; ++n) {
      const Tensor t = inner_->state(k, names_[n]);
      const int held = !t.defined() ? kAbsent : t.dim() == 0 ? kScalar : kElements;
      double* at = m + (i * K + n) * 2;
      at[0] = std::max<double>(at[0], held);
      if (held == kScalar) at[1] = t.item();
    }
  }
  std::vector<Tensor> metas;
  for (int r = 0; r < world_; ++r) metas.push_back(zeros({meta.numel()}, kFloat64));
  group_->all_gather(metas, meta);
  // held(r, i, n) and the first scalar value of (i, n).
  auto held = [&](int r, std::size_t i, std::size_t n) {
    return static_cast<int>(metas[static_cast<std::size_t>(r)].data_ptr<double>()[(i * K + n) * 2]);
  };
  // Each name some rank holds elements of: every rank's shard of it, gathered (to the host).
  std::vector<Tensor> gathered(K);
  for (std::size_t n = 0; n < K; ++n) {
    bool any = false;
    for (int r = 0; r < world_ && !any; ++r)
      for (std::size_t i = 0; i < P && !any; ++i) any = held(r, i, n) == kElements;
    if (!any || partition_.shard_numel == 0) continue;
    gathered[n] = all_gather_shards([&](std::size_t k) {
                    const Tensor t = inner_->state(k, names_[n]);
                    return t.defined() && t.dim() == 1 ? t : Tensor();
                  }).to(cpu());
  }
  const std::int64_t S = partition_.shard_numel;
  StateDict sd;
  for (std::size_t i = 0; i < P; ++i)
    for (std::size_t n = 0; n < K; ++n) {
      int kind = kNotOwned, from = 0;
      for (int r = 0; r < world_ && kind < kElements; ++r)
        if (held(r, i, n) > kind) kind = held(r, i, n), from = r;
      const std::string key = "state." + std::to_string(i) + "." + names_[n];
      if (kind == kScalar) {
        sd.insert(key,
                  scalar_tensor(
                      metas[static_cast<std::size_t>(from)].data_ptr<double>()[(i * K + n) * 2 + 1],
                      kFloat64));
      } else if (kind == kElements) {
        Tensor full = zeros({params_[i].numel()}, params_[i].options().device(cpu()));
        for (int r = 0; r < world_; ++r)
          for (const ZeroPiece& p : partition_.pieces[static_cast<std::size_t>(r)])
            if (p.param == i)
              full.narrow(0, p.lo, p.hi - p.lo)
                  .copy_(gathered[n].narrow(0, r * S + p.packed, p.hi - p.lo));
        sd.insert(key, full.reshape(params_[i].shape()));
      }
    }
  sd.insert("param_groups.0.lr", scalar_tensor(lr(), kFloat64));
  return sd;
}

void ZeroRedundancyOptimizer::load_state_dict(const StateDict& state) {
  // Every key is checked as the unsharded optimizer checks it before anything changes; the inner
  // optimizer gets this rank's pieces of each state tensor (a scalar, Adam's step, as it is).
  double lr = this->lr();
  StateDict mine;
  for (const auto& [key, value] : state) {
    if (key == "param_groups.0.lr") {
      lr = parse_lr(value);
      mine.insert(key, value);
      continue;
    }
    const auto [i, name] = parse_state_key(key, value);
    for (std::size_t k = 0; k < shard().size(); ++k) {
      const ZeroPiece& p = shard()[k];
      if (p.param != i) continue;
      mine.insert("state." + std::to_string(k) + "." + name,
                  name == "step" ? value : piece_of(value, p));
    }
  }
  if (inner_) inner_->load_state_dict(mine);
  set_lr(lr);
}

}  // namespace lockstep::parallel
