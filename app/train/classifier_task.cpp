// The classifier task of `lockstep train` (see task.h): epochs over a data::DataLoader of rows
// (--data, data/data_source.h), reshuffled every epoch from (seed, epoch) unless --no-shuffle; an
// mlp:, a layer list or resnet20 (model/model_spec.h); cross-entropy, --accumulate-steps batches
// per optimizer step, the per-epoch LR schedule; after each epoch the validation loss and accuracy,
// the epoch line, a --metrics object and a checkpoint; a signal stops it after any step (with a
// checkpoint of the position inside the epoch).
#include <algorithm>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "data/data_source.h"
#include "files/weights.h"
#include "infer/evaluate.h"
#include "lockstep/lockstep.h"
#include "ranks/rank_hosts.h"
#include "train/checks.h"
#include "train/task.h"

namespace lockstep::app {
namespace {

class ClassifierTask final : public Task {
 public:
  void load(Run& run) override {
    const TrainOptions& o = run.o;
    Resolved& r = run.r;
    // Data first, then the model: with synthetic data both come from the default generator in this
    // order, as in the reference program.
    manual_seed(o.data.seed);
    data_ = load_data(o.data);
    if (o.model.spec.empty())
      r.model.mlp = default_mlp_spec(data_.synthetic, data_.features, data_.classes);
    shape_for_model(r.model, data_);
    // Every model is checked from its spec, before it is allocated (memory_budget.h).
    const MemoryNeed need = spec_memory_need(r.model, data_);
    const std::string note = o.model.spec.empty()
                                 ? default_mlp_note(data_.features, data_.classes, data_.train_name)
                                 : "";
    run.guards.check_memory(spec_name(r.model), need, static_cast<std::int64_t>(r.devices.size()),
                            r.optimizer, std::min(o.batch_size, data_.train_x.size(0)), note);
    r.eval_rows = eval_chunk_rows(need);
    run.model = with_torch_init(o.torch_init, o.data.seed, [&] {
      return make_model(r.model, o.model, data_, /*copies=*/2, note);
    });
    if (!o.init.empty()) load_weights(*run.model, o.init, "--init");
    if (count_batchnorms(*run.model) > 0)
      check_batchnorm_batches(o, r.model, data_, r.sync_bn,
                              static_cast<std::int64_t>(r.devices.size()), run.dist.world);
    run.loss = nn::CrossEntropyLoss();  // each chunk weighted by its rows (no
                                        // ignore_index)
  }

  RankData rank_data() const override { return {data_.train_x, data_.val_x, data_.classes}; }

  void check_setup(const Run& run) const override {
    if (run.r.sync_bn && count_batchnorms(*run.model) > 0 && run.o.deterministic &&
        run.dist.world > 1)
      check_shards_per_rank(run.o, data_.train_x.size(0), run.dist.world,
                            parallel::DataParallelOptions{}.shard_size);
  }

  std::vector<optim::ParamGroup> param_groups(const Run& run) const override {
    return {{run.dp->parameters(), std::nullopt}};
  }

  std::unique_ptr<optim::LRScheduler> make_scheduler(const Run& run) const override {
    return app::make_scheduler(run.r.schedule, *run.optimizer, run.o.epochs);
  }

  void save_position(TrainingPosition& p, bool mid_period) const override {
    p.epochs_done = mid_period ? epoch_ - 1 : epoch_;
    p.batch_in_epoch = mid_period ? batch_ : 0;
    p.epoch_loss_sum = mid_period ? loss_sum_ : 0.0;
    p.epoch_samples = mid_period ? samples_ : 0;
  }

  void resume(const Checkpoint& c) override {
    epoch_ = epochs_done_ = c.position.epochs_done;
    resume_batch_ = c.position.batch_in_epoch;
    loss_sum_ = c.position.epoch_loss_sum;
    samples_ = c.position.epoch_samples;
  }

  std::string unit() const override { return "epoch"; }
  std::int64_t units_done(const Run&) const override { return epochs_done_; }

  bool done(const Run& run) const override { return epoch_ >= run.o.epochs; }

  std::optional<std::pair<std::string, std::string>> before_period(const Run& run) const override {
    // Between epochs: a rank lost in this collective is named with the step too.
    return std::pair{"the end of epoch " + std::to_string(epoch_) + ", after step " +
                         std::to_string(run.global_step) + " of the run",
                     "before epoch " + std::to_string(epoch_ + 1)};
  }

  void begin_period(Run& run) override {
    if (!loader_)
      loader_ = std::make_unique<data::DataLoader>(
          std::make_shared<data::TensorDataset>(data_.train_x, data_.train_y),
          data::DataLoaderOptions{.batch_size = run.o.batch_size,
                                  .shuffle = !run.o.no_shuffle,
                                  .drop_last = false,
                                  .seed = run.o.data.seed});
    const std::int64_t first_batch = epoch_ == epochs_done_ ? resume_batch_ : 0;
    ++epoch_;
    epoch_start_ = Clock::now();
    samples_before_ = samples_;
    loader_->set_epoch(epoch_ - 1);  // the shuffle of epoch e is keyed by (seed, e - 1)
    run.dp->train();
    run.progress->begin_epoch(epoch_, loader_->size(), data_.train_x.size(0), first_batch,
                              samples_);
    it_.emplace(loader_->begin());
    for (batch_ = 0; batch_ < first_batch; ++batch_) ++*it_;  // trained before the checkpoint
    advance_ = false;
  }

