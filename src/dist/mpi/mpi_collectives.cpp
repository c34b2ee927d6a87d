// The MPI group's collectives other than all_reduce (mpi_all_reduce.cpp): broadcast, all_gather,
// reduce_scatter (an all-to-all of the inputs, folded in rank order as all_reduce folds) and
// barrier, their data over the group's sockets (socket_mesh.h) or through MPI's non-blocking
// collectives (LOCKSTEP_MPI_DATA=mpi). Started collectives (*_async) run this code on the group's
// communication thread.
#include <cstring>

#include "dist/mpi/mpi_group.h"

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

void copy_if_distinct(const Tensor& from, Tensor& to) {
  if (from.raw_data() != to.raw_data() && from.numel() > 0)
    std::memcpy(to.raw_data(), from.raw_data(),
                static_cast<std::size_t>(from.numel()) * element_size(from.dtype()));
}

}  // namespace

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
  if (mesh_) {  // the root sends to every rank
    const std::size_t bytes = static_cast<std::size_t>(t.numel()) * element_size(t.dtype());
    for (int j = 0; j < size_; ++j)
      if (rank_ == root && j != root)
        mesh_->post_send(j, t.raw_data(), bytes, tag(0));
      else if (j == root && rank_ != root)
        mesh_->post_recv(root, t.raw_data(), bytes, tag(0));
    return wait_mesh();
  }
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
  if (mesh_) {
    exchange_with_peers(
        tag(0),
        [&](int) {
          return Buffer{input.raw_data(), bytes};
        },
        [&](int j) {
          return Buffer{outputs[static_cast<std::size_t>(j)].raw_data(), bytes};
        });
    return copy_if_distinct(input, outputs[static_cast<std::size_t>(rank_)]);
  }
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
  auto* recv = static_cast<char*>(scratch(1, bytes * static_cast<std::size_t>(size_)));
  if (mesh_) {  // inputs[j] goes to rank j; rank j's copy of my block lands at recv + j * bytes
    exchange_with_peers(
        tag(0),
        [&](int j) {
          return Buffer{inputs[static_cast<std::size_t>(j)].raw_data(), bytes};
        },
        [&](int j) {
          return Buffer{recv + j * bytes, bytes};
        });
    std::memcpy(recv + rank_ * bytes, inputs[static_cast<std::size_t>(rank_)].raw_data(), bytes);
  } else {  // pack the inputs into one buffer for MPI_Ialltoall
    auto* send = static_cast<char*>(scratch(0, bytes * static_cast<std::size_t>(size_)));
    for (int j = 0; j < size_; ++j) std::memcpy(send + j * bytes, inputs[j].raw_data(), bytes);
    const MPI_Datatype type = mpi_type(output.dtype());
    MPI_Request request = MPI_REQUEST_NULL;
    check(MPI_Ialltoall(send, static_cast<int>(numel), type, recv, static_cast<int>(numel), type,
                        comm_, &request),
          "MPI_Ialltoall");
    wait(request, "MPI_Ialltoall");
  }
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
  if (mesh_) {  // an empty message to and from every rank
    const auto none = [](int) { return Buffer{nullptr, 0}; };
    return exchange_with_peers(tag(0), none, none);
  }
  MPI_Request request = MPI_REQUEST_NULL;
  check(MPI_Ibarrier(comm_, &request), "MPI_Ibarrier");
  wait(request, "MPI_Ibarrier");
}

}  // namespace lockstep::dist::mpi_detail
