// DataParallel's replicas: construction, the worker runs, copy-in, buffers and the replica block.
#include "parallel/replicas.h"

#include "lockstep/autograd/grad_mode.h"
#include "lockstep/core/parallel.h"
#include "lockstep/dist/current_group.h"
#include "lockstep/ops/autocast.h"
#include "parallel/detail.h"

namespace lockstep::parallel::detail {
namespace {

// `m` and its submodules, parents before their children, children in registration order.
void collect_tree(nn::Module& m, std::vector<nn::Module*>& out) {
  out.push_back(&m);
  for (auto& [name, child] : m.named_children()) collect_tree(*child, out);
}

std::vector<nn::Module*> module_tree(nn::Module& m) {
  std::vector<nn::Module*> out;
  collect_tree(m, out);
  return out;
}

}  // namespace

ReplicaSet::ReplicaSet(nn::Module& module, FlatBuffer& master, const std::vector<Device>& devices,
                       int threads)
    : module_(module),
      master_(master),
      devices_(devices),
      threads_(threads),
      buffer_count_(buffers_of(module).size()) {
  for (std::size_t k = 0; k < devices_.size(); ++k) {
    auto replica = module_.clone();
    replica->to(devices_[k]);
    // Replica 0 lives on the master's device and reads the master buffer itself; so do the
    // replicas on the other CPU devices (an alias of the same memory), since cpu:k devices share
    // RAM: nothing is copied to them before a step. Replicas on other device types get a copy.
    const bool shared = k == 0 || (devices_[k].is_cpu() && devices_.front().is_cpu());
    flat_.push_back(
        FlatBuffer::build(replica->parameters(), devices_[k], shared ? &master_.buffer : nullptr));
    replicas_.push_back(std::move(replica));
    workers_.push_back(std::make_unique<DeviceWorker>(devices_[k], threads_));
  }
  push_buffers(1);  // replica 0 shares the module's buffers from the start
  module_tree_ = module_tree(module_);
  for (auto& r : replicas_) replica_trees_.push_back(module_tree(*r));
}

ReplicaSet::~ReplicaSet() { workers_.clear(); }

void ReplicaSet::train(bool on) {
  for (auto& r : replicas_) r->train(on);
}

void ReplicaSet::follow_modes() {
  for (auto& tree : replica_trees_) {
    if (tree.size() != module_tree_.size()) continue;  // a clone has the module's structure
    // Pre-order: a parent's train() also sets its children, which are fixed after it if they
    // differ from their counterparts.
    for (std::size_t i = 0; i < tree.size(); ++i)
      if (tree[i]->is_training() != module_tree_[i]->is_training())
        tree[i]->train(module_tree_[i]->is_training());
  }
}

void ReplicaSet::run(std::size_t n, const std::function<void(std::size_t)>& f, bool single_thread) {
  // Autocast is thread-local (torch.autocast is too): the caller's region covers its replicas'
  // forwards, so each task runs under the caller's setting and the worker's is restored after.
  const bool autocast = is_autocast_enabled();
  if (n == 1 && devices_.size() == 1 && !single_thread) {
    // One device: on this thread, under the worker's thread count; the task's guards restore
    // grad mode, autocast and the dropout key, and the thread count is restored here.
    const int caller_threads = get_num_threads();
    if (caller_threads != threads_) set_num_threads(threads_);
    struct RestoreThreads {
      int n, was;
      ~RestoreThreads() {
        if (n != was) set_num_threads(was);
      }
    } restore{threads_, caller_threads};
    const bool grad = GradMode::is_enabled();
    try {
      AutocastGuard region(autocast);
      dist::CurrentGroupGuard group(groups_.empty() ? nullptr : groups_[0].get());
      f(0);
    } catch (...) {
      GradMode::set_enabled(grad);
      rethrow_with_prefix(std::current_exception(),
                          "DataParallel replica on " + devices_[0].str() + ": ");
    }
    GradMode::set_enabled(grad);
    return;
  }
  std::vector<TaskHandle> futures;
  std::vector<std::size_t> device_of;
  std::vector<dist::ProcessGroup*> group_of;
  for (std::size_t k = 0; k < n; ++k) {
    dist::ProcessGroup* group = groups_.empty() ? nullptr : groups_[k].get();
    futures.push_back(submit(*workers_[k], k, group, single_thread, [&f, k] { f(k); }));
    device_of.push_back(k);
    group_of.push_back(group);
  }
  wait_all(futures, device_of, group_of);
}

TaskHandle ReplicaSet::submit(DeviceWorker& worker, std::size_t k, dist::ProcessGroup* group,
                              bool single_thread, std::function<void()> f) {
  const bool autocast = is_autocast_enabled();
  const bool aborts = group && module_.runs_collectives();
  return worker.submit([this, k, group, single_thread, autocast, aborts, f = std::move(f)] {
    if (single_thread) set_num_threads(1);  // one BLAS call per GEMM on any N
    AutocastGuard region(autocast);
    dist::CurrentGroupGuard current(group);
    try {
      f();
    } catch (...) {
      if (aborts) {
        std::string what = "unknown error";
        try {
          throw;
        } catch (const std::exception& e) {
          what = e.what();
        } catch (...) {
        }
        group->abort("the replica on " + devices_[k].str() + " failed: " + what);
        if (on_abort_) on_abort_(k);
      }
      throw;
    }
  });
}

void ReplicaSet::wait_all(std::vector<TaskHandle>& tasks, const std::vector<std::size_t>& device_of,
                          const std::vector<dist::ProcessGroup*>& groups) const {
  std::exception_ptr first;
  std::size_t first_k = 0;
  for (std::size_t t = 0; t < tasks.size(); ++t) {
    try {
      tasks[t].get();
    } catch (...) {
      if (!first) {
        first = std::current_exception();
        first_k = device_of[t];
      }
    }
  }
  if (!first) return;
  for (dist::ProcessGroup* g : groups)
    if (g) g->clear_abort();
  rethrow_with_prefix(first, "DataParallel replica on " + devices_[first_k].str() + ": ");
}

bool ReplicaSet::copies_master(std::size_t k) const {
  return flat_[k].buffer.device_raw_data() != master_.buffer.device_raw_data();
}

std::int64_t ReplicaSet::parameter_copy_bytes(std::size_t n) const {
  std::int64_t bytes = 0;
  for (std::size_t k = 0; k < n && k < flat_.size(); ++k)
    if (copies_master(k))
      bytes += master_.numel * static_cast<std::int64_t>(element_size(master_.buffer.dtype()));
  return bytes;
}

void ReplicaSet::copy_in(std::size_t k) {
  NoGradGuard no_grad;
  // One copy of the flat buffer (between GPUs a peer copy); CPU replicas alias the master.
  if (copies_master(k)) flat_[k].buffer.copy_(master_.buffer);
}

std::vector<Tensor> ReplicaSet::buffers_of(const nn::Module& m) {
  std::vector<Tensor> out;
  for (auto& [name, t] : m.named_buffers())
    if (t.defined()) out.push_back(t);
  return out;
}

std::vector<Tensor> ReplicaSet::module_buffers() const {
  return buffer_count_ == 0 ? std::vector<Tensor>{} : buffers_of(module_);
}

void ReplicaSet::push_buffers(std::size_t n) {
  const std::vector<Tensor> src = module_buffers();
  if (src.empty()) return;
  NoGradGuard no_grad;
  for (std::size_t k = 0; k < n && k < replicas_.size(); ++k) {
    std::vector<Tensor> dst = buffers_of(*replicas_[k]);
    if (dst.size() != src.size())
      throw Error("DataParallel: the replica on " + devices_[k].str() + " has " +
                  std::to_string(dst.size()) + " buffers, the module " +
                  std::to_string(src.size()) + " (the module's buffers changed after wrapping)");
    for (std::size_t i = 0; i < src.size(); ++i) {
      Tensor d = dst[i];
      if (k == 0) {
        // The module's own memory (PyTorch: device[0]'s replica holds the master's tensors).
        if (d.device_raw_data() != src[i].device_raw_data() || d.shape() != src[i].shape() ||
            d.dtype() != src[i].dtype())
          d.set_data(src[i]);
      } else if (d.shape() != src[i].shape() || d.dtype() != src[i].dtype()) {
        d.set_data(src[i].detach().to(devices_[k]).clone());
      } else {
        d.copy_(src[i]);
      }
    }
  }
}

Tensor ReplicaSet::piece_of(const Tensor& t, std::int64_t start, std::int64_t size,
                            std::size_t k) const {
  return narrow(t.detach(), 0, start, size).to(devices_[k]);
}

nn::Args ReplicaSet::piece_args(const nn::Args& args, std::int64_t start, std::int64_t size,
                                std::size_t k) const {
  nn::Args out;
  out.reserve(args.size());
  for (const nn::Arg& a : args) {
    if (const Tensor* t = nn::tensor_arg(a))
      out.emplace_back(piece_of(*t, start, size, k));
    else
      out.push_back(a);
  }
  return out;
}

Tensor ReplicaSet::train_piece(std::size_t k, const nn::Args& x, const Tensor& y,
                               const DropoutKey& key, double weight, const ArgsLossFn& loss_fn,
                               std::size_t j) {
  return train_on(slot_module(k, j), slot_flat(k, j).params, x, y, key, weight, loss_fn);
}

Tensor ReplicaSet::train_module(const nn::Args& x, const Tensor& y, const DropoutKey& key,
                                double weight, const ArgsLossFn& loss_fn) {
  return train_on(module_, master_.params, x, y, key, weight, loss_fn);
}

Tensor ReplicaSet::train_on(nn::Module& m, const std::vector<Tensor>& params, const nn::Args& x,
                            const Tensor& y, const DropoutKey& key, double weight,
                            const ArgsLossFn& loss_fn) {
  DropoutKeyGuard guard(key);
  if (weight == 0) {
    // Nothing of this piece counts (every target ignored, or no rows): its forward still runs,
    // as PyTorch's does, so the buffers it updates (BatchNorm's statistics) and the collectives
    // it runs happen; no loss. A module that runs collectives (SyncBatchNorm) also runs them in
    // backward, where the other pieces wait for this one: it backpropagates zeros, so it meets
    // them and adds nothing to any gradient.
    if (!m.runs_collectives()) {
      NoGradGuard no_grad;
      m.forward_args(x);
      return Tensor();
    }
    EnableGradGuard grad_on;
    Tensor root;
    for (const Tensor& out : m.forward_args(x))
      if (out.requires_grad()) {
        Tensor zero = mul(sum(out), 0.0);
        root = root.defined() ? add(root, zero) : zero;
      }
    if (root.defined()) root.backward();
    return Tensor();
  }
  EnableGradGuard grad_on;
  Tensor loss = loss_fn(m.forward_args(x), y);
  if (loss.numel() != 1)
    throw ShapeError("loss function returned shape " + loss.shape().str() + ", expected a scalar");
  if (!loss.requires_grad()) {
    for (const auto& p : params)
      if (p.requires_grad())
        throw AutogradError(
            "the loss does not require grad: loss_fn must build its result from "
            "the model's output");
    return loss.detach();
  }
  // A chunk that is the whole batch has weight 1: its loss is backpropagated as it is (the same
  // bits as multiplying by 1, one node less).
  (weight == 1 ? loss : mul(loss, weight)).backward();
  return loss.detach();
}

// ---- deterministic mode's buffers -------------------------------------------------------------

ReplicaSet::ShardBuffers::ShardBuffers(ReplicaSet& set, std::size_t n)
    : set_(set), active_(set.has_buffers()) {
  if (!active_) return;
  NoGradGuard no_grad;
  const std::vector<Tensor> src = set_.module_buffers();
  for (std::size_t k = 0; k < n; ++k) {
    std::vector<Tensor> copy;
    for (const Tensor& t : src) copy.push_back(t.detach().to(set_.devices_[k]).clone());
    start_.push_back(std::move(copy));
  }
}

void ReplicaSet::ShardBuffers::before(nn::Module& m, std::size_t k, bool first) {
  if (!active_ || first) return;  // the first shard starts from the module's buffers themselves
  NoGradGuard no_grad;
  std::vector<Tensor> dst = buffers_of(m);
  for (std::size_t i = 0; i < dst.size(); ++i) dst[i].copy_(start_[k][i]);
}

void ReplicaSet::ShardBuffers::after(nn::Module& m, bool first) {
  if (!active_ || !first) return;
  NoGradGuard no_grad;
  for (const Tensor& t : buffers_of(m)) kept_.push_back(t.detach().clone());
}

void ReplicaSet::ShardBuffers::finish() {
  if (!active_ || start_.empty()) return;  // no shard ran here (an empty or joined rank)
  NoGradGuard no_grad;
  std::vector<Tensor> dst = set_.module_buffers();
  const std::vector<Tensor>& src = kept_.empty() ? start_.front() : kept_;
  for (std::size_t i = 0; i < dst.size(); ++i) dst[i].copy_(src[i]);
}

}  // namespace lockstep::parallel::detail
