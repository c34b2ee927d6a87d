// How `lockstep train` / `lockstep eval` take part in a multi-process job: the process group
// chosen by --backend, this process's rank, and the small collectives the CLI itself needs
// (agreeing on a pending signal, reducing evaluation sums).
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "lockstep/dist/process_group.h"
#include "cli/options.h"

namespace lockstep::app {

struct DistContext {
  /// Null for the threads backend (this process alone); else the ranks of the job.
  std::shared_ptr<dist::ProcessGroup> group;
  int rank = 0;
  int world = 1;
  /// Whether this process prints progress and summaries.
  bool prints = true;
  /// --backend nccl: this rank's GPU, cuda:(local rank); the group is then an NCCL group on it
  /// whose CPU-tensor collectives go to the bootstrap (MPI, or a group of one).
  std::optional<Device> device;
  bool is_main() const { return rank == 0; }
};

/// Resolves --backend (default: mpi when launched_by_mpi(), else threads) and starts it: mpi
/// initialises MPI with --timeout; nccl (one process per GPU, PyTorch's DDP layout) takes
/// cuda:(local rank) (dist::launch_local_rank(); 0 for a process not started by an MPI
/// launcher, which is a job of one rank) and makes an NCCL group on it with
/// dist::new_nccl_group, bootstrapped by MPI under mpirun, by a group of one otherwise.
/// DeviceError (exit 2) for nccl in a build without CUDA, with no usable GPU, or with more
/// ranks on this node than GPUs (naming both counts); ValueError: --backend mpi, or nccl under
/// mpirun, in a binary without MPI, or an MPI launcher that does not say the local rank.
/// Remembers the context for current_dist().
DistContext init_distributed(const DistOptions& options);

/// The context of init_distributed(), or a single-process one before it ran.
const DistContext& current_dist();

/// Releases the process group (an NCCL communicator is destroyed here, while CUDA is still up)
/// and ends the job's MPI use after success (MPI_Finalize). On failure the process must not wait
/// for the others: the caller exits at once, and mpirun ends the other ranks.
void finish_distributed();

/// Across ranks: the largest signal number any rank has pending (0: none), so every rank stops
/// after the same step. Without a group, the local value.
int agree_on_signal(const DistContext& dist, int local_signal);

/// Across ranks: element-wise sums of `values` (float64, reduced in rank order, identical on
/// every rank). Without a group, `values` unchanged.
std::vector<double> sum_across_ranks(const DistContext& dist, std::vector<double> values);

/// A fault injected for the fault-handling tests through the environment variable
/// LOCKSTEP_TEST_FAULT=KIND:RANK:STEP (KIND: data | nan | hang | die): at training step STEP
/// (1-based) rank RANK throws a DataError (data), feeds a NaN batch (nan), stops itself with
/// SIGSTOP (hang) or kills itself with SIGKILL (die). Not for production use. ValueError for a
/// malformed value.
struct InjectedFault {
  std::string kind;
  int rank = -1;
  std::int64_t step = -1;
};
std::optional<InjectedFault> injected_fault();

}  // namespace lockstep::app
