// Checks of one argument each, shared by the validation of every call (problem.cpp, kv_cache.cpp).
#include "core/checks.hpp"

#include <algorithm>
#include <limits>
#include <string>

namespace memattn::detail {

constexpr std::int64_t kInt64Max = std::numeric_limits<std::int64_t>::max();

Status invalid(const std::string& message) { return {StatusCode::invalid_argument, message}; }

std::string shape_string(const TensorRef& t) {
  std::string s = "[";
  for (int d = 0; d < t.rank; ++d) s += (d ? ", " : "") + std::to_string(t.sizes[d]);
  return s + "]";
}

std::string shape_string(const std::int64_t* sizes, int rank) {
  TensorRef t;
  t.rank = rank;
  std::copy(sizes, sizes + rank, t.sizes);
  return shape_string(t);
}

Status check_tensor(const TensorRef& t, const char* name, const char* layout, int rank) {
  if (t.rank != rank)
    return invalid(std::string(name) + ": expected rank " + std::to_string(rank) + " " + layout +
                   ", got rank " + std::to_string(t.rank));
  if (t.dtype != DType::f32 && t.dtype != DType::f16 && t.dtype != DType::bf16 && t.dtype != DType::f64)
    return invalid(std::string(name) + ": unknown dtype value " + std::to_string(int(t.dtype)));
  std::int64_t extent = 0;
  for (int d = 0; d < rank; ++d) {
    if (t.sizes[d] < 0)
      return invalid(std::string(name) + ": negative size in " + shape_string(t));
    if (t.strides[d] < 0)
      return invalid(std::string(name) + ": stride " + std::to_string(t.strides[d]) +
                     " of dimension " + std::to_string(d) + " is negative");
    std::int64_t span = 0;
    if (t.sizes[d] > 0 && (mul_overflows(t.sizes[d] - 1, t.strides[d], &span) ||
                           __builtin_add_overflow(extent, span, &extent)))
      return invalid(std::string(name) + ": sizes " + shape_string(t) +
                     " with its strides overflow a 64-bit offset");
  }
  bool no_elements = false;
  for (int d = 0; d < rank; ++d) no_elements = no_elements || t.sizes[d] == 0;
  if (t.data == nullptr && !no_elements)
    return invalid(std::string(name) + ": data pointer is null (allowed only for a tensor with zero elements; " +
                   "this one has shape " + shape_string(t) + ")");
  std::int64_t elements = 0, bytes = 0;
  if (__builtin_add_overflow(extent, 1, &elements) ||
      mul_overflows(elements, std::int64_t(dtype_size(t.dtype)), &bytes))
    return invalid(std::string(name) + ": byte extent overflows 64 bits");
  if (t.sizes[rank - 1] > 1 && t.strides[rank - 1] != 1)
    return invalid(std::string(name) + ": the last dimension must be contiguous (stride 1), got stride " +
                   std::to_string(t.strides[rank - 1]));
  return Status::Ok();
}

Status check_sizes(const TensorRef& t, const char* name, const char* layout,
                   std::initializer_list<std::int64_t> expected) {
  const std::int64_t* e = expected.begin();
  for (int d = 0; d < t.rank; ++d)
    if (t.sizes[d] != e[d])
      return invalid(std::string(name) + ": expected " + layout + " = " +
                     shape_string(e, t.rank) + ", got " + shape_string(t));
  return Status::Ok();
}

Status check_dtype(const TensorRef& t, const char* name, DType want) {
  if (t.dtype != want)
    return invalid(std::string(name) + ": dtype " + to_string(t.dtype) + " must be " + to_string(want));
  return Status::Ok();
}

Status check_no_overlap(const TensorRef& t, const char* name, const bool* shared) {
  for (int d = 0; d < t.rank; ++d)
    if (t.sizes[d] == 0) return Status::Ok();  // no elements, none to overlap
  int dims[4];
  int n = 0;
  for (int d = 0; d < t.rank; ++d) {
    if (t.sizes[d] <= 1 || (shared && shared[d])) continue;
    if (t.strides[d] == 0)
      return invalid(std::string(name) + ": output has stride 0 on dimension " + std::to_string(d) +
                     " of size " + std::to_string(t.sizes[d]) + " (elements would overlap)");
    dims[n++] = d;
  }
  for (int a = 1; a < n; ++a)  // insertion sort by stride (at most 4 dims)
    for (int b = a; b > 0 && t.strides[dims[b]] < t.strides[dims[b - 1]]; --b) std::swap(dims[b], dims[b - 1]);
  std::int64_t covered = 1;  // elements spanned by the dimensions with smaller strides
  for (int k = 0; k < n; ++k) {
    const int d = dims[k];
    if (t.strides[d] < covered)
      return invalid(std::string(name) + ": strides make output elements overlap (dimension " +
                     std::to_string(d) + ")");
    covered = t.strides[d] * (t.sizes[d] - 1) + covered;
  }
  return Status::Ok();
}

Status check_index(const IndexRef& x, const char* name, std::int64_t want, const char* rule) {
  if (x.size != want)
    return invalid(std::string(name) + ": has " + std::to_string(x.size) + " elements; it must have " +
                   std::to_string(want) + " (" + rule + ")");
  if (x.data == nullptr && x.size > 0)
    return invalid(std::string(name) + ": data pointer is null with " + std::to_string(x.size) + " elements");
  std::int64_t span = 0;
  if (x.stride < 0)
    return invalid(std::string(name) + ": stride " + std::to_string(x.stride) + " is negative");
  if (x.size > 0 && (mul_overflows(x.size - 1, x.stride, &span) || span > kInt64Max / 4))
    return invalid(std::string(name) + ": size " + std::to_string(x.size) + " with stride " +
                   std::to_string(x.stride) + " overflows a 64-bit byte offset");
  return Status::Ok();
}

Status check_readable(const IndexRef& x, const char* name, Location where) {
  if (where == Location::device && x.size > 1 && x.stride != 1)
    return invalid(std::string(name) + ": stride " + std::to_string(x.stride) +
                   "; the CUDA backend reads these arrays contiguous (stride 1)");
  return Status::Ok();
}

Status copy_index(const IndexRef& x, const char* name, Location where, void* stream, std::vector<std::int32_t>* out) {
  out->resize(std::size_t(x.size));
  if (x.size == 0) return Status::Ok();
  if (Status s = check_readable(x, name, where); !s.ok()) return s;
  if (where == Location::device) return copy_to_host(out->data(), x.data, std::size_t(x.size) * 4, where, stream);
  for (std::int64_t i = 0; i < x.size; ++i) (*out)[std::size_t(i)] = x.data[i * x.stride];
  return Status::Ok();
}

}  // namespace memattn::detail
