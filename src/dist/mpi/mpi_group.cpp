// The MPI group's object: its setup (host names, the roll call's receives, the data path's
// sockets: socket_mesh.h), and the pieces its collectives share (mpi_all_reduce.cpp,
// mpi_collectives.cpp): the local argument checks, the MPI datatypes and the fold in rank order.
#include "dist/mpi/mpi_group.h"

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <cstring>

#include "dist/reduce_op.h"

namespace lockstep::dist::mpi_detail {

namespace {

// out[i] = ((blocks[0][i] op blocks[1][i]) op blocks[2][i]) ...: the threads backend's order and
// functions, so the bits are the same. `out` may be blocks[0] or blocks[1] (each element is read
// before it is written), never a later block. At least two blocks.
template <class T>
void fold(ReduceOp op, const std::vector<const void*>& blocks, std::int64_t m, void* out_raw) {
  T* out = static_cast<T*>(out_raw);
  detail::with_op<T>(op, [&](auto f) {
    const T* a = static_cast<const T*>(blocks[0]);
    const T* b = static_cast<const T*>(blocks[1]);
    for (std::int64_t i = 0; i < m; ++i) out[i] = f(a[i], b[i]);
    for (std::size_t j = 2; j < blocks.size(); ++j) {
      const T* c = static_cast<const T*>(blocks[j]);
      for (std::int64_t i = 0; i < m; ++i) out[i] = f(out[i], c[i]);
    }
  });
}

// LOCKSTEP_MPI_DATA: 1 for "sockets" (or unset: SocketMesh carries the collectives' data), 0
// for "mpi" (MPI's own non-blocking collectives), -1 for anything else.
int data_path() {
  const char* v = std::getenv("LOCKSTEP_MPI_DATA");
  if (!v || std::strcmp(v, "sockets") == 0) return 1;
  return std::strcmp(v, "mpi") == 0 ? 0 : -1;
}

std::string bad_data_path() {
  return std::string("init_mpi: LOCKSTEP_MPI_DATA=") + std::getenv("LOCKSTEP_MPI_DATA") +
         " is not a data path; use sockets (the default) or mpi";
}

}  // namespace

MPI_Datatype mpi_type(DType t) {
  switch (t) {
    case DType::Float32:
      return MPI_FLOAT;
    case DType::Float64:
      return MPI_DOUBLE;
    case DType::Int64:
      return MPI_INT64_T;
  }
  return MPI_BYTE;
}

// Tensors are always contiguous and row-major (core/tensor.h), so only the device and the
// element count (MPI counts are int) need checking.
ArgError check_tensor(const Tensor& t, const std::string& what) {
  if (!t.defined()) return {ArgErrorType::Value, what + " is an undefined tensor"};
  if (!t.device().is_cpu())
    return {ArgErrorType::Device,
            what + " is on " + t.device().str() + "; the mpi backend takes CPU tensors"};
  if (t.numel() > INT_MAX)
    return {ArgErrorType::Value, what + " has " + std::to_string(t.numel()) +
                                     " elements; the mpi backend takes at most " +
                                     std::to_string(INT_MAX) + " per tensor"};
  return {};
}

CallInfo describe(Kind kind, const Tensor& t, std::int64_t op, std::int64_t root) {
  CallInfo c;
  c.kind = static_cast<std::int64_t>(kind);
  if (t.defined()) {
    c.dtype = static_cast<std::int64_t>(t.dtype());
    c.numel = t.numel();
  }
  c.op = op;
  c.root = root;
  return c;
}

void fold(DType dtype, ReduceOp op, const std::vector<const void*>& blocks, std::int64_t m,
          void* out) {
  switch (dtype) {
    case DType::Float32:
      return fold<float>(op, blocks, m, out);
    case DType::Float64:
      return fold<double>(op, blocks, m, out);
    case DType::Int64:
      return fold<std::int64_t>(op, blocks, m, out);
  }
}

MpiGroup::MpiGroup(MPI_Comm comm, MPI_Comm roll, const MpiOptions& options)
    : comm_(comm),
      roll_(roll),
      timeout_s_(options.timeout_seconds),
      check_arguments_(options.check_arguments) {
  MPI_Comm_rank(comm_, &rank_);
  MPI_Comm_size(comm_, &size_);
  const auto n = static_cast<std::size_t>(size_);
  counts_.resize(n);
  displs_.resize(n);
  scounts_.resize(n);
  rcounts_.resize(n);
  rdispls_.resize(n);
  gather_hosts();
  if (size_ == 1 && data_path() < 0) throw ValueError(bad_data_path());
  if (size_ > 1) {
    post_ping_receive();
    post_notice_receive();
    // Every rank must take the same, valid path: {path, -path, the lowest rank whose value is
    // not a path (else size)} reduced with MIN, so that all ranks throw together.
    const int path = data_path();
    int chosen[3] = {path, -path, path < 0 ? rank_ : size_};
    MPI_Allreduce(MPI_IN_PLACE, chosen, 3, MPI_INT, MPI_MIN, comm_);
    if (chosen[2] == rank_) throw ValueError(bad_data_path());
    if (chosen[2] < size_)
      throw ValueError("init_mpi: LOCKSTEP_MPI_DATA on " +
                       rank_names_[static_cast<std::size_t>(chosen[2])] +
                       " is not a data path (sockets or mpi); set it the same for every rank "
                       "(mpirun -x)");
    if (chosen[0] != -chosen[1])
      throw DistError(
          "init_mpi: the ranks disagree on LOCKSTEP_MPI_DATA (sockets on some, mpi "
          "on others); set it the same for every rank (mpirun -x)");
    if (chosen[0] == 1)
      mesh_ = tcp::SocketMesh::connect(comm_, rank_, size_, hosts_.empty(), rank_names_,
                                       std::clamp(timeout_s_, 1.0, 60.0));
  }
}

void MpiGroup::gather_hosts() {
  const auto n = static_cast<std::size_t>(size_);
  std::vector<char> names(n * MPI_MAX_PROCESSOR_NAME, '\0');
  char mine[MPI_MAX_PROCESSOR_NAME] = {};
  int length = 0;
  // Best effort: without names (a failed call) messages name ranks alone.
  if (MPI_Get_processor_name(mine, &length) == MPI_SUCCESS &&
      MPI_Allgather(mine, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, names.data(), MPI_MAX_PROCESSOR_NAME,
                    MPI_CHAR, comm_) == MPI_SUCCESS) {
    for (std::size_t r = 0; r < n; ++r)
      hosts_.emplace_back(
          names.data() + r * MPI_MAX_PROCESSOR_NAME,
          strnlen(names.data() + r * MPI_MAX_PROCESSOR_NAME, MPI_MAX_PROCESSOR_NAME - 1));
    if (std::all_of(hosts_.begin(), hosts_.end(), [&](const auto& h) { return h == hosts_[0]; }))
      hosts_.clear();
  }
  for (std::size_t r = 0; r < n; ++r)
    rank_names_.push_back("rank " + std::to_string(r) + (hosts_.empty() ? "" : " on " + hosts_[r]));
}

void MpiGroup::set_options(const MpiOptions& options) {
  std::lock_guard<std::mutex> lock(mu_);
  timeout_s_ = options.timeout_seconds;
  check_arguments_ = options.check_arguments;
}

std::vector<int> MpiGroup::unresponsive_ranks() {
  std::lock_guard<std::mutex> lock(mu_);
  return unresponsive_;
}

void* MpiGroup::scratch(std::size_t index, std::size_t bytes) {
  if (scratch_[index].size() < bytes) scratch_[index].resize(bytes);
  return scratch_[index].data();
}

}  // namespace lockstep::dist::mpi_detail
