// --data sources (see data_source.h).
#include "data/data_source.h"

#include <cmath>

#include "lockstep/data/csv.h"
#include "lockstep/data/idx.h"
#include "lockstep/lockstep.h"

namespace lockstep::app {
namespace {

std::vector<std::string> split_commas(const std::string& text) {
  std::vector<std::string> parts;
  std::size_t pos = 0;
  while (true) {
    std::size_t comma = text.find(',', pos);
    parts.push_back(text.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos));
    if (comma == std::string::npos) return parts;
    pos = comma + 1;
  }
}

/// max label + 1 of `labels` [N] int64 (N >= 1).
std::int64_t classes_of(const Tensor& labels) {
  return static_cast<std::int64_t>(max(labels).item()) + 1;
}

}  // namespace

bool DataSpec::has_validation_part() const {
  switch (kind) {
    case Kind::Synthetic:
      return false;
    case Kind::FashionMnist:
      return true;
    case Kind::Idx:
      return paths.size() == 4;
    case Kind::Csv:
      return paths.size() == 2;
    case Kind::Text:
    case Kind::TextBytes:
      return false;
  }
  return false;
}

DataSpec parse_data_spec(const std::string& text) {
  const std::string usage =
      "expected synthetic, fashion-mnist[:DIR], idx:TRAIN_IMAGES,TRAIN_LABELS[,VAL_IMAGES,"
      "VAL_LABELS], csv:TRAIN[,VAL], text:FILE or text-bytes:FILE, got '" +
      text + "'";
  DataSpec spec;
  auto with_paths = [&](std::size_t prefix, std::initializer_list<std::size_t> counts) {
    spec.paths = split_commas(text.substr(prefix));
    bool count_ok = false;
    for (std::size_t c : counts) count_ok |= spec.paths.size() == c;
    if (!count_ok) throw ValueError(usage);
    for (const auto& p : spec.paths)
      if (p.empty()) throw ValueError(usage + " (empty file name)");
  };
  if (text == "synthetic") {
    spec.kind = DataSpec::Kind::Synthetic;
  } else if (text == "fashion-mnist") {
    spec.kind = DataSpec::Kind::FashionMnist;
    spec.paths = {data::kFashionMnistDir};
  } else if (text.rfind("fashion-mnist:", 0) == 0) {
    spec.kind = DataSpec::Kind::FashionMnist;
    spec.paths = {text.substr(14)};
    if (spec.paths[0].empty()) throw ValueError(usage + " (empty directory)");
  } else if (text.rfind("idx:", 0) == 0) {
    spec.kind = DataSpec::Kind::Idx;
    with_paths(4, {2, 4});
  } else if (text.rfind("text:", 0) == 0 || text.rfind("text-bytes:", 0) == 0) {
    const bool bytes = text.rfind("text-bytes:", 0) == 0;
    spec.kind = bytes ? DataSpec::Kind::TextBytes : DataSpec::Kind::Text;
    spec.paths = {text.substr(bytes ? 11 : 5)};
    if (spec.paths[0].empty()) throw ValueError(usage + " (empty file name)");
  } else if (text.rfind("csv:", 0) == 0) {
    spec.kind = DataSpec::Kind::Csv;
    with_paths(4, {1, 2});
  } else {
    throw ValueError(usage);
  }
  return spec;
}

void draw_synthetic(std::uint64_t seed, Tensor& x, Tensor& y) {
  manual_seed(seed);
  x = randn({1000, 10});
  y = randint(0, 2, {1000});
}

