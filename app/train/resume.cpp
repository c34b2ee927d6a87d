// `lockstep train`: --checkpoint-dir and --resume (see resume.h): the flags a checkpoint
// records, resuming from the newest checkpoint, and writing one.
#include <algorithm>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "files/checkpoint.h"
#include "lockstep/core/format.h"
#include "lockstep/lockstep.h"
#include "cli/message_text.h"
#include "train/resume.h"

namespace lockstep::app {

std::string flags_fingerprint(const TrainOptions& o, const Resolved& r) {
  std::string f;
  auto add = [&f](const std::string& flag, const std::string& value) {
    f += flag + "=" + value + "\n";
  };
  add("--data", o.data.spec);
  add("--label-column", std::to_string(o.data.label_column));
  add("--val-fraction", o.data.val_fraction ? exact_string(*o.data.val_fraction) : "default");
  add("--model", r.model.str());
  add("--activation", o.model.activation);
  add("--dropout", exact_string(o.model.dropout));
  add("--optimizer", r.optimizer);
  add("--lr", exact_string(r.lr));
  add("--weight-decay", exact_string(r.weight_decay));
  if (r.optimizer == "sgd") {
    add("--momentum", exact_string(o.momentum));
    add("--dampening", exact_string(o.dampening));
    add("--nesterov", o.nesterov ? "on" : "off");
  } else {
    add("--betas", exact_string(o.beta1) + "," + exact_string(o.beta2));
    add("--eps", exact_string(o.eps));
  }
  add("--lr-schedule", o.lr_schedule);
  if (r.schedule.kind == LrSchedule::Kind::Cosine && !r.model.gpt)
    add("--epochs", std::to_string(o.epochs));
  if (r.schedule.kind == LrSchedule::Kind::Cosine && r.model.gpt) {  // get_lr's constants
    add("--warmup-iters", std::to_string(o.warmup_iters));
    add("--min-lr", exact_string(r.min_lr));
    add("--lr-decay-iters", std::to_string(r.lr_decay_iters));
  }
  add("--clip-grad-norm", o.clip_grad_norm ? exact_string(*o.clip_grad_norm) : "off");
  add("--accumulate-steps", std::to_string(o.accumulate_steps));
  add("--batch-size", std::to_string(o.batch_size));
  add("--seed", std::to_string(o.data.seed));
  add("--no-shuffle", o.no_shuffle ? "on" : "off");
  add("--deterministic", o.deterministic ? "on" : "off");
  // Only when not the default, so checkpoints written before the flag existed still resume.
  if (o.precision != "fp32") add("--precision", o.precision);
  // Only when given (the automatic choice follows the devices, which a resumed run may change).
  if (o.sync_bn) add("--sync-bn", *o.sync_bn ? "on" : "off");
  return f;
}

void check_same_flags(const std::string& saved, const std::string& now, const std::string& path) {
  if (saved == now) return;
  auto lines = [](const std::string& s) {
    std::vector<std::string> v;
    std::size_t pos = 0;
    while (pos < s.size()) {
      std::size_t nl = s.find('\n', pos);
      if (nl == std::string::npos) nl = s.size();
      v.push_back(s.substr(pos, nl - pos));
      pos = nl + 1;
    }
    return v;
  };
  const auto a = lines(saved), b = lines(now);
  std::string diff;
  for (const std::string& line : b)
    if (std::find(a.begin(), a.end(), line) == a.end()) {
      const std::string key = line.substr(0, line.find('=') + 1);
      std::string was = key == "--sync-bn=" ? "(not set: automatic)" : "(not set)";
      for (const std::string& s : a)
        if (s.rfind(key, 0) == 0) was = s;
      diff = typed_flag(line) + " but the checkpoint has " + typed_flag(was);
      break;
    }
  // A flag recorded only when not at its default (--precision) is missing from `now` instead.
  for (const std::string& line : a)
    if (diff.empty() && std::find(b.begin(), b.end(), line) == b.end()) {
      const std::string key = line.substr(0, line.find('=') + 1);
      std::string is = "(not set)";
      if (key == "--precision=") is = "--precision=fp32 (the default)";
      if (key == "--sync-bn=") is = "--sync-bn not given (automatic)";
      for (const std::string& s : b)
        if (s.rfind(key, 0) == 0) is = s;
      diff = typed_flag(is) + " but the checkpoint has " + typed_flag(line);
    }
  if (diff.empty()) diff = "different flags";
  throw ValueError("--resume: " + path + " was written with other training flags: " + diff);
}

void resume_from_checkpoint(Run& run, Task& task) {
  // Rank 0 reads the file and broadcasts it: the other ranks' hosts need not see the directory.
  Checkpoint c = read_latest_checkpoint_on_rank0(run.dist, run.o.checkpoint_dir);
  check_same_flags(c.position.flags, run.fingerprint, c.path);
  try {
    run.dp->load_state_dict(c.model, /*strict=*/true);
    run.optimizer->load_state_dict(c.optimizer);
    if (run.scheduler) run.scheduler->load_state_dict(c.scheduler);
  } catch (const StateDictError& e) {
    throw StateDictError("--resume " + c.path + ": " + e.what());
  }
  const TrainingPosition& p = c.position;
  run.dp->set_step_count(p.dp_step_count);
  default_generator().manual_seed(p.generator_seed);
  default_generator().set_offset(p.generator_offset);
  run.global_step = p.global_step;
  task.resume(c);
}

std::string write_run_checkpoint(Run& run, const Task& task, bool mid_period) {
  // Only rank 0 writes (atomically: a temporary file renamed into place); every rank waits for
  // it, so a rank that loads the checkpoint next never sees a missing or partial file.
  // --zero: the optimizer's state_dict() gathers the ranks' shards, a collective every rank makes.
  std::string path = "(written by rank 0)";
  const bool gather = dynamic_cast<const parallel::ZeroRedundancyOptimizer*>(run.optimizer.get());
  const StateDict optimizer_state =
      run.dist.is_main() || gather ? run.optimizer->state_dict() : StateDict();
  if (run.dist.is_main()) {
    TrainingPosition p;
    p.global_step = run.global_step;
    p.dp_step_count = run.dp->step_count();
    p.generator_seed = default_generator().seed();
    p.generator_offset = default_generator().offset();
    p.seed = run.o.data.seed;
    p.flags = run.fingerprint;
    task.save_position(p, mid_period);
    path = write_checkpoint(run.o.checkpoint_dir, run.dp->state_dict(), optimizer_state,
                            run.scheduler ? run.scheduler->state_dict() : StateDict(), p);
  }
  if (run.dist.group && run.dist.world > 1) run.dist.group->barrier();
  return path;
}

}  // namespace lockstep::app
