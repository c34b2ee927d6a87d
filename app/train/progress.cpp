// The progress bar and epoch lines (see progress.h).
#include "train/progress.h"

#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "lockstep/dist/mpi.h"

namespace lockstep::app {
namespace {

/// "1:02:03" or "2:03".
std::string clock_text(double seconds) {
  if (!(seconds >= 0.0) || seconds > 1e8) return "--:--";
  auto s = static_cast<long long>(seconds + 0.5);
  char buf[32];
  if (s >= 3600)
    std::snprintf(buf, sizeof buf, "%lld:%02lld:%02lld", s / 3600, s / 60 % 60, s % 60);
  else
    std::snprintf(buf, sizeof buf, "%lld:%02lld", s / 60, s % 60);
  return buf;
}

/// The terminal's width in columns (TIOCGWINSZ on stdout, else $COLUMNS, else 80).
int terminal_columns() {
  winsize w{};
  if (::ioctl(STDOUT_FILENO, TIOCGWINSZ, &w) == 0 && w.ws_col > 0) return w.ws_col;
  if (const char* c = std::getenv("COLUMNS"); c != nullptr && std::atoi(c) > 0) return std::atoi(c);
  return 80;
}

}  // namespace

std::string fit_bar_line(std::int64_t epoch, std::int64_t epochs, std::int64_t batches_done,
                         std::int64_t batches, double loss, double rate, const std::string& eta,
                         int columns) {
  const std::size_t room = columns > 1 ? static_cast<std::size_t>(columns - 1) : 0;
  char head[64], tail[160];
  std::snprintf(head, sizeof head, "epoch %lld/%lld", static_cast<long long>(epoch),
                static_cast<long long>(epochs));
  std::snprintf(tail, sizeof tail, " %lld/%lld loss %.4f %.0f samples/s ETA %s",
                static_cast<long long>(batches_done), static_cast<long long>(batches), loss, rate,
                eta.c_str());
  const std::string plain = std::string(head) + tail;
  // The bar takes what is left, up to 24 columns; under 8 it is left out.
  constexpr std::size_t kWidest = 24, kNarrowest = 8;
  const std::size_t left = room > plain.size() + 3 ? room - plain.size() - 3 : 0;
  if (left >= kNarrowest) {
    const std::size_t width = std::min(left, kWidest);
    const auto filled = static_cast<std::size_t>(batches > 0 ? static_cast<std::int64_t>(width) *
                                                                   batches_done / batches
                                                             : static_cast<std::int64_t>(width));
    std::string bar(std::min(filled, width), '#');
    bar.resize(width, '.');
    return std::string(head) + " [" + bar + "]" + tail;
  }
  return plain.substr(0, room);
}

Progress::Mode Progress::mode_for_stdout(bool quiet) {
  if (quiet) return Mode::Quiet;
  // Under mpirun a rank's stdout is a pseudo-terminal of the launcher even when mpirun's own
  // output goes to a file or pipe, and several ranks may print: one line per epoch there.
  if (dist::launched_by_mpi()) return Mode::Lines;
  return ::isatty(STDOUT_FILENO) ? Mode::Bar : Mode::Lines;
}

Progress::Progress(std::ostream& out, Mode mode, std::int64_t epochs)
    : out_(out), mode_(mode), epochs_(epochs) {}

void Progress::begin_epoch(std::int64_t epoch, std::int64_t batches, std::int64_t samples,
                           std::int64_t batches_done, std::int64_t samples_done) {
  epoch_ = epoch, batches_ = batches, samples_ = samples, samples_at_start_ = samples_done;
  start_ = Clock::now();
  last_draw_ = Clock::time_point{};
  (void)batches_done;
}

void Progress::update(std::int64_t batches_done, std::int64_t samples_done, double running_loss) {
  if (mode_ != Mode::Bar) return;
  const auto now = Clock::now();
  if (now - last_draw_ < std::chrono::milliseconds(100) && batches_done < batches_) return;
  last_draw_ = now;
  const double elapsed = std::chrono::duration<double>(now - start_).count();
  const double rate =
      elapsed > 0 ? static_cast<double>(samples_done - samples_at_start_) / elapsed : 0;
  const double left = static_cast<double>(samples_ - samples_done) +
                      static_cast<double>(epochs_ - epoch_) * static_cast<double>(samples_);
  const double eta = rate > 0 ? left / rate : -1.0;
  const std::string line = fit_bar_line(epoch_, epochs_, batches_done, batches_, running_loss, rate,
                                        clock_text(eta), terminal_columns());
  out_ << '\r' << line << "\x1b[K" << std::flush;
  drawn_ = true;
}

void Progress::end_epoch(const std::string& line) {
  if (mode_ == Mode::Quiet) return;
  if (mode_ == Mode::Bar) out_ << "\r\x1b[K";
  drawn_ = false;
  out_ << line << '\n' << std::flush;
}

void Progress::clear() {
  if (mode_ == Mode::Bar && drawn_) out_ << "\r\x1b[K" << std::flush;
  drawn_ = false;
}

}  // namespace lockstep::app
