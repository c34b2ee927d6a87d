// TEMPORARY: see lib_seams.h.
#include "lib_seams.h"

#if __has_include("lockstep/io/safetensors.h")
#include "lockstep/io/atomic_file.h"
#include "lockstep/io/safetensors.h"
#define LOCKSTEP_APP_HAVE_IO 1
#endif
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

#ifdef LOCKSTEP_APP_HAVE_IO
void save_tensors(const NamedTensors& tensors, const std::string& path,
                  const std::map<std::string, std::string>& metadata) {
  safetensors::save_file(tensors, path, metadata);
}
TensorFile load_tensors(const std::string& path) {
  safetensors::File f = safetensors::load_file(path);
  return {std::move(f.tensors), std::move(f.metadata)};
}
void write_file_atomic(const std::string& path, std::string_view bytes) {
  io::write_file_atomic(path, bytes);
}
std::string read_file(const std::string& path) { return io::read_file(path); }
bool is_temporary_file(const std::string& filename) { return io::is_temporary_file(filename); }
#else
void save_tensors(const NamedTensors&, const std::string&,
                  const std::map<std::string, std::string>&) {
  missing("safetensors writing");
}
TensorFile load_tensors(const std::string&) { missing("safetensors reading"); }
void write_file_atomic(const std::string&, std::string_view) { missing("io::write_file_atomic"); }
std::string read_file(const std::string&) { missing("io::read_file"); }
bool is_temporary_file(const std::string& filename) {
  return filename.find(".tmp-") != std::string::npos;
}
#endif

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
