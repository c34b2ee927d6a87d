// `lockstep train` across ranks (see trainer.h): each rank's part of a batch, the check that
// every rank runs the same setup, and which ranks saw a non-finite loss.
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "lockstep/lockstep.h"
#include "guards/rank_agreement.h"
#include "ranks/rank_hosts.h"
#include "train/trainer.h"

namespace lockstep::app {

std::pair<std::int64_t, std::int64_t> Trainer::local_part(std::int64_t batch) const {
  if (dist_.world == 1) return {0, batch};
  const std::int64_t shard = o_.deterministic ? parallel::DataParallelOptions{}.shard_size : 0;
  return parallel::split_batch(batch, dist_.world, shard)[static_cast<std::size_t>(dist_.rank)];
}

void Trainer::check_same_setup_on_every_rank() const {
  // gpt: models: the token streams and the vocabulary.
  const Tensor& train = text_ ? text_->train : data_.train_x;
  const Tensor& val = text_ ? text_->val : data_.val_x;
  const std::int64_t classes = text_ ? text_->vocab.size() : data_.classes;
  // --zero: whether the gradients are reduce-scattered depends on this rank's device count, so
  // the ranks must agree on it too (their collectives would differ).
  const std::string zero =
      o_.zero ? "--devices (count, with --zero)=" + std::to_string(r_.devices.size()) + "\n" : "";
  check_same_on_every_rank(dist_, rank_setup(o_, fingerprint_, train, val, classes) + zero);
}

std::string Trainer::nonfinite_ranks() const {
  auto* ddp = dynamic_cast<const parallel::DistributedDataParallel*>(dp_.get());
  if (!ddp || dist_.world == 1) return "";
  std::vector<int> bad;
  for (std::size_t r = 0; r < ddp->rank_losses().size(); ++r)
    if (!std::isfinite(ddp->rank_losses()[r])) bad.push_back(static_cast<int>(r));
  if (bad.empty()) return "";
  std::string s = bad.size() == 1 ? " on rank " : " on ranks ";
  for (std::size_t i = 0; i < bad.size(); ++i) {
    if (i > 0) s += ',';
    s += std::to_string(bad[i]) + on_host(bad[i]);
  }
  return s;
}

}  // namespace lockstep::app
