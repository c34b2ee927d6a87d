// lockstep.nn.DataParallel: the C++ DataParallel (include/lockstep/parallel/data_parallel.h) —
// replicate, scatter, run every replica's forward on its device's worker thread, gather —
// for built-in modules and for modules whose forward is Python: the replicas are clones made
// through Module.clone (python/lockstep/nn/module.py, _clone_python_module for a Python module),
// and each worker runs its replica's Python forward holding the GIL only between ops (the ops
// themselves release it where they are long: linear, matmul, conv2d, backward).
#include <nanobind/nanobind.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <mutex>
#include <set>

#include "bind.h"
#include "lockstep/nn/sync_batch_norm.h"
#include "lockstep/parallel/data_parallel.h"

namespace lockstep::python {

namespace {

using namespace nb::literals;
using parallel::DataParallel;

// One of torch's device arguments: an int (a GPU index in torch: cuda:i here when GPUs are
// usable, else the CPU worker cpu:i), a string or a device.
Device device_of(nb::handle h, bool gpus) {
  if (nb::isinstance<nb::int_>(h)) return Device(gpus ? DeviceType::CUDA : DeviceType::CPU, nb::cast<int>(h));
  if (nb::isinstance<nb::str>(h)) return Device::parse(nb::cast<std::string>(h));
  return nb::cast<Device>(h);
}

bool gpus_usable() {
  const std::vector<Device> d = parallel::default_devices();
  return !d.empty() && d[0].is_cuda();
}

// torch's device_ids: a list of device arguments (empty result: None, the default devices).
std::vector<Device> devices_of(nb::handle ids) {
  std::vector<Device> out;
  if (ids.is_none()) return out;
  const bool gpus = gpus_usable();
  for (nb::handle h : ids) out.push_back(device_of(h, gpus));
  if (out.empty()) throw ValueError("DataParallel: device_ids is empty");
  return out;
}

// DataParallel's replicas, workers and collectives serve one step at a time: a second Python
// thread calling the same wrapper while a forward runs would interleave their collectives
// (SyncBatchNorm's) and hang. Refused instead, naming the rule.
class OneCallAtATime {
 public:
  explicit OneCallAtATime(const DataParallel* dp) : dp_(dp) {
    std::lock_guard<std::mutex> lock(mu());
    if (!busy().insert(dp_).second)
      throw Error("DataParallel called from two threads at once: a wrapper runs one forward at a "
                  "time (use one DataParallel per thread, or a lock around the step)");
  }
  ~OneCallAtATime() {
    std::lock_guard<std::mutex> lock(mu());
    busy().erase(dp_);
  }

 private:
  static std::mutex& mu() {
    static std::mutex m;
    return m;
  }
  static std::set<const DataParallel*>& busy() {
    static std::set<const DataParallel*> s;
    return s;
  }
  const DataParallel* dp_;
};

}  // namespace

void bind_parallel(nb::module_& m) {
  m.def("default_devices", &parallel::default_devices,
        "Every usable GPU, else one CPU worker per usable core (cpu:0 ... cpu:C-1).");
  nb::class_<DataParallel, nn::Module>(m, "DataParallel",
      "torch.nn.DataParallel: `module` replicated on `device_ids` (default: every GPU, else one "
      "CPU worker per usable core); each call splits the input batch along dim 0 "
      "(torch.tensor_split sizes), runs the replicas at once and gathers the outputs on "
      "`output_device`, and backward sums the replicas' gradients into the module's .grad. "
      "On CPU devices BatchNorm layers synchronise their statistics across the replicas unless "
      "sync_bn=False (the numbers of an unsplit batch, as PyTorch's CPU run gives). "
      "deterministic=True gives the same bits for any device count.")
      .def("__init__", [](DataParallel* dp, std::shared_ptr<nn::Module> module, nb::handle device_ids,
                          nb::handle output_device, int dim, bool sync_bn,
                          bool deterministic) {
        if (dim != 0) throw ValueError("DataParallel: only dim=0 is supported");
        std::vector<Device> devices = devices_of(device_ids);
        const std::vector<Device> used = devices.empty() ? parallel::default_devices() : devices;
        if (sync_bn && used.size() > 1 && used[0].is_cpu()) nn::convert_sync_batchnorm(module);
        parallel::DataParallelOptions options;
        options.deterministic = deterministic;
        std::optional<Device> output;
        if (!output_device.is_none()) output = device_of(output_device, gpus_usable());
        new (dp) DataParallel(std::move(module), std::move(devices), output, options);
      }, "module"_a, "device_ids"_a = nb::none(), "output_device"_a = nb::none(), "dim"_a = 0,
         "sync_bn"_a = true, "deterministic"_a = false)
      .def_prop_ro("module", &DataParallel::module)
      .def_prop_ro("device_ids", &DataParallel::device_ids)
      .def_prop_ro("output_device", &DataParallel::output_device)
      .def("forward", [](DataParallel& dp, const Tensor& input) {
        OneCallAtATime guard(&dp);
        nb::gil_scoped_release release;
        return dp.forward(input);
      }, "input"_a)
      .def("_forward_backward_cross_entropy", [](DataParallel& dp, const Tensor& input,
                                                 const Tensor& target, std::int64_t ignore_index) {
        OneCallAtATime guard(&dp);
        nb::gil_scoped_release release;
        return dp.forward_backward(input, target, nn::CrossEntropyLoss(ignore_index));
      }, "input"_a, "target"_a, "ignore_index"_a = -100,
         "The reducer path: forward, cross-entropy, backward and the gradient reduction in one "
         "call; returns the mean loss (no graph).");
}

}  // namespace lockstep::python
