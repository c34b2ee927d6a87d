// The ProcessGroup base class's asynchronous defaults (process_group.h): each runs the blocking
// collective and returns a completed Work; and bfloat16's rounding, with the BFloat16 wire
// format's emulation for backends that do not move two-byte elements themselves.
#include <cstring>

#include "dist/bf16_round.h"
#include "lockstep/core/error.h"
#include "lockstep/dist/process_group.h"

namespace lockstep::dist {

namespace {

class CompletedWork final : public Work {
 public:
  explicit CompletedWork(std::exception_ptr error) : error_(std::move(error)) {}
  void wait() override {
    if (error_) std::rethrow_exception(error_);
  }
  bool is_completed() override { return true; }

 private:
  std::exception_ptr error_;
};

// Runs `f` now; its error, if any, is what the returned Work's wait() throws.
template <class F>
std::shared_ptr<Work> run_now(F&& f) {
  try {
    f();
  } catch (...) {
    return completed_work(std::current_exception());
  }
  return completed_work();
}

// Every element of a float32 CPU tensor rounded to bfloat16 in place.
void round_tensor_to_bfloat16(Tensor& t, const char* op) {
  if (t.dtype() != DType::Float32)
    throw DTypeError(std::string(op) + ": the bfloat16 wire format takes float32 tensors, got " +
                     to_string(t.dtype()));
  if (!t.device().is_cpu())
    throw DeviceError(std::string(op) + ": this backend's bfloat16 wire format takes CPU tensors, "
                      "got one on " + t.device().str());
  detail::round_to_bfloat16(static_cast<float*>(t.raw_data()), t.numel());
}

}  // namespace

void detail::round_to_bfloat16(float* values, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) values[i] = from_bfloat16_bits(to_bfloat16_bits(values[i]));
}

std::uint16_t to_bfloat16_bits(float x) {
  std::uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((u >> 16) | 0x40u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<std::uint16_t>(u >> 16);
}

float from_bfloat16_bits(std::uint16_t bits) {
  const std::uint32_t u = static_cast<std::uint32_t>(bits) << 16;
  float x;
  std::memcpy(&x, &u, sizeof x);
  return x;
}

std::shared_ptr<Work> completed_work(std::exception_ptr error) {
  return std::make_shared<CompletedWork>(std::move(error));
}

std::int64_t ProcessGroup::wire_bytes(DType dtype, WireFormat wire) {
  return wire == WireFormat::BFloat16 ? 2 : static_cast<std::int64_t>(element_size(dtype));
}

std::shared_ptr<Work> ProcessGroup::all_reduce_async(Tensor& tensor, ReduceOp op,
                                                     WireFormat wire) {
  return run_now([&] {
    if (wire == WireFormat::BFloat16) round_tensor_to_bfloat16(tensor, "all_reduce");
    all_reduce(tensor, op);
    if (wire == WireFormat::BFloat16) round_tensor_to_bfloat16(tensor, "all_reduce");
  });
}

std::shared_ptr<Work> ProcessGroup::reduce_async(Tensor& tensor, int dst, ReduceOp op,
                                                 WireFormat wire) {
  return run_now([&] {
    if (wire == WireFormat::BFloat16) round_tensor_to_bfloat16(tensor, "reduce");
    reduce(tensor, dst, op);
    if (wire == WireFormat::BFloat16 && rank() == dst) round_tensor_to_bfloat16(tensor, "reduce");
  });
}

std::shared_ptr<Work> ProcessGroup::all_gather_async(std::vector<Tensor>& outputs,
                                                     const Tensor& input) {
  return run_now([&] { all_gather(outputs, input); });
}

std::shared_ptr<Work> ProcessGroup::reduce_scatter_async(Tensor& output,
                                                         const std::vector<Tensor>& inputs,
                                                         ReduceOp op) {
  return run_now([&] { reduce_scatter(output, inputs, op); });
}

}  // namespace lockstep::dist
