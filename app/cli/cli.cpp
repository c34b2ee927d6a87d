// The `lockstep` command line (see cli.h): the top-level app and --version, and the translation
// of CLI11's errors into one `lockstep: error: ...` line. The subcommands' flags: cli_flags.h;
// the value checks: cli_validators.h.
#include "cli/cli.h"

#include <unistd.h>

#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <iostream>

#include "cli/cli_flags.h"
#include "cli/cli_validators.h"
#include "lockstep/lockstep.h"

namespace lockstep::app {
namespace {

#ifndef LOCKSTEP_VERSION
#error "LOCKSTEP_VERSION must be defined by the build (CMake project version)"
#endif

/// The part of `text` after the first occurrence of `marker`, or "" when it does not occur.
std::string after(const std::string& text, const std::string& marker) {
  auto pos = text.find(marker);
  return pos == std::string::npos ? std::string() : text.substr(pos + marker.size());
}

// How the OpenBLAS kernels were chosen: by OPENBLAS_CORETYPE (the user's, or set by main()'s
// restart when OpenBLAS fell back to Prescott; see lockstep/core/blas.h) or by OpenBLAS itself.
std::string openblas_coretype_note() {
  const char* set = std::getenv("OPENBLAS_CORETYPE");
  return set ? std::string(" (OPENBLAS_CORETYPE=") + set + ")"
             : std::string(" (chosen by OpenBLAS from the CPU model)");
}

}  // namespace

std::string version_text() {
  const bool mpi = dist::mpi_available();
#ifdef LOCKSTEP_HAS_CUDA
  const bool cuda = true;  // -DLOCKSTEP_CUDA=ON: cuda:k tensors, DataParallel on GPUs
#else
  const bool cuda = false;
#endif
  return std::string("lockstep ") + LOCKSTEP_VERSION +
         "\nbackends built: threads (cpu:k devices, in-process process group)" +
         (mpi ? ", mpi (one rank per process under mpirun)" : "") +
         (cuda ? ", cuda (cuda:k tensors; DataParallel over the GPUs of one process with NCCL)"
               : "") +
         (cuda ? ", nccl (--backend nccl: one process per GPU, DistributedDataParallel)" : "") +
         "\nbackends not built: " +
         (mpi ? (cuda ? "none" : "NCCL/CUDA") : (cuda ? "MPI" : "MPI, NCCL/CUDA")) +
         "\nOpenBLAS kernels: " + openblas_core() + openblas_coretype_note();
}

std::unique_ptr<CLI::App> make_cli(CliOptions& options) {
  auto app = std::make_unique<CLI::App>(
      "Lockstep: data-parallel neural-network training in C++ (PyTorch semantics).", "lockstep");
  app->set_version_flag("--version", version_text(), "Print the version and the backends built");
  app->require_subcommand(1);
  app->footer(
      "Run 'lockstep <command> --help' for a command's flags. Errors print one line "
      "'lockstep: error: ...' on stderr. Exit status: 0 success, 1 internal error, 2 usage or "
      "data error, 3 NaN/Inf training loss, 4 distributed failure, 130/143 interrupted.");
  add_train_command(*app, options);
  add_eval_command(*app, options);
  add_generate_command(*app, options);
  return app;
}

std::string help_command_for(const CLI::App& app) {
  for (const CLI::App* sub : app.get_subcommands({}))
    if (sub->parsed()) return app.get_name() + " " + sub->get_name() + " --help";
  return app.get_name() + " --help";
}

std::string describe_parse_error(const CLI::ParseError& error, const CLI::App& app) {
  const std::string what = error.what();
  std::string message;
  if (dynamic_cast<const CLI::ExtrasError*>(&error) != nullptr) {
    // CLI11's own message lists the arguments in reverse order; ask the app instead.
    std::vector<std::string> extras = app.remaining(true);
    std::string args;
    for (const std::string& arg : extras) args += (args.empty() ? "" : " ") + arg;
    if (args.empty()) args = after(what, "expected: ");
    message = std::string("unrecognized argument") + (extras.size() > 1 ? "s " : " ") +
              single_quoted(args);
  } else if (dynamic_cast<const CLI::RequiredError*>(&error) != nullptr &&
             what.rfind("A subcommand", 0) == 0) {
    std::vector<std::string> rest = app.remaining();
    message = rest.empty() ? "missing command: expected 'train', 'eval' or 'generate'"
                           : "unknown command " + single_quoted(rest.front()) +
                                 ": expected 'train', 'eval' or 'generate'";
  } else if (dynamic_cast<const CLI::RequiredError*>(&error) != nullptr) {
    message = what;  // a required option is missing
  } else if (dynamic_cast<const CLI::ArgumentMismatch*>(&error) != nullptr &&
             what.find("missing") != std::string::npos) {
    message = what.substr(0, what.find(':')) + ": expected a value";
  } else if (dynamic_cast<const CLI::ConversionError*>(&error) != nullptr) {
    std::string rest = after(what, "Could not convert: ");
    message = "invalid value " + (rest.empty() ? what : rest);
  } else {
    message = what;  // validators already speak our language: "--lr: expected ..., got '-1'"
  }
  if (!message.empty())
    message[0] = static_cast<char>(std::tolower(static_cast<unsigned char>(message[0])));
  return message + " (see '" + help_command_for(app) + "')";
}

void print_error(const std::string& message) {
  std::string line = "lockstep: error: " + message;
  for (char& ch : line)
    if (ch == '\n' || ch == '\r') ch = ' ';
  line += '\n';
  // One write: the ranks of an mpirun job share the terminal, and their lines must not interleave.
  std::cerr.flush();
  std::fflush(stderr);
  for (std::size_t done = 0; done < line.size();) {
    const ssize_t n = ::write(STDERR_FILENO, line.data() + done, line.size() - done);
    if (n <= 0) break;
    done += static_cast<std::size_t>(n);
  }
}

}  // namespace lockstep::app
