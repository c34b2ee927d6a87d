// `lockstep train` with a gpt: model: the run from iteration to iteration (nanoGPT's train.py
// loop; see trainer.h). Each step draws a global batch of --batch-size random windows of
// block + 1 tokens (data::random_windows over the run's window generator, seeded by --seed),
// every rank trains on its split_batch part of it (as every other batch), through
// forward_backward with nanoGPT's loss, --clip-grad-norm, the optimizer's step, then the LR
// scheduler (per iteration). Every --eval-interval steps and after the last: estimate_loss
// of both parts, one line, one --metrics object and one checkpoint.
#include <optional>
#include <string>
#include <tuple>

#include "lockstep/lockstep.h"
#include "metrics.h"
#include "trainer.h"

namespace lockstep::app {

void Trainer::run_iterations() {
  const std::int64_t block = r_.model.gpt->block, batch = o_.batch_size;
  const double tokens_per_step = static_cast<double>(batch * block);
  const auto loss_fn = [](const Tensor& logits, const Tensor& y) {
    return nn::gpt_loss(logits, y);
  };
  const auto count_fn = [](const Tensor& y) { return nn::count_targets(y); };
  std::optional<double> val_loss;
  double train_seconds = 0.0;
  std::int64_t trained_steps = 0, steps_since_eval = 0;
  auto since_eval = Clock::now();
  dp_->train();
  while (global_step_ < o_.max_iters) {
    // Named locals, not a structured binding: the step's lambda captures them, which clang
    // before 16 refuses for bindings (C++20 allows it).
    Tensor x, y;
    std::tie(x, y) = data::random_windows(text_->train, block, batch, windows_);
    const auto [start, count] = local_part(batch);
    if (dist_.world > 1) x = x.narrow(0, start, count), y = y.narrow(0, start, count);
    const std::string at = "iteration " + std::to_string(global_step_ + 1);
    const double lr = optimizer_->lr();
    optimizer_->zero_grad();
    const double loss = guarded_step(at, [&] {
      AutocastGuard precision(o_.precision == "bf16");
      return dp_->forward_backward(x, y, loss_fn, count_fn).item();
    });
    check_finite(loss, at);
    (void)guarded_step(at, [&] {
      clip_gradients();  // --clip-grad-norm
      optimizer_->step();
      return loss;
    });
    ++global_step_, ++steps_since_eval;
    if (scheduler_) scheduler_->step();

    const bool last = global_step_ == o_.max_iters;
    if (global_step_ % o_.eval_interval == 0 || last) {
      const double seconds = seconds_since(since_eval);
      train_seconds += seconds, trained_steps += steps_since_eval;
      IterStats s;
      s.iter = global_step_;
      s.max_iters = o_.max_iters;
      s.lr = lr;
      s.tokens_per_second =
          seconds > 0 ? tokens_per_step * static_cast<double>(steps_since_eval) / seconds : 0.0;
      s.train_loss = estimate_loss(text_->train, 1);
      if (text_->has_validation()) s.val_loss = estimate_loss(text_->val, 2);
      val_loss = s.val_loss;
      progress_->end_epoch(iter_line(s));
      if (metrics_) metrics_->append(s, r_.devices, dist_.world);
      std::string checkpoint;
      if (!o_.checkpoint_dir.empty()) checkpoint = write_checkpoint_at(0, 0);
      if (const int sig = signal_after(at); sig != 0 && !last)
        interrupted(sig, "at iteration " + std::to_string(global_step_), checkpoint);
      since_eval = Clock::now();
      steps_since_eval = 0;
    } else if (const int sig = signal_after(at); sig != 0) {
      interrupted(
          sig,
          "after iteration " + std::to_string(global_step_) + " of " + std::to_string(o_.max_iters),
          o_.checkpoint_dir.empty() ? "" : write_checkpoint_at(0, 0));
    }
  }
  if (trained_steps == 0 && text_->has_validation())  // resumed at or past --max-iters
    val_loss = estimate_loss(text_->val, 2);
  save_final();
  honour_late_signal("iteration " + std::to_string(global_step_));
  out_ << zero_line();
  const double rate =
      train_seconds > 0 ? tokens_per_step * static_cast<double>(trained_steps) / train_seconds : 0;
  out_ << iter_summary_line(global_step_, val_loss, seconds_since(start_), rate, r_.devices,
                            dist_.world)
       << '\n'
       << std::flush;
}

}  // namespace lockstep::app
