// The guards of one `lockstep train` run (see guards.h).
#include "guards/guards.h"

#include <cmath>
#include <csignal>
#include <string>
#include <vector>

#include "cli/exit_status.h"
#include "guards/output_paths.h"
#include "guards/rank_agreement.h"
#include "guards/signals.h"
#include "ranks/rank_hosts.h"

namespace lockstep::app {

Guards::Guards(const TrainOptions& o, const DistContext& dist)
    : o_(o), dist_(dist), fault_(injected_fault()) {}

void Guards::check_outputs() const { app::check_outputs(o_); }

void Guards::check_memory(const std::string& what, const MemoryNeed& need, std::int64_t replicas,
                          const std::string& optimizer, std::int64_t batch,
                          const std::string& note) const {
  check_training_memory(what, need, replicas, optimizer_state_slots(optimizer, o_.momentum),
                        zero_state_shards(o_, dist_.world), dist_.world, batch, note);
}

void Guards::check_same_setup(const std::string& fingerprint, const Tensor& train,
                              const Tensor& val, std::int64_t classes, std::size_t devices) const {
  if (dist_.world == 1) return;
  // --zero: whether the gradients are reduce-scattered depends on this rank's device count, so the
  // ranks must agree on it too (their collectives would differ).
  const std::string zero =
      o_.zero ? "--devices (count, with --zero)=" + std::to_string(devices) + "\n" : "";
  check_same_on_every_rank(dist_, rank_setup(o_, fingerprint, train, val, classes) + zero);
}

void Guards::check_output_space(std::uint64_t weights_bytes, std::uint64_t checkpoint_bytes) const {
  app::check_output_space(o_, weights_bytes, checkpoint_bytes);
}

void Guards::lock_checkpoint_dir() {
  if (!o_.checkpoint_dir.empty() && dist_.is_main())  // one run at a time in the directory
    dir_lock_ = std::make_unique<CheckpointDirLock>(o_.checkpoint_dir, o_.resume);
}

void Guards::begin_training(Progress& progress) {
  progress_ = &progress;
  app::begin_training();  // from here a signal is acted on after the current
                          // step (signals.h)
}

double Guards::guarded(const std::string& at, const std::function<double()>& step) const {
  try {
    return step();
  } catch (const Error&) {
    rethrow_at(at);
  }
}

void Guards::rethrow_at(const std::string& at) const {
  clear_progress();
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

void Guards::inject_fault(std::int64_t step, Tensor& x) const {
  if (!fault_ || fault_->rank != dist_.rank || fault_->step != step) return;
  if (fault_->kind == "data")
    throw DataError("injected fault (LOCKSTEP_TEST_FAULT) in the batch of step " +
                    std::to_string(step));
  if (fault_->kind == "nan") x = mul(x, std::nan(""));
  if (fault_->kind == "hang") std::raise(SIGSTOP);
  if (fault_->kind == "die") std::raise(SIGKILL);
}

void Guards::check_finite(double loss, const std::string& at,
                          const parallel::DataParallel& dp) const {
  // The loss is the global batch's (identical on every rank), so every rank takes the same decision
  // here: no rank steps while another stops. The optimizer has not stepped yet.
  if (std::isfinite(loss)) return;
  std::string ranks;  // " on rank R" / " on ranks R,S": whose share of the loss
                      // was not finite
  const auto* ddp = dynamic_cast<const parallel::DistributedDataParallel*>(&dp);
  if (ddp && dist_.world > 1) {
    std::vector<int> bad;
    for (std::size_t r = 0; r < ddp->rank_losses().size(); ++r)
      if (!std::isfinite(ddp->rank_losses()[r])) bad.push_back(static_cast<int>(r));
    for (std::size_t i = 0; i < bad.size(); ++i)
      ranks += (i == 0 ? bad.size() == 1 ? " on rank " : " on ranks " : ",") +
               std::to_string(bad[i]) + on_host(bad[i]);
  }
  clear_progress();
  throw NonFiniteLossError("training loss is " + std::string(std::isnan(loss) ? "NaN" : "Inf") +
                           " at " + at + ranks +
                           "; stopped before that step, no checkpoint written for it");
}

int Guards::signal_now() const { return agree_on_signal(dist_, pending_signal()); }

int Guards::signal_after(const std::string& at) const {
  try {  // a collective: a rank stopped during the step shows up here, after it
    return signal_now();
  } catch (const Error&) {
    rethrow_at(at);
  }
}

void Guards::interrupted(int signal, const std::string& where,
                         const std::string& checkpoint) const {
  clear_progress();
  std::string message = std::string("interrupted by ") + signal_name(signal) + " " + where;
  if (!checkpoint.empty())
    message += "; checkpoint " + checkpoint + " (continue with --resume)";
  else if (o_.checkpoint_dir.empty())
    message += "; no checkpoint written (no --checkpoint-dir)";
  else  // a signal during setup: nothing of this run to save
    message += "; no checkpoint written (nothing trained yet in this run)";
  throw Interrupted(signal, message);
}

void Guards::honour_late_signal(const std::string& last) const {
  const int signal = signal_now();
  if (signal == 0) return;
  clear_progress();
  std::string message = std::string("interrupted by ") + signal_name(signal) + " in the run's " +
                        "last phase (" + last + ", its final evaluation and save): training had " +
                        "ended";
  if (!o_.save.empty()) message += "; the trained weights were written to --save " + o_.save;
  if (!o_.checkpoint_dir.empty())
    message += "; its last checkpoint is in --checkpoint-dir " + o_.checkpoint_dir;
  if (o_.save.empty() && o_.checkpoint_dir.empty())
    message += "; nothing was written (no --save, no --checkpoint-dir)";
  throw Interrupted(signal, message);
}

}  // namespace lockstep::app
