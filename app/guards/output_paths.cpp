// The output paths of `lockstep train` (see output_paths.h).
#include "guards/output_paths.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <optional>
#include <regex>
#include <string>
#include <vector>

#include "files/checkpoint.h"
#include "data/data_source.h"
#include "lockstep/core/error.h"
#include "lockstep/io/atomic_file.h"
#include "cli/message_text.h"
#include "files/weights.h"

namespace lockstep::app {
namespace {

namespace fs = std::filesystem;

/// write_target(path), with an IoError (a loop of links) prefixed by the flag.
std::string target_of(const std::string& flag, const std::string& path) {
  try {
    return io::write_target(path);
  } catch (const IoError& e) {
    throw IoError(flag + " " + e.what());
  }
}

/// The directory a write to `path` lands in (after following links).
std::string directory_of_target(const std::string& flag, const std::string& path) {
  const fs::path p(target_of(flag, path));
  return p.has_parent_path() ? p.parent_path().string() : ".";
}

/// IoError naming `shown` unless a file can be created, written and synced in `dir`: catches a
/// read-only file system, a full one and a directory the user may not write. The probe has a
/// temporary's name (io::is_temporary_file), so one left by a crash is cleaned up like others.
void probe_writable(const std::string& shown, const std::string& dir) {
  const std::string probe =
      dir + "/.lockstep-probe.tmp-" + std::to_string(static_cast<long>(::getpid())) + "-0";
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  int err = fd < 0 ? errno : 0;
  if (fd >= 0) {
    if (::write(fd, "x", 1) != 1 || ::fsync(fd) != 0) err = errno;
    ::close(fd);
    ::unlink(probe.c_str());
  }
  if (err != 0)
    throw IoError(shown + ": cannot write in " + dir + ": " + std::strerror(err) +
                  " (checked before training)");
}

/// Which file `path` is: (device, inode) when it exists, else its absolute path with links and
/// dot segments resolved.
struct FileIdentity {
  bool exists = false;
  dev_t dev = 0;
  ino_t ino = 0;
  std::string canonical;
  bool operator==(const FileIdentity& o) const {
    return exists && o.exists ? dev == o.dev && ino == o.ino : canonical == o.canonical;
  }
};

/// The identity of the file a read or a write of `path` lands on: a symbolic link is followed to
/// the end of its chain, also when that end does not exist yet (a write creates it there), and
/// dot segments are resolved after the links they follow (as the kernel does).
FileIdentity identify(const std::string& path) {
  FileIdentity id;
  std::string target = path;
  try {
    target = io::write_target(path);
  } catch (const IoError&) {  // a loop of links: check_output_path reports it
  }
  struct stat st {};
  if (::stat(target.c_str(), &st) == 0) id.exists = true, id.dev = st.st_dev, id.ino = st.st_ino;
  std::error_code ec;
  id.canonical = fs::weakly_canonical(fs::absolute(target, ec), ec).string();
  return id;
}

struct NamedPath {
  std::string flag, path;
};

/// Every file the run reads, with the flag that names it: --init, the --data files (those inside
/// a fashion-mnist directory too, under each name the reader tries, and the directory itself),
/// the --model @FILE and, with --resume, the checkpoint it resumes.
std::vector<NamedPath> run_inputs(const TrainOptions& o) {
  std::vector<NamedPath> inputs;
  if (!o.init.empty()) inputs.push_back({"--init", o.init});
  try {
    const DataSpec spec = parse_data_spec(o.data.spec);
    for (const std::string& p : spec.paths) {
      inputs.push_back({"--data", p});
      if (spec.kind == DataSpec::Kind::FashionMnist)
        for (const char* name : {"train-images-idx3-ubyte", "train-labels-idx1-ubyte",
                                 "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"})
          for (const std::string& file : {std::string(name), std::string(name) + ".gz"})
            inputs.push_back({"--data", (fs::path(p) / file).string()});
    }
  } catch (const Error&) {  // a bad --data is reported, with its own message, when it loads
  }
  if (o.model.spec.size() > 1 && o.model.spec.front() == '@')
    inputs.push_back({"--model", o.model.spec.substr(1)});
  if (o.resume && !o.checkpoint_dir.empty()) {
    try {
      if (const auto latest = find_latest_checkpoint(o.checkpoint_dir))
        inputs.push_back({"--resume", *latest});
    } catch (const Error&) {  // reported, with its own message, when the run resumes
    }
  }
  return inputs;
}

void check_room(const std::string& shown, const std::string& dir, std::uint64_t bytes) {
  struct statvfs vfs {};
  if (::statvfs(dir.c_str(), &vfs) != 0) return;  // probe_writable already reported real trouble
  const std::uint64_t free_bytes = static_cast<std::uint64_t>(vfs.f_bavail) * vfs.f_frsize;
  if (free_bytes < bytes)
    throw IoError(shown + ": needs about " + human_bytes(static_cast<long double>(bytes)) +
                  ", the file system of " + dir + " has " +
                  human_bytes(static_cast<long double>(free_bytes)) +
                  " free (checked before training)");
}

}  // namespace

void check_output_path(const std::string& flag, const std::string& path) {
  if (path.empty()) return;
  // /dev/stdout, /dev/fd/N, /proc/self/fd/N (or a link through them) name a stream this process
  // was given, not a file: a redirected file would be replaced (outputs are replaced atomically)
  // and a pipe cannot be.
  std::string step = path;
  for (int links = 0; links < 40; ++links) {
    static const std::regex stream(R"(^/(dev/(stdin|stdout|stderr|fd/.*)|proc/[^/]+/fd/.*)$)");
    if (std::regex_match(step, stream))
      throw IoError(flag + " " + path + ": names a standard stream or file descriptor (" + step +
                    "), not a file: lockstep replaces its outputs atomically, which would replace "
                    "a redirected file and cannot write a pipe; give a file path");
    std::error_code ec;
    if (!fs::is_symlink(step, ec)) break;
    const fs::path next = fs::read_symlink(step, ec);
    if (ec) break;
    step = (next.is_absolute() ? next : fs::path(step).parent_path() / next).string();
  }
  const std::string target = target_of(flag, path);
  const std::string shown =
      flag + " " + path + (target == path ? "" : " (a link to " + target + ")");
  const std::string kind = io::non_regular_kind(target);
  if (kind == "a directory") throw IoError(shown + ": is a directory");
  if (!kind.empty())
    throw IoError(shown + ": is " + kind +
                  "; lockstep writes its outputs as regular files (replaced atomically), never "
                  "through a device, FIFO or socket: give a file path");
  std::error_code ec;
  const fs::path p(target);
  const fs::path dir = p.has_parent_path() ? p.parent_path() : fs::path(".");
  if (!fs::is_directory(dir, ec))
    throw IoError(shown + ": directory " + dir.string() + " does not exist");
}

void check_output_dir(const std::string& flag, const std::string& dir) {
  if (dir.empty()) return;
  std::error_code ec;
  if (fs::exists(dir, ec) && !fs::is_directory(dir, ec))
    throw IoError(flag + " " + dir + ": not a directory");
}

void check_outputs(const TrainOptions& o) {
  check_output_path("--save", o.save);
  check_output_path("--metrics", o.metrics);
  check_output_dir("--checkpoint-dir", o.checkpoint_dir);
  for (const NamedPath& out : {NamedPath{"--save", o.save}, NamedPath{"--metrics", o.metrics}})
    if (!out.path.empty())
      probe_writable(out.flag + " " + out.path, directory_of_target(out.flag, out.path));
  if (!o.checkpoint_dir.empty()) {
    // The directory, or where it will be created (CheckpointDirLock creates it right before
    // training, so a run refused for its data leaves nothing behind).
    fs::path dir = target_of("--checkpoint-dir", o.checkpoint_dir);
    std::error_code ec;
    while (!fs::exists(dir, ec) && dir.has_parent_path() && dir.parent_path() != dir)
      dir = dir.parent_path();
    if (dir.empty() || !fs::exists(dir, ec)) dir = ".";
    probe_writable("--checkpoint-dir " + o.checkpoint_dir, dir.string());
  }

  // The same file twice: an output over another output or over an input.
  const std::vector<NamedPath> inputs = run_inputs(o);
  std::vector<NamedPath> outputs;
  for (const NamedPath& out : {NamedPath{"--save", o.save}, NamedPath{"--metrics", o.metrics},
                               NamedPath{"--checkpoint-dir", o.checkpoint_dir}})
    if (!out.path.empty()) outputs.push_back(out);
  // An output inside --checkpoint-dir under a checkpoint's name would be overwritten by a
  // checkpoint (or taken for one by --resume).
  if (!o.checkpoint_dir.empty()) {
    const FileIdentity dir = identify(o.checkpoint_dir);
    for (const NamedPath& out : outputs) {
      if (out.flag == "--checkpoint-dir") continue;
      const fs::path target(target_of(out.flag, out.path));
      const std::string name = target.filename().string();
      if ((name.rfind("epoch-", 0) == 0 || name.rfind("iter-", 0) == 0) &&
          identify(target.has_parent_path() ? target.parent_path().string() : ".") == dir)
        throw ValueError(out.flag + " " + out.path + " lies in --checkpoint-dir " +
                         o.checkpoint_dir + " under a checkpoint's name (" + name +
                         "): a checkpoint would overwrite it; give another path");
    }
  }
  for (std::size_t i = 0; i < outputs.size(); ++i) {
    const FileIdentity id = identify(outputs[i].path);
    std::vector<NamedPath> others(outputs.begin() + static_cast<std::ptrdiff_t>(i) + 1,
                                  outputs.end());
    others.insert(others.end(), inputs.begin(), inputs.end());
    for (const NamedPath& other : others) {
      // Training in place (--save the --init file) is safe: the file is replaced atomically.
      if (outputs[i].flag == "--save" && other.flag == "--init") continue;
      if (identify(other.path) == id)
        throw ValueError(outputs[i].flag + " " + outputs[i].path + " is the same file as " +
                         other.flag + " " + other.path +
                         ": one would overwrite the other; give another path");
    }
  }
}

void check_output_space(const TrainOptions& o, std::uint64_t weights_bytes,
                        std::uint64_t checkpoint_bytes) {
  if (!o.save.empty())
    check_room("--save " + o.save, directory_of_target("--save", o.save), weights_bytes);
  if (!o.checkpoint_dir.empty())
    check_room("--checkpoint-dir " + o.checkpoint_dir,
               target_of("--checkpoint-dir", o.checkpoint_dir), checkpoint_bytes);
}

std::uint64_t weights_file_bytes(const nn::Module& model) {
  std::uint64_t bytes = 0, header = 64;
  for (const auto& [name, t] : model.state_dict()) {
    bytes += static_cast<std::uint64_t>(t.numel()) * element_size(t.dtype());
    header += name.size() + 96;  // {"name":{"dtype":"F32","shape":[..],"data_offsets":[..]}}
  }
  return bytes + header;
}

void save_final_weights(const nn::Module& model, const TrainOptions& o,
                        const std::map<std::string, std::string>& metadata) {
  try {
    save_weights(model, o.save, metadata);
    return;
  } catch (const IoError& e) {
    const std::string failure = "--save: " + std::string(e.what());
    std::vector<std::string> places;
    if (!o.checkpoint_dir.empty()) places.push_back(o.checkpoint_dir);
    const char* tmp = std::getenv("TMPDIR");
    places.push_back(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp");
    places.push_back(".");
    const std::string name =
        "lockstep-save-" + std::to_string(static_cast<long>(::getpid())) + ".safetensors";
    std::string tried;
    for (const std::string& dir : places) {
      const std::string fallback = (fs::path(dir) / name).string();
      try {
        save_weights(model, fallback, metadata);
      } catch (const IoError&) {
        tried += (tried.empty() ? "" : ", ") + fallback;
        continue;
      }
      throw IoError(failure + "; the trained weights were written to " + fallback +
                    " instead (move them into place)");
    }
    throw IoError(failure + "; no fallback file could be written either (tried " + tried + ")");
  }
}

}  // namespace lockstep::app
