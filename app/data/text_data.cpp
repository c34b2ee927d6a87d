// Text data for gpt: models (see text_data.h).
#include "data/text_data.h"

#include <algorithm>
#include <cstdio>
#include <set>

#include "lockstep/core/error.h"
#include "lockstep/io/atomic_file.h"

namespace lockstep::app {
namespace {

/// The length of the UTF-8 character starting at s[i] (1-4), or 0 when the bytes there are not
/// a valid UTF-8 encoding (RFC 3629: no overlong forms, no surrogates, at most U+10FFFF).
std::size_t utf8_length(const std::string& s, std::size_t i) {
  const auto b = [&](std::size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char c = b(i);
  std::size_t n = c < 0x80           ? 1
                  : (c >> 5) == 0x6  ? 2
                  : (c >> 4) == 0xE  ? 3
                  : (c >> 3) == 0x1E ? 4
                                     : 0;
  if (n == 0 || i + n > s.size()) return 0;
  for (std::size_t k = 1; k < n; ++k)
    if ((b(i + k) & 0xC0) != 0x80) return 0;
  if (n == 2 && c < 0xC2) return 0;                       // overlong
  if (n == 3 && c == 0xE0 && b(i + 1) < 0xA0) return 0;   // overlong
  if (n == 3 && c == 0xED && b(i + 1) >= 0xA0) return 0;  // surrogates
  if (n == 4 && ((c == 0xF0 && b(i + 1) < 0x90) || c > 0xF4 || (c == 0xF4 && b(i + 1) >= 0x90)))
    return 0;
  return n;
}

/// The characters of `text` in order; DataError naming `where` and the first bad byte offset.
std::vector<std::string> utf8_characters(const std::string& text, const std::string& where) {
  std::vector<std::string> out;
  for (std::size_t i = 0; i < text.size();) {
    const std::size_t n = utf8_length(text, i);
    if (n == 0)
      throw DataError(where + ": invalid UTF-8 at byte offset " + std::to_string(i) +
                      " (use --data text-bytes:FILE for a file of any bytes)");
    out.push_back(text.substr(i, n));
    i += n;
  }
  return out;
}

/// `ch` (one UTF-8 character) for a message: quoted, or a control character by its code point
/// ("U+000A (a newline)"), so that an error stays one line of text.
std::string printable_character(const std::string& ch) {
  const auto c = static_cast<unsigned char>(ch[0]);
  if (ch.size() != 1 || (c >= 0x20 && c != 0x7f)) return "'" + ch + "'";
  char code[16];
  std::snprintf(code, sizeof code, "U+%04X", static_cast<unsigned>(c));
  return std::string(code) + (c == '\n' ? " (a newline)" : c == '\t' ? " (a tab)" : "");
}

/// The ids of `characters` (text already split by utf8_characters) in the sorted `vocab`;
/// DataError naming `where`, the character and its byte offset when one is not in it.
std::vector<std::int64_t> character_ids(const std::vector<std::string>& characters,
                                        const std::vector<std::string>& vocab,
                                        const std::string& where) {
  std::vector<std::int64_t> ids;
  ids.reserve(characters.size());
  std::size_t offset = 0;
  for (const std::string& ch : characters) {
    auto it = std::lower_bound(vocab.begin(), vocab.end(), ch);
    if (it == vocab.end() || *it != ch)
      throw DataError(where + ": the character " + printable_character(ch) + " at byte offset " +
                      std::to_string(offset) + " is not in the model's vocabulary of " +
                      std::to_string(vocab.size()) + " characters");
    ids.push_back(it - vocab.begin());
    offset += ch.size();
  }
  return ids;
}

}  // namespace

std::vector<std::int64_t> TextVocab::encode(const std::string& text,
                                            const std::string& where) const {
  if (bytes) {
    std::vector<std::int64_t> ids;
    for (char c : text) ids.push_back(static_cast<unsigned char>(c));
    return ids;
  }
  return character_ids(utf8_characters(text, where), chars, where);
}

std::string TextVocab::decode(const std::vector<std::int64_t>& ids) const {
  std::string text;
  for (std::int64_t id : ids) {
    if (id < 0 || id >= size())
      throw IndexError("token " + std::to_string(id) + " is outside the vocabulary of " +
                       std::to_string(size()));
    if (bytes)
      text += static_cast<char>(id);
    else
      text += chars[static_cast<std::size_t>(id)];
  }
  return text;
}

std::map<std::string, std::string> TextVocab::metadata() const {
  if (bytes) return {{"tokenizer", "bytes"}};
  std::string all;
  for (const std::string& c : chars) all += c;
  return {{"tokenizer", "char"}, {"vocab", all}};
}

TextVocab TextVocab::from_metadata(const std::map<std::string, std::string>& md,
                                   const std::string& path) {
  auto tokenizer = md.find("tokenizer");
  if (tokenizer == md.end())
    throw DataError(path +
                    ": no vocabulary: metadata 'tokenizer' missing (not written by "
                    "lockstep train with --data text:FILE or text-bytes:FILE)");
  TextVocab v;
  if (tokenizer->second == "bytes") {
    v.bytes = true;
    return v;
  }
  if (tokenizer->second != "char")
    throw DataError(path + ": metadata 'tokenizer' is '" + tokenizer->second +
                    "', expected 'char' or 'bytes'");
  auto vocab = md.find("vocab");
  if (vocab == md.end() || vocab->second.empty())
    throw DataError(path + ": metadata 'vocab' missing or empty");
  v.chars = utf8_characters(vocab->second, path + ": metadata 'vocab'");
  if (!std::is_sorted(v.chars.begin(), v.chars.end()) ||
      std::adjacent_find(v.chars.begin(), v.chars.end()) != v.chars.end())
    throw DataError(path + ": metadata 'vocab' is not a sorted set of distinct characters");
  return v;
}

TextCorpus load_text(const std::string& path, bool bytes, std::optional<double> val_fraction,
                     std::int64_t block) {
  const std::string text = io::read_file(path);
  if (text.empty()) throw DataError(path + ": empty file (no tokens to train on)");
  TextCorpus c;
  c.name = path;
  c.vocab.bytes = bytes;
  std::vector<std::int64_t> ids;
  if (bytes) {
    ids = c.vocab.encode(text, path);
  } else {
    const std::vector<std::string> characters = utf8_characters(text, path);
    const std::set<std::string> distinct(characters.begin(), characters.end());
    c.vocab.chars.assign(distinct.begin(), distinct.end());  // byte order = code-point order
    ids = character_ids(characters, c.vocab.chars, path);    // the text split once
  }
  const double f = val_fraction.value_or(0.1);
  const auto n = static_cast<std::int64_t>(ids.size());
  const auto n_train = static_cast<std::int64_t>(static_cast<double>(n) * (1.0 - f));
  const std::string unit = bytes ? " bytes" : " characters";
  auto check = [&](std::int64_t count, const std::string& part) {
    if (count < block + 1)
      throw DataError(path + ": " + part + " holds " + std::to_string(count) + unit +
                      ", fewer than one window of block + 1 = " + std::to_string(block + 1) +
                      " (a longer file, a smaller block" +
                      (f > 0 ? ", or a smaller --val-fraction)" : ")"));
  };
  check(n_train, f > 0 ? "the training part (the first " + std::to_string(n_train) + " of " +
                             std::to_string(n) + ")"
                       : "the file");
  c.train = tensor(std::span<const std::int64_t>(ids.data(), static_cast<std::size_t>(n_train)));
  if (f > 0) {
    check(n - n_train, "the validation part (the last " + std::to_string(n - n_train) + ")");
    c.val = tensor(
        std::span<const std::int64_t>(ids.data() + n_train, static_cast<std::size_t>(n - n_train)));
  }
  return c;
}

}  // namespace lockstep::app
