// `lockstep generate`: text from a gpt: model's weights (nanoGPT's sample.py and GPT.generate).
// The weights file (lockstep train --save, a checkpoint of --checkpoint-dir (its model part), or
// PyTorch's safetensors with the same
// metadata) carries the vocabulary and the model in its `__metadata__` (text_data.h,
// gpt_spec.h), so no other flag is needed.
#pragma once

#include <iosfwd>

#include "cli/options.h"

namespace lockstep::app {

/// Builds the model the metadata describes, loads the weights strictly, encodes --prompt and
/// appends --max-new-tokens tokens as nanoGPT's GPT.generate: the context cropped to the last
/// block_size tokens, the last position's logits / temperature, those below the top_k-th
/// largest set to -inf (top_k 0: none; top_k >= vocabulary: all kept), softmax, one token drawn
/// (from a Generator seeded with --seed: the same distribution as torch.multinomial, not its
/// bits). --temperature 0 is greedy: the first index of the largest logit. Writes the prompt,
/// then each token's text as it is made, to `out`. DataError / StateDictError / IoError naming
/// the file (no vocabulary or model in the metadata, weights that do not fit), DataError naming
/// --prompt for a character outside the vocabulary, ValueError for an empty prompt.
void run_generate(const GenerateOptions& options, std::ostream& out);

}  // namespace lockstep::app
