// TEMPORARY: see lib_seams.h.
#include "lib_seams.h"

#if __has_include("lockstep/data/csv.h") && __has_include("lockstep/data/idx.h")
#include "lockstep/data/csv.h"
#include "lockstep/data/idx.h"
#define LOCKSTEP_APP_HAVE_READERS 1
#endif

namespace lockstep::app::seams {
namespace {
[[noreturn]] void missing(const std::string& what) {
  throw Error(what + " is not built yet (its library piece is not merged)");
}

#ifdef LOCKSTEP_APP_HAVE_READERS
Labeled from(data::LabeledData d) { return {std::move(d.features), std::move(d.labels)}; }
#endif

}  // namespace

#ifdef LOCKSTEP_APP_HAVE_READERS
Labeled read_csv(const std::string& path, std::int64_t label_column) {
  return from(data::read_csv(path, {.label_column = label_column}));
}
Labeled read_idx(const std::string& images, const std::string& labels) {
  return from(data::read_idx(images, labels));
}
std::pair<Labeled, Labeled> load_mnist_dir(const std::string& dir) {
  data::TrainTest tt = data::load_mnist_dir(dir);
  return {from(std::move(tt.train)), from(std::move(tt.test))};
}
std::string fashion_mnist_dir() { return data::kFashionMnistDir; }
#else
Labeled read_csv(const std::string&, std::int64_t) { missing("the CSV reader"); }
Labeled read_idx(const std::string&, const std::string&) { missing("the IDX reader"); }
std::pair<Labeled, Labeled> load_mnist_dir(const std::string&) { missing("the IDX reader"); }
std::string fashion_mnist_dir() { return "/usr/share/datasets/fashion-mnist"; }
#endif

}  // namespace lockstep::app::seams
