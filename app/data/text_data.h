// `--data text:FILE` and `--data text-bytes:FILE`: a text file as one stream of tokens for gpt:
// models. Characters (nanoGPT's shakespeare_char/prepare.py: the vocabulary is the sorted
// distinct characters of the whole file, UTF-8 code points in code-point order) or bytes
// (vocabulary 256, any file). The first part trains, the last --val-fraction (default 0.1)
// validates, split at int(N * (1 - F)) tokens as prepare.py's data[:int(n*0.9)].
// The vocabulary travels in the safetensors `__metadata__` of weights and checkpoints
// (tokenizer, vocab), so `lockstep generate` needs no other file.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "lockstep/core/tensor.h"

namespace lockstep::app {

/// A tokenizer: characters of a given vocabulary, or the 256 byte values.
struct TextVocab {
  bool bytes = false;
  /// Character mode: the vocabulary, sorted by code point, each one UTF-8 character.
  std::vector<std::string> chars;

  std::int64_t size() const { return bytes ? 256 : static_cast<std::int64_t>(chars.size()); }
  /// Token ids of `text`. DataError naming `where` and the byte offset for invalid UTF-8
  /// (character mode) or a character outside the vocabulary.
  std::vector<std::int64_t> encode(const std::string& text, const std::string& where) const;
  /// The text of `ids` (each in [0, size()): IndexError otherwise).
  std::string decode(const std::vector<std::int64_t>& ids) const;
  /// {"tokenizer": "char" | "bytes", "vocab": the characters concatenated (char mode)}.
  std::map<std::string, std::string> metadata() const;
  /// The inverse of metadata(); DataError naming `path` and the key when missing or malformed.
  static TextVocab from_metadata(const std::map<std::string, std::string>& md,
                                 const std::string& path);
};

/// A loaded text: its vocabulary and the token streams ([N] int64) of the two parts.
struct TextCorpus {
  TextVocab vocab;
  Tensor train, val;  // val undefined with --val-fraction 0
  std::string name;   // the file
  bool has_validation() const { return val.defined(); }
};

/// Reads `path` as characters (bytes = false) or bytes and splits it (val_fraction: unset means
/// 0.1; 0 turns validation off). DataError (one line, naming the file) for an empty file,
/// invalid UTF-8 in character mode (the byte offset), or a part with fewer than `block` + 1
/// tokens (no whole window; naming the part, its tokens and the block); IoError when the file
/// cannot be read.
TextCorpus load_text(const std::string& path, bool bytes, std::optional<double> val_fraction,
                     std::int64_t block);

}  // namespace lockstep::app
