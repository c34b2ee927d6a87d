// The MPI entry points of a build without the MPI backend (LOCKSTEP_MPI=OFF): CMake compiles
// this file instead of src/dist/mpi/.
#include "lockstep/dist/mpi.h"

namespace lockstep::dist {

bool mpi_available() { return false; }

std::shared_ptr<ProcessGroup> init_mpi(MpiOptions) {
  throw DistError(
      "this build has no MPI backend (configure with -DLOCKSTEP_MPI=ON and libopenmpi-dev)");
}

void finalize_mpi() {}

void notify_failure(int, const std::string&, double) {}

std::vector<int> mpi_unresponsive_ranks() { return {}; }

std::vector<std::string> mpi_hosts() { return {}; }

}  // namespace lockstep::dist
