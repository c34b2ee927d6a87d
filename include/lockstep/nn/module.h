// nn::Module: the base of every layer and user model, with named parameters, buffers and
// children, state_dict() / load_state_dict() under PyTorch's dotted names (`fc1.weight`,
// `0.bias`), train() / eval(), to(device) and clone() for replication.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "lockstep/core/tensor.h"
#include "lockstep/nn/args.h"
#include "lockstep/core/state_dict.h"

namespace lockstep::nn {

class Module : public std::enable_shared_from_this<Module> {
 public:
  Module() = default;
  virtual ~Module() = default;

  /// The module's computation on a batch. The default throws Error (a module without forward).
  virtual Tensor forward(const Tensor& input);
  Tensor operator()(const Tensor& input) { return forward(input); }
  /// A forward with several inputs and outputs (PyTorch's forward(*args) returning a tuple): tensors
  /// and plain values in, tensors out. The default takes exactly one tensor and returns
  /// {forward(it)}; it throws ValueError naming the module for anything else. Override it for a
  /// module with several inputs or outputs (DataParallel scatters and gathers through it).
  virtual std::vector<Tensor> forward_args(const Args& args);

  /// Whether this module's forward or backward runs a collective on dist::current_group() (as
  /// SyncBatchNorm's does; lockstep/dist/current_group.h). DataParallel's deterministic mode then
  /// runs a step's shards at once, one thread each, so that every shard reaches the collective;
  /// otherwise a device runs its shards one after another and such a collective throws. Every
  /// replica then runs each step, with 0 rows if it has none, and a failing one aborts the
  /// others' wait (current_group.h). The default: whether a child's does. Override it to return
  /// true in a module that calls one.
  virtual bool runs_collectives() const;

  /// Whether this module's forward mixes the samples of its batch, so that a sample's output
  /// depends on which others share its chunk (BatchNorm in training, nn/batch_norm.h).
  /// DataParallel's deterministic mode refuses such a module unless it also runs collectives
  /// (SyncBatchNorm: its statistics span every shard). The default: whether a child's does.
  virtual bool uses_batch_statistics() const;

  /// Copies the settings that are neither parameters, buffers nor constructor arguments from
  /// `src`, a module of the same type (copy_module_state() calls it on every module of a clone,
  /// after reset() rebuilt the children from constructor arguments). The default copies
  /// nothing; BatchNorm copies its SyncBatchNorm switch.
  virtual void copy_settings_from(const Module& src) {}

  /// Type name for messages ("Linear", "Sequential", or the user's class).
  virtual std::string name() const { return "Module"; }

  /// Parameters in registration order, children after their parent's own (recursively). A
  /// tensor registered under several names (tied weights, tie_parameter) is listed once, under
  /// the first name met, as PyTorch's named_parameters(remove_duplicate=True): GPT's tied
  /// embedding is `transformer.wte.weight`, not also `lm_head.weight`. Buffers alike.
  std::vector<Tensor> parameters(bool recurse = true) const;
  virtual std::vector<std::pair<std::string, Tensor>> named_parameters(bool recurse = true) const;
  std::vector<Tensor> buffers(bool recurse = true) const;
  virtual std::vector<std::pair<std::string, Tensor>> named_buffers(bool recurse = true) const;
  std::vector<std::shared_ptr<Module>> children() const;
  const std::vector<std::pair<std::string, std::shared_ptr<Module>>>& named_children() const {
    return children_;
  }

  /// Parameters and buffers under dotted names, values shared with the module (not copies). A
  /// tied tensor appears under every name it has (PyTorch's state_dict keeps both
  /// `transformer.wte.weight` and `lm_head.weight`).
  virtual StateDict state_dict() const;
  /// Copies values into the existing tensors. `strict`: every key must match one parameter or
  /// buffer and vice versa, except that a tied tensor needs only one of its names (a file from
  /// safetensors.torch.save_model keeps one; when several are given, each is copied in key
  /// order, so the last wins, as PyTorch). Throws StateDictError listing missing and unexpected
  /// keys, or naming the key and both shapes on a shape mismatch; nothing is modified when it
  /// throws.
  virtual void load_state_dict(const StateDict& state, bool strict = true);

