// The `--model mlp:IN,H1,...,OUT` family: parsing the spec, checking it against the data, and
// building the nn::Sequential it names with PyTorch's layout and parameter names.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "lockstep/nn/sequential.h"

namespace lockstep::app {

/// The layer widths of an MLP: sizes[0] inputs, sizes.back() outputs, hidden widths between.
struct MlpSpec {
  std::vector<std::int64_t> sizes;
  /// "mlp:10,5,2".
  std::string str() const;
};

/// Parses "mlp:IN,H1,...,OUT" (at least two widths, each an integer >= 1; "mlp:IN,OUT" is one
/// Linear layer). Throws ValueError naming the text and what is wrong.
MlpSpec parse_mlp_spec(const std::string& text);

/// The default model for data with `features` inputs and `classes` classes:
/// mlp:IN,5,C for the synthetic data (the reference model), mlp:IN,256,C otherwise.
MlpSpec default_mlp_spec(bool synthetic, std::int64_t features, std::int64_t classes);

/// "; the default model for DATA: IN = its F features, OUT = its C classes (max label + 1)" —
/// the note check_mlp_memory appends when --model was not given.
std::string default_mlp_note(std::int64_t features, std::int64_t classes,
                             const std::string& data_name);

/// Throws ValueError naming the spec, `data_name` and both numbers when spec's input width is
/// not `features` or its output width is not `classes` (max label + 1 over all the data).
void check_mlp_fits(const MlpSpec& spec, std::int64_t features, std::int64_t classes,
                    const std::string& data_name);

/// Throws ValueError naming the spec when `copies` float32 copies of its parameters (a lower
/// bound on what the job needs: 1 to evaluate, 2 — parameters and gradients — to train;
/// activations and optimizer state come on top) exceed this machine's physical memory
/// (sysconf(_SC_PHYS_PAGES)). Absurd widths thus fail up front with exit 2 instead of
/// overflowing tensor sizes, ending in bad_alloc or being killed by the kernel. `note` (e.g. where
/// a default width came from) is appended to the message.
void check_mlp_memory(const MlpSpec& spec, int copies, const std::string& note);

/// Throws ValueError unless `name` is relu, tanh, sigmoid or gelu.
void check_activation(const std::string& name);

/// nn::Sequential as torch.nn.Sequential builds the same MLP: per hidden layer Linear,
/// activation, then Dropout(p) when dropout > 0; a final Linear. Linear layers therefore sit at
/// indices 0, 2, 4, ... without dropout and 0, 3, 6, ... with it, and parameters are named
/// `0.weight` [H1, IN], `0.bias` [H1], .... Weights then bias of each Linear are drawn from the
/// default generator in layer order (PyTorch's Linear init). ValueError for an unknown activation
/// or dropout outside [0, 1).
std::shared_ptr<nn::Sequential> make_mlp(const MlpSpec& spec, const std::string& activation,
                                         double dropout);

}  // namespace lockstep::app
