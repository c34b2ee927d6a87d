// Optimizer's steps for the elementwise optimizers (SGD, Adam): per parameter (update_param), or
// one launch over parameters that lie flat on one GPU (plan_flat, step_flat, the flat state),
// which a CUDA graph can capture and replay (prepare_graph_replay).
#include "lockstep/autograd/grad_mode.h"
#include "lockstep/cuda/graph.h"
#include "lockstep/ops/ops.h"
#include "lockstep/optim/optimizer.h"
#include "lockstep/ops/detail/cuda_steps.h"
#include "optim/flat_step.h"

namespace lockstep::optim {

void Optimizer::update_param(std::size_t, const Tensor&) {
  throw ValueError("this optimizer has no elementwise step");
}

detail::FlatPlan Optimizer::plan_flat() const {
  detail::FlatPlan no;
  if (!supports_flat_step()) {
    no.reason = "this optimizer has no flat step";
    return no;
  }
  const Tensor& p0 = params_.front();
  const Device device = p0.device();
  const DType dtype = p0.dtype();
  if (!device.is_cuda()) {
    no.reason = "parameter 0 is on " + device.str();
    return no;
  }
  if (dtype != kFloat32 && dtype != kFloat64) {
    no.reason = "parameter 0 is " + to_string(dtype);
    return no;
  }
  std::vector<detail::FlatParamInfo> infos;
  for (std::size_t i = 0; i < params_.size(); ++i) {
    const Tensor& p = params_[i];
    if (p.device() != device || p.dtype() != dtype) {
      no.reason = "parameter " + std::to_string(i) + " is " + to_string(p.dtype()) + " on " +
                  p.device().str() + ", parameter 0 " + to_string(dtype) + " on " + device.str();
      return no;
    }
    detail::FlatParamInfo info;
    info.storage = p.impl().storage.get();
    info.address = reinterpret_cast<std::uintptr_t>(p.device_raw_data());
    info.numel = p.numel();
    const Tensor g = p.grad();
    if (g.defined()) {
      // A gradient the per-parameter step would refuse is left to it (it says what is wrong).
      if (g.device() != device || g.dtype() != dtype || g.shape() != p.shape()) {
        no.reason = "the gradient of parameter " + std::to_string(i) + " is " +
                    to_string(g.dtype()) + " " + g.shape().str() + " on " + g.device().str() +
                    ", not like the parameter";
        return no;
      }
      info.has_grad = true;
      info.grad_storage = g.impl().storage.get();
      info.grad_address = reinterpret_cast<std::uintptr_t>(g.device_raw_data());
    }
    infos.push_back(info);
  }
  return detail::plan_flat_step(infos, element_size(dtype));
}

std::int64_t Optimizer::step_flat(const detail::FlatPlan&) {
  throw ValueError("this optimizer has no flat step");
}

Tensor Optimizer::flat_state_view(const Tensor& flat, const detail::FlatPlan& plan,
                                  std::size_t i) const {
  const detail::FlatSegment& s = plan.segments.at(i);
  return reshape(narrow(flat, 0, s.state_offset, s.numel), params_[i].shape());
}

Tensor Optimizer::flat_state(const std::string& name, const detail::FlatPlan& plan) {
  const Tensor& p0 = params_.front();
  Tensor& buf = flat_state_[name];
  const bool fresh = !buf.defined() || buf.numel() != plan.state_numel ||
                     buf.dtype() != p0.dtype() || buf.device() != p0.device();
  auto refuse_in_capture = [&] {
    if (graph_mode_ == GraphMode::Capture)
      throw ValueError("optimizer step under CUDA graph capture: its state '" + name +
                       "' is not in place yet (make one eager step() before capturing)");
  };
  if (fresh) {
    refuse_in_capture();
    buf = zeros({plan.state_numel}, p0.options());
  }
  for (const detail::FlatSegment& s : plan.segments) {
    auto it = state_[s.index].find(name);
    if (it == state_[s.index].end()) continue;
    Tensor view = flat_state_view(buf, plan, s.index);
    const TensorImpl &have = it->second.impl(), &want = view.impl();
    if (have.storage == want.storage && have.offset == want.offset && have.shape == want.shape &&
        have.dtype == want.dtype)
      continue;  // already there
    refuse_in_capture();
    view.copy_(it->second.detach());
    it->second = view;
  }
  return buf;
}

void Optimizer::step_elementwise() {
  NoGradGuard no_grad;
  cuda_step_ = CudaStepInfo{};
  bool on_gpu = false;
  for (const Tensor& p : params_) on_gpu = on_gpu || p.device().is_cuda();
  if (on_gpu) {
    const detail::FlatPlan plan = plan_flat();
    const int device = params_.front().device().index;
    if (params_.front().device().is_cuda() && cuda::is_current_stream_capturing(device)) {
      // Captured into a CUDA graph: the launch reads its scalars and table from graph_table_,
      // written before each replay by prepare_graph_replay(); no host state changes now.
      if (!plan.flat)
        throw ValueError(
            "optimizer step under CUDA graph capture: the parameters do not lie "
            "flat on one GPU (" +
            plan.reason +
            "); only the flat step (one launch over DataParallel's parameter "
            "buffer) can be captured");
      graph_table_ = std::make_shared<cuda_ops::FlatGraphTable>();
      graph_plan_ = std::make_unique<detail::FlatPlan>(plan);
      graph_mode_ = GraphMode::Capture;
      struct Restore {
        GraphMode& mode;
        ~Restore() { mode = GraphMode::Eager; }
      } restore{graph_mode_};
      cuda_step_.flat = true;
      cuda_step_.launches = step_flat(plan);
      if (auto* graph = cuda::CUDAGraph::capturing_on(device)) {
        graph->keep_alive(graph_table_);
        for (const auto& [name, buf] : flat_state_)
          graph->keep_alive(std::shared_ptr<const void>(buf.impl_ptr()));
      }
      return;
    }
    if (plan.flat) {
      cuda_step_.flat = true;
      cuda_step_.launches = step_flat(plan);
      return;
    }
    cuda_step_.fallback_reason = plan.reason;
  }
  for (std::size_t i = 0; i < params_.size(); ++i) {
    Tensor g = params_[i].grad();
    if (!g.defined()) continue;  // no gradient: untouched, no state created
    update_param(i, g);
    if (params_[i].device().is_cuda() && params_[i].numel() > 0) ++cuda_step_.launches;
  }
}

void Optimizer::prepare_graph_replay() {
  if (!graph_plan_ || !graph_table_)
    throw ValueError("prepare_graph_replay: no optimizer step was captured in a CUDA graph");
  NoGradGuard no_grad;
  graph_mode_ = GraphMode::Stage;
  struct Restore {
    GraphMode& mode;
    ~Restore() { mode = GraphMode::Eager; }
  } restore{graph_mode_};
  (void)step_flat(*graph_plan_);
}

bool Optimizer::has_graph_step() const { return graph_plan_ != nullptr; }

void Optimizer::reset_graph_step() {
  graph_plan_.reset();
  graph_table_.reset();
}

}  // namespace lockstep::optim
