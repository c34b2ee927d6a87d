// launched_by_mpi(): reads the launcher's environment only, so it works in every build.
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <string>

#include "lockstep/core/error.h"
#include "lockstep/dist/mpi.h"

namespace lockstep::dist {

bool launched_by_mpi() {
  // OpenMPI's mpirun sets OMPI_COMM_WORLD_SIZE; MPICH's Hydra and Slurm's PMI set PMI_SIZE;
  // PMIx launchers (OpenMPI 4+, Slurm with PMIx) set PMIX_RANK.
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK"})
    if (std::getenv(name) != nullptr) return true;
  return false;
}

namespace {

// The value of `name` as an int >= `min`; nullopt when unset. ValueError for anything else.
std::optional<int> env_int(const char* name, int min) {
  const char* v = std::getenv(name);
  if (v == nullptr) return std::nullopt;
  // Digits only: strtol alone would also take leading blanks and a '+' ("  1", "+1"), which no
  // launcher writes.
  const bool digits = std::isdigit(static_cast<unsigned char>(v[0])) != 0 ||
                      (v[0] == '-' && std::isdigit(static_cast<unsigned char>(v[1])) != 0);
  char* end = nullptr;
  errno = 0;
  const long x = digits ? std::strtol(v, &end, 10) : 0;
  if (!digits || end == v || *end != '\0' || errno != 0 || x < min || x > 1 << 30)
    throw ValueError(std::string(name) + "=" + v + " in the environment: expected an integer >= " +
                     std::to_string(min) + " (set by the MPI launcher)");
  return static_cast<int>(x);
}

}  // namespace

std::optional<LocalRank> launch_local_rank() {
  struct Names {
    const char* rank;
    const char* size;  // null: the launcher does not say
  };
  for (const Names n :
       {Names{"OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE"},
        Names{"MPI_LOCALRANKID", "MPI_LOCALNRANKS"}, Names{"SLURM_LOCALID", nullptr}}) {
    const std::optional<int> rank = env_int(n.rank, 0);
    if (!rank) continue;
    LocalRank r;
    r.rank = *rank;
    if (n.size)
      if (const std::optional<int> size = env_int(n.size, 1)) {
        if (*size <= *rank)
          throw ValueError(std::string(n.rank) + "=" + std::to_string(*rank) + " and " + n.size +
                           "=" + std::to_string(*size) +
                           " in the environment: the local rank must be below the local size");
        r.size = *size;
      }
    return r;
  }
  return std::nullopt;
}

Device local_rank_device(const LocalRank& local, int gpus) {
  // Values no launcher gives (launch_local_rank refuses them): not cuda:-1, nor another rank's GPU.
  if (local.rank < 0 || local.size == 0 || local.size < -1 ||
      (local.size > 0 && local.rank >= local.size))
    throw ValueError("local_rank_device: local rank " + std::to_string(local.rank) +
                     " and local size " + std::to_string(local.size) +
                     ": expected 0 <= rank < size (size -1: not said)");
  if (local.size > gpus || local.rank >= gpus) {
    const std::string ranks =
        local.size > 0 ? std::to_string(local.size) +
                             (local.size == 1 ? " rank on this node" : " ranks on this node")
                       : "local rank " + std::to_string(local.rank);
    if (gpus <= 0)
      throw DeviceError(ranks + " but no GPU; NCCL needs a GPU of its own for each rank");
    throw DeviceError(
        ranks + " but only " + std::to_string(gpus) +
        (gpus == 1 ? " GPU (cuda:0)" : " GPUs (cuda:0..cuda:" + std::to_string(gpus - 1) + ")") +
        "; each rank needs a GPU of its own (NCCL cannot place two ranks on one "
        "GPU): start at most " +
        std::to_string(gpus) + " ranks per node");
  }
  return Device(DeviceType::CUDA, local.rank);
}

}  // namespace lockstep::dist
