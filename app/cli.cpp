// The `lockstep` command line (see cli.h): CLI11 definitions, value checks with our own wording,
// and the translation of CLI11's errors into one `lockstep: error: ...` line.
#include "cli.h"

#include <unistd.h>

#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <iostream>
#include <system_error>

#include "data_source.h"
#include "lockstep/lockstep.h"
#include "lr_schedule.h"
#include "metrics.h"
#include "model_spec.h"

namespace lockstep::app {
namespace {

#ifndef LOCKSTEP_VERSION
#error "LOCKSTEP_VERSION must be defined by the build (CMake project version)"
#endif

/// "'abc'" — the value as the user typed it, quoted.
std::string single_quoted(const std::string& s) { return "'" + s + "'"; }

/// Parses all of `text` as a T with std::from_chars (decimal, no leading '+' or spaces); false
/// when any character is left over or the value overflows.
template <class T>
bool parse_all(const std::string& text, T& value) {
  const char* first = text.data();
  const char* last = first + text.size();
  auto [ptr, ec] = std::from_chars(first, last, value);
  return ec == std::errc() && ptr == last && !text.empty();
}

/// A validator from a predicate on the text; `want` describes a valid value.
CLI::Validator text_check(std::function<bool(const std::string&)> ok, const std::string& want,
                          const std::string& type_name) {
  return CLI::Validator(
      [ok, want](std::string& text) -> std::string {
        return ok(text) ? "" : "expected " + want + ", got " + single_quoted(text);
      },
      "", type_name);
}

/// A validator that runs one of our parsers (which throw lockstep::Error with the full message).
CLI::Validator parser_check(std::function<void(const std::string&)> parse,
                            const std::string& type_name) {
  return CLI::Validator(
      [parse](std::string& text) -> std::string {
        try {
          parse(text);
          return "";
        } catch (const Error& e) {
          return e.what();
        }
      },
      "", type_name);
}

CLI::Validator integer_at_least(std::int64_t min) {
  return text_check(
      [min](const std::string& t) {
        std::int64_t v = 0;
        return parse_all(t, v) && v >= min;
      },
      "an integer >= " + std::to_string(min), "INT>=" + std::to_string(min));
}

CLI::Validator any_integer() {
  return text_check(
      [](const std::string& t) {
        std::int64_t v = 0;
        return parse_all(t, v);
      },
      "an integer", "INT");
}

CLI::Validator unsigned_integer() {
  return text_check(
      [](const std::string& t) {
        std::uint64_t v = 0;
        return parse_all(t, v);
      },
      "an integer in [0, 2^64 - 1]", "UINT64");
}

/// A finite number >= 0 (or > 0 with `positive`).
CLI::Validator finite_number(bool positive) {
  return text_check(
      [positive](const std::string& t) {
        double v = 0.0;
        return parse_all(t, v) && std::isfinite(v) && (positive ? v > 0.0 : v >= 0.0);
      },
      positive ? "a finite number > 0" : "a finite number >= 0", positive ? "FLOAT>0" : "FLOAT>=0");
}

/// A number in [0, 1).
CLI::Validator fraction() {
  return text_check(
      [](const std::string& t) {
        double v = 0.0;
        return parse_all(t, v) && v >= 0.0 && v < 1.0;
      },
      "a number in [0, 1)", "[0,1)");
}

CLI::Validator one_of(std::vector<std::string> choices) {
  std::string want;
  for (std::size_t i = 0; i < choices.size(); ++i)
    want += (i == 0 ? "" : i + 1 == choices.size() ? " or " : ", ") + choices[i];
  return text_check(
      [choices](const std::string& t) {
        return std::find(choices.begin(), choices.end(), t) != choices.end();
      },
      want, "CHOICE");
}

/// "B1,B2" with both in [0, 1).
bool parse_betas(const std::string& text, double& b1, double& b2) {
  const auto comma = text.find(',');
  if (comma == std::string::npos) return false;
  return parse_all(text.substr(0, comma), b1) && parse_all(text.substr(comma + 1), b2) &&
         b1 >= 0.0 && b1 < 1.0 && b2 >= 0.0 && b2 < 1.0;
}

/// A file or directory name: anything but empty (`--save "$OUT"` with OUT unset must not
/// silently mean "no --save").
CLI::Validator file_name(const std::string& type_name) {
  return text_check([](const std::string& t) { return !t.empty(); },
                    "a " + std::string(type_name == "DIR" ? "directory" : "file") + " name",
                    type_name);
}

std::string dflt(const std::string& value) { return " (default: " + value + ")"; }

/// The part of `text` after the first occurrence of `marker`, or "" when it does not occur.
std::string after(const std::string& text, const std::string& marker) {
  auto pos = text.find(marker);
  return pos == std::string::npos ? std::string() : text.substr(pos + marker.size());
}

/// --data, --label-column, --val-fraction and --seed (shared by train and eval).
void add_data_flags(CLI::App& app, DataOptions& d) {
  app.add_option(
         "--data", d.spec,
         "Data: synthetic (the reference program's 1000x10 rows, 2 classes), "
         "fashion-mnist (" +
             std::string(
                 "Debian's dataset-fashion-mnist; validates on "
                 "its 10,000 test images), fashion-mnist:DIR, idx:TRAIN_IMAGES,TRAIN_LABELS[,"
                 "VAL_IMAGES,VAL_LABELS] (MNIST-format IDX, gzipped or not) or csv:TRAIN[,VAL] "
                 "(numeric features and an integer label column)") +
             dflt("synthetic"))
      ->check(parser_check([](const std::string& t) { parse_data_spec(t); }, "SPEC"));
  app.add_option("--label-column", d.label_column,
                 "CSV column of the integer class label, 0-based; negative counts from the end" +
                     dflt("-1, the last column"))
      ->check(any_integer());
  app.add_option_function<double>(
         "--val-fraction", [&d](double v) { d.val_fraction = v; },
         "Without a validation file, hold out the last F of the rows (floor(N*F) rows) for "
         "validation; 0 turns validation off (also for data with a validation part)" +
             dflt("0.2 for data without a validation part"))
      ->check(fraction())
      ->type_name("F");
  app.add_option("--seed", d.seed,
                 "Seed of the default generator (synthetic data, then the initial parameters), "
                 "the shuffle and the dropout masks" +
                     dflt("0"))
      ->check(unsigned_integer());
}

/// --backend, --timeout, --log-all-ranks (shared by train and eval).
void add_dist_flags(CLI::App& app, DistOptions& d) {
  app.add_option_function<std::string>(
         "--backend", [&d](const std::string& v) { d.backend = v; },
         "Process group: threads (this process alone, its devices as workers), mpi (one rank per "
         "process, under mpirun) or nccl (CUDA builds: one rank per process and GPU, rank r of a "
         "node on cuda:r; gradients over NCCL; under mpirun, whose MPI carries the small CPU "
         "exchanges, or alone as a job of one rank)" +
             dflt("mpi when started by mpirun, else threads"))
      ->check(one_of({"threads", "mpi", "nccl"}))
      ->type_name("NAME");
  app.add_option("--timeout", d.timeout,
                 "Seconds a collective waits for the other ranks before the job fails with exit "
                 "status 4 (a rank hung, stopped or died)" +
                     dflt("60"))
      ->check(finite_number(true));
  app.add_flag("--log-all-ranks", d.log_all_ranks,
               "Every rank prints its progress and summary, not only rank 0 (errors always "
               "print; mpirun --tag-output tells the ranks apart)" +
                   dflt("off"));
}

/// --model, --activation, --dropout (shared by train and eval).
void add_model_flags(CLI::App& app, ModelOptions& m) {
  app.add_option("--model", m.spec,
                 "MLP widths mlp:IN,H1,...,OUT; IN must be the data's feature count and OUT its "
                 "class count (max label + 1); mlp:IN,OUT is one Linear layer" +
                     dflt("mlp:IN,5,C for synthetic data, mlp:IN,256,C otherwise"))
      ->check(parser_check([](const std::string& t) { parse_mlp_spec(t); }, "mlp:IN,...,OUT"));
  app.add_option("--activation", m.activation,
                 "Activation after each hidden Linear: relu, tanh, sigmoid or gelu" + dflt("relu"))
      ->check(one_of({"relu", "tanh", "sigmoid", "gelu"}));
  app.add_option("--dropout", m.dropout,
                 "Dropout probability after each hidden activation; 0 adds no Dropout module "
                 "(Linear layers then sit at indices 0, 2, 4, ... of the Sequential, with "
                 "dropout at 0, 3, 6, ...)" +
                     dflt("0"))
      ->check(fraction());
}

/// Adds the `train` subcommand and its flags.
void add_train_command(CLI::App& app, CliOptions& options) {
  CLI::App* train =
      app.add_subcommand("train", "Train an MLP classifier data-parallel over the given devices");
  TrainOptions& c = options.train;
  add_data_flags(*train, c.data);
  add_model_flags(*train, c.model);
  add_dist_flags(*train, c.dist);
  train->add_option("--optimizer", c.optimizer, "sgd, adam or adamw" + dflt("sgd"))
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
          "Weight decay (L2 for sgd/adam, decoupled for adamw)" + dflt("0; 0.01 for adamw"))
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
                   "EVERY epochs) or cosine (CosineAnnealingLR, T_max = --epochs, eta_min 0)" +
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
                   "Global batch size, split over the devices; the last batch of an epoch may "
                   "be smaller" +
                       dflt("32"))
      ->check(integer_at_least(1));
  train
      ->add_option("--epochs", c.epochs,
                   "Total epochs (a resumed run continues up to this many)" + dflt("10"))
      ->check(integer_at_least(1));
  train->add_flag("--no-shuffle", c.no_shuffle,
                  "Batches in file order, last partial batch kept (otherwise a fresh permutation "
                  "each epoch from (seed, epoch))" +
                      dflt("off"));
  train->add_flag("--deterministic", c.deterministic,
                  "Bit-identical weights for any number of devices: fixed-size shards summed in "
                  "a fixed tree (slower)" +
                      dflt("off"));
  train
      ->add_option("--precision", c.precision,
                   "Compute precision of training: fp32, or bf16 = torch.autocast(dtype="
                   "torch.bfloat16) for each step's forward and loss on every device, replica "
                   "and rank (Linear layers multiply in bf16 with fp32 accumulation, backward "
                   "too; parameters, gradients and optimizer state stay fp32, and so do the "
                   "losses); validation, `lockstep eval` and saved weights stay fp32" +
                       dflt("fp32"))
      ->check(one_of({"fp32", "bf16"}));
  train->add_flag(
      "--cuda-graphs", c.cuda_graphs,
      "Capture the whole training step (forward, backward, gradient reduction, optimizer "
      "step) into a CUDA graph after two eager steps of the full batch shape and replay it; "
      "the last partial batch runs eagerly. Needs training on exactly one GPU (e.g. "
      "--devices cuda:0), fp32, no --clip-grad-norm, --accumulate-steps 1, --dropout 0, "
      "not --deterministic and not --backend nccl" +
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
  train
      ->add_option("--save", c.save,
                   "Write the final parameters (the model's state_dict, float32) as safetensors" +
                       dflt("none"))
      ->check(file_name("FILE"))
      ->type_name("FILE");
  train
      ->add_option("--checkpoint-dir", c.checkpoint_dir,
                   "After every epoch write DIR/epoch-NNNN.safetensors (model, optimizer, "
                   "scheduler, position); on SIGINT/SIGTERM a mid-epoch checkpoint" +
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
                   "val_accuracy, samples_per_second, seconds, devices, world_size); a fresh "
                   "run starts the file anew" +
                       dflt("none"))
      ->check(file_name("FILE"))
      ->type_name("FILE");
  train->add_flag("--quiet", c.quiet, "Print only the final summary line" + dflt("off"));
  for (CLI::Option* opt : train->get_options())
    opt->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  train->footer(
      "Output: on a terminal a progress bar; otherwise one line per epoch, e.g.\n"
      "  epoch 3/10 train_loss 0.4123 val_loss 0.4410 val_acc 0.8421 samples/s 51234\n"
      "(val_loss and val_acc read n/a without validation), then always the summary\n"
      "  done: 10 epochs, val_loss 0.3312 val_acc 0.8812, 41.2 s, devices=cpu:0,cpu:1 "
      "world_size=1\n"
      "Exit status: 0 success, 1 internal error, 2 usage or data error, 3 NaN/Inf training "
      "loss, 4 distributed failure, 130/143 interrupted by SIGINT/SIGTERM.");
  train->callback([&options, train] {
    options.command = Command::Train;
    TrainOptions& t = options.train;
    for (const char* flag : {"--momentum", "--dampening", "--nesterov"})
      if (train->count(flag) > 0) t.sgd_flags_given.emplace_back(flag);
    for (const char* flag : {"--betas", "--eps"})
      if (train->count(flag) > 0) t.adam_flags_given.emplace_back(flag);
  });
}

/// Adds the `eval` subcommand and its flags.
void add_eval_command(CLI::App& app, CliOptions& options) {
  CLI::App* eval = app.add_subcommand(
      "eval", "Print the loss and accuracy of saved weights on the validation data");
  EvalOptions& e = options.eval;
  add_data_flags(*eval, e.data);
  add_model_flags(*eval, e.model);
  add_dist_flags(*eval, e.dist);
  eval->add_option("--weights", e.weights,
                   "safetensors file with the model's state_dict (from --save, or PyTorch's)" +
                       dflt("none, required"))
      ->check(file_name("FILE"))
      ->type_name("FILE");
  for (CLI::Option* opt : eval->get_options())
    opt->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  eval->footer(
      "Output: `loss X accuracy Y samples N` (6 decimals) over the validation part of --data, or "
      "over all of it with --val-fraction 0 or when it has no validation part. Under mpirun "
      "every rank evaluates its own tensor_split part of the rows, each row exactly once, and the "
      "sums are reduced across ranks.\n"
      "Exit status: 0 success, 1 internal error, 2 usage or data error, 3 NaN/Inf loss (outputs "
      "overflow), 4 distributed failure.");
  eval->callback([&options] { options.command = Command::Eval; });
}

}  // namespace

