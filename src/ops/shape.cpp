// Shape and indexing ops: reshape, narrow, index_select, cat, chunk, split, tensor_split. A tensor
// cut along `dim` is viewed as [outer, R, inner] blocks of contiguous memory.
#include <cstring>

#include "ops/cuda_ops.h"
#include "lockstep/ops/detail/op_utils.h"

namespace lockstep {

using autograd::needs_grad;
using autograd::record;

namespace detail {
Tensor alias(const Tensor& base, std::int64_t offset, const Shape& shape) {
  auto impl = std::allocate_shared<TensorImpl>(detail::PoolAllocator<TensorImpl>());
  impl->storage = base.impl().storage;
  impl->offset = offset;
  impl->shape = shape;
  impl->dtype = base.dtype();
  return Tensor(std::move(impl));
}
}  // namespace detail

namespace {

// Copies rows [start, start+len) along d of src into dst (shaped like src with len at d).
void copy_slice(const Tensor& src, int d, std::int64_t start, std::int64_t len, Tensor& dst,
                std::int64_t dst_start, std::int64_t dst_r) {
  detail::DimSplit b = detail::split_at_dim(src.shape(), d);
  std::size_t es = element_size(src.dtype());
  const char* ps = static_cast<const char*>(src.raw_data());
  char* pd = static_cast<char*>(dst.raw_data());
  std::size_t chunk = static_cast<std::size_t>(len * b.inner) * es;
  if (chunk == 0) return;
  for (std::int64_t o = 0; o < b.outer; ++o)
    std::memcpy(pd + static_cast<std::size_t>((o * dst_r + dst_start) * b.inner) * es,
                ps + static_cast<std::size_t>((o * b.r + start) * b.inner) * es, chunk);
}

}  // namespace

Tensor reshape(const Tensor& a, const Shape& shape) {
  detail::check_defined("reshape", a);
  Shape s = shape;
  int infer = -1;
  std::int64_t known = 1;
  for (int i = 0; i < s.size(); ++i) {
    if (s[i] == -1) {
      if (infer >= 0) throw ShapeError("reshape: only one dimension can be -1 in " + shape.str());
      infer = i;
    } else if (s[i] < 0) {
      throw ShapeError("reshape: invalid dimension in " + shape.str());
    } else {
      known *= s[i];
    }
  }
  if (infer >= 0) {
    if (known == 0 || a.numel() % known != 0)
      throw ShapeError("reshape: cannot reshape " + a.shape().str() + " into " + shape.str());
    s[infer] = a.numel() / known;
  }
  if (s.numel() != a.numel())
    throw ShapeError("reshape: cannot reshape " + a.shape().str() + " (" +
                     std::to_string(a.numel()) + " elements) into " + shape.str());
  Tensor out = detail::alias(a, a.impl().offset, s);
  if (needs_grad({&a}))
    record("ReshapeBackward", out, {&a},
           [src = a.shape()](const Tensor& g) { return std::vector<Tensor>{reshape(g, src)}; });
  return out;
}

Tensor flatten(const Tensor& a, int start_dim, int end_dim) {
  detail::check_defined("flatten", a);
  if (a.dim() == 0) return reshape(a, {1});
  const int sd = detail::wrap_dim("flatten", start_dim, a.dim());
  const int ed = detail::wrap_dim("flatten", end_dim, a.dim());
  if (sd > ed)
    throw IndexError("flatten: start_dim " + std::to_string(start_dim) + " comes after end_dim " +
                     std::to_string(end_dim) + " of a " + a.shape().str() + " tensor");
  Shape s;
  std::int64_t merged = 1;
  for (int i = 0; i < a.dim(); ++i) {
    if (i < sd || i > ed) s.push_back(a.size(i));
    if (i >= sd && i <= ed) merged *= a.size(i);
    if (i == ed) s.push_back(merged);
  }
  return reshape(a, s);
}

Tensor narrow(const Tensor& a, int dim, std::int64_t start, std::int64_t length) {
  detail::check_defined("narrow", a);
  int d = detail::wrap_dim("narrow", dim, a.dim());
  std::int64_t n = a.size(d);
  if (start < 0) start += n;
  // start + length is not formed before the check: it can overflow (start near INT64_MAX).
  if (start < 0 || length < 0 || start > n || length > n - start) {
    std::int64_t end = 0;
    const bool overflows = __builtin_add_overflow(start, length, &end);
    throw IndexError(
        "narrow: range [" + std::to_string(start) + ", " +
        (overflows ? std::to_string(start) + " + " + std::to_string(length) : std::to_string(end)) +
        ") out of bounds for dimension " + std::to_string(dim) + " of size " + std::to_string(n) +
        " (shape " + a.shape().str() + ")");
  }
  Shape s = a.shape();
  s[d] = length;
  Tensor out;
  if (d == 0) {
    out = detail::alias(a, a.impl().offset + start * (a.numel() / std::max<std::int64_t>(n, 1)), s);
    if (n == 0) out = detail::alias(a, a.impl().offset, s);
  } else {
    // Along another dimension the slice is not one block: a copy (on a GPU the strided copy).
    out = empty(s, a.options());
    if (a.device().is_cuda())
      cuda_ops::slice_out(a, d, start, out);
    else
      copy_slice(a, d, start, length, out, 0, length);
  }
  if (needs_grad({&a}))
    record("NarrowBackward", out, {&a}, [src = a.shape(), d, start, length](const Tensor& g) {
      Tensor ga = zeros(src, g.options());
      if (g.device().is_cuda())
        cuda_ops::slice_in(g, d, start, ga);
      else
        copy_slice(g, d, 0, length, ga, start, src[d]);
      return std::vector<Tensor>{ga};
    });
  return out;
}

Tensor index_select(const Tensor& a, int dim, const Tensor& index) {
  detail::check_defined("index_select", a);
  detail::check_defined("index_select", index);
  if (index.device() != a.device() && (a.device().is_cuda() || index.device().is_cuda()))
    throw DeviceError("index_select: expected the index on the tensor's device " +
                      a.device().str() + ", got " + index.device().str());
  int d = detail::wrap_dim("index_select", dim, a.dim());
  if (index.dtype() != kInt64 || index.dim() > 1)
    throw DTypeError("index_select: index must be a 1-d int64 tensor, got " +
                     to_string(index.dtype()) + " " + index.shape().str());
  std::int64_t n = a.size(d), k = index.numel();
  // On a GPU the indices are checked on a host copy (one synchronizing copy), with the same
  // message as on the CPU.
  const bool on_gpu = a.device().is_cuda();
  const std::vector<std::int64_t> host_index =
      on_gpu ? index.to_vector<std::int64_t>() : std::vector<std::int64_t>();
  const auto* pi = on_gpu ? host_index.data() : index.data_ptr<std::int64_t>();
  for (std::int64_t i = 0; i < k; ++i)
    if (pi[i] < 0 || pi[i] >= n)
      throw IndexError("index_select: index " + std::to_string(pi[i]) + " at position " +
                       std::to_string(i) + " is out of range for dimension " + std::to_string(dim) +
                       " of size " + std::to_string(n));
  Shape s = a.shape();
  s[d] = k;
  Tensor out = empty(s, a.options());
  if (on_gpu)
    cuda_ops::index_select(a, d, index, out);
  else
    for (std::int64_t i = 0; i < k; ++i) copy_slice(a, d, pi[i], 1, out, i, k);
  if (needs_grad({&a}))
    record("IndexSelectBackward", out, {&a},
           [src = a.shape(), d, index = index.clone()](const Tensor& g) {
             if (g.device().is_cuda()) {
               Tensor ga = empty(src, g.options());  // every element written
               cuda_ops::index_select_backward(g, d, index, ga);
               return std::vector<Tensor>{ga};
             }
             Tensor ga = zeros(src, g.options());
             detail::DimSplit b = detail::split_at_dim(src, d);
             std::int64_t k = index.numel();
             const auto* pi = index.data_ptr<std::int64_t>();
             detail::visit_float(g.dtype(), [&](auto zero) {
               using T = decltype(zero);
               const T* pg = g.data_ptr<T>();
               T* po = ga.data_ptr<T>();
               for (std::int64_t o = 0; o < b.outer; ++o)
                 for (std::int64_t i = 0; i < k; ++i)
                   for (std::int64_t j = 0; j < b.inner; ++j)
                     po[(o * b.r + pi[i]) * b.inner + j] += pg[(o * k + i) * b.inner + j];
             });
             return std::vector<Tensor>{ga};
           });
  return out;
}

Tensor cat(const std::vector<Tensor>& tensors, int dim) {
  if (tensors.empty()) throw ValueError("cat: expected a non-empty list of tensors");
  const Tensor& first = tensors.front();
  detail::check_defined("cat", first);
  int d = detail::wrap_dim("cat", dim, first.dim());
  std::int64_t total = 0;
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    detail::check_same("cat", first, t);
    bool ok = t.dim() == first.dim();
    for (int j = 0; ok && j < t.dim(); ++j) ok = j == d || t.size(j) == first.size(j);
    if (!ok)
      throw ShapeError("cat: tensor " + std::to_string(i) + " has shape " + t.shape().str() +
                       ", which does not match " + first.shape().str() + " outside dimension " +
                       std::to_string(dim));
    total += t.size(d);
  }
  Shape s = first.shape();
  s[d] = total;
  Tensor out = empty(s, first.options());
  std::vector<std::int64_t> sizes;
  std::int64_t pos = 0;
  for (const Tensor& t : tensors) {
    if (out.device().is_cpu()) {
      copy_slice(t, d, 0, t.size(d), out, pos, total);
    } else if (t.numel() > 0 && d == 0) {
      // Along dim 0 each input is one contiguous block of the output.
      NoGradGuard no_grad;
      narrow(out, 0, pos, t.size(0)).copy_(t.detach());
    } else if (t.numel() > 0) {
      cuda_ops::slice_in(t, d, pos, out);
    }
    pos += t.size(d);
    sizes.push_back(t.size(d));
  }
  bool any = false;
  for (const Tensor& t : tensors) any = any || t.requires_grad();
  if (any && GradMode::is_enabled())
    record("CatBackward", out, tensors, [d, sizes](const Tensor& g) {
      std::vector<Tensor> grads;
      std::int64_t start = 0;
      for (std::int64_t len : sizes) {
        grads.push_back(narrow(g, d, start, len).clone());
        start += len;
      }
      return grads;
    });
  return out;
}