  std::optional<Batch> next_batch(Run& run) override {
    // The iterator moves on only now: the last batch's tensors live until its step is done.
    if (advance_) ++*it_;
    advance_ = true;
    if (*it_ == loader_->end()) return std::nullopt;
    const data::Example& e = **it_;
    const std::int64_t batches = loader_->size(), k = run.o.accumulate_steps, b = batch_;
    Batch batch;
    batch.rows = e.data.size(0);
    // Across ranks every rank holds the whole global batch and trains on its own part of it.
    const auto [start, count] = run.local_part(batch.rows);
    batch.x = run.dist.world == 1 ? e.data : e.data.narrow(0, start, count);
    batch.y = run.dist.world == 1 ? e.target : e.target.narrow(0, start, count);
    batch.zero_grad = b % k == 0;
    batch.steps = (b + 1) % k == 0 || b + 1 == batches;
    batch.schedule = batch.ends_period = b + 1 == batches;  // the schedule is per epoch
    batch.at = "epoch " + std::to_string(epoch_) + " step " + std::to_string(run.global_step + 1) +
               " (batch " + std::to_string(b + 1) + " of " + std::to_string(batches) + ")";
    ++batch_;
    return batch;
  }

  void after_step(Run& run, const Batch& batch, double loss) override {
    loss_sum_ += loss * static_cast<double>(batch.rows);
    samples_ += batch.rows;
    if (!batch.steps) return;
    if (batch.ends_period) train_seconds_ = seconds_since(epoch_start_);
    run.progress->update(batch_, samples_, loss_sum_ / static_cast<double>(samples_));
  }

  std::string stopped_in_period(const Run&) const override {
    return "in epoch " + std::to_string(epoch_) + " after batch " + std::to_string(batch_) +
           " of " + std::to_string(loader_->size());
  }

  void end_period(Run& run) override {
    EpochStats s;
    s.epoch = epoch_;
    s.epochs = run.o.epochs;
    s.train_loss = loss_sum_ / static_cast<double>(samples_);
    try {
      validate(run, s);
    } catch (const DistError&) {
      run.guards.rethrow_at("the validation of epoch " + std::to_string(epoch_) + ", after step " +
                            std::to_string(run.global_step) + " of the run");
    }
    s.samples_per_second =
        train_seconds_ > 0 ? static_cast<double>(samples_ - samples_before_) / train_seconds_ : 0;
    s.seconds = seconds_since(epoch_start_);
    loss_sum_ = 0.0;
    samples_ = 0;
    val_loss_ = s.val_loss, val_accuracy_ = s.val_accuracy;
    run.progress->end_epoch(epoch_line(s));
    if (run.metrics) run.metrics->append(s, run.r.devices, run.dist.world);
  }

  std::string end_at(const Run& run) const override { return before_period(run)->first; }
  std::string stopped_at_end(const Run&) const override {
    return "at the end of epoch " + std::to_string(epoch_);
  }

  std::string finish(Run& run) override {
    if (epochs_done_ >= run.o.epochs) {  // resumed at or past --epochs: the model as it is
      EpochStats s;
      validate(run, s);
      val_loss_ = s.val_loss, val_accuracy_ = s.val_accuracy;
    }
    return "epoch " + std::to_string(std::max(run.o.epochs, epochs_done_));
  }

  std::string summary(const Run& run) const override {
    return summary_line(std::max(run.o.epochs, epochs_done_), val_loss_, val_accuracy_,
                        seconds_since(run.start), run.r.devices, run.dist.world) +
           ranks_on_hosts();
  }

 private:
  // The validation loss and accuracy into `s` (nothing without validation rows).
  void validate(Run& run, EpochStats& s) const {
    if (!data_.has_validation()) return;
    run.dp->eval();
    const EvalResult v = evaluate_across_ranks(
        run.dist, [&run](const Tensor& x) { return run.dp->forward(x); }, data_.val_x, data_.val_y,
        run.r.eval_rows);
    run.dp->train();
    s.val_loss = v.loss, s.val_accuracy = v.accuracy;
  }

  LoadedData data_;
  std::unique_ptr<data::DataLoader> loader_;
  std::optional<data::DataLoader::Iterator> it_;  // the epoch's current batch
  bool advance_ = false;                          // it_ was handed out: move on first
  // The epochs a resumed run starts after and the batches of the next one it skips; the epoch in
  // training (1-based; the last one finished between epochs) and its next batch (0-based).
  std::int64_t epochs_done_ = 0, resume_batch_ = 0, epoch_ = 0, batch_ = 0;
  // The epoch's training loss (sum of mean batch loss x rows) and rows, so far.
  double loss_sum_ = 0.0;
  std::int64_t samples_ = 0, samples_before_ = 0;
  Clock::time_point epoch_start_;
  double train_seconds_ = 0.0;
  std::optional<double> val_loss_, val_accuracy_;
};

}  // namespace

std::unique_ptr<Task> classifier_task() { return std::make_unique<ClassifierTask>(); }

}  // namespace lockstep::app
