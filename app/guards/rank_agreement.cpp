// What the ranks must agree on (see rank_agreement.h).
#include "guards/rank_agreement.h"

#include <algorithm>
#include <span>
#include <sstream>
#include <vector>

#include "lockstep/lockstep.h"
#include "cli/message_text.h"

namespace lockstep::app {
namespace {

/// Every rank's `text` (all_gather of the lengths, then of the bytes padded to the longest).
std::vector<std::string> gather_strings(const DistContext& dist, const std::string& text) {
  const auto world = static_cast<std::size_t>(dist.world);
  const auto length = static_cast<std::int64_t>(text.size());
  std::vector<Tensor> lengths;
  for (std::size_t r = 0; r < world; ++r) lengths.push_back(zeros({1}, kInt64));
  dist.group->all_gather(lengths, tensor(std::span<const std::int64_t>(&length, 1)));
  std::int64_t longest = 0;
  for (const Tensor& l : lengths) longest = std::max(longest, l.to_vector<std::int64_t>()[0]);
  std::vector<std::int64_t> mine(static_cast<std::size_t>(std::max<std::int64_t>(longest, 1)), 0);
  std::copy(text.begin(), text.end(), mine.begin());
  std::vector<Tensor> all;
  for (std::size_t r = 0; r < world; ++r) all.push_back(zeros({std::int64_t(mine.size())}, kInt64));
  dist.group->all_gather(all, tensor(std::span<const std::int64_t>(mine)));
  std::vector<std::string> out;
  for (std::size_t r = 0; r < world; ++r) {
    const auto values = all[r].to_vector<std::int64_t>();
    const auto n = static_cast<std::size_t>(lengths[r].to_vector<std::int64_t>()[0]);
    out.emplace_back(values.begin(), values.begin() + static_cast<std::ptrdiff_t>(n));
  }
  return out;
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

/// "--flag=value" of `lines` for the flag of `line` (the text before '='), or "--flag not given".
std::string same_flag_in(const std::vector<std::string>& lines, const std::string& line) {
  const std::string key = line.substr(0, line.find('=') + 1);
  for (const std::string& l : lines)
    if (l.rfind(key, 0) == 0) return typed_flag(l);
  return key.substr(0, key.size() - 1) + " not given";
}

}  // namespace

std::string rank_setup(const TrainOptions& o, const std::string& fingerprint, const Tensor& train,
                       const Tensor& val, std::int64_t classes) {
  return fingerprint + "--epochs=" + std::to_string(o.epochs) +
         "\n--max-iters=" + std::to_string(o.max_iters) +
         "\n--resume=" + (o.resume ? "on" : "off") + "\n--zero=" + (o.zero ? "on" : "off") +
         "\n--checkpoint-dir=" + (o.checkpoint_dir.empty() ? "(not given)" : o.checkpoint_dir) +
         "\n--init=" + (o.init.empty() ? "(not given)" : o.init) +
         // When every rank evaluates (gpt: models: estimate_loss's collectives) and how the
         // steps run: a rank on its own schedule fails at the first evaluation.
         "\n--eval-interval=" + std::to_string(o.eval_interval) +
         "\n--eval-iters=" + std::to_string(o.eval_iters) +
         "\n--comm-overlap=" + (o.comm_overlap ? "on" : "off") +
         "\n--cuda-graphs=" + (o.cuda_graphs ? "on" : "off") +
         // The reducers' collectives (bucket sizes, wire format) must match on every rank.
         "\n--bucket-cap-mb=" + exact_string(o.bucket_cap_mb) +
         "\n--grad-compression=" + o.grad_compression +
         "\nthe training data's shape=" + train.shape().str() +
         "\nthe validation data's shape=" + (val.defined() ? val.shape().str() : "none") +
         "\nthe data's classes=" + std::to_string(classes) + "\n";
}

void check_same_on_every_rank(const DistContext& dist, const std::string& setup) {
  const std::vector<std::string> all = gather_strings(dist, setup);
  std::vector<int> differing;
  for (int r = 1; r < dist.world; ++r)
    if (all[static_cast<std::size_t>(r)] != all[0]) differing.push_back(r);
  if (differing.empty()) return;
  const int r = differing.front();
  const auto theirs = lines_of(all[static_cast<std::size_t>(r)]), zero = lines_of(all[0]);
  std::string what;
  for (const std::string& line : theirs)
    if (std::find(zero.begin(), zero.end(), line) == zero.end()) {
      what = typed_flag(line) + " on rank " + std::to_string(r) + ", " + same_flag_in(zero, line) +
             " on rank 0";
      break;
    }
  for (const std::string& line : zero)  // a line rank 0 has and rank r lacks
    if (what.empty() && std::find(theirs.begin(), theirs.end(), line) == theirs.end())
      what = same_flag_in(theirs, line) + " on rank " + std::to_string(r) + ", " +
             typed_flag(line) + " on rank 0";
  std::string ranks;
  for (int d : differing) ranks.append(ranks.empty() ? "" : ",").append(std::to_string(d));
  throw ValueError(std::string(differing.size() == 1 ? "rank " : "ranks ") + ranks +
                   " started with other training flags or data than rank 0: " + what +
                   " (every rank of an mpirun job must run the same command on the same data; "
                   "only --save, --metrics, --devices, --timeout, --quiet and --log-all-ranks "
                   "may differ)");
}

}  // namespace lockstep::app
