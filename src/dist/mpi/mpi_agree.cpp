// The MPI group's argument check across ranks (check_arguments): every rank sends what it is
// about to do (CallInfo) before the collective's data (over the group's sockets, or
// MPI_Iallgather with LOCKSTEP_MPI_DATA=mpi), and all ranks throw the same typed error
// when they differ or when one rank refused its own arguments.
#include <string>
#include <utility>

#include "dist/mpi/mpi_group.h"

namespace lockstep::dist::mpi_detail {

const char* kind_name(Kind k) {
  switch (k) {
    case Kind::AllReduce:
      return "all_reduce";
    case Kind::Broadcast:
      return "broadcast";
    case Kind::AllGather:
      return "all_gather";
    case Kind::ReduceScatter:
      return "reduce_scatter";
    case Kind::Barrier:
      return "barrier";
  }
  return "collective";
}

namespace {

const char* kind_name(std::int64_t k) {
  return k >= 0 && k <= static_cast<std::int64_t>(Kind::Barrier) ? kind_name(static_cast<Kind>(k))
                                                                 : "an unknown collective";
}

std::string dtype_name(std::int64_t d) {
  return d >= 0 && d <= static_cast<std::int64_t>(DType::Int64) ? to_string(static_cast<DType>(d))
                                                                : "unknown-dtype";
}

std::string op_name(std::int64_t op) {
  switch (op) {
    case static_cast<std::int64_t>(ReduceOp::Sum):
      return "Sum";
    case static_cast<std::int64_t>(ReduceOp::Max):
      return "Max";
    case static_cast<std::int64_t>(ReduceOp::Min):
      return "Min";
  }
  return std::to_string(op);
}

[[noreturn]] void throw_typed(ArgErrorType type, const std::string& message) {
  switch (type) {
    case ArgErrorType::Shape:
      throw ShapeError(message);
    case ArgErrorType::DType:
      throw DTypeError(message);
    case ArgErrorType::Device:
      throw DeviceError(message);
    case ArgErrorType::Value:
    case ArgErrorType::None:
      break;
  }
  throw ValueError(message);
}

}  // namespace

void MpiGroup::agree(CallInfo info, const ArgError& local) {
  if (size_ == 1 || !check_arguments_) {
    if (local) throw_typed(local.type, where() + ": " + local.message);
    return;
  }
  info.seq = seq_;
  info.error = static_cast<std::int64_t>(local.type);
  infos_.resize(static_cast<std::size_t>(size_));
  my_info_ = info;  // a member: MPI reads it until the exchange completes
  if (mesh_) {
    // One tag for every exchange of arguments: ranks that disagree on the collective's number
    // still exchange them, and the comparison below names the difference.
    constexpr std::uint64_t kArgumentsTag = ~std::uint64_t{0};
    infos_[static_cast<std::size_t>(rank_)] = my_info_;
    exchange_with_peers(
        kArgumentsTag,
        [&](int) {
          return Buffer{&my_info_, sizeof(CallInfo)};
        },
        [&](int j) {
          return Buffer{&infos_[static_cast<std::size_t>(j)], sizeof(CallInfo)};
        });
  } else {
    MPI_Request request = MPI_REQUEST_NULL;
    check(MPI_Iallgather(&my_info_, sizeof(CallInfo), MPI_BYTE, infos_.data(), sizeof(CallInfo),
                         MPI_BYTE, comm_, &request),
          "MPI_Iallgather");
    wait(request, "MPI_Iallgather");
  }

  // Every rank sees the same infos_, so every rank takes the same branch below.
  if (local) throw_typed(local.type, where() + ": " + local.message);
  for (int r = 0; r < size_; ++r)
    if (infos_[r].error != 0)
      throw_typed(static_cast<ArgErrorType>(infos_[r].error),
                  where() + ": " + rank_name(r) +
                      " rejected its arguments (see its error); no rank ran the collective");

  const CallInfo& first = infos_[0];
  auto differing = [&](auto field, auto describe) {
    std::string list;
    for (int r = 1; r < size_; ++r)
      if (field(infos_[r]) != field(first))
        list += (list.empty() ? "" : ", ") + (rank_name(r) + " " + describe(infos_[r]));
    return list.empty() ? list : list + ", but rank 0 " + describe(first);
  };
  auto call = [](const CallInfo& c) {
    return std::string("called ") + kind_name(c.kind) + " (collective #" + std::to_string(c.seq) +
           ")";
  };
  auto elements = [](const CallInfo& c) {
    return "passed " + std::to_string(c.numel) + " " + dtype_name(c.dtype) + " elements";
  };
  std::string d = differing([](const CallInfo& c) { return std::pair(c.kind, c.seq); }, call);
  if (!d.empty()) throw DistError(where() + ": the ranks called different collectives: " + d);
  d = differing([](const CallInfo& c) { return c.dtype; }, elements);
  if (!d.empty()) throw DTypeError(where() + ": " + d);
  d = differing([](const CallInfo& c) { return c.numel; }, elements);
  if (!d.empty()) throw ShapeError(where() + ": " + d);
  d = differing([](const CallInfo& c) { return c.op; },
                [](const CallInfo& c) { return "passed reduce op " + op_name(c.op); });
  if (!d.empty()) throw DistError(where() + ": " + d);
  d = differing([](const CallInfo& c) { return c.root; },
                [](const CallInfo& c) { return "passed root " + std::to_string(c.root); });
  if (!d.empty()) throw DistError(where() + ": " + d);
  d = differing(
      [](const CallInfo& c) { return c.wire; },
      [](const CallInfo& c) {
        return std::string("asked for the ") +
               (c.wire == static_cast<std::int64_t>(WireFormat::BFloat16) ? "bfloat16" : "native") +
               " wire format";
      });
  if (!d.empty()) throw DistError(where() + ": " + d);
}

}  // namespace lockstep::dist::mpi_detail
