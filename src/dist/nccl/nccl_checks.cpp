// The nccl group's argument checks: each rank's own (device, list length, dtype and size of the
// list's tensors) and, with NcclOptions::check_arguments, the comparison across ranks of what
// every rank is about to do (one Descriptor each, all-gathered), so that all ranks throw alike.
#include <string>

#include "dist/nccl/nccl_group.h"
#include "lockstep/cuda/graph.h"

namespace lockstep::dist::nccl_detail {

const char* op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum:
      return "sum";
    case ReduceOp::Max:
      return "max";
    case ReduceOp::Min:
      return "min";
  }
  return "?";
}

const char* collective_name(std::int64_t c) {
  switch (c) {
    case kAllReduce:
      return "all_reduce";
    case kReduce:
      return "reduce";
    case kBroadcast:
      return "broadcast";
    case kAllGather:
      return "all_gather";
    case kReduceScatter:
      return "reduce_scatter";
    case kBarrier:
      return "barrier";
  }
  return "unknown collective";
}

// What the NCCL path's refusal of a tensor off this rank's GPU adds about CPU tensors.
std::string NcclGroup::host_hint() const {
  return bootstrap_ ? " (CPU tensors go to the bootstrap group (" + bootstrap_->backend() +
                          ") only when every tensor of the collective is on the CPU)"
                    : " (a group made by new_nccl_group(bootstrap, device) sends collectives "
                      "on CPU tensors to its bootstrap group; this one has none)";
}

void NcclGroup::check_usable(const char* op) const {
  if (broken_)
    throw DistError("nccl " + std::string(op) + " on " + where_ +
                    ": the group is unusable after an earlier failure (" + broken_reason_ + ")");
}

// Local checks. With check_arguments they are reported through agree() so that every rank
// throws; without, they throw here.
bool NcclGroup::check_tensor(const char* op, const Tensor& t) {
  check_usable(op);
  std::string problem;
  if (!t.defined())
    problem = "the tensor is undefined";
  else if (!t.device().is_cuda() || t.device().index != device_)
    problem = "the tensor is on " + t.device().str() +
              "; this rank's NCCL collectives take tensors on " + device_name(device_) +
              host_hint();
  return report(op, problem);
}

bool NcclGroup::check_list(const char* op, const char* what, const std::vector<Tensor>& list,
                           const Tensor& like) {
  std::string problem;
  bool wrong_length = false;
  if (list.size() != static_cast<std::size_t>(size_)) {
    wrong_length = true;
    problem = std::string(what) + " has " + std::to_string(list.size()) +
              " tensors; the group has " + std::to_string(size_) + " ranks";
  }
  for (std::size_t r = 0; problem.empty() && r < list.size(); ++r) {
    const Tensor& t = list[r];
    if (!t.defined() || !t.device().is_cuda() || t.device().index != device_)
      problem = std::string(what) + "[" + std::to_string(r) + "] is " +
                (t.defined() ? "on " + t.device().str() : std::string("undefined")) +
                "; this rank's NCCL collectives take tensors on " + device_name(device_) +
                host_hint();
    else if (like.defined() && (t.dtype() != like.dtype() || t.numel() != like.numel()))
      problem = std::string(what) + "[" + std::to_string(r) + "] is " + to_string(t.dtype()) +
                " with " + std::to_string(t.numel()) + " elements; expected " +
                to_string(like.dtype()) + " with " + std::to_string(like.numel());
  }
  return report(op, problem, wrong_length);
}

// Records (check_arguments) or throws (without) this rank's own argument error: DeviceError
// for a tensor on the wrong device, ValueError for a list of the wrong length.
bool NcclGroup::report(const char* op, const std::string& problem, bool value_error) {
  if (problem.empty()) return true;
  std::string message = "nccl " + std::string(op) + " on " + where_ + ": " + problem;
  if (!options_.check_arguments) {
    if (value_error) throw ValueError(message);
    throw DeviceError(message);
  }
  local_error_ = std::move(message);
  local_value_error_ = value_error;
  return false;
}

