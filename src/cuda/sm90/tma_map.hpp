// Tensor maps for the bulk tensor copies (TMA) of BMHK tensors, built on the host: which tensors
// a map can describe (the dispatcher asks before it picks a TMA row) and the map itself.
//
// A map is 4-d, (head dim, rows, heads, batch), the head dim contiguous, and its box is
// kTmaBoxCols columns by `box_rows` rows of one head: 128 bytes (64 16-bit or 32 fp32 elements),
// the span of the 128-byte swizzle, so each box lands in shared memory as one column block of the
// GMMA K-major layout (sm90/gmma.hpp's KMajorTile). Elements outside the tensor (rows past the
// end, columns past the head dim) arrive as zeros.
#pragma once

#include <cuda.h>

#include <cstdint>

#include "memattn/status.hpp"
#include "memattn/types.hpp"

namespace memattn::cuda::sm90 {

inline constexpr int kTmaBoxBytes = 128;
template <class Element>
inline constexpr int kTmaBoxCols = kTmaBoxBytes / int(sizeof(Element));

struct TmaTensor {
  const void* data;
  DType dtype;
  std::int64_t cols, rows, heads, batch;             // sizes
  std::int64_t row_stride, head_stride, batch_stride;  // elements
};

// Whether a map can describe the tensor: a 16-byte aligned pointer; rows of a
// multiple of 16 bytes; every stride of a dimension with more than one element a nonzero multiple
// of 16 bytes below 2^40 (a broadcast stride of 0 cannot be described); sizes the 32-bit box
// coordinates reach.
bool tma_describable(const TmaTensor& t);

// The map of `t` with boxes of 128 bytes of columns x box_rows (box_rows <= 256).
Status make_tma_map(const TmaTensor& t, int box_rows, CUtensorMap* map);

}  // namespace memattn::cuda::sm90
