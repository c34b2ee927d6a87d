// The autograd graph: each differentiable op that records history creates one Node whose apply()
// maps the gradient of its output to gradients of its inputs. Edges point to the nodes that
// produced the inputs (or to AccumulateGrad for leaves). Define-by-run, as torch.autograd.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "lockstep/core/pool.h"
#include "lockstep/core/tensor.h"

namespace lockstep::autograd {

class Node;

/// Where an input's gradient goes: the producing node (null when the input needs no gradient).
struct Edge {
  std::shared_ptr<Node> fn;
};

class Node {
 public:
  /// `accumulator`: true only for AccumulateGrad (a leaf's sink, kept usable after a backward).
  explicit Node(bool accumulator = false);
  /// Frees the graph behind this node without recursing once per node (as torch's deleteNode):
  /// the edges this node alone holds go to a per-thread work list released in a loop, so a chain
  /// of a million nodes is freed in constant stack depth.
  virtual ~Node();
  Node(const Node&) = delete;
  Node& operator=(const Node&) = delete;
  /// grad_output: gradient w.r.t. this node's output. Returns one gradient per input edge
  /// (undefined where not needed).
  virtual std::vector<Tensor> apply(Tensor grad_output) = 0;
  /// Frees saved tensors after a backward without retain_graph.
  virtual void release() {}
  virtual std::string name() const = 0;

  /// Edges to the nodes of this node's inputs (storage from the per-thread block cache).
  using EdgeList = std::vector<Edge, detail::PoolAllocator<Edge>>;
  EdgeList& next_edges() { return next_; }
  /// Creation order; the engine runs later nodes first among those ready (as PyTorch).
  std::uint64_t sequence_nr() const { return seq_; }
  bool released() const { return released_; }
  /// True for AccumulateGrad (a leaf's sink), which the engine keeps usable after a backward.
  bool is_accumulator() const { return accumulator_; }
  void mark_released() {
    released_ = true;
    release();
  }

 protected:
  EdgeList next_;

 private:
  friend void run_backward(const Tensor&, const Tensor&, bool);
  // Engine scratch for the one backward pass that holds it: owner_epoch_ names that pass (0:
  // none). A pass reaching a node another pass holds (backward from several threads through a
  // shared leaf or a retained graph) keeps that node's scratch in a table of its own instead.
  struct Scratch {
    int deps = 0;
    Tensor grad;  // the sum of the gradients that reached the node so far
  };
  std::atomic<std::uint64_t> owner_epoch_{0};
  Scratch scratch_;

 private:
  std::uint64_t seq_;
  bool released_ = false;
  const bool accumulator_;  // read by the engine instead of a dynamic_cast
};

/// Sink for a leaf tensor requiring grad: adds the incoming gradient into the leaf's .grad, then
/// runs the leaf's post-accumulate-grad hooks (the gradient is final at that point). A leaf has
/// one AccumulateGrad at a time (gradient_edge), and apply() holds its mutex over the
/// accumulation and the hooks, as torch's AccumulateGrad: backward from several threads into one
/// leaf loses no update, and each hook sees the .grad its own accumulation made. Hooks therefore
/// run one at a time per leaf and must not start a backward that reaches the same leaf.
class AccumulateGrad : public Node {
 public:
  explicit AccumulateGrad(std::shared_ptr<TensorImpl> variable)
      : Node(true), variable_(std::move(variable)) {}
  std::vector<Tensor> apply(Tensor grad_output) override;
  std::string name() const override { return "AccumulateGrad"; }

 private:
  std::shared_ptr<TensorImpl> variable_;
  std::mutex mutex_;
};

/// A node whose backward is a callable; `Fn` captures the saved tensors and is dropped on release.
template <class Fn>
class FunctionNode : public Node {
 public:
  FunctionNode(const char* name, Fn fn) : name_(name), fn_(std::move(fn)) {}
  std::vector<Tensor> apply(Tensor grad_output) override { return (*fn_)(grad_output); }
  void release() override { fn_.reset(); }
  std::string name() const override { return name_; }

 private:
  const char* name_;
  std::optional<Fn> fn_;
};

/// True when grad mode is on and any of `inputs` requires grad.
bool needs_grad(std::initializer_list<const Tensor*> inputs);

/// The edge a gradient for `t` should flow into: its grad_fn, its AccumulateGrad for a leaf that
/// requires grad (created on first use, under a lock: threads recording ops on one leaf share it),
/// or a null edge.
Edge gradient_edge(const Tensor& t);

/// Records `fn` (a callable Tensor -> std::vector<Tensor>) as the grad_fn of `output`, with one
/// edge per input in order. Call only when needs_grad(inputs) is true.
template <class Fn>
void record(const char* name, Tensor& output, std::initializer_list<const Tensor*> inputs, Fn fn) {
  auto node = std::allocate_shared<FunctionNode<Fn>>(
      detail::PoolAllocator<FunctionNode<Fn>>(), name, std::move(fn));
  node->next_edges().reserve(inputs.size());
  for (const Tensor* in : inputs) node->next_edges().push_back(gradient_edge(*in));
  auto& impl = output.impl();
  impl.requires_grad = true;
  impl.grad_fn = std::move(node);
}

/// Records a node over a runtime list of inputs (cat).
template <class Fn>
void record(const char* name, Tensor& output, const std::vector<Tensor>& inputs, Fn fn) {
  auto node = std::allocate_shared<FunctionNode<Fn>>(
      detail::PoolAllocator<FunctionNode<Fn>>(), name, std::move(fn));
  node->next_edges().reserve(inputs.size());
  for (const Tensor& in : inputs) node->next_edges().push_back(gradient_edge(in));
  auto& impl = output.impl();
  impl.requires_grad = true;
  impl.grad_fn = std::move(node);
}

/// Gradient destinations: `dest` becomes the tensor backward's formulas may write the gradient of
/// the leaf `leaf` into directly, instead of a new tensor, once per call (see
/// take_grad_destination); AccumulateGrad then adopts it as `leaf`'s .grad without a copy. This
/// is what PyTorch DDP's gradient_as_bucket_view aims at (gradients living in the bucket), minus
/// the add into a zeroed bucket. GradientReducer points each parameter at its bucket slice before
/// a backward and clears it after. An undefined `dest` clears it. ShapeError unless `dest` has
/// `leaf`'s shape, dtype and device.
void set_grad_destination(const Tensor& leaf, const Tensor& dest);

/// For backward formulas: `leaf`'s destination if it has one not yet taken since
/// set_grad_destination and `leaf` has no .grad; it is then marked taken (a leaf used twice gets
/// one in-place write, the rest is summed by the engine as usual). Otherwise undefined.
Tensor take_grad_destination(const Tensor& leaf);

/// Runs backward from `root` with initial gradient `grad` (same shape as root).
void run_backward(const Tensor& root, const Tensor& grad, bool retain_graph);

/// Inside a node's apply(): whether the backward running it was asked to retain the graph
/// (nodes that run nested backward passes, like DataParallel's, pass it on).
bool retain_graph_requested();

}  // namespace lockstep::autograd