namespace {

// How the OpenBLAS kernels were chosen: by OPENBLAS_CORETYPE (the user's, or set by main()'s
// restart when OpenBLAS fell back to Prescott; see lockstep/core/blas.h) or by OpenBLAS itself.
std::string openblas_coretype_note() {
  const char* set = std::getenv("OPENBLAS_CORETYPE");
  return set ? std::string(" (OPENBLAS_CORETYPE=") + set + ")"
             : std::string(" (chosen by OpenBLAS from the CPU model)");
}

}  // namespace

std::string version_text() {
  const bool mpi = dist::mpi_available();
#ifdef LOCKSTEP_HAS_CUDA
  const bool cuda = true;  // -DLOCKSTEP_CUDA=ON: cuda:k tensors, DataParallel on GPUs
#else
  const bool cuda = false;
#endif
  return std::string("lockstep ") + LOCKSTEP_VERSION +
         "\nbackends built: threads (cpu:k devices, in-process process group)" +
         (mpi ? ", mpi (one rank per process under mpirun)" : "") +
         (cuda ? ", cuda (cuda:k tensors; DataParallel over the GPUs of one process with NCCL)"
               : "") +
         (cuda ? ", nccl (--backend nccl: one process per GPU, DistributedDataParallel)" : "") +
         "\nbackends not built: " +
         (mpi ? (cuda ? "none" : "NCCL/CUDA") : (cuda ? "MPI" : "MPI, NCCL/CUDA")) +
         "\nOpenBLAS kernels: " + openblas_core() + openblas_coretype_note();
}

