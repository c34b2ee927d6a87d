// dtype names, device parsing, shapes, storage.
#include <charconv>
#include <cstdlib>
#include <new>
#include <sstream>

#include "core/allocator.h"
#include "lockstep/core/device.h"
#include "lockstep/core/dtype.h"
#include "lockstep/core/error.h"
#include "lockstep/core/shape.h"
#include "lockstep/core/storage.h"
#include "lockstep/cuda/allocator.h"
#include "lockstep/cuda/runtime.h"

namespace lockstep {

std::string to_string(DType t) {
  switch (t) {
    case DType::Float32:
      return "float32";
    case DType::Float64:
      return "float64";
    case DType::Int64:
      return "int64";
  }
  return "unknown";
}

Device Device::parse(std::string_view s) {
  auto bad = [&](const std::string& why) {
    return DeviceError("invalid device string '" + std::string(s) + "': " + why +
                       " (expected cpu, cpu:N, cuda or cuda:N)");
  };
  std::string_view type = s, idx;
  bool has_idx = false;
  if (auto colon = s.find(':'); colon != std::string_view::npos) {
    type = s.substr(0, colon);
    idx = s.substr(colon + 1);
    has_idx = true;
  }
  Device d;
  if (type == "cpu") {
    d.type = DeviceType::CPU;
  } else if (type == "cuda") {
    d.type = DeviceType::CUDA;
  } else {
    throw bad("unknown device type '" + std::string(type) + "'");
  }
  if (has_idx) {
    if (idx.empty()) throw bad("missing index after ':'");
    int v = 0;
    auto [ptr, ec] = std::from_chars(idx.data(), idx.data() + idx.size(), v);
    if (ec != std::errc() || ptr != idx.data() + idx.size() || v < 0)
      throw bad("index '" + std::string(idx) + "' is not a non-negative integer");
    d.index = v;
  }
  return d;
}

std::string Device::str() const {
  return std::string(type == DeviceType::CPU ? "cpu:" : "cuda:") + std::to_string(index);
}

void check_device_available(Device d) {
  if (!d.is_cuda()) return;
#if LOCKSTEP_HAS_CUDA
  const int count = cuda::device_count();
  if (d.index < count) return;
  throw DeviceError("device " + d.str() + " is not available: " +
                    (count == 0
                         ? "no CUDA device (" + cuda::unavailable_reason() + ")"
                         : "this process sees " + std::to_string(count) +
                               " CUDA device(s), cuda:0 to cuda:" + std::to_string(count - 1)));
#else
  throw DeviceError("device " + d.str() +
                    " is not available: this build has no CUDA backend (CPU devices "
                    "cpu:0, cpu:1, ... are)");
#endif
}

Shape::Shape(std::initializer_list<std::int64_t> dims)
    : Shape(std::span<const std::int64_t>(dims.begin(), dims.size())) {}

Shape::Shape(std::span<const std::int64_t> dims) {
  if (dims.size() > kMaxDims)
    throw ShapeError("tensors have at most " + std::to_string(kMaxDims) + " dimensions, got " +
                     std::to_string(dims.size()));
  ndim_ = static_cast<int>(dims.size());
  for (int i = 0; i < ndim_; ++i) d_[i] = dims[i];
}

std::int64_t Shape::numel() const {
  std::int64_t n = 1;
  for (int i = 0; i < ndim_; ++i)
    if (d_[i] == 0) return 0;
  for (int i = 0; i < ndim_; ++i)
    if (__builtin_mul_overflow(n, d_[i], &n))
      throw ValueError("shape " + str() + " has more elements than a tensor can hold (its "
                       "element count overflows 64 bits)");
  return n;
}

void Shape::push_back(std::int64_t v) {
  if (ndim_ == kMaxDims) throw ShapeError("tensors have at most 8 dimensions");
  d_[ndim_++] = v;
}

std::string Shape::str() const {
  std::ostringstream os;
  os << '[';
  for (int i = 0; i < ndim_; ++i) os << (i ? ", " : "") << d_[i];
  os << ']';
  return os.str();
}

bool operator==(const Shape& a, const Shape& b) {
  if (a.ndim_ != b.ndim_) return false;
  for (int i = 0; i < a.ndim_; ++i)
    if (a.d_[i] != b.d_[i]) return false;
  return true;
}

Storage::Storage(std::size_t nbytes, Device device) : nbytes_(nbytes), device_(device) {
  check_device_available(device);
  if (device.is_cuda())
    data_ = cuda::caching_allocator_alloc(nbytes, device.index);  // nullptr for 0 bytes
  else
    data_ = detail::cpu_allocate(nbytes, &capacity_);
}

Storage::Storage(std::shared_ptr<Storage> base, Device device) : device_(device) {
  if (!base || !base->device().is_cpu() || !device.is_cpu())
    throw DeviceError("Storage alias: only CPU memory can be shared between devices (" +
                      (base ? base->device().str() : std::string("null")) + " as " +
                      device.str() + ")");
  check_device_available(device);
  data_ = base->data_;
  nbytes_ = base->nbytes_;
  owner_ = std::move(base);
}

Storage::Storage(void* data, std::size_t nbytes, Device device, std::shared_ptr<const void> owner)
    : data_(data), nbytes_(nbytes), device_(device), owner_(std::move(owner)) {
  if (!device.is_cpu())
    throw DeviceError("Storage over borrowed memory: only host memory can be borrowed (asked for " +
                      device.str() + ")");
  check_device_available(device);
  if (!owner_) owner_ = std::shared_ptr<const void>(data, [](const void*) {});
}

Storage::~Storage() {
  if (owner_) return;
  if (device_.is_cuda())
    cuda::caching_allocator_delete(data_);  // reusable at once: see the stream rule, allocator.h
  else
    detail::cpu_free(data_, capacity_);
}

std::string device_list(const std::vector<Device>& devices) {
  std::string s;
  for (const Device& d : devices) {
    if (!s.empty()) s += ",";
    s += d.str();
  }
  return s;
}

}  // namespace lockstep
