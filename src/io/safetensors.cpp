// safetensors reader and writer. The checks follow the reference implementation's validation
// (huggingface/safetensors, safetensors/src/tensor.rs: header size limit, header start, offsets
// covering the buffer exactly, byte length = numel * itemsize with overflow checks).
#include "lockstep/io/safetensors.h"

#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>

#include "lockstep/io/atomic_file.h"

namespace lockstep::safetensors {
namespace {

/// The reference implementation's MAX_HEADER_SIZE.
constexpr std::uint64_t kMaxHeaderSize = 100'000'000;
constexpr std::uint64_t kMaxInt64 =
    static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max());

std::string quoted(const std::string& s) { return "'" + s + "'"; }

/// Copies `nbytes` of elements of `itemsize` bytes, converting between host order and little
/// endian (a plain copy on little-endian hosts).
void copy_little_endian(void* dst, const void* src, std::size_t nbytes, std::size_t itemsize) {
  if (nbytes == 0) return;
  std::memcpy(dst, src, nbytes);
  if constexpr (std::endian::native == std::endian::big) {
    auto* p = static_cast<unsigned char*>(dst);
    for (std::size_t i = 0; i < nbytes; i += itemsize) std::reverse(p + i, p + i + itemsize);
  }
}

bool parse_dtype(const std::string& s, DType* out) {
  if (s == "F32")
    *out = DType::Float32;
  else if (s == "F64")
    *out = DType::Float64;
  else if (s == "I64")
    *out = DType::Int64;
  else
    return false;
  return true;
}

std::string offsets_str(std::uint64_t begin, std::uint64_t end) {
  return "[" + std::to_string(begin) + ", " + std::to_string(end) + "]";
}

/// A non-negative JSON integer (nlohmann stores those that fit as unsigned).
bool as_uint(const nlohmann::json& v, std::uint64_t* out) {
  if (v.is_number_unsigned()) {
    *out = v.get<std::uint64_t>();
    return true;
  }
  if (v.is_number_integer() && v.get<std::int64_t>() >= 0) {
    *out = static_cast<std::uint64_t>(v.get<std::int64_t>());
    return true;
  }
  return false;
}

struct Entry {
  std::string name;
  DType dtype;
  Shape shape;
  std::uint64_t begin, end;
};

}  // namespace

std::string dtype_name(DType dtype) {
  switch (dtype) {
    case DType::Float32:
      return "F32";
    case DType::Float64:
      return "F64";
    case DType::Int64:
      return "I64";
  }
  throw DTypeError("safetensors: dtype " + std::to_string(static_cast<int>(dtype)) +
                   " has no safetensors name");
}

const Tensor& File::at(const std::string& name) const {
  for (const auto& [n, t] : tensors)
    if (n == name) return t;
  throw StateDictError("safetensors: no tensor named " + quoted(name) + " in the file (" +
                       std::to_string(tensors.size()) + " tensors)");
}

std::string serialize(const TensorList& tensors,
                      const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) {
    auto& m = header["__metadata__"] = nlohmann::ordered_json::object();
    for (const auto& [k, v] : metadata) m[k] = v;
  }
  std::set<std::string> names;
  std::uint64_t offset = 0;
  for (const auto& [name, t] : tensors) {
    if (name.empty()) throw ValueError("safetensors: serialize: empty tensor name");
    if (name == "__metadata__")
      throw ValueError("safetensors: serialize: '__metadata__' is reserved, not a tensor name");
    if (!names.insert(name).second)
      throw ValueError("safetensors: serialize: duplicate tensor name " + quoted(name));
    if (!t.defined())
      throw ValueError("safetensors: serialize: tensor " + quoted(name) + " is undefined");
    const DType dt = t.dtype();
    if (dt != DType::Float32 && dt != DType::Float64 && dt != DType::Int64)
      throw DTypeError("safetensors: serialize: tensor " + quoted(name) +
                       " has unsupported dtype " + to_string(dt));
    const std::uint64_t nbytes =
        static_cast<std::uint64_t>(t.numel()) * static_cast<std::uint64_t>(element_size(dt));
    auto& e = header[name] = nlohmann::ordered_json::object();
    e["dtype"] = dtype_name(dt);
    e["shape"] = t.sizes();
    e["data_offsets"] = {offset, offset + nbytes};
    offset += nbytes;
  }
  std::string json;
  try {
    json = header.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::strict);
  } catch (const nlohmann::ordered_json::exception& e) {
    throw ValueError(std::string("safetensors: serialize: a tensor name or metadata string is "
                                 "not valid UTF-8 (") +
                     e.what() + ")");
  }
  json.append((8 - json.size() % 8) % 8, ' ');

  std::string out;
  out.reserve(8 + json.size() + offset);
  const std::uint64_t n = json.size();
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((n >> (8 * i)) & 0xff));
  out += json;
  const std::size_t data_start = out.size();
  out.resize(data_start + offset);
  std::size_t pos = data_start;
  for (const auto& [name, t] : tensors) {
    const std::size_t itemsize = element_size(t.dtype());
    const std::size_t nbytes = static_cast<std::size_t>(t.numel()) * itemsize;
    // A tensor on a GPU is copied to the host first, as safetensors.torch does.
    const Tensor host = t.device().is_cpu() ? t : t.to(cpu());
    copy_little_endian(out.data() + pos, host.raw_data(), nbytes, itemsize);
    pos += nbytes;
  }
  return out;
}

