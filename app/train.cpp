// `lockstep train`: the reference workload (see train.h), written to follow
// examples/reference_classifier.cpp step for step so both print the same numbers.
#include "train.h"

#include <cmath>
#include <cstdio>
#include <ostream>
#include <string>

namespace lockstep::app {
namespace {

// Sizes of the reference workload (the PyTorch reference program; examples/reference_classifier).
constexpr std::int64_t kRows = 1000;
constexpr std::int64_t kFeatures = 10;
constexpr std::int64_t kHidden = 5;
constexpr std::int64_t kClasses = 2;
constexpr std::int64_t kTrainRows = 800;
constexpr std::int64_t kValRows = kRows - kTrainRows;

/// The reference data set, split into its training and validation rows.
struct ReferenceData {
  Tensor x_train, y_train;  // [800, 10] float32, [800] int64
  Tensor x_val, y_val;      // [200, 10] float32, [200] int64
};

/// Draws the reference data from the default generator: features first, then labels, as the
/// reference program does (torch.randn(1000, 10), then torch.randint(0, 2, (1000,))).
ReferenceData make_reference_data() {
  Tensor x = randn({kRows, kFeatures});
  Tensor y = randint(0, kClasses, {kRows});
  return {x.narrow(0, 0, kTrainRows), y.narrow(0, 0, kTrainRows),
          x.narrow(0, kTrainRows, kValRows), y.narrow(0, kTrainRows, kValRows)};
}

/// One epoch line, formatted with printf's "%.4f" so it matches the reference program's output
/// byte for byte.
std::string epoch_line(std::int64_t epoch, double val_loss) {
  char buf[96];
  std::snprintf(buf, sizeof buf, "Epoch %lld, Validation Loss: %.4f",
                static_cast<long long>(epoch), val_loss);
  return buf;
}

}  // namespace

void validate(const TrainConfig& config) {
  if (config.epochs < 1)
    throw ValueError("train: epochs must be >= 1, got " + std::to_string(config.epochs));
  if (config.batch_size < 1)
    throw ValueError("train: batch_size must be >= 1, got " + std::to_string(config.batch_size));
  if (!std::isfinite(config.lr) || config.lr < 0.0)
    throw ValueError("train: lr must be finite and >= 0, got " + std::to_string(config.lr));
}

std::shared_ptr<nn::Sequential> make_reference_model() {
  return std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
      std::make_shared<nn::Linear>(kFeatures, kHidden),
      std::make_shared<nn::ReLU>(),
      std::make_shared<nn::Linear>(kHidden, kClasses),
  });
}

TrainSummary run_train(const TrainConfig& config, std::ostream& out) {
  validate(config);

  // Data first, then the model: both come from the default generator in this order.
  manual_seed(config.seed);
  ReferenceData data = make_reference_data();
  auto model = make_reference_model();
  parallel::DataParallelOptions dp_options;
  dp_options.deterministic = config.deterministic;
  dp_options.seed = config.seed;
  nn::DataParallel dp(model, config.devices, std::nullopt, dp_options);

  nn::CrossEntropyLoss criterion;
  optim::SGD optimizer(dp.parameters(), {.lr = config.lr});
  auto train_dataset = std::make_shared<data::TensorDataset>(data.x_train, data.y_train);
  data::DataLoader train_loader(train_dataset, {.batch_size = config.batch_size});

  TrainSummary summary;
  summary.val_losses.reserve(static_cast<std::size_t>(config.epochs));
  for (std::int64_t epoch = 0; epoch < config.epochs; ++epoch) {
    dp.train();
    for (const auto& [batch_x, batch_y] : train_loader) {
      optimizer.zero_grad();
      dp.forward_backward(batch_x, batch_y, criterion);  // the reducer path
      optimizer.step();
    }

    // Validation loss over all 200 rows at once, in eval mode and without a graph.
    dp.eval();
    double val_loss = 0.0;
    {
      no_grad guard;
      val_loss = criterion(dp.forward(data.x_val), data.y_val.to(dp.output_device())).item();
    }
    summary.val_losses.push_back(val_loss);
    out << epoch_line(epoch + 1, val_loss) << '\n' << std::flush;
  }
  return summary;
}

}  // namespace lockstep::app
