// The MPI group's all_reduce: a reduce-scatter plus an all-gather, over the group's sockets
// (socket_mesh.h) or as non-blocking MPI calls (LOCKSTEP_MPI_DATA=mpi): rank j owns elements
// [numel*j/n, numel*(j+1)/n); every rank sends rank j its slice of its tensor (MPI_Ialltoallv), the
// owner folds the n copies in rank order (rank 0 op rank 1 op ...) with the threads backend's
// functions (dist/reduce_op.h), and every owner sends its reduced slice to every rank
// (MPI_Iallgatherv). MPI's own reductions are not used: their order is unspecified, so ranks (and
// runs) could get different bits. The bfloat16 wire format moves uint16 halves through the same two
// steps. Started collectives (*_async) run this code on the group's communication thread.
#include <cstring>

#include "dist/bf16_round.h"
#include "dist/mpi/mpi_group.h"

namespace lockstep::dist::mpi_detail {

void MpiGroup::all_reduce(Tensor& t, ReduceOp op) { all_reduce_wire(t, op, WireFormat::Native); }

void MpiGroup::all_reduce_wire(Tensor& t, ReduceOp op, WireFormat wire) {
  Call call(*this, Kind::AllReduce);
  const bool bf16 = wire == WireFormat::BFloat16;
  ArgError err = check_tensor(t, "tensor");
  if (!err && bf16 && t.dtype() != DType::Float32)
    err = {ArgErrorType::DType,
           "the bfloat16 wire format takes float32 tensors, got " + to_string(t.dtype())};
  CallInfo info = describe(Kind::AllReduce, t, static_cast<std::int64_t>(op), -1);
  info.wire = static_cast<std::int64_t>(wire);
  agree(info, err);
  const std::int64_t numel = t.numel();
  if (numel == 0) return;
  float* values = bf16 ? static_cast<float*>(t.raw_data()) : nullptr;
  if (size_ == 1) {  // the emulation's two roundings, which are one
    if (bf16) detail::round_to_bfloat16(values, numel);
    return;
  }
  call.pin(t);
  const MPI_Datatype type = bf16 ? MPI_UINT16_T : mpi_type(t.dtype());
  const std::size_t es = bf16 ? sizeof(std::uint16_t) : element_size(t.dtype());
  // What travels: the tensor itself, or its values rounded to bfloat16.
  char* send = static_cast<char*>(t.raw_data());
  if (bf16) {
    send = static_cast<char*>(scratch(1, static_cast<std::size_t>(numel) * es));
    auto* bits = reinterpret_cast<std::uint16_t*>(send);
    for (std::int64_t i = 0; i < numel; ++i) bits[i] = to_bfloat16_bits(values[i]);
  }
  // Slices: rank j owns [displs_[j], displs_[j] + counts_[j]).
  for (int j = 0; j < size_; ++j) {
    const std::int64_t lo = numel * j / size_, hi = numel * (j + 1) / size_;
    displs_[j] = static_cast<int>(lo);
    counts_[j] = static_cast<int>(hi - lo);
  }
  const int mine = counts_[rank_];
  // Rank j's copy of my slice lands at recv + j * mine; my own copy stays in `send` (no self
  // send).
  for (int j = 0; j < size_; ++j) {
    scounts_[j] = j == rank_ ? 0 : counts_[j];
    rcounts_[j] = j == rank_ ? 0 : mine;
    rdispls_[j] = j * mine;
  }
  auto* recv = static_cast<char*>(scratch(0, static_cast<std::size_t>(mine) * size_ * es));
  // Rank j's slice of `send`, the only layout the sockets need: the reduce-scatter sends it to j,
  // the all-gather brings it back from j.
  auto slice = [&](int j) {
    return Buffer{send + static_cast<std::size_t>(displs_[j]) * es,
                  static_cast<std::size_t>(counts_[j]) * es};
  };
  MPI_Request request = MPI_REQUEST_NULL;
  if (mesh_) {
    exchange_with_peers(tag(0), slice, [&](int j) {
      return Buffer{recv + static_cast<std::size_t>(j) * mine * es,
                    static_cast<std::size_t>(mine) * es};
    });
  } else {
    check(MPI_Ialltoallv(send, scounts_.data(), displs_.data(), type, recv, rcounts_.data(),
                         rdispls_.data(), type, comm_, &request),
          "MPI_Ialltoallv");
    wait(request, "MPI_Ialltoallv");
  }

  char* my_slice = send + static_cast<std::size_t>(displs_[rank_]) * es;
  if (mine > 0 && !bf16) {  // fewer elements than ranks: some own none
    blocks_.resize(static_cast<std::size_t>(size_));
    for (int j = 0; j < size_; ++j) blocks_[j] = recv + static_cast<std::size_t>(j) * mine * es;
    // fold() writes its output over blocks 0 and 1 only; a later rank folds from a copy.
    if (rank_ < 2)
      blocks_[rank_] = my_slice;
    else
      std::memcpy(recv + static_cast<std::size_t>(rank_) * mine * es, my_slice,
                  static_cast<std::size_t>(mine) * es);
    fold(t.dtype(), op, blocks_, mine, my_slice);
  } else if (mine > 0) {
    // Every rank's copy widened to float32, folded in rank order, rounded once.
    auto* wide =
        static_cast<float*>(scratch(2, static_cast<std::size_t>(mine) * size_ * sizeof(float)));
    blocks_.resize(static_cast<std::size_t>(size_));
    for (int j = 0; j < size_; ++j) {
      const auto* from = reinterpret_cast<const std::uint16_t*>(
          j == rank_ ? my_slice : recv + static_cast<std::size_t>(j) * mine * es);
      float* to = wide + static_cast<std::size_t>(j) * mine;
      for (int i = 0; i < mine; ++i) to[i] = from_bfloat16_bits(from[i]);
      blocks_[j] = to;
    }
    fold(DType::Float32, op, blocks_, mine, wide);
    auto* out = reinterpret_cast<std::uint16_t*>(my_slice);
    for (int i = 0; i < mine; ++i) out[i] = to_bfloat16_bits(wide[i]);
  }

  if (mesh_) {
    exchange_with_peers(
        tag(1), [&](int) { return slice(rank_); }, slice);
  } else {
    check(MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, send, counts_.data(), displs_.data(),
                          type, comm_, &request),
          "MPI_Iallgatherv");
    wait(request, "MPI_Iallgatherv");
  }
  if (bf16) {
    const auto* bits = reinterpret_cast<const std::uint16_t*>(send);
    for (std::int64_t i = 0; i < numel; ++i) values[i] = from_bfloat16_bits(bits[i]);
  }
}

std::shared_ptr<Work> MpiGroup::all_reduce_async(Tensor& tensor, ReduceOp op, WireFormat wire) {
  return queue_.submit([this, t = tensor, op, wire]() mutable { all_reduce_wire(t, op, wire); });
}

// reduce() is all_reduce here (the base class's), so reduce_async is all_reduce_async.
std::shared_ptr<Work> MpiGroup::reduce_async(Tensor& tensor, int dst, ReduceOp op,
                                             WireFormat wire) {
  return queue_.submit([this, t = tensor, dst, op, wire]() mutable {
    check_root("reduce", dst);
    all_reduce_wire(t, op, wire);
  });
}

}  // namespace lockstep::dist::mpi_detail
