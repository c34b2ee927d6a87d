// DataParallel: construction, replicas and workers, and the nn::Module interface. The training
// paths are in data_parallel_{forward_backward,reducer,one_device,deterministic,forward}.cpp
// (forward_backward: the entry; forward: the gather path).
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
#include "lockstep/dist/detail/hybrid_group.h"
#include "parallel/replicas.h"

namespace lockstep::parallel {

namespace {

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
  // ZeRO's reduce-scatter: chunk r of each bucket to rank r, so one device (replica) per rank.
  if (options_.reducer.scatter && !options_.process_group)
    throw ValueError(
        "DataParallel: reducer.scatter (ZeRO's reduce-scatter of the gradients) needs ranks: "
        "use DistributedDataParallel");
  if (options_.reducer.scatter && devices_.size() != 1)
    throw ValueError(
        "DistributedDataParallel: reducer.scatter (ZeRO's reduce-scatter of the "
        "gradients) takes one device per rank, got " +
        std::to_string(devices_.size()));
  if (options_.deterministic && options_.reducer.compression != dist::WireFormat::Native)
    throw ValueError(
        "DataParallel: reducer.compression = bfloat16 (gradient compression) is refused in "
        "deterministic mode, whose results are bit-identical to one device's; leave one of them "
        "off");
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
    for (auto& g : groups_) g = std::make_shared<dist::detail::HybridGroup>(g, options_.process_group);
  replicas_ = std::make_unique<detail::ReplicaSet>(*module_, master_, devices_, threads);
  replicas_->set_groups(groups_);
  // Only replica 0's reduced gradients are read (they become the master's .grad), so the
  // reducers reduce to rank 0 instead of all-reducing.
  for (std::size_t k = 0; k < n; ++k)
    reducers_.push_back(
        std::make_unique<GradientReducer>(replicas_->flat(k), groups_[k], options_.reducer, 0));
  // The master's .grad tensors are views of replica 0's reduced gradient buffer: the reducer
  // path then needs no copy into them.
  master_grad_ = reducers_.front()->flat_grad();
  // A replica that fails under a module that runs collectives aborts its group instead of
  // abandoning its reducer (data_parallel_reducer.cpp): the reductions it started are waited for
  // there, before the abort is cleared.
  replicas_->set_on_abort([this](std::size_t k) { reducers_[k]->discard(); });
  train(module_->is_training());
}

DataParallel::~DataParallel() {
  reducers_.clear();
  replicas_.reset();
}

std::shared_ptr<nn::Module> DataParallel::replica(std::size_t i) const {
  if (i >= replicas_->size())
    throw IndexError("DataParallel::replica(" + std::to_string(i) + "): there are " +
                     std::to_string(replicas_->size()) + " replicas");
  return replicas_->module(i);
}

DataParallel::GlobalStep DataParallel::begin_step(const LocalStep& mine) {
  GlobalStep g;
  g.count = static_cast<double>(mine.count);
  g.sync = mine.sync;
  g.rank_pieces = {mine.pieces};
  return g;
}

void DataParallel::check_master(bool gradients) {
  const std::size_t es = element_size(master_.buffer.dtype());
  for (std::size_t j = 0; j < master_.params.size(); ++j) {
    Tensor p = master_.params[j];
    // Replicas and reducers were set up for the requires_grad flags at wrapping time.
    if (gradients && p.requires_grad() != replicas_->flat(0).params[j].requires_grad())
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

std::vector<std::pair<std::int64_t, std::int64_t>> DataParallel::gradient_buckets() const {
  std::vector<std::pair<std::int64_t, std::int64_t>> out;
  for (std::size_t b = 0; b < reducers_.front()->num_buckets(); ++b)
    out.push_back(reducers_.front()->bucket_range(b));
  return out;
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
  replicas_->train(on);
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
