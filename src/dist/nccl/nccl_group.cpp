// The "nccl" ProcessGroup backend (include/lockstep/dist/nccl.h): NCCL communicators over CUDA
// devices, created with ncclCommInitAll (one process, several GPUs) or ncclCommInitRank with the
// unique id sent through a CPU ProcessGroup (one process per GPU). Compiled only with
// LOCKSTEP_CUDA; src/dist/nccl_stub.cpp stands in for it otherwise. This file: the group object
// (its stream, events and scratch), the clique's teardown, the blocking collectives and the
// dispatch of host tensors to the bootstrap group; nccl_group.h says where the rest is.
#include "dist/nccl/nccl_group.h"

#include <string>

#include "lockstep/cuda/graph.h"

namespace lockstep::dist::nccl_detail {

ncclDataType_t nccl_type(DType t) {
  switch (t) {
    case DType::Float32:
      return ncclFloat32;
    case DType::Float64:
      return ncclFloat64;
    case DType::Int64:
      return ncclInt64;
  }
  return ncclFloat32;
}

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum:
      return ncclSum;
    case ReduceOp::Max:
      return ncclMax;
    case ReduceOp::Min:
      return ncclMin;
  }
  return ncclSum;
}

Clique::~Clique() {
  // Errors cannot be reported from a destructor; a broken communicator was aborted already.
  int previous = -1;
  cudaGetDevice(&previous);
  for (std::size_t i = 0; i < comms.size(); ++i) {
    if (!comms[i]) continue;
    cudaSetDevice(devices[i]);
    cudaDeviceSynchronize();
  }
  ncclGroupStart();
  for (ncclComm_t c : comms)
    if (c) ncclCommFinalize(c);
  ncclGroupEnd();
  for (ncclComm_t c : comms)
    if (c) ncclCommDestroy(c);
  if (previous >= 0) cudaSetDevice(previous);
}

NcclGroup::NcclGroup(ncclComm_t comm, std::shared_ptr<Clique> clique, int device, int rank,
                     int size, NcclOptions options, std::shared_ptr<ProcessGroup> bootstrap)
    : comm_(comm),
      clique_(std::move(clique)),
      bootstrap_(std::move(bootstrap)),
      device_(device),
      rank_(rank),
      size_(size),
      options_(options) {
  where_ = device_name(device_) + " (rank " + std::to_string(rank_) + " of " +
           std::to_string(size_) + ")";
  cuda::DeviceGuard guard(device_);
  compute_ = static_cast<cudaStream_t>(cuda::compute_stream(device_));
  LOCKSTEP_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), device_,
                      "cudaStreamCreateWithFlags (NCCL stream)");
  LOCKSTEP_CUDA_CHECK(cudaEventCreateWithFlags(&ready_, cudaEventDisableTiming), device_,
                      "cudaEventCreateWithFlags");
  LOCKSTEP_CUDA_CHECK(cudaEventCreateWithFlags(&done_, cudaEventDisableTiming), device_,
                      "cudaEventCreateWithFlags");
  // Scratch for the argument check and barrier: one descriptor in, size descriptors out.
  const std::size_t bytes = sizeof(Descriptor) * static_cast<std::size_t>(size_ + 1);
  LOCKSTEP_CUDA_CHECK(cudaMalloc(&scratch_, bytes), device_,
                      "cudaMalloc(" + std::to_string(bytes) + " bytes, NCCL scratch)");
  // On the NCCL stream: a plain cudaMemset runs on the legacy default stream, which does not
  // order the non-blocking NCCL stream's first use of scratch_ after it.
  LOCKSTEP_CUDA_CHECK(cudaMemsetAsync(scratch_, 0, bytes, stream_), device_,
                      "cudaMemsetAsync (NCCL scratch)");
  LOCKSTEP_CUDA_CHECK(cudaMallocHost(&host_scratch_, bytes), device_,
                      "cudaMallocHost(" + std::to_string(bytes) + " bytes)");
}

NcclGroup::~NcclGroup() {
  int previous = -1;
  cudaGetDevice(&previous);
  cudaSetDevice(device_);
  if (stream_) cudaStreamSynchronize(stream_);
  if (!clique_ && comm_) ncclCommDestroy(comm_);
  if (scratch_) cudaFree(scratch_);
  if (host_scratch_) cudaFreeHost(host_scratch_);
  if (ready_) cudaEventDestroy(ready_);
  if (done_) cudaEventDestroy(done_);
  if (stream_) cudaStreamDestroy(stream_);
  if (previous >= 0) cudaSetDevice(previous);
}

// Collectives whose tensors are all on the host go to the bootstrap group (nccl.h); the rest
// are NCCL's, whose checks refuse a tensor that is not on this rank's GPU.
void NcclGroup::all_reduce(Tensor& t, ReduceOp op) {
  if (to_bootstrap({&t})) return bootstrap_->all_reduce(t, op);
  enqueue_reduce(t, -1, op, WireFormat::Native, false);
}

