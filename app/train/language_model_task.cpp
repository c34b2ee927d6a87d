// The language-model task of `lockstep train` (see task.h): a gpt: model (model/gpt_spec.h) on
// --data text:FILE / text-bytes:FILE (data/text_data.h), nanoGPT's train.py. Each step draws a
// global batch of --batch-size random windows of block + 1 tokens (data::random_windows over the
// run's window generator, seeded by --seed), every rank trains on its part of it; nanoGPT's loss,
// AdamW with weight-decay groups, the warmup + cosine schedule per iteration. Every --eval-interval
// steps and after the last: estimate_loss of both parts, one line, one --metrics object and one
// checkpoint (a period of the run loop). Also which flags apply to which kind
// (check_training_kind).
#include <charconv>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "data/data_source.h"
#include "data/text_data.h"
#include "files/weights.h"
#include "guards/memory_budget.h"
#include "lockstep/lockstep.h"
#include "model/gpt_spec.h"
#include "train/checks.h"
#include "train/task.h"

namespace lockstep::app {

void check_training_kind(const TrainOptions& o, const ModelSpec& model) {
  const DataSpec data = parse_data_spec(o.data.spec);
  const bool text = data.kind == DataSpec::Kind::Text || data.kind == DataSpec::Kind::TextBytes;
  if (!model.gpt) {
    if (!o.iteration_flags_given.empty())
      throw ValueError(o.iteration_flags_given.front() +
                       " applies to gpt: models only (this model trains by --epochs)");
    return;  // text data without a gpt: model: load_data says what it trains
  }
  const std::string m = "--model " + model.gpt->str();
  if (!text)
    throw ValueError(m + " trains on text: --data text:FILE or text-bytes:FILE, not --data " +
                     o.data.spec);
  if (!o.epoch_flags_given.empty()) {
    const std::string& flag = o.epoch_flags_given.front();
    if (flag == "--epochs")
      throw ValueError(
          "--epochs does not apply to gpt: models (random windows "
          "have no epochs): give the "
          "run's length in steps with --max-iters");
    throw ValueError(flag + " applies to epoch-based models only, not to " + m +
                     (flag == "--dropout" ? " (its dropout is the spec's dropout=P)" : ""));
  }
  if (o.optimizer_given && o.optimizer == "sgd")
    throw ValueError("--optimizer sgd: gpt: models train with adamw (nanoGPT's) or adam");
  const LrSchedule schedule = parse_lr_schedule(o.lr_schedule);
  if (schedule.kind == LrSchedule::Kind::Step)
    throw ValueError("--lr-schedule " + o.lr_schedule +
                     " is per epoch: gpt: models take constant or cosine "
                     "(nanoGPT's warmup and "
                     "cosine decay, per iteration)");
  if (schedule.kind != LrSchedule::Kind::Cosine)
    for (const std::string& flag : o.iteration_flags_given)
      if (flag == "--warmup-iters" || flag == "--min-lr" || flag == "--lr-decay-iters")
        throw ValueError(flag + " applies to --lr-schedule cosine only");
  const std::int64_t decay = o.lr_decay_iters.value_or(o.max_iters);
  if (schedule.kind == LrSchedule::Kind::Cosine && decay <= o.warmup_iters)
    throw ValueError("--lr-decay-iters " + std::to_string(decay) +
                     (o.lr_decay_iters ? "" : " (--max-iters)") + " must exceed --warmup-iters " +
                     std::to_string(o.warmup_iters));
}

namespace {

class LanguageModelTask final : public Task {
 public:
  void load(Run& run) override {
    const TrainOptions& o = run.o;
    const DataSpec spec = parse_data_spec(o.data.spec);
    gpt_ = *run.r.model.gpt;
    text_ = load_text(spec.paths[0], spec.kind == DataSpec::Kind::TextBytes, o.data.val_fraction,
                      gpt_.block);
    // Checked before the model is allocated (memory_budget.h).
    const MemoryNeed need = gpt_memory_need(gpt_, text_->vocab.size());
    run.guards.check_memory("--model " + gpt_.str(), need,
                            static_cast<std::int64_t>(run.r.devices.size()), run.r.optimizer,
                            o.batch_size, "");
    run.r.eval_rows = eval_chunk_rows(need);
    // The model from --seed (nanoGPT's init), then the windows from their own generator.
    manual_seed(o.data.seed);
    const nn::GPTConfig config = gpt_.config(text_->vocab.size());
    run.model = with_torch_init(o.torch_init, o.data.seed,
                                [&] { return std::make_shared<nn::GPT>(config); });
    if (!o.init.empty()) load_weights(*run.model, o.init, "--init");
    windows_ = Generator(o.data.seed);
    tokens_per_step_ = static_cast<double>(o.batch_size * gpt_.block);
    run.loss = [](const Tensor& logits, const Tensor& y) { return nn::gpt_loss(logits, y); };
    run.count = [](const Tensor& y) { return nn::count_targets(y); };
  }

