// `lockstep train`: the training job behind the CLI, free of command-line parsing so it can be
// called as a plain function.
//
// One run loop (trainer.cpp) over a task (task.h). The classifier task (classifier_task.cpp):
// the data (data/data_source.h) feeds an MLP, a layer list or resnet20 (model/model_spec.h)
// wrapped in parallel::DataParallel over the chosen devices and trained through its reducer path
// (forward_backward with cross-entropy: each replica's loss on its own chunk, gradients
// all-reduced in buckets during backward); optimizer SGD/Adam/AdamW, an optional per-epoch LR
// schedule, gradient accumulation and clipping. Batches come from data::DataLoader, reshuffled
// every epoch from (seed, epoch) unless --no-shuffle (file order, last partial batch kept).
//
// The language-model task (language_model_task.cpp): a gpt: model (model/gpt_spec.h) on --data
// text:FILE / text-bytes:FILE (data/text_data.h) trains by iterations instead: random windows of
// the text each step, nanoGPT's loss, AdamW with weight-decay groups, nanoGPT's warmup + cosine
// schedule per iteration, an evaluation, a --metrics line and a checkpoint every --eval-interval
// steps.
//
// With the defaults (synthetic data, --no-shuffle) it is the reference program
// (examples/reference_classifier): manual_seed(seed), the data drawn first, then the
// Linear(10,5)-ReLU-Linear(5,2) model, SGD lr 0.01, batch 32, 10 epochs.
#pragma once

#include <iosfwd>

#include "cli/options.h"

namespace lockstep::app {

/// Runs the job. Writes the epoch lines or the progress bar (progress.h, unless
/// options.quiet) and finally the summary line (metrics.h) to `out`; --metrics, --save and
/// --checkpoint-dir files as documented in options.h and checkpoint.h.
///
/// Throws ValueError (inconsistent flags, model does not fit the data), IoError / DataError
/// (unreadable or malformed data, --init or checkpoint file), StateDictError (--init or
/// checkpoint does not fit the model), DeviceError (unavailable device), NonFiniteLossError (a
/// NaN/Inf training loss, before the optimizer step that would use it; nothing is written for
/// that state), Interrupted (SIGINT/SIGTERM, see signals.h; a checkpoint of the position reached
/// is written first when --checkpoint-dir is set).
void run_train(const TrainOptions& options, std::ostream& out);

}  // namespace lockstep::app
