// The flags `lockstep train` and `lockstep eval` share (see cli_flags.h): data, model and
// process group.
#include <string>

#include "cli/cli_flags.h"
#include "cli/cli_validators.h"
#include "data/data_source.h"
#include "model/model_spec.h"

namespace lockstep::app {

void add_data_flags(CLI::App& app, DataOptions& d) {
  app.add_option(
         "--data", d.spec,
         "Data: synthetic (the reference program's 1000x10 rows, 2 classes), "
         "fashion-mnist (" +
             std::string(
                 "Debian's dataset-fashion-mnist; validates on "
                 "its 10,000 test images), fashion-mnist:DIR, idx:TRAIN_IMAGES,TRAIN_LABELS[,"
                 "VAL_IMAGES,VAL_LABELS] (MNIST-format IDX, gzipped or not) or csv:TRAIN[,VAL] "
                 "(numeric features and an integer label column); for gpt: models text:FILE "
                 "(UTF-8 characters) or text-bytes:FILE (any bytes)") +
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
             dflt("0.2 for data without a validation part, 0.1 for text (the last 10 % of the "
                  "tokens)"))
      ->check(fraction())
      ->type_name("F");
  app.add_option("--seed", d.seed,
                 "Seed of the default generator (synthetic data, then the initial parameters), "
                 "the shuffle, the dropout masks and a gpt: model's windows" +
                     dflt("0"))
      ->check(unsigned_integer());
}

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

void add_model_flags(CLI::App& app, ModelOptions& m) {
  app.add_option("--model", m.spec,
                 "MLP widths mlp:IN,H1,...,OUT (IN must be the data's feature count and OUT its "
                 "class count, max label + 1; mlp:IN,OUT is one Linear layer); or layers in "
                 "PyTorch's spelling, e.g. \"Conv2d(1,16,3,padding=1) BatchNorm2d(16) ReLU "
                 "MaxPool2d(2) Flatten Linear(3136,10)\" (docs/cli.md's grammar); @FILE reads "
                 "them from a file; cnn is the main job's CNN for 28x28 images; resnet20 is "
                 "ResNet-20 (He et "
                 "al. 2016's CIFAR ResNet with torchvision's names, nn::resnet20) for images of "
                 "any size, input channels from the data, 10 classes; "
                 "gpt:layers=L,heads=H,embd=C,block=T[,bias=true,dropout=P] is nanoGPT's GPT "
                 "for text data (--data text:FILE), trained by iterations (--max-iters)" +
                     dflt("mlp:IN,5,C for synthetic data, mlp:IN,256,C otherwise"))
      ->check(parser_check(
          [](const std::string& t) {
            try {
              parse_model_spec(t);
            } catch (const Error& e) {
              // CLI11 puts "--model: " in front already: the spec's own prefix goes.
              std::string m = e.what();
              if (m.rfind("--model: ", 0) == 0) m.erase(0, 9);
              if (m.rfind("--model ", 0) == 0) m.erase(0, 8);
              throw ValueError(m);
            }
          },
          "MODEL"));
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

}  // namespace lockstep::app
