// DataParallel: replicas, scatter/gather with autograd, the reducer path and deterministic mode.
#include "lockstep/parallel/data_parallel.h"

#include <cstring>
#include <set>
#include <sstream>

#include "lockstep/autograd/grad_mode.h"
#include "lockstep/autograd/node.h"
#include "lockstep/core/parallel.h"
#include "lockstep/ops/ops.h"

namespace lockstep::parallel {

namespace {

// Rethrows `e` as the same lockstep error type with `prefix` added to the message.
[[noreturn]] void rethrow_with_prefix(std::exception_ptr e, const std::string& prefix) {
  try {
    std::rethrow_exception(e);
  } catch (const ShapeError& x) {
    throw ShapeError(prefix + x.what());
  } catch (const DTypeError& x) {
    throw DTypeError(prefix + x.what());
  } catch (const DeviceError& x) {
    throw DeviceError(prefix + x.what());
  } catch (const IndexError& x) {
    throw IndexError(prefix + x.what());
  } catch (const ValueError& x) {
    throw ValueError(prefix + x.what());
  } catch (const StateDictError& x) {
    throw StateDictError(prefix + x.what());
  } catch (const AutogradError& x) {
    throw AutogradError(prefix + x.what());
  } catch (const Error& x) {
    throw Error(prefix + x.what());
  }
}

// Sets every parameter's gradient to none.
void clear_grads(nn::Module& m) {
  for (auto& p : m.parameters()) p.set_grad(Tensor());
}

// Fixed pairwise tree over rows [0, rows) of `slots` for columns [lo, hi): the result lands in
// row 0. The tree depends only on `rows`, so the bits do not depend on who computes a column.
template <class T>
void tree_sum_columns(T* base, std::int64_t rows, std::int64_t width, std::int64_t lo,
                      std::int64_t hi) {
  for (std::int64_t stride = 1; stride < rows; stride *= 2)
    for (std::int64_t i = 0; i + stride < rows; i += 2 * stride) {
      T* dst = base + i * width;
      const T* src = base + (i + stride) * width;
      for (std::int64_t j = lo; j < hi; ++j) dst[j] += src[j];
    }
}

double tree_sum(std::vector<double> v) {
  auto n = static_cast<std::int64_t>(v.size());
  for (std::int64_t stride = 1; stride < n; stride *= 2)
    for (std::int64_t i = 0; i + stride < n; i += 2 * stride) v[i] += v[i + stride];
  return v.empty() ? 0.0 : v[0];
}

}  // namespace

std::vector<Device> default_devices() {
  std::vector<Device> out;
  for (int i = 0; i < usable_cores(); ++i) out.push_back(cpu(i));
  return out;
}

std::vector<Device> parse_devices(const std::string& list) {
  std::vector<Device> out;
  std::set<std::string> seen;
  std::stringstream ss(list);
  std::string item;
  while (std::getline(ss, item, ',')) {
    Device d = Device::parse(item);
    if (!seen.insert(d.str()).second)
      throw ValueError("device " + d.str() + " is listed twice in '" + list + "'");
    out.push_back(d);
  }
  if (out.empty()) throw ValueError("empty device list");
  return out;
}

DataParallel::DataParallel(std::shared_ptr<nn::Module> module, std::vector<Device> device_ids,
                           std::optional<Device> output_device, DataParallelOptions options)
    : module_(std::move(module)), devices_(std::move(device_ids)), options_(options) {
  if (!module_) throw ValueError("DataParallel: null module");
  if (devices_.empty()) devices_ = default_devices();
  std::set<std::string> seen;
  for (auto& d : devices_) {
    check_device_available(d);
    if (!seen.insert(d.str()).second)
      throw ValueError("DataParallel: device " + d.str() + " is listed twice");
  }
  if (options_.shard_size < 1) throw ValueError("DataParallel: shard_size must be at least 1");
  output_device_ = output_device.value_or(devices_.front());
  check_device_available(output_device_);
  std::size_t n = devices_.size();
  int threads = options_.threads_per_device > 0
                    ? options_.threads_per_device
                    : std::max(1, usable_cores() / static_cast<int>(n));

  module_->to(devices_.front());
  master_ = FlatBuffer::build(module_->parameters(), devices_.front());
  master_grad_ = zeros({master_.numel}, master_.buffer.options());
  groups_ = dist::new_thread_group(static_cast<int>(n));
  for (std::size_t k = 0; k < n; ++k) {
    auto replica = module_->clone();
    replica->to(devices_[k]);
    // Replica 0 lives on the master's device and reads the master buffer itself.
    replica_flat_.push_back(FlatBuffer::build(replica->parameters(), devices_[k],
                                              k == 0 ? &master_.buffer : nullptr));
    replicas_.push_back(std::move(replica));
    workers_.push_back(std::make_unique<DeviceWorker>(devices_[k], threads));
    reducers_.push_back(
        std::make_unique<GradientReducer>(replica_flat_[k], groups_[k], options_.reducer));
  }
  train(module_->is_training());
}

DataParallel::~DataParallel() {
  reducers_.clear();
  workers_.clear();
}

void DataParallel::run_on_workers(std::size_t n, const std::function<void(std::size_t)>& f) {
  std::vector<std::future<void>> futures;
  for (std::size_t k = 0; k < n; ++k) futures.push_back(workers_[k]->submit([&f, k] { f(k); }));
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
  if (first) rethrow_with_prefix(first, "DataParallel replica on " + devices_[first_k].str() + ": ");
}

void DataParallel::sync_replica(std::size_t k) {
  if (k > 0) {
    std::memcpy(replica_flat_[k].buffer.raw_data(), master_.buffer.raw_data(),
                static_cast<std::size_t>(master_.numel) * element_size(master_.buffer.dtype()));
  }
  auto src = module_->named_buffers(), dst = replicas_[k]->named_buffers();
  NoGradGuard no_grad;
  for (std::size_t i = 0; i < src.size() && i < dst.size(); ++i)
    if (!src[i].second.is_same(dst[i].second)) dst[i].second.copy_(src[i].second.to(devices_[k]));
}

std::vector<DataParallel::Shard> DataParallel::shards(std::int64_t batch) const {
  std::vector<Shard> out;
  for (std::int64_t s = 0; s < batch; s += options_.shard_size)
    out.push_back({s, std::min(options_.shard_size, batch - s)});
  return out;
}

std::vector<std::pair<std::size_t, std::size_t>> DataParallel::shard_ranges(
    std::size_t nshards) const {
  auto sizes = split_sizes(static_cast<std::int64_t>(nshards),
                           static_cast<std::int64_t>(devices_.size()));
  std::vector<std::pair<std::size_t, std::size_t>> out;
  std::size_t start = 0;
  for (auto s : sizes) {
    if (s == 0) break;
    out.emplace_back(start, start + static_cast<std::size_t>(s));
    start += static_cast<std::size_t>(s);
  }
  return out;
}

// ---- the gather path -------------------------------------------------------------------------

Tensor DataParallel::forward(const Tensor& input) {
  if (!input.defined() || input.dim() < 1)
    throw ShapeError("DataParallel: expected an input with a batch dimension, got " +
                     (input.defined() ? input.shape().str() : std::string("undefined")));
  if (options_.deterministic) return forward_deterministic(input);
  const std::int64_t batch = input.size(0);
  const bool grad = GradMode::is_enabled();
  const bool input_grad = grad && input.requires_grad();
  const std::uint64_t step = is_training() ? step_++ : step_;
  auto sizes = split_sizes(batch, static_cast<std::int64_t>(devices_.size()));
  std::size_t active = batch == 0 ? 1 : static_cast<std::size_t>(std::min<std::int64_t>(batch, static_cast<std::int64_t>(devices_.size())));
  std::vector<std::int64_t> starts(active, 0);
  for (std::size_t k = 1; k < active; ++k) starts[k] = starts[k - 1] + sizes[k - 1];
  std::vector<Tensor> outs(active), chunks(active);
  bytes_moved_ = 0;
  run_on_workers(active, [&](std::size_t k) {
    sync_replica(k);
    GradMode::set_enabled(grad);
    clear_grads(*replicas_[k]);
    Tensor chunk = narrow(input.detach(), 0, starts[k], sizes[k]).to(devices_[k]);
    if (input_grad) chunk = chunk.clone().requires_grad_(true);
    DropoutKeyGuard key({options_.seed, step, starts[k]});
    outs[k] = replicas_[k]->forward(chunk);
    if (!outs[k].defined() || outs[k].dim() < 1 || outs[k].size(0) != sizes[k])
      throw ShapeError("forward returned " +
                       (outs[k].defined() ? outs[k].shape().str() : std::string("undefined")) +
                       " for a chunk of " + std::to_string(sizes[k]) +
                       " samples; DataParallel gathers outputs along dim 0");
    chunks[k] = chunk;
  });
  for (std::size_t k = 1; k < active; ++k)
    bytes_moved_ += master_.numel * static_cast<std::int64_t>(element_size(master_.buffer.dtype()));
  std::vector<Tensor> gathered;
  for (auto& o : outs) gathered.push_back(o.detach().to(output_device_));
  Tensor out = gathered.size() == 1 ? gathered[0].clone() : cat(gathered, 0);
  bool any_param_grad = false;
  for (auto& p : master_.params) any_param_grad = any_param_grad || p.requires_grad();
  if (!grad || !(input_grad || any_param_grad)) return out;

  std::vector<Tensor> inputs{input};
  for (auto& p : master_.params) inputs.push_back(p);
  autograd::record(
      "DataParallelBackward", out, inputs,
      [this, alive = std::weak_ptr<char>(alive_), outs, chunks, sizes, starts, active,
       input_grad](const Tensor& g) {
        if (alive.expired())
          throw Error("DataParallel: backward through an output of a DataParallel that was destroyed");
        std::vector<Tensor> gouts(active);
        for (std::size_t k = 0; k < active; ++k)
          gouts[k] = narrow(g, 0, starts[k], sizes[k]).to(devices_[k]).clone();
        run_on_workers(active, [&](std::size_t k) {
          if (outs[k].requires_grad()) outs[k].backward(gouts[k]);
        });
        std::vector<Tensor> result;
        if (input_grad) {
          std::vector<Tensor> parts;
          for (std::size_t k = 0; k < active; ++k) {
            Tensor cg = chunks[k].grad();
            parts.push_back(cg.defined() ? cg.to(output_device_) : zeros_like(chunks[k]).to(output_device_));
          }
          result.push_back(cat(parts, 0));
        } else {
          result.push_back(Tensor());
        }
        // Sum the replicas' gradients per parameter in device order.
        for (std::size_t j = 0; j < master_.params.size(); ++j) {
          Tensor acc;
          for (std::size_t k = 0; k < active; ++k) {
            Tensor gk = replica_flat_[k].params[j].grad();
            if (!gk.defined()) continue;
            gk = gk.to(output_device_);
            if (!acc.defined())
              acc = gk.clone();
            else
              acc.add_(gk);
          }
          result.push_back(acc);
        }
        for (std::size_t k = 0; k < active; ++k) clear_grads(*replicas_[k]);
        return result;
      });
  return out;
}

// ---- the reducer path ------------------------------------------------------------------------

Tensor DataParallel::forward_backward(const Tensor& input, const Tensor& target,
                                      const LossFn& loss_fn) {
  if (!input.defined() || !target.defined() || input.dim() < 1 || target.dim() < 1 ||
      input.size(0) != target.size(0))
    throw ShapeError("DataParallel::forward_backward: input " +
                     (input.defined() ? input.shape().str() : std::string("undefined")) +
                     " and target " +
                     (target.defined() ? target.shape().str() : std::string("undefined")) +
                     " must have the same batch dimension");
  if (options_.deterministic) return forward_backward_deterministic(input, target, loss_fn);
  const std::int64_t batch = input.size(0);
  const std::size_t n = devices_.size();
  const std::uint64_t step = step_++;
  auto sizes = split_sizes(batch, static_cast<std::int64_t>(n));
  std::vector<std::int64_t> starts(n, 0);
  for (std::size_t k = 1; k < n; ++k) starts[k] = starts[k - 1] + sizes[k - 1];
  std::vector<double> losses(n, 0.0);
  run_on_workers(n, [&](std::size_t k) {
    reducers_[k]->prepare();
    // A replica that fails still takes part in every remaining collective (contributing zeros),
    // so the others finish their step instead of waiting for it; then its error is rethrown.
    struct FinalizeOnError {
      GradientReducer& r;
      bool done = false;
      ~FinalizeOnError() {
        if (!done) try {
            r.finalize();
          } catch (...) {
          }
      }
    } guard{*reducers_[k]};
    if (sizes[k] > 0) {
      sync_replica(k);
      EnableGradGuard grad_on;
      Tensor x = narrow(input.detach(), 0, starts[k], sizes[k]).to(devices_[k]);
      Tensor y = narrow(target.detach(), 0, starts[k], sizes[k]).to(devices_[k]);
      DropoutKeyGuard key({options_.seed, step, starts[k]});
      Tensor loss = loss_fn(replicas_[k]->forward(x), y);
      if (loss.numel() != 1)
        throw ShapeError("loss function returned shape " + loss.shape().str() + ", expected a scalar");
      double w = static_cast<double>(sizes[k]) / static_cast<double>(batch);
      losses[k] = loss.item() * w;
      if (loss.requires_grad()) mul(loss, w).backward();
    }
    guard.done = true;
    reducers_[k]->finalize();
  });
  bytes_moved_ = 0;
  for (std::size_t k = 0; k < n; ++k) {
    if (k > 0 && sizes[k] > 0)
      bytes_moved_ += master_.numel * static_cast<std::int64_t>(element_size(master_.buffer.dtype()));
    bytes_moved_ += reducers_[k]->bytes_reduced();
  }
  std::vector<char> has(master_.params.size());
  for (std::size_t j = 0; j < has.size(); ++j) has[j] = reducers_[0]->has_grad(j);
  accumulate_master_grads(reducers_[0]->flat_grad(), has);
  for (std::size_t k = 0; k < n; ++k) clear_grads(*replicas_[k]);
  double total = 0;
  for (double l : losses) total += l;
  return scalar_tensor(total, master_.buffer.options());
}

void DataParallel::accumulate_master_grads(const Tensor& flat_grad,
                                           const std::vector<char>& has_grad) {
  NoGradGuard no_grad;
  for (std::size_t j = 0; j < master_.params.size(); ++j) {
    if (!has_grad[j]) continue;
    Tensor p = master_.params[j];
    Tensor src = master_.view_of(flat_grad, j).to(p.device());
    if (p.grad().defined()) {
      p.grad().add_(src);
    } else {
      Tensor dst = master_.view_of(master_grad_, j);
      dst.copy_(src);
      p.set_grad(dst);
    }
  }
}

// ---- deterministic mode ----------------------------------------------------------------------

Tensor DataParallel::forward_backward_deterministic(const Tensor& input, const Tensor& target,
                                                    const LossFn& loss_fn) {
  const std::int64_t batch = input.size(0);
  const std::uint64_t step = step_++;
  auto sh = shards(batch);
  auto ranges = shard_ranges(sh.size());
  const std::int64_t width = master_.numel;
  Tensor slots = zeros({static_cast<std::int64_t>(std::max<std::size_t>(sh.size(), 1)), width},
                       master_.buffer.options());
  std::vector<std::vector<char>> had(sh.size(), std::vector<char>(master_.params.size(), 0));
  std::vector<double> losses(sh.size(), 0.0);
  auto shard_work = [&](std::size_t k) {
    sync_replica(k);
    set_num_threads(1);  // one BLAS call per GEMM, the same on every device count
    EnableGradGuard grad_on;
    for (std::size_t s = ranges[k].first; s < ranges[k].second; ++s) {
      clear_grads(*replicas_[k]);
      Tensor x = narrow(input.detach(), 0, sh[s].start, sh[s].size).to(devices_[k]);
      Tensor y = narrow(target.detach(), 0, sh[s].start, sh[s].size).to(devices_[k]);
      DropoutKeyGuard key({options_.seed, step, sh[s].start});
      Tensor loss = loss_fn(replicas_[k]->forward(x), y);
      if (loss.numel() != 1)
        throw ShapeError("loss function returned shape " + loss.shape().str() + ", expected a scalar");
      double w = static_cast<double>(sh[s].size) / static_cast<double>(batch);
      losses[s] = loss.item() * w;
      if (loss.requires_grad()) mul(loss, w).backward();
      Tensor row = narrow(slots, 0, static_cast<std::int64_t>(s), 1).reshape({width});
      for (std::size_t j = 0; j < master_.params.size(); ++j) {
        Tensor g = replica_flat_[k].params[j].grad();
        if (!g.defined()) continue;
        had[s][j] = 1;
        NoGradGuard no_grad;
        replica_flat_[k].view_of(row, j).copy_(g.to(devices_[k]));
      }
    }
    clear_grads(*replicas_[k]);
  };
  run_on_workers(ranges.size(), shard_work);
  combine_shard_grads(slots, had, sh.size());
  return scalar_tensor(tree_sum(losses), master_.buffer.options());
}

void DataParallel::combine_shard_grads(const Tensor& slots, const std::vector<std::vector<char>>& had,
                                       std::size_t nshards) {
  const std::int64_t width = master_.numel;
  const auto rows = static_cast<std::int64_t>(nshards);
  const std::size_t n = devices_.size();
  run_on_workers(n, [&](std::size_t k) {
    std::int64_t lo = width * static_cast<std::int64_t>(k) / static_cast<std::int64_t>(n);
    std::int64_t hi = width * static_cast<std::int64_t>(k + 1) / static_cast<std::int64_t>(n);
    if (slots.dtype() == kFloat64)
      tree_sum_columns(slots.data_ptr<double>(), rows, width, lo, hi);
    else
      tree_sum_columns(slots.data_ptr<float>(), rows, width, lo, hi);
  });
  std::vector<char> any(master_.params.size(), 0);
  for (const auto& h : had)
    for (std::size_t j = 0; j < h.size(); ++j) any[j] = any[j] || h[j];
  accumulate_master_grads(narrow(slots, 0, 0, 1).reshape({width}), any);
}

Tensor DataParallel::forward_deterministic(const Tensor& input) {
  const std::int64_t batch = input.size(0);
  const bool grad = GradMode::is_enabled();
  const bool input_grad = grad && input.requires_grad();
  const std::uint64_t step = is_training() ? step_++ : step_;
  auto sh = shards(batch);
  if (sh.empty()) sh.push_back({0, 0});
  auto ranges = shard_ranges(sh.size());
  std::vector<Tensor> outs(sh.size()), chunks(sh.size());
  std::vector<std::size_t> owner(sh.size());
  run_on_workers(ranges.size(), [&](std::size_t k) {
    sync_replica(k);
    set_num_threads(1);
    GradMode::set_enabled(grad);
    clear_grads(*replicas_[k]);
    for (std::size_t s = ranges[k].first; s < ranges[k].second; ++s) {
      Tensor chunk = narrow(input.detach(), 0, sh[s].start, sh[s].size).to(devices_[k]);
      if (input_grad) chunk = chunk.clone().requires_grad_(true);
      DropoutKeyGuard key({options_.seed, step, sh[s].start});
      outs[s] = replicas_[k]->forward(chunk);
      chunks[s] = chunk;
      owner[s] = k;
    }
  });
  std::vector<Tensor> gathered;
  for (auto& o : outs) gathered.push_back(o.detach().to(output_device_));
  Tensor out = gathered.size() == 1 ? gathered[0].clone() : cat(gathered, 0);
  bool any_param_grad = false;
  for (auto& p : master_.params) any_param_grad = any_param_grad || p.requires_grad();
  if (!grad || !(input_grad || any_param_grad)) return out;
  std::vector<Tensor> inputs{input};
  for (auto& p : master_.params) inputs.push_back(p);
  autograd::record(
      "DataParallelBackward", out, inputs,
      [this, alive = std::weak_ptr<char>(alive_), outs, chunks, sh, ranges,
       input_grad](const Tensor& g) {
        if (alive.expired())
          throw Error("DataParallel: backward through an output of a DataParallel that was destroyed");
        const std::int64_t width = master_.numel;
        Tensor slots = zeros({static_cast<std::int64_t>(sh.size()), width}, master_.buffer.options());
        std::vector<std::vector<char>> had(sh.size(), std::vector<char>(master_.params.size(), 0));
        run_on_workers(ranges.size(), [&](std::size_t k) {
          set_num_threads(1);
          for (std::size_t s = ranges[k].first; s < ranges[k].second; ++s) {
            clear_grads(*replicas_[k]);
            if (outs[s].requires_grad())
              outs[s].backward(narrow(g, 0, sh[s].start, sh[s].size).to(devices_[k]).clone(),
                               /*retain_graph=*/false);
            Tensor row = narrow(slots, 0, static_cast<std::int64_t>(s), 1).reshape({width});
            for (std::size_t j = 0; j < master_.params.size(); ++j) {
              Tensor gj = replica_flat_[k].params[j].grad();
              if (!gj.defined()) continue;
              had[s][j] = 1;
              NoGradGuard no_grad;
              replica_flat_[k].view_of(row, j).copy_(gj.to(devices_[k]));
            }
          }
          clear_grads(*replicas_[k]);
        });
        const std::size_t n = devices_.size();
        const auto rows = static_cast<std::int64_t>(sh.size());
        run_on_workers(n, [&](std::size_t k) {
          std::int64_t lo = width * static_cast<std::int64_t>(k) / static_cast<std::int64_t>(n);
          std::int64_t hi = width * static_cast<std::int64_t>(k + 1) / static_cast<std::int64_t>(n);
          if (slots.dtype() == kFloat64)
            tree_sum_columns(slots.data_ptr<double>(), rows, width, lo, hi);
          else
            tree_sum_columns(slots.data_ptr<float>(), rows, width, lo, hi);
        });
        std::vector<Tensor> result;
        if (input_grad) {
          std::vector<Tensor> parts;
          for (std::size_t s = 0; s < sh.size(); ++s) {
            Tensor cg = chunks[s].grad();
            parts.push_back((cg.defined() ? cg : zeros_like(chunks[s])).to(output_device_));
          }
          result.push_back(cat(parts, 0));
        } else {
          result.push_back(Tensor());
        }
        Tensor total = narrow(slots, 0, 0, 1).reshape({width});
        for (std::size_t j = 0; j < master_.params.size(); ++j) {
          bool any = false;
          for (auto& h : had) any = any || h[j];
          result.push_back(any ? master_.view_of(total, j).to(output_device_).clone() : Tensor());
        }
        return result;
      });
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
  for (const auto& [k, v] : state)
    stripped.insert(k.rfind("module.", 0) == 0 ? k.substr(7) : k, v);
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
    throw DTypeError("DataParallel: cannot change the dtype of a wrapped module; convert the "
                     "module before wrapping it");
}

void DataParallel::zero_grad() { module_->zero_grad(); }

std::shared_ptr<nn::Module> DataParallel::clone() const {
  return std::make_shared<DataParallel>(module_->clone(), devices_, output_device_, options_);
}

}  // namespace lockstep::parallel