std::unique_ptr<CLI::App> make_cli(CliOptions& options) {
  auto app = std::make_unique<CLI::App>(
      "Lockstep: data-parallel neural-network training in C++ (PyTorch semantics).", "lockstep");
  app->set_version_flag("--version", version_text(), "Print the version and the backends built");
  app->require_subcommand(1);
  app->footer(
      "Run 'lockstep <command> --help' for a command's flags. Errors print one line "
      "'lockstep: error: ...' on stderr. Exit status: 0 success, 1 internal error, 2 usage or "
      "data error, 3 NaN/Inf training loss, 4 distributed failure, 130/143 interrupted.");
  add_train_command(*app, options);
  add_eval_command(*app, options);
  return app;
}

std::string help_command_for(const CLI::App& app) {
  for (const CLI::App* sub : app.get_subcommands({}))
    if (sub->parsed()) return app.get_name() + " " + sub->get_name() + " --help";
  return app.get_name() + " --help";
}

std::string describe_parse_error(const CLI::ParseError& error, const CLI::App& app) {
  const std::string what = error.what();
  std::string message;
  if (dynamic_cast<const CLI::ExtrasError*>(&error) != nullptr) {
    // CLI11's own message lists the arguments in reverse order; ask the app instead.
    std::vector<std::string> extras = app.remaining(true);
    std::string args;
    for (const std::string& arg : extras) args += (args.empty() ? "" : " ") + arg;
    if (args.empty()) args = after(what, "expected: ");
    message = std::string("unrecognized argument") + (extras.size() > 1 ? "s " : " ") +
              single_quoted(args);
  } else if (dynamic_cast<const CLI::RequiredError*>(&error) != nullptr &&
             what.rfind("A subcommand", 0) == 0) {
    std::vector<std::string> rest = app.remaining();
    message = rest.empty() ? "missing command: expected 'train' or 'eval'"
                           : "unknown command " + single_quoted(rest.front()) +
                                 ": expected 'train' or 'eval'";
  } else if (dynamic_cast<const CLI::RequiredError*>(&error) != nullptr) {
    message = what;  // a required option is missing
  } else if (dynamic_cast<const CLI::ArgumentMismatch*>(&error) != nullptr &&
             what.find("missing") != std::string::npos) {
    message = what.substr(0, what.find(':')) + ": expected a value";
  } else if (dynamic_cast<const CLI::ConversionError*>(&error) != nullptr) {
    std::string rest = after(what, "Could not convert: ");
    message = "invalid value " + (rest.empty() ? what : rest);
  } else {
    message = what;  // validators already speak our language: "--lr: expected ..., got '-1'"
  }
  if (!message.empty())
    message[0] = static_cast<char>(std::tolower(static_cast<unsigned char>(message[0])));
  return message + " (see '" + help_command_for(app) + "')";
}

void print_error(const std::string& message) {
  std::string line = "lockstep: error: " + message;
  for (char& ch : line)
    if (ch == '\n' || ch == '\r') ch = ' ';
  line += '\n';
  // One write: the ranks of an mpirun job share the terminal, and their lines must not interleave.
  std::cerr.flush();
  std::fflush(stderr);
  for (std::size_t done = 0; done < line.size();) {
    const ssize_t n = ::write(STDERR_FILENO, line.data() + done, line.size() - done);
    if (n <= 0) break;
    done += static_cast<std::size_t>(n);
  }
}

}  // namespace lockstep::app
