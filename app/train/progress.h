// What `lockstep train` prints on stdout while it runs: on a terminal a progress bar redrawn in
// place (epoch, batches, samples/s, ETA, running loss) that becomes the epoch line when the epoch
// ends (fitted to the terminal's width at every redraw); otherwise (a file or a pipe) exactly the
// epoch lines; with --quiet nothing (the caller prints the summary either way).
#pragma once

#include <chrono>
#include <cstdint>
#include <ostream>
#include <string>

namespace lockstep::app {

/// The progress bar's line for a terminal `columns` wide, at most columns - 1 characters (the
/// last column would wrap on some terminals): "epoch 3/10 [####....] 12/25 loss 0.4123 5123
/// samples/s ETA 0:05", the bar narrowed to fit (24 columns at most), left out below 8, and the
/// rest cut at the width.
std::string fit_bar_line(std::int64_t epoch, std::int64_t epochs, std::int64_t batches_done,
                         std::int64_t batches, double loss, double rate, const std::string& eta,
                         int columns);

class Progress {
 public:
  enum class Mode { Bar, Lines, Quiet };
  /// Mode::Bar when `quiet` is false and stdout is a terminal (isatty(1)), Mode::Lines when it is
  /// not or the process was started by mpirun (whose ranks write to a pseudo-terminal),
  /// Mode::Quiet with `quiet`.
  static Mode mode_for_stdout(bool quiet);

  Progress(std::ostream& out, Mode mode, std::int64_t epochs);
  /// Starts epoch `epoch` (1-based) of `batches` batches with `samples` training samples;
  /// `batches_done` / `samples_done` are already behind (a run resumed mid-epoch).
  void begin_epoch(std::int64_t epoch, std::int64_t batches, std::int64_t samples,
                   std::int64_t batches_done, std::int64_t samples_done);
  /// After each batch: totals so far in this epoch and their mean loss. Redraws the bar at most
  /// ten times a second (Mode::Bar only).
  void update(std::int64_t batches_done, std::int64_t samples_done, double running_loss);
  /// Replaces the bar with `line` (Mode::Bar) or prints `line` (Mode::Lines), then a newline,
  /// and flushes. Nothing in Mode::Quiet.
  void end_epoch(const std::string& line);
  /// Erases a bar left on the screen (before an error message); no-op otherwise.
  void clear();

 private:
  using Clock = std::chrono::steady_clock;
  std::ostream& out_;
  Mode mode_;
  std::int64_t epochs_, epoch_ = 0, batches_ = 0, samples_ = 0, samples_at_start_ = 0;
  Clock::time_point start_, last_draw_;
  bool drawn_ = false;
};

}  // namespace lockstep::app
