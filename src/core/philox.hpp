// Philox4x32-10 and the dropout counter mapping (documented in include/memattn/dropout.hpp).
// Shared by the fast CPU path and the CUDA kernels so that both draw the same mask; the float64
// reference carries its own independent implementation to check this one.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define MEMATTN_HD __host__ __device__ __forceinline__
#else
#define MEMATTN_HD inline
#endif

namespace memattn::detail {

struct Philox4 {
  std::uint32_t x, y, z, w;
};

// Philox constants from Salmon et al., "Parallel random numbers: as easy as 1, 2, 3" (SC'11).
constexpr std::uint32_t kPhiloxM0 = 0xD2511F53u;
constexpr std::uint32_t kPhiloxM1 = 0xCD9E8D57u;
constexpr std::uint32_t kPhiloxW0 = 0x9E3779B9u;
constexpr std::uint32_t kPhiloxW1 = 0xBB67AE85u;
constexpr int kPhiloxRounds = 10;

MEMATTN_HD void mul_hi_lo(std::uint32_t a, std::uint32_t b, std::uint32_t& hi, std::uint32_t& lo) {
  const std::uint64_t p = std::uint64_t(a) * b;
  hi = std::uint32_t(p >> 32);
  lo = std::uint32_t(p);
}

MEMATTN_HD Philox4 philox4x32_10(Philox4 c, std::uint32_t k0, std::uint32_t k1) {
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
  for (int round = 0; round < kPhiloxRounds; ++round) {
    std::uint32_t hi0, lo0, hi1, lo1;
    mul_hi_lo(kPhiloxM0, c.x, hi0, lo0);
    mul_hi_lo(kPhiloxM1, c.z, hi1, lo1);
    c = Philox4{hi1 ^ c.y ^ k0, lo1, hi0 ^ c.w ^ k1, lo0};
    k0 += kPhiloxW0;
    k1 += kPhiloxW1;
  }
  return c;
}

// The per-call constants of the dropout mapping: key from the seed, fourth counter word from the
// offset, and the drop threshold.
struct DropoutKey {
  std::uint32_t k0 = 0, k1 = 0, c3 = 0, threshold = 0;
};

// Random words for the four keys 4*(j/4) .. 4*(j/4)+3 of row i in head row bh = b * Hq + h.
MEMATTN_HD Philox4 dropout_words(const DropoutKey& key, std::uint64_t bh, std::int64_t i,
                                 std::int64_t j) {
  return philox4x32_10(
      Philox4{std::uint32_t(std::uint64_t(j) >> 2), std::uint32_t(i), std::uint32_t(bh), key.c3},
      key.k0, key.k1);
}

MEMATTN_HD std::uint32_t philox_word(const Philox4& r, int lane) {
  return lane == 0 ? r.x : lane == 1 ? r.y : lane == 2 ? r.z : r.w;
}

}  // namespace memattn::detail
