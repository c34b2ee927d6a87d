// DataParallel: construction, replicas and workers, and the nn::Module interface. The training
// paths are in data_parallel_step.cpp.
#include "lockstep/parallel/data_parallel.h"

#include <set>

#include "lockstep/autograd/grad_mode.h"
#include "lockstep/autograd/node.h"
#include "lockstep/core/parallel.h"
#include "lockstep/cuda/runtime.h"
#include "lockstep/dist/nccl.h"
#include "lockstep/ops/autocast.h"
#include "lockstep/ops/ops.h"
#include "parallel/detail.h"
#include "parallel/hybrid_group.h"

namespace lockstep::parallel {

using detail::rethrow_with_prefix;

namespace {

std::string device_list(const std::vector<Device>& devices) {
  std::string s;
  for (const Device& d : devices) s += (s.empty() ? "" : ",") + d.str();
  return s;
}

// DistributedDataParallel on CUDA devices: one GPU per process (PyTorch's recommended
// device_ids=[local_rank]) and an NCCL group on that GPU made through a bootstrap group (the
// step's CPU exchanges go there; dist/nccl.h). ValueError for several GPUs, DeviceError for any
// other group.
void check_gpu_process_group(const std::vector<Device>& devices, const dist::ProcessGroup& group) {
  const std::string who = "DistributedDataParallel on " + device_list(devices);
  if (devices.size() != 1)
    throw ValueError(who +
                     ": on CUDA devices each process drives one GPU (device_ids = {cuda:k}, "
                     "k its local rank, as PyTorch recommends); several GPUs per process are not "
                     "built (docs/cuda.md): start one process per GPU");
  const std::optional<Device> on = dist::nccl_device(group);
  if (!on)
    throw DeviceError(who + ": the process group's backend is '" + group.backend() +
                      "', whose collectives take CPU tensors; CUDA devices need an NCCL group: "
                      "dist::new_nccl_group(bootstrap, " +
                      devices.front().str() + ") with the '" + group.backend() +
                      "' group as its bootstrap (CUDA builds)");
  if (*on != devices.front())
    throw DeviceError(who + ": the NCCL process group is on " + on->str() +
                      "; make it on the device the module trains on (new_nccl_group(bootstrap, " +
                      devices.front().str() + "))");
  if (!dist::nccl_bootstrap(group))
    throw DeviceError(who +
                      ": the NCCL process group has no bootstrap group (it was made by "
                      "new_nccl_group(devices)), so it cannot run the CPU exchanges of a step; "
                      "make it with new_nccl_group(bootstrap, " +
                      devices.front().str() + ")");
}

}  // namespace

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

DataParallel::DataParallel(std::shared_ptr<nn::Module> module, std::vector<Device> device_ids,
                           std::optional<Device> output_device, DataParallelOptions options)
    : module_(std::move(module)), devices_(std::move(device_ids)), options_(options) {
  if (!module_) throw ValueError("DataParallel: null module");
  if (devices_.empty()) devices_ = default_devices();
  std::set<std::string> seen;
  const bool on_gpus = devices_.front().is_cuda();
  for (auto& d : devices_)  // before touching any device
    if (d.is_cuda() != on_gpus)
      throw DeviceError("DataParallel: " + devices_.front().str() + " and " + d.str() +
                        " are devices of different types; list only CPU devices or only CUDA "
                        "devices");
  // DistributedDataParallel on a GPU (checked before touching any device): one GPU per process,
  // over an NCCL group on that GPU that sends the CPU-tensor exchanges to its bootstrap group.
  if (on_gpus && options_.process_group) check_gpu_process_group(devices_, *options_.process_group);
  for (auto& d : devices_) {
    check_device_available(d);
    if (!seen.insert(d.str()).second)
      throw ValueError("DataParallel: device " + d.str() + " is listed twice");
  }
  if (options_.shard_size < 1) throw ValueError("DataParallel: shard_size must be at least 1");
  output_device_ = output_device.value_or(devices_.front());
  check_device_available(output_device_);
  std::size_t n = devices_.size();
  // BLAS threads per CPU replica; a GPU replica's worker only enqueues work.
  int threads = on_gpus ? 1
                : options_.threads_per_device > 0
                    ? options_.threads_per_device
                    : std::max(1, usable_cores() / static_cast<int>(n));

  module_->to(devices_.front());
  master_ = FlatBuffer::build(module_->parameters(), devices_.front());
  if (on_gpus && options_.process_group) {
    // DistributedDataParallel, one GPU per process: the local "group" of the one replica moves
    // nothing (HybridGroup skips a local group of one), the process group does the reduction.
    groups_ = dist::new_thread_group(1);
  } else if (on_gpus) {
    // One NCCL communicator per GPU (ncclCommInitAll); the replicas run the same code in one
    // process, so the per-collective argument check is off.
    dist::NcclOptions nccl;
    nccl.check_arguments = false;
    groups_ = dist::new_nccl_group(devices_, nccl);
  } else {
    groups_ = dist::new_thread_group(static_cast<int>(n));
  }
  if (options_.process_group)
    for (auto& g : groups_) g = std::make_shared<detail::HybridGroup>(g, options_.process_group);
  for (std::size_t k = 0; k < n; ++k) {
    auto replica = module_->clone();
    replica->to(devices_[k]);
    // Replica 0 lives on the master's device and reads the master buffer itself; so do the
    // replicas on the other CPU devices (an alias of the same memory), since cpu:k devices share
    // RAM: nothing is copied to them before a step. Replicas on other device types get a copy.
    const bool shared = k == 0 || (devices_[k].is_cpu() && devices_.front().is_cpu());
    replica_flat_.push_back(
        FlatBuffer::build(replica->parameters(), devices_[k], shared ? &master_.buffer : nullptr));
    replicas_.push_back(std::move(replica));
    workers_.push_back(std::make_unique<DeviceWorker>(devices_[k], threads));
    // Only replica 0's reduced gradients are read (they become the master's .grad), so the
    // reducers reduce to rank 0 instead of all-reducing.
    reducers_.push_back(
        std::make_unique<GradientReducer>(replica_flat_[k], groups_[k], options_.reducer, 0));
  }
  // The master's .grad tensors are views of replica 0's reduced gradient buffer: the reducer
  // path then needs no copy into them.
  master_grad_ = reducers_.front()->flat_grad();
  train(module_->is_training());
}

DataParallel::~DataParallel() {
  reducers_.clear();
  workers_.clear();
}

void DataParallel::broadcast_state(int root) {
  auto& group = options_.process_group;
  if (!group || group->size() == 1) return;
  NoGradGuard no_grad;
  group->broadcast(master_.buffer, root);
  for (auto& named : module_->named_buffers()) group->broadcast(named.second, root);
}

void DataParallel::run_on_workers(std::size_t n, const std::function<void(std::size_t)>& f) {
  std::vector<TaskHandle> futures;
  // Autocast is thread-local (torch.autocast is too): the caller's region covers its replicas'
  // forwards, so each task runs under the caller's setting and the worker's is restored after.
  const bool autocast = is_autocast_enabled();
  for (std::size_t k = 0; k < n; ++k)
    futures.push_back(workers_[k]->submit([&f, k, autocast] {
      AutocastGuard region(autocast);
      f(k);
    }));
  std::exception_ptr first;
  std::size_t first_k = 0;
  for (std::size_t k = 0; k < n; ++k) {
    try {
      futures[k].get();
    } catch (...) {
      if (!first) {
        first = std::current_exception();
        first_k = k;
      }
    }
  }
  if (first)
    rethrow_with_prefix(first, "DataParallel replica on " + devices_[first_k].str() + ": ");
}

void DataParallel::check_master(bool gradients) {
  const std::size_t es = element_size(master_.buffer.dtype());
  for (std::size_t j = 0; j < master_.params.size(); ++j) {
    Tensor p = master_.params[j];
    // Replicas and reducers were set up for the requires_grad flags at wrapping time.
    if (gradients && p.requires_grad() != replica_flat_.front().params[j].requires_grad())
      throw ValueError("DataParallel: wrapped parameter " + std::to_string(j) + " " +
                       p.shape().str() +
                       " now has requires_grad=" + (p.requires_grad() ? "true" : "false") +
                       " but had " + (p.requires_grad() ? "false" : "true") +
                       " when wrapped (wrap the module again after freezing or unfreezing "
                       "parameters)");
    const char* expected = static_cast<const char*>(master_.buffer.device_raw_data()) +
                           static_cast<std::size_t>(master_.offsets[j]) * es;
    if (p.device_raw_data() == expected && p.dtype() == master_.buffer.dtype() &&
        p.device() == master_.buffer.device())
      continue;
    if (p.device() != devices_.front() || p.shape() != master_.shapes[j] ||
        p.dtype() != master_.buffer.dtype())
      throw ValueError("DataParallel: wrapped parameter " + std::to_string(j) + " is now " +
                       to_string(p.dtype()) + " " + p.shape().str() + " on " + p.device().str() +
                       "; it was " + to_string(master_.buffer.dtype()) + " " +
                       master_.shapes[j].str() + " on " + devices_.front().str() +
                       " when wrapped (wrap the module again after changing it)");
    Tensor view = master_.view_of(master_.buffer, j);
    NoGradGuard no_grad;
    view.copy_(p.detach());
    p.set_data(view);
  }
}

void DataParallel::sync_replica(std::size_t k) {
  NoGradGuard no_grad;
  // One copy of the flat buffer (between GPUs a peer copy); CPU replicas alias the master.
  if (replica_copies_master(k)) replica_flat_[k].buffer.copy_(master_.buffer);
  auto src = module_->named_buffers(), dst = replicas_[k]->named_buffers();
  for (std::size_t i = 0; i < src.size() && i < dst.size(); ++i)
    if (!src[i].second.is_same(dst[i].second)) dst[i].second.copy_(src[i].second.to(devices_[k]));
}

bool DataParallel::replica_copies_master(std::size_t k) const {
  return replica_flat_[k].buffer.device_raw_data() != master_.buffer.device_raw_data();
}

std::int64_t DataParallel::parameter_copy_bytes(std::size_t replicas) const {
  std::int64_t bytes = 0;
  for (std::size_t k = 0; k < replicas && k < replica_flat_.size(); ++k)
    if (replica_copies_master(k))
      bytes += master_.numel * static_cast<std::int64_t>(element_size(master_.buffer.dtype()));
  return bytes;
}

std::vector<DataParallel::Shard> DataParallel::shards(std::int64_t batch) const {
  std::vector<Shard> out;
  for (std::int64_t s = 0; s < batch; s += options_.shard_size)
    out.push_back({s, std::min(options_.shard_size, batch - s)});
  return out;
}

std::vector<std::pair<std::size_t, std::size_t>> DataParallel::shard_ranges(
    std::size_t nshards) const {
  auto sizes =
      split_sizes(static_cast<std::int64_t>(nshards), static_cast<std::int64_t>(devices_.size()));
  std::vector<std::pair<std::size_t, std::size_t>> out;
  std::size_t start = 0;
  for (auto s : sizes) {
    if (s == 0) break;
    out.emplace_back(start, start + static_cast<std::size_t>(s));
    start += static_cast<std::size_t>(s);
  }
  return out;
}

void DataParallel::register_fused_optim(std::shared_ptr<optim::Optimizer> optimizer) {
  if (!optimizer) {
    fused_.reset();
    fused_index_.clear();
    return;
  }
  // On GPUs the fused optimizer's step always runs as step() after the reduction (see
  // register_fused_optim in the header), so any optimizer will do there.
  if (devices_.front().is_cpu() && !optimizer->supports_sliced_step())
    throw ValueError(
        "DataParallel::register_fused_optim: the optimizer's step is not elementwise (it does not "
        "support sliced steps, Optimizer::supports_sliced_step()); call its step() after "
        "forward_backward() instead");
  std::vector<int> index(master_.params.size(), -1);
  const auto& params = optimizer->params();
  for (std::size_t i = 0; i < params.size(); ++i) {
    std::size_t j = 0;
    while (j < master_.params.size() && !master_.params[j].is_same(params[i])) ++j;
    if (j == master_.params.size())
      throw ValueError("DataParallel::register_fused_optim: optimizer parameter " +
                       std::to_string(i) + " " + params[i].shape().str() +
                       " is not a parameter of the wrapped module (build the optimizer from "
                       "module()->parameters() or the DataParallel's parameters())");
    if (index[j] >= 0)
      throw ValueError("DataParallel::register_fused_optim: optimizer parameters " +
                       std::to_string(index[j]) + " and " + std::to_string(i) +
                       " are the same tensor; a fused step would update it twice");
    index[j] = static_cast<int>(i);
  }
  fused_ = std::move(optimizer);
  fused_index_ = std::move(index);
}

// ---- Module interface ------------------------------------------------------------------------

std::vector<std::pair<std::string, Tensor>> DataParallel::named_parameters(bool recurse) const {
  return module_->named_parameters(recurse);
}

std::vector<std::pair<std::string, Tensor>> DataParallel::named_buffers(bool recurse) const {
  return module_->named_buffers(recurse);
}

StateDict DataParallel::state_dict() const { return module_->state_dict(); }

void DataParallel::load_state_dict(const StateDict& state, bool strict) {
  StateDict stripped;
  for (const auto& [k, v] : state) {
    std::string key = k.rfind("module.", 0) == 0 ? k.substr(7) : k;
    if (stripped.contains(key))
      throw StateDictError("load_state_dict into DataParallel: key '" + key +
                           "' appears both with and without the 'module.' prefix");
    stripped.insert(key, v);
  }
  module_->load_state_dict(stripped, strict);
}

void DataParallel::train(bool on) {
  Module::train(on);
  module_->train(on);
  for (auto& r : replicas_) r->train(on);
}

void DataParallel::to(Device device) {
  if (device != devices_.front())
    throw DeviceError("DataParallel: the module lives on " + devices_.front().str() +
                      " (device_ids[0]); it cannot move to " + device.str());
}

void DataParallel::to(DType dtype) {
  if (dtype != master_.buffer.dtype())
    throw DTypeError(
        "DataParallel: cannot change the dtype of a wrapped module; convert the "
        "module before wrapping it");
}

void DataParallel::zero_grad() { module_->zero_grad(); }

std::shared_ptr<nn::Module> DataParallel::clone() const {
  return std::make_shared<DataParallel>(module_->clone(), devices_, output_device_, options_);
}

}  // namespace lockstep::parallel
