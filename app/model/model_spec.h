// `--model`: the `mlp:IN,H1,...,OUT` family, layer lists (layer_spec.h) and the `resnet20`
// network: parsing the spec, checking it against the data, and building the model it names with
// PyTorch's layout and parameter names.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "data/data_source.h"
#include "model/gpt_spec.h"
#include "model/layer_spec.h"
#include "lockstep/core/generator.h"
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
/// The same check for `params` parameters of the model `what` names ("--model ...").
void check_model_memory(const std::string& what, long double params, int copies,
                        const std::string& note);

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

/// A parsed --model: an MLP (`mlp:IN,...,OUT`), a layer list (layer_spec.h), written on the
/// command line, read from a model file (`@FILE`: the same grammar, `#` comments) or the
/// preset `cnn` (the main job's CNN, cnn_layers()), or the preset `resnet20` (a network that is
/// not a Sequential: nn::resnet20, lockstep/nn/resnet.h).
struct ModelSpec {
  std::optional<MlpSpec> mlp;
  /// gpt:layers=...: nanoGPT's GPT on text data (gpt_spec.h), trained by iterations.
  std::optional<GptSpec> gpt;
  std::vector<LayerSpec> layers;
  /// "resnet20" for that preset (then mlp and layers are empty); empty otherwise.
  std::string network;
  /// Where the layers came from, for messages: "--model" or "--model @FILE".
  std::string where = "--model";
  /// mlp:... or the layers as written, one space apart (recorded in checkpoints).
  std::string str() const;
  /// Whether the first layer takes images [N, C, H, W] (Conv2d, BatchNorm2d or a 2-d pool;
  /// resnet20 always).
  bool takes_images() const;
};

/// Parses a --model value. Throws ValueError (what parse_mlp_spec and parse_layers throw) and
/// IoError for an unreadable @FILE.
ModelSpec parse_model_spec(const std::string& text);

/// Reshapes `data`'s rows to [N, C, H, W] when `spec` takes images (C = features / (H · W) of
/// the IDX images); ValueError naming the data when they are not images (CSV, synthetic).
void shape_for_model(const ModelSpec& spec, LoadedData& data);

/// The parameter count of nn::resnet20(in_channels, num_classes) from its shape alone:
/// 271,392 + 144 · in_channels + 65 · num_classes (272,186 for 1 channel and 10 classes).
long double resnet20_parameters(long double in_channels, long double num_classes);

/// The classes of the `resnet20` preset (fc = Linear(64, 10), as the PyTorch class in docs/cli.md).
inline constexpr std::int64_t kResnet20Classes = 10;

/// The model `spec` names for `data` (already shaped by shape_for_model), checked first as
/// check_mlp_fits and check_mlp_memory do (`copies`, `note` as there). A layer list is checked
/// by one eval-mode forward of a zero sample: ValueError naming the spec and the data when a
/// layer refuses the data's shape or the output is not [classes]; ValueError when --activation
/// or --dropout is given with a layer list or resnet20 (they shape MLPs only). `resnet20` is
/// nn::resnet20(C, 10) for images [C, H, W] (C from the data): ValueError when the data does not
/// have 10 classes (max label + 1) or its images do not fit (one eval-mode forward of zeros).
/// MLPs and layer lists are nn::Sequential, resnet20 an nn::ResNet.
/// Runs `make` (which builds the model) with the default generator it draws the initial
/// parameters from: with `torch_init` (--torch-init) a fresh MT19937 generator seeded with `seed`
/// (torch.manual_seed(seed)'s stream, so the modules get PyTorch's initial values; the process's
/// default generator is left untouched), otherwise the default generator as it stands.
template <class F>
auto with_torch_init(bool torch_init, std::uint64_t seed, F make) {
  if (!torch_init) return make();
  Generator torch_gen(seed, Generator::Engine::MT19937);
  DefaultGeneratorGuard guard(torch_gen);
  return make();
}

std::shared_ptr<nn::Module> make_model(const ModelSpec& spec, const ModelOptions& options,
                                       const LoadedData& data, int copies, const std::string& note);

}  // namespace lockstep::app
