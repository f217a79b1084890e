// Checks of one argument each (a tensor's structure, sizes, dtype; an int32 view), with messages
// that name the argument. Shared by the validation of every call (problem.cpp, kv_cache.cpp).
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include "core/memory.hpp"
#include "memattn/status.hpp"
#include "memattn/types.hpp"

namespace memattn::detail {

Status invalid(const std::string& message);  // StatusCode::invalid_argument

std::string shape_string(const TensorRef& t);
std::string shape_string(const std::int64_t* sizes, int rank);

inline bool mul_overflows(std::int64_t a, std::int64_t b, std::int64_t* out) {
  return __builtin_mul_overflow(a, b, out);
}

// Structure shared by every tensor argument: pointer, rank, sizes, strides, and that its largest
// byte offset fits in int64. A null data pointer is allowed for a tensor with zero elements only.
Status check_tensor(const TensorRef& t, const char* name, const char* layout, int rank);
Status check_sizes(const TensorRef& t, const char* name, const char* layout,
                   std::initializer_list<std::int64_t> expected);
Status check_dtype(const TensorRef& t, const char* name, DType want);
// An output must not have two elements at one address, except along `shared` dimensions
// (dbias's broadcast dimensions), which receive one summed value.
Status check_no_overlap(const TensorRef& t, const char* name, const bool* shared = nullptr);

// An int32 view: `want` elements (`rule` says why), a pointer where there are elements, a stride
// whose byte offsets fit.
Status check_index(const IndexRef& x, const char* name, std::int64_t want, const char* rule);
// The CUDA backend's kernels read the arrays themselves, contiguous; on the host any stride is
// read through.
Status check_readable(const IndexRef& x, const char* name, Location where);
// Copies a validated int32 view into host memory (from the device in the order of `stream`).
Status copy_index(const IndexRef& x, const char* name, Location where, void* stream, std::vector<std::int32_t>* out);

}  // namespace memattn::detail
