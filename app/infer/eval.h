// `lockstep eval`: loss and accuracy of a saved model (a --save or PyTorch safetensors file) on
// the validation part of the data, or on all of it with --val-fraction 0 or when the data has
// no validation part.
#pragma once

#include <iosfwd>

#include "cli/options.h"

namespace lockstep::app {

/// Loads the data and the model (options.model, default as for training), loads
/// options.weights into it strictly, and writes `loss X accuracy Y` (6 decimals) to `out`.
/// Throws what load_data(), check_mlp_fits() and load_weights() throw, and NonFiniteLossError
/// (exit status 3, nothing written to `out`) when the loss is NaN or Inf: finite weights whose
/// outputs overflow float32.
void run_eval(const EvalOptions& options, std::ostream& out);

}  // namespace lockstep::app
