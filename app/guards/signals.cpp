// Signal handling (see signals.h).
#include "guards/signals.h"

#include <poll.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstdint>
#include <cstring>
#include <thread>

namespace lockstep::app {
namespace {

// The first signal once training runs. Atomic (lock-free, so usable in the handler): two
// signals may be handled at once by two threads, and exactly one of them must be the first.
std::atomic<int> g_signal{0};
static_assert(std::atomic<int>::is_always_lock_free);
volatile std::sig_atomic_t g_training = 0;
volatile std::sig_atomic_t g_continued = 0;

// A SIGCONT alone does not mean this process was stopped: mpirun sends SIGCONT (then SIGTERM) to
// every rank it ends, also to the survivors of a rank that died. A stop shows as a gap in the
// ticks of a thread that wakes every kTickMs: the process was stopped when its last tick is more
// than kStoppedMs old (seen by the thread on waking, or by the check itself if it has not woken).
constexpr std::int64_t kTickMs = 100, kStoppedMs = 500;
std::atomic<std::int64_t> g_tick{0};
std::atomic<bool> g_gap{false};

std::int64_t now_ms() {
  timespec t{};
  ::clock_gettime(CLOCK_MONOTONIC, &t);
  return std::int64_t{t.tv_sec} * 1000 + t.tv_nsec / 1'000'000;
}

bool stopped_since_tick() { return now_ms() - g_tick.load() > kStoppedMs; }

void start_ticks() {
  g_tick = now_ms();
  std::thread([] {
    for (;;) {
      const timespec pause{0, kTickMs * 1'000'000};
      ::nanosleep(&pause, nullptr);
      if (stopped_since_tick()) g_gap = true;
      g_tick = now_ms();
    }
  }).detach();
}

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
  int none = 0;
  if (g_signal.compare_exchange_strong(none, sig)) return;
  // A second signal ends the process right away, saying so (it ended with no line at all).
  const char* head = "lockstep: error: interrupted again by ";
  const char* first = " while finishing the current step for ";
  const char* tail = ": stopped at once, no checkpoint written for this step\n";
  (void)!::write(STDERR_FILENO, head, std::strlen(head));
  (void)!::write(STDERR_FILENO, signal_name(sig), std::strlen(signal_name(sig)));
  (void)!::write(STDERR_FILENO, first, std::strlen(first));
  const char* first_name = signal_name(g_signal.load());
  (void)!::write(STDERR_FILENO, first_name, std::strlen(first_name));
  (void)!::write(STDERR_FILENO, tail, std::strlen(tail));
  ::_exit(128 + sig);
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
  static const bool ticking = (start_ticks(), true);
  (void)ticking;
  ignore_sigpipe();
}

void ignore_sigpipe() { std::signal(SIGPIPE, SIG_IGN); }

void begin_training() { g_training = 1; }

int pending_signal() { return g_signal.load(); }

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

bool was_continued() { return g_continued != 0 && (g_gap || stopped_since_tick()); }

std::string stopped_rank_message(const std::string& original) {
  std::string message =
      "this rank was stopped (SIGSTOP or SIGTSTP) and continued; meanwhile the other ranks timed "
      "out waiting for it and ended the job";
  if (const auto at = original.rfind("(at epoch "); at != std::string::npos)
    message.append(" ").append(original, at);  // (not " " + ...: GCC 12 -Wrestrict false alarm)
  return message;
}

bool stdout_reader_gone() {
  pollfd p{STDOUT_FILENO, POLLOUT, 0};
  return ::poll(&p, 1, 0) == 1 && (p.revents & POLLERR) != 0;
}

}  // namespace lockstep::app
