// The flag definitions of `lockstep train` and `lockstep eval` (CLI11), called by make_cli
// (cli.h): the flags both commands share (cli_shared_flags.cpp) and each command's own
// (cli_train.cpp, cli_eval.cpp).
#pragma once

#include <CLI/CLI.hpp>

#include "cli/cli.h"
#include "cli/options.h"

namespace lockstep::app {

/// --data, --label-column, --val-fraction and --seed (shared by train and eval).
void add_data_flags(CLI::App& app, DataOptions& d);

/// --backend, --timeout, --log-all-ranks (shared by train and eval).
void add_dist_flags(CLI::App& app, DistOptions& d);

/// --model, --activation, --dropout (shared by train and eval).
void add_model_flags(CLI::App& app, ModelOptions& m);

/// --max-iters, --eval-interval, --eval-iters, --warmup-iters, --min-lr, --lr-decay-iters
/// (train, gpt: models; cli_iteration_flags.cpp).
void add_iteration_flags(CLI::App& train, TrainOptions& c);

/// After parsing: which epoch-only and iteration-only flags were given, --optimizer and
/// --bucket-cap-mb.
void record_given_flags(const CLI::App& train, TrainOptions& c);

/// Adds the `generate` subcommand and its flags (cli_generate.cpp).
void add_generate_command(CLI::App& app, CliOptions& options);

/// Adds the `train` subcommand and its flags.
void add_train_command(CLI::App& app, CliOptions& options);

/// Adds the `eval` subcommand and its flags.
void add_eval_command(CLI::App& app, CliOptions& options);

}  // namespace lockstep::app
