// libFuzzer target for `lockstep generate`'s prompt against a model's vocabulary
// (app/data/text_data.cpp): the input is the vocabulary's text (the `vocab` metadata of a char-level
// model), a zero byte, then the prompt. The vocabulary is either refused or accepted; a prompt
// is either encoded into ids of that vocabulary that decode back to it, or refused with a
// lockstep::Error whose message is one line of printable text (no control characters: a prompt's
// newline is named, not printed). The bytes tokenizer takes every prompt. Anything else is a
// finding.
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>

#include "lockstep/core/error.h"
#include "data/text_data.h"

namespace {

void check_printable(const lockstep::Error& e) {
  for (const char c : std::string(e.what()))
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) __builtin_trap();
}

void check_prompt(const lockstep::app::TextVocab& vocab, const std::string& prompt) {
  try {
    const auto ids = vocab.encode(prompt, "--prompt");
    for (const std::int64_t id : ids)
      if (id < 0 || id >= vocab.size()) __builtin_trap();
    if (vocab.decode(ids) != prompt) __builtin_trap();
  } catch (const lockstep::Error& e) {
    if (vocab.bytes) __builtin_trap();  // bytes take every prompt
    check_printable(e);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string input(reinterpret_cast<const char*>(data), size);
  const std::size_t zero = input.find('\0');
  if (zero == std::string::npos) return 0;
  const std::string vocab_text = input.substr(0, zero), prompt = input.substr(zero + 1);
  lockstep::app::TextVocab bytes;
  bytes.bytes = true;
  check_prompt(bytes, prompt);
  try {
    const auto vocab = lockstep::app::TextVocab::from_metadata(
        {{"tokenizer", "char"}, {"vocab", vocab_text}}, "--weights fuzz");
    check_prompt(vocab, prompt);
  } catch (const lockstep::Error& e) {
    check_printable(e);
  }
  return 0;
}
