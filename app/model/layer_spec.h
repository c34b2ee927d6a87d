// `--model` as a list of layers in PyTorch's spelling (the grammar below): parsing and building
// the nn::Sequential it names, with torch.nn.Sequential's indices, so --save files load into the
// same torch.nn.Sequential with load_state_dict(strict=True).
//
// Grammar (whitespace, newlines and `#` comments to the end of a line separate layers; names are
// PyTorch's class names, case-sensitive; arguments as in PyTorch's constructors, positional then
// keyword, each once, a trailing comma allowed; a pair is `(h, w)`, `[h, w]` or one integer for
// both):
//   Linear(in, out[, bias=false])
//   Conv2d(in, out, kernel[, stride[, padding[, dilation[, groups[, bias]]]]]) (or keywords)
//   BatchNorm1d(C[, eps=1e-5][, momentum=0.1|None]) BatchNorm2d(C[, ...])
//   MaxPool2d(kernel[, stride[, padding]]) AvgPool2d(kernel[, stride[, padding]])
//   AdaptiveAvgPool2d(out) Flatten[(start_dim, end_dim)] Dropout[(p)]
//   ReLU Tanh Sigmoid GELU
// e.g. "Conv2d(1,16,3,padding=1) BatchNorm2d(16) ReLU MaxPool2d(2) Flatten Linear(3136,10)".
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "lockstep/nn/sequential.h"

namespace lockstep::app {

/// One layer as written: its name, its arguments as text (positional, then key=value).
struct LayerSpec {
  std::string name;
  std::vector<std::string> args;
  std::vector<std::pair<std::string, std::string>> kwargs;
  std::string text;  // "#i " and the layer as written, for messages
  /// The layer without spaces, "()" or comments: "Conv2d(1,4,3,padding=(1,1))" (what a
  /// checkpoint records, so the same model written differently resumes).
  std::string canonical() const;
};

/// Parses the layer list `text`; `where` names its source in messages ("--model",
/// "model file m.txt"). Throws ValueError naming the layer (its index and text) and what is
/// wrong: an unknown name (listing the known ones), unbalanced parentheses, an empty list.
std::vector<LayerSpec> parse_layers(const std::string& text, const std::string& where);

/// The nn::Sequential of `layers` (layer i at index i). Throws ValueError naming the layer for
/// a missing, extra, unknown or malformed argument and for what the layer's constructor refuses.
std::shared_ptr<nn::Sequential> make_layers(const std::vector<LayerSpec>& layers,
                                            const std::string& where);

/// How many parameters `layers` hold (long double: an absurd list overflows int64), from their
/// arguments alone, before anything is allocated. ValueError as make_layers for bad arguments.
long double parameter_count(const std::vector<LayerSpec>& layers, const std::string& where);

/// The shape of one sample after each layer of `layers` (without the batch dimension), from the
/// layers' arguments and `sample` (one sample's shape) alone, before anything is allocated: what
/// the memory estimate counts and where a BatchNorm's statistics come from. Stops (a shorter
/// result) at a layer whose input it cannot shape (one that does not fit: make_model's forward
/// names it) or whose output is beyond what a layer accepts (a size over int32, a count over
/// int64: the layer refuses it, naming itself). ValueError as make_layers for bad arguments.
std::vector<std::vector<long double>> layer_output_shapes(const std::vector<LayerSpec>& layers,
                                                          const std::string& where,
                                                          std::vector<long double> sample);

/// `s` without leading and trailing whitespace.
std::string trim(const std::string& s);

/// The main job's CNN for 1×28×28 images and 10 classes (issue 17), `--model cnn`.
std::string cnn_layers();

}  // namespace lockstep::app
