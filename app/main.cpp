// `lockstep`: the command-line entry point. Parses the command line (cli.h), runs the selected
// job (train.h) and maps every outcome onto the exit-status convention:
//   0  success (also --help and --version)
//   1  the job failed: a lockstep::Error or another exception, reported as one stderr line
//   2  the command line was wrong: unknown flag or command, bad or missing value
#include <exception>
#include <iostream>
#include <new>
#include <string>

#include "cli.h"
#include "train.h"

namespace {

using namespace lockstep::app;

/// Parses argv into `options`. Returns -1 when the job should run, otherwise the exit status to
/// return right away (0 after --help/--version, 2 after a usage error).
int parse_command_line(CLI::App& app, int argc, char** argv) {
  try {
    app.parse(argc, argv);
    return -1;
  } catch (const CLI::Success& done) {  // --help, --help-all, --version: print to stdout
    return app.exit(done);
  } catch (const CLI::ParseError& error) {
    print_error(describe_parse_error(error, app));
    return kExitUsage;
  } catch (const lockstep::Error& error) {  // a flag value our own parsers reject (--devices)
    print_error(std::string(error.what()) + " (see '" + help_command_for(app) + "')");
    return kExitUsage;
  }
}

/// Runs the selected job; any exception becomes one stderr line and exit status 1.
int run_command(const CliOptions& options) {
  try {
    switch (options.command) {
      case Command::Train:
        run_train(options.train, std::cout);
        if (!std::cout.flush()) {  // a full disk or a closed pipe must not look like success
          print_error("cannot write to standard output");
          return kExitFailure;
        }
        return kExitSuccess;
      case Command::None:
        break;
    }
    print_error("no command given (see 'lockstep --help')");
    return kExitUsage;
  } catch (const lockstep::Error& error) {
    print_error(error.what());
  } catch (const std::bad_alloc&) {
    print_error("out of memory");
  } catch (const std::exception& error) {
    print_error(std::string("internal error: ") + error.what());
  }
  return kExitFailure;
}

}  // namespace

int main(int argc, char** argv) {
  CliOptions options;
  std::unique_ptr<CLI::App> app;
  try {
    app = make_cli(options);
  } catch (const std::exception& error) {  // a bug in the CLI definition itself
    print_error(std::string("internal error: ") + error.what());
    return kExitFailure;
  }
  if (int status = parse_command_line(*app, argc, argv); status >= 0) return status;
  return run_command(options);
}
