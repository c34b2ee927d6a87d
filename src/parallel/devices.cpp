// DataParallel's device lists: the default devices and "cpu:0,cpu:1" parsing.
#include <set>

#include "lockstep/core/parallel.h"
#include "lockstep/cuda/runtime.h"
#include "lockstep/parallel/data_parallel.h"

namespace lockstep::parallel {

std::vector<Device> default_devices() {
  std::vector<Device> out;
  const int gpus = cuda::device_count();  // 0 without CUDA, a driver or a GPU
  for (int i = 0; i < gpus; ++i) out.push_back(Device(DeviceType::CUDA, i));
  if (!out.empty()) return out;
  for (int i = 0; i < usable_cores(); ++i) out.push_back(cpu(i));
  return out;
}

std::vector<Device> parse_devices(const std::string& list) {
  std::vector<Device> out;
  std::set<std::string> seen;
  if (list.empty()) throw ValueError("empty device list");
  std::size_t pos = 0;
  for (;;) {
    const std::size_t comma = list.find(',', pos);
    const std::string item =
        list.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    if (item.empty())
      throw DeviceError("empty device name at position " + std::to_string(pos) + " of '" + list +
                        "' (expected e.g. cpu:0,cpu:1)");
    Device d = Device::parse(item);
    if (!seen.insert(d.str()).second)
      throw ValueError("device " + d.str() + " is listed twice in '" + list + "'");
    out.push_back(d);
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  return out;
}

}  // namespace lockstep::parallel
