// Toolchain smoke kernels: one small CuTe GEMM per kernel family, C[64 x 64] = A[64 x K] B[64 x K]^T
// in bf16 with fp32 accumulation (the Q K^T shape of attention). They prove that the CUTLASS
// headers travel, compile for the family's target, launch, and compute the right thing.
#pragma once

#include <cstdint>

namespace memattn::smoke {

constexpr int kRows = 64;   // M and N
constexpr int kDepth = 128; // K

// a, b: device bf16 (as raw 16-bit words), row-major [64 x 128]; c: device float [64 x 64].
// Return a cudaError_t value (0 = success).
int gemm_sm80(const std::uint16_t* a, const std::uint16_t* b, float* c);
int gemm_sm90(const std::uint16_t* a, const std::uint16_t* b, float* c);

}  // namespace memattn::smoke
