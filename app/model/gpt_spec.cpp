// gpt: model specs (see gpt_spec.h).
#include "model/gpt_spec.h"

#include <charconv>
#include <cmath>
#include <set>
#include <vector>

#include "lockstep/core/error.h"
#include "lockstep/core/format.h"

namespace lockstep::app {

std::string GptSpec::str() const {
  return "gpt:layers=" + std::to_string(layers) + ",heads=" + std::to_string(heads) +
         ",embd=" + std::to_string(embd) + ",block=" + std::to_string(block) +
         ",bias=" + (bias ? "true" : "false") + ",dropout=" + exact_string(dropout);
}

nn::GPTConfig GptSpec::config(std::int64_t vocab_size) const {
  nn::GPTConfig c;
  c.block_size = block;
  c.vocab_size = vocab_size;
  c.n_layer = layers;
  c.n_head = heads;
  c.n_embd = embd;
  c.dropout = dropout;
  c.bias = bias;
  return c;
}

GptSpec parse_gpt_spec(const std::string& text) {
  const std::string usage = "--model " + text +
                            ": expected gpt:layers=L,heads=H,embd=C,block=T[,bias=true|false,"
                            "dropout=P]";
  if (text.rfind("gpt:", 0) != 0) throw ValueError(usage);
  GptSpec s;
  std::set<std::string> seen;
  std::size_t pos = 4;
  while (pos <= text.size()) {
    std::size_t comma = text.find(',', pos);
    if (comma == std::string::npos) comma = text.size();
    const std::string field = text.substr(pos, comma - pos);
    pos = comma + 1;
    const std::size_t eq = field.find('=');
    const std::string key = field.substr(0, eq),
                      value = eq == std::string::npos ? "" : field.substr(eq + 1);
    if (eq == std::string::npos || key.empty())
      throw ValueError(usage + " (got '" + field + "', not KEY=VALUE)");
    if (!seen.insert(key).second) throw ValueError(usage + " ('" + key + "' given twice)");
    auto bad = [&](const std::string& want) {
      return ValueError("--model " + text + ": " + key + " must be " + want + ", got '" + value +
                        "'");
    };
    if (key == "layers" || key == "heads" || key == "embd" || key == "block") {
      std::int64_t v = 0;
      auto [p, ec] = std::from_chars(value.data(), value.data() + value.size(), v);
      if (value.empty() || ec != std::errc() || p != value.data() + value.size() || v < 1)
        throw bad("an integer >= 1");
      (key == "layers"  ? s.layers
       : key == "heads" ? s.heads
       : key == "embd"  ? s.embd
                        : s.block) = v;
    } else if (key == "bias") {
      if (value != "true" && value != "false") throw bad("true or false");
      s.bias = value == "true";
    } else if (key == "dropout") {
      double v = -1;
      auto [p, ec] = std::from_chars(value.data(), value.data() + value.size(), v);
      if (value.empty() || ec != std::errc() || p != value.data() + value.size() ||
          !(v >= 0.0 && v < 1.0))
        throw bad("a number in [0, 1)");
      s.dropout = v;
    } else {
      throw ValueError("--model " + text + ": unknown key '" + key +
                       "' (keys: layers, heads, embd, block, bias, dropout)");
    }
  }
  for (const char* key : {"layers", "heads", "embd", "block"})
    if (!seen.count(key)) throw ValueError("--model " + text + ": " + key + " missing");
  if (s.embd % s.heads != 0)
    throw ValueError("--model " + text + ": embd " + std::to_string(s.embd) +
                     " is not a multiple of heads " + std::to_string(s.heads));
  return s;
}

std::map<std::string, std::string> gpt_metadata(const GptSpec& spec, std::int64_t vocab_size) {
  return {{"model", spec.str()}, {"vocab_size", std::to_string(vocab_size)}};
}

std::pair<GptSpec, std::int64_t> gpt_spec_from_metadata(const std::map<std::string, std::string>& md,
                                                        const std::string& path) {
  auto model = md.find("model"), vocab = md.find("vocab_size");
  if (model == md.end() || vocab == md.end())
    throw DataError(path +
                    ": metadata 'model' or 'vocab_size' missing (not a gpt: model "
                    "written by lockstep train)");
  GptSpec spec;
  try {
    spec = parse_gpt_spec(model->second);
  } catch (const ValueError& e) {
    throw DataError(path + ": metadata 'model': " + e.what());
  }
  std::int64_t v = 0;
  const std::string& s = vocab->second;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || ec != std::errc() || p != s.data() + s.size() || v < 1)
    throw DataError(path + ": metadata 'vocab_size' is not an integer >= 1: '" + s + "'");
  return {spec, v};
}

std::shared_ptr<nn::GPT> gpt_from_metadata(const std::map<std::string, std::string>& md,
                                           const std::string& path) {
  const auto [spec, vocab] = gpt_spec_from_metadata(md, path);
  return std::make_shared<nn::GPT>(spec.config(vocab));
}

}  // namespace lockstep::app