  /// Sets training mode on this module and all children (torch.nn.Module.train).
  virtual void train(bool on = true);
  void eval() { train(false); }
  bool is_training() const { return training_; }

  /// Moves every parameter and buffer to `device` in place: tensors held elsewhere (an
  /// optimizer) see the move. Throws DeviceError for an unavailable device.
  virtual void to(Device device);
  /// Converts every float parameter and buffer to `dtype` in place.
  virtual void to(DType dtype);

  /// Sets every parameter's gradient to none (PyTorch 2.x zero_grad(set_to_none=True)).
  virtual void zero_grad();

  /// Weight tying (nanoGPT's `self.transformer.wte.weight = self.lm_head.weight`): makes the
  /// parameter registered here as `name` the tensor `shared`, so both modules hold one tensor —
  /// one entry in parameters(), one gradient (the sum of both uses), one optimizer state. The
  /// caller also points its own member handle at `shared` (e.g. `embedding->weight = shared`).
  /// ValueError when `name` is not a parameter of this module or the shapes differ.
  void tie_parameter(const std::string& name, const Tensor& shared);

  /// A deep copy with its own parameters (same values). Modules deriving from Cloneable<T>
  /// support it; others throw Error naming the type.
  virtual std::shared_ptr<Module> clone() const;

  /// Registers a parameter (requires_grad set) under `name`, replacing one of that name;
  /// returns the stored handle. Public, as LibTorch's torch::nn::Module::register_parameter (the
  /// Python front's Module.__setattr__ registers through it). ValueError for an empty name or
  /// one with a '.'.
  Tensor& register_parameter(const std::string& name, Tensor t, bool requires_grad = true);
  /// Registers (or replaces) a buffer; ValueError as register_parameter.
  Tensor& register_buffer(const std::string& name, Tensor t);
  template <class M>
  std::shared_ptr<M> register_module(const std::string& name, std::shared_ptr<M> m) {
    register_child(name, m);
    return m;
  }
  /// Registers (or replaces) a child module; ValueError for a bad name or a null module.
  void register_child(const std::string& name, std::shared_ptr<Module> m);

 protected:
  /// Forgets all registered parameters, buffers and children (used by Cloneable::clone).
  void clear_registrations();

 private:
  void collect(const std::string& prefix, bool recurse, bool params,
               std::vector<std::pair<std::string, Tensor>>& out) const;
  std::vector<std::pair<std::string, Tensor>> params_;
  std::vector<std::pair<std::string, Tensor>> buffers_;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
  bool training_ = true;

  template <class Derived>
  friend class Cloneable;
};

/// CRTP base that gives a module clone() (as LibTorch's torch::nn::Cloneable): the derived class
/// creates its parameters and children in reset(), which the constructor calls; clone() copies
/// the object, calls reset() on the copy (without disturbing the default generator), then copies
/// all parameter and buffer values and the training flags.
template <class Derived>
class Cloneable : public Module {
 public:
  virtual void reset() = 0;

  std::shared_ptr<Module> clone() const override {
    auto copy = std::make_shared<Derived>(static_cast<const Derived&>(*this));
    copy->clear_registrations();
    {
      // reset() draws initial values that copy_state_into() overwrites: draw them from a scratch
      // generator, not the process-wide stream (which other threads may be using).
      Generator scratch(0);
      DefaultGeneratorGuard guard(scratch);
      copy->reset();
    }
    copy_state_into(*copy);
    return copy;
  }

 private:
  void copy_state_into(Module& copy) const;
};

/// Implementation detail of Cloneable::clone: deep-copies values, requires_grad and training
/// flags from `src` into `dst`, which has the same structure.
void copy_module_state(const Module& src, Module& dst);

template <class Derived>
void Cloneable<Derived>::copy_state_into(Module& copy) const {
  copy_module_state(*this, copy);
}

}  // namespace lockstep::nn
