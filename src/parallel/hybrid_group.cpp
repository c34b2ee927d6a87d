// HybridGroup's gathers and started collectives (hybrid_group.h).
#include "parallel/hybrid_group.h"

#include <functional>

#include "lockstep/autograd/grad_mode.h"
#include "lockstep/ops/ops.h"

namespace lockstep::parallel::detail {

namespace {

void check_count(const char* op, std::size_t got, int want) {
  if (got != static_cast<std::size_t>(want))
    throw ValueError(std::string(op) + ": expected " + std::to_string(want) +
                     " tensors (one per member), got " + std::to_string(got));
}

// Runs `reduce` (blocking) with the bfloat16 wire emulated when `wire` asks for it: `tensor`
// rounded before, and after where `lands` (this member holds the result).
std::shared_ptr<dist::Work> emulated(Tensor& tensor, dist::WireFormat wire, bool lands,
                                     const std::function<void()>& reduce) {
  auto round = [&] {
    if (wire != dist::WireFormat::BFloat16) return;
    if (tensor.dtype() != DType::Float32)
      throw DTypeError("the bfloat16 wire format takes float32 tensors, got " +
                       to_string(tensor.dtype()));
    if (!tensor.device().is_cpu())
      throw DeviceError(
          "the bfloat16 wire format over several local devices takes CPU tensors, "
          "got one on " +
          tensor.device().str());
    float* p = tensor.data_ptr<float>();
    for (std::int64_t i = 0; i < tensor.numel(); ++i)
      p[i] = dist::from_bfloat16_bits(dist::to_bfloat16_bits(p[i]));
  };
  try {
    round();
    reduce();
    if (lands) round();
  } catch (...) {
    return dist::completed_work(std::current_exception());
  }
  return dist::completed_work();
}

}  // namespace

Tensor gather_local(dist::ProcessGroup& local, const Tensor& input) {
  NoGradGuard no_grad;
  const std::int64_t n = input.numel();
  if (local.size() == 1) return input.reshape({n}).clone();
  std::vector<Tensor> blocks;
  for (int l = 0; l < local.size(); ++l) blocks.push_back(zeros({n}, input.options()));
  local.all_gather(blocks, input.reshape({n}));
  return cat(blocks, 0);
}

std::shared_ptr<dist::Work> HybridGroup::all_reduce_async(Tensor& tensor, dist::ReduceOp op,
                                                          dist::WireFormat wire) {
  if (local_->size() == 1) return global_->all_reduce_async(tensor, op, wire);
  return emulated(tensor, wire, true, [&] { all_reduce(tensor, op); });
}

std::shared_ptr<dist::Work> HybridGroup::reduce_async(Tensor& tensor, int dst, dist::ReduceOp op,
                                                      dist::WireFormat wire) {
  check_root("reduce", dst);
  if (local_->size() == 1) return global_->all_reduce_async(tensor, op, wire);
  const bool lands = dst != 0 || local_->rank() == 0;
  return emulated(tensor, wire, lands, [&] { reduce(tensor, dst, op); });
}

void HybridGroup::all_gather(std::vector<Tensor>& outputs, const Tensor& input) {
  check_count("all_gather", outputs.size(), size());
  NoGradGuard no_grad;
  const int L = local_->size(), G = global_->size();
  const std::int64_t n = input.numel();
  const Tensor locals = gather_local(*local_, input);
  // Every member: [G · L · n], rank r's block at r · L · n.
  Tensor all = zeros({static_cast<std::int64_t>(G) * L * n}, input.options());
  if (local_->rank() == 0) {
    std::vector<Tensor> blocks;
    for (int r = 0; r < G; ++r) blocks.push_back(zeros({L * n}, input.options()));
    global_->all_gather(blocks, locals);
    all.copy_(G > 1 ? cat(blocks, 0) : blocks[0]);
  }
  if (L > 1) local_->broadcast(all, 0);
  for (int m = 0; m < size(); ++m)
    outputs[static_cast<std::size_t>(m)].copy_(
        narrow(all, 0, m * n, n).reshape(outputs[static_cast<std::size_t>(m)].shape()));
}

void HybridGroup::reduce_scatter(Tensor& output, const std::vector<Tensor>& inputs,
                                 dist::ReduceOp op) {
  check_count("reduce_scatter", inputs.size(), size());
  NoGradGuard no_grad;
  const std::int64_t n = output.numel();
  std::vector<Tensor> flat;
  for (const Tensor& t : inputs) {
    if (t.numel() != n)
      throw ShapeError("reduce_scatter: input " + t.shape().str() + " does not match output " +
                       output.shape().str());
    flat.push_back(t.reshape({n}));
  }
  Tensor packed = cat(flat, 0);
  all_reduce(packed, op);
  output.copy_(narrow(packed, 0, rank() * n, n).reshape(output.shape()));
}

}  // namespace lockstep::parallel::detail
