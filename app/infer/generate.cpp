// `lockstep generate` (see generate.h).
#include "infer/generate.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <ostream>
#include <vector>

#include "files/checkpoint.h"
#include "model/gpt_spec.h"
#include "lockstep/io/safetensors.h"
#include "lockstep/lockstep.h"
#include "guards/memory_budget.h"
#include "data/text_data.h"
#include "files/weights.h"

namespace lockstep::app {
namespace {

/// nanoGPT's choice of the next token from the last position's logits.
std::int64_t next_token(const std::vector<float>& logits, const GenerateOptions& o,
                        Generator& gen) {
  const auto v = static_cast<std::int64_t>(logits.size());
  std::int64_t best = 0;
  for (std::int64_t i = 1; i < v; ++i)
    if (logits[static_cast<std::size_t>(i)] > logits[static_cast<std::size_t>(best)]) best = i;
  if (o.temperature == 0.0) return best;
  // logits / temperature (float32, as PyTorch divides a float tensor by a Python float).
  std::vector<float> scaled(logits.size());
  for (std::size_t i = 0; i < logits.size(); ++i)
    scaled[i] = logits[i] / static_cast<float>(o.temperature);
  // Top-k: every logit below the k-th largest becomes -inf (ties with it stay).
  if (o.top_k > 0 && o.top_k < v) {
    std::vector<float> sorted = scaled;
    std::nth_element(sorted.begin(), sorted.begin() + (o.top_k - 1), sorted.end(),
                     std::greater<float>());
    const float kth = sorted[static_cast<std::size_t>(o.top_k - 1)];
    for (float& x : scaled)
      if (x < kth) x = -std::numeric_limits<float>::infinity();
  }
  // softmax, then one draw: the first token whose cumulative probability exceeds u.
  const double top = scaled[static_cast<std::size_t>(best)];
  std::vector<double> p(scaled.size());
  double total = 0.0;
  for (std::size_t i = 0; i < scaled.size(); ++i) total += p[i] = std::exp(scaled[i] - top);
  const double u = gen.next_double() * total;
  double cumulative = 0.0;
  for (std::size_t i = 0; i < p.size(); ++i) {
    cumulative += p[i];
    if (p[i] > 0.0 && u < cumulative) return static_cast<std::int64_t>(i);
  }
  return best;  // u at the very top of the range (rounding)
}

}  // namespace

void run_generate(const GenerateOptions& o, std::ostream& out) {
  safetensors::File file;
  try {
    file = safetensors::load_file(o.weights);
  } catch (const IoError& e) {
    throw IoError("--weights: " + std::string(e.what()));
  } catch (const DataError& e) {
    throw DataError("--weights: " + std::string(e.what()));
  }
  const std::string where = "--weights " + o.weights;
  const TextVocab vocab = TextVocab::from_metadata(file.metadata, where);
  const auto [spec, vocab_size] = gpt_spec_from_metadata(file.metadata, where);
  if (vocab_size != vocab.size())
    throw DataError(where + ": metadata 'vocab_size' " + std::to_string(vocab_size) +
                    " but the vocabulary has " + std::to_string(vocab.size()) + " tokens");
  // The model the metadata names, checked before it is built (the file is already read: counted
  // once, it is not parsed again).
  check_inference_memory(where + " (" + spec.str() + ")", "generation",
                         gpt_memory_need(spec, vocab_size), file_size_or_zero(o.weights) / 2.0L,
                         1);
  const auto model = std::make_shared<nn::GPT>(spec.config(vocab_size));
  if (is_checkpoint(file)) {
    // A checkpoint of --checkpoint-dir: its model part (the optimizer's and scheduler's go).
    try {
      model->load_state_dict(read_checkpoint(o.weights).model, /*strict=*/true);
    } catch (const StateDictError& e) {
      throw StateDictError(where + ": " + e.what());
    }
  } else {
    load_weights(*model, o.weights, "--weights");
  }
  model->eval();
  if (o.prompt.empty())
    throw ValueError("--prompt: empty (give at least one character to start from)");
  // The default prompt is a newline (sample.py's): a message about it says it was not typed.
  std::vector<std::int64_t> ids = vocab.encode(
      o.prompt, o.prompt == "\n" ? "--prompt (default: a newline, as nanoGPT's sample.py)" : "--prompt");
  Generator gen(o.seed);
  NoGradGuard no_grad;
  out << o.prompt << std::flush;
  const std::int64_t block = model->config.block_size;
  for (std::int64_t n = 0; n < o.max_new_tokens; ++n) {
    const std::size_t start = ids.size() > static_cast<std::size_t>(block)
                                  ? ids.size() - static_cast<std::size_t>(block)
                                  : 0;
    const std::vector<std::int64_t> context(ids.begin() + static_cast<std::ptrdiff_t>(start),
                                            ids.end());
    const auto t = static_cast<std::int64_t>(context.size());
    const Tensor logits = model->forward(tensor(std::span<const std::int64_t>(context), {1, t}));
    const Tensor last = logits.narrow(1, t - 1, 1).reshape({model->config.vocab_size});
    const std::int64_t id = next_token(last.to_vector<float>(), o, gen);
    ids.push_back(id);
    out << vocab.decode({id}) << std::flush;
  }
  out << '\n' << std::flush;  // as nanoGPT's sample.py, print(decode(...)): the line ends
}

}  // namespace lockstep::app
