// The flags of `lockstep train` that apply to gpt: models only (iteration-based training, see
// train/language_model_task.cpp) and the record of which flags of either kind were given (see
// cli_flags.h).
#include <string>

#include "cli/cli_flags.h"
#include "cli/cli_validators.h"

namespace lockstep::app {

void add_iteration_flags(CLI::App& train, TrainOptions& c) {
  train
      .add_option("--max-iters", c.max_iters,
                  "gpt: models: the run's length in optimizer steps (a resumed run continues up "
                  "to this many)" +
                      dflt("5000"))
      ->check(integer_at_least(1));
  train
      .add_option("--eval-interval", c.eval_interval,
                  "gpt: models: every K steps and after the last one, the mean loss over "
                  "--eval-iters batches of each part (nanoGPT's estimate_loss) and a checkpoint; "
                  "K may exceed --max-iters (only the final evaluation)" +
                      dflt("250"))
      ->check(integer_at_least(1))
      ->type_name("K");
  train
      .add_option("--eval-iters", c.eval_iters,
                  "gpt: models: batches (of --batch-size windows) per part and evaluation; the "
                  "same batches at every evaluation, drawn from (--seed, part)" +
                      dflt("200"))
      ->check(integer_at_least(1))
      ->type_name("M");
  train
      .add_option("--warmup-iters", c.warmup_iters,
                  "gpt: models with --lr-schedule cosine: linear warmup over W steps" + dflt("0"))
      ->check(integer_at_least(0))
      ->type_name("W");
  train
      .add_option_function<double>(
          "--min-lr", [&c](double v) { c.min_lr = v; },
          "gpt: models with --lr-schedule cosine: the lr the cosine decays to" + dflt("--lr / 10"))
      ->check(finite_number(false))
      ->type_name("X");
  train
      .add_option_function<std::int64_t>(
          "--lr-decay-iters", [&c](std::int64_t v) { c.lr_decay_iters = v; },
          "gpt: models with --lr-schedule cosine: the step at which the cosine reaches --min-lr "
          "(then it stays there)" +
              dflt("--max-iters"))
      ->check(integer_at_least(1))
      ->type_name("D");
}

void record_given_flags(const CLI::App& train, TrainOptions& c) {
  for (const char* flag :
       {"--epochs", "--no-shuffle", "--accumulate-steps", "--label-column", "--activation",
        "--dropout", "--sync-bn", "--no-sync-bn", "--cuda-graphs"})
    if (train.count(flag) > 0) c.epoch_flags_given.emplace_back(flag);
  for (const char* flag : {"--max-iters", "--eval-interval", "--eval-iters", "--warmup-iters",
                           "--min-lr", "--lr-decay-iters"})
    if (train.count(flag) > 0) c.iteration_flags_given.emplace_back(flag);
  c.optimizer_given = train.count("--optimizer") > 0;
  c.bucket_cap_given = train.count("--bucket-cap-mb") > 0;
}

}  // namespace lockstep::app
