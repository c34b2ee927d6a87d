// The process group of the replica running on this thread: how a module whose forward or
// backward runs a collective (SyncBatchNorm) finds the group that spans every replica of the
// step, without the nn layer knowing the parallel one. DataParallel and DistributedDataParallel
// install it around each replica's work on the thread that runs it.
#pragma once

#include "lockstep/dist/process_group.h"

namespace lockstep::dist {

/// The group installed on this thread, or null outside a replica's work. Under DataParallel it
/// is the in-process group of the wrapper's devices (threads on CPU devices, NCCL on GPUs) with
/// replica k as rank k; under DistributedDataParallel the group of every rank's local replicas,
/// ranks × local devices (rank r's replica k is member r · devices + k; with one device per rank
/// the same ranks as the process group). It spans all of the wrapper's replicas, so a module
/// whose forward or backward calls a collective must declare it (nn::Module::runs_collectives()):
/// every replica then runs each step, one without rows (batch < devices, a rank with an empty
/// batch) on 0 rows, and one whose targets are all ignored backpropagates zeros, so each meets
/// the others' collectives. In deterministic mode it is the group of the step's shards in global shard order (member s =
/// shard s, counted over every rank's shards; lockstep/dist/detail/shard_group.h), so a collective
/// lines up however the shards are spread over devices and ranks, and its result is the same bits for
/// any spread (Sum adds the members in member order). A module whose forward or backward calls
/// one must declare it (nn::Module::runs_collectives()): its shards then run at once, one thread
/// and one replica each (CPU devices only); undeclared, the shards of a device run one after
/// another and the collective throws instead of waiting. Every rank needs a shard in each step
/// (Error otherwise). A replica that throws (a bad label in the loss, say) aborts the in-process
/// part of its group (ProcessGroup::abort): its siblings on this rank throw DistError from the
/// collective they wait in, and the step rethrows the first error; other ranks' replicas wait
/// for the MPI group's timeout. On GPUs (NCCL) nothing aborts: siblings wait. Under
/// DistributedDataParallel::join() a joined rank's replicas take part in each shadow step on 0
/// rows shaped like its last batch; join() is refused (ValueError on every rank) when a joined
/// rank never trained a batch, and in deterministic mode (distributed.h, "Uneven inputs").
ProcessGroup* current_group();

/// RAII: installs `group` (may be null) for the calling thread; restores the previous one.
class CurrentGroupGuard {
 public:
  explicit CurrentGroupGuard(ProcessGroup* group);
  ~CurrentGroupGuard();
  CurrentGroupGuard(const CurrentGroupGuard&) = delete;
  CurrentGroupGuard& operator=(const CurrentGroupGuard&) = delete;

 private:
  ProcessGroup* prev_;
};

}  // namespace lockstep::dist
