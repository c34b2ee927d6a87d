// `--model gpt:layers=L,heads=H,embd=C,block=T[,bias=true|false,dropout=P]`: nanoGPT's GPT
// (nn::GPT) with the vocabulary of the text it trains on. The spec and the vocabulary size are
// written into weights' and checkpoints' `__metadata__` ("model", "vocab_size"), so
// `lockstep generate` rebuilds the model from the file alone.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>

#include "lockstep/nn/gpt.h"

namespace lockstep::app {

struct GptSpec {
  std::int64_t layers = 0, heads = 0, embd = 0, block = 0;
  bool bias = false;     ///< nanoGPT's train.py default
  double dropout = 0.0;  ///< nanoGPT's dropout, in [0, 1)
  /// "gpt:layers=2,heads=2,embd=32,block=16,bias=false,dropout=0" (every key, fixed order).
  std::string str() const;
  /// nn::GPTConfig for a vocabulary of `vocab_size`.
  nn::GPTConfig config(std::int64_t vocab_size) const;
};

/// Parses a gpt: spec. ValueError naming the spec and the key: a missing required key
/// (layers, heads, embd, block), an unknown or repeated key, a value that is not an integer
/// >= 1 (bool: true/false; dropout: a number in [0, 1)), or embd not a multiple of heads.
GptSpec parse_gpt_spec(const std::string& text);

/// {"model": spec.str(), "vocab_size": N}.
std::map<std::string, std::string> gpt_metadata(const GptSpec& spec, std::int64_t vocab_size);

/// The spec and vocabulary size a weights file's metadata names, before anything is built.
/// DataError naming `path` and the key when missing or malformed.
std::pair<GptSpec, std::int64_t> gpt_spec_from_metadata(const std::map<std::string, std::string>& md,
                                                        const std::string& path);

/// The GPT a weights file's metadata describes (parameters from the default generator; load
/// the file's state into it). DataError naming `path` and the key when missing or malformed.
std::shared_ptr<nn::GPT> gpt_from_metadata(const std::map<std::string, std::string>& md,
                                           const std::string& path);

}  // namespace lockstep::app
