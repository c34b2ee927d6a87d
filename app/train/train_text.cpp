// `lockstep train` with a gpt: model (see trainer.h): which flags apply, the text and the model,
// nanoGPT's estimate_loss, the metadata its files carry and what --resume restores of it. The
// step loop: train_iters.cpp.
#include <charconv>
#include <string>
#include <vector>

#include "data/data_source.h"
#include "model/gpt_spec.h"
#include "lockstep/lockstep.h"
#include "guards/memory_budget.h"
#include "model/model_spec.h"
#include "train/trainer.h"
#include "files/weights.h"

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
          "--epochs does not apply to gpt: models (random windows have no epochs): give the "
          "run's length in steps with --max-iters");
    throw ValueError(flag + " applies to epoch-based models only, not to " + m +
                     (flag == "--dropout" ? " (its dropout is the spec's dropout=P)" : ""));
  }
  if (o.optimizer_given && o.optimizer == "sgd")
    throw ValueError("--optimizer sgd: gpt: models train with adamw (nanoGPT's) or adam");
  const LrSchedule schedule = parse_lr_schedule(o.lr_schedule);
  if (schedule.kind == LrSchedule::Kind::Step)
    throw ValueError("--lr-schedule " + o.lr_schedule +
                     " is per epoch: gpt: models take constant or cosine (nanoGPT's warmup and "
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

void Trainer::setup_text_model(std::int64_t replicas) {
  const DataSpec spec = parse_data_spec(o_.data.spec);
  const GptSpec& g = *r_.model.gpt;
  text_ = load_text(spec.paths[0], spec.kind == DataSpec::Kind::TextBytes, o_.data.val_fraction,
                    g.block);
  const nn::GPTConfig config = g.config(text_->vocab.size());
  // Checked before the model is allocated (memory_budget.h).
  const MemoryNeed need = gpt_memory_need(g, text_->vocab.size());
  check_training_memory("--model " + g.str(), need, replicas,
                        optimizer_state_slots(r_.optimizer, o_.momentum),
                        zero_state_shards(o_, dist_.world), dist_.world, o_.batch_size, "");
  r_.eval_rows = eval_chunk_rows(need);
  // The model from --seed (nanoGPT's init), then the windows from their own generator.
  manual_seed(o_.data.seed);
  model_ = with_torch_init(o_.torch_init, o_.data.seed,
                           [&] { return std::make_shared<nn::GPT>(config); });
  if (!o_.init.empty()) load_weights(*model_, o_.init, "--init");
  windows_ = Generator(o_.data.seed);
}

double Trainer::estimate_loss(const Tensor& tokens, std::uint64_t stream) {
  // Every window's mean loss is computed alone and placed at its global row, so the sum is the
  // same for any device count and rank count (in deterministic mode the logits are too).
  Generator gen(o_.data.seed ^ (0x9E3779B97F4A7C15ull * stream));
  const std::int64_t batch = o_.batch_size, block = r_.model.gpt->block;
  const auto [start, count] = local_part(batch);
  NoGradGuard no_grad;
  dp_->eval();
  double total = 0.0;
  for (std::int64_t k = 0; k < o_.eval_iters; ++k) {
    const auto [x, y] = data::random_windows(tokens, block, batch, gen);
    std::vector<double> rows(static_cast<std::size_t>(batch), 0.0);
    if (count > 0) {
      const Tensor logits = dp_->forward(x.narrow(0, start, count)).to(cpu());
      const Tensor targets = y.narrow(0, start, count);
      for (std::int64_t r = 0; r < count; ++r)
        rows[static_cast<std::size_t>(start + r)] =
            nn::gpt_loss(logits.narrow(0, r, 1), targets.narrow(0, r, 1)).item();
    }
    rows = sum_across_ranks(dist_, rows);  // each row from one rank, the others add 0
    double sum = 0.0;
    for (double v : rows) sum += v;
    total += sum / static_cast<double>(batch);
  }
  dp_->train();
  return total / static_cast<double>(o_.eval_iters);
}

std::map<std::string, std::string> Trainer::text_metadata() const {
  std::map<std::string, std::string> md = text_->vocab.metadata();
  md.merge(gpt_metadata(*r_.model.gpt, text_->vocab.size()));
  return md;
}

void Trainer::resume_text(const Checkpoint& c) {
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

}  // namespace lockstep::app
