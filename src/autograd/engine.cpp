// The backward engine: counts each node's dependencies, then runs nodes as they become ready,
// latest-created first (PyTorch's CPU order), summing the gradients that reach a node from
// several consumers before running it. AccumulateGrad therefore runs once per leaf per backward,
// with the final gradient, and fires the leaf's post-accumulate-grad hooks. Several backward
// passes may run at once (threads sharing leaves or a retained graph): each keeps its counts and
// sums apart, and AccumulateGrad serialises the updates of one leaf. Freeing a graph is iterative.
#include <algorithm>
#include <atomic>
#include <memory>
#include <mutex>
#include <queue>
#include <thread>
#include <unordered_map>

#include "lockstep/core/pool.h"
#include "lockstep/autograd/grad_mode.h"
#include "lockstep/autograd/node.h"
#include "lockstep/ops/ops.h"

namespace lockstep::autograd {

namespace {
std::atomic<std::uint64_t> g_next_seq{0};
std::atomic<std::uint64_t> g_backward_epoch{0};
thread_local bool t_retain_graph = false;
// Where a Node being destroyed hands the nodes only it held, while an outer ~Node on this thread
// drains the list (null otherwise).
thread_local std::vector<std::shared_ptr<Node>>* t_pending_deletes = nullptr;
// Guards TensorImpl::grad_accumulator (read, and created on a leaf's first use): held for a few
// instructions, never around other code, so a spin lock (its release is a plain store: cheaper
// than a mutex's on every op that takes a parameter).
std::atomic_flag g_accumulator_lock = ATOMIC_FLAG_INIT;
struct AccumulatorLock {
  AccumulatorLock() {
    while (g_accumulator_lock.test_and_set(std::memory_order_acquire)) std::this_thread::yield();
  }
  ~AccumulatorLock() { g_accumulator_lock.clear(std::memory_order_release); }
};

struct RetainScope {
  bool prev;
  explicit RetainScope(bool r) : prev(t_retain_graph) { t_retain_graph = r; }
  ~RetainScope() { t_retain_graph = prev; }
};
}  // namespace

bool retain_graph_requested() { return t_retain_graph; }


Node::Node(bool accumulator)
    : seq_(g_next_seq.fetch_add(1, std::memory_order_relaxed)), accumulator_(accumulator) {}

// torch/csrc/autograd/function.cpp, deleteNode: without this, destroying the head of a chain
// destroys its edge's node from inside its destructor, and so on down the chain (a stack
// overflow at a few hundred thousand nodes). An edge shared with another owner is only
// decremented here.
Node::~Node() {
  auto gather = [this](std::vector<std::shared_ptr<Node>>& out) {
    for (auto& e : next_)
      if (e.fn && e.fn.use_count() == 1) out.push_back(std::move(e.fn));
  };
  if (t_pending_deletes) {  // an outer ~Node on this thread is draining: hand over
    gather(*t_pending_deletes);
    return;
  }
  std::vector<std::shared_ptr<Node>> pending;
  gather(pending);
  if (pending.empty()) return;
  t_pending_deletes = &pending;
  while (!pending.empty()) {
    std::shared_ptr<Node> n = std::move(pending.back());
    pending.pop_back();
    n.reset();  // its destructor appends the nodes it alone held
  }
  t_pending_deletes = nullptr;
}

bool needs_grad(std::initializer_list<const Tensor*> inputs) {
  if (!GradMode::is_enabled()) return false;
  for (const Tensor* t : inputs)
    if (t->defined() && t->requires_grad()) return true;
  return false;
}

Edge gradient_edge(const Tensor& t) {
  if (!t.defined() || !t.requires_grad()) return {};
  auto& impl = t.impl();
  if (impl.grad_fn) return {impl.grad_fn};
  AccumulatorLock lock;
  auto acc = impl.grad_accumulator.lock();
  if (!acc) {
    acc = std::allocate_shared<AccumulateGrad>(detail::PoolAllocator<AccumulateGrad>(), t.impl_ptr());
    impl.grad_accumulator = acc;
  }
  return {acc};
}

std::vector<Tensor> AccumulateGrad::apply(Tensor grad) {
  auto& v = *variable_;
  if (!grad.defined()) return {};
  if (grad.shape() != v.shape)
    throw ShapeError("AccumulateGrad: gradient shape " + grad.shape().str() +
                     " does not match parameter shape " + v.shape.str());
  std::lock_guard<std::mutex> lock(mutex_);  // held over the hooks too, as torch
  {
    NoGradGuard no_grad;
    if (!v.grad && v.grad_destination && grad.impl_ptr() == v.grad_destination) {
      v.grad = grad.impl_ptr();  // a formula wrote into the leaf's gradient destination
    } else if (!v.grad) {
      // Take the incoming buffer when nothing else can see it; copy otherwise (the same gradient
      // tensor may flow to several inputs, e.g. both operands of an add).
      bool exclusive = grad.impl_ptr().use_count() == 1 && grad.impl().storage.use_count() == 1;
      Tensor g = exclusive ? grad.detach() : grad.detach().clone();
      v.grad = g.impl_ptr();
    } else {
      Tensor(v.grad).add_(grad);
    }
  }
  Tensor self(variable_);
  for (auto& [id, hook] : v.post_accumulate_hooks) hook(self);
  return {};
}

void set_grad_destination(const Tensor& leaf, const Tensor& dest) {
  auto& v = leaf.impl();
  if (dest.defined() && (dest.shape() != leaf.shape() || dest.dtype() != leaf.dtype() ||
                         dest.device() != leaf.device()))
    throw ShapeError("set_grad_destination: destination " + to_string(dest.dtype()) + " " +
                     dest.shape().str() + " on " + dest.device().str() + " does not match " +
                     to_string(leaf.dtype()) + " " + leaf.shape().str() + " on " +
                     leaf.device().str());
  v.grad_destination = dest.defined() ? dest.impl_ptr() : nullptr;
  v.grad_destination_taken = false;
}

Tensor take_grad_destination(const Tensor& leaf) {
  if (!leaf.defined()) return {};
  auto& v = leaf.impl();
  if (!v.grad_destination || v.grad_destination_taken || v.grad) return {};
  v.grad_destination_taken = true;
  return Tensor(v.grad_destination);
}

void run_backward(const Tensor& root, const Tensor& grad, bool retain_graph) {
  Edge start = gradient_edge(root);
  if (!start.fn)
    throw AutogradError("backward(): tensor of shape " + root.shape().str() +
                        " does not require grad");
  NoGradGuard no_grad;  // backward formulas do not build graphs (no higher-order gradients)
  RetainScope retain(retain_graph);

  // 1. dependency counts over the reachable graph, kept in the nodes' scratch fields for the
  //    nodes this pass can claim, in `foreign` for those another pass holds right now
  const std::uint64_t epoch = g_backward_epoch.fetch_add(1, std::memory_order_relaxed) + 1;
  std::vector<Node*> seen;
  seen.reserve(32);  // one allocation for graphs of up to 32 nodes instead of growing 1, 2, 4, …
  std::unordered_map<Node*, Node::Scratch> foreign;
  auto first_visit = [&](Node* m) {
    if (m->owner_epoch_.load(std::memory_order_relaxed) == epoch) return false;
    if (!foreign.empty() && foreign.count(m)) return false;
    std::uint64_t free = 0;
    if (m->owner_epoch_.compare_exchange_strong(free, epoch, std::memory_order_acquire,
                                                std::memory_order_relaxed))
      m->scratch_ = {};
    else
      foreign.emplace(m, Node::Scratch{});
    seen.push_back(m);
    return true;
  };
  auto scratch = [&](Node* m) -> Node::Scratch& {
    if (m->owner_epoch_.load(std::memory_order_relaxed) == epoch) return m->scratch_;
    return foreign.find(m)->second;
  };
  // hands the claimed scratch back (gradients dropped) however the pass ends
  struct Release {
    std::vector<Node*>& seen;
    std::uint64_t epoch;
    ~Release() {
      for (Node* n : seen)
        if (n->owner_epoch_.load(std::memory_order_relaxed) == epoch) {
          n->scratch_.grad = Tensor();
          n->owner_epoch_.store(0, std::memory_order_release);
        }
    }
  } release{seen, epoch};
  first_visit(start.fn.get());
  for (std::size_t i = 0; i < seen.size(); ++i) {
    for (auto& e : seen[i]->next_edges()) {
      Node* m = e.fn.get();
      if (!m) continue;
      first_visit(m);
      ++scratch(m).deps;
    }
  }

  // 2. run nodes as their counts reach zero, latest sequence number first; a node no gradient
  //    reached is skipped but still releases its successors
  auto cmp = [](Node* a, Node* b) { return a->sequence_nr() < b->sequence_nr(); };
  std::vector<Node*> heap_storage;
  heap_storage.reserve(seen.size());
  std::priority_queue<Node*, std::vector<Node*>, decltype(cmp)> ready(cmp, std::move(heap_storage));
  scratch(start.fn.get()).grad = grad.detach();
  ready.push(start.fn.get());
  while (!ready.empty()) {
    Node* n = ready.top();
    ready.pop();
    Tensor g = std::move(scratch(n).grad);
    scratch(n).grad = Tensor();
    std::vector<Tensor> grads;
    if (g.defined()) {
      if (n->released())
        throw AutogradError(
            "backward(): trying to backward through the graph a second time (node " + n->name() +
            "); pass retain_graph=true to the first backward");
      grads = n->apply(std::move(g));
    }
    auto& edges = n->next_edges();
    for (std::size_t i = 0; i < edges.size(); ++i) {
      Node* next = edges[i].fn.get();
      if (!next) continue;
      Node::Scratch& s = scratch(next);
      if (i < grads.size() && grads[i].defined())
        s.grad = s.grad.defined() ? add(s.grad, grads[i]) : std::move(grads[i]);
      if (--s.deps == 0) ready.push(next);
    }
  }
  if (!retain_graph)
    for (Node* n : seen)
      if (!n->is_accumulator()) n->mark_released();
}

}  // namespace lockstep::autograd
