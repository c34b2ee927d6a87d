// The MPI group's object and its collectives other than all_reduce (mpi_all_reduce.cpp): the
// group's setup (host names, the roll call's receives), broadcast, all_gather, reduce_scatter (an
// all-to-all of the inputs, folded in rank order as all_reduce folds) and barrier, with the local
// argument checks and the fold that all_reduce shares. Started collectives (*_async) run this
// code on the group's communication thread.
#include "dist/mpi/mpi_group.h"

#include <algorithm>
#include <climits>
#include <cstring>

#include "dist/reduce_op.h"

namespace lockstep::dist::mpi_detail {

namespace {

// `t` must have the element count and dtype of `like` (all_gather outputs, reduce_scatter
// inputs).
ArgError check_like(const Tensor& t, const std::string& what, const Tensor& like,
                    const std::string& like_name) {
  if (ArgError e = check_tensor(t, what)) return e;
  if (t.dtype() != like.dtype())
    return {ArgErrorType::DType, what + " is " + to_string(t.dtype()) + " but " + like_name +
                                     " is " + to_string(like.dtype())};
  if (t.numel() != like.numel())
    return {ArgErrorType::Shape, what + " " + t.shape().str() + " does not match " + like_name +
                                     " " + like.shape().str()};
  return {};
}

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

void copy_if_distinct(const Tensor& from, Tensor& to) {
  if (from.raw_data() != to.raw_data() && from.numel() > 0)
    std::memcpy(to.raw_data(), from.raw_data(),
                static_cast<std::size_t>(from.numel()) * element_size(from.dtype()));
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
  if (size_ > 1) {
    post_ping_receive();
    post_notice_receive();
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
      hosts_.emplace_back(names.data() + r * MPI_MAX_PROCESSOR_NAME,
                          strnlen(names.data() + r * MPI_MAX_PROCESSOR_NAME,
                                  MPI_MAX_PROCESSOR_NAME - 1));
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

std::shared_ptr<Work> MpiGroup::all_gather_async(std::vector<Tensor>& outputs,
                                                 const Tensor& input) {
  return detail::queue_all_gather(queue_, *this, outputs, input);
}

std::shared_ptr<Work> MpiGroup::reduce_scatter_async(Tensor& output,
                                                     const std::vector<Tensor>& inputs,
                                                     ReduceOp op) {
  return detail::queue_reduce_scatter(queue_, *this, output, inputs, op);
}

void MpiGroup::broadcast(Tensor& t, int root) {
  Call call(*this, Kind::Broadcast);
  ArgError err = check_tensor(t, "tensor");
  if (!err && (root < 0 || root >= size_))
    err = {ArgErrorType::Value, "root " + std::to_string(root) + " out of range for " +
                                    std::to_string(size_) + " ranks"};
  agree(describe(Kind::Broadcast, t, -1, root), err);
  if (size_ == 1 || t.numel() == 0) return;
  call.pin(t);
  MPI_Request request = MPI_REQUEST_NULL;
  check(MPI_Ibcast(t.raw_data(), static_cast<int>(t.numel()), mpi_type(t.dtype()), root, comm_,
                   &request),
        "MPI_Ibcast");
  wait(request, "MPI_Ibcast");
}

void MpiGroup::all_gather(std::vector<Tensor>& outputs, const Tensor& input) {
  Call call(*this, Kind::AllGather);
  ArgError err = check_tensor(input, "input");
  if (!err && static_cast<int>(outputs.size()) != size_)
    err = {ArgErrorType::Value,
           "expected " + std::to_string(size_) + " outputs, got " + std::to_string(outputs.size())};
  for (std::size_t r = 0; r < outputs.size() && !err; ++r)
    err = check_like(outputs[r], "output " + std::to_string(r), input, "input");
  agree(describe(Kind::AllGather, input, -1, -1), err);
  if (size_ == 1) return copy_if_distinct(input, outputs[0]);
  const std::int64_t numel = input.numel();
  if (numel == 0) return;
  call.pin(input);
  const std::size_t bytes = static_cast<std::size_t>(numel) * element_size(input.dtype());
  auto* recv = static_cast<char*>(scratch(0, bytes * static_cast<std::size_t>(size_)));
  const MPI_Datatype type = mpi_type(input.dtype());
  MPI_Request request = MPI_REQUEST_NULL;
  check(MPI_Iallgather(input.raw_data(), static_cast<int>(numel), type, recv,
                       static_cast<int>(numel), type, comm_, &request),
        "MPI_Iallgather");
  wait(request, "MPI_Iallgather");
  for (int r = 0; r < size_; ++r) std::memcpy(outputs[r].raw_data(), recv + r * bytes, bytes);
}

void MpiGroup::reduce_scatter(Tensor& output, const std::vector<Tensor>& inputs, ReduceOp op) {
  Call call(*this, Kind::ReduceScatter);
  ArgError err = check_tensor(output, "output");
  if (!err && static_cast<int>(inputs.size()) != size_)
    err = {ArgErrorType::Value,
           "expected " + std::to_string(size_) + " inputs, got " + std::to_string(inputs.size())};
  for (std::size_t j = 0; j < inputs.size() && !err; ++j)
    err = check_like(inputs[j], "input " + std::to_string(j), output, "output");
  agree(describe(Kind::ReduceScatter, output, static_cast<std::int64_t>(op), -1), err);
  if (size_ == 1) return copy_if_distinct(inputs[0], output);
  const std::int64_t numel = output.numel();
  if (numel == 0) return;
  const std::size_t bytes = static_cast<std::size_t>(numel) * element_size(output.dtype());
  // inputs[j] goes to rank j: pack them into one buffer for MPI_Ialltoall.
  auto* send = static_cast<char*>(scratch(0, bytes * static_cast<std::size_t>(size_)));
  auto* recv = static_cast<char*>(scratch(1, bytes * static_cast<std::size_t>(size_)));
  for (int j = 0; j < size_; ++j) std::memcpy(send + j * bytes, inputs[j].raw_data(), bytes);
  const MPI_Datatype type = mpi_type(output.dtype());
  MPI_Request request = MPI_REQUEST_NULL;
  check(MPI_Ialltoall(send, static_cast<int>(numel), type, recv, static_cast<int>(numel), type,
                      comm_, &request),
        "MPI_Ialltoall");
  wait(request, "MPI_Ialltoall");
  blocks_.resize(static_cast<std::size_t>(size_));
  for (int j = 0; j < size_; ++j) blocks_[j] = recv + j * bytes;
  fold(output.dtype(), op, blocks_, numel, output.raw_data());
}

void MpiGroup::barrier() {
  Call call(*this, Kind::Barrier);
  if (size_ == 1) return;
  if (check_arguments_) {
    // The argument exchange is a barrier itself: no rank's MPI_Iallgather completes before
    // every rank has contributed.
    agree(describe(Kind::Barrier, Tensor(), -1, -1), {});
    return;
  }
  MPI_Request request = MPI_REQUEST_NULL;
  check(MPI_Ibarrier(comm_, &request), "MPI_Ibarrier");
  wait(request, "MPI_Ibarrier");
}

}  // namespace lockstep::dist::mpi_detail
