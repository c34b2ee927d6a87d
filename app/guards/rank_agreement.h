// What the ranks of an mpirun job must agree on before training (issue 23): a flag given to one
// rank only (--checkpoint-dir) trained a whole epoch and then failed with "different
// collectives" (exit 4). Every flag that changes what the ranks do is compared at start-up, and
// the message names the flag and both values. Flags that may differ: --save and --metrics (rank
// 0 alone writes them), --devices (each rank's own devices), --timeout, --quiet and
// --log-all-ranks (each rank's own waiting and printing).
#pragma once

#include <string>

#include "data/data_source.h"
#include "ranks/distributed.h"
#include "cli/options.h"

namespace lockstep::app {

/// The setup every rank must share, one `--flag=value` line each: `fingerprint` (the flags that
/// shape the trajectory, train/resume.cpp), --epochs, --max-iters, --resume, --checkpoint-dir,
/// --init, --eval-interval, --eval-iters, --comm-overlap, --cuda-graphs and the data's shapes and classes: `train` and `val` are the training and validation
/// inputs (a gpt: model's token streams; `val` undefined without validation), `classes` the
/// classes or the vocabulary size.
std::string rank_setup(const TrainOptions& o, const std::string& fingerprint, const Tensor& train,
                       const Tensor& val, std::int64_t classes);

/// Across the ranks of `dist` (a collective: all_gather of every rank's `setup`): ValueError on
/// every rank unless all equal rank 0's, naming the ranks that differ and, for the first, the
/// first line that differs with its value there and on rank 0.
void check_same_on_every_rank(const DistContext& dist, const std::string& setup);

}  // namespace lockstep::app
