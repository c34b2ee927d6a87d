// Device tags. "cpu:k" names a logical CPU worker (all share host memory); "cuda:k" is GPU k of
// this process (tensors can live there only in builds with LOCKSTEP_CUDA, docs/cuda.md).
#pragma once

#include <cstdint>
#include <string>
#include <vector>
#include <string_view>

namespace lockstep {

enum class DeviceType : std::uint8_t { CPU, CUDA };

struct Device {
  DeviceType type = DeviceType::CPU;
  int index = 0;

  constexpr Device() = default;
  constexpr Device(DeviceType t, int i) : type(t), index(i) {}

  /// Parses "cpu", "cpu:3", "cuda", "cuda:1" (as torch.device). Throws DeviceError naming the
  /// string for anything else (unknown type, negative or non-numeric index, trailing text).
  static Device parse(std::string_view s);

  /// "cpu:0", "cuda:1".
  std::string str() const;

  bool is_cpu() const { return type == DeviceType::CPU; }
  bool is_cuda() const { return type == DeviceType::CUDA; }
  friend bool operator==(const Device&, const Device&) = default;
};

/// "cpu:0,cpu:1": the devices' str(), comma-separated (as --devices takes them).
std::string device_list(const std::vector<Device>& devices);

/// Throws DeviceError unless tensors can be allocated on `d`: CPU always; cuda:k when the build
/// has the CUDA backend and k < cuda::device_count() (the message names the device, the device
/// count and cuda::unavailable_reason()); never in a build without CUDA.
void check_device_available(Device d);

inline Device cpu(int index = 0) { return Device(DeviceType::CPU, index); }

}  // namespace lockstep
