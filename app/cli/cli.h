// The `lockstep` command line: its CLI11 definition (`lockstep train`, `eval`, `generate`), the
// value checks with our own wording, and the translation of CLI11's errors into one
// `lockstep: error: ...` line. Exit statuses: exit_status.h.
#pragma once

#include <CLI/CLI.hpp>
#include <memory>
#include <string>

#include "cli/options.h"

namespace lockstep::app {

/// Which subcommand the command line selected.
enum class Command { None, Train, Eval, Generate };

/// Everything parsed from the command line; filled in by the CLI11 callbacks.
struct CliOptions {
  Command command = Command::None;
  TrainOptions train;
  EvalOptions eval;
  GenerateOptions generate;
};

/// "lockstep <version>" then the backends this build contains and those it does not: threads
/// (cpu:k devices) built; MPI and NCCL/CUDA not built. The version comes from the
/// LOCKSTEP_VERSION compile definition (the CMake project version).
std::string version_text();

/// Builds the whole command line (`lockstep [--version] <train|eval|generate> [flags]`), with
/// `options` receiving the parsed values. `options` must outlive the returned app. Every flag's
/// help text ends with its default.
std::unique_ptr<CLI::App> make_cli(CliOptions& options);

/// The one-line, user-facing text for a CLI11 parse error, without the `lockstep: error: `
/// prefix, ending with a pointer to the help page of the (sub)command `app` was parsing, e.g.
/// "unrecognized argument '--foo' (see 'lockstep train --help')". `app` is the top-level app
/// that threw `error`.
std::string describe_parse_error(const CLI::ParseError& error, const CLI::App& app);

/// "lockstep train --help" (or eval) when `app`'s parse reached that subcommand, else
/// "lockstep --help".
std::string help_command_for(const CLI::App& app);

/// Prints `lockstep: error: <message>` as one line on stderr (newlines in `message` become
/// spaces).
void print_error(const std::string& message);

}  // namespace lockstep::app
