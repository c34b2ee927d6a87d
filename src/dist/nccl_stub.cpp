// The NCCL entry points of a build without the CUDA backend (LOCKSTEP_CUDA=OFF): CMake compiles
// this file instead of the files of src/dist/nccl/ (nccl_group.h lists them).
#include "lockstep/dist/nccl.h"

namespace lockstep::dist {

namespace {
[[noreturn]] void not_built() {
  throw DistError(
      "this build has no NCCL backend (configure with -DLOCKSTEP_CUDA=ON and the CUDA toolkit)");
}
}  // namespace

bool nccl_available() { return false; }

std::string nccl_version() { return {}; }

std::vector<std::shared_ptr<ProcessGroup>> new_nccl_group(const std::vector<Device>&, NcclOptions) {
  not_built();
}

std::shared_ptr<ProcessGroup> new_nccl_group(std::shared_ptr<ProcessGroup>, Device, NcclOptions) {
  not_built();
}

std::optional<Device> nccl_device(const ProcessGroup&) { return std::nullopt; }

std::shared_ptr<ProcessGroup> nccl_bootstrap(const ProcessGroup&) { return nullptr; }

}  // namespace lockstep::dist
