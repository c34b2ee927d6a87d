#include "lockstep/parallel/distributed.h"

#include <algorithm>
#include <map>

#include "lockstep/autograd/grad_mode.h"
#include "lockstep/ops/ops.h"
#include "parallel/replicas.h"

namespace lockstep::parallel {

namespace {

DataParallelOptions data_parallel_options(const DistributedDataParallelOptions& o,
                                          std::shared_ptr<dist::ProcessGroup> group) {
  if (!group) throw ValueError("DistributedDataParallel: null process group");
  DataParallelOptions d;
  d.deterministic = o.deterministic;
  d.shard_size = o.shard_size;
  d.reducer = o.reducer;
  d.seed = o.seed;
  d.threads_per_device = o.threads_per_device;
  d.process_group = std::move(group);
  return d;
}

std::vector<Device> local_devices(const DistributedDataParallelOptions& o) {
  return o.device_ids.empty() ? std::vector<Device>{cpu(0)} : o.device_ids;
}

}  // namespace

DistributedDataParallel::DistributedDataParallel(std::shared_ptr<nn::Module> module,
                                                 std::shared_ptr<dist::ProcessGroup> process_group,
                                                 DistributedDataParallelOptions options)
    : DataParallel(std::move(module), local_devices(options), std::nullopt,
                   data_parallel_options(options, std::move(process_group))),
      broadcast_buffers_(options.broadcast_buffers) {
  broadcast_state(0);
}

void DistributedDataParallel::broadcast_state(int root) {
  if (world_size() == 1) return;
  NoGradGuard no_grad;
  process_group()->broadcast(master_.buffer, root);
  broadcast_buffers_from(root);
}

void DistributedDataParallel::broadcast_buffers_from(int root) {
  if (world_size() == 1) return;
  NoGradGuard no_grad;
  // One flat tensor per dtype (named_buffers() again each time: a module may replace a buffer).
  std::map<DType, std::vector<Tensor>> by_dtype;
  for (auto& [name, t] : module_->named_buffers())
    if (t.defined() && t.numel() > 0) by_dtype[t.dtype()].push_back(t);
  for (auto& [dtype, tensors] : by_dtype) {
    if (tensors.size() == 1) {
      Tensor t = tensors.front();
      process_group()->broadcast(t, root);
      continue;
    }
    std::vector<Tensor> flat;
    for (const Tensor& t : tensors) flat.push_back(t.reshape({t.numel()}));
    Tensor packed = cat(flat, 0);
    process_group()->broadcast(packed, root);
    std::int64_t offset = 0;
    for (Tensor t : tensors) {
      t.copy_(narrow(packed, 0, offset, t.numel()).reshape(t.shape()));
      offset += t.numel();
    }
  }
}

bool DistributedDataParallel::buffer_sync_due() const {
  return broadcast_buffers_ && forward_param_sync_ && replicas_->has_buffers();
}

DataParallel::GlobalStep DistributedDataParallel::begin_step(const LocalStep& mine) {
  remember_shadow(mine);
  // One all_gather of (pieces, count, active, sync, samples, shadow known) per rank: the last
  // says whether a joined rank knows the shape of its shadow steps (distributed_join.cpp).
  auto& group = *process_group();
  const int world = group.size();
  const std::int64_t v[6] = {mine.pieces,       mine.count,   joined_ ? 0 : 1,
                             mine.sync ? 1 : 0, mine.samples, has_shadow_ ? 1 : 0};
  Tensor in = tensor(std::span<const std::int64_t>(v, 6));
  std::vector<Tensor> out;
  for (int r = 0; r < world; ++r) out.push_back(zeros({6}, kInt64));
  group.all_gather(out, in);
  GlobalStep g;
  int first_active = -1;
  std::string sync_on, sync_off;  // the active ranks inside and outside no_sync()
  std::string joined, unshaped;   // the ranks in join(), and those without a shadow shape
  auto add = [](std::string& list, int r) {
    if (!list.empty()) list += ",";
    list += std::to_string(r);
  };
  for (int r = 0; r < world; ++r) {
    const auto w = out[static_cast<std::size_t>(r)].to_vector<std::int64_t>();
    g.rank_pieces.push_back(w[0]);
    g.count += static_cast<double>(w[1]);
    if (r < group.rank()) g.row_offset += w[4];
    if (!w[2]) {
      add(joined, r);
      if (!w[5]) add(unshaped, r);
      continue;
    }
    if (first_active < 0) {
      first_active = r;
      g.sync = w[3] != 0;
    }
    add(w[3] ? sync_on : sync_off, r);
  }
  if (!sync_on.empty() && !sync_off.empty())
    throw ValueError("DistributedDataParallel: ranks disagree on no_sync() in this step (ranks " +
                     sync_off + " inside no_sync, ranks " + sync_on +
                     " not): every rank must make the same synced and unsynced calls");
  if (first_active < 0) {
    all_joined_ = true;
    g.done = true;
    return g;
  }
  // A joined rank shadows a module that runs collectives by running its replicas on 0 rows,
  // which needs a shape and no deterministic mode; every rank sees the same gathered flags, so
  // where it cannot, every rank throws.
  if (!joined.empty() && module_->runs_collectives()) check_shadowable(joined, unshaped);
  last_active_rank_ = first_active;
  // Buffers, PyTorch's gate (distributed.h): from the lowest active rank, before the forward.
  if (buffer_sync_due()) broadcast_buffers_from(first_active);
  forward_param_sync_ = g.sync;
  return g;
}

double DistributedDataParallel::end_step(double share) {
  // Every rank's share, gathered in rank order: every rank returns the same mean.
  auto& group = *process_group();
  Tensor in = tensor(std::span<const double>(&share, 1));
  std::vector<Tensor> out;
  for (int r = 0; r < group.size(); ++r) out.push_back(zeros({1}, kFloat64));
  group.all_gather(out, in);
  rank_losses_.clear();
  double mean = 0;
  for (auto& t : out) {
    rank_losses_.push_back(t.item());
    mean += rank_losses_.back();
  }
  return mean;
}

void DistributedDataParallel::before_forward() {
  // Only a training forward takes part (no collective under no_grad or eval(), distributed.h).
  if (!GradMode::is_enabled() || !is_training()) return;
  if (buffer_sync_due()) broadcast_buffers_from(0);
  forward_param_sync_ = require_backward_grad_sync();
}

std::shared_ptr<dist::ProcessGroup> DistributedDataParallel::forward_shard_ranks(
    std::int64_t mine, std::vector<std::int64_t>& rank_shards) {
  // A training forward (the ones that run collectives, as before_forward): one all_gather.
  if (!GradMode::is_enabled() || !is_training())
    return DataParallel::forward_shard_ranks(mine, rank_shards);
  auto& group = *process_group();
  Tensor in = tensor(std::span<const std::int64_t>(&mine, 1));
  std::vector<Tensor> out;
  for (int r = 0; r < group.size(); ++r) out.push_back(zeros({1}, kInt64));
  group.all_gather(out, in);
  rank_shards.clear();
  for (auto& t : out) rank_shards.push_back(static_cast<std::int64_t>(t.item()));
  return process_group();
}

void DistributedDataParallel::reduce_gather_grads(Tensor& total, std::vector<char>& has) {
  // PyTorch's semantics on the autograd path: the gradient is the mean over ranks of each rank's
  // gradient of its own loss.
  auto& group = *process_group();
  NoGradGuard no_grad;
  group.all_reduce(total, dist::ReduceOp::Sum);
  total.mul_(1.0 / group.size());
  std::vector<std::int64_t> flags(has.begin(), has.end());
  Tensor f = tensor(std::span<const std::int64_t>(flags));
  group.all_reduce(f, dist::ReduceOp::Max);
  const auto agreed = f.to_vector<std::int64_t>();
  for (std::size_t j = 0; j < has.size(); ++j) has[j] = agreed[j] != 0;
}

std::shared_ptr<nn::Module> DistributedDataParallel::clone() const {
  throw ValueError(
      "DistributedDataParallel cannot be cloned: every rank constructs it collectively");
}

}  // namespace lockstep::parallel
