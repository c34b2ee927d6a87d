// ProcessGroup: collectives over a fixed set of ranks (torch.distributed's ProcessGroup). One
// object per rank; every rank calls the same collectives in the same order. Results are identical
// on every rank and reduce in rank order (rank 0 + rank 1 + ...), so a group of a given size
// always gives the same bits.
#pragma once

#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "lockstep/core/tensor.h"

namespace lockstep::dist {

enum class ReduceOp { Sum, Max, Min };

/// How the elements of an all-reduce travel between ranks. BFloat16 (float32 tensors only; PyTorch's
/// torch/distributed/algorithms/ddp_comm_hooks/default_hooks.py bf16_compress_hook): each rank's
/// values are rounded to bfloat16 (round to nearest even, as torch.Tensor.to(torch.bfloat16)),
/// the rounded values are combined in float32 in rank order (rank 0 op rank 1 op ...), and the
/// result is rounded to bfloat16 once and widened back to float32 in every rank's tensor: two
/// bytes per element on the wire instead of four. Backends that do not move fewer bytes give the
/// same bits through the base class's emulation (round, float32 all_reduce, round); NCCL rounds
/// after every hop of its ring instead (allclose only, see nccl.h).
enum class WireFormat { Native, BFloat16 };

/// bfloat16's bits of `x` (round to nearest even; a NaN stays a quiet NaN), and back.
std::uint16_t to_bfloat16_bits(float x);
float from_bfloat16_bits(std::uint16_t bits);

/// A collective started by one of ProcessGroup's *_async calls (torch.distributed's Work). The
/// caller keeps the collective's tensors alive and untouched until wait() returns.
class Work {
 public:
  virtual ~Work() = default;
  /// Blocks until the collective is complete and its results are in the caller's tensors, then
  /// rethrows the collective's error if it failed (DistError, TimeoutError, PeerFailedError,
  /// ShapeError / DTypeError from the ranks' argument checks). NCCL: the calling thread's current
  /// stream of the group's device waits for it instead (PyTorch's ProcessGroupNCCL::WorkNCCL::
  /// wait). A second call returns at once (rethrowing the same error).
  virtual void wait() = 0;
  /// Whether the collective has finished (successfully or not); never blocks.
  virtual bool is_completed() = 0;
};

/// A Work that is already complete (what the base class's *_async defaults return): wait()
/// rethrows `error` when one is given.
std::shared_ptr<Work> completed_work(std::exception_ptr error = nullptr);

class ProcessGroup {
 public:
  virtual ~ProcessGroup() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  /// Backend name: "threads", "mpi" or "nccl".
  virtual std::string backend() const = 0;

  /// In place: every rank's `tensor` becomes the element-wise reduction over all ranks. All ranks
  /// pass tensors of the same shape and dtype (ShapeError / DTypeError naming the ranks
  /// otherwise, raised on every rank).
  virtual void all_reduce(Tensor& tensor, ReduceOp op = ReduceOp::Sum) = 0;
  /// torch.distributed.reduce: rank `dst`'s `tensor` becomes the element-wise reduction over all
  /// ranks, in rank order with the same bits as all_reduce; the other ranks' tensors are
  /// unspecified afterwards (they may hold partial results or the result). Same shape / dtype
  /// rules as all_reduce; ValueError for dst outside [0, size()). The default is all_reduce (a
  /// correct reduce); backends override it to move less: the threads backend writes only dst's
  /// buffer.
  virtual void reduce(Tensor& tensor, int dst, ReduceOp op = ReduceOp::Sum) {
    check_root("reduce", dst);
    all_reduce(tensor, op);
  }
  /// In place: every rank's `tensor` becomes root's.
  virtual void broadcast(Tensor& tensor, int root = 0) = 0;
  /// outputs[r] receives rank r's `input` (outputs pre-sized: size() tensors shaped like input).
  virtual void all_gather(std::vector<Tensor>& outputs, const Tensor& input) = 0;
  /// `output` receives the reduction over ranks of inputs[rank()] (inputs: size() tensors).
  virtual void reduce_scatter(Tensor& output, const std::vector<Tensor>& inputs,
                              ReduceOp op = ReduceOp::Sum) = 0;
  /// Returns once every rank has entered it.
  virtual void barrier() = 0;

  // ---- asynchronous collectives -----------------------------------------------------------------
  // Each starts the collective of the same name and returns at once with a Work; the results are
  // the blocking call's, bit for bit. A collective's place in the group's order is the moment it
  // is started: every rank starts the same collectives (blocking or not) in the same order, and a
  // blocking collective called while started ones are pending runs after them. Backends: threads
  // and mpi run started collectives, in order, on a communication thread of the member (MPI's
  // requests are progressed there, off the calling thread); nccl enqueues them on its
  // communication stream. The defaults below run the blocking call and return completed_work()
  // (or its error): correct, not overlapped. Argument errors are thrown by wait() (on every rank
  // where the blocking call throws on every rank), not by the *_async call. A threads or mpi
  // member destroyed with started collectives pending waits for them (they need their peers);
  // abort() releases a threads group's started collectives with DistError. The Work of a
  // collective whose tensors a backend copied or kept (all of them here) may be dropped without
  // wait(); the results still arrive, in order.
  virtual std::shared_ptr<Work> all_reduce_async(Tensor& tensor, ReduceOp op = ReduceOp::Sum,
                                                 WireFormat wire = WireFormat::Native);
  virtual std::shared_ptr<Work> reduce_async(Tensor& tensor, int dst, ReduceOp op = ReduceOp::Sum,
                                             WireFormat wire = WireFormat::Native);
  virtual std::shared_ptr<Work> all_gather_async(std::vector<Tensor>& outputs, const Tensor& input);
  virtual std::shared_ptr<Work> reduce_scatter_async(Tensor& output,
                                                     const std::vector<Tensor>& inputs,
                                                     ReduceOp op = ReduceOp::Sum);
  /// Elements on the wire per element of a `wire` all-reduce, in bytes, for a tensor of `dtype`
  /// (bytes_reduced accounting): element_size(dtype), or 2 for BFloat16.
  static std::int64_t wire_bytes(DType dtype, WireFormat wire);

  /// Releases the members of this group in this process that wait in a collective, or will:
  /// each throws DistError naming `reason` (the failure of the member that calls it, which its
  /// siblings would otherwise wait for forever). The group stays aborted until clear_abort(),
  /// which its owner calls once no member is inside a collective. The threads backend (and
  /// DataParallel's groups built on it) implement it; the default does nothing: MPI's and
  /// NCCL's members time out instead (mpi.h, nccl.h). (PyTorch's ProcessGroup::abort, which is
  /// final.)
  virtual void abort(const std::string& reason) { (void)reason; }
  /// Makes an aborted group usable again; every member must have left its collectives.
  virtual void clear_abort() {}

 protected:
  /// ValueError naming `op` unless 0 <= root < size().
  void check_root(const char* op, int root) const;
};

/// An in-process group of `size` ranks for threads of one process (rank r's object is element r;
/// each must be used by one thread at a time). ValueError for size < 1.
std::vector<std::shared_ptr<ProcessGroup>> new_thread_group(int size);

/// Names of the backends built into this binary: "threads" always, "mpi" with LOCKSTEP_MPI,
/// "nccl" with LOCKSTEP_CUDA (include/lockstep/dist/mpi.h, nccl.h).
std::vector<std::string> available_backends();

}  // namespace lockstep::dist
