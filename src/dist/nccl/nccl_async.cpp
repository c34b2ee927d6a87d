// The nccl group's started collectives (NcclGroup's *_async, NcclWork) and its reduce in either
// wire format (native, or bfloat16 through bf16_wire.h), which the blocking all_reduce and reduce
// use too.
#include <string>

#include "dist/nccl/bf16_wire.h"
#include "dist/nccl/nccl_group.h"

namespace lockstep::dist::nccl_detail {

NcclWork::~NcclWork() {
  try {
    order_compute_stream();
  } catch (...) {  // a broken device: the error surfaces at its next use
  }
  cudaEventDestroy(event_);
}

void NcclWork::wait() { order_compute_stream(); }

bool NcclWork::is_completed() { return cudaEventQuery(event_) != cudaErrorNotReady; }

void NcclWork::order_compute_stream() {
  if (waited_) return;
  waited_ = true;
  ::lockstep::cuda::DeviceGuard guard(device_);
  const auto compute = static_cast<cudaStream_t>(::lockstep::cuda::compute_stream(device_));
  LOCKSTEP_CUDA_CHECK(cudaStreamWaitEvent(compute, event_, 0), device_,
                      "cudaStreamWaitEvent (nccl Work::wait)");
  keep_.clear();
}

// Started collectives: enqueued on the NCCL stream like the blocking ones (the argument check,
// when on, still waits on the host for the descriptors), with an event instead of the compute
// stream's wait (NcclWork). Errors of the checks come out of wait().
std::shared_ptr<Work> NcclGroup::all_reduce_async(Tensor& t, ReduceOp op, WireFormat wire) {
  if (to_bootstrap({&t})) return bootstrap_->all_reduce_async(t, op, wire);
  return started_or_failed([&] { return enqueue_reduce(t, -1, op, wire, true); });
}

std::shared_ptr<Work> NcclGroup::reduce_async(Tensor& t, int dst, ReduceOp op, WireFormat wire) {
  if (to_bootstrap({&t})) return bootstrap_->reduce_async(t, dst, op, wire);
  return started_or_failed([&] {
    check_root("reduce", dst);
    return enqueue_reduce(t, dst, op, wire, true);
  });
}

std::shared_ptr<Work> NcclGroup::all_gather_async(std::vector<Tensor>& outputs,
                                                  const Tensor& input) {
  if (to_bootstrap({&input}, &outputs)) return bootstrap_->all_gather_async(outputs, input);
  return started_or_failed([&] { return enqueue_all_gather(outputs, input, true); });
}

std::shared_ptr<Work> NcclGroup::reduce_scatter_async(Tensor& output,
                                                      const std::vector<Tensor>& inputs,
                                                      ReduceOp op) {
  if (to_bootstrap({&output}, &inputs)) return bootstrap_->reduce_scatter_async(output, inputs, op);
  return started_or_failed([&] { return enqueue_reduce_scatter(output, inputs, op, true); });
}

// all_reduce (dst < 0) and reduce (to dst) in `wire`'s format; BFloat16: the float32 values
// rounded to bfloat16 into a scratch buffer, NCCL's bfloat16 reduction (ncclBfloat16: NCCL
// rounds the partial results to bfloat16 at every step of its ring or tree, so the result is
// close to, not bit-equal with, the emulation's single rounding of a float32 sum), widened back
// (on every rank; for reduce, on dst). Returns the Work when `async`, else null (the compute
// stream waits for the collective).
std::shared_ptr<Work> NcclGroup::enqueue_reduce(Tensor& t, int dst, ReduceOp op, WireFormat wire,
                                                bool async) {
  const char* name = dst < 0 ? "all_reduce" : "reduce";
  const bool ok = check_tensor(name, t);
  if (ok && wire == WireFormat::BFloat16 && t.dtype() != DType::Float32)
    throw DTypeError("nccl " + std::string(name) + " on " + where_ +
                     ": the bfloat16 wire format takes float32 tensors, got " +
                     to_string(t.dtype()));
  agree(dst < 0 ? kAllReduce : kReduce, t, static_cast<std::int64_t>(op), dst, ok, name,
        static_cast<std::int64_t>(wire));
  auto launch = [&](void* buffer, ncclDataType_t type) {
    return dst < 0 ? ncclAllReduce(buffer, buffer, count(t), type, nccl_op(op), comm_, stream_)
                   : ncclReduce(buffer, buffer, count(t), type, nccl_op(op), dst, comm_, stream_);
  };
  const std::string call_name = dst < 0 ? "ncclAllReduce" : "ncclReduce";
  if (wire == WireFormat::Native)
    return run(call_name, t, async, {t}, [&] { return launch(address(t), nccl_type(t.dtype())); });
  // Two bytes per element: a float32 tensor of half as many elements holds the bits.
  Tensor bits = Tensor::empty(Shape{(t.numel() + 1) / 2},
                              TensorOptions(kFloat32).device(Device(DeviceType::CUDA, device_)));
  return run(call_name + " (bfloat16)", t, async, {t, bits}, [&] {
    auto* wire_bits = static_cast<std::uint16_t*>(address(bits));
    auto* values = static_cast<float*>(address(t));
    nccl_detail::to_bfloat16(values, wire_bits, t.numel(), device_, stream_);
    const ncclResult_t status = launch(wire_bits, ncclBfloat16);
    if (status == ncclSuccess && (dst < 0 || dst == rank_))
      nccl_detail::from_bfloat16(wire_bits, values, t.numel(), device_, stream_);
    return status;
  });
}

}  // namespace lockstep::dist::nccl_detail
