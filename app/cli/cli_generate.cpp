// The `lockstep generate` subcommand and its flags (see cli_flags.h, generate.h): nanoGPT's
// sample.py from the command line.
#include "cli/cli_flags.h"
#include "cli/cli_validators.h"

namespace lockstep::app {

void add_generate_command(CLI::App& app, CliOptions& options) {
  CLI::App* gen = app.add_subcommand(
      "generate",
      "Print text from a gpt: model: the prompt, then the tokens nanoGPT's generate samples");
  GenerateOptions& g = options.generate;
  gen->add_option("--weights", g.weights,
                  "safetensors weights of a gpt: model with its vocabulary and model in the "
                  "metadata (lockstep train --save, or a checkpoint of --checkpoint-dir)" +
                      dflt("none, required"))
      ->required()
      ->check(file_name("FILE"))
      ->type_name("FILE");
  gen->add_option("--prompt", g.prompt,
                  "The text to continue (every character must be in the model's vocabulary)" +
                      dflt("a newline, as sample.py's start"))
      ->type_name("TEXT");
  gen->add_option("--max-new-tokens", g.max_new_tokens, "Tokens to generate" + dflt("500"))
      ->check(integer_at_least(0))
      ->type_name("N");
  gen->add_option("--temperature", g.temperature,
                  "Logits are divided by T before the softmax; 0 is greedy (the most likely "
                  "token each time)" +
                      dflt("0.8"))
      ->check(finite_number(false))
      ->type_name("T");
  gen->add_option("--top-k", g.top_k,
                  "Sample among the K most likely tokens only; 0: all of them" + dflt("200"))
      ->check(integer_at_least(0))
      ->type_name("K");
  gen->add_option("--seed", g.seed, "Seed of the sampling generator" + dflt("1337"))
      ->check(unsigned_integer());
  for (CLI::Option* opt : gen->get_options())
    opt->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  gen->footer(
      "Output: the prompt followed by the generated text and a newline on stdout (nothing "
      "else). The model "
      "sees the last block tokens (the spec's block) of the text so far.\n"
      "Exit status: 0 success, 1 internal error, 2 usage or data error.");
  gen->callback([&options] { options.command = Command::Generate; });
}

}  // namespace lockstep::app
