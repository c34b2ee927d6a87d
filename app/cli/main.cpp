// `lockstep`: the command-line entry point. Parses the command line (cli.h), runs the selected
// job (train.h, eval.h) and maps every outcome onto the exit statuses of exit_status.h, printing
// exactly one `lockstep: error: ...` line on stderr for every failure.
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <iostream>
#include <new>
#include <string>

#include "cli/cli.h"
#include "ranks/distributed.h"
#include "infer/eval.h"
#include "cli/exit_status.h"
#include "infer/generate.h"
#include "lockstep/core/blas.h"
#include "lockstep/dist/mpi.h"
#include "lockstep/io/atomic_file.h"
#include "guards/memory_budget.h"
#include "cli/message_text.h"
#include "ranks/rank_hosts.h"
#include "guards/signals.h"
#include "train/train.h"

namespace lockstep::app {

int exit_status_for(const std::exception& error) {
  if (auto* i = dynamic_cast<const Interrupted*>(&error)) return 128 + i->signal();
  if (dynamic_cast<const NonFiniteLossError*>(&error)) return kExitNonFiniteLoss;
  if (auto* p = dynamic_cast<const PeerFailedError*>(&error)) return p->status();
  if (dynamic_cast<const DistError*>(&error)) return kExitDistributed;
  if (dynamic_cast<const IoError*>(&error) || dynamic_cast<const DataError*>(&error) ||
      dynamic_cast<const ValueError*>(&error) || dynamic_cast<const StateDictError*>(&error) ||
      dynamic_cast<const DeviceError*>(&error))
    return kExitUsage;
  return kExitFailure;
}

}  // namespace lockstep::app

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

/// "rank R: " in a job of several ranks (every rank prints its own errors), "rank R on HOST: "
/// when they run on more than one host, else "".
std::string rank_prefix() {
  const DistContext& d = current_dist();
  return d.world > 1 ? "rank " + std::to_string(d.rank) + on_host(d.rank) + ": " : "";
}

/// Runs the selected job; any exception becomes one stderr line and its exit status.
int run_command(const CliOptions& options) {
  try {
    switch (options.command) {
      case Command::Train:
        install_signal_handlers();
        run_train(options.train, std::cout);
        break;
      case Command::Eval:
        ignore_sigpipe();
        run_eval(options.eval, std::cout);
        break;
      case Command::Generate:
        run_generate(options.generate, std::cout);
        break;
      case Command::None:
        print_error("no command given (see 'lockstep --help')");
        return kExitUsage;
    }
    // A full disk must not look like success; a reader that closed its pipe (`| head -1`) chose
    // to stop reading: the run still wrote its outputs.
    if (!std::cout.flush() && !stdout_reader_gone()) {
      print_error("cannot write to standard output");
      return kExitFailure;
    }
    return kExitSuccess;
  } catch (const std::bad_alloc&) {
    print_error(rank_prefix() + "out of memory");
    return kExitFailure;
  } catch (const lockstep::Error& error) {
    std::cout.flush();
    std::string text = user_facing(error.what());
    // A rank that was stopped and continued: its own collectives failed because the others
    // gave up on it; say so rather than blame them.
    if (current_dist().world > 1 && was_continued() &&
        dynamic_cast<const lockstep::DistError*>(&error) &&
        !dynamic_cast<const lockstep::PeerFailedError*>(&error))
      text = stopped_rank_message(text);
    print_error(rank_prefix() + text);
    const int status = exit_status_for(error);
    // A failure of this rank alone (bad data, say) is announced to the others, which are
    // waiting in a collective: they report it and end with the same status. NaN losses and
    // signals are decided collectively, and a distributed error is already known to all.
    if (current_dist().world > 1 && !dynamic_cast<const lockstep::DistError*>(&error) &&
        !dynamic_cast<const NonFiniteLossError*>(&error) &&
        !dynamic_cast<const Interrupted*>(&error))
      lockstep::dist::notify_failure(status, text);
    return status;
  } catch (const std::exception& error) {
    std::cout.flush();
    print_error(rank_prefix() + "internal error: " + error.what());
    return kExitFailure;
  }
}

}  // namespace

int main(int argc, char** argv) {
  // Debian's OpenBLAS 0.3.21 runs its generic kernels on CPUs it does not know (a 5th-generation
  // Xeon, say: ~6x slower GEMMs); start again with OPENBLAS_CORETYPE set (lockstep/core/blas.h).
  lockstep::reexec_with_openblas_kernels(argv);
  CliOptions options;
  std::unique_ptr<CLI::App> app;
  try {
    app = make_cli(options);
  } catch (const std::exception& error) {  // a bug in the CLI definition itself
    print_error(std::string("internal error: ") + error.what());
    return kExitFailure;
  }
  // Every file read (data, weights, model files, checkpoints) is bounded by the memory this
  // process may use: a larger file is refused before it is read (io::read_file).
  if (const auto room = available_memory())
    lockstep::io::set_read_limit(static_cast<std::uint64_t>(room->bytes),
                                 "the memory this process may use: " + room->source);
  if (int status = parse_command_line(*app, argc, argv); status >= 0) return status;
  const int status = run_command(options);
  if (status != kExitSuccess && current_dist().world > 1) {
    // A failed rank must not wait in MPI_Finalize for ranks that may be stuck: it leaves at
    // once and mpirun ends the others (which report it, or time out).
    std::cout.flush();
    std::fflush(nullptr);
    std::_Exit(status);
  }
  finish_distributed();
  return status;
}
