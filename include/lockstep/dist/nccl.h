// The "nccl" ProcessGroup backend: collectives between CUDA devices through NVIDIA NCCL
// (https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/), in the two layouts PyTorch uses:
//
//   * one process driving several GPUs (torch.nn.DataParallel's layout): new_nccl_group(devices)
//     creates one communicator per device with ncclCommInitAll and returns one group object per
//     device; rank r runs on devices[r], and each object is used by one thread at a time (as
//     DataParallel's per-device workers do), all ranks' threads calling the same collectives in
//     the same order;
//   * one process per GPU (DistributedDataParallel under mpirun): new_nccl_group(bootstrap,
//     device) makes rank 0 create the NCCL unique id (ncclGetUniqueId), sends it to every rank
//     with `bootstrap->broadcast` (any CPU ProcessGroup: init_mpi()'s, or a thread group), then
//     calls ncclCommInitRank(bootstrap->size(), id, bootstrap->rank()) on `device`. The group
//     keeps the bootstrap and dispatches by device, as PyTorch's
//     init_process_group(backend="cpu:gloo,cuda:nccl"): a collective whose tensors are all CPU
//     tensors runs on the bootstrap group (its semantics, reduction order and timeout: for the
//     mpi backend rank order, bit-identical to the threads backend); one whose tensors are all on
//     the rank's GPU runs on NCCL; anything else (tensors of one collective on the CPU and on a
//     GPU, or on another GPU) is refused with DeviceError naming the tensor and both devices.
//     DistributedDataParallel relies on it: its gradients go over NCCL, its small per-step
//     exchanges (sample counts, losses, has-grad flags of the gather path, evaluation sums) are
//     CPU int64/float64 tensors and go over the bootstrap. Every rank must pass tensors on the
//     same kind of device to a collective: a rank whose tensors go to the other group than its
//     peers' waits there until that group's timeout (TimeoutError), it is not detected earlier.
//     barrier() is NCCL's (it also waits for the rank's GPU work enqueued so far).
//
// Streams (PyTorch's ProcessGroupNCCL does the same): every collective runs on the group's own
// NCCL stream of its device, after an event recorded on the device's compute stream
// (cuda::compute_stream), so it starts only once the work that produced the tensor is done and
// does not hold up later compute work that does not need it; an event recorded after the NCCL call
// makes the compute stream wait for it, so every later op on the tensor sees the result. The call
// returns once the collective is enqueued (asynchronous, as PyTorch's async_op work whose wait()
// was called): a failure inside NCCL or a peer that never arrives surfaces at the next
// synchronisation (cuda::synchronize, Tensor::item, a copy to the host) or in the next
// collective's check below.
//
// Reduction order: NCCL's (ring or tree, chosen by NCCL), not the threads/MPI backends' rank order.
// Every rank gets the same bits; with 2 ranks the sum equals rank order exactly (a + b = b + a);
// with more ranks it may differ from the other backends in the last bits.
//
// Started collectives (*_async, process_group.h) are enqueued on the NCCL stream the same way,
// followed by an event instead of the compute stream's wait; Work::wait() makes the compute
// stream wait for that event (the host does not block; PyTorch's WorkNCCL::wait) and
// is_completed() queries it. The argument check (NcclOptions::check_arguments) still waits on the
// host when the collective is started; its errors, like every error of the call, are thrown by
// wait(). NCCL's own failures surface as for the blocking calls (above). WireFormat::BFloat16
// (float32 tensors): the values are rounded to bfloat16 on the NCCL stream (round to nearest
// even, as dist::to_bfloat16_bits), reduced by NCCL as ncclBfloat16, widened back: NCCL rounds
// its partial sums to bfloat16 at every step of its ring or tree, so the result is close to the
// base class's emulation (one rounding of a float32 sum), not bit-equal (allclose only).
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "lockstep/core/device.h"
#include "lockstep/dist/process_group.h"

namespace lockstep::dist {

/// Whether this binary has the NCCL backend (built with -DLOCKSTEP_CUDA=ON). It does not say
/// whether a GPU is present: see cuda::device_count().
bool nccl_available();

/// NCCL's version as "2.28.9" (ncclGetVersion); empty without the backend.
std::string nccl_version();

struct NcclOptions {
  /// Before each collective the ranks compare what they are about to do (collective, sequence
  /// number, dtype, element count, op, root: one 8-int64 ncclAllGather on the NCCL stream, read
  /// back on the host) and every rank throws the same error when they differ: DTypeError /
  /// ShapeError naming the ranks, DistError for a different collective, op or root. Without it a
  /// mismatch is undefined behaviour in NCCL (a hang or a wrong result). Costs one small
  /// collective and a host wait on the NCCL stream (not on the compute stream) per collective;
  /// DataParallel, whose ranks run the same code on one process, turns it off.
  bool check_arguments = true;
  /// Seconds a host-side wait (the argument check, barrier) may take before the communicator is
  /// aborted (ncclCommAbort) and TimeoutError is thrown naming the rank; > 0, infinity waits for
  /// ever. Collectives themselves are asynchronous and are not timed (see above).
  double timeout_seconds = 300.0;
};

/// One process, several GPUs: ncclCommInitAll over `devices` (cuda:k devices, each at most once).
/// Element r of the result is rank r of devices.size(), bound to devices[r].
///
/// Errors: ValueError for an empty list or a device listed twice (NCCL cannot place two ranks on
/// one GPU; the message names it and its positions), DeviceError for a non-CUDA device, CudaError
/// naming the device when it does not exist (including on machines without a GPU), NcclError
/// naming the operation when NCCL fails; DistError in builds without the backend.
std::vector<std::shared_ptr<ProcessGroup>> new_nccl_group(const std::vector<Device>& devices,
                                                          NcclOptions options = {});

/// One process per GPU: this process's rank `bootstrap->rank()` of `bootstrap->size()` on
/// `device` (a cuda:k device of this process). Every rank of `bootstrap` must call it at the same
/// time with its own device. The unique id travels through `bootstrap->broadcast` of a CPU int64
/// tensor. The returned group holds `bootstrap` and runs the collectives on CPU tensors there
/// (see the top of this file); its backend() is "nccl", its rank and size are the bootstrap's.
/// ValueError for a null bootstrap; otherwise the errors above, found on one rank and reported
/// on every rank through the bootstrap before NCCL is touched: the rank whose device is unusable
/// throws its own DeviceError / CudaError, the others DistError naming it; ValueError on every
/// rank when two ranks name the same GPU (compared by device UUID).
std::shared_ptr<ProcessGroup> new_nccl_group(std::shared_ptr<ProcessGroup> bootstrap, Device device,
                                             NcclOptions options = {});

/// The GPU an NCCL group's collectives run on (the device it was made for); nullopt for a group
/// of another backend, and in builds without the backend.
std::optional<Device> nccl_device(const ProcessGroup& group);

/// The CPU group an NCCL group made by new_nccl_group(bootstrap, device) sends its CPU-tensor
/// collectives to; null for a group made by new_nccl_group(devices) (which refuses CPU tensors
/// with DeviceError), for a group of another backend, and in builds without the backend.
std::shared_ptr<ProcessGroup> nccl_bootstrap(const ProcessGroup& group);

}  // namespace lockstep::dist
