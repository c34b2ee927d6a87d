// `lockstep train`: one epoch's step loop (see trainer.h), with the fault-injection hook, the
// step named in distributed and data errors, the stop on a NaN/Inf loss and the mid-epoch
// stop on a signal.
#include <cmath>
#include <csignal>
#include <cstdint>
#include <functional>
#include <string>

#include "exit_status.h"
#include "lockstep/lockstep.h"
#include "trainer.h"

namespace lockstep::app {

void Trainer::inject_fault(std::int64_t step, Tensor& x) const {
  if (!fault_ || fault_->rank != dist_.rank || fault_->step != step) return;
  if (fault_->kind == "data")
    throw DataError("injected fault (LOCKSTEP_TEST_FAULT) in the batch of step " +
                    std::to_string(step));
  if (fault_->kind == "nan") x = mul(x, std::nan(""));
  if (fault_->kind == "hang") std::raise(SIGSTOP);
  if (fault_->kind == "die") std::raise(SIGKILL);
}

void Trainer::rethrow_at(const std::string& at) const {
  progress_->clear();
  try {
    throw;
  } catch (const PeerFailedError& e) {
    const std::string what = e.what();  // the failed rank's message may name the step itself
    throw PeerFailedError(what.find("(at epoch ") == std::string::npos &&
                                  what.find("(at iteration ") == std::string::npos
                              ? what + " (at " + at + ")"
                              : what,
                          e.rank(), e.status());
  } catch (const TimeoutError& e) {
    throw TimeoutError(std::string(e.what()) + " (at " + at + ")");
  } catch (const DistError& e) {
    throw DistError(std::string(e.what()) + " (at " + at + ")");
  } catch (const DataError& e) {
    throw DataError(std::string(e.what()) + " (at " + at + ")");
  }
}

double Trainer::guarded_step(const std::string& at, const std::function<double()>& step) {
  try {
    return step();
  } catch (const Error&) {
    rethrow_at(at);
  }
}

int Trainer::signal_after(const std::string& at) const {
  try {  // a collective: a rank stopped during the step shows up here, after it
    return signal_now();
  } catch (const Error&) {
    rethrow_at(at);
  }
}

void Trainer::check_finite(double loss, const std::string& at) {
  // The loss is the global batch's (identical on every rank), so every rank takes the same
  // decision here, before the optimizer step: no rank steps while another stops.
  if (std::isfinite(loss)) return;
  progress_->clear();
  throw NonFiniteLossError("training loss is " + std::string(std::isnan(loss) ? "NaN" : "Inf") +
                           " at " + at + nonfinite_ranks() +
                           "; stopped before that step, no checkpoint written for it");
}

EpochStats Trainer::train_epoch(std::int64_t epoch, std::int64_t first_batch) {
  const auto epoch_start = Clock::now();
  const std::int64_t batches = loader_->size(), k = o_.accumulate_steps;
  const std::int64_t total_samples = data_.train_x.size(0);
  const std::int64_t samples_before = epoch_samples_;
  loader_->set_epoch(epoch - 1);  // the shuffle of epoch e is keyed by (seed, e - 1)
  dp_->train();
  progress_->begin_epoch(epoch, batches, total_samples, first_batch, epoch_samples_);

  std::int64_t b = 0;
  for (auto it = loader_->begin(); it != loader_->end(); ++it, ++b) {
    if (b < first_batch) continue;  // trained before the checkpoint this run resumed from
    const Tensor& x = it->data;
    const Tensor& y = it->target;
    // Across ranks every rank holds the whole global batch and trains on its own part of it.
    const auto [start, count] = local_part(x.size(0));
    Tensor xl = dist_.world == 1 ? x : x.narrow(0, start, count);
    const Tensor yl = dist_.world == 1 ? y : y.narrow(0, start, count);
    if (b % k == 0) optimizer_->zero_grad();
    // Gradient accumulation: the group's last batch (the K-th, or the epoch's last) reduces the
    // gradients of the whole group at once; the batches before it only accumulate (no_sync).
    const bool step_now = (b + 1) % k == 0 || b + 1 == batches;
    const std::string at = "epoch " + std::to_string(epoch) + " step " +
                           std::to_string(global_step_ + 1) + " (batch " + std::to_string(b + 1) +
                           " of " + std::to_string(batches) + ")";
    const double loss = guarded_step(at, [&] {
      inject_fault(global_step_ + 1, xl);
      // --precision bf16: the step's forward and loss under autocast (carried to the replica
      // workers by DataParallel); the backward inside forward_backward follows the graph.
      AutocastGuard precision(o_.precision == "bf16");
      if (graph_step_) return graph_step_->step(xl, yl);  // zero_grad, ..., optimizer step
      if (step_now) return dp_->forward_backward(xl, yl, criterion_).item();
      auto no_sync = dp_->no_sync();
      return dp_->forward_backward(xl, yl, criterion_).item();
    });
    check_finite(loss, at);
    epoch_loss_sum_ += loss * static_cast<double>(x.size(0));
    epoch_samples_ += x.size(0);
    if (!step_now) continue;
    if (!graph_step_)
      (void)guarded_step(at, [&] {
        clip_gradients();  // --clip-grad-norm
        optimizer_->step();
        return loss;
      });
    ++global_step_;
    progress_->update(b + 1, epoch_samples_, epoch_loss_sum_ / static_cast<double>(epoch_samples_));
    if (const int sig = signal_after(at); sig != 0 && b + 1 < batches) {
      const std::string where = "in epoch " + std::to_string(epoch) + " after batch " +
                                std::to_string(b + 1) + " of " + std::to_string(batches);
      interrupted(sig, where,
                  o_.checkpoint_dir.empty() ? "" : write_checkpoint_at(epoch - 1, b + 1));
    }
  }
  const double train_seconds = seconds_since(epoch_start);
  if (scheduler_) scheduler_->step();

  EpochStats s;
  s.epoch = epoch;
  s.epochs = o_.epochs;
  s.train_loss = epoch_loss_sum_ / static_cast<double>(epoch_samples_);
  try {
    if (auto v = validate()) s.val_loss = v->loss, s.val_accuracy = v->accuracy;
  } catch (const DistError&) {
    rethrow_at("the validation of epoch " + std::to_string(epoch) + ", after step " +
               std::to_string(global_step_) + " of the run");
  }
  s.samples_per_second =
      train_seconds > 0 ? static_cast<double>(epoch_samples_ - samples_before) / train_seconds : 0;
  s.seconds = seconds_since(epoch_start);
  epoch_loss_sum_ = 0.0;
  epoch_samples_ = 0;
  return s;
}

}  // namespace lockstep::app
