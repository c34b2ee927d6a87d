// libFuzzer target for the `--model @FILE` layer grammar (app/model/layer_spec.cpp): the input is a
// model file's text. Any input must either parse, or throw a lockstep::Error with a message (the
// CLI prints it on one line); a list that parses must have its parameters counted and its output shapes estimated (the
// memory check's view) without any other exception, and when it is small enough to build, the
// model's eval-mode forward of one zero sample must give the shape the estimate predicted (or a
// lockstep::Error). Anything else (a crash, a sanitizer report, std::bad_alloc, a broken
// invariant) is a finding.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "model/layer_spec.h"
#include "lockstep/autograd/grad_mode.h"
#include "lockstep/core/error.h"
#include "lockstep/ops/ops.h"

namespace {

void check_message(const lockstep::Error& e) {
  if (std::string(e.what()).empty()) __builtin_trap();
}

/// The model on one sample of `sample` ([C, H, W] images or [F] rows).
void try_sample(const std::vector<lockstep::app::LayerSpec>& layers,
                const std::vector<std::int64_t>& sample) {
  using namespace lockstep;
  const std::vector<long double> shape(sample.begin(), sample.end());
  const auto shapes = app::layer_output_shapes(layers, "--model @fuzz", shape);
  if (shapes.size() > layers.size()) __builtin_trap();
  if (shapes.size() != layers.size()) return;  // a layer the estimate cannot shape
  long double values = 0.0L;
  for (const auto& s : shapes) {
    long double n = 1.0L;
    for (const long double d : s) n *= d;
    values += n;
  }
  if (app::parameter_count(layers, "--model @fuzz") > 1e5L || values > 1e5L) return;
  auto model = app::make_layers(layers, "--model @fuzz");
  std::vector<std::int64_t> batch{1};
  batch.insert(batch.end(), sample.begin(), sample.end());
  NoGradGuard no_grad;
  model->eval();
  Tensor out = model->forward(zeros(Shape(batch)));
  const std::vector<std::int64_t> got = out.shape().vec();
  const std::vector<long double>& want = shapes.back();
  if (got.size() != want.size() + 1) __builtin_trap();
  for (std::size_t d = 0; d < want.size(); ++d)
    if (static_cast<long double>(got[d + 1]) != want[d]) __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size > 4096) return 0;
  const std::string text(reinterpret_cast<const char*>(data), size);
  std::vector<lockstep::app::LayerSpec> layers;
  try {
    layers = lockstep::app::parse_layers(text, "--model @fuzz");
    if (layers.empty()) __builtin_trap();
    lockstep::app::parameter_count(layers, "--model @fuzz");
  } catch (const lockstep::Error& e) {
    check_message(e);
    return 0;
  }
  for (const auto& sample : {std::vector<std::int64_t>{1, 6, 6}, std::vector<std::int64_t>{8}}) {
    try {
      try_sample(layers, sample);
    } catch (const lockstep::Error& e) {
      check_message(e);
    }
  }
  return 0;
}
