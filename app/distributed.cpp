// Multi-process context of the CLI (see distributed.h).
#include "distributed.h"

#include <cstdlib>

#include "lockstep/core/error.h"
#include "lockstep/dist/mpi.h"
#include "lockstep/dist/nccl.h"
#include "lockstep/ops/ops.h"

namespace lockstep::app {
namespace {

DistContext& context() {
  static DistContext c;
  return c;
}

}  // namespace

DistContext init_distributed(const DistOptions& options) {
  const std::string backend = options.backend.value_or(dist::launched_by_mpi() ? "mpi" : "threads");
  DistContext c;
  if (backend == "nccl")
    throw DeviceError(
        dist::nccl_available()
            ? "--backend nccl: one process per GPU (DistributedDataParallel over NCCL) is not "
              "built yet; one process trains on several GPUs with --devices cuda:0,cuda:1,... "
              "(DataParallel over NCCL)"
            : "--backend nccl: this build has no CUDA/NCCL backend (build with "
              "-DLOCKSTEP_CUDA=ON on a machine with GPUs)");
  if (backend == "mpi") {
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
  if (context().group) dist::finalize_mpi();
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