LoadedData load_data(const DataOptions& options) {
  const DataSpec spec = parse_data_spec(options.spec);
  if (options.val_fraction) {
    const double f = *options.val_fraction;
    if (!(f >= 0.0 && f < 1.0))
      throw ValueError("--val-fraction: expected a number in [0, 1), got " + std::to_string(f));
    if (spec.has_validation_part() && f != 0.0)
      throw ValueError("--val-fraction " + std::to_string(f) + ": --data " + options.spec +
                       " has its own validation part (only --val-fraction 0, validation off, "
                       "applies)");
  }

  if (spec.kind == DataSpec::Kind::Text || spec.kind == DataSpec::Kind::TextBytes)
    throw ValueError("--data " + options.spec +
                     " is a text: it trains gpt: models (--model gpt:layers=L,heads=H,embd=C,"
                     "block=T) and is sampled with lockstep generate");
  LoadedData d;
  switch (spec.kind) {
    case DataSpec::Kind::Synthetic:
      draw_synthetic(options.seed, d.train_x, d.train_y);
      d.train_name = "the synthetic data";
      d.synthetic = true;
      break;
    case DataSpec::Kind::FashionMnist: {
      auto [train, test] = data::load_mnist_dir(spec.paths[0]);
      d.train_x = train.features, d.train_y = train.labels;
      d.val_x = test.features, d.val_y = test.labels;
      d.image_size = train.image_size;
      d.train_name = spec.paths[0] + " (train-*)";
      d.val_name = spec.paths[0] + " (t10k-*)";
      break;
    }
    case DataSpec::Kind::Idx: {
      data::LabeledData train = data::read_idx(spec.paths[0], spec.paths[1]);
      d.train_x = train.features, d.train_y = train.labels;
      d.image_size = train.image_size;
      d.train_name = spec.paths[0];
      if (spec.paths.size() == 4) {
        data::LabeledData val = data::read_idx(spec.paths[2], spec.paths[3]);
        d.val_x = val.features, d.val_y = val.labels;
        d.val_name = spec.paths[2];
        if (val.image_size != train.image_size)
          throw DataError(d.val_name + ": images of " + std::to_string(val.image_size[0]) + "x" +
                          std::to_string(val.image_size[1]) + " pixels, but " + d.train_name +
                          " has " + std::to_string(train.image_size[0]) + "x" +
                          std::to_string(train.image_size[1]));
      }
      break;
    }
    case DataSpec::Kind::Csv: {
      data::LabeledData train =
          data::read_csv(spec.paths[0], {.label_column = options.label_column});
      d.train_x = train.features, d.train_y = train.labels;
      d.train_name = spec.paths[0];
      if (spec.paths.size() == 2) {
        data::LabeledData val =
            data::read_csv(spec.paths[1], {.label_column = options.label_column});
        d.val_x = val.features, d.val_y = val.labels;
        d.val_name = spec.paths[1];
      }
      break;
    }
    case DataSpec::Kind::Text:
    case DataSpec::Kind::TextBytes:
      break;  // refused above
  }

  d.features = d.train_x.size(1);
  if (d.has_validation() && d.val_x.size(1) != d.features)
    throw DataError(d.val_name + ": " + std::to_string(d.val_x.size(1)) +
                    " features per row, but " + d.train_name + " has " +
                    std::to_string(d.features));
  d.classes = classes_of(d.train_y);
  if (d.has_validation()) d.classes = std::max(d.classes, classes_of(d.val_y));

  if (options.val_fraction && *options.val_fraction == 0.0) {
    d.val_x = Tensor(), d.val_y = Tensor(), d.val_name.clear();
  } else if (!spec.has_validation_part()) {
    const double f = options.val_fraction.value_or(0.2);
    const std::int64_t n = d.train_x.size(0);
    const auto n_val = static_cast<std::int64_t>(std::floor(static_cast<double>(n) * f + 1e-9));
    if (n - n_val < 1)
      throw ValueError("--val-fraction " + std::to_string(f) + " leaves no training row of the " +
                       std::to_string(n) + " in " + d.train_name);
    if (n_val > 0) {
      d.val_x = d.train_x.narrow(0, n - n_val, n_val);
      d.val_y = d.train_y.narrow(0, n - n_val, n_val);
      d.train_x = d.train_x.narrow(0, 0, n - n_val);
      d.train_y = d.train_y.narrow(0, 0, n - n_val);
      d.val_name = "the last " + std::to_string(n_val) + " rows of " + d.train_name;
    }
  }
  return d;
}

void all_rows(const LoadedData& data, Tensor& x, Tensor& y) {
  if (!data.has_validation()) {
    x = data.train_x, y = data.train_y;
    return;
  }
  x = cat({data.train_x, data.val_x});
  y = cat({data.train_y, data.val_y});
}

}  // namespace lockstep::app
