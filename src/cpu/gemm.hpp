// The one matrix product the CPU tiles need: C[m x n] (+)= A[m x k] * B[k x n] in float, B and C
// row-major, A with any strides (element (r, kk) at a[r * a_rs + kk * a_ks]) so that transposed
// operands need no copy. Each step broadcasts one element of A against a contiguous row of B:
// the inner loop is a vector FMA over n, and 4 rows x 64 columns of C stay in registers.
#pragma once

#include <cstdint>

namespace memattn::cpu {

constexpr int kGemmRows = 4;
constexpr int kGemmCols = 64;

namespace gemm_detail {

struct AStrides {
  std::int64_t row, k;
};

template <int Rows, int Cols>
inline void block(std::int64_t k, const float* a, AStrides as, const float* b, std::int64_t ldb, float* c,
                  std::int64_t ldc, bool accumulate) {
  float acc[Rows][Cols];
  for (int r = 0; r < Rows; ++r)
#pragma omp simd
    for (int j = 0; j < Cols; ++j) acc[r][j] = accumulate ? c[r * ldc + j] : 0.0f;
  for (std::int64_t kk = 0; kk < k; ++kk) {
    const float* brow = b + kk * ldb;
    for (int r = 0; r < Rows; ++r) {
      const float av = a[r * as.row + kk * as.k];
#pragma omp simd
      for (int j = 0; j < Cols; ++j) acc[r][j] += av * brow[j];
    }
  }
  for (int r = 0; r < Rows; ++r)
#pragma omp simd
    for (int j = 0; j < Cols; ++j) c[r * ldc + j] = acc[r][j];
}

// Any shape up to kGemmRows x kGemmCols (the ragged edges).
inline void edge(int rows, int cols, std::int64_t k, const float* a, AStrides as, const float* b,
                 std::int64_t ldb, float* c, std::int64_t ldc, bool accumulate) {
  for (int r = 0; r < rows; ++r) {
    float acc[kGemmCols];
    for (int j = 0; j < cols; ++j) acc[j] = accumulate ? c[r * ldc + j] : 0.0f;
    for (std::int64_t kk = 0; kk < k; ++kk) {
      const float av = a[r * as.row + kk * as.k];
      const float* brow = b + kk * ldb;
#pragma omp simd
      for (int j = 0; j < cols; ++j) acc[j] += av * brow[j];
    }
    for (int j = 0; j < cols; ++j) c[r * ldc + j] = acc[j];
  }
}

}  // namespace gemm_detail

using gemm_detail::AStrides;

// A row-major: a_strides = {lda, 1}. A given as its transpose (At[k x m] row-major): {1, ldat}.
inline void gemm(std::int64_t m, std::int64_t n, std::int64_t k, const float* a, AStrides as, const float* b,
                 std::int64_t ldb, float* c, std::int64_t ldc, bool accumulate) {
  for (std::int64_t j0 = 0; j0 < n; j0 += kGemmCols) {
    const int cols = int(n - j0 < kGemmCols ? n - j0 : kGemmCols);
    std::int64_t i0 = 0;
    if (cols == kGemmCols) {
      for (; i0 + kGemmRows <= m; i0 += kGemmRows)
        gemm_detail::block<kGemmRows, kGemmCols>(k, a + i0 * as.row, as, b + j0, ldb, c + i0 * ldc + j0, ldc,
                                                 accumulate);
    }
    for (; i0 < m; i0 += kGemmRows) {
      const int rows = int(m - i0 < kGemmRows ? m - i0 : kGemmRows);
      gemm_detail::edge(rows, cols, k, a + i0 * as.row, as, b + j0, ldb, c + i0 * ldc + j0, ldc, accumulate);
    }
  }
}

}  // namespace memattn::cpu
