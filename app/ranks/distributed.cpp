// Multi-process context of the CLI (see distributed.h).
#include "ranks/distributed.h"

#include <cstdlib>

#include "lockstep/core/error.h"
#include "lockstep/cuda/runtime.h"
#include "lockstep/dist/mpi.h"
#include "lockstep/dist/nccl.h"
#include "lockstep/ops/ops.h"

namespace lockstep::app {
namespace {

DistContext& context() {
  static DistContext c;
  return c;
}

// --backend nccl: rank r of a node on cuda:r, an NCCL group over the job's ranks.
void init_nccl(const DistOptions& options, DistContext& c) {
  if (!dist::nccl_available())
    throw DeviceError(
        "--backend nccl: this build has no CUDA/NCCL backend (build with -DLOCKSTEP_CUDA=ON and "
        "the CUDA toolkit; or train on the CPU with --backend mpi or threads)");
  const int gpus = cuda::device_count();
  if (gpus == 0)
    throw DeviceError("--backend nccl: no usable GPU on this machine (" +
                      cuda::unavailable_reason() +
                      "); NCCL needs one GPU per rank (train on the CPU with --backend mpi or "
                      "threads)");
  const bool under_mpi = dist::launched_by_mpi();
  int local = 0;
  if (under_mpi) {
    if (!dist::mpi_available())
      throw ValueError(
          "--backend nccl under an MPI launcher: this build has no MPI backend, which the ranks "
          "need to exchange NCCL's unique id (install libopenmpi-dev and configure with "
          "-DLOCKSTEP_MPI=ON)");
    const std::optional<dist::LocalRank> lr = dist::launch_local_rank();
    if (!lr)
      throw ValueError(
          "--backend nccl: the MPI launcher does not say this rank's local rank "
          "(OMPI_COMM_WORLD_LOCAL_RANK, MPI_LOCALRANKID or SLURM_LOCALID), which picks its GPU");
    try {
      local = dist::local_rank_device(*lr, gpus).index;
    } catch (const DeviceError& e) {
      throw DeviceError(std::string("--backend nccl: ") + e.what());
    }
  }
  // The bootstrap carries NCCL's unique id and, afterwards, every collective on CPU tensors.
  std::shared_ptr<dist::ProcessGroup> bootstrap =
      under_mpi ? dist::init_mpi({.timeout_seconds = options.timeout})
                : dist::new_thread_group(1).front();
  // A failure from here on is one of a job of bootstrap->size() ranks (main() then exits at once
  // instead of waiting in MPI_Finalize, and names the rank).
  context().rank = bootstrap->rank();
  context().world = bootstrap->size();
  const Device device(DeviceType::CUDA, local);
  dist::NcclOptions nccl;
  nccl.timeout_seconds = options.timeout;
  c.group = dist::new_nccl_group(bootstrap, device, nccl);
  c.device = device;
  c.rank = c.group->rank();
  c.world = c.group->size();
}

}  // namespace

DistContext init_distributed(const DistOptions& options) {
  const std::string backend = options.backend.value_or(dist::launched_by_mpi() ? "mpi" : "threads");
  DistContext c;
  if (backend == "nccl") {
    init_nccl(options, c);
  } else if (backend == "mpi") {
    if (!dist::mpi_available())
      throw ValueError(
          "--backend mpi: this build has no MPI backend (install libopenmpi-dev and "
          "configure with -DLOCKSTEP_MPI=ON)");
    c.group = dist::init_mpi({.timeout_seconds = options.timeout});
    c.rank = c.group->rank();
    c.world = c.group->size();
  } else if (backend == "threads") {
    // mpirun -np N lockstep train --backend threads would train N unrelated copies
    for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE"})
      if (const char* v = std::getenv(name); v && std::atoi(v) > 1)
        throw ValueError("--backend threads: this process is one of " + std::string(v) +
                         " ranks started by an MPI launcher, which would train " + v +
                         " unrelated copies; use --backend mpi (the default under mpirun)");
  } else {
    throw ValueError("--backend: expected threads, mpi or nccl, got '" + backend + "'");
  }
  c.prints = c.rank == 0 || options.log_all_ranks;
  context() = c;
  return c;
}

const DistContext& current_dist() { return context(); }

void finish_distributed() {
  if (!context().group) return;
  context().group.reset();  // the NCCL communicator, if any, before CUDA and MPI go away
  dist::finalize_mpi();
}

int agree_on_signal(const DistContext& dist, int local_signal) {
  if (!dist.group || dist.world == 1) return local_signal;
  const std::int64_t v = local_signal;
  Tensor t = tensor(std::span<const std::int64_t>(&v, 1));
  dist.group->all_reduce(t, dist::ReduceOp::Max);
  return static_cast<int>(t.to_vector<std::int64_t>()[0]);
}

std::vector<double> sum_across_ranks(const DistContext& dist, std::vector<double> values) {
  if (!dist.group || dist.world == 1 || values.empty()) return values;
  Tensor t = tensor(std::span<const double>(values));
  dist.group->all_reduce(t, dist::ReduceOp::Sum);
  return t.to_vector<double>();
}

std::optional<InjectedFault> injected_fault() {
  const char* env = std::getenv("LOCKSTEP_TEST_FAULT");
  if (!env || !*env) return std::nullopt;
  const std::string s = env;
  const auto a = s.find(':'), b = a == std::string::npos ? a : s.find(':', a + 1);
  InjectedFault f;
  try {
    if (b == std::string::npos) throw std::invalid_argument("");
    f.kind = s.substr(0, a);
    std::size_t used = 0;
    f.rank = std::stoi(s.substr(a + 1, b - a - 1), &used);
    f.step = std::stoll(s.substr(b + 1), &used);
  } catch (const std::exception&) {
    throw ValueError("LOCKSTEP_TEST_FAULT: expected KIND:RANK:STEP, got '" + s + "'");
  }
  if (f.kind != "data" && f.kind != "nan" && f.kind != "hang" && f.kind != "die")
    throw ValueError("LOCKSTEP_TEST_FAULT: KIND must be data, nan, hang or die, got '" + f.kind +
                     "'");
  return f;
}

}  // namespace lockstep::app