void save_file(const TensorList& tensors, const std::string& path,
               const std::map<std::string, std::string>& metadata) {
  io::write_file_atomic(path, serialize(tensors, metadata));
}

File deserialize(std::string_view bytes, const std::string& name) {
  const std::string file = "safetensors: " + quoted(name) + ": ";
  auto fail = [&](const std::string& what) { return DataError(file + what); };

  // PyTorch's own format is the likeliest wrong file: name it (torch.save writes a zip archive,
  // before PyTorch 1.6 a bare pickle). Their first bytes can also start a safetensors file's
  // header size (0x80 0x02: 640 bytes), whose header then opens with '{' at offset 8.
  const bool zip = bytes.substr(0, 4) == std::string_view("PK\x03\x04", 4);
  const bool pickle = bytes.size() >= 2 && static_cast<unsigned char>(bytes[0]) == 0x80 &&
                      bytes[1] >= 2 && bytes[1] <= 5;
  if ((zip || pickle) && !(bytes.size() > 8 && bytes[8] == '{'))
    throw fail(std::string("a PyTorch torch.save file (") +
               (zip ? "a zip archive" : "a pickle") +
               "), not safetensors: write it with safetensors.torch.save_file(model.state_dict(), "
               "path)");
  if (bytes.size() < 8)
    throw fail("file is " + std::to_string(bytes.size()) +
               " bytes, shorter than the 8-byte header size field");
  std::uint64_t n = 0;
  for (int i = 0; i < 8; ++i)
    n |= static_cast<std::uint64_t>(static_cast<unsigned char>(bytes[i])) << (8 * i);
  if (n > kMaxHeaderSize)
    throw fail("header size " + std::to_string(n) + " exceeds the limit of " +
               std::to_string(kMaxHeaderSize) + " bytes");
  if (n > bytes.size() - 8)
    throw fail("header size " + std::to_string(n) + " runs beyond the end of the file (" +
               std::to_string(bytes.size() - 8) + " bytes follow the size field)");
  const std::string_view text = bytes.substr(8, n);
  const std::string_view buffer = bytes.substr(8 + n);
  if (text.empty() || text.front() != '{') throw fail("header does not start with '{'");

  // Duplicate keys would silently replace each other in nlohmann's DOM; refuse them instead.
  std::vector<std::set<std::string>> open_objects;
  auto reject_duplicates = [&](int /*depth*/, nlohmann::json::parse_event_t event,
                               nlohmann::json& parsed) {
    using E = nlohmann::json::parse_event_t;
    if (event == E::object_start)
      open_objects.emplace_back();
    else if (event == E::object_end)
      open_objects.pop_back();
    else if (event == E::key && !open_objects.back().insert(parsed.get<std::string>()).second)
      throw fail("header repeats the key " + quoted(parsed.get<std::string>()));
    return true;
  };
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(text.begin(), text.end(), reject_duplicates);
  } catch (const nlohmann::json::exception& e) {
    throw fail(std::string("header is not valid JSON: ") + e.what());
  }
  if (!header.is_object()) throw fail("header is not a JSON object");

  File out;
  std::vector<Entry> entries;
  entries.reserve(header.size());
  for (const auto& [key, value] : header.items()) {
    if (key == "__metadata__") {
      if (value.is_null()) continue;
      if (!value.is_object()) throw fail("\"__metadata__\" is not an object of strings");
      for (const auto& [mk, mv] : value.items()) {
        if (!mv.is_string())
          throw fail("\"__metadata__\" entry " + quoted(mk) + " is a " + mv.type_name() +
                     ", not a string");
        out.metadata[mk] = mv.get<std::string>();
      }
      continue;
    }
    const std::string where = "tensor " + quoted(key) + ": ";
    if (!value.is_object())
      throw fail(where + "entry is a " + std::string(value.type_name()) + ", not an object");
    for (const char* field : {"dtype", "shape", "data_offsets"})
      if (!value.contains(field)) throw fail(where + "missing \"" + field + "\"");

    Entry e{key, DType::Float32, Shape(), 0, 0};
    const auto& dtype = value["dtype"];
    if (!dtype.is_string()) throw fail(where + "\"dtype\" is not a string");
    if (!parse_dtype(dtype.get<std::string>(), &e.dtype))
      throw fail(where + "dtype " + quoted(dtype.get<std::string>()) +
                 " is not supported (Lockstep reads F32, F64 and I64)");

    const auto& shape = value["shape"];
    if (!shape.is_array()) throw fail(where + "\"shape\" is not an array");
    if (shape.size() > static_cast<std::size_t>(Shape::kMaxDims))
      throw fail(where + "shape has " + std::to_string(shape.size()) +
                 " dimensions; Lockstep tensors have at most " + std::to_string(Shape::kMaxDims));
    std::uint64_t numel = 1;
    for (const auto& d : shape) {
      std::uint64_t v = 0;
      if (!as_uint(d, &v) || v > kMaxInt64)
        throw fail(where + "shape " + shape.dump() +
                   " has an entry that is not an integer in [0, 2^63)");
      if (v != 0 && numel > kMaxInt64 / v)
        throw fail(where + "shape " + shape.dump() + " has too many elements (overflow)");
      numel *= v;
      e.shape.push_back(static_cast<std::int64_t>(v));
    }
    const std::uint64_t itemsize = element_size(e.dtype);
    if (numel > kMaxInt64 / itemsize)
      throw fail(where + "shape " + shape.dump() + " has too many bytes (overflow)");
    const std::uint64_t nbytes = numel * itemsize;

    const auto& offsets = value["data_offsets"];
    if (!offsets.is_array() || offsets.size() != 2 || !as_uint(offsets[0], &e.begin) ||
        !as_uint(offsets[1], &e.end))
      throw fail(where + "\"data_offsets\" is not a pair of non-negative integers");
    if (e.begin > e.end)
      throw fail(where + "data_offsets " + offsets_str(e.begin, e.end) + " begin after they end");
    if (e.end > buffer.size())
      throw fail(where + "data_offsets " + offsets_str(e.begin, e.end) +
                 " reach beyond the data buffer of " + std::to_string(buffer.size()) + " bytes");
    if (e.end - e.begin != nbytes)
      throw fail(where + "data_offsets " + offsets_str(e.begin, e.end) + " hold " +
                 std::to_string(e.end - e.begin) + " bytes but shape " + shape.dump() + " of " +
                 dtype.get<std::string>() + " needs " + std::to_string(nbytes));
    entries.push_back(std::move(e));
  }

  std::stable_sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  std::uint64_t covered = 0;
  const Entry* previous = nullptr;
  for (const Entry& e : entries) {
    if (e.begin < covered)
      throw fail("tensor " + quoted(e.name) + ": data_offsets " + offsets_str(e.begin, e.end) +
                 " overlap tensor " + quoted(previous->name) + " " +
                 offsets_str(previous->begin, previous->end));
    if (e.begin > covered)
      throw fail("bytes [" + std::to_string(covered) + ", " + std::to_string(e.begin) +
                 ") of the data buffer, before tensor " + quoted(e.name) +
                 ", belong to no tensor (a hole)");
    covered = e.end;
    previous = &e;
  }
  if (covered != buffer.size())
    throw fail("bytes [" + std::to_string(covered) + ", " + std::to_string(buffer.size()) +
               ") at the end of the data buffer belong to no tensor");

  out.tensors.reserve(entries.size());
  for (const Entry& e : entries) {
    Tensor t = Tensor::empty(e.shape, TensorOptions(e.dtype));
    copy_little_endian(t.raw_data(), buffer.data() + e.begin, e.end - e.begin,
                       element_size(e.dtype));
    out.tensors.emplace_back(e.name, std::move(t));
  }
  return out;
}

File load_file(const std::string& path) { return deserialize(io::read_file(path), path); }

void save_state_dict(const StateDict& state, const std::string& path,
                     const std::map<std::string, std::string>& metadata) {
  save_file(TensorList(state.begin(), state.end()), path, metadata);
}

StateDict to_state_dict(const File& file) {
  StateDict out;
  for (const auto& [name, t] : file.tensors) out.insert(name, t);
  return out;
}

}  // namespace lockstep::safetensors
