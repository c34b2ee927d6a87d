// The `lockstep train` subcommand and its own flags (see cli_flags.h).
#include <string>

#include "cli/cli_flags.h"
#include "cli/cli_validators.h"
#include "lockstep/lockstep.h"
#include "train/lr_schedule.h"
#include "train/metrics.h"

namespace lockstep::app {

void add_train_command(CLI::App& app, CliOptions& options) {
  CLI::App* train =
      app.add_subcommand("train",
                         "Train a classifier (an MLP, a layer list such as the cnn preset, "
                         "or resnet20) by epochs, or a gpt: language model on a text file by "
                         "iterations, data-parallel over the given devices");
  TrainOptions& c = options.train;
  add_data_flags(*train, c.data);
  add_model_flags(*train, c.model);
  add_dist_flags(*train, c.dist);
  train
      ->add_option(
          "--optimizer", c.optimizer,
          "sgd, adam or adamw (gpt: models: adam or adamw)" + dflt("sgd; adamw for gpt: models"))
      ->check(one_of({"sgd", "adam", "adamw"}));
  train
      ->add_option_function<double>(
          "--lr", [&c](double v) { c.lr = v; },
          "Learning rate" + dflt("0.01 for sgd, 0.001 for adam/adamw"))
      ->check(finite_number(false))
      ->type_name("FLOAT>=0");
  train->add_option("--momentum", c.momentum, "SGD momentum" + dflt("0"))
      ->check(finite_number(false));
  train->add_option("--dampening", c.dampening, "SGD dampening" + dflt("0"))
      ->check(finite_number(false));
  train->add_flag("--nesterov", c.nesterov,
                  "SGD Nesterov momentum (needs --momentum > 0 and --dampening 0)" + dflt("off"));
  train
      ->add_option_function<double>(
          "--weight-decay", [&c](double v) { c.weight_decay = v; },
          "Weight decay (L2 for sgd/adam, decoupled for adamw; with gpt: models on the tensors "
          "with >= 2 dimensions only, nanoGPT's groups)" +
              dflt("0; 0.01 for adamw"))
      ->check(finite_number(false))
      ->type_name("FLOAT>=0");
  train
      ->add_option_function<std::string>(
          "--betas", [&c](const std::string& t) { parse_betas(t, c.beta1, c.beta2); },
          "Adam/AdamW betas B1,B2" + dflt("0.9,0.999"))
      ->check(text_check(
          [](const std::string& t) {
            double a = 0, b = 0;
            return parse_betas(t, a, b);
          },
          "B1,B2 with both in [0, 1)", "B1,B2"))
      ->type_name("B1,B2");
  train->add_option("--eps", c.eps, "Adam/AdamW eps" + dflt("1e-08"))->check(finite_number(false));
  train
      ->add_option("--lr-schedule", c.lr_schedule,
                   "Per-epoch LR schedule: constant, step:EVERY:GAMMA (StepLR: lr x GAMMA every "
                   "EVERY epochs) or cosine (CosineAnnealingLR, T_max = --epochs, eta_min 0); "
                   "with gpt: models constant or cosine = nanoGPT's get_lr per iteration "
                   "(--warmup-iters, --min-lr, --lr-decay-iters)" +
                       dflt("constant"))
      ->check(parser_check([](const std::string& t) { parse_lr_schedule(t); }, "SCHEDULE"));
  train
      ->add_option_function<double>(
          "--clip-grad-norm", [&c](double v) { c.clip_grad_norm = v; },
          "Clip the all-reduced gradient to this total 2-norm (clip_grad_norm_)" + dflt("off"))
      ->check(finite_number(true))
      ->type_name("MAX");
  train
      ->add_option("--accumulate-steps", c.accumulate_steps,
                   "Batches whose gradients are summed before one optimizer step (the last "
                   "group of an epoch may be shorter)" +
                       dflt("1"))
      ->check(integer_at_least(1));
  train
      ->add_option("--batch-size", c.batch_size,
                   "Global batch size, split over the devices (and ranks); the last batch of an "
                   "epoch may be smaller; gpt: models: random windows of block + 1 tokens per "
                   "step" +
                       dflt("32"))
      ->check(integer_at_least(1));
  train
      ->add_option("--epochs", c.epochs,
                   "Total epochs (a resumed run continues up to this many); refused with gpt: "
                   "models (see --max-iters)" +
                       dflt("10"))
      ->check(integer_at_least(1));
  train->add_flag("--no-shuffle", c.no_shuffle,
                  "Batches in file order, last partial batch kept (otherwise a fresh permutation "
                  "each epoch from (seed, epoch))" +
                      dflt("off"));
  train->add_flag("--deterministic", c.deterministic,
                  "Bit-identical weights for any number of devices: fixed-size shards summed in "
                  "a fixed tree (slower)" +
                      dflt("off"));
  // --sync-bn / --no-sync-bn: the last one given wins (read from the parse order in the
  // callback below), so a flag appended to scripts/run.sh's overrides the script's.
  const std::string sync_bn_help =
      "Every BatchNorm of the model becomes a SyncBatchNorm (convert_sync_batchnorm): training "
      "statistics over the whole global batch, on every device and rank; state_dict keys "
      "unchanged. No effect on a model without BatchNorm" +
      dflt(
          "automatic: SyncBatchNorm when more than one device or rank trains or with "
          "--deterministic, else BatchNorm (the same on one device)");
  const std::string no_sync_bn_help =
      "PyTorch's per-device BatchNorm: each device (and rank) normalizes its own chunk with its "
      "own statistics, so 1 and N devices train differently; --deterministic then refuses the "
      "model (exit 2)" +
      dflt("automatic, see --sync-bn");
  CLI::Option* sync_bn = train->add_flag("--sync-bn")->description(sync_bn_help);
  CLI::Option* no_sync_bn = train->add_flag("--no-sync-bn")->description(no_sync_bn_help);
  train
      ->add_option("--precision", c.precision,
                   "Compute precision of training: fp32, or bf16 = torch.autocast(dtype="
                   "torch.bfloat16) for each step's forward and loss on every device, replica "
                   "and rank (Linear layers multiply in bf16 with fp32 accumulation, backward "
                   "too; parameters, gradients and optimizer state stay fp32, and so do the "
                   "losses); validation, `lockstep eval` and saved weights stay fp32" +
                       dflt("fp32"))
      ->check(one_of({"fp32", "bf16"}));
  train
      ->add_option_function<std::string>(
          "--comm-overlap", [&c](const std::string& v) { c.comm_overlap = v == "on"; },
          "on: each gradient bucket's reduction starts during backward, as soon as the bucket "
          "is ready, and is waited for just before the optimizer step (PyTorch DDP's overlap); "
          "off: every bucket is reduced after backward. The same bits either way" +
              dflt("on"))
      ->check(one_of({"on", "off"}))
      ->type_name("on|off");
  train
      ->add_option("--bucket-cap-mb", c.bucket_cap_mb,
                   "Gradient bucket capacity in MB (2^20 bytes; DDP's bucket_cap_mb): gradients "
                   "are reduced in buckets of at most this size, in reverse parameter order; "
                   "the run's header says how many" +
                       dflt("25"))
      ->check(bucket_megabytes());
  train
      ->add_option("--grad-compression", c.grad_compression,
                   "Gradient compression: none, or bf16 = PyTorch's bf16_compress_hook (each "
                   "gradient bucket is rounded to bfloat16 for the reduction, summed in float32, "
                   "rounded, widened back: half the bytes on the wire); refused with "
                   "--deterministic" +
                       dflt("none"))
      ->check(one_of({"none", "bf16"}));
  train->add_flag(
      "--cuda-graphs", c.cuda_graphs,
      "Capture the whole training step (forward, backward, gradient reduction, optimizer "
      "step) into a CUDA graph after two eager steps of the full batch shape and replay it; "
      "the last partial batch runs eagerly. Needs training on exactly one GPU (e.g. "
      "--devices cuda:0), fp32, no --clip-grad-norm, --accumulate-steps 1, --dropout 0, "
      "not --deterministic and not --backend nccl" +
          dflt("off"));
  train->add_flag(
      "--zero", c.zero,
      "ZeRO-1 (PyTorch's ZeroRedundancyOptimizer) under mpirun: each rank keeps the optimizer "
      "state (momentum buffers, Adam's moments) of 1/ranks of the parameters, updates that "
      "shard and all-gathers the updated parameters; same results (bit for bit with "
      "--deterministic), same checkpoints. One process: the plain optimizer (nothing to "
      "shard). Not with --cuda-graphs" +
          dflt("off"));
  train
      ->add_option_function<std::string>(
          "--devices",
          [&c](const std::string& list) {
            try {
              c.devices = parallel::parse_devices(list);
              for (const Device& d : c.devices) check_device_available(d);
            } catch (const DeviceError& e) {
              throw DeviceError(std::string("--devices: ") + e.what());
            } catch (const ValueError& e) {
              throw ValueError(std::string("--devices: ") + e.what());
            }
          },
          "Comma-separated devices to replicate the model on, e.g. cpu:0,cpu:1 or cuda:0,cuda:1 "
          "(cpu:k is a logical CPU worker, any k >= 0; cuda:k a visible GPU; not both kinds); "
          "under mpirun each rank's own devices (one GPU per rank: --backend nccl, which picks "
          "it)" +
              dflt("every GPU if there is one, else one CPU device per usable core: " +
                   device_list(parallel::default_devices()) +
                   " here; cpu:0 per rank under "
                   "mpirun; cuda:LOCAL_RANK with --backend nccl"))
      ->type_name("LIST");
  train
      ->add_option("--init", c.init,
                   "Initial parameters: a safetensors file with exactly the model's state_dict "
                   "(e.g. PyTorch's safetensors.torch.save_file(model.state_dict()))" +
                       dflt("none: PyTorch's Linear init from --seed"))
      ->check(file_name("FILE"))
      ->type_name("FILE");
  train->add_flag("--torch-init", c.torch_init,
                  "Draw the initial parameters as PyTorch does after torch.manual_seed(--seed): "
                  "the model built from PyTorch's mt19937 generator, so an mlp: model starts "
                  "from the weights of PyTorch's nn.Sequential of the same layers (data, "
                  "shuffling and dropout keep Lockstep's streams)" +
                      dflt("off: Lockstep's Philox generator"));
  train
      ->add_option("--save", c.save,
                   "Write the final parameters (the model's state_dict, float32) as safetensors" +
                       dflt("none"))
      ->check(file_name("FILE"))
      ->type_name("FILE");
  train
      ->add_option(
          "--checkpoint-dir", c.checkpoint_dir,
          "After every epoch write DIR/epoch-NNNN.safetensors (model, optimizer, "
          "scheduler, position); on SIGINT/SIGTERM/SIGHUP a mid-epoch checkpoint; gpt: models: "
          "DIR/iter-NNNNNN.safetensors at every evaluation and on SIGINT/SIGTERM/SIGHUP, with "
          "the vocabulary and model in its metadata. A fresh run refuses a DIR that holds "
          "checkpoints (use --resume or a new DIR); one run at a time (a lock)" +
              dflt("none"))
      ->check(file_name("DIR"))
      ->type_name("DIR");
  train->add_flag("--resume", c.resume,
                  "Continue from the newest checkpoint in --checkpoint-dir (same flags; the "
                  "result is bit-identical to an uninterrupted run on the same devices)" +
                      dflt("off"));
  train
      ->add_option("--metrics", c.metrics,
                   "Append one JSON object per epoch (epoch, train_loss, val_loss, "
                   "val_accuracy, samples_per_second, seconds, devices, world_size), for gpt: "
                   "models per evaluation (iter, train_loss, val_loss, tokens_per_second, lr, "
                   "devices, world_size); a fresh run starts the file anew" +
                       dflt("none"))
      ->check(file_name("FILE"))
      ->type_name("FILE");
  train->add_flag("--quiet", c.quiet, "Print only the final summary line" + dflt("off"));
  add_iteration_flags(*train, c);
  for (CLI::Option* opt : train->get_options())
    opt->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  train->footer(
      "Output: on a terminal a progress bar; otherwise one line per epoch, e.g.\n"
      "  epoch 3/10 train_loss 0.4123 val_loss 0.4410 val_acc 0.8421 samples/s 51234\n"
      "(val_loss and val_acc read n/a without validation), then always the summary\n"
      "  done: 10 epochs, val_loss 0.3312 val_acc 0.8812, 41.2 s, devices=cpu:0,cpu:1 "
      "world_size=1\n"
      "gpt: models (--data text:FILE or text-bytes:FILE, --model gpt:layers=L,heads=H,embd=C,"
      "block=T[,bias=true,dropout=P]) train by iterations: one line per evaluation, e.g.\n"
      "  iter 250/5000 train_loss 1.9812 val_loss 2.0511 lr 0.000994 tokens/s 9123\n"
      "then the summary\n"
      "  done: 5000 iterations, val_loss 1.4403, 512.3 s, tokens/s 9870, devices=cpu:0,cpu:1 "
      "world_size=1\n"
      "Exit status: 0 success, 1 internal error, 2 usage or data error, 3 NaN/Inf training "
      "loss, 4 distributed failure, 129/130/143 interrupted by SIGHUP/SIGINT/SIGTERM.");
  train->callback([&options, train, sync_bn, no_sync_bn] {
    options.command = Command::Train;
    TrainOptions& t = options.train;
    for (const CLI::Option* opt : train->parse_order())
      if (opt == sync_bn || opt == no_sync_bn)  // (--sync-bn=false reads as --no-sync-bn)
        t.sync_bn = opt == sync_bn ? sync_bn->as<bool>() : !no_sync_bn->as<bool>();
    for (const char* flag : {"--momentum", "--dampening", "--nesterov"})
      if (train->count(flag) > 0) t.sgd_flags_given.emplace_back(flag);
    for (const char* flag : {"--betas", "--eps"})
      if (train->count(flag) > 0) t.adam_flags_given.emplace_back(flag);
    record_given_flags(*train, t);
  });
}

}  // namespace lockstep::app
