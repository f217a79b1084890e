// Moving tiles between strided tensors of any dtype and the float scratch the CPU path computes in.
#pragma once

#include <cstdint>

#include "core/numeric.hpp"
#include "memattn/types.hpp"

namespace memattn::cpu {

// Element offset of [batch, row, head, 0] in a BMHK tensor.
inline std::int64_t row_offset(const TensorRef& t, std::int64_t batch, std::int64_t row, std::int64_t head) {
  return batch * t.strides[0] + row * t.strides[1] + head * t.strides[2];
}

// dst[0..n) = mul * src[0..n), src of `dtype`. Written per dtype so each loop vectorises.
inline void to_float(const void* src, DType dtype, std::int64_t n, float mul, float* dst) {
  switch (dtype) {
    case DType::f32: {
      const float* s = static_cast<const float*>(src);
#pragma omp simd
      for (std::int64_t e = 0; e < n; ++e) dst[e] = mul * s[e];
      return;
    }
    case DType::bf16: {
      const std::uint16_t* s = static_cast<const std::uint16_t*>(src);
#pragma omp simd
      for (std::int64_t e = 0; e < n; ++e) dst[e] = mul * detail::bits_float(std::uint32_t(s[e]) << 16);
      return;
    }
    case DType::f16: {
#if defined(__FLT16_MAX__)
      const _Float16* s = static_cast<const _Float16*>(src);
#pragma omp simd
      for (std::int64_t e = 0; e < n; ++e) dst[e] = mul * float(s[e]);
#else
      const std::uint16_t* s = static_cast<const std::uint16_t*>(src);
      for (std::int64_t e = 0; e < n; ++e) dst[e] = mul * detail::half_to_float(s[e]);
#endif
      return;
    }
    case DType::f64: {  // validation keeps f64 on the reference backend; here for completeness
      const double* s = static_cast<const double*>(src);
      for (std::int64_t e = 0; e < n; ++e) dst[e] = float(mul * s[e]);
      return;
    }
  }
}

// dst[0..n) of `dtype` = round(mul * src[0..n)).
inline void from_float(const float* src, std::int64_t n, float mul, void* dst, DType dtype) {
  switch (dtype) {
    case DType::f32: {
      float* d = static_cast<float*>(dst);
#pragma omp simd
      for (std::int64_t e = 0; e < n; ++e) d[e] = mul * src[e];
      return;
    }
    case DType::bf16: {
      std::uint16_t* d = static_cast<std::uint16_t*>(dst);
      for (std::int64_t e = 0; e < n; ++e) d[e] = detail::float_to_bf16(mul * src[e]);
      return;
    }
    case DType::f16: {
      std::uint16_t* d = static_cast<std::uint16_t*>(dst);
      for (std::int64_t e = 0; e < n; ++e) d[e] = detail::float_to_half(mul * src[e]);
      return;
    }
    case DType::f64: {
      double* d = static_cast<double*>(dst);
      for (std::int64_t e = 0; e < n; ++e) d[e] = double(mul * src[e]);
      return;
    }
  }
}

// Loads rows [row0, row0 + rows) of head `head` (width = head dim) into dst[r * ld + e], times
// `mul`; rows up to `pad_rows` are zero-filled so fixed-size tiles can be computed whole.
inline void load_rows(const TensorRef& t, std::int64_t batch, std::int64_t row0, std::int64_t rows,
                      std::int64_t pad_rows, std::int64_t head, float mul, float* dst, std::int64_t ld) {
  const std::int64_t width = t.sizes[3];
  for (std::int64_t r = 0; r < rows; ++r) {
    const std::int64_t off = row_offset(t, batch, row0 + r, head);
    const char* src = static_cast<const char*>(t.data) + off * std::int64_t(dtype_size(t.dtype));
    to_float(src, t.dtype, width, mul, dst + r * ld);
  }
  for (std::int64_t r = rows; r < pad_rows; ++r)
    for (std::int64_t e = 0; e < width; ++e) dst[r * ld + e] = 0.0f;
}

// Loads the same rows transposed: dst[e * ld + r]. `row_buf` holds one row (the head dim).
inline void load_rows_transposed(const TensorRef& t, std::int64_t batch, std::int64_t row0,
                                 std::int64_t rows, std::int64_t pad_rows, std::int64_t head, float mul,
                                 float* row_buf, float* dst, std::int64_t ld) {
  const std::int64_t width = t.sizes[3];
  for (std::int64_t r = 0; r < pad_rows; ++r) {
    if (r < rows) {
      const std::int64_t off = row_offset(t, batch, row0 + r, head);
      to_float(static_cast<const char*>(t.data) + off * std::int64_t(dtype_size(t.dtype)), t.dtype, width,
               mul, row_buf);
      for (std::int64_t e = 0; e < width; ++e) dst[e * ld + r] = row_buf[e];
    } else {
      for (std::int64_t e = 0; e < width; ++e) dst[e * ld + r] = 0.0f;
    }
  }
}

// Stores src[r * ld + e] * mul into rows [row0, row0 + rows) of head `head`.
inline void store_rows(const TensorRef& t, std::int64_t batch, std::int64_t row0, std::int64_t rows,
                       std::int64_t head, const float* src, std::int64_t ld, float mul) {
  const std::int64_t width = t.sizes[3];
  for (std::int64_t r = 0; r < rows; ++r) {
    const std::int64_t off = row_offset(t, batch, row0 + r, head);
    from_float(src + r * ld, width, mul, static_cast<char*>(t.data) + off * std::int64_t(dtype_size(t.dtype)),
               t.dtype);
  }
}

// Element offset of bias[b, h, i, j] with broadcast dimensions pinned to 0.
inline std::int64_t bias_offset(const TensorRef& bias, const bool* broadcast, std::int64_t b,
                                std::int64_t h, std::int64_t i, std::int64_t j) {
  return (broadcast[0] ? 0 : b * bias.strides[0]) + (broadcast[1] ? 0 : h * bias.strides[1]) +
         (broadcast[2] ? 0 : i * bias.strides[2]) + (broadcast[3] ? 0 : j * bias.strides[3]);
}

}  // namespace memattn::cpu
