// DataParallel's scatter and gather checks, and backward from several outputs.
#include "parallel/scatter_gather.h"

#include "lockstep/autograd/grad_mode.h"
#include "lockstep/ops/ops.h"

namespace lockstep::parallel::detail {

std::int64_t batch_rows(const nn::Args& args, const char* who) {
  std::int64_t rows = -1;
  std::size_t first = 0;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const Tensor* t = nn::tensor_arg(args[i]);
    if (!t) continue;
    if (!t->defined() || t->dim() < 1)
      throw ShapeError(std::string(who) + ": argument " + std::to_string(i) + " is " +
                       (t->defined() ? "a 0-d tensor" : "an undefined tensor") +
                       "; tensor arguments are split along dim 0 (a batch dimension)");
    if (rows < 0) {
      rows = t->size(0);
      first = i;
    } else if (t->size(0) != rows) {
      throw ShapeError(std::string(who) + ": argument " + std::to_string(i) + " has " +
                       std::to_string(t->size(0)) + " rows (shape " + t->shape().str() +
                       ") but argument " + std::to_string(first) + " has " + std::to_string(rows) +
                       "; every tensor argument is split along dim 0 with the same sizes");
    }
  }
  if (rows < 0)
    throw ShapeError(std::string(who) +
                     ": no tensor argument to split (at least one tensor with a batch dimension)");
  return rows;
}

void check_piece_outputs(const std::vector<Tensor>& outs, const std::vector<Tensor>& first,
                         std::int64_t rows) {
  if (outs.size() != first.size())
    throw ShapeError("forward returned " + std::to_string(outs.size()) +
                     " outputs for one chunk and " + std::to_string(first.size()) + " for another");
  for (std::size_t i = 0; i < outs.size(); ++i) {
    const Tensor& o = outs[i];
    const std::string which = outs.size() == 1 ? "" : " as output " + std::to_string(i);
    if (!o.defined() || (rows >= 0 && o.dim() > 0 && o.size(0) != rows))
      throw ShapeError("forward returned " +
                       (o.defined() ? o.shape().str() : std::string("undefined")) + which +
                       " for a chunk of " + std::to_string(rows) +
                       " samples; DataParallel gathers outputs along dim 0 (a 0-d output as one "
                       "value per chunk)");
    if (o.dtype() != first[i].dtype())
      throw DTypeError("forward returned " + to_string(o.dtype()) + which + " for one chunk and " +
                       to_string(first[i].dtype()) + " for another; DataParallel gathers them");
    if ((o.dim() == 0) != (first[i].dim() == 0))
      throw ShapeError("forward returned " + o.shape().str() + which + " for one chunk and " +
                       first[i].shape().str() + " for another");
  }
}

void backward_roots(const std::vector<Tensor>& roots, const std::vector<Tensor>& grads,
                    bool retain_graph) {
  if (roots.empty()) return;
  if (roots.size() == 1) {
    roots[0].backward(grads[0], retain_graph);
    return;
  }
  EnableGradGuard grad_on;
  Tensor total;
  for (std::size_t i = 0; i < roots.size(); ++i) {
    Tensor term = sum(mul(roots[i], grads[i]));
    total = total.defined() ? add(total, term) : term;
  }
  total.backward(Tensor(), retain_graph);
}

}  // namespace lockstep::parallel::detail
