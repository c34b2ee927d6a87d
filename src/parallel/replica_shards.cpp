// ReplicaSet::run_shards (replicas.h): deterministic mode's shards, one after another on each
// device, or all at once on slots so that they meet at a collective inside forward or backward.
#include "lockstep/dist/current_group.h"
#include "parallel/replicas.h"

namespace lockstep::parallel::detail {

void ReplicaSet::run_shards(
    const Ranges& ranges, bool concurrent,
    const std::vector<std::shared_ptr<dist::ProcessGroup>>& groups,
    const std::function<void(std::size_t k)>& on_device,
    const std::function<void(std::size_t k, std::size_t j, std::size_t s)>& shard) {
  auto group_of = [&](std::size_t s) { return s < groups.size() ? groups[s].get() : nullptr; };
  if (!concurrent) {
    run(
        ranges.size(),
        [&](std::size_t k) {
          on_device(k);
          for (std::size_t s = ranges[k].first; s < ranges[k].second; ++s) {
            dist::CurrentGroupGuard group(group_of(s));
            shard(k, 0, s);
          }
        },
        /*single_thread=*/true);
    return;
  }
  for (std::size_t k = 0; k < ranges.size(); ++k) {
    if (!devices_[k].is_cpu())
      throw DeviceError(
          "DataParallel deterministic mode with a module that runs collectives "
          "(nn::Module::runs_collectives()) on " +
          devices_[k].str() +
          ": its shards would have to run at once on one GPU, which is not built; use CPU "
          "devices, or leave deterministic mode off");
    // Slots j > 0: clones of replica k whose parameters are views of its flat buffer.
    const std::size_t want = ranges[k].second - ranges[k].first;
    if (slots_.size() < replicas_.size()) slots_.resize(replicas_.size());
    while (slots_[k].size() + 1 < want) {
      Slot slot;
      slot.module = replicas_[k]->clone();
      slot.module->to(devices_[k]);
      slot.flat = FlatBuffer::build(slot.module->parameters(), devices_[k], &flat_[k].buffer);
      slot.worker = std::make_unique<DeviceWorker>(devices_[k], 1);
      slots_[k].push_back(std::move(slot));
    }
    for (std::size_t j = 1; j < want; ++j) slot_module(k, j).train(replicas_[k]->is_training());
    on_device(k);
  }
  // One intra-op thread per shard (one BLAS call per GEMM, as the sequential shards).
  std::vector<TaskHandle> tasks;
  std::vector<std::size_t> device_of;
  std::vector<dist::ProcessGroup*> shard_groups;
  for (std::size_t k = 0; k < ranges.size(); ++k)
    for (std::size_t s = ranges[k].first; s < ranges[k].second; ++s) {
      const std::size_t j = s - ranges[k].first;
      DeviceWorker& worker = j == 0 ? *workers_[k] : *slots_[k][j - 1].worker;
      tasks.push_back(submit(worker, k, group_of(s), true, [&shard, k, j, s] { shard(k, j, s); }));
      device_of.push_back(k);
      shard_groups.push_back(group_of(s));
    }
  wait_all(tasks, device_of, shard_groups);
}

}  // namespace lockstep::parallel::detail
