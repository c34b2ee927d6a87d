// ModelSpec (model_spec.h): --model as an MLP, a layer list or resnet20, the data shaped for it,
// and the model built and checked against the data.
#include <filesystem>
#include <map>
#include <new>

#include "lockstep/autograd/grad_mode.h"
#include "lockstep/core/error.h"
#include "lockstep/io/atomic_file.h"
#include "lockstep/nn/resnet.h"
#include "lockstep/ops/ops.h"
#include "model/model_spec.h"

namespace lockstep::app {

namespace {

constexpr std::size_t kMaxModelFileBytes = std::size_t{1} << 20;

const char* const kImageLayers[] = {"Conv2d", "BatchNorm2d", "MaxPool2d", "AvgPool2d",
                                    "AdaptiveAvgPool2d"};

}  // namespace

std::string ModelSpec::str() const {
  if (mlp) return mlp->str();
  if (gpt) return gpt->str();
  if (!network.empty()) return network;
  std::string s;
  for (const LayerSpec& l : layers) {
    if (!s.empty()) s += ' ';
    s += l.canonical();
  }
  return s;
}

bool ModelSpec::takes_images() const {
  if (!network.empty()) return true;
  if (mlp || gpt || layers.empty()) return false;
  for (const char* name : kImageLayers)
    if (layers.front().name == name) return true;
  return false;
}

ModelSpec parse_model_spec(const std::string& text) {
  ModelSpec spec;
  if (text.rfind("mlp:", 0) == 0) {
    spec.mlp = parse_mlp_spec(text);
    return spec;
  }
  if (text.rfind("gpt:", 0) == 0) {
    spec.gpt = parse_gpt_spec(text);
    return spec;
  }
  std::string layers = text;
  // A family named without its parameters (not a layer: say what it takes).
  if (trim(text) == "gpt")
    throw ValueError("--model " + trim(text) +
                     ": nanoGPT's model needs its parameters, "
                     "gpt:layers=L,heads=H,embd=C,block=T[,bias=true,dropout=P] (e.g. "
                     "gpt:layers=4,heads=4,embd=128,block=64)");
  if (trim(text) == "mlp")
    throw ValueError("--model " + trim(text) +
                     ": an MLP needs its widths, mlp:IN,H1,...,OUT (e.g. mlp:784,256,10)");
  if (trim(text) == "resnet20") {
    spec.network = "resnet20";
    spec.where = "--model resnet20";
    return spec;
  }
  if (trim(text) == "cnn") {
    layers = cnn_layers();
  } else if (!text.empty() && text.front() == '@') {
    const std::string path = text.substr(1);
    std::error_code ec;
    if (std::filesystem::is_directory(path, ec))
      throw IoError("--model " + text + ": '" + path + "' is a directory, not a model file");
    // Read once per process (the flag's check and the run both parse it): a pipe or /dev/stdin
    // has nothing left to give a second read. A model file is text: at most 1 MiB of it.
    static std::map<std::string, std::string> read_before;
    if (auto it = read_before.find(path); it != read_before.end()) {
      layers = it->second;
    } else {
      try {
        layers = io::read_file(path);
      } catch (const IoError& e) {
        throw IoError("--model " + text + ": " + e.what());
      }
      if (layers.size() > kMaxModelFileBytes)
        throw ValueError("--model " + text + ": the model file holds " +
                         std::to_string(layers.size()) + " bytes, more than a layer list's " +
                         std::to_string(kMaxModelFileBytes));
      read_before.emplace(path, layers);
    }
    spec.where = "--model " + text;
  }
  spec.layers = parse_layers(layers, spec.where);
  return spec;
}

void shape_for_model(const ModelSpec& spec, LoadedData& data) {
  if (!spec.takes_images()) return;
  if (data.image_size.size() != 2)
    throw ValueError(spec.where + ": " +
                     (spec.network.empty() ? "the first layer (" + spec.layers.front().text + ")"
                                           : std::string("its first layer (conv1, a Conv2d)")) +
                     " takes images [N, C, H, W], but " + data.train_name +
                     " holds rows of features, not images (use image data: fashion-mnist or "
                     "idx:)");
  const std::int64_t h = data.image_size[0], w = data.image_size[1];
  const std::int64_t c = data.features / (h * w);
  data.train_x = reshape(data.train_x, {data.train_x.size(0), c, h, w});
  if (data.has_validation()) data.val_x = reshape(data.val_x, {data.val_x.size(0), c, h, w});
}

long double resnet20_parameters(long double in_channels, long double num_classes) {
  // conv1 16·C·9; bn1 and the blocks' convolutions and batch norms 271,392 (the stem's bn1 32,
  // layer1 14,016, layer2 51,648 and layer3 205,696 with their projections); fc 64·K + K.
  return 271392.0L + 144.0L * in_channels + 65.0L * num_classes;
}

namespace {

// --model resnet20: nn::resnet20(C, 10) for images [C, H, W], checked against the data before
// training as a layer list is (classes, then one eval-mode forward of zeros).
std::shared_ptr<nn::Module> make_resnet20(const ModelSpec& spec, const LoadedData& data, int copies,
                                          const std::string& note) {
  const std::int64_t channels = data.train_x.size(1);
  const std::string images =
      data.train_x.dim() == 4
          ? Shape({data.train_x.size(1), data.train_x.size(2), data.train_x.size(3)}).str()
          : data.train_x.shape().str();
  if (data.classes != kResnet20Classes)
    throw ValueError(spec.where + ": its last layer fc (Linear(64, 10)) gives 10 classes, but " +
                     data.train_name + " has " + std::to_string(data.classes) +
                     " classes (max label + 1); write a layer list for other class counts");
  check_model_memory(spec.where,
                     resnet20_parameters(static_cast<long double>(channels), kResnet20Classes),
                     copies, note);
  std::shared_ptr<nn::ResNet> model = nn::resnet20(channels, kResnet20Classes);
  std::vector<std::int64_t> sample = data.train_x.shape().vec();
  sample[0] = 2;
  NoGradGuard no_grad;
  model->eval();
  try {
    model->forward(zeros(Shape(sample)));
  } catch (const Error& e) {
    model->train();
    throw ValueError(spec.where + " does not fit the samples " + images + " of " + data.train_name +
                     ": " + e.what());
  } catch (const std::bad_alloc&) {
    model->train();
    throw ValueError(spec.where + ": its activations for the samples " + images + " of " +
                     data.train_name + " do not fit in memory");
  }
  model->train();
  return model;
}

}  // namespace

std::shared_ptr<nn::Module> make_model(const ModelSpec& spec, const ModelOptions& options,
                                       const LoadedData& data, int copies,
                                       const std::string& note) {
  if (spec.mlp) {
    check_mlp_fits(*spec.mlp, data.features, data.classes, data.train_name);
    check_mlp_memory(*spec.mlp, copies, note);
    return make_mlp(*spec.mlp, options.activation, options.dropout);
  }
  if (options.activation != "relu" || options.dropout != 0.0)
    throw ValueError("--activation and --dropout shape mlp: models only; " +
                     (spec.network.empty()
                          ? "write the layers (ReLU, Tanh, Dropout(p), ...) into " + spec.where
                          : spec.where + " has its own (ReLU, no Dropout)"));
  if (!spec.network.empty()) return make_resnet20(spec, data, copies, note);
  check_model_memory(spec.where + " (" + std::to_string(spec.layers.size()) + " layers)",
                     parameter_count(spec.layers, spec.where), copies, note);
  auto model = make_layers(spec.layers, spec.where);
  // One sample of the data's shape, forward in eval mode: a layer that does not fit the data
  // says so here, naming itself, instead of at the first batch.
  // Two samples: a layer normalizing with batch statistics (BatchNorm without running
  // statistics) needs more than one value per channel even in eval mode.
  std::vector<std::int64_t> sample = {2};
  for (int d = 1; d < data.train_x.dim(); ++d) sample.push_back(data.train_x.size(d));
  const std::string samples =
      Shape(std::vector<std::int64_t>(sample.begin() + 1, sample.end())).str() + " of " +
      data.train_name;
  Tensor out = zeros(Shape(sample));
  {
    NoGradGuard no_grad;
    model->eval();
    const auto layers = model->children();
    for (std::size_t i = 0; i < layers.size(); ++i) {
      // Layer i and what fed it, for the message.
      auto at = [&] { return spec.where + ": layer " + spec.layers[i].text; };
      auto from = [&] {
        return (i == 0 ? "the samples " : "its input, from the samples ") + samples;
      };
      try {
        out = layers[i]->forward(out);
      } catch (const Error& e) {
        model->train();
        throw ValueError(at() + " does not fit " + from() + ": " + e.what());
      } catch (const std::bad_alloc&) {
        model->train();
        throw ValueError(at() + ": its output for " + from() + " does not fit in memory");
      }
    }
    model->train();
  }
  if (out.dim() != 2 || out.size(1) != data.classes) {
    std::vector<std::int64_t> per_sample = out.shape().vec();
    per_sample.erase(per_sample.begin());
    throw ValueError(spec.where + ": the last layer gives " + Shape(per_sample).str() +
                     " per sample, but " + data.train_name + " has " +
                     std::to_string(data.classes) + " classes (max label + 1)");
  }
  return model;
}

}  // namespace lockstep::app