  RankData rank_data() const override { return {text_->train, text_->val, text_->vocab.size()}; }

  std::vector<optim::ParamGroup> param_groups(const Run& run) const override {
    // nanoGPT's configure_optimizers, weight decay on the >= 2-d tensors only.
    return optim::weight_decay_groups(*run.model, run.r.weight_decay);
  }

  std::unique_ptr<optim::LRScheduler> make_scheduler(const Run& run) const override {
    if (run.r.schedule.kind != LrSchedule::Kind::Cosine) return nullptr;
    return std::make_unique<optim::WarmupCosineLR>(*run.optimizer, run.o.warmup_iters,
                                                   run.r.lr_decay_iters, run.r.min_lr);
  }

  std::map<std::string, std::string> metadata() const override {
    std::map<std::string, std::string> md = text_->vocab.metadata();
    md.merge(gpt_metadata(gpt_, text_->vocab.size()));
    return md;
  }

  void save_position(TrainingPosition& p, bool /*mid_period*/) const override {
    p.by_iteration = true;
    p.extra = metadata();
    p.extra["windows_offset"] = std::to_string(windows_.offset());
  }

  void resume(const Checkpoint& c) override {
    // The checkpoint's vocabulary must be the text's; the window generator continues.
    const TextVocab saved = TextVocab::from_metadata(c.position.extra, c.path);
    if (saved.bytes != text_->vocab.bytes || saved.chars != text_->vocab.chars)
      throw ValueError("--resume: " + c.path + " was trained on a vocabulary of " +
                       std::to_string(saved.size()) + " tokens, but " + text_->name + " has " +
                       std::to_string(text_->vocab.size()) + " (another text)");
    auto it = c.position.extra.find("windows_offset");
    std::uint64_t offset = 0;
    if (it == c.position.extra.end() ||
        std::from_chars(it->second.data(), it->second.data() + it->second.size(), offset).ec !=
            std::errc())
      throw DataError(c.path + ": metadata 'windows_offset' missing or not an integer");
    windows_.set_offset(offset);
  }

  std::string unit() const override { return "iter"; }
  std::int64_t units_done(const Run& run) const override { return run.global_step; }

  bool done(const Run& run) const override { return run.global_step >= run.o.max_iters; }

  void begin_period(Run& run) override {
    run.dp->train();
    since_eval_ = Clock::now();
    steps_since_eval_ = 0;
  }

  std::optional<Batch> next_batch(Run& run) override {
    if (done(run)) return std::nullopt;
    Batch b;
    b.rows = run.o.batch_size;
    std::tie(b.x, b.y) = data::random_windows(text_->train, gpt_.block, b.rows, windows_);
    const auto [start, count] = run.local_part(b.rows);
    if (run.dist.world > 1) b.x = b.x.narrow(0, start, count), b.y = b.y.narrow(0, start, count);
    const std::int64_t step = run.global_step + 1;
    b.at = "iteration " + std::to_string(step);
    b.ends_period = step % run.o.eval_interval == 0 || step == run.o.max_iters;
    lr_ = run.optimizer->lr();  // the step's lr, before the scheduler's step after it
    return b;
  }

