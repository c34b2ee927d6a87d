// `--model` layer lists (see layer_spec.h).
#include "model/layer_spec.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <optional>

#include "lockstep/core/error.h"
#include "lockstep/nn/activation.h"
#include "lockstep/nn/batch_norm.h"
#include "lockstep/nn/conv.h"
#include "lockstep/nn/dropout.h"
#include "lockstep/nn/linear.h"
#include "lockstep/nn/pooling.h"

namespace lockstep::app {

std::string trim(const std::string& s) {
  std::size_t a = 0, b = s.size();
  while (a < b && std::isspace(static_cast<unsigned char>(s[a]))) ++a;
  while (b > a && std::isspace(static_cast<unsigned char>(s[b - 1]))) --b;
  return s.substr(a, b - a);
}

namespace {

const char* const kKnown =
    "Linear, Conv2d, BatchNorm1d, BatchNorm2d, MaxPool2d, AvgPool2d, AdaptiveAvgPool2d, "
    "Flatten, Dropout, ReLU, Tanh, Sigmoid, GELU";

// PyTorch's constructor arguments of the layers that hold parameters, in order (make_layer and
// parameter_count read them).
const std::vector<std::string> kLinearArgs = {"in_features", "out_features", "bias"};
const std::vector<std::string> kConv2dArgs = {"in_channels", "out_channels", "kernel_size",
                                              "stride",      "padding",      "dilation",
                                              "groups",      "bias"};
const std::vector<std::string> kBatchNormArgs = {"num_features", "eps", "momentum", "affine",
                                                 "track_running_stats"};

// Splits "a, (1, 2), k=3" at the commas outside parentheses and brackets; a trailing comma is
// allowed (Python's `f(a, b,)`), an empty argument elsewhere is kept (and refused later).
std::vector<std::string> split_args(const std::string& s) {
  std::vector<std::string> out;
  int depth = 0;
  std::string cur;
  for (char c : s) {
    if (c == '(' || c == '[') ++depth;
    if (c == ')' || c == ']') --depth;
    if (c == ',' && depth == 0) {
      out.push_back(trim(cur));
      cur.clear();
    } else {
      cur += c;
    }
  }
  if (!trim(cur).empty()) out.push_back(trim(cur));
  return out;
}

// `text` without `#` comments (to the end of each line) and without a leading UTF-8 BOM.
std::string without_comments(const std::string& text) {
  std::string out;
  std::size_t i = text.rfind("\xEF\xBB\xBF", 0) == 0 ? 3 : 0;
  for (; i < text.size(); ++i) {
    if (text[i] == '#') {
      while (i < text.size() && text[i] != '\n') ++i;
      if (i == text.size()) break;
    }
    out += text[i];
  }
  return out;
}

// What one layer's constructor reads: positional arguments in order, then keywords.
class Args {
 public:
  Args(const LayerSpec& l, std::string where, std::vector<std::string> names)
      : l_(l), where_(std::move(where)), names_(std::move(names)) {
    if (l_.args.size() > names_.size()) fail("takes at most " + std::to_string(names_.size()) +
                                               " positional arguments");
    for (std::size_t a = 0; a < l_.args.size(); ++a)
      if (l_.args[a].empty()) fail("has an empty argument (two commas in a row?)");
    for (std::size_t a = 0; a < l_.kwargs.size(); ++a) {
      const std::string& k = l_.kwargs[a].first;
      bool known = false;
      for (const auto& n : names_) known = known || n == k;
      if (!known) fail("has no argument '" + k + "'" + list());
      for (std::size_t b = 0; b < a; ++b)
        if (l_.kwargs[b].first == k) fail("repeats the keyword argument '" + k + "'");
      for (std::size_t p = 0; p < l_.args.size() && p < names_.size(); ++p)
        if (names_[p] == k) fail("gives '" + k + "' both by position and by keyword");
    }
  }
  std::optional<std::string> raw(std::size_t i) const {
    if (i < l_.args.size()) return l_.args[i];
    for (const auto& [k, v] : l_.kwargs)
      if (k == names_[i]) return v;
    return std::nullopt;
  }
  std::int64_t integer(std::size_t i, std::optional<std::int64_t> fallback = std::nullopt) const {
    const auto r = raw(i);
    if (!r) {
      if (fallback) return *fallback;
      fail("needs " + names_[i]);
    }
    std::int64_t v = 0;
    auto [p, ec] = std::from_chars(r->data(), r->data() + r->size(), v);
    if (r->empty() || ec != std::errc() || p != r->data() + r->size())
      fail(names_[i] + " must be an integer, got '" + *r + "'");
    return v;
  }
  Size2 pair(std::size_t i, std::optional<Size2> fallback = std::nullopt) const {
    const auto r = raw(i);
    if (!r) {
      if (fallback) return *fallback;
      fail("needs " + names_[i]);
    }
    if (r->front() != '(' && r->front() != '[') {
      const std::int64_t v = integer(i);
      return {v, v};
    }
    const auto parts = split_args(r->substr(1, r->size() - 2));
    const char close = r->front() == '(' ? ')' : ']';
    if (r->back() != close || parts.size() != 2)
      fail(names_[i] + " must be N, (H, W) or [H, W], got '" + *r + "'");
    Size2 out{};
    for (int d = 0; d < 2; ++d) {
      auto [p, ec] = std::from_chars(parts[static_cast<std::size_t>(d)].data(),
                                     parts[static_cast<std::size_t>(d)].data() +
                                         parts[static_cast<std::size_t>(d)].size(),
                                     out[static_cast<std::size_t>(d)]);
      if (ec != std::errc() || p != parts[static_cast<std::size_t>(d)].data() +
                                         parts[static_cast<std::size_t>(d)].size())
        fail(names_[i] + " must be N or (H, W), got '" + *r + "'");
    }
    return out;
  }
  std::optional<double> number(std::size_t i, std::optional<double> fallback) const {
    const auto r = raw(i);
    if (!r) return fallback;
    if (*r == "None") return std::nullopt;
    char* end = nullptr;
    const double v = std::strtod(r->c_str(), &end);
    if (r->empty() || end != r->c_str() + r->size()) fail(names_[i] + " must be a number, got '" + *r + "'");
    return v;
  }
  bool flag(std::size_t i, bool fallback) const {
    const auto r = raw(i);
    if (!r) return fallback;
    if (*r == "True" || *r == "true") return true;
    if (*r == "False" || *r == "false") return false;
    fail(names_[i] + " must be True or False, got '" + *r + "'");
  }
  [[noreturn]] void fail(const std::string& what) const {
    throw ValueError(where_ + ": layer " + l_.text + " " + what);
  }

