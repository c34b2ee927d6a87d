// MLP specs (see model_spec.h).
#include "model/model_spec.h"

#include <unistd.h>

#include <charconv>
#include <cmath>
#include <cstdio>

#include "lockstep/core/error.h"
#include "lockstep/nn/activation.h"
#include "lockstep/nn/dropout.h"
#include "lockstep/nn/linear.h"
#include "cli/message_text.h"

namespace lockstep::app {

std::string MlpSpec::str() const {
  std::string s = "mlp:";
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    if (i > 0) s += ',';
    s += std::to_string(sizes[i]);
  }
  return s;
}

MlpSpec parse_mlp_spec(const std::string& text) {
  const std::string usage =
      "expected mlp:IN,H1,...,OUT with integer widths >= 1, got '" + text + "'";
  if (text.rfind("mlp:", 0) != 0) throw ValueError(usage);
  MlpSpec spec;
  std::size_t pos = 4;
  while (true) {
    std::size_t comma = text.find(',', pos);
    std::string field =
        text.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    std::int64_t v = 0;
    auto [ptr, ec] = std::from_chars(field.data(), field.data() + field.size(), v);
    if (field.empty() || ec != std::errc() || ptr != field.data() + field.size() || v < 1)
      throw ValueError(usage);
    spec.sizes.push_back(v);
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  if (spec.sizes.size() < 2) throw ValueError(usage);
  return spec;
}

MlpSpec default_mlp_spec(bool synthetic, std::int64_t features, std::int64_t classes) {
  return MlpSpec{{features, synthetic ? 5 : 256, classes}};
}

std::string default_mlp_note(std::int64_t features, std::int64_t classes,
                             const std::string& data_name) {
  return "; the default model for " + data_name + ": IN = its " + std::to_string(features) +
         " features, OUT = its " + std::to_string(classes) + " classes (max label + 1)";
}

void check_mlp_fits(const MlpSpec& spec, std::int64_t features, std::int64_t classes,
                    const std::string& data_name) {
  if (spec.sizes.front() != features)
    throw ValueError("--model " + spec.str() + ": input width " +
                     std::to_string(spec.sizes.front()) + " does not match the " +
                     std::to_string(features) + " features of " + data_name);
  if (spec.sizes.back() != classes)
    throw ValueError("--model " + spec.str() + ": output width " +
                     std::to_string(spec.sizes.back()) + " does not match the " +
                     std::to_string(classes) + " classes (max label + 1) of " + data_name);
}

void check_mlp_memory(const MlpSpec& spec, int copies, const std::string& note) {
  // long double: the count of an absurd spec overflows int64 (that is what it must catch).
  long double params = 0.0L;
  for (std::size_t i = 0; i + 1 < spec.sizes.size(); ++i)
    params +=
        static_cast<long double>(spec.sizes[i]) * static_cast<long double>(spec.sizes[i + 1]) +
        static_cast<long double>(spec.sizes[i + 1]);
  check_model_memory("--model " + spec.str(), params, copies, note);
}

void check_model_memory(const std::string& what, long double params, int copies,
                        const std::string& note) {
  const long double need = params * 4.0L * copies;
  const long pages = ::sysconf(_SC_PHYS_PAGES), page_size = ::sysconf(_SC_PAGE_SIZE);
  if (pages <= 0 || page_size <= 0) return;  // unknown: let the allocator decide
  const long double have = static_cast<long double>(pages) * static_cast<long double>(page_size);
  if (need <= have) return;
  char count[64];
  std::snprintf(count, sizeof count, params < 1e15L ? "%.0Lf" : "%.3Lg", params);
  throw ValueError(what + ": " + count + " parameters need at least " + human_bytes(need) +
                   " of memory (" + std::to_string(copies) + " float32 cop" +
                   (copies == 1 ? "y" : "ies") + "), more than this machine's " +
                   human_bytes(have) + note);
}

void check_activation(const std::string& name) {
  if (name != "relu" && name != "tanh" && name != "sigmoid" && name != "gelu")
    throw ValueError("--activation: expected relu, tanh, sigmoid or gelu, got '" + name + "'");
}

namespace {
std::shared_ptr<nn::Module> make_activation(const std::string& name) {
  if (name == "relu") return std::make_shared<nn::ReLU>();
  if (name == "tanh") return std::make_shared<nn::Tanh>();
  if (name == "sigmoid") return std::make_shared<nn::Sigmoid>();
  if (name == "gelu") return std::make_shared<nn::GELU>();
  check_activation(name);
  return nullptr;
}
}  // namespace

std::shared_ptr<nn::Sequential> make_mlp(const MlpSpec& spec, const std::string& activation,
                                         double dropout) {
  check_activation(activation);
  if (!(dropout >= 0.0 && dropout < 1.0))
    throw ValueError("--dropout: expected a probability in [0, 1), got " + std::to_string(dropout));
  auto model = std::make_shared<nn::Sequential>();
  for (std::size_t i = 0; i + 1 < spec.sizes.size(); ++i) {
    model->push_back(std::make_shared<nn::Linear>(spec.sizes[i], spec.sizes[i + 1]));
    if (i + 2 < spec.sizes.size()) {
      model->push_back(make_activation(activation));
      if (dropout > 0.0) model->push_back(std::make_shared<nn::Dropout>(dropout));
    }
  }
  return model;
}

}  // namespace lockstep::app
