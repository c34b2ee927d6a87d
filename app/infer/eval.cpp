// `lockstep eval` (see eval.h).
#include "infer/eval.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ostream>

#include "data/data_source.h"
#include "infer/evaluate.h"
#include "cli/exit_status.h"
#include "lockstep/lockstep.h"
#include "guards/memory_budget.h"
#include "model/model_spec.h"
#include "files/weights.h"

namespace lockstep::app {

void run_eval(const EvalOptions& options, std::ostream& out) {
  if (options.weights.empty())
    throw ValueError("--weights FILE is required (see 'lockstep eval --help')");
  // --val-fraction 0 means "all the data": also the validation file when there is one.
  DataOptions data_options = options.data;
  const bool all = data_options.val_fraction && *data_options.val_fraction == 0.0;
  if (all && parse_data_spec(data_options.spec).has_validation_part())
    data_options.val_fraction.reset();
  const DistContext dist = init_distributed(options.dist);
  manual_seed(data_options.seed);
  LoadedData data = load_data(data_options);

  ModelSpec spec;
  if (options.model.spec.empty())
    spec.mlp = default_mlp_spec(data.synthetic, data.features, data.classes);
  else
    spec = parse_model_spec(options.model.spec);
  shape_for_model(spec, data);
  // The whole need, before the model is built and the --weights file read: the weights, the
  // file read and parsed, one evaluation chunk's activations.
  const MemoryNeed need = spec_memory_need(spec, data);
  const std::int64_t rows = eval_chunk_rows(need);  // bounded memory per forward
  check_inference_memory(spec_name(spec), "evaluation", need, file_size_or_zero(options.weights),
                         std::min(rows, std::max<std::int64_t>(
                                            1, data.train_x.size(0) + (data.has_validation()
                                                                           ? data.val_x.size(0)
                                                                           : 0))));
  auto model = make_model(spec, options.model, data, /*copies=*/1,
                          options.model.spec.empty()
                              ? default_mlp_note(data.features, data.classes, data.train_name)
                              : "");
  load_weights(*model, options.weights, "--weights");
  model->eval();

  Tensor x = data.val_x, y = data.val_y;
  if (all || !data.has_validation()) all_rows(data, x, y);
  const EvalResult r = evaluate_across_ranks(
      dist, [&model](const Tensor& in) { return model->forward(in); }, x, y, rows);
  // Finite weights can still overflow the logits (weights near float32's max): PyTorch prints a
  // NaN loss; the CLI reports it as training does, with status 3, and prints no result line. The
  // loss is the sum over every rank, so every rank takes the same decision.
  if (!std::isfinite(r.loss))
    throw NonFiniteLossError("evaluation loss is " +
                             std::string(std::isnan(r.loss) ? "NaN" : "Inf") + " for --weights " +
                             options.weights + " on " + std::to_string(r.samples) +
                             " samples: the model's outputs overflow float32 (weights or "
                             "input values too large?)");
  if (!dist.prints) return;
  char buf[128];
  std::snprintf(buf, sizeof buf, "loss %.6f accuracy %.6f samples %lld", r.loss, r.accuracy,
                static_cast<long long>(r.samples));
  out << buf << '\n' << std::flush;
}

}  // namespace lockstep::app
