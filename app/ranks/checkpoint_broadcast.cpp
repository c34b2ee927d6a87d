// --resume across hosts without a shared file system (see checkpoint.h): rank 0 reads the
// newest checkpoint and broadcasts its bytes.
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "files/checkpoint.h"
#include "ranks/distributed.h"
#include "lockstep/core/error.h"
#include "lockstep/io/atomic_file.h"
#include "lockstep/ops/ops.h"

namespace lockstep::app {
namespace {

// What rank 0 sends first: [outcome, path bytes, payload bytes]; the payload is the file, or
// rank 0's error message.
enum Outcome : std::int64_t { kRead = 0, kValueError = 1, kIoError = 2 };

/// Broadcasts `bytes` (rank 0's; resized to `size` elsewhere) as int64 words.
void broadcast_bytes(const DistContext& dist, std::string& bytes, std::int64_t size) {
  const std::int64_t words = (size + 7) / 8;
  Tensor t = zeros({words}, kInt64);
  if (dist.is_main()) std::memcpy(t.data_ptr<std::int64_t>(), bytes.data(), bytes.size());
  dist.group->broadcast(t, 0);
  bytes.assign(reinterpret_cast<const char*>(t.data_ptr<std::int64_t>()),
               static_cast<std::size_t>(size));
}

}  // namespace

Checkpoint read_latest_checkpoint_on_rank0(const DistContext& dist, const std::string& dir) {
  const bool alone = !dist.group || dist.world == 1;
  std::int64_t outcome = kRead;
  std::string path, payload;
  if (alone || dist.is_main()) {
    try {
      const std::optional<std::string> latest = find_latest_checkpoint(dir);
      if (!latest) throw ValueError("--resume: no checkpoint in " + dir);
      path = *latest;
      payload = io::read_file(path);
    } catch (const ValueError& e) {
      if (alone) throw;
      outcome = kValueError, payload = e.what();
    } catch (const IoError& e) {
      if (alone) throw;
      outcome = kIoError, payload = e.what();
    }
  }
  if (!alone) {
    const std::int64_t head[3] = {outcome, static_cast<std::int64_t>(path.size()),
                                  static_cast<std::int64_t>(payload.size())};
    Tensor h = tensor(std::span<const std::int64_t>(head, 3));
    dist.group->broadcast(h, 0);
    const std::vector<std::int64_t> got = h.to_vector<std::int64_t>();
    outcome = got[0];
    broadcast_bytes(dist, path, got[1]);
    broadcast_bytes(dist, payload, got[2]);
    // Every rank has rank 0's outcome before any throws (a rank that fails announces it, and
    // that notice must not overtake the broadcast).
    if (outcome != kRead) dist.group->barrier();
    const std::string from = dist.is_main() ? "" : " (on rank 0)";
    if (outcome == kValueError) throw ValueError(payload + from);
    if (outcome == kIoError) throw IoError(payload + from);
  }
  // Every rank parses the same bytes, so a malformed file fails on every rank alike.
  return parse_checkpoint(payload, path);
}

}  // namespace lockstep::app
