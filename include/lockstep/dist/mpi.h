// The "mpi" ProcessGroup backend: one process per rank, started by mpirun (OpenMPI), on one
// machine or many. MPI launches the ranks and carries the roll call and failure notices; the
// collectives' bytes travel over TCP connections the group opens between its ranks (non-blocking
// sockets driven by poll(), as gloo's TCP transport does; LOCKSTEP_MPI_DATA=mpi moves them
// through MPI's non-blocking collectives instead). Every collective progresses until it completes
// or the group's timeout passes, so a hung, stopped or dead peer becomes a
// TimeoutError/DistError on the surviving ranks instead of a hang. Reductions are computed by
// this library in rank order on every rank (not by MPI's own reduction, whose order is not
// specified), so results are bit-identical on every rank and to the threads backend.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "lockstep/core/device.h"
#include "lockstep/dist/process_group.h"

namespace lockstep::dist {

/// Whether this binary was built with the MPI backend (CMake option LOCKSTEP_MPI).
bool mpi_available();

/// Whether this process was started by an MPI launcher: OMPI_COMM_WORLD_SIZE (OpenMPI),
/// PMI_SIZE / PMIX_RANK (MPICH, Slurm) in the environment. Works without initialising MPI.
bool launched_by_mpi();

/// Where this process sits on its node, as the MPI launcher tells it: `rank` is its index among
/// the job's processes on this node (0-based), `size` how many there are (-1: not said).
struct LocalRank {
  int rank = 0;
  int size = -1;
};

/// This process's LocalRank from the launcher's environment, read without initialising MPI:
/// OMPI_COMM_WORLD_LOCAL_RANK / OMPI_COMM_WORLD_LOCAL_SIZE (OpenMPI's mpirun),
/// MPI_LOCALRANKID / MPI_LOCALNRANKS (MPICH's Hydra), SLURM_LOCALID (srun; size not said), the
/// first launcher whose rank variable is set. nullopt when none is (not started by such a
/// launcher). ValueError naming the variable when a value is not a non-negative integer (a size
/// must be >= 1 and above the rank). As torchrun's LOCAL_RANK, it picks this process's GPU:
/// cuda:rank.
std::optional<LocalRank> launch_local_rank();

/// The GPU of a process launched one per GPU: cuda:(local.rank), given the node's `gpus` visible
/// GPUs (cuda::device_count()). DeviceError when the node has more ranks than GPUs (local.size >
/// gpus, or local.rank >= gpus when the size is not said), naming both counts: NCCL cannot place
/// two ranks on one GPU. ValueError for a LocalRank no launcher gives (rank < 0, size 0 or below
/// -1, rank >= size).
Device local_rank_device(const LocalRank& local, int gpus);

struct MpiOptions {
  /// Seconds a collective may wait for the other ranks before it throws TimeoutError (> 0;
  /// infinity waits forever).
  double timeout_seconds = 60.0;
  /// Before each collective's data, the ranks exchange what they are about to do (collective,
  /// its sequence number, dtype, element count, op, root, whether the local argument checks
  /// passed: 64 bytes per rank, one small MPI_Iallgather) and, when they differ, every rank
  /// throws: DTypeError / ShapeError naming the ranks, DistError for a different collective, op
  /// or root, and the offending rank's own error type when its arguments were bad. Off: one
  /// latency fewer per collective (cost: bench/bench_allreduce), and a mismatch becomes an MPI
  /// error (DistError) or a hang that ends in TimeoutError.
  bool check_arguments = true;
};

/// Initialises MPI once per process (MPI_Init_thread; MPI_THREAD_MULTIPLE requested,
/// MPI_THREAD_SERIALIZED accepted) and returns the group of all ranks (MPI_COMM_WORLD). A second
/// call returns the same group with the new timeout. DistError when the binary has no MPI
/// backend or MPI cannot start; ValueError for a timeout <= 0.
///
/// The group's collectives take contiguous CPU tensors of float32, float64 or int64 (DeviceError
/// otherwise) of at most 2^31 - 1 elements (ValueError). The MPI calls are made on duplicates of
/// MPI_COMM_WORLD with MPI_ERRORS_RETURN: a failed call throws DistError("mpi all_reduce on rank
/// 1 of 2: MPI_Ialltoallv failed: <MPI_Error_string>").
///
/// The data path, chosen by the environment when the group is made (the same on every rank, else
/// DistError; another value, on any rank and also on 1 rank, makes every rank throw ValueError
/// naming the lowest rank that has it):
///   LOCKSTEP_MPI_DATA=sockets (default) one TCP connection between every two ranks, opened here
///       (collective): each rank listens on an ephemeral port of all its interfaces and publishes
///       its IPv4 addresses; a lower rank connects to a higher one, on 127.0.0.1 when all ranks
///       share a host name, else to the addresses sharing a subnet with its own first. Every
///       transfer carries its collective's tag and byte count, checked by the receiver (DistError
///       "rank 1 sent 1996 bytes of transfer 2 where this rank expected 2000 bytes ...").
///       LOCKSTEP_SOCKET_IFNAME=eth1 publishes that interface's addresses only (as
///       GLOO_SOCKET_IFNAME). A rank that cannot listen or connect makes init_mpi throw DistError
///       on every rank as soon as every rank has tried (the ranks it would have connected to do
///       not wait for it), naming it, what it tried and these two variables. A closed connection
///       fails the collective with DistError naming the peer ("the connection to rank 1 closed
///       (it exited or failed)").
///   LOCKSTEP_MPI_DATA=mpi  MPI_Ialltoallv / MPI_Iallgatherv / MPI_Iallgather / MPI_Ibcast /
///       MPI_Ibarrier, polled with MPI_Test (e.g. for a fabric Open MPI reaches and TCP does not).
/// Both give the same bits (the same slices, folded in the same order). A collective that is not complete after
/// timeout_seconds throws TimeoutError("mpi all_reduce timed out after 10 s on rank 0 of 2: no
/// answer from rank 1 (hung, stopped or dead)"): before throwing, the rank calls a roll (a small
/// message to and from every peer on a separate communicator, answered by any rank that is
/// inside a collective, waiting at most 1.5 s); a rank that receives such a call while in a
/// collective answers it and then fails the same way, naming the rank that timed out. After any
/// failure the group is unusable: every later call throws DistError at once.
///
/// Started collectives (*_async, process_group.h) run in order on the group's communication
/// thread, made by the first one; it progresses them off the calling thread (sockets: asleep in
/// poll() between events, at most 10 ms at a time; mpi: a brief spin, then a test every 50 us),
/// with the group's lock released while it sleeps, so it does not take a core from the
/// computation it overlaps and notify_failure() gets through. Their
/// errors, timeouts and failed peers included, are thrown by Work::wait(). Every MPI call is made
/// under the group's lock, one thread at a time: MPI_THREAD_SERIALIZED is enough. With
/// WireFormat::BFloat16, all_reduce_async / reduce_async move two-byte elements through the
/// reduce-scatter and the all-gather: the owner of a slice widens every rank's
/// bfloat16 values to float32, folds them in rank order and rounds once (the base class's
/// emulation, bit for bit).
std::shared_ptr<ProcessGroup> init_mpi(MpiOptions options = {});

/// Tells every other rank of the init_mpi() group that this rank is about to leave with exit
/// status `status` because of `message` (say, a DataError in its batch). A rank that is inside a
/// collective of the group, or enters one later, then throws PeerFailedError("mpi all_reduce on
/// rank 0 of 2: rank 1 failed: <message>", 1, status) instead of waiting out its timeout, and
/// acknowledges the notice. Waits at most `wait_seconds` for the acknowledgements (peers that are
/// not in a collective answer later or never), so the caller can then exit and let mpirun end
/// the job. Best effort: never throws; a no-op without MPI, before init_mpi(), on one rank, or
/// after finalize_mpi(). `message` is cut to 400 bytes.
void notify_failure(int status, const std::string& message, double wait_seconds = 1.0);

/// MPI_Finalize, if init_mpi() ran and MPI is not finalised yet (call once at the end of a run
/// whose ranks all succeeded: finalize waits for the other ranks). After a collective failed it
/// does nothing (MPI_Finalize would wait for the failed rank); exit with a non-zero status, and
/// mpirun ends the other ranks.
void finalize_mpi();

/// The ranks that did not answer the roll call taken when a collective of the init_mpi() group
/// failed on a timeout (ascending; the same ranks TimeoutError's message names). Empty before
/// any timeout, when every rank answered, and in builds without MPI. For reporting which rank
/// failed without parsing the message.
std::vector<int> mpi_unresponsive_ranks();

/// Every rank's host name (MPI_Get_processor_name, gathered by init_mpi()), indexed by rank;
/// empty when all ranks run on one host (a name would tell nothing there), before init_mpi()
/// and in builds without MPI. The group's own errors name peers as "rank 1 on host2" in a job
/// on several hosts; callers use this to name ranks the same way.
std::vector<std::string> mpi_hosts();

}  // namespace lockstep::dist
