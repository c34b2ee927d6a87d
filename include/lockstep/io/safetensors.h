// safetensors files (https://github.com/huggingface/safetensors, format described in its
// README): the format PyTorch users exchange weights in, used for `--init`, `--save` and
// checkpoints. Layout:
//   8 bytes   N, the header size, unsigned 64-bit little endian
//   N bytes   a UTF-8 JSON object: {"__metadata__": {string: string}  (optional),
//               "<name>": {"dtype": "F32", "shape": [2, 3], "data_offsets": [begin, end]}, ...}
//             starting with '{', possibly padded with trailing spaces
//   the rest  the byte buffer; [begin, end) is relative to its start. The tensors cover it
//             exactly: no holes, no overlaps, no trailing bytes. Elements little endian, C order.
// Lockstep reads and writes F32, F64 and I64 (float32, float64, int64); other dtypes are refused.
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "lockstep/core/tensor.h"
#include "lockstep/core/state_dict.h"

namespace lockstep::safetensors {

using TensorList = std::vector<std::pair<std::string, Tensor>>;

/// The contents of a safetensors file.
struct File {
  TensorList tensors;                           // in file offset order
  std::map<std::string, std::string> metadata;  // "__metadata__" (string->string), may be empty
  /// Tensor by name; StateDictError naming the key when missing.
  const Tensor& at(const std::string& name) const;
};

/// The safetensors dtype string ("F32", "F64", "I64") of a Lockstep dtype.
std::string dtype_name(DType dtype);

/// Serializes `tensors` (any shapes incl. 0-d and zero-size; F32/F64/I64, little endian, C
/// order) in the given order, data packed back to back, with "__metadata__" first when
/// `metadata` is not empty. The header is written with nlohmann-json (compact, UTF-8) and padded
/// with spaces to a multiple of 8 bytes, as the Python library does; with tensors given in
/// Python's order (descending alignment, then name) the bytes equal safetensors.torch.save's.
/// Throws ValueError for an undefined tensor, an empty or duplicate name, "__metadata__" as a
/// name, or a name/metadata string that is not valid UTF-8; DTypeError for an unsupported dtype.
/// A tensor on a GPU (cuda:k) is copied to the host first, as safetensors.torch.save does.
std::string serialize(const TensorList& tensors,
                      const std::map<std::string, std::string>& metadata = {});

/// safetensors.torch.save_file: serialize + io::write_file_atomic (IoError when unwritable).
void save_file(const TensorList& tensors, const std::string& path,
               const std::map<std::string, std::string>& metadata = {});

/// Parses the bytes of a safetensors file; `name` (the file path) appears in every error, with
/// the tensor or field concerned. Tensors are fresh CPU tensors (cpu:0), requires_grad false.
/// Throws DataError for: fewer than 8 bytes; a header size beyond the file (or above 100 MB, the
/// reference implementation's limit); a header that does not start with '{', is not JSON, is
/// not an object or repeats a key; an entry that is not an object or lacks or mistypes
/// dtype/shape/data_offsets; an unsupported dtype (named; F32/F64/I64 are read; F16, BF16, I32,
/// U8, BOOL, ... are refused); a shape with more than 8 dimensions or whose element count
/// overflows; offsets with begin > end, beyond the buffer, overlapping, leaving holes or
/// trailing bytes, or not equal to numel * itemsize; "__metadata__" not a string->string object.
/// No allocation exceeds the input's size.
File deserialize(std::string_view bytes, const std::string& name);

/// safetensors.torch.load_file: io::read_file (IoError) + deserialize (DataError).
File load_file(const std::string& path);

/// save_file of a StateDict (its order kept).
void save_state_dict(const StateDict& state, const std::string& path,
                     const std::map<std::string, std::string>& metadata = {});

/// All tensors of `file` as a StateDict, in file order.
StateDict to_state_dict(const File& file);

}  // namespace lockstep::safetensors
