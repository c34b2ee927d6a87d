// Signal handling (see signals.h).
#include "signals.h"

#include <poll.h>
#include <unistd.h>

#include <csignal>
#include <cstring>

namespace lockstep::app {
namespace {

volatile std::sig_atomic_t g_signal = 0;
volatile std::sig_atomic_t g_training = 0;
volatile std::sig_atomic_t g_continued = 0;

extern "C" void on_continue(int) { g_continued = 1; }

constexpr int kSignals[] = {SIGINT, SIGTERM, SIGHUP};

/// Only async-signal-safe calls here (write, _exit, signal).
extern "C" void on_signal(int sig) {
  if (g_training == 0) {
    const char* head = "lockstep: error: interrupted by ";
    const char* name = signal_name(sig);
    const char* tail = " before training started (nothing trained, nothing written)\n";
    (void)!::write(STDERR_FILENO, head, std::strlen(head));
    (void)!::write(STDERR_FILENO, name, std::strlen(name));
    (void)!::write(STDERR_FILENO, tail, std::strlen(tail));
    ::_exit(128 + sig);
  }
  if (g_signal == 0) g_signal = sig;
  // A second signal ends the process right away (default action).
  for (int s : kSignals) std::signal(s, SIG_DFL);
}

}  // namespace

void install_signal_handlers() {
  struct sigaction action {};
  action.sa_handler = on_signal;
  sigemptyset(&action.sa_mask);
  for (int s : kSignals) sigaddset(&action.sa_mask, s);
  action.sa_flags = SA_RESTART;
  for (int s : kSignals) sigaction(s, &action, nullptr);
  struct sigaction cont {};
  cont.sa_handler = on_continue;
  sigemptyset(&cont.sa_mask);
  cont.sa_flags = SA_RESTART;
  sigaction(SIGCONT, &cont, nullptr);
  ignore_sigpipe();
}

void ignore_sigpipe() { std::signal(SIGPIPE, SIG_IGN); }

void begin_training() { g_training = 1; }

int pending_signal() { return g_signal; }

const char* signal_name(int signal) {
  switch (signal) {
    case SIGINT:
      return "SIGINT";
    case SIGTERM:
      return "SIGTERM";
    case SIGHUP:
      return "SIGHUP";
    default:
      return "a signal";
  }
}

bool was_continued() { return g_continued != 0; }

std::string stopped_rank_message(const std::string& original) {
  std::string message =
      "this rank was stopped (SIGSTOP or SIGTSTP) and continued; meanwhile the other ranks timed "
      "out waiting for it and ended the job";
  if (const auto at = original.rfind("(at epoch "); at != std::string::npos)
    message += " " + original.substr(at);
  return message;
}

bool stdout_reader_gone() {
  pollfd p{STDOUT_FILENO, POLLOUT, 0};
  return ::poll(&p, 1, 0) == 1 && (p.revents & POLLERR) != 0;
}

}  // namespace lockstep::app
