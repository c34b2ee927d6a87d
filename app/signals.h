// SIGINT/SIGTERM during `lockstep train`: the handler only records the signal; the training loop
// polls it between optimizer steps, finishes the step, writes a checkpoint (with
// --checkpoint-dir) and exits with 128 + the signal number. A second signal of either kind
// kills the process at once (the handler restores the default action after the first).
#pragma once

namespace lockstep::app {

/// Installs the SIGINT and SIGTERM handlers (sigaction, SA_RESTART).
void install_signal_handlers();

/// The first SIGINT/SIGTERM received since install_signal_handlers(), or 0.
int pending_signal();

/// "SIGINT", "SIGTERM" or "signal N".
const char* signal_name(int signal);

}  // namespace lockstep::app
