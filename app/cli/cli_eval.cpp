// The `lockstep eval` subcommand and its own flags (see cli_flags.h).
#include "cli/cli_flags.h"
#include "cli/cli_validators.h"

namespace lockstep::app {

void add_eval_command(CLI::App& app, CliOptions& options) {
  CLI::App* eval = app.add_subcommand(
      "eval", "Print the loss and accuracy of saved weights on the validation data");
  EvalOptions& e = options.eval;
  add_data_flags(*eval, e.data);
  add_model_flags(*eval, e.model);
  add_dist_flags(*eval, e.dist);
  eval->add_option("--weights", e.weights,
                   "safetensors file with the model's state_dict (from --save, or PyTorch's)" +
                       dflt("none, required"))
      ->check(file_name("FILE"))
      ->type_name("FILE");
  for (CLI::Option* opt : eval->get_options())
    opt->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  eval->footer(
      "Output: `loss X accuracy Y samples N` (6 decimals) over the validation part of --data, or "
      "over all of it with --val-fraction 0 or when it has no validation part. Under mpirun "
      "every rank evaluates its own tensor_split part of the rows, each row exactly once, and the "
      "sums are reduced across ranks.\n"
      "Exit status: 0 success, 1 internal error, 2 usage or data error, 3 NaN/Inf loss (outputs "
      "overflow), 4 distributed failure.");
  eval->callback([&options] { options.command = Command::Eval; });
}

}  // namespace lockstep::app
