// The CPU tiles' matrix product (src/cpu/gemm.hpp): C (+)= A B against a float64 product, for full
// register blocks and ragged edges, A row-major or transposed, with and without accumulation;
// C's padding columns stay untouched.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "cpu/gemm.hpp"
#include "support/seed.hpp"

namespace memattn::cpu {
namespace {

TEST(Gemm, MatchesAFloat64Product) {
  std::mt19937_64 g(testing::next_seed());
  std::normal_distribution<float> normal;
  const float kSentinel = 1234.5f;
  for (const std::int64_t m : {1, 3, 4, 5, 16, 37})
    for (const std::int64_t n : {1, 17, 64, 65, 128, 150})
      for (const std::int64_t k : {1, 8, 33})
        for (const bool transposed : {false, true})
          for (const bool accumulate : {false, true}) {
            SCOPED_TRACE("m " + std::to_string(m) + " n " + std::to_string(n) + " k " + std::to_string(k) +
                         (transposed ? " A transposed" : "") + (accumulate ? " accumulate" : ""));
            // A stored [m x k] with row stride k + 2, or as At [k x m] with row stride m + 1.
            const std::int64_t lda = transposed ? m + 1 : k + 2;
            std::vector<float> a(std::size_t((transposed ? k : m) * lda)), b(std::size_t(k * (n + 5)));
            const std::int64_t ldb = n + 5, ldc = n + 3;
            std::vector<float> c(std::size_t(m * ldc));
            for (float& x : a) x = normal(g);
            for (float& x : b) x = normal(g);
            for (float& x : c) x = normal(g);
            for (std::int64_t r = 0; r < m; ++r)
              for (std::int64_t j = n; j < ldc; ++j) c[std::size_t(r * ldc + j)] = kSentinel;
            const std::vector<float> c0 = c;
            const AStrides as = transposed ? AStrides{1, lda} : AStrides{lda, 1};
            gemm(m, n, k, a.data(), as, b.data(), ldb, c.data(), ldc, accumulate);
            double diff2 = 0, ref2 = 0;
            for (std::int64_t r = 0; r < m; ++r)
              for (std::int64_t j = 0; j < ldc; ++j) {
                const float got = c[std::size_t(r * ldc + j)];
                if (j >= n) {
                  ASSERT_EQ(got, kSentinel) << "padding column " << j << " of row " << r << " written";
                  continue;
                }
                double want = accumulate ? c0[std::size_t(r * ldc + j)] : 0.0;
                for (std::int64_t kk = 0; kk < k; ++kk)
                  want += double(a[std::size_t(r * as.row + kk * as.k)]) * b[std::size_t(kk * ldb + j)];
                diff2 += (got - want) * (got - want);
                ref2 += want * want;
              }
            EXPECT_LE(std::sqrt(diff2 / ref2), 1e-6);
          }
}

// The CPU backward recomputes the forward's scores bit for bit (src/cpu/score_tile.hpp): the
// forward takes S^T = K Q^T (K as A, Q^T as B), the backward S = Q K^T (Q as A, K^T as B). Both must
// sum each dot product's products in the same order with the same roundings, full register blocks
// and ragged edges alike.
TEST(Gemm, TransposedProductIsBitIdentical) {
  std::mt19937_64 g(testing::next_seed());
  std::normal_distribution<float> normal;
  for (const std::int64_t m : {1, 4, 37, 64})
    for (const std::int64_t n : {1, 17, 64, 70})
      for (const std::int64_t k : {1, 33, 96}) {
        SCOPED_TRACE("m " + std::to_string(m) + " n " + std::to_string(n) + " k " + std::to_string(k));
        // Q [m x k] and K [n x k] row-major, and their transposes.
        std::vector<float> q(std::size_t(m * k)), kr(std::size_t(n * k)), qt(q.size()), kt(kr.size());
        for (float& x : q) x = normal(g);
        for (float& x : kr) x = normal(g);
        for (std::int64_t r = 0; r < m; ++r)
          for (std::int64_t kk = 0; kk < k; ++kk) qt[std::size_t(kk * m + r)] = q[std::size_t(r * k + kk)];
        for (std::int64_t c = 0; c < n; ++c)
          for (std::int64_t kk = 0; kk < k; ++kk) kt[std::size_t(kk * n + c)] = kr[std::size_t(c * k + kk)];
        // Poisoned: products left unwritten in both would otherwise compare equal (as zeros).
        std::vector<float> s(std::size_t(m * n), NAN), st(std::size_t(n * m), NAN);
        gemm(m, n, k, q.data(), {k, 1}, kt.data(), n, s.data(), n, false);
        gemm(n, m, k, kr.data(), {k, 1}, qt.data(), m, st.data(), m, false);
        for (std::int64_t r = 0; r < m; ++r)
          for (std::int64_t c = 0; c < n; ++c)
            ASSERT_EQ(s[std::size_t(r * n + c)], st[std::size_t(c * m + r)]) << "score (" << r << ", " << c << ")";
      }
}

}  // namespace
}  // namespace memattn::cpu
