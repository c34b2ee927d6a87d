// The progress bar and epoch lines (see progress.h).
#include "progress.h"

#include <unistd.h>

#include <cstdio>

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

}  // namespace

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
  constexpr int kWidth = 24;
  const int filled = batches_ > 0 ? static_cast<int>(kWidth * batches_done / batches_) : kWidth;
  std::string bar(static_cast<std::size_t>(filled), '#');
  bar.resize(kWidth, '.');
  char buf[256];
  std::snprintf(buf, sizeof buf,
                "\repoch %lld/%lld [%s] %lld/%lld loss %.4f %.0f samples/s ETA %s\x1b[K",
                static_cast<long long>(epoch_), static_cast<long long>(epochs_), bar.c_str(),
                static_cast<long long>(batches_done), static_cast<long long>(batches_),
                running_loss, rate, clock_text(eta).c_str());
  out_ << buf << std::flush;
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