std::vector<std::int64_t> split_sizes(std::int64_t n, std::int64_t sections) {
  if (sections <= 0)
    throw ValueError("tensor_split: number of sections must be positive, got " +
                     std::to_string(sections));
  std::vector<std::int64_t> sizes(static_cast<std::size_t>(sections), n / sections);
  for (std::int64_t i = 0; i < n % sections; ++i) ++sizes[static_cast<std::size_t>(i)];
  return sizes;
}

std::vector<Tensor> tensor_split(const Tensor& a, std::int64_t sections, int dim) {
  detail::check_defined("tensor_split", a);
  int d = detail::wrap_dim("tensor_split", dim, a.dim());
  std::vector<Tensor> out;
  std::int64_t start = 0;
  for (std::int64_t len : split_sizes(a.size(d), sections)) {
    out.push_back(narrow(a, d, start, len));
    start += len;
  }
  return out;
}

std::vector<Tensor> chunk(const Tensor& a, std::int64_t chunks, int dim) {
  detail::check_defined("chunk", a);
  if (chunks <= 0)
    throw ValueError("chunk: number of chunks must be positive, got " + std::to_string(chunks));
  int d = detail::wrap_dim("chunk", dim, a.dim());
  std::int64_t n = a.size(d);
  // As torch.chunk: pieces of ceil(n / chunks), split's; one empty piece when n == 0.
  return split(a, n == 0 ? 1 : (n + chunks - 1) / chunks, d);
}

std::vector<Tensor> split(const Tensor& a, std::int64_t split_size, int dim) {
  detail::check_defined("split", a);
  int d = detail::wrap_dim("split", dim, a.dim());
  std::int64_t n = a.size(d);
  if (split_size < 0 || (split_size == 0 && n != 0))
    throw ValueError("split: split_size must be positive, got " + std::to_string(split_size) +
                     " for dimension " + std::to_string(dim) + " of size " + std::to_string(n) +
                     " (shape " + a.shape().str() + ")");
  if (n == 0) return {narrow(a, d, 0, 0)};  // as torch.split: one empty piece
  std::vector<Tensor> out;
  for (std::int64_t start = 0; start < n; start += split_size)
    out.push_back(narrow(a, d, start, std::min(split_size, n - start)));
  return out;
}

}  // namespace lockstep
