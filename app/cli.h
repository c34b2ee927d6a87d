// The `lockstep` command line: its CLI11 definition, its validators, and the conventions every
// subcommand follows.
//
// Exit status: 0 success; 1 the job failed (a lockstep::Error or other exception while it ran);
// 2 the command line was wrong (unknown flag, bad value, missing subcommand). Every failure prints
// exactly one line on stderr, `lockstep: error: <what>`; --help and --version print to stdout and
// exit 0.
#pragma once

#include <CLI/CLI.hpp>

#include <memory>
#include <string>
#include <vector>

#include "train.h"

namespace lockstep::app {

inline constexpr int kExitSuccess = 0;
inline constexpr int kExitFailure = 1;
inline constexpr int kExitUsage = 2;

/// Which subcommand the command line selected.
enum class Command { None, Train };

/// Everything parsed from the command line; filled in by the CLI11 callbacks.
struct CliOptions {
  Command command = Command::None;
  TrainConfig train;
};

/// "lockstep <version>\nbackends: cpu (threads)" — the version comes from the LOCKSTEP_VERSION
/// compile definition (the CMake project version); the backends are those this build contains.
std::string version_text();

/// Builds the whole command line (`lockstep [--version] <command> [flags]`), with `options`
/// receiving the parsed values. `options` must outlive the returned app.
std::unique_ptr<CLI::App> make_cli(CliOptions& options);

/// The one-line, user-facing text for a CLI11 parse error, without the `lockstep: error: ` prefix,
/// ending with a pointer to the help page of the (sub)command `app` was parsing, e.g.
/// "unrecognized argument '--foo' (see 'lockstep train --help')". `app` is the top-level app
/// that threw `error`.
std::string describe_parse_error(const CLI::ParseError& error, const CLI::App& app);

/// "lockstep train --help" when `app`'s parse reached the train subcommand, else
/// "lockstep --help".
std::string help_command_for(const CLI::App& app);

/// Prints `lockstep: error: <message>` as one line on stderr (newlines in `message` become
/// spaces).
void print_error(const std::string& message);

}  // namespace lockstep::app