 private:
  std::string list() const {
    std::string s = " (it takes";
    for (std::size_t i = 0; i < names_.size(); ++i) {
      s += i ? ", " : " ";
      s += names_[i];
    }
    return names_.empty() ? " (it takes no arguments)" : s + ")";
  }
  const LayerSpec& l_;
  std::string where_;
  std::vector<std::string> names_;
};

std::shared_ptr<nn::Module> make_layer(const LayerSpec& l, const std::string& where) {
  using std::make_shared;
  const std::string& n = l.name;
  if (n == "ReLU" || n == "Tanh" || n == "Sigmoid" || n == "GELU") {
    Args a(l, where, {});
    if (n == "ReLU") return make_shared<nn::ReLU>();
    if (n == "Tanh") return make_shared<nn::Tanh>();
    if (n == "Sigmoid") return make_shared<nn::Sigmoid>();
    return make_shared<nn::GELU>();
  }
  if (n == "Linear") {
    Args a(l, where, kLinearArgs);
    return make_shared<nn::Linear>(a.integer(0), a.integer(1), a.flag(2, true));
  }
  if (n == "Conv2d") {
    Args a(l, where, kConv2dArgs);
    return make_shared<nn::Conv2d>(a.integer(0), a.integer(1), a.pair(2), a.pair(3, Size2{1, 1}),
                                   a.pair(4, Size2{0, 0}), a.pair(5, Size2{1, 1}),
                                   a.integer(6, 1), a.flag(7, true));
  }
  if (n == "BatchNorm1d" || n == "BatchNorm2d") {
    Args a(l, where, kBatchNormArgs);
    const std::int64_t c = a.integer(0);
    const double eps = a.number(1, 1e-5).value_or(1e-5);
    const std::optional<double> momentum = a.number(2, 0.1);
    const bool affine = a.flag(3, true), track = a.flag(4, true);
    if (n == "BatchNorm1d") return make_shared<nn::BatchNorm1d>(c, eps, momentum, affine, track);
    return make_shared<nn::BatchNorm2d>(c, eps, momentum, affine, track);
  }
  if (n == "MaxPool2d" || n == "AvgPool2d") {
    Args a(l, where, {"kernel_size", "stride", "padding"});
    const Size2 k = a.pair(0);
    const std::optional<Size2> s = a.raw(1) ? std::optional<Size2>(a.pair(1)) : std::nullopt;
    if (n == "MaxPool2d") return make_shared<nn::MaxPool2d>(k, s, a.pair(2, Size2{0, 0}));
    return make_shared<nn::AvgPool2d>(k, s, a.pair(2, Size2{0, 0}));
  }
  if (n == "AdaptiveAvgPool2d") {
    Args a(l, where, {"output_size"});
    return make_shared<nn::AdaptiveAvgPool2d>(a.pair(0));
  }
  if (n == "Flatten") {
    Args a(l, where, {"start_dim", "end_dim"});
    return make_shared<nn::Flatten>(static_cast<int>(a.integer(0, 1)),
                                    static_cast<int>(a.integer(1, -1)));
  }
  if (n == "Dropout") {
    Args a(l, where, {"p"});
    return make_shared<nn::Dropout>(a.number(0, 0.5).value_or(0.5));
  }
  throw ValueError(where + ": unknown layer " + l.text + " (known: " + kKnown + ")");
}

}  // namespace

std::string LayerSpec::canonical() const {
  // Without spaces; a pair as (h,w), and as one number when h == w (as PyTorch reads them).
  auto squeeze = [](const std::string& v) {
    std::string out;
    for (char c : v)
      if (!std::isspace(static_cast<unsigned char>(c))) out += c;
    if (out.size() > 2 && (out.front() == '(' || out.front() == '[')) {
      const auto parts = split_args(out.substr(1, out.size() - 2));
      if (parts.size() == 2) return parts[0] == parts[1] ? parts[0] : "(" + parts[0] + "," + parts[1] + ")";
    }
    return out;
  };
  std::string out = name;
  if (args.empty() && kwargs.empty()) return out;
  out += '(';
  bool first = true;
  auto put = [&](const std::string& piece) {
    if (!first) out += ',';
    out += piece;
    first = false;
  };
  for (const std::string& a : args) put(squeeze(a));
  for (const auto& [k, v] : kwargs) put(k + "=" + squeeze(v));
  out += ')';
  return out;
}

std::vector<LayerSpec> parse_layers(const std::string& source, const std::string& where) {
  const std::string text = without_comments(source);
  std::vector<LayerSpec> out;
  std::size_t i = 0;
  const std::size_t n = text.size();
  while (i < n) {
    const char c = text[i];
    if (std::isspace(static_cast<unsigned char>(c)) || c == ',') {
      ++i;
      continue;
    }
    LayerSpec l;
    const std::size_t start = i;
    while (i < n && (std::isalnum(static_cast<unsigned char>(text[i])) || text[i] == '_')) ++i;
    l.name = text.substr(start, i - start);
    if (l.name.empty())
      throw ValueError(where + ": expected a layer name at '" + text.substr(start, 20) +
                       "' (known: " + kKnown + ")");
    if (i < n && text[i] == '(') {
      int depth = 0;
      const std::size_t open = i;
      for (; i < n; ++i) {
        if (text[i] == '(') ++depth;
        if (text[i] == ')' && --depth == 0) break;
      }
      if (i == n) throw ValueError(where + ": layer " + text.substr(start) + " has an unclosed '('");
      for (const std::string& a : split_args(text.substr(open + 1, i - open - 1))) {
        const std::size_t eq = a.find('=');
        if (eq == std::string::npos) {
          if (!l.kwargs.empty())
            throw ValueError(where + ": layer " + text.substr(start, i + 1 - start) +
                             ": a positional argument after a keyword");
          l.args.push_back(a);
        } else {
          l.kwargs.emplace_back(trim(a.substr(0, eq)), trim(a.substr(eq + 1)));
        }
      }
      ++i;
    }
    l.text = "#";
    l.text += std::to_string(out.size());
    l.text += ' ';
    l.text += text.substr(start, i - start);
    out.push_back(std::move(l));
  }
  if (out.empty()) throw ValueError(where + ": no layers (known: " + std::string(kKnown) + ")");
  return out;
}

std::shared_ptr<nn::Sequential> make_layers(const std::vector<LayerSpec>& layers,
                                            const std::string& where) {
  auto model = std::make_shared<nn::Sequential>();
  for (const LayerSpec& l : layers) {
    try {
      model->push_back(make_layer(l, where));
    } catch (const ValueError& e) {
      const std::string msg = e.what();
      if (msg.rfind(where, 0) == 0) throw;
      throw ValueError(where + ": layer " + l.text + ": " + msg);
    }
  }
  return model;
}

long double parameter_count(const std::vector<LayerSpec>& layers, const std::string& where) {
  long double total = 0.0L;
  for (const LayerSpec& l : layers) {
    auto ld = [](std::int64_t v) { return static_cast<long double>(v); };
    if (l.name == "Linear") {
      Args a(l, where, kLinearArgs);
      total += ld(a.integer(0)) * ld(a.integer(1)) + (a.flag(2, true) ? ld(a.integer(1)) : 0);
    } else if (l.name == "Conv2d") {
      Args a(l, where, kConv2dArgs);
      const Size2 k = a.pair(2);
      const std::int64_t groups = std::max<std::int64_t>(a.integer(6, 1), 1);
      total += ld(a.integer(1)) * ld(a.integer(0) / groups) * ld(k[0]) * ld(k[1]) +
               (a.flag(7, true) ? ld(a.integer(1)) : 0);
    } else if (l.name == "BatchNorm1d" || l.name == "BatchNorm2d") {
      Args a(l, where, kBatchNormArgs);
      total += 4 * ld(a.integer(0));  // weight, bias, running_mean, running_var
    }
  }
  return total;
}

std::vector<std::vector<long double>> layer_output_shapes(const std::vector<LayerSpec>& layers,
                                                          const std::string& where,
                                                          std::vector<long double> shape) {
  std::vector<std::vector<long double>> out;
  for (const LayerSpec& l : layers) {
    const std::string& n = l.name;
    if (n == "Linear") {
      const Args a(l, where, kLinearArgs);
      if (shape.empty()) break;
      shape.back() = static_cast<long double>(a.integer(1));
    } else if (n == "Conv2d" || n == "MaxPool2d" || n == "AvgPool2d") {
      Size2 k{}, s{}, p{}, d{1, 1};
      std::int64_t channels = 0;
      if (n == "Conv2d") {
        const Args a(l, where, kConv2dArgs);
        k = a.pair(2), s = a.pair(3, Size2{1, 1}), p = a.pair(4, Size2{0, 0});
        d = a.pair(5, Size2{1, 1}), channels = a.integer(1);
      } else {
        const Args a(l, where, {"kernel_size", "stride", "padding"});
        k = a.pair(0), s = a.raw(1) ? a.pair(1) : k, p = a.pair(2, Size2{0, 0});
      }
      if (shape.size() != 3 || s[0] < 1 || s[1] < 1) break;
      if (channels != 0) shape[0] = static_cast<long double>(channels);
      bool fits = true;
      for (std::size_t i = 0; i < 2; ++i) {
        const long double span = shape[i + 1] + 2.0L * static_cast<long double>(p[i]) -
                                 static_cast<long double>(d[i]) *
                                     static_cast<long double>(k[i] - 1) -
                                 1.0L;
        if (span < 0) fits = false;
        shape[i + 1] = std::floor(span / static_cast<long double>(s[i])) + 1.0L;
      }
      if (!fits) break;
    } else if (n == "AdaptiveAvgPool2d") {
      const Args a(l, where, {"output_size"});
      if (shape.size() != 3) break;
      const Size2 o = a.pair(0);
      shape[1] = static_cast<long double>(o[0]), shape[2] = static_cast<long double>(o[1]);
    } else if (n == "Flatten") {
      const Args a(l, where, {"start_dim", "end_dim"});
      // Dimensions counted with the batch's (index 0), as torch.flatten takes them.
      const auto dims = static_cast<std::int64_t>(shape.size()) + 1;
      std::int64_t start = a.integer(0, 1), end = a.integer(1, -1);
      if (start < 0) start += dims;
      if (end < 0) end += dims;
      if (start < 1 || end >= dims || start > end) break;  // the batch folded in, or refused
      std::vector<long double> flat(shape.begin(), shape.begin() + (start - 1));
      long double product = 1.0L;
      for (std::int64_t i = start; i <= end; ++i) product *= shape[static_cast<std::size_t>(i - 1)];
      flat.push_back(product);
      flat.insert(flat.end(), shape.begin() + end, shape.end());
      shape = std::move(flat);
    }  // BatchNorm, activations, Dropout: the shape they are given
    // A size below 1, or beyond what a layer accepts (int32 sizes, int64 element counts), is
    // the layer's own to refuse, with its message (make_model): the walk stops there.
    bool plausible = true;
    long double values = 1.0L;
    for (const long double v : shape) {
      plausible = plausible && v >= 1.0L && v <= 2147483647.0L;
      values *= v;
    }
    if (!plausible || values > 9.2e18L) break;
    out.push_back(shape);
  }
  return out;
}

std::string cnn_layers() {
  return "Conv2d(1,16,3,padding=1) BatchNorm2d(16) ReLU MaxPool2d(2) "
         "Conv2d(16,32,3,padding=1) BatchNorm2d(32) ReLU MaxPool2d(2) Flatten "
         "Linear(1568,128) ReLU Linear(128,10)";
}

}  // namespace lockstep::app