// With check_arguments: every rank learns what every other rank is about to do and all throw
// the same error when they differ or when one rank's arguments were bad.
void NcclGroup::agree(std::int64_t collective, const Tensor& t, std::int64_t op, std::int64_t root,
                      bool local_ok, const char* name, std::int64_t wire) {
  ++sequence_;
  if (!options_.check_arguments) return;
  // The check waits for the other ranks' descriptors on the host.
  cuda::check_not_capturing(device_, "nccl " + std::string(name) + "'s argument check");
  Descriptor mine;
  mine.collective = collective;
  mine.sequence = sequence_;
  mine.dtype = t.defined() ? static_cast<std::int64_t>(t.dtype()) : -1;
  mine.numel = t.defined() ? t.numel() : 0;
  mine.op = op;
  mine.root = root;
  mine.local_ok = local_ok ? 1 : 0;
  mine.wire = wire;

  cuda::DeviceGuard guard(device_);
  auto* host = static_cast<Descriptor*>(host_scratch_);
  auto* dev = static_cast<Descriptor*>(scratch_);
  host[0] = mine;
  LOCKSTEP_CUDA_CHECK(
      cudaMemcpyAsync(dev, host, sizeof(Descriptor), cudaMemcpyHostToDevice, stream_), device_,
      "cudaMemcpyAsync (nccl argument check)");
  call("ncclAllGather (argument check)",
       [&] { return ncclAllGather(dev, dev + 1, 8, ncclInt64, comm_, stream_); });
  LOCKSTEP_CUDA_CHECK(cudaMemcpyAsync(host + 1, dev + 1, sizeof(Descriptor) * size_,
                                      cudaMemcpyDeviceToHost, stream_),
                      device_, "cudaMemcpyAsync (nccl argument check)");
  wait_host(name);

  const std::string prefix = "nccl " + std::string(name) + " on " + where_ + ": ";
  for (int r = 0; r < size_; ++r) {
    const Descriptor& d = host[1 + r];
    if (!d.local_ok) {
      if (r == rank_) {
        const std::string message = local_error_;
        local_error_.clear();
        if (local_value_error_) throw ValueError(message);
        throw DeviceError(message);
      }
      throw DistError(prefix + "rank " + std::to_string(r) + "'s arguments were refused there");
    }
  }
  const Descriptor& first = host[1];
  for (int r = 1; r < size_; ++r) {
    const Descriptor& d = host[1 + r];
    const std::string ranks = "rank 0 and rank " + std::to_string(r);
    if (d.collective != first.collective || d.sequence != first.sequence)
      throw DistError(prefix + ranks + " called different collectives (" +
                      collective_name(first.collective) + " #" + std::to_string(first.sequence) +
                      " vs " + collective_name(d.collective) + " #" + std::to_string(d.sequence) +
                      ")");
    if (d.dtype != first.dtype)
      throw DTypeError(prefix + ranks + " passed different dtypes (" +
                       to_string(static_cast<DType>(first.dtype)) + " vs " +
                       to_string(static_cast<DType>(d.dtype)) + ")");
    if (d.numel != first.numel)
      throw ShapeError(prefix + ranks + " passed tensors of different sizes (" +
                       std::to_string(first.numel) + " vs " + std::to_string(d.numel) +
                       " elements)");
    if (d.op != first.op)
      throw DistError(prefix + ranks + " asked for different reductions (" +
                      op_name(static_cast<ReduceOp>(first.op)) + " vs " +
                      op_name(static_cast<ReduceOp>(d.op)) + ")");
    if (d.root != first.root)
      throw DistError(prefix + ranks + " named different roots (" + std::to_string(first.root) +
                      " vs " + std::to_string(d.root) + ")");
    if (d.wire != first.wire)
      throw DistError(prefix + ranks + " asked for different wire formats (" +
                      (first.wire ? "bfloat16" : "native") + " vs " +
                      (d.wire ? "bfloat16" : "native") + ")");
  }
}

}  // namespace lockstep::dist::nccl_detail
