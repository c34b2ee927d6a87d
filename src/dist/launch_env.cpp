// launched_by_mpi(): reads the launcher's environment only, so it works in every build.
#include <cstdlib>

#include "lockstep/dist/mpi.h"

namespace lockstep::dist {

bool launched_by_mpi() {
  // OpenMPI's mpirun sets OMPI_COMM_WORLD_SIZE; MPICH's Hydra and Slurm's PMI set PMI_SIZE;
  // PMIx launchers (OpenMPI 4+, Slurm with PMIx) set PMIX_RANK.
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK"})
    if (std::getenv(name) != nullptr) return true;
  return false;
}

}  // namespace lockstep::dist
