// The nccl group's communicators: new_nccl_group over the devices of one process
// (ncclCommInitAll) or one device per process with a bootstrap group (ncclCommInitRank, the
// unique id broadcast by rank 0), and the queries nccl_available, nccl_version, nccl_device and
// nccl_bootstrap (include/lockstep/dist/nccl.h).
#include <array>
#include <cstring>
#include <string>

#include "dist/nccl/nccl_group.h"

namespace lockstep::dist {

namespace {

using nccl_detail::Clique;
using nccl_detail::NcclGroup;

void check_options(const NcclOptions& options) {
  if (!(options.timeout_seconds > 0))
    throw ValueError("nccl: timeout_seconds must be > 0, got " +
                     std::to_string(options.timeout_seconds));
}

int cuda_index(Device d, const char* who) {
  if (!d.is_cuda())
    throw DeviceError(std::string(who) + ": " + d.str() +
                      " is not a CUDA device; NCCL groups are made of cuda:k devices");
  cuda::check_device(d.index);
  return d.index;
}

}  // namespace

bool nccl_available() { return true; }

std::string nccl_version() {
  int v = 0;
  if (ncclGetVersion(&v) != ncclSuccess) return {};
  // NCCL_VERSION(X,Y,Z) = X*10000 + Y*100 + Z since 2.9.
  return std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) + "." +
         std::to_string(v % 100);
}

std::vector<std::shared_ptr<ProcessGroup>> new_nccl_group(const std::vector<Device>& devices,
                                                          NcclOptions options) {
  check_options(options);
  if (devices.empty()) throw ValueError("new_nccl_group: the device list is empty");
  for (std::size_t i = 0; i < devices.size(); ++i)
    for (std::size_t j = i + 1; j < devices.size(); ++j)
      if (devices[i] == devices[j])
        throw ValueError("new_nccl_group: " + devices[i].str() + " is listed twice (positions " +
                         std::to_string(i) + " and " + std::to_string(j) +
                         "); NCCL cannot place two ranks on one GPU");
  std::vector<int> ids;
  for (Device d : devices) ids.push_back(cuda_index(d, "new_nccl_group"));

  auto clique = std::make_shared<Clique>();
  clique->devices = ids;
  clique->comms.assign(ids.size(), nullptr);
  {
    cuda::DeviceGuard guard(ids[0]);  // ncclCommInitAll changes the current device
    LOCKSTEP_NCCL_CHECK(
        ncclCommInitAll(clique->comms.data(), static_cast<int>(ids.size()), ids.data()), nullptr,
        "cuda (" + std::to_string(ids.size()) + " devices)", "ncclCommInitAll");
  }
  std::vector<std::shared_ptr<ProcessGroup>> out;
  const int n = static_cast<int>(ids.size());
  for (int r = 0; r < n; ++r)
    out.push_back(std::make_shared<NcclGroup>(clique->comms[static_cast<std::size_t>(r)], clique,
                                              ids[static_cast<std::size_t>(r)], r, n, options));
  return out;
}

std::shared_ptr<ProcessGroup> new_nccl_group(std::shared_ptr<ProcessGroup> bootstrap, Device device,
                                             NcclOptions options) {
  if (!bootstrap) throw ValueError("new_nccl_group: null bootstrap group");
  check_options(options);
  const int rank = bootstrap->rank();
  const int size = bootstrap->size();
  const std::string where =
      device.str() + " (rank " + std::to_string(rank) + " of " + std::to_string(size) + ")";
  // Local problems are shared first so that no rank waits in NCCL for one that gave up.
  std::string problem;
  std::array<std::int64_t, 2> uuid{0, 0};
  try {
    const int index = cuda_index(device, "new_nccl_group");
    cudaDeviceProp prop{};
    LOCKSTEP_CUDA_CHECK(cudaGetDeviceProperties(&prop, index), index, "cudaGetDeviceProperties");
    std::memcpy(uuid.data(), prop.uuid.bytes, sizeof(uuid));
  } catch (const Error& e) {
    problem = e.what();
  }
  Tensor mine = Tensor::empty(Shape{3}, TensorOptions(kInt64));
  auto* m = mine.data_ptr<std::int64_t>();
  m[0] = problem.empty() ? 1 : 0;
  m[1] = uuid[0];
  m[2] = uuid[1];
  std::vector<Tensor> all;
  for (int r = 0; r < size; ++r) all.push_back(Tensor::empty(Shape{3}, TensorOptions(kInt64)));
  bootstrap->all_gather(all, mine);
  if (!problem.empty()) throw DeviceError("new_nccl_group on " + where + ": " + problem);
  for (int r = 0; r < size; ++r) {
    const auto* a = all[static_cast<std::size_t>(r)].data_ptr<std::int64_t>();
    if (!a[0])
      throw DistError("new_nccl_group on " + where + ": rank " + std::to_string(r) +
                      " could not use its device (its own error says why)");
    for (int s = 0; s < r; ++s) {
      const auto* b = all[static_cast<std::size_t>(s)].data_ptr<std::int64_t>();
      if (a[1] == b[1] && a[2] == b[2])
        throw ValueError("new_nccl_group on " + where + ": rank " + std::to_string(s) +
                         " and rank " + std::to_string(r) +
                         " use the same GPU; NCCL cannot place two ranks on one GPU");
    }
  }

  // The unique id (128 bytes) travels as 16 int64 from rank 0.
  ncclUniqueId id{};
  static_assert(sizeof(ncclUniqueId) % sizeof(std::int64_t) == 0);
  Tensor id_tensor =
      Tensor::empty(Shape{static_cast<std::int64_t>(sizeof(ncclUniqueId) / sizeof(std::int64_t))},
                    TensorOptions(kInt64));
  if (rank == 0) {
    LOCKSTEP_NCCL_CHECK(ncclGetUniqueId(&id), nullptr, where, "ncclGetUniqueId");
    std::memcpy(id_tensor.data_ptr<std::int64_t>(), &id, sizeof(id));
  }
  bootstrap->broadcast(id_tensor, 0);
  std::memcpy(&id, id_tensor.data_ptr<std::int64_t>(), sizeof(id));

  ncclComm_t comm = nullptr;
  {
    cuda::DeviceGuard guard(device.index);
    LOCKSTEP_NCCL_CHECK(ncclCommInitRank(&comm, size, id, rank), nullptr, where,
                        "ncclCommInitRank");
  }
  return std::make_shared<NcclGroup>(comm, nullptr, device.index, rank, size, options,
                                     std::move(bootstrap));
}

std::optional<Device> nccl_device(const ProcessGroup& group) {
  if (const auto* g = dynamic_cast<const NcclGroup*>(&group))
    return Device(DeviceType::CUDA, g->device());
  return std::nullopt;
}

std::shared_ptr<ProcessGroup> nccl_bootstrap(const ProcessGroup& group) {
  if (const auto* g = dynamic_cast<const NcclGroup*>(&group)) return g->bootstrap();
  return nullptr;
}

}  // namespace lockstep::dist
