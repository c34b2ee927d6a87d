// The "mpi" ProcessGroup backend: one process per rank, started by mpirun (OpenMPI), on one
// machine or many. Every collective is posted as a non-blocking MPI call and polled until it
// completes or the group's timeout passes, so a hung, stopped or dead peer becomes a
// TimeoutError/DistError on the surviving ranks instead of a hang. Reductions are computed by
// this library in rank order on every rank (not by MPI's own reduction, whose order is not
// specified), so results are bit-identical on every rank and to the threads backend.
#pragma once

#include <memory>
#include <string>

#include "lockstep/dist/process_group.h"

namespace lockstep::dist {

/// Whether this binary was built with the MPI backend (CMake option LOCKSTEP_MPI).
bool mpi_available();

/// Whether this process was started by an MPI launcher: OMPI_COMM_WORLD_SIZE (OpenMPI),
/// PMI_SIZE / PMIX_RANK (MPICH, Slurm) in the environment. Works without initialising MPI.
bool launched_by_mpi();

struct MpiOptions {
  /// Seconds a collective may wait for the other ranks before it throws TimeoutError (> 0).
  double timeout_seconds = 60.0;
};

/// Initialises MPI once per process (MPI_Init_thread; MPI_THREAD_MULTIPLE requested,
/// MPI_THREAD_SERIALIZED accepted) and returns the group of all ranks (MPI_COMM_WORLD). A second
/// call returns the same group with the new timeout. DistError when the binary has no MPI
/// backend or MPI cannot start; ValueError for a timeout <= 0.
std::shared_ptr<ProcessGroup> init_mpi(MpiOptions options = {});

/// MPI_Finalize, if init_mpi() ran and MPI is not finalised yet (call once at the end of a run
/// whose ranks all succeeded: finalize waits for the other ranks).
void finalize_mpi();

}  // namespace lockstep::dist