void NcclGroup::reduce(Tensor& t, int dst, ReduceOp op) {
  if (to_bootstrap({&t})) return bootstrap_->reduce(t, dst, op);
  check_root("reduce", dst);
  enqueue_reduce(t, dst, op, WireFormat::Native, false);
}

void NcclGroup::broadcast(Tensor& t, int root) {
  if (to_bootstrap({&t})) return bootstrap_->broadcast(t, root);
  check_root("broadcast", root);
  const bool ok = check_tensor("broadcast", t);
  agree(kBroadcast, t, -1, root, ok, "broadcast");
  run("ncclBroadcast", t, false, {}, [&] {
    return ncclBroadcast(address(t), address(t), count(t), nccl_type(t.dtype()), root, comm_,
                         stream_);
  });
}

void NcclGroup::all_gather(std::vector<Tensor>& outputs, const Tensor& input) {
  if (to_bootstrap({&input}, &outputs)) return bootstrap_->all_gather(outputs, input);
  enqueue_all_gather(outputs, input, false);
}

void NcclGroup::reduce_scatter(Tensor& output, const std::vector<Tensor>& inputs, ReduceOp op) {
  if (to_bootstrap({&output}, &inputs)) return bootstrap_->reduce_scatter(output, inputs, op);
  enqueue_reduce_scatter(output, inputs, op, false);
}

void NcclGroup::barrier() {
  check_usable("barrier");
  cuda::check_not_capturing(device_, "nccl barrier");
  agree(kBarrier, Tensor(), -1, -1, true, "barrier");
  cuda::DeviceGuard guard(device_);
  // Everything this rank enqueued on the device first, then one small all-reduce that every
  // rank must enter, waited for on the host.
  LOCKSTEP_CUDA_CHECK(cudaEventRecord(ready_, compute_), device_, "cudaEventRecord");
  LOCKSTEP_CUDA_CHECK(cudaStreamWaitEvent(stream_, ready_, 0), device_, "cudaStreamWaitEvent");
  call("ncclAllReduce (barrier)",
       [&] { return ncclAllReduce(scratch_, scratch_, 1, ncclInt64, ncclSum, comm_, stream_); });
  wait_host("barrier");
}

std::shared_ptr<Work> NcclGroup::enqueue_all_gather(std::vector<Tensor>& outputs,
                                                    const Tensor& input, bool async) {
  bool ok = check_tensor("all_gather", input);
  ok = check_list("all_gather", "outputs", outputs, input) && ok;
  agree(kAllGather, input, -1, -1, ok, "all_gather");
  std::vector<Tensor> keep = outputs;
  keep.push_back(input);
  // One broadcast per rank into outputs[r], fused by NCCL into one group launch.
  return run("ncclBroadcast (all_gather)", input, async, std::move(keep), [&] {
    ncclResult_t status = ncclGroupStart();
    for (int r = 0; r < size_ && status == ncclSuccess; ++r)
      status = ncclBroadcast(address(input), address(outputs[static_cast<std::size_t>(r)]),
                             count(input), nccl_type(input.dtype()), r, comm_, stream_);
    ncclResult_t end = ncclGroupEnd();
    return status != ncclSuccess ? status : end;
  });
}

std::shared_ptr<Work> NcclGroup::enqueue_reduce_scatter(Tensor& output,
                                                        const std::vector<Tensor>& inputs,
                                                        ReduceOp op, bool async) {
  bool ok = check_tensor("reduce_scatter", output);
  ok = check_list("reduce_scatter", "inputs", inputs, output) && ok;
  agree(kReduceScatter, output, static_cast<std::int64_t>(op), -1, ok, "reduce_scatter");
  std::vector<Tensor> keep = inputs;
  keep.push_back(output);
  // inputs[r] of every rank is reduced onto rank r's output: one ncclReduce per rank, grouped.
  return run("ncclReduce (reduce_scatter)", output, async, std::move(keep), [&] {
    ncclResult_t status = ncclGroupStart();
    for (int r = 0; r < size_ && status == ncclSuccess; ++r)
      status = ncclReduce(address(inputs[static_cast<std::size_t>(r)]),
                          r == rank_ ? address(output) : nullptr, count(output),
                          nccl_type(output.dtype()), nccl_op(op), r, comm_, stream_);
    ncclResult_t end = ncclGroupEnd();
    return status != ncclSuccess ? status : end;
  });
}

// Whether a collective goes to the bootstrap group: there is one and every tensor it names is
// a defined CPU tensor. Otherwise the NCCL path's checks take over (and refuse what is not on
// this rank's GPU, naming it).
bool NcclGroup::to_bootstrap(std::initializer_list<const Tensor*> tensors,
                             const std::vector<Tensor>* list) const {
  if (!bootstrap_) return false;
  auto host = [](const Tensor& t) { return t.defined() && t.device().is_cpu(); };
  for (const Tensor* t : tensors)
    if (!host(*t)) return false;
  if (list)
    for (const Tensor& t : *list)
      if (!host(t)) return false;
  return true;
}

}  // namespace lockstep::dist::nccl_detail
