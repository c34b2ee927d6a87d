// Signals during `lockstep train`:
// - SIGINT, SIGTERM and SIGHUP (the terminal or the ssh session closed) before training starts
//   (while the data loads and the model is built: nothing to checkpoint) end the process at
//   once: one `lockstep: error: interrupted by SIG... before training started` line and exit
//   128 + the signal number, from the handler itself (a long set-up is never waited for).
// - Once training has started (begin_training()), the handler only records the signal; the
//   training loop polls it after every optimizer step, writes a checkpoint (with
//   --checkpoint-dir) and exits with 128 + the signal number. A second signal of any of the
//   three kills the process at once (the handler restores the default actions after the first).
// - SIGCONT is recorded: a rank that was stopped (SIGSTOP, Ctrl-Z) and continued finds the
//   job ended by the others' timeout; its message then says that it was the one stopped
//   (stopped_rank_message) instead of blaming a healthy rank that no longer answers. A stop is
//   told from a SIGCONT sent to a running rank (mpirun sends SIGCONT, then SIGTERM, to every rank
//   it ends, also to the survivors of a killed rank) by a thread that ticks every 100 ms: a stop
//   leaves a gap of more than 0.5 s between its ticks.
// - SIGPIPE is ignored: a closed standard output (`lockstep train ... | head -1`) makes writes
//   to it fail instead of killing the run, which goes on silently and still writes its outputs.
#pragma once

#include <string>

namespace lockstep::app {

/// Installs the SIGINT, SIGTERM and SIGHUP handlers (sigaction, SA_RESTART) and ignores SIGPIPE.
void install_signal_handlers();

/// Ignores SIGPIPE only (`lockstep eval`).
void ignore_sigpipe();

/// From now on a signal is recorded for the training loop instead of ending the process.
void begin_training();

/// The first SIGINT/SIGTERM/SIGHUP received since begin_training(), or 0.
int pending_signal();

/// "SIGINT", "SIGTERM", "SIGHUP" or "a signal".
const char* signal_name(int signal);

/// Whether this process was stopped (a gap of more than 0.5 s in the ticks) and continued
/// (SIGCONT) since install_signal_handlers().
bool was_continued();

/// The error line of a rank that was stopped and continued, for a distributed failure whose
/// `original` message blames the ranks that gave up waiting for it: says this rank was stopped
/// and keeps the step `original` names ("(at epoch E step S ...)"), if any.
std::string stopped_rank_message(const std::string& original);

/// True when standard output is a pipe or socket whose reading end is closed (poll reports
/// POLLERR): output written there is lost by the reader's choice, not a failure of the run.
bool stdout_reader_gone();

}  // namespace lockstep::app