  void after_step(Run&, const Batch&, double) override { ++steps_since_eval_, ++trained_steps_; }

  std::string stopped_in_period(const Run& run) const override {
    return "after iteration " + std::to_string(run.global_step) + " of " +
           std::to_string(run.o.max_iters);
  }

  void end_period(Run& run) override {
    const double seconds = seconds_since(since_eval_);
    train_seconds_ += seconds;
    IterStats s;
    s.iter = run.global_step;
    s.max_iters = run.o.max_iters;
    s.lr = lr_;
    s.tokens_per_second =
        seconds > 0 ? tokens_per_step_ * static_cast<double>(steps_since_eval_) / seconds : 0.0;
    s.train_loss = estimate_loss(run, text_->train, 1);
    if (text_->has_validation()) s.val_loss = estimate_loss(run, text_->val, 2);
    val_loss_ = s.val_loss;
    run.progress->end_epoch(iter_line(s));
    if (run.metrics) run.metrics->append(s, run.r.devices, run.dist.world);
  }

  std::string end_at(const Run& run) const override {
    return "iteration " + std::to_string(run.global_step);
  }
  std::string stopped_at_end(const Run& run) const override { return "at " + end_at(run); }

  std::string finish(Run& run) override {
    if (trained_steps_ == 0 && text_->has_validation())  // resumed at or past --max-iters
      val_loss_ = estimate_loss(run, text_->val, 2);
    return end_at(run);
  }

  std::string summary(const Run& run) const override {
    const double rate =
        train_seconds_ > 0 ? tokens_per_step_ * static_cast<double>(trained_steps_) / train_seconds_
                           : 0;
    return iter_summary_line(run.global_step, val_loss_, seconds_since(run.start), rate,
                             run.r.devices, run.dist.world);
  }

 private:
  // nanoGPT's estimate_loss for one part: the mean loss over --eval-iters batches of --batch-size
  // windows drawn from Generator(seed, stream), the same at every evaluation. Every window's mean
  // loss is computed alone and placed at its global row, so the sum is the same for any device
  // count and rank count (in deterministic mode the logits are too).
  double estimate_loss(Run& run, const Tensor& tokens, std::uint64_t stream) const {
    Generator gen(run.o.data.seed ^ (0x9E3779B97F4A7C15ull * stream));
    const std::int64_t batch = run.o.batch_size;
    const auto [start, count] = run.local_part(batch);
    NoGradGuard no_grad;
    run.dp->eval();
    double total = 0.0;
    for (std::int64_t k = 0; k < run.o.eval_iters; ++k) {
      const auto [x, y] = data::random_windows(tokens, gpt_.block, batch, gen);
      std::vector<double> rows(static_cast<std::size_t>(batch), 0.0);
      if (count > 0) {
        const Tensor logits = run.dp->forward(x.narrow(0, start, count)).to(cpu());
        const Tensor targets = y.narrow(0, start, count);
        for (std::int64_t r = 0; r < count; ++r)
          rows[static_cast<std::size_t>(start + r)] =
              nn::gpt_loss(logits.narrow(0, r, 1), targets.narrow(0, r, 1)).item();
      }
      rows = sum_across_ranks(run.dist,
                              rows);  // each row from one rank, the others add 0
      double sum = 0.0;
      for (double v : rows) sum += v;
      total += sum / static_cast<double>(batch);
    }
    run.dp->train();
    return total / static_cast<double>(run.o.eval_iters);
  }

  GptSpec gpt_;
  std::optional<TextCorpus> text_;
  Generator windows_;             // the training windows' generator
  double tokens_per_step_ = 0.0;  // --batch-size x block
  double lr_ = 0.0, train_seconds_ = 0.0;
  std::int64_t steps_since_eval_ = 0, trained_steps_ = 0;
  Clock::time_point since_eval_;
  std::optional<double> val_loss_;
};

}  // namespace

std::unique_ptr<Task> language_model_task() { return std::make_unique<LanguageModelTask>(); }

}  // namespace lockstep::app
