// `lockstep train` across ranks (see trainer.h): each rank's part of a batch, the check that
// every rank runs the same setup, and which ranks saw a non-finite loss.
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "lockstep/lockstep.h"
#include "rank_hosts.h"
#include "trainer.h"

namespace lockstep::app {

std::pair<std::int64_t, std::int64_t> Trainer::local_part(std::int64_t batch) const {
  if (dist_.world == 1) return {0, batch};
  const std::int64_t shard = o_.deterministic ? parallel::DataParallelOptions{}.shard_size : 0;
  return parallel::split_batch(batch, dist_.world, shard)[static_cast<std::size_t>(dist_.rank)];
}

void Trainer::check_same_setup_on_every_rank() const {
  std::string setup = fingerprint_ + "--epochs=" + std::to_string(o_.epochs) +
                      "\n--resume=" + (o_.resume ? "on" : "off") +
                      "\ntrain=" + data_.train_x.shape().str() +
                      "\nval=" + (data_.val_x.defined() ? data_.val_x.shape().str() : "none") +
                      "\nclasses=" + std::to_string(data_.classes) + "\n";
  std::uint64_t h = 1469598103934665603ull;  // FNV-1a, 64 bit
  for (unsigned char c : setup) h = (h ^ c) * 1099511628211ull;
  const auto mine = static_cast<std::int64_t>(h >> 1);
  std::vector<Tensor> all;
  for (int r = 0; r < dist_.world; ++r) all.push_back(zeros({1}, kInt64));
  dist_.group->all_gather(all, tensor(std::span<const std::int64_t>(&mine, 1)));
  std::string differing;
  const std::int64_t first = all[0].to_vector<std::int64_t>()[0];
  for (int r = 1; r < dist_.world; ++r)
    if (all[static_cast<std::size_t>(r)].to_vector<std::int64_t>()[0] != first)
      differing += (differing.empty() ? "" : ",") + std::to_string(r);
  if (!differing.empty())
    throw ValueError((differing.find(',') == std::string::npos ? "rank " : "ranks ") + differing +
                     " started with other training flags or data than rank 0 (every rank of an "
                     "mpirun job must run the same command on the same data)");
}

std::string Trainer::nonfinite_ranks() const {
  auto* ddp = dynamic_cast<const parallel::DistributedDataParallel*>(dp_.get());
  if (!ddp || dist_.world == 1) return "";
  std::vector<int> bad;
  for (std::size_t r = 0; r < ddp->rank_losses().size(); ++r)
    if (!std::isfinite(ddp->rank_losses()[r])) bad.push_back(static_cast<int>(r));
  if (bad.empty()) return "";
  std::string s = bad.size() == 1 ? " on rank " : " on ranks ";
  for (std::size_t i = 0; i < bad.size(); ++i)
    s += (i ? "," : "") + std::to_string(bad[i]) + on_host(bad[i]);
  return s;
}

}  // namespace lockstep::app
