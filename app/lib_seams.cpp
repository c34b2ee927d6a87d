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
#if __has_include("lockstep/optim/lr_scheduler.h") && __has_include("lockstep/nn/utils.h")
#include "lockstep/nn/utils.h"
#include "lockstep/optim/lr_scheduler.h"
#define LOCKSTEP_APP_HAVE_TRAIN_UTILS 1
#endif

namespace lockstep::app::seams {
namespace {
[[noreturn]] void missing(const std::string& what) {
  throw Error(what + " is not built yet (its library piece is not merged)");
}

template <class DP>
std::uint64_t step_count_of(const DP& dp) {
  if constexpr (requires { dp.step_count(); }) {
    return dp.step_count();
  } else {
    missing("DataParallel::step_count");
  }
}
template <class DP>
void set_step_count_of(DP& dp, std::uint64_t step) {
  if constexpr (requires { dp.set_step_count(step); }) {
    dp.set_step_count(step);
  } else {
    missing("DataParallel::set_step_count");
  }
}

#ifdef LOCKSTEP_APP_HAVE_READERS
Labeled from(data::LabeledData d) { return {std::move(d.features), std::move(d.labels)}; }
#endif

#ifdef LOCKSTEP_APP_HAVE_TRAIN_UTILS
class Wrapped : public Scheduler {
 public:
  explicit Wrapped(std::unique_ptr<optim::LRScheduler> s) : s_(std::move(s)) {}
  void step() override { s_->step(); }
  StateDict state_dict() const override { return s_->state_dict(); }
  void load_state_dict(const StateDict& state) override { s_->load_state_dict(state); }

 private:
  std::unique_ptr<optim::LRScheduler> s_;
};
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

#ifdef LOCKSTEP_APP_HAVE_TRAIN_UTILS
std::unique_ptr<Scheduler> make_step_lr(optim::Optimizer& optimizer, std::int64_t every,
                                        double gamma) {
  return std::make_unique<Wrapped>(std::make_unique<optim::StepLR>(optimizer, every, gamma));
}
std::unique_ptr<Scheduler> make_cosine_lr(optim::Optimizer& optimizer, std::int64_t t_max) {
  return std::make_unique<Wrapped>(std::make_unique<optim::CosineAnnealingLR>(optimizer, t_max));
}
double clip_grad_norm(const std::vector<Tensor>& parameters, double max_norm) {
  return nn::utils::clip_grad_norm_(parameters, max_norm);
}
#else
std::unique_ptr<Scheduler> make_step_lr(optim::Optimizer&, std::int64_t, double) {
  missing("StepLR");
}
std::unique_ptr<Scheduler> make_cosine_lr(optim::Optimizer&, std::int64_t) {
  missing("CosineAnnealingLR");
}
double clip_grad_norm(const std::vector<Tensor>&, double) { missing("clip_grad_norm_"); }
#endif

std::uint64_t step_count(const parallel::DataParallel& dp) { return step_count_of(dp); }
void set_step_count(parallel::DataParallel& dp, std::uint64_t step) { set_step_count_of(dp, step); }

}  // namespace lockstep::app::seams
